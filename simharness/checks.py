"""Named checks over a layout: ``check(layout) -> list[Finding]``.

Each check is vectorised over the world (numpy arrays, no Python object per
group) and reports a :class:`~simharness.findings.Finding` that names the
groups and ranks concerned. The checks, by code:

``partition``        every kind except ``embd``/``pos_embd`` puts each rank in exactly one group
``group-size``       group sizes match the configuration (tp, dp*cp, etp*ep*pp, ...)
``orthogonality``    a TP and a DP group (etc.) share at most one rank
``composition``      composite groups (mp = tp x pp, dp_cp = dp x cp, ...) are unions of their parts
``gloo-twin``        each Gloo twin holds the same groups as its NCCL group
``matches-config``   the groups equal what the configuration builds (catches edited plans)
``pp-agree``         dense and expert pipeline groups agree
``embedding``        embedding groups hold the first and last stage, position-embedding the first
``ag-mismatch``      each AG group equals its DP-with-CP group rank for rank (and expert AG /
                     expert DP)
``ag-communicator``  the AG group is its own NCCL communicator
``ag-missing``       the option is on but no AG group exists
``ag-off``           the option is off: no AG group; names what that means for the data-parallel
                     implementation (only Megatron-FSDP's all-gather then serialises)
``ag-unread``        the option is on but nothing in the data-parallel implementation reads the
                     AG group (warning when communicators are created eagerly: memory for
                     nothing; info when at first use: no memory, no effect)
``ag-cost``          communicators the option adds per rank, and which memory case is priced
``ag-scope``         with several optimizer instances, AG spans dp*cp, the partial DP group less
``ag-expert-none``   0.16 (0.16-0.17) has no expert AG group: expert all-gathers serialise
``ag-window``        0.18+: AG groups reach outside the job's ranks (rank_offset > 0)
``creation-order``   the sequence seen by sampled ranks equals the global one
``suspicious-*``     inputs Megatron accepts but that look wrong (warnings)
``sequence-parallel-off`` sequence_parallel with tp 1: NeMo switches it off (info: NeMo's own
                     Mixtral 8x7B recipe does this)
``communicators``    communicators per rank (info)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .ag_readers import (
    AG_PROFILES,
    UNKNOWN,
    DPImpl,
    memory_case,
    memory_paid,
    no_effect_words,
    option_off_sentence,
)
from .errors import GroupNotInitialized
from .findings import Finding
from .layout import LEAN_WORLD, PARTIAL_KINDS, Layout
from .rules import repeated_tokens

MAX_RANKS = 256  # ranks listed in one finding
MAX_SHOWN = 4  # groups quoted in one message


def _ranks(values: Iterable[int]) -> tuple[int, ...]:
    out = []
    for v in values:
        out.append(int(v))
        if len(out) >= MAX_RANKS:
            break
    return tuple(out)


def _fmt_groups(rows: np.ndarray) -> str:
    shown = [str(r.tolist()) for r in rows[:MAX_SHOWN]]
    more = f" and {len(rows) - MAX_SHOWN} more" if len(rows) > MAX_SHOWN else ""
    return ", ".join(shown) + more


INVERSE_CACHE = 4  # inverse indexes kept at once in a lean check
CHUNK_CELLS = 1 << 22  # rank cells handled per step when a lean check scans a kind


class _World:
    """Inverse indexes (rank -> group number) computed once per kind, and the groups.

    A *lean* world (``world_size >= LEAN_WORLD``) builds each kind's groups when a
    check asks and drops them after (:meth:`GroupSource.fresh`), keeps at most
    :data:`INVERSE_CACHE` inverse indexes, stored as int32 where the group count
    allows, and fills them in row chunks: the peak memory is a few world-sized
    arrays instead of one per kind. The findings are the same either way.
    """

    def __init__(self, layout: Layout, *, lean: bool | None = None,
                 dp: DPImpl = UNKNOWN, launch: str = "lazy"):
        self.layout = layout
        self.dp, self.launch = dp, launch
        self.W = layout.world_size
        self.off = layout.rank_offset
        self.lean = self.W >= LEAN_WORLD if lean is None else lean
        self._inv: dict[str, np.ndarray] = {}

    def groups(self, kind: str) -> np.ndarray:
        """``layout.groups(kind)``; in a lean world a transient array nothing else keeps."""
        if self.lean:
            return self.layout.source(kind).fresh()
        return self.layout.groups(kind)

    def inverse(self, kind: str) -> np.ndarray:
        """``inv[r - offset]`` = group number of rank r in ``kind`` (-1 when none)."""
        inv = self._inv.get(kind)
        if inv is None:
            if self.lean:
                inv = self._lean_inverse(kind)
                while len(self._inv) >= INVERSE_CACHE:
                    self._inv.pop(next(iter(self._inv)))
            else:
                a = self.layout.groups(kind)
                inv = np.full(self.W, -1, dtype=np.int64)
                flat = a.ravel() - self.off
                ok = (flat >= 0) & (flat < self.W)
                inv[flat[ok]] = np.repeat(np.arange(a.shape[0]), a.shape[1])[ok]
            self._inv[kind] = inv
        return inv

    def _lean_inverse(self, kind: str) -> np.ndarray:
        a = self.groups(kind)
        dtype = np.int32 if a.shape[0] < np.iinfo(np.int32).max else np.int64
        inv = np.full(self.W, -1, dtype=dtype)
        step = max(1, CHUNK_CELLS // max(1, a.shape[1]))
        for g0 in range(0, a.shape[0], step):  # row order: a later group wins, as above
            rows = a[g0:g0 + step] - self.off
            ok = (rows >= 0) & (rows < self.W)
            gid = np.broadcast_to(np.arange(g0, g0 + rows.shape[0], dtype=dtype)[:, None],
                                  rows.shape)
            inv[rows[ok]] = gid[ok]
        return inv


def expected_sizes(layout: Layout) -> dict[str, int]:
    """Group size each kind must have, from the configuration alone."""
    c = layout.config
    gtp_axis = layout.profile.gtp_axis
    gtp = c.gtp_remat_size if gtp_axis else 1
    egtp = c.expert_gtp_remat_size if gtp_axis else 1
    n = c.num_distributed_optimizer_instances
    sizes = {
        "gtp_remat": gtp, "dp_cp": c.dp * c.cp, "dp_cp_ag": c.dp * c.cp,
        "intra_dp_cp": c.dp * c.cp // n, "dp": c.dp, "cp": c.cp,
        "gtp_remat_dp": gtp * c.dp, "gtp_remat_dp_cp": gtp * c.dp * c.cp,
        "mp": c.tp * gtp * c.pp, "tp": c.tp, "pp": c.pp, "embd": min(2, c.pp), "pos_embd": 1,
        "tp_dp_cp": c.tp * gtp * c.dp * c.cp, "tp_dp": c.tp * gtp * c.dp, "tp_cp": c.tp * c.cp,
        "expt_gtp_remat": egtp, "ep": c.ep, "ep_tp": c.etp, "tp_ep_mp": c.etp * c.ep,
        "tp_ep_pp": c.etp * c.ep * c.pp, "tp_ep_egtp_pp": c.etp * c.ep * egtp * c.pp,
        "ep_dp": c.edp, "ep_dp_ag": c.edp, "intra_ep_dp": c.edp // n, "inter_ep_dp": n,
        "ep_gtp_remat_dp": egtp * c.edp,
        "intra_dist_opt": c.world_size_resolved if gtp * egtp > 1 else c.world_size_resolved // n,
    }
    for i, s in enumerate(c.hierarchical_context_parallel_sizes or ()):
        sizes[f"hcp_l{i}"] = s
    for k in layout.kinds:
        if k.startswith("hybrid_dp_cp_"):
            sizes[k] = int(k.rsplit("_", 1)[1])
    for k in list(sizes):
        sizes[f"{k}_gloo"] = sizes[k]
    return sizes


# (composite, parts): the composite's groups are unions of the parts' groups.
COMPOSITES = (
    ("dp_cp", ("dp", "cp", "intra_dp_cp")), ("ep_dp", ("intra_ep_dp", "inter_ep_dp")),
    ("mp", ("tp", "pp")), ("tp_dp", ("tp", "dp")),
    ("tp_cp", ("tp", "cp")), ("tp_dp_cp", ("tp", "dp", "cp", "dp_cp", "tp_dp", "tp_cp")),
    ("tp_ep_mp", ("ep_tp", "ep")), ("tp_ep_pp", ("ep_tp", "ep", "tp_ep_mp")),
    ("intra_dist_opt", ("tp_ep_pp",)), ("cp", ("hcp_l0", "hcp_l1", "hcp_l2", "hcp_l3")),
)
ORTHOGONAL = (
    ("tp", "dp"), ("tp", "cp"), ("tp", "pp"), ("dp", "cp"), ("dp", "pp"), ("cp", "pp"),
    ("dp_cp", "tp"), ("dp_cp", "pp"), ("ep_tp", "ep"), ("ep_tp", "ep_dp"), ("ep", "ep_dp"),
    ("ep_dp", "pp"), ("intra_ep_dp", "inter_ep_dp"),
)


def check_partition(w: _World) -> list[Finding]:
    out = []
    lay = w.layout
    for kind in lay.kinds:
        if kind in PARTIAL_KINDS:
            continue
        a = w.groups(kind)
        if w.lean and a.size and a.min() >= w.off and a.max() < w.off + w.W:
            # In the world: one bincount, no world-sized copies; a partition needs no more.
            counts = np.bincount((a if w.off == 0 else a - w.off).ravel(), minlength=w.W)
            if counts.size == w.W and not (counts != 1).any():
                continue
            del counts
        flat = a.ravel() - w.off
        outside = flat[(flat < 0) | (flat >= w.W)] + w.off
        inside = flat[(flat >= 0) & (flat < w.W)]
        counts = np.bincount(inside, minlength=w.W)
        missing = np.flatnonzero(counts == 0) + w.off
        dup = np.flatnonzero(counts > 1) + w.off
        problems = []
        if outside.size:
            problems.append(f"{outside.size} rank(s) outside the world "
                            f"{w.off}..{w.off + w.W - 1} (e.g. {outside[:5].tolist()})")
        if missing.size:
            problems.append(f"{missing.size} rank(s) in no group (e.g. {missing[:5].tolist()})")
        if dup.size:
            problems.append(f"{dup.size} rank(s) in several groups (e.g. {dup[:5].tolist()})")
        if problems:
            bad = np.concatenate([outside, missing, dup])
            out.append(Finding("partition", "error",
                               f"{kind} ({lay.desc(kind)}) does not partition the world: "
                               + "; ".join(problems), _ranks(bad), (kind,)))
    return out


def check_sizes(w: _World) -> list[Finding]:
    out = []
    exp = expected_sizes(w.layout)
    for kind in w.layout.kinds:
        a = w.groups(kind)
        want = exp.get(kind)
        if want is not None and a.shape[1] != want:
            out.append(Finding("group-size", "error",
                               f"{kind} groups have {a.shape[1]} ranks, the configuration "
                               f"needs {want} (first: {_fmt_groups(a[:1])})",
                               _ranks(a[0]), (kind,)))
    return out


def check_orthogonality(w: _World) -> list[Finding]:
    out = []
    lay = w.layout
    for a, b in ORTHOGONAL:
        if not (lay.has(a) and lay.has(b)):
            continue
        ia, ib = w.inverse(a), w.inverse(b)
        if w.lean and _lean_orthogonal(ia, ib):
            continue
        ia, ib = ia.astype(np.int64, copy=False), ib.astype(np.int64, copy=False)
        ok = (ia >= 0) & (ib >= 0)
        key = ia[ok] * (ib.max() + 1) + ib[ok]
        uniq, first, counts = np.unique(key, return_index=True, return_counts=True)
        if counts.max(initial=1) > 1:
            bad_keys = uniq[counts > 1]
            ranks = np.flatnonzero(ok)[np.isin(key, bad_keys)] + w.off
            k0 = bad_keys[0]
            ga, gb = divmod(int(k0), int(ib.max() + 1))
            out.append(Finding(
                "orthogonality", "error",
                f"{a} group {lay.groups(a)[ga].tolist()} and {b} group {lay.groups(b)[gb].tolist()}"
                f" share more than one rank ({len(bad_keys)} such pair(s)); any {a} group and any "
                f"{b} group must meet in at most one rank", _ranks(ranks), (a, b)))
    return out


def _lean_orthogonal(ia: np.ndarray, ib: np.ndarray) -> bool:
    """True when no (a group, b group) pair holds two ranks: one sorted key array, no
    ``np.unique`` (False: let the full computation name the pairs)."""
    if (ia < 0).any() or (ib < 0).any():
        return False
    key = ia.astype(np.int64) * (int(ib.max()) + 1)
    key += ib
    key.sort()
    return not (key[1:] == key[:-1]).any()


def check_composition(w: _World) -> list[Finding]:
    out = []
    lay = w.layout
    for comp, parts in COMPOSITES:
        if not lay.has(comp):
            continue
        inv = w.inverse(comp)
        for part in parts:
            if not lay.has(part):
                continue
            pa = w.groups(part)
            pa = pa if w.off == 0 else pa - w.off
            if pa.size and (pa.min() < 0 or pa.max() >= w.W):
                continue  # reported by partition
            g = inv[pa]
            del pa
            bad = np.flatnonzero((g != g[:, :1]).any(axis=1))
            del g
            if bad.size:
                out.append(Finding(
                    "composition", "error",
                    f"{part} group(s) {_fmt_groups(lay.groups(part)[bad])} are split across "
                    f"several {comp} groups; each {comp} group must be a union of whole {part} "
                    f"groups", _ranks(lay.groups(part)[bad].ravel()), (comp, part)))
    return out


def check_twins(w: _World) -> list[Finding]:
    """Each Gloo twin (``X_gloo``) must hold exactly the groups of ``X``."""
    lay = w.layout
    out = []
    for kind in lay.kinds:
        if not kind.endswith("_gloo") or not lay.has(kind[:-5]):
            continue
        a, b = w.groups(kind), w.groups(kind[:-5])
        if a.shape != b.shape or not np.array_equal(a, b):
            rows = (np.flatnonzero((a != b).any(axis=1)) if a.shape == b.shape
                    else np.arange(min(len(a), len(b))))
            out.append(Finding("gloo-twin", "error",
                               f"{kind} groups {_fmt_groups(a[rows])} differ from their NCCL "
                               f"twin {kind[:-5]} {_fmt_groups(b[rows])}",
                               _ranks(np.concatenate([a[rows].ravel(), b[rows].ravel()])),
                               (kind, kind[:-5])))
    return out


MAX_DIFFS_PER_KIND = 16


def _row_diff(kind: str, desc: str, g: int, plan_row: list[int], cfg_row: list[int],
              ref: Layout) -> dict[str, Any]:
    extra = sorted(set(plan_row) - set(cfg_row))
    missing = sorted(set(cfg_row) - set(plan_row))
    notes = []
    for r in extra:
        m = ref.membership(kind, r) if r in ref.ranks else None
        notes.append(f"rank {r} belongs in {f'group {m.group}' if m is not None else 'no group'}")
    notes.extend(f"rank {r} is missing" for r in missing)
    if not extra and not missing:
        notes.append("same ranks in a different order")
    return {"check": "plan_vs_config", "kind": kind, "desc": desc, "group": g,
            "plan": plan_row, "config": cfg_row, "extra": extra, "missing": missing,
            "ranks": sorted(set(extra) | set(missing)) or plan_row,
            "message": f"{kind} group {g} ({desc}): plan {plan_row}, the config builds "
                       f"{cfg_row}: " + ", ".join(notes) + "."}


def config_differences(layout: Layout, ref: Layout | None = None, *,
                       lean: bool = False) -> list[dict[str, Any]]:
    """Every way ``layout`` differs from ``build_layout(layout.config, layout.mcore)``.

    Each difference is a dict with ``kind``, ``desc``, ``ranks`` and ``message``;
    differing groups also carry ``group``, ``plan``, ``config``, ``extra`` and
    ``missing`` (at most :data:`MAX_DIFFS_PER_KIND` per kind, then one summary).
    A corrupted plan whose every rank agrees with the others builds fine in
    torch; only this comparison catches it. ``lean``: build each kind's arrays for the
    comparison and drop them (huge worlds), same result.
    """
    from .layout import build_layout
    from .profiles import build_loops

    if ref is None:  # a built layout's config is validated for its profile already
        ref = (Layout(layout.config, layout.mcore, build_loops(layout.config, layout.mcore))
               if layout.built else build_layout(layout.config, layout.mcore))
    diffs: list[dict[str, Any]] = []

    def note(kind, desc, message):
        diffs.append({"check": "plan_vs_config", "kind": kind, "desc": desc, "ranks": [],
                      "message": message})

    for kind in sorted(set(ref.kinds) - set(layout.kinds)):
        note(kind, ref.desc(kind), f"the config builds {kind} ({ref.desc(kind)}) but the plan "
                                   f"has no such groups.")
    for kind in sorted(set(layout.kinds) - set(ref.kinds)):
        note(kind, layout.desc(kind), f"the plan has {kind} ({layout.desc(kind)}) but the "
                                      f"config builds no such groups.")
    for kind in layout.kinds:
        if kind not in ref.kinds:
            continue
        desc = layout.desc(kind)
        if desc != ref.desc(kind) or layout.backend(kind) != ref.backend(kind):
            note(kind, desc, f"{kind}: plan says {desc}/{layout.backend(kind)}, the config "
                             f"builds {ref.desc(kind)}/{ref.backend(kind)}.")
        if lean:
            a, b = layout.source(kind).fresh(), ref.source(kind).fresh()
        else:
            a, b = layout.groups(kind), ref.groups(kind)
        if a.shape != b.shape:
            note(kind, desc, f"{kind} ({desc}): plan has {a.shape[0]} groups of "
                             f"{a.shape[1] if a.ndim == 2 else '?'}, the config builds "
                             f"{b.shape[0]} groups of {b.shape[1]}.")
            continue
        rows = np.flatnonzero((a != b).any(axis=1)) if a.size else np.array([], dtype=int)
        for g in rows[:MAX_DIFFS_PER_KIND].tolist():
            diffs.append(_row_diff(kind, desc, g, a[g].tolist(), b[g].tolist(), ref))
        if rows.size > MAX_DIFFS_PER_KIND:
            note(kind, desc, f"{kind}: {rows.size - MAX_DIFFS_PER_KIND} more groups differ.")
    plan_loops = layout.to_dict(groups=False)["creation_order"]
    ref_loops = ref.to_dict(groups=False)["creation_order"]
    if plan_loops != ref_loops:
        note(None, None, f"the plan's creation order ({plan_loops['length']} new_group calls) "
                         f"differs from the config's ({ref_loops['length']}).")
    return diffs


def check_matches_config(w: _World) -> list[Finding]:
    """Compare with a fresh build from the configuration (catches hand-edited plans)."""
    by_kind: dict[Any, list[dict[str, Any]]] = {}
    for d in config_differences(w.layout, lean=w.lean):
        by_kind.setdefault(d["kind"], []).append(d)
    out = []
    for kind, diffs in by_kind.items():
        rows = [d for d in diffs if "group" in d]
        other = [d["message"] for d in diffs if "group" not in d]
        groups = (kind,) if kind else ()
        if rows:
            shown = "; ".join(f"group {d['group']}: {d['plan']} should be {d['config']}"
                              for d in rows[:MAX_SHOWN])
            more = f" and {len(rows) - MAX_SHOWN} more" if len(rows) > MAX_SHOWN else ""
            ranks = sorted({r for d in rows for r in d["ranks"]})
            out.append(Finding("matches-config", "error",
                               f"{kind} ({rows[0]['desc']}): group(s) differ from what the "
                               f"configuration builds: {shown}{more}"
                               + "".join(f" {m}" for m in other), _ranks(ranks), groups))
        else:
            out.extend(Finding("matches-config", "error", m.rstrip("."), (), groups)
                       for m in other)
    return out


def check_pp_agree(w: _World) -> list[Finding]:
    lay = w.layout
    if not lay.has("pp"):
        return []
    expert = lay.config.expert_grid(gtp_token=lay.profile.gtp_axis).groups("pp",
                                                                         cache=not w.lean)
    dense = w.groups("pp")
    if dense.shape == expert.shape and np.array_equal(dense, expert):
        return []
    return [Finding("pp-agree", "error",
                    f"dense pipeline groups {_fmt_groups(dense)} differ from the expert "
                    f"generator's {_fmt_groups(expert)}", _ranks(dense.ravel()), ("pp",))]


def check_embedding(w: _World) -> list[Finding]:
    lay = w.layout
    out: list[Finding] = []
    if not lay.has("pp"):
        return out
    pp = w.groups("pp")
    want = {"embd": pp[:, [0, -1]] if pp.shape[1] > 1 else pp[:, [0]], "pos_embd": pp[:, [0]]}
    for kind, exp in want.items():
        if not lay.has(kind):
            out.append(Finding("embedding", "error", f"no {kind} groups", (), (kind,)))
            continue
        got = w.groups(kind)
        if got.shape != exp.shape:
            out.append(Finding("embedding", "error",
                               f"{kind} groups have {got.shape[1]} ranks, expected "
                               f"{exp.shape[1]} (first and last stage)", (), (kind,)))
            continue
        rows = np.flatnonzero((got != exp).any(axis=1))
        if rows.size:
            out.append(Finding("embedding", "error",
                               f"{kind} group(s) {_fmt_groups(got[rows])} do not hold the "
                               f"{'first and last' if kind == 'embd' else 'first'} stage of "
                               f"their pipeline (expected {_fmt_groups(exp[rows])})",
                               _ranks(got[rows].ravel()), (kind, "pp")))
    return out


def _compare_ag(w: _World, ag: str, base: str, cause: str) -> list[Finding]:
    lay = w.layout
    a, b = w.groups(ag), w.groups(base)
    out = []
    if a.shape != b.shape:
        return [Finding("ag-mismatch", "error",
                        f"{ag}: {a.shape[0]} groups of {a.shape[1]} but {base} has "
                        f"{b.shape[0]} of {b.shape[1]}{cause}", (), (ag, base))]
    # Per rank: the AG group a rank is in must be its own base group, same order.
    # Row-wise, O(world): AG row i must equal the base row holding its first rank
    # (if it does, every member's base group is that row too).
    inv_b = w.inverse(base)
    first = a[:, 0] - w.off
    in_world = (first >= 0) & (first < w.W)
    j = np.where(in_world, inv_b[np.clip(first, 0, w.W - 1)], -1)
    differ = (j < 0) | (a != b[np.maximum(j, 0)]).any(axis=1)
    if differ.any():
        rows = np.flatnonzero(differ)
        bad = np.unique(a[rows].ravel())
        i0 = int(rows[0])
        base_row = b[j[i0]] if j[i0] >= 0 else np.array([], dtype=np.int64)
        same_set = all(j[i] >= 0 and np.array_equal(np.sort(a[i]), np.sort(b[j[i]]))
                       for i in rows[:64])
        detail = (f"rank {int(a[i0, 0])} is in {ag} group {a[i0].tolist()} but its {base} "
                  f"group is {base_row.tolist()}")
        what = "same ranks in a different order" if same_set else "different ranks"
        out.append(Finding("ag-mismatch", "error",
                           f"{ag} ({lay.desc(ag)}) does not line up with {base} "
                           f"({lay.desc(base)}): {rows.size} of {a.shape[0]} {ag} groups, "
                           f"{bad.size} of {w.W} ranks ({what}): {detail}{cause}",
                           _ranks(bad), (ag, base)))
    return out


def _in_window(w: _World, ranks: np.ndarray) -> np.ndarray:
    """The entries of ``ranks`` that belong to the job (``offset <= r < offset + W``)."""
    return ranks[(ranks >= w.off) & (ranks < w.off + w.W)]


def _ag_window(w: _World, ag_kinds: list[str]) -> list[Finding]:
    """AG groups that reach outside the job's ranks (0.18+: offset 0 hard-coded).

    Megatron creates them anyway (every rank is in the torch world), so nothing
    raises: a job rank outside ``0..W-1`` gets no AG group (``create_all_gather_groups``
    returns None on it), and the others share AG groups with ranks of another job.
    """
    out = []
    for kind in ag_kinds:
        a = w.groups(kind)
        outside = ((a < w.off) | (a >= w.off + w.W)).any(axis=1)
        if not outside.any():
            continue
        covered = np.zeros(w.W, dtype=bool)
        covered[_in_window(w, a.ravel()) - w.off] = True
        orphans = np.flatnonzero(~covered) + w.off
        lo, hi = int(a.min()), int(a.max())
        out.append(Finding(
            "ag-window", "error",
            f"{kind} ({w.layout.desc(kind)}): create_all_gather_groups() builds its groups on "
            f"ranks {lo}..{hi} (it hard-codes rank_offset 0), but this job's ranks are "
            f"{w.off}..{w.off + w.W - 1}: {int(outside.sum())} of {a.shape[0]} AG groups hold "
            f"ranks outside the job (e.g. {_fmt_groups(a[outside])}); {orphans.size} job "
            f"rank(s) get no AG group (Megatron returns None there) and the rest would "
            f"all-gather with ranks of another job. Megatron raises nothing; use rank_offset 0 "
            f"with the option, or mcore 0.16/0.17 (Megatron-LM issue #4261)",
            _ranks(orphans if orphans.size else np.unique(a[outside])), (kind,)))
    return out


def _ag_option_off(w: _World, ag_kinds: list[str]) -> list[Finding]:
    """The option is off: no AG group may exist, the all-gather resolves to DP-with-CP, and
    what that means for the data-parallel implementation (``ag-off``)."""
    lay = w.layout
    out: list[Finding] = []
    if ag_kinds:
        out.append(Finding("ag-off", "error",
                           f"create_all_gather_group is off but the layout has {ag_kinds}",
                           (), tuple(ag_kinds)))
    # The all-gather must resolve to DP-with-CP itself (one rank checked per group).
    bad = []
    for g in w.groups("dp_cp")[:64, 0]:
        col = lay.resolve_collectives(int(g))
        if col.dense_all_gather != col.dense_reduce_scatter or col.dense_overlap:
            bad.append(int(g))
    if bad:
        out.append(Finding("ag-off", "error",
                           "option off but the all-gather resolves to a group other than "
                           "the reduce-scatter's", _ranks(bad), ("dp_cp",)))
    else:
        out.append(Finding("ag-off", "info", option_off_sentence(_ag_profile(lay), w.dp),
                           (), ("dp_cp",)))
    return out


def check_all_gather(w: _World) -> list[Finding]:
    lay = w.layout
    c = lay.config
    prof = lay.profile
    out: list[Finding] = []
    ag_kinds = [k for k in ("dp_cp_ag", "ep_dp_ag") if lay.has(k)]
    cause = ""
    if prof.ag_after_init and (c.order_resolved.lower() != "tp-cp-ep-dp-pp" or c.rank_offset):
        cause = (f"; cause: megatron-core 0.18+ create_all_gather_groups() rebuilds its generator "
                 f"with the hard-coded order 'tp-cp-ep-dp-pp' and rank_offset 0, but this job "
                 f"uses order {c.order!r} and rank_offset {c.rank_offset} (Megatron-LM issue "
                 f"#4261); until the fix lands, use order 'tp-cp-ep-dp-pp' "
                 f"(use_tp_pp_dp_mapping=False) with the option, or mcore 0.16/0.17")
    if not c.create_all_gather_group:
        return _ag_option_off(w, ag_kinds)
    # Option on.
    expect = ["dp_cp_ag"] + (["ep_dp_ag"] if prof.expert_all_gather and c.ep > 1 else [])
    missing = [k for k in expect if not lay.has(k)]
    if missing:
        out.append(Finding("ag-missing", "error",
                           f"create_all_gather_group is on but {missing} were not created",
                           (), tuple(missing)))
    out += _ag_window(w, ag_kinds)
    if lay.has("dp_cp_ag"):
        out += _compare_ag(w, "dp_cp_ag", "dp_cp", cause)
    if lay.has("ep_dp_ag"):
        out += _compare_ag(w, "ep_dp_ag", "ep_dp", cause)
    for k in ag_kinds:
        e = lay.entry(k)
        if e.backend == "gloo":
            out.append(Finding("ag-communicator", "error",
                               f"{k} is not a separate NCCL communicator (backend {e.backend})",
                               (), (k,)))
    if not prof.expert_all_gather and c.ep > 1:
        out.append(Finding("ag-expert-none", "info",
                           "megatron-core 0.16/0.17 create no expert AG group: expert "
                           "parameters all-gather on EXPERT_DATA_PARALLEL_GROUP, serialised with "
                           "their reduce-scatter", (), ("ep_dp",)))
    if c.num_distributed_optimizer_instances > 1 and lay.has("dp_cp_ag"):
        out.append(Finding("ag-scope", "warning",
                           f"with {c.num_distributed_optimizer_instances} distributed-optimizer "
                           f"instances the reduce-scatter runs on the partial groups of "
                           f"{c.intra_partial_data_parallel_size} ranks, but the AG groups span "
                           f"the full DP-with-CP group of {c.dp * c.cp}: the two do not line up",
                           (), ("dp_cp_ag", "intra_dp_cp")))
    unread = _ag_unread(w, ag_kinds)
    if unread is not None:
        out.append(unread)
    if ag_kinds:
        out.append(_ag_cost(w, ag_kinds))
    return out


def _ag_profile(lay: Layout) -> str:
    return lay.mcore if lay.mcore in AG_PROFILES else "0.19"


def _ag_read(w: _World, ag_kinds: list[str]) -> bool | None:
    """Whether the implementation runs a collective on any of ``ag_kinds`` (None: unknown)."""
    profile = _ag_profile(w.layout)
    reads = [w.dp.reads(profile, expert=(k == "ep_dp_ag")) for k in ag_kinds]
    if any(r is None for r in reads):
        return None
    return any(reads)


def _ag_unread(w: _World, ag_kinds: list[str]) -> Finding | None:
    """The option is on and nothing in the known implementation reads its groups.

    Severity follows the cost: with communicators created eagerly the groups hold GPU
    memory for nothing (warning, fails ``--strict``); created at first use they cost a
    ``new_group`` call and no memory (info)."""
    if not ag_kinds or _ag_read(w, ag_kinds) is not False:
        return None
    profile = _ag_profile(w.layout)
    eager = w.launch == "eager"
    return Finding(
        "ag-unread", "warning" if eager else "info",
        f"create_all_gather_group is on: {no_effect_words(w.dp)}: {w.dp.sentence(profile)}"
        + (": memory for nothing" if eager else "")
        + f"; {memory_case(w.launch, False)}; turn the option off", (), tuple(ag_kinds))


def _ag_cost(w: _World, ag_kinds: list[str]) -> Finding:
    per_rank, groups_total = {}, 0
    for k in ag_kinds:
        a = w.groups(k)
        per_rank[k] = int(np.bincount(_in_window(w, a.ravel()) - w.off, minlength=w.W).max())
        groups_total += a.shape[0]
    added = sum(per_rank.values())
    read = _ag_read(w, ag_kinds)
    paid = "" if memory_paid(w.launch, read) else " that hold no memory"
    return Finding("ag-cost", "info",
                   f"create_all_gather_group adds {added} NCCL communicator(s){paid} per rank "
                   f"({', '.join(f'{k}: {v}' for k, v in per_rank.items())}), "
                   f"{groups_total} new_group call(s) in all; {memory_case(w.launch, read)}",
                   (), tuple(ag_kinds))


def check_creation_order(w: _World, samples: int = 4, max_calls: int = 20000) -> list[Finding]:
    """For a few ranks, the groups they are in, walked in creation order, must be
    exactly their per-rank view (two independent code paths must agree)."""
    lay = w.layout
    if len(lay.creation_order) > max_calls:
        return []
    ranks = sorted({lay.ranks[0], lay.ranks[-1], lay.ranks[len(lay.ranks) // 2]})[:samples]
    seen: dict[int, list[tuple[str, tuple[int, ...]]]] = {r: [] for r in ranks}
    for gc in lay.creation_order:
        for r in ranks:
            if r in gc.ranks:
                seen[r].append((gc.kind, gc.ranks))
    out = []
    for r in ranks:
        try:
            view = lay.rank(r)
        except GroupNotInitialized as exc:  # an edited or imported layout left r out
            out.append(Finding("creation-order", "error",
                               f"rank {r}: its per-rank view cannot be built ({exc})", (r,)))
            continue
        expect = [(k, tuple(int(x) for x in m.ranks)) for k, m in view.groups.items()]
        if sorted(seen[r]) != sorted(expect) or len(seen[r]) != len(expect):
            out.append(Finding("creation-order", "error",
                               f"rank {r}: the groups it joins in the creation sequence differ "
                               f"from its per-rank view", (r,)))
        kinds = [k for k, _ in seen[r]]
        if len(set(kinds)) != len(kinds):
            out.append(Finding("creation-order", "error",
                               f"rank {r} joins two groups of the same kind", (r,)))
    return out


def check_suspicious(w: _World) -> list[Finding]:
    c = w.layout.config
    out = []
    # MoE parallel folding decouples etp from tp (NeMo's Llama 4 Maverick fine-tuning recipe
    # runs tp 2 with etp 4); what looks wrong is an expert TP group that cuts a dense TP
    # group part-way: neither size divides the other.
    if c.etp % c.tp and c.tp % c.etp:
        out.append(Finding("suspicious-etp", "warning",
                           f"expert_tensor_parallel_size ({c.etp}) and tensor_model_parallel_size "
                           f"({c.tp}) do not nest (neither divides the other): expert TP groups "
                           f"straddle dense TP groups part-way; usually one is a multiple of "
                           f"the other"))
    # Expert parallelism folded over data parallelism (ep*etp > tp*cp, MoE parallel folding)
    # is the standard MoE layout (DeepSeek-V3: tp 1, ep 64); what looks wrong is an expert
    # block that cuts a dense tp*cp block (or the reverse) part-way: neither divides the other.
    expert_block, dense_block = c.ep * c.etp, c.tp * c.cp
    if c.ep > 1 and expert_block % dense_block and dense_block % expert_block:
        out.append(Finding("suspicious-ep", "warning",
                           f"ep*etp = {c.ep}*{c.etp} = {expert_block} and tp*cp = {c.tp}*{c.cp} "
                           f"= {dense_block} do not nest (neither divides the other): each "
                           f"expert-parallel block covers part of a dense tensor/context block; "
                           f"usually ep*etp is a multiple or a divisor of tp*cp"))
    # NeMo 2 turns sequence parallelism off when tp is 1 (nemo/collections/llm/api.py,
    # _validate_config, "TP/SP validation"); megatron-core 0.16.1 ModelParallelConfig
    # .__post_init__ (model_parallel_config.py:409-411) raises ValueError instead. (vpp with
    # pp 1, NeMo's other silent change there, is already a rule: vpp-needs-pp.) A note, not a
    # warning: NeMo's own Mixtral 8x7B recipe sets sequence_parallel=True with tp 1.
    if c.sequence_parallel and c.tp == 1:
        out.append(Finding("sequence-parallel-off", "info",
                           "sequence_parallel is on with tensor_model_parallel_size 1: NeMo "
                           "switches it off ('Disabling sequence parallelism because tensor "
                           "model parallelism is disabled') and megatron-core's "
                           "ModelParallelConfig refuses it ('Cannot use sequence parallelism "
                           "without tensor parallelism'); the job runs without it"))
    repeated = repeated_tokens(c.order_resolved)
    if repeated:
        out.append(Finding("suspicious-order", "warning",
                           f"order {c.order!r} repeats {', '.join(map(repr, repeated))}: "
                           f"Megatron does not check it and gives the groups of the first "
                           f"occurrence only because the repeat changes no group here (size 1, "
                           f"or only size-1 dimensions after it); name each dimension once"))
    n = c.num_distributed_optimizer_instances
    if n > 1 and c.dp % n:
        out.append(Finding("suspicious-instances", "warning",
                           f"num_distributed_optimizer_instances ({n}) divides dp*cp "
                           f"({c.dp * c.cp}) but not dp ({c.dp}): instances cut through "
                           f"context-parallel groups"))
    return out


def check_communicators(w: _World) -> list[Finding]:
    lay = w.layout
    comm = lay.communicators_per_rank(cache=not w.lean)
    total = comm["nccl"] + comm["gloo"]
    out = [Finding("communicators", "info",
                   f"each rank holds {int(comm['nccl'].min())}-{int(comm['nccl'].max())} NCCL and "
                   f"{int(comm['gloo'].min())}-{int(comm['gloo'].max())} Gloo communicators "
                   f"(total {int(total.min())}-{int(total.max())}); every rank makes "
                   f"{len(lay.creation_order)} new_group calls")]
    if lay.has("tp_ep_egtp_pp") and lay.config.expert_gtp_remat_size == 1:  # the GTP axis
        out.append(Finding("communicators", "info",
                           "megatron-core 0.19 also creates EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_"
                           "GROUP_WITH_EGTP with the same ranks as the tp_ep_pp groups (expert "
                           "GTP size 1): one duplicate NCCL communicator per rank",
                           (), ("tp_ep_egtp_pp",)))
    return out


CHECKS: tuple[tuple[str, Callable[[_World], list[Finding]]], ...] = (
    ("partition", check_partition),
    ("group-size", check_sizes),
    ("orthogonality", check_orthogonality),
    ("composition", check_composition),
    ("gloo-twin", check_twins),
    ("matches-config", check_matches_config),
    ("pp-agree", check_pp_agree),
    ("embedding", check_embedding),
    ("all-gather", check_all_gather),
    ("creation-order", check_creation_order),
    ("suspicious", check_suspicious),
    ("communicators", check_communicators),
)


def check(layout: Layout, *, only: Iterable[str] | None = None,
          lean: bool | None = None, dp: DPImpl = UNKNOWN, launch: str = "lazy"
          ) -> list[Finding]:
    """Run every named check (or ``only`` those) and return the findings, errors first.

    ``lean`` (default: from :data:`LEAN_WORLD` ranks on) bounds the memory: no
    world-sized array outlives the check that needs it. The findings are the same.
    ``dp``: the data-parallel implementation (:class:`~simharness.ag_readers.DPImpl`;
    it decides who reads the AG groups); ``launch``: ``"lazy"`` (communicators made at
    a group's first collective, Megatron-LM's own init) or ``"eager"``.
    """
    if launch not in ("lazy", "eager"):
        raise ValueError(f"launch must be 'lazy' or 'eager', got {launch!r}")
    w = _World(layout, lean=lean, dp=dp, launch=launch)
    wanted = None if only is None else set(only)
    findings: list[Finding] = []
    for name, fn in CHECKS:
        if wanted is None or name in wanted:
            findings.extend(fn(w))
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order[f.severity])


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


__all__ = ["CHECKS", "check", "config_differences", "expected_sizes", "has_errors"]
