"""The topology file schema: a TOML table -> a validated :class:`TopologySpec`.

One schema for every file in ``topologies/`` (documented field by field in
``topologies/README.md``). Every problem is a :class:`TopologyError` naming the
file, the field, the value found and what was expected:

>>> parse_spec({"name": "x", "node": {"gpus": "eight"}}, "x.toml")
Traceback (most recent call last):
...
simharness.topology.errors.TopologyError: x.toml: [node] gpus: expected a whole number >= 1, \
got 'eight'

Units are in the field names: ``*_gb_per_s`` is gigabytes (1e9 bytes) per
second per direction, ``*_gbit_per_s`` gigabits per second (the line rate
vendors quote), ``*_us`` microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import TopologyError
from .nccl_tuning import ARCHS
from .ofi_tuner import P5_INSTANCE_TYPES, TUNERS

SCHEMA_VERSION = 1
WIRINGS = ("rail", "tor")
# NCCL's network transport: NCCL's own IB verbs plugin (net_ib.cc) on InfiniBand or RoCE,
# or an external net plugin (libnccl-net.so) -- on EFA, aws-ofi-nccl over libfabric.
TRANSPORTS = ("infiniband", "roce", "efa")
_MISSING = object()


@dataclass(frozen=True)
class NodeSpec:
    """One host: ``gpus`` devices (process slots for cpu-loopback), grouped in boards."""

    gpus: int
    gpus_per_board: int
    gpu: str = ""
    arch: str | None = None  # NCCL's tuning row: volta, ampere, hopper, blackwell; None: not NCCL
    sms: int | None = None    # streaming multiprocessors per GPU (datasheet)
    hbm_gb_per_s: float | None = None  # HBM bandwidth per GPU (datasheet)
    peak_bf16_tflops: float | None = None  # dense BF16 tensor-core peak per GPU (datasheet)


@dataclass(frozen=True)
class ScaleUpSpec:
    """The NVLink (scale-up) domain: ``domain_gpus`` GPUs behind one NVSwitch fabric.

    ``bandwidth_gb_per_s`` is per GPU per direction (NVLink4: 450); a collective
    reaches ``bandwidth_gb_per_s * efficiency``; ``latency_us`` is one
    GPU-to-GPU step through the switch.
    """

    domain_gpus: int
    bandwidth_gb_per_s: float
    efficiency: float
    latency_us: float
    technology: str = ""
    nvls: bool = False       # NVSwitch multicast / NVLink SHARP (NVSwitch3+, Hopper+)
    links: int | None = None  # NVLinks per GPU (documentation; bandwidth is per GPU)


@dataclass(frozen=True)
class TierSpec:
    """One switch tier. Tier 0 is the leaf tier, tier 1 (optional) the spine."""

    name: str
    latency_us: float
    port_speed_gbit_per_s: float
    nodes_per_switch: int | None = None
    uplink_ports: int = 0
    ports: int | None = None


@dataclass(frozen=True)
class ScaleOutSpec:
    """NICs and the switched network above them."""

    nics_per_node: int
    speed_gbit_per_s: float
    efficiency: float
    nic_latency_us: float
    pcie_gb_per_s: float
    wiring: str
    tiers: tuple[TierSpec, ...]
    nic: str = ""
    sharp: bool = False  # switches run in-network reductions (InfiniBand SHARP -> CollNet)
    pxn: bool = True     # NCCL PXN: cross-rail traffic moves over NVLink to the rail's GPU
    transport: str = "infiniband"  # infiniband, roce (NCCL's IB verbs) or efa (aws-ofi-nccl)
    net_plugin: str = ""           # external NCCL net plugin (documentation), e.g. aws-ofi-nccl
    tuner_plugin: str = ""         # external NCCL tuner plugin in use (its name, documentation)
    tuner: str = ""                # a modelled tuner plugin: "aws-ofi-nccl" (.ofi_tuner)
    instance_type: str = ""        # the instance type such a tuner decides by (p5.48xlarge)

    @property
    def nic_gb_per_s(self) -> float:
        """Line rate of one NIC port in GB/s (400 Gb/s -> 50 GB/s)."""
        leaf_port = self.tiers[0].port_speed_gbit_per_s
        return min(self.speed_gbit_per_s, leaf_port) / 8.0

    @property
    def nodes_per_leaf(self) -> int:
        """Nodes under one leaf switch: the leaf tier's ``nodes_per_switch``."""
        n = self.tiers[0].nodes_per_switch
        assert n is not None, "parse_spec requires nodes_per_switch on the leaf tier"
        return n


@dataclass(frozen=True)
class TopologySpec:
    """A validated topology file (see ``topologies/README.md``)."""

    name: str
    description: str
    source: str
    default_nodes: int
    max_nodes: int | None
    node: NodeSpec
    scale_up: ScaleUpSpec
    scale_out: ScaleOutSpec | None
    base_latency_us: float
    references: tuple[str, ...] = ()

    @property
    def nodes_per_domain(self) -> int:
        return self.scale_up.domain_gpus // self.node.gpus


class _Table:
    """Typed reads from one TOML table; ``done()`` rejects unknown keys.

    The readers are named for what they accept (``whole``, ``number``, ``flag``,
    ``text``) so they do not shadow the builtins inside the class.
    """

    def __init__(self, data: Any, where: str, source: str):
        if not isinstance(data, dict):
            raise TopologyError(f"{source}: {where}: expected a table, got {data!r}",
                                source=source, field=where)
        self.data, self.where, self.source = data, where, source
        self.seen: set[str] = set()

    def _fail(self, key: str, expected: str, value: Any = _MISSING) -> TopologyError:
        got = "it is missing" if value is _MISSING else f"got {value!r}"
        prefix = f"{self.where} " if self.where else ""
        return TopologyError(f"{self.source}: {prefix}{key}: expected {expected}, {got}",
                             source=self.source, field=f"{self.where} {key}".strip())

    def get(self, key: str, default: Any = _MISSING) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is _MISSING:
                raise self._fail(key, "a value")
            return default
        return self.data[key]

    def whole(self, key: str, minimum: int = 1, default: Any = _MISSING) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._fail(key, f"a whole number >= {minimum}", value)
        return value

    def optional_whole(self, key: str) -> int | None:
        return None if self.get(key, None) is None else self.whole(key)

    def number(self, key: str, minimum: float = 0.0, maximum: float | None = None,
               default: Any = _MISSING, positive: bool = False) -> float:
        value = self.get(key, default)
        ok = not isinstance(value, bool) and isinstance(value, (int, float))
        ok = ok and (value > minimum if positive else value >= minimum)
        ok = ok and (maximum is None or value <= maximum)
        if not ok:
            rng = f"> {minimum}" if positive else f">= {minimum}"
            if maximum is not None:
                rng += f" and <= {maximum}"
            raise self._fail(key, f"a number {rng}", value)
        return float(value)

    def optional_number(self, key: str, **limits: Any) -> float | None:
        return None if self.get(key, None) is None else self.number(key, **limits)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def text(self, key: str, choices: tuple[str, ...] | None = None,
             default: Any = _MISSING) -> str:
        value = self.get(key, default)
        if not isinstance(value, str) or (choices and value not in choices):
            expected = f"one of {', '.join(map(repr, choices))}" if choices else "a string"
            raise self._fail(key, expected, value)
        return value

    def table(self, key: str) -> _Table:
        return _Table(self.get(key),
                      f"[{key}]" if not self.where else f"{self.where[:-1]}.{key}]", self.source)

    def optional_table(self, key: str) -> _Table | None:
        return None if self.get(key, None) is None else self.table(key)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            prefix = f"{self.where} " if self.where else ""
            raise TopologyError(
                f"{self.source}: {prefix}{unknown[0]}: unknown field; expected one of "
                f"{', '.join(sorted(self.seen))} (see topologies/README.md)",
                source=self.source, field=f"{self.where} {unknown[0]}".strip())


def _node(t: _Table) -> NodeSpec:
    arch = t.get("arch", None)
    if arch is not None and arch not in ARCHS:
        raise t._fail("arch", f"one of {', '.join(map(repr, ARCHS))} (NCCL's tuning row)", arch)
    gpus = t.whole("gpus")
    node = NodeSpec(gpus=gpus, gpus_per_board=t.optional_whole("gpus_per_board") or gpus,
                    gpu=t.text("gpu", default=""), arch=arch, sms=t.optional_whole("sms"),
                    hbm_gb_per_s=t.optional_number("hbm_gb_per_s", positive=True),
                    peak_bf16_tflops=t.optional_number("peak_bf16_tflops", positive=True))
    if node.gpus % node.gpus_per_board:
        raise t._fail("gpus_per_board", f"a divisor of gpus ({node.gpus})", node.gpus_per_board)
    t.done()
    return node


def _scale_up(t: _Table, node: NodeSpec) -> ScaleUpSpec:
    scale_up = ScaleUpSpec(
        domain_gpus=t.whole("domain_gpus"),
        bandwidth_gb_per_s=t.number("bandwidth_gb_per_s", positive=True),
        efficiency=t.number("efficiency", maximum=1.0, positive=True),
        latency_us=t.number("latency_us"),
        technology=t.text("technology", default=""),
        nvls=t.flag("nvls"),
        links=t.optional_whole("links"))
    if scale_up.nvls and node.arch not in ("hopper", "blackwell"):
        raise t._fail("nvls", "false unless [node] arch is 'hopper' or 'blackwell' (NVLink "
                      f"SHARP needs NVSwitch3 and Hopper+; arch is {node.arch!r})", True)
    if scale_up.domain_gpus % node.gpus:
        raise t._fail("domain_gpus",
                      f"a multiple of [node] gpus ({node.gpus}): an NVLink domain holds whole "
                      "nodes",
                      scale_up.domain_gpus)
    t.done()
    return scale_up


def _tier(tt: _Table, leaf: bool, top: bool, downlinks_per_node: int) -> TierSpec:
    """Tier 0 (``leaf``) names ``nodes_per_switch``; the ``top`` tier needs no uplinks."""
    nodes_per_switch = tt.whole("nodes_per_switch") if leaf else None
    tier = TierSpec(
        name=tt.text("name"),
        latency_us=tt.number("latency_us"),
        port_speed_gbit_per_s=tt.number("port_speed_gbit_per_s", positive=True),
        nodes_per_switch=nodes_per_switch,
        uplink_ports=tt.whole("uplink_ports", minimum=0 if top else 1,
                              default=0 if top else _MISSING),
        ports=tt.optional_whole("ports"))
    if nodes_per_switch is not None and tier.ports is not None:
        down = nodes_per_switch * downlinks_per_node
        if down + tier.uplink_ports > tier.ports:
            raise tt._fail("ports", f"at least {down} downlinks + {tier.uplink_ports} "
                           "uplinks (lower nodes_per_switch or uplink_ports)", tier.ports)
    tt.done()
    return tier


def _scale_out(t: _Table, node: NodeSpec) -> ScaleOutSpec:
    nics = t.whole("nics_per_node")
    if node.gpus % nics:
        raise t._fail("nics_per_node", f"a divisor of [node] gpus ({node.gpus})", nics)
    wiring = t.text("wiring", WIRINGS)
    raw_tiers = t.get("tiers")
    if not isinstance(raw_tiers, list) or not 1 <= len(raw_tiers) <= 2:
        raise t._fail("tiers", "1 or 2 [[scale_out.tiers]] tables (leaf, then optional spine)",
                      raw_tiers)
    downlinks_per_node = 1 if wiring == "rail" else nics
    tiers = tuple(_tier(_Table(raw, f"[[scale_out.tiers]] #{i + 1}", t.source), leaf=i == 0,
                        top=i == len(raw_tiers) - 1, downlinks_per_node=downlinks_per_node)
                  for i, raw in enumerate(raw_tiers))
    scale_out = ScaleOutSpec(
        nics_per_node=nics,
        speed_gbit_per_s=t.number("speed_gbit_per_s", positive=True),
        efficiency=t.number("efficiency", maximum=1.0, positive=True),
        nic_latency_us=t.number("nic_latency_us"),
        pcie_gb_per_s=t.number("pcie_gb_per_s", positive=True),
        wiring=wiring,
        tiers=tiers,
        nic=t.text("nic", default=""),
        sharp=t.flag("sharp"),
        pxn=t.flag("pxn", default=True),
        transport=t.text("transport", TRANSPORTS, default="infiniband"),
        net_plugin=t.text("net_plugin", default=""),
        tuner_plugin=t.text("tuner_plugin", default=""),
        tuner=t.text("tuner", TUNERS, default=""),
        instance_type=t.text("instance_type", default=""))
    if scale_out.tuner and (scale_out.transport != "efa"
                            or scale_out.net_plugin != "aws-ofi-nccl"):
        raise t._fail("tuner", "\"aws-ofi-nccl\" only with transport = \"efa\" and net_plugin = "
                      "\"aws-ofi-nccl\" (the plugin's tuner runs with its net plugin)",
                      scale_out.tuner)
    if scale_out.tuner and scale_out.instance_type not in P5_INSTANCE_TYPES:
        raise t._fail("instance_type", f"one of {', '.join(P5_INSTANCE_TYPES)} (the instance "
                      "types whose aws-ofi-nccl tuner table is modelled), or leave tuner out",
                      scale_out.instance_type)
    if scale_out.transport == "efa" and not scale_out.net_plugin:
        raise t._fail("net_plugin", "the NCCL net plugin that drives EFA (NCCL has no EFA "
                      "transport of its own): net_plugin = \"aws-ofi-nccl\"", "")
    if scale_out.sharp and scale_out.transport != "infiniband":
        raise t._fail("sharp", f"false unless transport is 'infiniband' (SHARP / CollNet runs "
                      f"in InfiniBand switches; transport is {scale_out.transport!r})", True)
    t.done()
    return scale_out


def parse_spec(data: dict, source: str) -> TopologySpec:
    """Validate a parsed TOML document; ``source`` names the file in errors."""
    top = _Table(data, "", source)
    schema = top.whole("schema", default=SCHEMA_VERSION)
    if schema != SCHEMA_VERSION:
        raise top._fail("schema", f"{SCHEMA_VERSION} (the only schema version)", schema)
    name = top.text("name")
    description = top.text("description", default="")
    references = top.get("references", [])
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise top._fail("references", "a list of strings", references)

    node = _node(top.table("node"))
    scale_up = _scale_up(top.table("scale_up"), node)
    t = top.optional_table("scale_out")
    scale_out = None if t is None else _scale_out(t, node)
    base_latency = 0.0
    t = top.optional_table("collective")
    if t is not None:
        base_latency = t.number("base_latency_us")
        t.done()

    default_nodes = top.whole("default_nodes", default=1)
    max_nodes = top.optional_whole("max_nodes")
    if max_nodes is not None and default_nodes > max_nodes:
        raise top._fail("default_nodes", f"at most max_nodes ({max_nodes})", default_nodes)
    top.done()
    return TopologySpec(name=name, description=description, source=source,
                        default_nodes=default_nodes, max_nodes=max_nodes, node=node,
                        scale_up=scale_up, scale_out=scale_out, base_latency_us=base_latency,
                        references=tuple(references))
