"""``check(layout, dp=..., launch=...)`` and ``Layout.resolve_collectives(rank, impl)``: the
all-gather readers of :mod:`simharness.ag_readers` in the library's answers."""

from __future__ import annotations

import pytest

from simharness import ParallelismConfig, build_layout
from simharness.ag_readers import DPImpl, ag_reader_sentence, memory_case
from simharness.checks import check


def _lay(mcore="0.19", **kw):
    base = dict(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                context_parallel_size=2)
    return build_layout(ParallelismConfig(**{**base, **kw}), mcore)


def codes(findings):
    return {f.code: f for f in findings}


@pytest.mark.parametrize("impl,sharding,ag", [
    ("fsdp", None, "dp_cp_ag"), ("fsdp", "optim", "dp_cp_ag"), ("fsdp", "no_shard", "dp_cp"),
    ("dist-opt", None, "dp_cp"), ("ddp", None, "dp_cp"), ("torch-fsdp2", None, "dp_cp"),
    ("unknown", None, "dp_cp_ag")])
def test_resolve_collectives_takes_the_implementation(impl, sharding, ag):
    c = _lay(create_all_gather_group=True).resolve_collectives(5, impl, sharding)
    assert c.dense_all_gather.kind == ag and c.dense_reduce_scatter.kind == "dp_cp"
    assert c.dense_overlap is (ag == "dp_cp_ag") and c.impl == impl


def test_expert_side_follows_the_table_per_profile():
    on = dict(create_all_gather_group=True, expert_model_parallel_size=2)
    assert _lay(**on).resolve_collectives(0, "fsdp").expert_all_gather.kind == "ep_dp_ag"
    assert _lay(**on).resolve_collectives(0, "dist-opt").expert_all_gather.kind == "ep_dp"
    assert _lay("0.16", **on).resolve_collectives(0, "fsdp").expert_all_gather.kind == "ep_dp"


@pytest.mark.parametrize("impl", ["dist-opt", "ddp", "torch-fsdp2"])
@pytest.mark.parametrize("launch,severity", [("lazy", "info"), ("eager", "warning")])
def test_ag_unread_fires_for_every_implementation_that_does_not_read(impl, launch, severity):
    f = codes(check(_lay(create_all_gather_group=True), dp=DPImpl(impl), launch=launch))
    assert f["ag-unread"].severity == severity
    assert ag_reader_sentence("0.19", impl) in f["ag-unread"].message
    assert memory_case(launch, False) in f["ag-unread"].message
    assert f["ag-unread"].groups == ("dp_cp_ag",)


@pytest.mark.parametrize("dp", [DPImpl(), DPImpl("fsdp"), DPImpl("fsdp", "optim_grads")])
def test_ag_unread_does_not_fire_when_something_may_read(dp):
    for launch in ("lazy", "eager"):
        assert "ag-unread" not in codes(check(_lay(create_all_gather_group=True), dp=dp,
                                              launch=launch))


def test_ag_unread_does_not_fire_with_the_option_off():
    assert "ag-unread" not in codes(check(_lay(), dp=DPImpl("dist-opt"), launch="eager"))


def test_fsdp_no_shard_reads_nothing():
    f = codes(check(_lay(create_all_gather_group=True), dp=DPImpl("fsdp", "no_shard")))
    assert "ag-unread" in f and "'no_shard' gathers no parameters" in f["ag-unread"].message


def test_ag_cost_prices_the_case():
    lay = _lay(create_all_gather_group=True)
    unread = codes(check(lay, dp=DPImpl("dist-opt")))["ag-cost"].message
    assert "that hold no memory" in unread and unread.endswith(memory_case("lazy", False))
    read = codes(check(lay, dp=DPImpl("fsdp")))["ag-cost"].message
    assert "hold no memory" not in read and read.endswith(memory_case("lazy", True))
    eager = codes(check(lay, dp=DPImpl("dist-opt"), launch="eager"))["ag-cost"].message
    assert eager.endswith(memory_case("eager", False))


def test_a_bad_launch_is_refused():
    with pytest.raises(ValueError, match="lazy"):
        check(_lay(), launch="sometimes")
