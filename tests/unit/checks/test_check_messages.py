"""Every finding ``check`` returns, in full, on a catalogue of layouts.

A check that names the wrong ranks, or says "error" where it means "info", fails here.
Each scenario below is a layout (clean, or with one
fault injected into its exported plan, the way a hand-edited plan reaches a user) and
tests/unit/checks/golden/check_findings.json holds every finding ``check`` returns for it: code,
severity, message, ranks and group kinds. The golden file was written by the code and
then read finding by finding against the fault injected (the ranks and counts each
message names are the fault's); it is the text users read, so a change to it is a
reviewed change: ``SIMHARNESS_UPDATE_GOLDEN=1 pytest tests/unit/checks/test_check_messages.py``
rewrites it, and the diff is the review.

A second test makes every kind of four rich layouts the wrong size in turn and expects
``group-size`` to name that kind and the size the configuration needs.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from simharness import Layout, ParallelismConfig, build_layout, check
from simharness.checks import config_differences, expected_sizes, has_errors

GOLDEN = Path(__file__).resolve().parent / "golden" / "check_findings.json"
UPDATE = os.environ.get("SIMHARNESS_UPDATE_GOLDEN") == "1"

W16 = dict(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
           context_parallel_size=2, expert_model_parallel_size=2)


def _cfg(**kw) -> ParallelismConfig:
    return ParallelismConfig(**{**W16, **kw})


def _lay(mcore: str = "0.16", torch_world: int | None = None, **kw) -> Layout:
    return build_layout(_cfg(**kw), mcore, torch_world=torch_world)


def _edit(lay: Layout, fn: Callable[[dict], None]) -> Layout:
    d = lay.to_dict()
    fn(d)
    return Layout.from_dict(d)


def _set(kind: str, groups) -> Callable[[dict], None]:
    def fn(d):
        d["kinds"][kind]["groups"] = [list(g) for g in groups]
    return fn


def _rows(kind: str, rows: dict[int, list[int]]) -> Callable[[dict], None]:
    def fn(d):
        for i, g in rows.items():
            d["kinds"][kind]["groups"][i] = list(g)
    return fn


def _drop(kind: str) -> Callable[[dict], None]:
    def fn(d):
        del d["kinds"][kind]
        for lp in d["creation_order"]["loops"]:
            for s in lp["steps"]:
                s["kinds"] = [k for k in s["kinds"] if k != kind]
    return fn


def _field(kind: str, key: str, value) -> Callable[[dict], None]:
    def fn(d):
        d["kinds"][kind][key] = value
    return fn


def _both(*fns: Callable[[dict], None]) -> Callable[[dict], None]:
    def fn(d):
        for f in fns:
            f(d)
    return fn


def _offset_016() -> Layout:
    cfg = ParallelismConfig.from_megatron(
        world_size=32, mcore="0.16", tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2, context_parallel_size=2, rank_offset=8,
        local_world_size=16, create_all_gather_group=True)
    return build_layout(cfg, "0.16", torch_world=32)


def _offset_after(mcore: str, order: str) -> Layout:
    cfg = ParallelismConfig.from_megatron(
        world_size=32, mcore=mcore, tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2, context_parallel_size=2, expert_model_parallel_size=2,
        expert_tensor_parallel_size=2, order=order, rank_offset=8, local_world_size=16)
    return build_layout(cfg.replace(create_all_gather_group=True), mcore, torch_world=32)


def _big_world_rows() -> Layout:
    lay = build_layout(ParallelismConfig(world_size=64, tensor_model_parallel_size=2), "0.16")
    groups = lay.groups("tp").tolist()
    swapped = [[g[1], g[0]] for g in groups[:20]] + groups[20:]  # 20 rows reordered
    return _edit(lay, _set("tp", swapped))


def _add_row(kind: str, row: list[int]) -> Callable[[dict], None]:
    def fn(d):
        d["kinds"][kind]["groups"].append(list(row))
        d["kinds"][kind]["n_groups"] = len(d["kinds"][kind]["groups"])
    return fn


def _shift_kind(kind: str, by: int) -> Callable[[dict], None]:
    def fn(d):
        d["kinds"][kind]["groups"] = [[r + by for r in g] for g in d["kinds"][kind]["groups"]]
    return fn


def _first_rank_last(d):
    """dp_cp and its AG twin both list their last group starting with the last rank."""
    for kind in ("dp_cp", "dp_cp_gloo", "dp_cp_ag"):
        d["kinds"][kind]["groups"][-1] = d["kinds"][kind]["groups"][-1][::-1]


def _many_ag_rows() -> Layout:
    """65 AG groups of 2: the first 64 reordered (same ranks), the 65th different ranks."""
    lay = build_layout(ParallelismConfig(world_size=130, tensor_model_parallel_size=65,
                                         create_all_gather_group=True), "0.16")
    rows = lay.groups("dp_cp_ag").tolist()
    rows = [r[::-1] for r in rows[:64]] + [[rows[64][0], rows[0][0]]]
    return _edit(lay, _set("dp_cp_ag", rows))


def _offset_lay(**kw) -> Layout:
    """tp2 pp2 cp2 ep2 (0.16) in ranks 8..23 of a torch world of 32."""
    cfg = ParallelismConfig.from_megatron(
        world_size=32, mcore="0.16", tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2, context_parallel_size=2,
        expert_model_parallel_size=2, rank_offset=8, local_world_size=16, **kw)
    return build_layout(cfg, "0.16", torch_world=32)


def _shifted(rows: dict[int, list[int]], by: int) -> dict[int, list[int]]:
    return {i: [r + by for r in g] for i, g in rows.items()}


def _swap_rows(n: int) -> Callable[[dict], None]:
    def fn(d):
        groups = d["kinds"]["tp"]["groups"]
        for g in groups[:n]:
            g.reverse()
    return fn


def _halve_dp_loop(d):
    for lp in d["creation_order"]["loops"]:
        if any("dp" in s["kinds"] for s in lp["steps"]):
            lp["n_iter"] = lp["n_iter"] // 2  # the last dp groups are never created


def _option_off(d):
    d["config"]["create_all_gather_group"] = False


# name -> a thunk building the layout (built lazily: a broken scenario fails alone).
SCENARIOS: dict[str, Callable[[], Layout]] = {
    # clean layouts: the info findings (communicators, ag-cost, ag-off, ...) in full
    "clean-016": lambda: _lay("0.16"),
    "clean-016-ag": lambda: _lay("0.16", create_all_gather_group=True),
    "clean-018-ag": lambda: _lay("0.18", create_all_gather_group=True),
    "clean-019-gtp": lambda: _lay("0.19", gtp_remat_size=2, expert_gtp_remat_size=2),
    "clean-019-ag-egtp": lambda: _lay("0.19", create_all_gather_group=True,
                                      expert_model_parallel_size=1, expert_gtp_remat_size=2),
    "clean-019": lambda: _lay("0.19"),
    "clean-016-instances": lambda: _lay("0.16", create_all_gather_group=True,
                                        num_distributed_optimizer_instances=2),
    "clean-016-hcp": lambda: build_layout(ParallelismConfig(
        world_size=8, context_parallel_size=4, hierarchical_context_parallel_sizes=[2, 2]),
        "0.16"),
    "offset-016-ag": _offset_016,
    "offset-018-ag-aligned": lambda: _offset_after("0.18", "tp-cp-ep-dp-pp"),
    "offset-019-ag-tp-pp-dp": lambda: _offset_after("0.19", "tp-cp-ep-pp-dp"),
    "tp-pp-dp-018-ag": lambda: _lay("0.18", create_all_gather_group=True,
                                    expert_tensor_parallel_size=2, order="tp-cp-ep-pp-dp"),
    # suspicious inputs
    "suspicious-etp-gt-tp": lambda: build_layout(ParallelismConfig(
        world_size=8, tensor_model_parallel_size=2, expert_model_parallel_size=2,
        expert_tensor_parallel_size=4), "0.16"),
    "suspicious-etp-divides-not": lambda: build_layout(ParallelismConfig.unchecked(
        world_size=12, tensor_model_parallel_size=6, expert_tensor_parallel_size=4), "0.16"),
    "suspicious-instances": lambda: build_layout(ParallelismConfig(
        world_size=8, tensor_model_parallel_size=2, context_parallel_size=4,
        num_distributed_optimizer_instances=2),
        "0.16"),
    "suspicious-order-repeat": lambda: build_layout(ParallelismConfig(
        world_size=8, tensor_model_parallel_size=2, order="tp-cp-ep-dp-pp-cp"), "0.16"),
    # injected faults
    "partition-outside-missing-dup": lambda: _edit(_lay(), _rows("tp", {0: [0, 99], 1: [3, 3]})),
    "group-size-cp": lambda: _edit(_lay(), _set("cp", [[r] for r in range(16)])),
    "orthogonality-dp-is-tp": lambda: _edit(_lay(), _set("dp", [[2 * i, 2 * i + 1]
                                                                 for i in range(8)])),
    "composition-and-twin-dp": lambda: _edit(_lay(), _rows("dp", {0: [0, 8], 4: [4, 12]})),
    "gloo-twin-row": lambda: _edit(_lay(), _rows("dp_gloo", {0: [4, 0], 1: [5, 1]})),
    "gloo-twin-shape": lambda: _edit(_lay(), _set("dp_gloo", [[r] for r in range(16)])),
    "matches-config-many-rows": _big_world_rows,
    "matches-config-kind-missing": lambda: _edit(_lay(), _drop("tp_cp")),
    "matches-config-desc-backend": lambda: _edit(_lay(), _both(
        _field("cp", "desc", "CONTEXT_GROUP"), _field("cp", "backend", "gloo"))),
    "creation-order-skips": lambda: _edit(_lay(), _halve_dp_loop),
    "pp-agree-and-embedding": lambda: _edit(_lay(), _rows("pp", {0: [0, 9], 1: [1, 8]})),
    "embedding-missing": lambda: _edit(_lay(), _drop("pos_embd")),
    "embedding-shape": lambda: _edit(_lay(), _set("embd", [[r] for r in range(8)])),
    "embedding-rows": lambda: _edit(_lay(), _rows("embd", {0: [0, 4], 2: [2, 14]})),
    "ag-off-but-groups": lambda: _edit(_lay(create_all_gather_group=True), _option_off),
    "ag-missing": lambda: _edit(_lay(create_all_gather_group=True), _drop("dp_cp_ag")),
    "ag-missing-expert-018": lambda: _edit(_lay("0.18", create_all_gather_group=True),
                                           _drop("ep_dp_ag")),
    "ag-shape": lambda: _edit(_lay(create_all_gather_group=True),
                              _set("dp_cp_ag", [[r] for r in range(16)])),
    "ag-order": lambda: _edit(_lay(create_all_gather_group=True),
                              _rows("dp_cp_ag", {0: [2, 0, 4, 6]})),
    "ag-different-ranks": lambda: _edit(_lay(create_all_gather_group=True),
                                        _rows("dp_cp_ag", {0: [0, 2, 4, 7], 1: [1, 3, 5, 6]})),
    "ag-gloo-backend": lambda: _edit(_lay(create_all_gather_group=True),
                                     _field("dp_cp_ag", "backend", "gloo")),
    # the job's edges: a rank one past the world, groups wholly above or below it
    "partition-rank-one-past": lambda: _edit(_lay(), _rows("tp", {0: [0, 16]})),
    "ag-rank-one-past": lambda: _edit(_lay(create_all_gather_group=True),
                                      _rows("dp_cp_ag", {0: [0, 2, 4, 16]})),
    "ag-above-the-job": lambda: _edit(_lay(create_all_gather_group=True),
                                      _shift_kind("dp_cp_ag", 16)),
    "ag-extra-row-outside": lambda: _edit(_lay(create_all_gather_group=True),
                                          _add_row("dp_cp_ag", [16, 17, 18, 19])),
    "ag-expert-only-outside-018": lambda: _edit(_lay("0.18", create_all_gather_group=True),
                                                _rows("ep_dp_ag", {0: [0, 16]})),
    "ag-window-far-below-018": lambda: build_layout(ParallelismConfig.from_megatron(
        world_size=48, mcore="0.18", tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2, context_parallel_size=2, rank_offset=32,
        local_world_size=16).replace(create_all_gather_group=True), "0.18", torch_world=48),
    "ag-last-rank-first": lambda: _edit(_lay(create_all_gather_group=True), _first_rank_last),
    "ag-shape-2-groups-of-8": lambda: _edit(
        build_layout(ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
                                       context_parallel_size=2, create_all_gather_group=True),
                     "0.16"), _set("dp_cp_ag", [[r] for r in range(16)])),
    "ag-65-rows": _many_ag_rows,
    "partition-over-256-ranks": lambda: _edit(
        build_layout(ParallelismConfig(world_size=1024, tensor_model_parallel_size=2), "0.16"),
        _set("tp", [[0, 1], [2, 3], [4, 5], [6, 7]] * 128)),
    "partition-rank-one-past-twice": lambda: _edit(_lay(), _rows("tp", {0: [0, 16],
                                                                          1: [2, 16]})),
    "partition-two-missing-same-dp": lambda: _edit(_lay(), _rows("tp", {0: [16, 1],
                                                                          2: [17, 5]})),
    "drop-dp-cp-is-tp": lambda: _edit(_lay(), _both(_drop("dp"), _rows("cp", {0: [0, 1],
                                                                               1: [2, 3]}))),
    "dp-outside-cp-split": lambda: _edit(_lay(), _both(_rows("dp", {0: [0, 99]}),
                                                       _rows("cp", {0: [0, 3], 1: [1, 2]}))),
    "drop-mp-split-tp": lambda: _edit(_lay(), _both(_drop("mp"), _rows("tp", {0: [0, 3],
                                                                              1: [2, 1]}))),
    "orthogonality-dp1-is-pp1": lambda: _edit(_lay(), _rows("dp", {1: [1, 9], 5: [5, 13]})),
    "cp-above-the-job": lambda: _edit(_lay(), _shift_kind("cp", 16)),
    "offset-dp-is-tp": lambda: _edit(_offset_lay(), _set("dp", [[8 + 2 * i, 9 + 2 * i]
                                                                for i in range(8)])),
    "offset-partition-dup": lambda: _edit(_offset_lay(), _rows("tp", _shifted({1: [0, 1]}, 8))),
    "matches-config-16-rows": lambda: _edit(build_layout(ParallelismConfig(
        world_size=64, tensor_model_parallel_size=2), "0.16"), _swap_rows(16)),
    "ag-off-extra-kind-and-tp-row": lambda: _edit(_lay(create_all_gather_group=True),
                                                  _both(_option_off, _rows("tp", {7: [15, 14]}))),
    "group-size-cp-and-tp-row": lambda: _edit(_lay(), _both(
        _set("cp", [[r] for r in range(16)]), _rows("tp", {7: [15, 14]}))),
    "embd-missing-pos-embd-wrong": lambda: _edit(_lay(), _both(
        _drop("embd"), _rows("pos_embd", {0: [8], 1: [1]}))),
    "embd-shape-pos-embd-wrong": lambda: _edit(_lay(), _both(
        _set("embd", [[r] for r in range(8)]), _rows("pos_embd", {0: [8]}))),
    "matches-config-rows-desc-and-more": lambda: _edit(_big_world_rows(),
                                                       _field("tp", "desc", "TP_GROUP")),
    "ag-off-65-groups": lambda: _edit(build_layout(ParallelismConfig(
        world_size=130, tensor_model_parallel_size=65, create_all_gather_group=True), "0.16"),
        _option_off),
    "suspicious-order-two-repeats": lambda: build_layout(ParallelismConfig(
        world_size=8, tensor_model_parallel_size=2, order="tp-cp-ep-dp-pp-cp-ep"), "0.16"),
    "warning-before-error": lambda: _edit(_lay(create_all_gather_group=True,
                                               num_distributed_optimizer_instances=2),
                                          _halve_dp_loop),
    "clean-016-hybrid": lambda: build_layout(ParallelismConfig(
        world_size=12, context_parallel_size=2, hybrid_context_parallel=True), "0.16"),
}


def _finding(f) -> dict:
    d = dataclasses.asdict(f)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


def _differences(lay: Layout) -> list[dict]:
    return json.loads(json.dumps(config_differences(lay)))


def _observed() -> dict[str, list[dict]]:
    out = {}
    for name, build in SCENARIOS.items():
        lay = build()
        out[name] = [_finding(f) for f in check(lay)]
        out[f"{name}/config_differences"] = _differences(lay)
    return out


@pytest.fixture(scope="module")
def golden() -> dict:
    if UPDATE:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(_observed(), indent=1) + "\n")
    return json.loads(GOLDEN.read_text())


def test_golden_covers_every_scenario(golden):
    assert sorted(golden) == sorted([*SCENARIOS, *(f"{n}/config_differences" for n in SCENARIOS)])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_findings_are_the_golden_ones(name, golden):
    lay = SCENARIOS[name]()
    assert _differences(lay) == golden[f"{name}/config_differences"], name
    got = [_finding(f) for f in check(lay)]
    want = golden[name]
    assert [(f["code"], f["severity"]) for f in got] == [(f["code"], f["severity"]) for f in want]
    for g, w in zip(got, want, strict=True):
        assert g == w, f"{name}: {g['code']}"


RICH = {
    "016-ep-instances": ("0.16", dict(create_all_gather_group=True,
                                      num_distributed_optimizer_instances=2)),
    "018-ag-ep": ("0.18", dict(create_all_gather_group=True)),
    "019-gtp": ("0.19", dict(world_size=32, gtp_remat_size=2, expert_gtp_remat_size=2)),
    "016-hcp": ("0.16", dict(world_size=8, tensor_model_parallel_size=1,
                             pipeline_model_parallel_size=1, expert_model_parallel_size=1,
                             context_parallel_size=4, hierarchical_context_parallel_sizes=[2, 2])),
    "016-hybrid": ("0.16", dict(world_size=12, tensor_model_parallel_size=1,
                                pipeline_model_parallel_size=1, expert_model_parallel_size=1,
                                context_parallel_size=2, hybrid_context_parallel=True)),
}


@pytest.mark.parametrize("which", list(RICH))
def test_every_kind_of_the_wrong_size_is_named(which):
    mcore, kw = RICH[which]
    lay = _lay(mcore, **kw)
    sizes = expected_sizes(lay)
    assert not [f for f in check(lay) if f.code == "group-size"]
    for kind in lay.kinds:
        a = lay.groups(kind)
        assert sizes[kind] == a.shape[1] and type(sizes[kind]) is int, (kind, sizes[kind])
        wrong = [[int(r)] for r in a.ravel()] if a.shape[1] > 1 else \
            [a.ravel()[i:i + 2].tolist() for i in range(0, a.size - 1, 2)]
        if a.shape[1] == 1 and a.size < 2:
            continue
        found = [f for f in check(_edit(lay, _set(kind, wrong)), only=["group-size"])]
        assert [f.groups for f in found] == [(kind,)], (kind, found)
        assert f"needs {sizes[kind]} " in found[0].message, found[0].message
        assert found[0].severity == "error" and found[0].ranks == tuple(wrong[0])


def test_has_errors_is_true_exactly_with_an_error_finding():
    lay = _lay()
    broken = check(_edit(lay, _rows("tp", {0: [0, 2]})))
    assert has_errors(broken) and not has_errors(check(lay))
    assert not has_errors([f for f in broken if f.severity != "error"])
