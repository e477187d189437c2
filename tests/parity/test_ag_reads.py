"""The groups 0.18+'s ``create_all_gather_groups()`` reads, judged by the real megatron-core
(``rules._ag_reads``).

``rules._ag_reads`` lists, in order, ``(expert, token, getter, exception)`` for each group
Megatron's ``create_all_gather_groups(for_expert_parallelism=ep > 1)`` reads on its rank;
the ``all-gather-job-ranks`` rule reports the first job rank that lacks one. Here, on one
rank of an initialised Megatron (torch's ``fake`` backend, 0.18.2 and 0.19.2):

- the getters are the ones the function's source calls, in its order (the expert ones only
  with ``ep > 1``; 0.19's GTP getters, which cannot fail, left out);
- each getter's size is the size of simharness's Megatron group for ``(expert, token)``
  (sizes chosen so that a wrong side or a wrong GTP prefix changes it);
- with each of Megatron's group globals set to None in turn, ``create_all_gather_groups()``
  raises the exception listed for the first read that then fails.
"""

from __future__ import annotations

import ast
import inspect
import warnings

import pytest
import torch.distributed as dist
from support import megatron_harness as H
from support.paths import ROOT

from simharness import ParallelismConfig
from simharness.profiles import get_profile
from simharness.rules import Facts, _ag_reads, _megatron_grid

WORLD, RANK = 24, 7
# tp2 cp2 pp3 (dp 2); ep2 etp1 (expert dp 4): dense and expert sides differ in tp, ep, dp.
BASE = dict(tensor_model_parallel_size=2, context_parallel_size=2,
            pipeline_model_parallel_size=3)
MOE = dict(BASE, expert_model_parallel_size=2, expert_tensor_parallel_size=1)
CASES = [
    ("0.18", "0.18.2", "dense", BASE),
    ("0.18", "0.18.2", "moe", MOE),
    ("0.19", "0.19.2", "dense", BASE),
    ("0.19", "0.19.2", "moe", MOE),
    ("0.19", "0.19.2", "moe-gtp2", dict(MOE, gtp_remat_size=2)),
    ("0.19", "0.19.2", "moe-egtp2", dict(MOE, expert_gtp_remat_size=2)),
]


def _source_getters(ps) -> tuple[list[str], list[str]]:
    """The getters ``create_all_gather_groups`` calls, in source order: (always, only
    under ``for_expert_parallelism``)."""
    fn = ast.parse(inspect.getsource(ps.create_all_gather_groups)).body[0]
    gated: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and "for_expert_parallelism" in ast.unparse(node.test):
            gated |= {id(n) for b in node.body for n in ast.walk(b)}
    calls = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Name)
                    and (n.func.id == "is_initialized"
                         or (n.func.id.startswith("get_") and n.func.id.endswith("_world_size")))),
                   key=lambda n: (n.lineno, n.col_offset))
    # 0.19's GTP getters read with check_initialized=False and fall back to 1: a missing
    # group cannot stop the function there, so they are no read of _ag_reads.
    calls = [n for n in calls
             if "check_initialized=False" not in inspect.getsource(getattr(ps, n.func.id))]
    return ([n.func.id for n in calls if id(n) not in gated],
            [n.func.id for n in calls if id(n) in gated])


def _read_fails(ps, getter: str) -> bool:
    try:
        return getattr(ps, getter)() in (False, None)
    except AssertionError:
        return True


def _probe(reads, ep: int):
    def probe(ps):
        sizes = {getter: getattr(ps, getter)() for _, _, getter, _ in reads
                 if getter != "is_initialized"}
        dp_ranks = H.group_ranks(ps._DATA_PARALLEL_GROUP)
        groups = {k: v for k, v in vars(ps).items() if isinstance(v, dist.ProcessGroup)}
        raised = {}
        try:  # 0.19 with a GTP size > 1 fails here anyway (ag-generator rule)
            ps.create_all_gather_groups(for_expert_parallelism=ep > 1)
        except ValueError:
            groups = {}
        for name, group in groups.items():
            setattr(ps, name, None)
            try:
                failing = [g for _, _, g, _ in reads if _read_fails(ps, g)]
                try:
                    ps.create_all_gather_groups(for_expert_parallelism=ep > 1)
                    raised[name] = (failing, None)
                except Exception as exc:  # noqa: BLE001 - the type is the result
                    raised[name] = (failing, type(exc).__name__)
            finally:
                setattr(ps, name, group)
        return {"sizes": sizes, "dp": dp_ranks, "raised": raised}  # not a tuple: run_rank
    return probe


@pytest.mark.parametrize("mcore,release,name,kwargs", CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_ag_reads_match_megatron(mcore, release, name, kwargs):
    ps = H.parity_module(ROOT, release)
    cfg = ParallelismConfig.from_megatron(world_size=WORLD, mcore=mcore, **kwargs)
    f = Facts(cfg, get_profile(mcore), WORLD)
    reads = _ag_reads(f)
    getters = [g for _, _, g, _ in reads]
    always, gated = _source_getters(ps)
    assert getters == (always + gated if cfg.ep > 1 else always), (always, gated)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run = H.run_rank(ps, WORLD, RANK, kwargs, mcore=mcore, record=False, getters=False,
                         after_init=_probe(reads, cfg.ep))
    sizes, dp_ranks, raised = run.extra["sizes"], run.extra["dp"], run.extra["raised"]
    for expert, token, getter, _ in reads:
        # Megatron's names: an expert group's getter says so; get_ranks tokens are lowercase
        assert ("expert" in getter) == expert and token == token.lower(), (expert, token, getter)
        grid = _megatron_grid(f, expert)
        if getter == "is_initialized":  # reads _DATA_PARALLEL_GROUP
            row = next(r for r in grid.groups(token).tolist() if RANK in r)
            assert dp_ranks == sorted(row), (expert, token)
        else:
            assert sizes[getter] == grid.group_size(token), (getter, expert, token, sizes)
    checked = 0
    for gname, (failing, error) in raised.items():
        first = next((r for r in reads if r[2] in failing), None)
        if first is None or not first[3]:
            continue  # this group is not read, or what Megatron does next is not modelled
        assert error == first[3], (gname, failing, error, first)
        checked += 1
    if "gtp" not in name:  # 0.19 with a GTP size > 1 fails after the reads (ValueError)
        assert checked >= len([r for r in reads if r[3]]) - 1, raised  # dp: is_initialized
