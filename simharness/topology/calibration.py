"""Published NCCL measurements and the model's prediction for each.

The data set ships as package data, ``topologies/calibration/nccl_calibration.toml``
(read through :func:`~.loader.topology_dir`, so an installed wheel finds it; format in
its header); ``bench/bench_cost.py`` prints the table, the tests check every
point (busbw within ``BW_TOLERANCE``, time within ``TIME_FACTOR``), and
``bench/bench_replay.py --gpu`` writes measured points in the same format.

>>> pts = load_points(DEFAULT_PATH)
>>> p = next(p for p in pts if p.id == "h200x8-ar-4g")
>>> r = evaluate(p)
>>> r.pick, r.within_target
('nvls/simple', True)
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport, a dependency there
    import tomli as tomllib

from .cost import predict
from .errors import TopologyError
from .loader import load_cluster, load_spec, topology_dir
from .nccl_ramp import (
    LAUNCH_MODES,
    LAUNCH_US_SINGLE_PER_GPU,
    launch_overhead_us,
)
from .nccl_tuning import DEFAULT_NCCL, bus_factor
from .net_pipeline import RING_STEP_FORM, TRANSPORTS
from .schema import TopologySpec

DEFAULT_PATH = topology_dir() / "calibration" / "nccl_calibration.toml"
BW_TOLERANCE = 0.15   # issue 8: +-15 % on bandwidth
TIME_FACTOR = 1.5     # issue 8: within 1.5x on latency
BW_TARGET_MIN_BYTES = 64 << 20  # issue 15: busbw judged at >= 64 MB, time below
# Size bands the held-out figures are reported in (issue 15: the mid-size ramp).
SIZE_BANDS = (("<1 MB", 0.0, float(1 << 20)), ("1-256 MB", float(1 << 20), float(256 << 20)),
              (">=256 MB", float(256 << 20), float("inf")))
_FIELDS = {"id", "source", "note", "nccl", "gpu", "collective", "algo", "size", "topology",
           "nodes", "ranks_per_node", "node_list", "busbw", "time_us", "split", "used_for",
           "known_miss", "measured_by", "launch", "sweep"}


@dataclass(frozen=True)
class CalPoint:
    id: str
    source: str
    collective: str
    algo: str
    size: float
    topology: str
    nodes: int
    ranks_per_node: int
    split: str
    busbw: float | None = None
    time_us: float | None = None
    node_list: tuple[int, ...] | None = None
    nccl: str = ""
    gpu: str = ""
    note: str = ""
    used_for: str = ""
    known_miss: str = ""
    launch: str = ""  # per-gpu (one process per GPU), single (-g N), "" not stated
    sweep: str = ""   # the published sweep (one run over sizes) the point belongs to

    @property
    def launch_mode(self) -> str:
        """The launch mode priced: as stated, else one process per GPU (torchrun's)."""
        return self.launch or "per-gpu"

    @property
    def metric(self) -> str:
        return "busbw" if self.busbw is not None else "time_us"

    @property
    def measured(self) -> float:
        value = self.busbw if self.busbw is not None else self.time_us
        assert value is not None, "_point requires exactly one of busbw, time_us"
        return value

    def devices(self, gpus_per_node: int) -> np.ndarray:
        """Device indices: the first ``ranks_per_node`` GPUs of each node used."""
        nodes = self.node_list if self.node_list is not None else range(self.nodes)
        return np.array([n * gpus_per_node + i for n in nodes for i in range(self.ranks_per_node)],
                        dtype=np.int64)


@dataclass(frozen=True)
class CalResult:
    point: CalPoint
    predicted: float
    pick: str

    @property
    def ratio(self) -> float:
        """predicted / measured."""
        return self.predicted / self.point.measured

    @property
    def speed_ratio(self) -> float:
        """predicted / measured speed: busbw ratio, or measured time / predicted time."""
        return self.ratio if self.point.metric == "busbw" else 1.0 / self.ratio

    @property
    def within_target(self) -> bool:
        """Issue 15's target: busbw within +-15 % at >= 64 MiB, time within 1.5x below.

        A busbw point below ``BW_TARGET_MIN_BYTES`` is judged on its time
        (time ratio = 1 / busbw ratio at the same size).
        """
        if self.point.metric == "busbw" and self.point.size >= BW_TARGET_MIN_BYTES:
            return abs(self.ratio - 1.0) <= BW_TOLERANCE
        time_ratio = self.ratio if self.point.metric == "time_us" else 1.0 / self.ratio
        return 1.0 / TIME_FACTOR <= time_ratio <= TIME_FACTOR


def _point(raw: dict, where: str) -> CalPoint:
    unknown = set(raw) - _FIELDS
    if unknown:
        raise TopologyError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    for key in ("id", "source", "collective", "size", "topology", "nodes", "ranks_per_node",
                "split"):
        if key not in raw:
            raise TopologyError(f"{where}: missing field {key!r}")
    if ("busbw" in raw) == ("time_us" in raw):
        raise TopologyError(f"{where} ({raw['id']}): give exactly one of busbw, time_us")
    value = raw.get("busbw", raw.get("time_us"))
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise TopologyError(f"{where} ({raw['id']}): measured value must be a number > 0, "
                            f"got {value!r}")
    if raw["split"] not in ("fit", "heldout", "measured"):
        raise TopologyError(f"{where} ({raw['id']}): split must be fit, heldout or measured, "
                            f"got {raw['split']!r}")
    if raw.get("launch", "") not in ("", *LAUNCH_MODES):
        raise TopologyError(f"{where} ({raw['id']}): launch must be per-gpu or single, got "
                            f"{raw['launch']!r}")
    nl = raw.get("node_list")
    return CalPoint(
        id=raw["id"], source=raw["source"], collective=raw["collective"],
        algo=raw.get("algo", "default"), size=float(raw["size"]), topology=raw["topology"],
        nodes=int(raw["nodes"]), ranks_per_node=int(raw["ranks_per_node"]), split=raw["split"],
        busbw=raw.get("busbw"), time_us=raw.get("time_us"),
        node_list=tuple(int(x) for x in nl) if nl is not None else None,
        nccl=raw.get("nccl", ""), gpu=raw.get("gpu", ""), note=raw.get("note", ""),
        used_for=raw.get("used_for", ""), known_miss=raw.get("known_miss", ""),
        launch=raw.get("launch", ""), sweep=raw.get("sweep", ""))


def _read_toml(path: Path, what: str) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TopologyError(f"{path}: cannot read {what}: {exc}") from None


def load_points(path: str | Path = DEFAULT_PATH) -> list[CalPoint]:
    """Every ``[[point]]`` of a calibration file, validated."""
    path = Path(path)
    data = _read_toml(path, "calibration data")
    return [_point(raw, f"{path} point #{i + 1}") for i, raw in enumerate(data.get("point", []))]


def _gpu_time_us(point: CalPoint, nccl: str | None = None,
                 spec: TopologySpec | None = None) -> tuple[float, str]:
    """The model's GPU time of one call (no launch) and NCCL's pick (on ``spec`` in place
    of the point's topology file when given)."""
    cluster = load_cluster(point.topology if spec is None else spec, point.nodes)
    dev = point.devices(cluster.gpus_per_node)
    algo = None if point.algo == "default" else point.algo
    est = predict(cluster, dev, point.collective, point.size, algo=algo,
                  nccl=nccl or _version(point))
    return est.time_us, est.pick


def _value(point: CalPoint, time_us: float) -> float:
    """A call time expressed in the point's metric (busbw or time)."""
    if point.metric == "busbw":
        n = len(point.devices(1))
        return point.size / (time_us * 1e3) * bus_factor(point.collective, n)
    return time_us


def evaluate(point: CalPoint, nccl: str | None = None,
             single_per_gpu_us: float = LAUNCH_US_SINGLE_PER_GPU,
             spec: TopologySpec | None = None) -> CalResult:
    """The model's prediction for one point (same metric as the measurement).

    The NCCL release is the point's own (:func:`_version`) unless ``nccl`` is given;
    back-to-back calls take at least the launch period (:func:`.nccl_ramp.launch_period_us`:
    one process driving N GPUs launches N kernels per call, ``single_per_gpu_us`` each);
    ``spec`` prices the point on another topology than its file's (for the fits).
    """
    gpu_us, pick = _gpu_time_us(point, nccl, spec)
    time_us = gpu_us + launch_overhead_us(point.launch_mode, point.ranks_per_node,
                                          gpu_time_us=gpu_us,
                                          single_per_gpu_us=single_per_gpu_us)
    return CalResult(point, float(_value(point, time_us)), pick)


FIT_LAUNCH_MAX_BYTES = float(1 << 20)  # the launch-bound range the single-launch fit sees


def fit_single_launch_us(points: list[CalPoint]) -> float:
    """``LAUNCH_US_SINGLE_PER_GPU`` fitted on the ``fit`` points only, us.

    Over every point with ``split == "fit"``, ``launch == "single"`` and size
    below 1 MB, the per-GPU launch cost L that minimises the sum of squared
    log(predicted / measured time), predicted = ``max(GPU time, N x L)``; a grid of
    0.01 us over 1-10 us. Held-out points are ignored, whatever they say.

    >>> round(fit_single_launch_us(load_points(DEFAULT_PATH)), 2) == LAUNCH_US_SINGLE_PER_GPU
    True
    """
    rows = []
    for p in points:
        if p.split != "fit" or p.launch != "single" or p.size >= FIT_LAUNCH_MAX_BYTES:
            continue
        gpu_us, _ = _gpu_time_us(p)
        measured_us = p.measured if p.metric == "time_us" else _value(p, 1.0) / p.measured
        rows.append((gpu_us, measured_us, p.ranks_per_node))
    if not rows:
        raise TopologyError("no fit point launched single (-g N) below 1 MB: nothing to fit "
                            "the per-GPU launch cost on")
    gpu, meas, n = (np.array(x, dtype=float) for x in zip(*rows, strict=True))
    grid = np.arange(100, 1001) / 100.0
    pred = np.maximum(gpu[None, :], n[None, :] * grid[:, None])
    cost = (np.log(pred / meas[None, :]) ** 2).sum(axis=1)
    return float(grid[int(np.argmin(cost))])


FLOOR_GRID_US = np.arange(0, 601) / 10.0     # ring step floor: 0-60 us by 0.1 us
LEVEL_GRID_US = np.arange(0, 301, dtype=float)  # tree level: 0-300 us by 1 us


def _ring_step_cost(floor_us, step_us, form: str):
    """What a ring step adds to its transfer: ``hypot(floor, x) - x`` or ``max(0, floor - x)``."""
    if form == "max":
        return np.maximum(0.0, floor_us - step_us)
    return np.hypot(floor_us, step_us) - step_us


def pipeline_fit(points: list[CalPoint], transport: str = "efa",
                 form: str = RING_STEP_FORM) -> tuple[float, float, float]:
    """``(floor, level, cost)``: the pipeline constants of ``transport`` fitted on the
    ``fit`` points only with the ring step ``form`` (``"hypot"``, the model's, or
    ``"max"``), and the least sum of squared log(predicted / measured time) reached.

    Over every point with ``split == "fit"`` on a topology whose network is
    ``transport`` and that crosses it, predicted = the model's time without the pipeline
    cost + what the sources give of it (the transport's latency, the chunk's transfer) +
    the fitted terms where they apply (the ring step floor on floored rings, the level
    constant on rendezvous levels: :class:`.net_pipeline.PipelineTerms`); the pick is
    unchanged (NCCL's tuner and the plugin's do not see it); grids :data:`FLOOR_GRID_US` x
    :data:`LEVEL_GRID_US`. Held-out points are ignored, whatever they say.
    """
    rows = []
    for p in points:
        if p.split != "fit":
            continue
        cluster = load_cluster(p.topology, p.nodes)
        so = cluster.spec.scale_out
        if so is None or so.transport != transport:
            continue
        dev = p.devices(cluster.gpus_per_node)
        est = predict(cluster, dev, p.collective, p.size,
                      algo=None if p.algo == "default" else p.algo, nccl=_version(p))
        t = est.net_terms
        if not (t.levels or t.ring_steps):
            continue
        measured_us = p.measured if p.metric == "time_us" else _value(p, 1.0) / p.measured
        tr = TRANSPORTS[transport]
        rows.append((est.time_us - est.transport_us + t.ring_source_us(tr)
                     + t.levels * t.level_source_us(tr),
                     t.ring_steps if t.ring_steps and t.ring_floored(tr) else 0,
                     t.ring_step_us, t.levels if t.level_fitted(tr) else 0, measured_us))
    if not rows:
        raise TopologyError(f"no fit point crosses a {transport} network: nothing to fit its "
                            "pipeline constants on")
    base, steps, step_us, levels, meas = (np.array(x, dtype=float)
                                          for x in zip(*rows, strict=True))
    ring = steps * _ring_step_cost(FLOOR_GRID_US[:, None], step_us[None, :], form)  # (F, P)
    tree = levels * LEVEL_GRID_US[:, None]                                          # (L, P)
    pred = base[None, None, :] + ring[:, None, :] + tree[None, :, :]
    cost = (np.log(pred / meas) ** 2).sum(axis=2)
    fi, li = np.unravel_index(int(np.argmin(cost)), cost.shape)
    return float(FLOOR_GRID_US[fi]), float(LEVEL_GRID_US[li]), float(cost[fi, li])


def fit_net_pipeline(points: list[CalPoint], transport: str = "efa") -> tuple[float, float]:
    """``(RING_STEP_FLOOR_US, NET_LEVEL_US)`` of ``transport`` fitted on the ``fit``
    points only, us (:func:`pipeline_fit` with the model's ring step form).

    >>> from simharness.topology.net_pipeline import NET_LEVEL_US, RING_STEP_FLOOR_US
    >>> fit_net_pipeline(load_points(DEFAULT_PATH)) == (RING_STEP_FLOOR_US["efa"],
    ...                                                 NET_LEVEL_US["efa"])
    True
    >>> fit_net_pipeline(load_points(DEFAULT_PATH), "roce") == (RING_STEP_FLOOR_US["roce"],
    ...                                                         NET_LEVEL_US["roce"])
    True

    A constant no fit point pays (RoCE's level: its fit sweep has no tree level) leaves
    the cost flat and comes out as the grid's first value, 0.
    """
    floor, level, _ = pipeline_fit(points, transport)
    return floor, level


EFFICIENCY_GRID = np.arange(500, 1001) / 1000.0  # per-NIC efficiency: 0.5-1 by 0.001
PLATEAU_MIN_BYTES = float(1 << 30)  # a sweep's plateau, where its per-NIC rate is read


def fit_nic_efficiency(points: list[CalPoint], transport: str = "roce",
                       topology: str = "gcp-a3-ultra") -> float:
    """The per-NIC ``efficiency`` of ``topology``'s ``[scale_out]`` fitted on the ``fit``
    points only.

    Over every point with ``split == "fit"`` on ``topology`` whose network is
    ``transport``, that crosses it and gives busbw from :data:`PLATEAU_MIN_BYTES` (the
    sweep's plateau: the topology files state their per-NIC rates as plateau figures),
    the efficiency that minimises the sum of squared log(predicted / measured busbw),
    predicted = the model's with only the file's per-NIC efficiency replaced (the
    pipeline constants as shipped); grid :data:`EFFICIENCY_GRID`. Held-out points are
    ignored, whatever they say.

    >>> from simharness.topology.loader import load_spec
    >>> fit_nic_efficiency(load_points(DEFAULT_PATH)) == load_spec(
    ...     "gcp-a3-ultra").scale_out.efficiency
    True
    """
    spec = load_spec(topology)
    so = spec.scale_out
    if so is None or so.transport != transport:
        raise TopologyError(f"topology {topology!r} has no {transport} network; pass a "
                            f"topology whose [scale_out] transport is {transport}")
    sel = [p for p in points if p.split == "fit" and p.topology == topology
           and p.metric == "busbw" and p.size >= PLATEAU_MIN_BYTES
           and not network_class(p).startswith("NVLink")]
    if not sel:
        raise TopologyError(f"no fit point on {topology} crosses its {transport} network with "
                            f"a busbw from {_size(PLATEAU_MIN_BYTES)}: nothing to fit its "
                            "per-NIC efficiency on")
    meas = np.array([p.measured for p in sel])
    cost = []
    for e in EFFICIENCY_GRID:
        s = replace(spec, scale_out=replace(so, efficiency=float(e)))
        pred = np.array([evaluate(p, spec=s).predicted for p in sel])
        cost.append(float((np.log(pred / meas) ** 2).sum()))
    return float(EFFICIENCY_GRID[int(np.argmin(cost))])


@dataclass(frozen=True)
class BandSummary:
    """Held-out figures of one size band (:data:`SIZE_BANDS`)."""

    band: str
    n: int
    within: int
    too_fast: int
    median_speed: float  # median predicted / measured speed; nan when n == 0

    def line(self) -> str:
        if not self.n:
            return f"{self.band:>9s}: no points"
        return (f"{self.band:>9s}: {self.within} of {self.n} within target "
                f"({self.within / self.n:.0%}); too fast on {self.too_fast}; median speed "
                f"ratio {self.median_speed:.2f}")


def band_summaries(results: list[CalResult]) -> list[BandSummary]:
    """Within-target count, too-fast count and median speed ratio per size band.

    >>> p = CalPoint("x", "s", "all_reduce", "ring", 2**20, "dgx-h100", 1, 8, "heldout",
    ...              time_us=10.0)
    >>> [b.n for b in band_summaries([CalResult(p, 12.0, "ring/simple")])]
    [0, 1, 0]
    """
    out = []
    for band, lo, hi in SIZE_BANDS:
        rs = [r for r in results if lo <= r.point.size < hi]
        speeds = sorted(r.speed_ratio for r in rs)
        med = float(np.median(speeds)) if speeds else float("nan")
        out.append(BandSummary(band, len(rs), sum(r.within_target for r in rs),
                               sum(v > 1.0 for v in speeds), med))
    return out


def network_class(point: CalPoint) -> str:
    """The network class a point is reported in: ``NVLink <arch>`` when its GPUs share one
    NVLink domain (one node, or one multi-node NVLink rack), else the network's transport
    and the GPUs' architecture (``InfiniBand hopper``, ``EFA hopper``, ``RoCE hopper``).

    >>> p = CalPoint("x", "s", "all_reduce", "ring", 2**30, "aws-p5", 2, 8, "heldout",
    ...              busbw=1.0)
    >>> network_class(p)
    'EFA hopper'
    """
    spec = load_cluster(point.topology, point.nodes).spec
    nodes = point.node_list if point.node_list is not None else range(point.nodes)
    domains = {n // spec.nodes_per_domain for n in nodes}
    arch = spec.node.arch or "generic"
    if len(domains) == 1 or spec.scale_out is None:
        return f"NVLink {arch}"
    names = {"infiniband": "InfiniBand", "roce": "RoCE", "efa": "EFA"}
    return f"{names[spec.scale_out.transport]} {arch}"


@dataclass(frozen=True)
class ClassSummary:
    """Held-out figures of one network class, over all sizes and per size band."""

    network: str
    all: BandSummary
    bands: tuple[BandSummary, ...]


def class_summaries(results: list[CalResult]) -> list[ClassSummary]:
    """Per network class (:func:`network_class`): the summary over all sizes, then per
    size band (:data:`SIZE_BANDS`); classes sorted by name."""
    by: dict[str, list[CalResult]] = {}
    for r in results:
        by.setdefault(network_class(r.point), []).append(r)
    out = []
    for name in sorted(by):
        rs = by[name]
        speeds = sorted(r.speed_ratio for r in rs)
        total = BandSummary("all", len(rs), sum(r.within_target for r in rs),
                            sum(v > 1.0 for v in speeds), float(np.median(speeds)))
        out.append(ClassSummary(name, total, tuple(band_summaries(rs))))
    return out


def _version(point: CalPoint) -> str:
    """The modelled NCCL release nearest the point's: 2.23 for <= 2.23.x, else 2.28."""
    try:
        major, minor = (int(x) for x in point.nccl.split(".")[:2])
    except ValueError:
        return DEFAULT_NCCL
    return "2.23" if (major, minor) <= (2, 23) else "2.28"


def format_table(results: list[CalResult]) -> str:
    """The calibration table, one row per point, ratio = predicted / measured."""
    head = (f"{'id':28s} {'split':7s} {'coll':10s} {'size':>7s} {'gpus':>4s} {'gpu':9s} "
            f"{'metric':7s} {'measured':>9s} {'model':>9s} {'ratio':>6s} {'speed':>6s} "
            f"{'pick':16s} status")
    lines = [head]
    for r in results:
        p = r.point
        status = "ok" if r.within_target else ("known miss" if p.known_miss else "MISS")
        lines.append(f"{p.id:28s} {p.split:7s} {p.collective:10s} {_size(p.size):>7s} "
                     f"{len(p.devices(1)):>4d} "
                     f"{p.gpu[:9]:9s} {p.metric:7s} {p.measured:9.2f} {r.predicted:9.2f} "
                     f"{r.ratio:6.2f} {r.speed_ratio:6.2f} {r.pick:16s} {status}")
    return "\n".join(lines)


def _size(b: float) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div:
            v = b / div
            return f"{v:g}{unit}" if v == math.floor(v) else f"{v:.1f}{unit}"
    return f"{b:g}"


MEMORY_PATH = topology_dir() / "calibration" / "nccl_memory.toml"


@dataclass(frozen=True)
class MemoryReport:
    """One published report of a communicator's GPU memory (``nccl_memory.toml``)."""

    id: str
    source: str
    topology: str
    nodes: int
    ranks_per_node: int
    algos: tuple[str, ...]
    eager: bool
    measured_mb: float
    split: str
    note: str = ""


def load_memory_reports(path: str | Path = MEMORY_PATH) -> list[MemoryReport]:
    """Every ``[[report]]`` of a memory-report file."""
    path = Path(path)
    data = _read_toml(path, "memory reports")
    out = []
    for i, raw in enumerate(data.get("report", [])):
        try:
            out.append(MemoryReport(
                id=raw["id"], source=raw["source"], topology=raw["topology"],
                nodes=int(raw["nodes"]), ranks_per_node=int(raw["ranks_per_node"]),
                algos=tuple(raw["algos"]), eager=bool(raw.get("eager", False)),
                measured_mb=float(raw["measured_mb"]), split=raw["split"],
                note=raw.get("note", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise TopologyError(f"{path} report #{i + 1}: bad or missing field: {exc}") from None
    return out


def evaluate_memory(report: MemoryReport) -> tuple[float, list[str]]:
    """The model's MB for one report and how it got there."""
    from .comm_memory import CommMemoryInputs, comm_memory
    from .cost import build_rings, shape_of

    cluster = load_cluster(report.topology, report.nodes)
    dev = [n * cluster.gpus_per_node + i for n in range(report.nodes)
           for i in range(report.ranks_per_node)]
    shape = shape_of(cluster, build_rings(cluster, [dev]), 0)
    m = comm_memory(CommMemoryInputs(algos=report.algos, lazy_connect=not report.eager),
                    all_algos=report.algos, shape=shape)
    return m.total_mb, m.lines()
