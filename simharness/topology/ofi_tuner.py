"""The aws-ofi-nccl tuner plugin's region tuner on p5 / p5e: which algorithm and protocol
it makes NCCL run.

On EFA, NCCL loads aws-ofi-nccl's tuner (``NCCL_TUNER_PLUGIN=libnccl-ofi-tuner.so``).
On p5.48xlarge / p5e.48xlarge its default, region-based tuner (``OFI_NCCL_TUNER_TYPE``
defaults to ``Region``) maps a call to a point ``(nBytes, nRanks)`` and looks it up in a
list of polygons per collective, each naming an (algorithm, protocol); the first polygon
that contains the point, or has it on an edge, wins and NCCL runs that combination
(the tuner zeroes its cost in NCCL's table). Outside every polygon, or for a collective
with no polygons, NCCL's own tuner decides. This module holds those polygons as data and
does the lookup; :func:`.nccl_model.choose` applies it when the cluster file names the
tuner (``[scale_out] tuner = "aws-ofi-nccl"``).

Source, aws/aws-ofi-nccl at tag ``v1.16.3``, the release the published p5 sweeps ran
(crazyguitar/aws-gpu-communication-benchmark at commit 4fdb5a4). Its ``Dockerfile`` builds
NCCL v2.27.7-1 and takes the plugin from the EFA installer 1.43.2, which ships libnccl-ofi
1.16.3 (AWS's EFA release notes, 15 August 2025); its ``AWS_OFI_NCCL_VERSION`` argument is
never used. The jobs' ``NCCL_TUNER_PLUGIN`` names a path that image does not have, so NCCL
2.27 loads the tuner from the net plugin instead (``ncclTunerPluginLoad``,
``src/plugin/tuner.cc``: ``ncclGetNetPluginLib`` when the named library cannot be opened),
where v1.16.3 bundles it (``src/Makefile.am``: "By bundling the tuner in the net plugin, we
cause the tuner to be used by default on NCCL 2.21 or later"). The regions are the same from
v1.16.0 to v1.16.3; v1.17.0 changed the p5en and p6 tables, not p5's. From that tag:

- ``src/tuner/nccl_ofi_regions.cpp``: ``region_init_internal_p5_p5e`` (the p5 / p5e
  polygons: all-reduce with 8, 2 and 1 ranks per node; all-gather and reduce-scatter with
  1 rank per node), ``extend_region`` (a vertex continued to the size or ranks bound),
  ``is_inside_region`` (an edge counts as inside), ``region_get_coll_info_internal_v3``
  (first region whose combination NCCL has enabled and that holds the point; nothing on
  two nodes or fewer; on p5 the channel count is left to NCCL);
- ``include/tuner/nccl_ofi_tuner_region.h``: ``TUNER_MAX_SIZE`` = 100 GiB,
  ``TUNER_MAX_RANKS`` = 1024 x 1024;
- ``src/tuner/nccl_ofi_tuner.cpp``: the platform by instance type (p5.48xlarge and
  p5e.48xlarge share one table), the region tuner chosen over the model tuner unless
  ``OFI_NCCL_TUNER_TYPE=Model``; no plugin decision with ``OFI_NCCL_TUNER_TYPE=Internal``
  or ``OFI_NCCL_FORCE_NUM_RAILS`` set.

NCCL 2.27 calls the plugin through its v3 interface (``src/plugin/tuner.cc`` v2.27.7-1
tries v4, then v3) with ``nBytes`` = the whole message for all-reduce (``getAlgoInfo``,
``src/enqueue.cc``). The polygons are the plugin's; the point-in-polygon test is written
here with exact rational arithmetic (the plugin uses doubles: the same answer away from
rounding at an edge).

Assumed, not modelled: the plugin's model-based tuner (only with
``OFI_NCCL_TUNER_TYPE=Model``), and the p5en and p6 tables (no topology file uses them).

>>> region_pick("all_reduce", 32 << 20, 32, 4)        # 4 x p5, 32 MB
('tree', 'll128')
>>> region_pick("all_reduce", 1 << 30, 32, 4), region_pick("all_reduce", 2 << 30, 32, 4)
(('ring', 'll128'), ('ring', 'simple'))
>>> region_pick("all_reduce", 1 << 30, 16, 2) is None   # two nodes: NCCL's own tuner
True
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from fractions import Fraction

TUNERS = ("", "aws-ofi-nccl")
PLUGIN_TAG = "v1.16.3"
# Instance types the p5 / p5e table serves (nccl_ofi_tuner.cpp: NCCL_OFI_TUNER_P5_P5E).
P5_INSTANCE_TYPES = ("p5.48xlarge", "p5e.48xlarge")
MAX_SIZE = 100 * 1024**3          # TUNER_MAX_SIZE
MAX_RANKS = 1024 * 1024           # TUNER_MAX_RANKS
_CORNER = (MAX_SIZE, MAX_RANKS)

Point = tuple[int, int]


def extend(a: Point, b: Point, z: Point = _CORNER) -> tuple[Fraction, Fraction]:
    """The plugin's ``extend_region``: the line through ``a`` and ``b`` continued to the
    first of ``x = z.x`` or ``y = z.y`` it meets (a vertical or horizontal line keeps its
    ``x`` or ``y``).

    >>> extend((402653184, 2048), (402653184, 4096))
    (Fraction(402653184, 1), Fraction(1048576, 1))
    """
    ax, ay, bx, by = (Fraction(v) for v in (*a, *b))
    zx, zy = Fraction(z[0]), Fraction(z[1])
    if ax == bx:
        return ax, zy
    if ay == by:
        return zx, ay
    m = (ay - by) / (ax - bx)
    c = by - m * bx
    y_at = m * zx + c
    return (zx, y_at) if y_at < zy else ((zy - c) / m, zy)


# --- p5 / p5e polygons, region_init_internal_p5_p5e (v1.16.3 nccl_ofi_regions.cpp),
# in the plugin's order (the first region holding the point wins); vertices (bytes, ranks).
_TREE_LL128_8 = extend((402653184, 2048), (402653184, 4096))
_NVLSTREE_8_A = extend((8053063680, 160), (9663676416, 192))
_RING_SIMPLE_8 = _NVLSTREE_8_A
_P5_AR_8PPN = (
    ("tree", "ll128", ((0, 16), (31457280, 16), (37748736, 32), (117440512, 64),
                       (301989888, 128), (301989888, 256), (335544320, 512),
                       (536870912, 1024), (402653184, 2048), (402653184, 4096),
                       _TREE_LL128_8, (0, _TREE_LL128_8[1]))),
    ("nvls_tree", "simple", ((31457281, 16), (MAX_SIZE, 16), (31457281, 16))),
    ("ring", "ll128", ((31457280, 17), (1073741824, 17), (2147483648, 64),
                       (2147483648, 128), (1342177280, 160), (2147483648, 256),
                       (1074790400, 256), (444596224, 160), (301989888, 128),
                       (117440512, 64), (37748736, 32))),
    ("nvls_tree", "simple", ((2147483648, 128), (6442450944, 128), (8053063680, 160),
                             (9663676416, 192), _NVLSTREE_8_A, _TREE_LL128_8,
                             (402653184, 4096), (402653184, 2048), (536870912, 1024),
                             (335544320, 512), (301989888, 256), (310378496, 160),
                             (444596224, 160), (1074790400, 256), (2684354560, 256),
                             (2147483648, 224), (1342177280, 160))),
    ("ring", "simple", ((1073741824, 17), (_RING_SIMPLE_8[0], 17), _RING_SIMPLE_8,
                        (9663676416, 192), (8053063680, 160), (2684354560, 64),
                        (1610612736, 32))),
)
_TREE_LL128_2 = extend((88160256, 128), (178163712, 256))
_TREE_SIMPLE_2A = extend((787480576, 128), (1073741824, 256))
_TREE_SIMPLE_2B = extend((257114112, 128), (269484032, 256))
_P5_AR_2PPN = (
    ("tree", "ll128", ((0, 4), (1314816, 4), (1051648, 8), (1051648, 12), (2367488, 16),
                       (5525504, 32), (9473024, 64), (88160256, 128), (178163712, 256),
                       _TREE_LL128_2, (0, _TREE_LL128_2[1]))),
    ("ring", "ll128", ((1314816, 4), (19736576, 4), (41842688, 8), (296747008, 64),
                       (257114112, 128), (269484032, 256), (178163712, 256),
                       (88160256, 128), (9473024, 64), (5525504, 32), (2367488, 16),
                       (1051648, 12), (1051648, 8), (1314816, 4))),
    ("nvls_tree", "simple", ((19736576, 4), (81844224, 4), (275775488, 8), (275775488, 48),
                             (296747008, 64), (41842688, 8))),
    ("tree", "ll128", ((81844224, 4), (269484032, 4), (81844224, 4))),
    ("tree", "simple", ((269484032, 4), (MAX_SIZE, 4), (269484032, 4))),
    ("ring", "simple", ((81844224, 5), (MAX_SIZE, 5), (MAX_SIZE, 32), (1073741824, 40),
                        (1073741824, 128), (787480576, 128), (296747008, 64),
                        (275775488, 48), (275775488, 8), (81844224, 5))),
    ("tree", "simple", ((296747008, 64), (787480576, 128), (1073741824, 256),
                        _TREE_SIMPLE_2A, _TREE_SIMPLE_2B, (269484032, 256),
                        (257114112, 128))),
    ("nvls_tree", "simple", (_TREE_SIMPLE_2A, (1073741824, 256), (787480576, 128),
                             (1073741824, 128), (1073741824, 40), (MAX_SIZE, 32))),
)
_TREE_LL128_1 = extend((9999360, 64), (119477248, 128))
_RING_LL128_1 = extend((4736000, 2), (269484032, 128))
_AG_1 = extend((4194304, 2), (8589934592, 2048))
_RS_1 = extend((8388608, 2), (4294967296, 1024))
_P5_1PPN = {
    "all_reduce": (
        ("tree", "ll128", ((0, 16), (2367488, 16), (9999360, 64), (119477248, 128),
                           _TREE_LL128_1)),
        ("ring", "ll128", ((0, 2), (4736000, 2), (269484032, 128), _RING_LL128_1,
                           _TREE_LL128_1, (119477248, 128), (9999360, 64), (2367488, 16),
                           (0, 16))),
        ("ring", "simple", ((4736000, 2), (MAX_SIZE, 2), _RING_LL128_1, (269484032, 128))),
    ),
    "all_gather": (("ring", "simple", ((4194304, 2), (MAX_SIZE, 2), _AG_1,
                                       (8589934592, 2048))),),
    "reduce_scatter": (("ring", "simple", ((8388608, 2), (MAX_SIZE, 2), _RS_1,
                                           (4294967296, 1024))),),
}


def _exact(table: tuple) -> tuple:
    """The polygons with their vertices as exact fractions (converted once)."""
    return tuple((a, p, tuple((Fraction(x), Fraction(y)) for x, y in vs)) for a, p, vs in table)


_P5_AR_8PPN, _P5_AR_2PPN = _exact(_P5_AR_8PPN), _exact(_P5_AR_2PPN)
_P5_1PPN = {k: _exact(v) for k, v in _P5_1PPN.items()}


def regions(collective: str, n_ranks: int, n_nodes: int) -> tuple:
    """The p5 / p5e polygons for one communicator shape, in the plugin's order; empty
    where the plugin has none (NCCL's own tuner decides): 8, 2 or 1 ranks per node for
    all-reduce, 1 per node for all-gather and reduce-scatter."""
    if n_ranks == 8 * n_nodes:
        return _P5_AR_8PPN if collective == "all_reduce" else ()
    if n_ranks == 2 * n_nodes:
        return _P5_AR_2PPN if collective == "all_reduce" else ()
    if n_ranks == n_nodes:
        return _P5_1PPN.get(collective, ())
    return ()


def _on_segment(p, a, b) -> bool:
    cross = (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])
    if cross != 0:
        return False
    return (min(a[0], b[0]) <= p[0] <= max(a[0], b[0])
            and min(a[1], b[1]) <= p[1] <= max(a[1], b[1]))


def inside(point: tuple[float, float], vertices: Iterable) -> bool:
    """Whether ``point`` lies in the polygon or on its boundary (the plugin's
    ``is_inside_region`` >= 0): exact arithmetic, even-odd rule.

    >>> square = ((0, 0), (4, 0), (4, 4), (0, 4))
    >>> inside((2, 2), square), inside((4, 1), square), inside((5, 1), square)
    (True, True, False)
    """
    p = (Fraction(point[0]), Fraction(point[1]))
    vs = [v if isinstance(v[0], Fraction) else (Fraction(v[0]), Fraction(v[1]))
          for v in vertices]
    n = len(vs)
    if any(_on_segment(p, vs[i], vs[(i + 1) % n]) for i in range(n)):
        return True
    odd = False
    for i in range(n):
        (x0, y0), (x1, y1) = vs[i], vs[(i + 1) % n]
        if (y0 > p[1]) != (y1 > p[1]):
            x_cross = x0 + (p[1] - y0) * (x1 - x0) / (y1 - y0)
            if x_cross > p[0]:
                odd = not odd
    return odd


def region_pick(collective: str, size_bytes: float, n_ranks: int, n_nodes: int,
                enabled: Iterable[tuple[str, str]] | None = None) -> tuple[str, str] | None:
    """The (algorithm, protocol) the p5 / p5e region tuner makes NCCL run, or ``None``
    where NCCL's own tuner decides (two nodes or fewer, no polygon holds the point, or
    none of the polygons' combinations is ``enabled`` in NCCL's table).

    ``enabled``: the combinations NCCL has priced (a region whose combination NCCL
    ignores is skipped, as the v3 interface does); ``None`` = all.
    """
    if n_nodes <= 2:
        return None
    return _pick(collective, float(size_bytes), n_ranks, n_nodes,
                 None if enabled is None else frozenset(enabled))


@functools.lru_cache(maxsize=4096)
def _pick(collective: str, size_bytes: float, n_ranks: int, n_nodes: int,
          allowed: frozenset | None) -> tuple[str, str] | None:
    point = (size_bytes, n_ranks)
    for algo, proto, vertices in regions(collective, n_ranks, n_nodes):
        if allowed is not None and (algo, proto) not in allowed:
            continue
        if inside(point, vertices):
            return algo, proto
    return None


def describe() -> str:
    """One line for ``--explain``: what of the plugin tuner is modelled."""
    return (f"aws-ofi-nccl {PLUGIN_TAG} region tuner for p5/p5e MODELLED "
            "(src/tuner/nccl_ofi_regions.cpp): on more than two nodes it picks the algorithm "
            "and protocol by (message size, ranks) for all-reduce (8, 2 or 1 GPU per node) "
            "and for all-gather / reduce-scatter (1 GPU per node); elsewhere, and on two "
            "nodes or fewer, NCCL's own pick; channels are NCCL's. Assumed: the default "
            "OFI_NCCL_TUNER_TYPE=Region (its model-based tuner is not modelled)")
