"""``simharness topology list|show|cost``, ``simharness place``, ``simharness simulate``.

The commands parse flags, call :mod:`simharness.topology` (placement, and
:func:`~simharness.topology.sizing.cluster_for` for the cluster size) and
:mod:`simharness.step` (the step model), and format the result;
:func:`place_report` and :func:`simulate_report` take a ready layout.
"""

from __future__ import annotations

import math
import re
from typing import Any

import click

from ..step import SCHEDULES, SimulateInputs, job_stages, place_and_simulate
from ..step.report import scenario_lines
from ..topology import TopologyError, list_topologies, load_cluster, load_spec
from ..topology.cluster import Cluster
from ..topology.draw import write_picture
from ..topology.locality import analyse
from ..topology.placement import place_layout, read_hosts
from ..topology.sizing import cluster_for
from .common import config_options, layout_from_options, output_options
from .errors import fail
from .options import dp_impl_from_options, launch_from_options, megatron_args_options
from .output import echo, echo_findings, findings_exit_code, findings_verdict, render_table, to_json

_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
          "ki": 2 ** 10, "mi": 2 ** 20, "gi": 2 ** 30, "ti": 2 ** 40}


class ByteSize(click.ParamType):
    """A byte count: ``140e9``, ``140G``/``140GB`` (decimal) or ``64GiB`` (binary)."""

    name = "bytes"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]i?)?[bB]?\s*",
                         str(value))
        if not m:
            self.fail(f"{value!r} is not a byte count; write e.g. 140e9, 140GB or 64GiB",
                      param, ctx)
        return float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]


def _table(headers: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    return render_table(headers, [["-" if v is None else v for v in r] for r in rows],
                        align=align)


def _gbps(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.1f}"


def cluster_line(cluster: Cluster) -> str:
    s = cluster.summary()
    net = (f", {s['nics']} NICs ({s.get('nic_gbit_per_s', 0):g} Gb/s), "
           f"{s['rails'] or 'no'} rails, {s['leaves']} leaves" + (", spine" if s["spine"] else "")
           if cluster.n_nics else ", no network")
    return (f"{s['name']}: {s['nodes']} nodes, {s['gpus']} GPUs ({s['gpus_per_node']} per node), "
            f"{s['nvlink_domains']} NVLink domain(s) of {s['nvlink_domain_gpus']} at "
            f"{s['nvlink_gb_per_s']:g} GB/s{net}")


# ------------------------------------------------------------------ library-facing
def place_report(layout, cluster: Cluster, *, hosts=None, first_device=None) -> dict:
    """Placement, locality rows and findings of ``layout`` on ``cluster``."""
    placement = place_layout(layout, cluster, first_device=first_device, hosts=hosts)
    rows, findings = analyse(layout, placement)
    d = placement.devices
    return {"cluster": cluster, "placement": placement, "rows": rows, "findings": findings,
            "first": cluster.device_name(int(d[0])), "last": cluster.device_name(int(d[-1]))}


def format_place(report: dict, *, show_all: bool = False, quiet: bool = False) -> str:
    cluster, placement = report["cluster"], report["placement"]
    rows = report["rows"] if show_all else [r for r in report["rows"] if r.size > 1]
    headers = ["kind", "groups", "size", "board", "nvlink", "node", "rail", "leaf", "network",
               "spine", "hop_links", "step_us", "alone_GB/s", "concurrent_GB/s", "bottleneck"]
    body = [[r.kind, r.groups, r.size, r.in_board, r.in_nvlink, r.in_node, r.one_rail,
             r.one_leaf, r.network, r.spine, r.max_hop_links, f"{r.step_latency_us:.1f}",
             _gbps(r.alone_gb_per_s), _gbps(r.concurrent_gb_per_s), r.bottleneck or "-"]
            for r in rows]
    out = []
    if not quiet:
        first = placement.first_rank
        out.append(f"topology {cluster_line(cluster)}")
        out.append(f"placement ({placement.how}): ranks {first}..{first + placement.world_size - 1}"
                   f" on {report['first']} .. {report['last']}")
        out.append("columns board..spine count groups inside one board / NVLink domain / node / "
                   "rail / leaf, and groups using the network / the spine")
    out.append(_table(headers, body, align="l" + "r" * 13 + "l"))
    hidden = len(report["rows"]) - len(rows)
    if hidden and not quiet:
        out.append(f"({hidden} kinds of single-rank groups hidden; --all shows them)")
    return "\n".join(out)


def place_json(report: dict) -> dict:
    placement = report["placement"]
    return {"topology": report["cluster"].summary(), "placement": {
        "how": placement.how, "first_rank": placement.first_rank,
        "world_size": placement.world_size, "first_device": report["first"],
        "last_device": report["last"]},
        "locality": [r.to_dict() for r in report["rows"]],
        "findings": [f.to_dict() for f in report["findings"]]}


def simulate_report(layout, cluster: Cluster, *, hosts=None, first_device=None, **model) -> Any:
    """:func:`simharness.step.simulate` after placing ``layout``; ``model``: the fields of
    :class:`~simharness.step.SimulateInputs`."""
    return place_and_simulate(layout, cluster, SimulateInputs(**model), hosts=hosts,
                              first_device=first_device)


def format_simulate(rep, cluster: Cluster, *, quiet: bool = False, explain: bool = False) -> str:
    ms = lambda s: f"{s * 1e3:.3f}"  # noqa: E731
    out = []
    g = rep.groups
    if not quiet:
        out.append(f"topology {cluster_line(cluster)}")
        sched = ("Megatron-FSDP: all-gather before each unit's forward and backward, "
                 "reduce-scatter after its backward" if rep.schedule == "fsdp" else
                 "distributed optimizer (overlap_grad_reduce + overlap_param_gather): bucket "
                 "all-gathers in the forward, bucket reduce-scatters in the backward, both on "
                 "the data-parallel group")
        out.append(f"schedule {rep.schedule}: {sched}; NCCL {rep.nccl}")
        groups = f"dense reduce-scatter over {g['dense_rs']}, all-gather over {g['dense_ag']}"
        if "exp_rs" in g:
            groups += f"; expert reduce-scatter over {g['exp_rs']}, all-gather over {g['exp_ag']}"
        out.append(groups)
        out.append(f"compute {rep.compute_how}")
        for note in rep.notes:
            out.append(note)
    counts = [sum(s.layers) for s in rep.stages]
    uneven = len(set(counts)) > 1
    rows = [[s.stage, "+".join(map(str, s.layers)) if len(s.layers) > 1 else s.layers[0],
             s.first_layer, f"{s.dense_bytes / 1e6:.1f}", f"{s.expert_bytes / 1e6:.1f}",
             ms(s.forward_s), ms(s.backward_s), ms(s.one.step_s), ms(s.separate.step_s),
             f"{s.gain_pct:.1f}%"] for s in rep.stages]
    out.append(_table(["stage", "layers", "first_layer", "dense_MB/rank", "expert_MB/rank",
                       "fwd_ms", "bwd_ms", "one_ms", "separate_ms", "gain"], rows,
                      align="r" * 10))
    if uneven:
        out.append(f"uneven pipeline stages: {min(counts)} to {max(counts)} layers per stage")
    out.append(_table(["collective (worst stage)", "group", "ranks", "size_MB", "calls",
                       "nccl_pick", "CTAs", "alone_ms"],
                      [[c.what, c.group, c.group_size, f"{c.size_bytes / 1e6:.1f}", c.count,
                        c.pick, c.channels, ms(c.alone_s)] for c in rep.collectives],
                      align="llrrrlrr"))
    out.append(f"latency share {rep.latency_share:.0%}; "
               + (rep.shared_slowdown_words or f"a collective runs up to "
                  f"{rep.shared_slowdown:.2f}x slower while the others move data"))
    if explain:
        shown = set()
        for c in rep.collectives:
            if not c.options:
                continue
            out.append("")
            if (c.group, c.what) not in shown:  # the group's graph search and tuning table
                shown.add((c.group, c.what))
                out.extend(c.debug)
            tuned = any(x.startswith("tuner plugin:") and "MODELLED" in x for x in c.debug)
            out.append(f"{c.what} {c.size_bytes / 1e6:.1f} MB: NCCL's table for {c.shape} "
                       + ("(least time wins for NCCL's own tuner; with the tuner plugin, where "
                          f"its regions decide, the pick is its own: here {c.pick})" if tuned
                          else "(least time wins)"))
            out.append(_table(["algo/proto", "latency_us", "algbw_GB/s", "time_us"],
                              [list(o) for o in c.options], align="lrrr"))
    out.append("")
    w = rep.stages[rep.worst_stage]
    out.append(_table(["step (slowest stage)", "step_ms", "exposed_comm_ms", "overlapped_ms"], [
        ["one communicator", ms(rep.one.step_s), ms(rep.one.exposed_s), ms(rep.one.overlap_s)],
        ["separate all-gather communicator", ms(rep.separate.step_s),
         ms(rep.separate.exposed_s), ms(rep.separate.overlap_s)]], align="lrrr"))
    out.append(_table(["sharing scenario", "one_ms", "separate_ms", "gain"],
                      [[sc.name, ms(sc.one_step_s), ms(sc.separate_step_s),
                        f"{sc.gain_pct:.1f}%"] for sc in rep.scenarios], align="lrrr"))
    if not quiet:
        out.extend(scenario_lines(rep.scenarios))
    lo, hi = rep.gain_range_pct
    gain = f"{lo:.1f}% to {hi:.1f}%" if abs(hi - lo) >= 0.05 else f"{lo:.1f}%"
    out.append(f"gain of create_all_gather_group: {gain} of the step over the scenarios "
               f"(links only: {ms(rep.gain_s)} ms, slowest stage {w.stage}); memory: "
               f"+{rep.extra_memory_mb:.0f} MB per GPU ("
               + " + ".join(f"{k} {mb:.0f} MB" for k, mb in rep.comm_memories) + ")"
               + (f", {rep.memory_words}" if rep.memory_words else ""))
    for e in rep.model_errors:
        out.append(f"cost model error, {e.words()}")
    if rep.error_range_pct is not None:
        elo, ehi = rep.error_range_pct
        out.append(f"gain with every collective as slow (p10) or as fast (p90) as that error "
                   f"allows: {elo:+.1f}% to {ehi:+.1f}% of the step")
    if not quiet:
        out.extend(f"communicator memory, {line}" for line in rep.memory_lines)
        out.append("the model cannot know: " + "; ".join(rep.unknowns))
    out.append(f"verdict: {rep.verdict}")
    return "\n".join(out)


# ------------------------------------------------------------------ flag handling
def _layout_and_cluster(topology: str, kwargs: dict, *, hosts_list, first_device):
    """Build the layout from the config flags and the cluster it runs on.

    ``--nodes`` sizes the cluster; without ``--world-size`` the world fills it
    (nodes x the topology's GPUs per node). With neither (nor ``--config`` or
    ``--hosts``) the cluster is the file's ``default_nodes``. Otherwise the
    cluster has just enough nodes for the ranks (or the host list):
    :func:`~simharness.topology.sizing.cluster_for`.
    """
    spec = load_spec(topology)
    gpn = spec.node.gpus
    given_gpn = kwargs.get("gpus_per_node")
    if given_gpn is not None and given_gpn != gpn:
        raise TopologyError(f"--gpus-per-node {given_gpn} contradicts topology {spec.name!r} "
                            f"({gpn} GPUs per node); drop --gpus-per-node")
    nodes = kwargs.get("nodes")
    world_given = kwargs.get("world_size") is not None or any(
        entry[0] == "world_size" for entry in kwargs.get("set_fields") or ())
    if nodes is None and not world_given and not kwargs.get("config_file") and not hosts_list:
        nodes = spec.default_nodes  # no size given: fill the topology's default cluster
    opts = dict(kwargs, gpus_per_node=gpn, nodes=nodes)
    if kwargs.get("config_file"):  # the file's GPUs per node against the topology's
        from ..configfile import read_config_file

        cf = read_config_file(kwargs["config_file"])
        if cf.gpus_per_node is not None and cf.gpus_per_node != gpn and given_gpn is None:
            if not hosts_list:
                raise TopologyError(
                    f"{cf.path} runs {cf.gpus_per_node} GPUs per node but topology "
                    f"{spec.name!r} has {gpn}; pick a topology with {cf.gpus_per_node} GPUs "
                    f"per node, or pass --hosts to say where each rank runs")
            opts["gpus_per_node"] = None  # the file's world; --hosts places the ranks
    if world_given:
        opts["nodes"] = None  # --nodes sizes the cluster, --world-size the layout
    layout = layout_from_options(**opts)
    # derived (nodes is None): errors must not name a --nodes the user never gave
    return layout, cluster_for(spec, layout, nodes=nodes, first_device=first_device,
                               hosts=hosts_list)


# ------------------------------------------------------------------ commands
@click.group("topology")
def topology_group():
    """Cluster topologies (topologies/*.toml, or your own file).

    \b
    Examples:
      simharness topology list
      simharness topology show dgx-h100-superpod --nodes 4
      simharness topology cost dgx-h100-superpod --nodes 2 --collective all_gather
    """


@topology_group.command("list")
@output_options(formats=("table", "json"), show_all=False)
def topology_list(fmt, quiet):
    """List the shipped topologies.

    \b
    Examples:
      simharness topology list
      simharness topology list --format json
    """
    specs = [load_spec(n) for n in list_topologies()]
    if fmt == "json":
        echo(to_json([{"name": s.name, "description": s.description,
                       "gpus_per_node": s.node.gpus,
                       "nvlink_domain_gpus": s.scale_up.domain_gpus,
                       "default_nodes": s.default_nodes, "max_nodes": s.max_nodes,
                       "file": s.source} for s in specs]))
        return
    rows = [[s.name, s.node.gpus, s.scale_up.domain_gpus, s.default_nodes,
             s.max_nodes or "-", s.description] for s in specs]
    echo(_table(["name", "gpus/node", "nvlink_domain", "default_nodes", "max_nodes",
                 "description"], rows, align="lrrrrl"))


@topology_group.command("show")
@click.argument("name")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Node count (default: the file's default_nodes).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Write a picture of the node/switch graph: FILE.svg (or FILE.png "
                   "where matplotlib is installed).")
@output_options(formats=("table", "json"), show_all=False)
def topology_show(name, nodes, out, fmt, quiet):
    """Summarise topology NAME (a shipped name or a .toml path) as a graph.

    \b
    Examples:
      simharness topology show dgx-h100
      simharness topology show dgx-h100-superpod --nodes 4 --out superpod.svg
      simharness topology show my-cluster.toml --format json
    """
    cluster = load_cluster(name, nodes)
    graph = cluster.graph()
    kinds: dict[str, int] = {}
    for _, k in graph.nodes(data="kind"):
        kinds[k] = kinds.get(k, 0) + 1
    tiers: dict[str, dict] = {}
    for _, _, e in graph.edges(data=True):
        t = tiers.setdefault(e["tier"], {"links": 0, "bandwidth_gb_per_s": e[
            "bandwidth_gb_per_s"], "effective_gb_per_s": e["capacity_gb_per_s"],
            "latency_us": e["latency_us"]})
        t["links"] += 1
    summary = dict(cluster.summary(), graph_nodes=graph.number_of_nodes(),
                   graph_edges=graph.number_of_edges(), node_kinds=kinds, tiers=tiers,
                   references=list(cluster.spec.references))
    if out:
        summary["picture"] = str(write_picture(cluster, out))
    if fmt == "json":
        echo(to_json(summary))
        return
    lines = [cluster_line(cluster)] if not quiet else []
    if not quiet and cluster.spec.description:
        lines.append(cluster.spec.description)
    lines.append(f"graph: {summary['graph_nodes']} nodes "
                 f"({', '.join(f'{v} {k}' for k, v in kinds.items())}), "
                 f"{summary['graph_edges']} links")
    lines.append(_table(["tier", "links", "GB/s_per_dir", "effective_GB/s", "latency_us"],
                        [[k, v["links"], f"{v['bandwidth_gb_per_s']:g}",
                          f"{v['effective_gb_per_s']:.1f}", f"{v['latency_us']:g}"]
                         for k, v in tiers.items()], align="lrrrr"))
    if out:
        lines.append(f"wrote {summary['picture']}")
    echo("\n".join(lines))


DEFAULT_COST_SIZES = tuple(float(1 << k) for k in (10, 13, 16, 19, 22, 25, 28, 31, 33))


@topology_group.command("cost")
@click.argument("name")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Nodes of the cluster and of the group (default: the file's default_nodes).")
@click.option("--ranks-per-node", type=click.IntRange(min=1), default=None,
              help="GPUs of each node in the group, first GPUs first (default: all).")
@click.option("--collective", default="all_reduce", show_default=True,
              help="all_reduce, all_gather or reduce_scatter.")
@click.option("--size", "sizes", type=ByteSize(), multiple=True,
              help="Message size (nccl-tests convention), repeatable; default 1KB..8GB.")
@click.option("--algo", default=None, help="Force an algorithm (like NCCL_ALGO).")
@click.option("--proto", default=None, help="Force a protocol (like NCCL_PROTO).")
@click.option("--collnet", is_flag=True, default=False,
              help="Let NCCL use CollNet (SHARP) where the switches have it.")
@click.option("--nccl", "nccl", default="2.28", show_default=True, metavar="2.23|2.28",
              help="NCCL release whose search, tuning and enable rules are modelled.")
@click.option("--explain", is_flag=True, default=False,
              help="Also print NCCL's graph search and tuning table, as NCCL_DEBUG=INFO "
                   "NCCL_DEBUG_SUBSYS=GRAPH,TUNING shows them.")
@output_options(formats=("table", "json"), show_all=False)
def topology_cost(name, nodes, ranks_per_node, collective, sizes, algo, proto, collnet, nccl,
                  explain, fmt, quiet):
    """NCCL's pick and cost of one collective over a group of NAME, size by size.

    Columns as nccl-tests prints them: time (us), algbw = size / time and
    busbw = algbw x the bus factor (GB/s); then NCCL's pick, the CTAs its
    kernel launches (channels of the plan) and NCCL's own table entry (lat_us,
    bw_GB/s) behind the pick.

    \b
    Examples:
      simharness topology cost dgx-h100
      simharness topology cost dgx-h100-superpod --nodes 4 --collective all_gather --size 1GB
      simharness topology cost dgx-h100-superpod --nodes 2 --ranks-per-node 1 --format json
      simharness topology cost dgx-h100-superpod --nodes 2 --nccl 2.23 --explain
    """
    from ..topology.cost import build_rings, predict, shape_of
    from ..topology.nccl_model import debug_lines, nccl_version

    version = nccl_version(nccl)
    cluster = load_cluster(name, nodes)
    gpn = cluster.gpus_per_node
    rpn = gpn if ranks_per_node is None else ranks_per_node
    if rpn > gpn:
        raise TopologyError(f"--ranks-per-node {rpn} exceeds the {gpn} GPUs of a node of "
                            f"{cluster.spec.name!r}")
    devices = [n * gpn + i for n in range(cluster.nodes) for i in range(rpn)]
    sizes = sizes or DEFAULT_COST_SIZES
    rows = [predict(cluster, devices, collective, s, algo=algo, proto=proto, collnet=collnet,
                    nccl=version) for s in sizes]
    if fmt == "json":
        echo(to_json([{"size": e.size_bytes, "time_us": e.time_us,
                       "algbw_gb_per_s": e.algbw_measured_gb_per_s,
                       "busbw_gb_per_s": e.busbw_gb_per_s, "pick": e.pick,
                       "channels": e.n_channels, "nccl_latency_us": e.latency_us,
                       "nccl_bw_gb_per_s": e.algbw_gb_per_s,
                       "pipeline_fill_us": e.ramp_us - e.transport_us,
                       "network_transport_us": e.transport_us,
                       "nccl": version} for e in rows]))
        return
    if not quiet:
        echo(f"topology {cluster_line(cluster)}")
        echo(f"{rows[0].collective} over {len(devices)} GPUs ({rpn} per node), NCCL {version}")
    if explain:
        shape = shape_of(cluster, build_rings(cluster, [devices]), 0, collnet=collnet)
        echo("\n".join(debug_lines(shape, rows[0].collective, nccl=version)))
    echo(_table(["size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "nccl_pick", "channels",
                 "lat_us", "bw_GB/s"],
                [[f"{e.size_bytes:.0f}", f"{e.time_us:.1f}", _gbps(e.algbw_measured_gb_per_s),
                  _gbps(e.busbw_gb_per_s), e.pick, e.n_channels, f"{e.latency_us:.1f}",
                  f"{e.algbw_gb_per_s:.1f}"] for e in rows], align="rrrrlrrr"))


placement_opts = [
    click.option("--topology", "topology", required=True, metavar="NAME|FILE",
                 help="Topology name (simharness topology list) or .toml file."),
    click.option("--hosts", "hosts", default=None, metavar="FILE|LIST",
                 help="Host of each rank, first rank first: a file (one host per line, "
                      "or 'host slots=N') or a comma-separated list."),
    click.option("--first-device", "first_device", type=click.IntRange(min=0), default=None,
                 help="Device index of the layout's first rank (default: its global rank, "
                      "torchrun order)."),
]


def with_placement(f):
    for opt in reversed(placement_opts):
        f = opt(f)
    return f


@click.command("place")
@config_options
@with_placement
@output_options(formats=("table", "json"))
@click.pass_context
def place_cmd(ctx, topology, hosts, first_device, fmt, quiet, show_all, **kwargs):
    """Map the layout's ranks onto a topology: locality per group kind and findings.

    --nodes sizes the cluster (and, without --world-size, the world). Exits 1
    when a finding is an error (a TP group leaving its NVLink domain).

    \b
    Examples:
      simharness place --topology dgx-h100-superpod --nodes 4 --tp 8 --pp 2
      simharness place --topology dgx-h100 -n 8 --tp 4 --cp 2 --format json
      simharness place --topology dgx-h100-superpod -n 32 --tp 8 --hosts hosts.txt
    """
    hosts_list = read_hosts(hosts) if hosts else None
    layout, cluster = _layout_and_cluster(topology, kwargs, hosts_list=hosts_list,
                                          first_device=first_device)
    report = place_report(layout, cluster, hosts=hosts_list, first_device=first_device)
    findings = report["findings"]
    if fmt == "json":
        echo(to_json(place_json(report)))
    else:
        echo(format_place(report, show_all=show_all, quiet=quiet))
        echo()
        echo_findings(findings)
        if not quiet:
            echo(findings_verdict(findings, strict=False))
    code = findings_exit_code(findings, strict=False)
    if code:
        ctx.exit(code)


_MODEL_FLAGS = [
    ("--hidden-size", "hidden_size", "Hidden size."),
    ("--ffn-hidden-size", "ffn_hidden_size", "Dense MLP width."),
    ("--num-attention-heads", "num_attention_heads", "Attention heads (default: 4 h^2 "
     "attention parameters)."),
    ("--num-query-groups", "num_query_groups", "Key/value heads (grouped-query attention)."),
    ("--kv-channels", "kv_channels", "Head dimension (default hidden / heads)."),
    ("--vocab-size", "vocab_size", "Vocabulary (embedding on the first stage, output layer "
     "on the last)."),
    ("--num-experts", "num_moe_experts", "Routed experts per MoE layer."),
    ("--moe-ffn-hidden-size", "moe_ffn_hidden_size", "FFN width of one expert."),
    ("--moe-router-topk", "moe_router_topk", "Experts per token."),
    ("--moe-shared-expert-size", "moe_shared_expert_intermediate_size",
     "FFN width of the shared expert(s)."),
    ("--moe-first-dense-layers", "moe_first_dense_layers", "Leading dense (non-MoE) layers."),
]

_SIMULATE_HELP = """Step model of the data-parallel collectives: one communicator vs a separate
all-gather communicator (create_all_gather_group), per pipeline stage.

The model is --model-bytes with --layers (--expert-bytes: the routed experts'
share, required with --ep > 1), or a description (--model-config FILE, a
Megatron YAML/JSON or Hugging Face config.json, and/or --hidden-size ...). Dense
parameters go on dp_cp, expert parameters on the expert-DP group (ep_dp). Compute is
--compute-ms (one layer's backward) or --mfu with --micro-batch-size and --seq-length
(FLOPs at that fraction of the topology's peak). Uneven pipelines take Megatron's
num_layers_in_first/last_pipeline_stage (--decoder-first/last-pipeline-num-layers) or
--account-for-embedding/loss-in-pipeline-split.

\b
Examples:
  simharness simulate --tp 8 --pp 4 --topology dgx-h100-superpod --nodes 64 \\
      --create-all-gather-group --model-bytes 140GB --layers 80 --compute-ms 8
  simharness simulate --pp 16 --ep 64 --topology dgx-h100-superpod --nodes 256 \\
      --model-config deepseek_v3.json --decoder-first-pipeline-num-layers 2 \\
      --decoder-last-pipeline-num-layers 3 --micro-batch-size 1 --seq-length 4096 --mfu 0.35
  simharness simulate --tp 8 --pp 4 --vpp 2 --topology dgx-h100-superpod --nodes 32 \\
      --schedule dist-opt --model-bytes 140GB --layers 80 --compute-ms 8
"""


def with_model(f):
    for flag, name, text in reversed(_MODEL_FLAGS):
        f = click.option(flag, name, type=click.IntRange(min=0), default=None, help=text)(f)
    return f


@click.command("simulate", help=_SIMULATE_HELP)
@config_options
@with_placement
@click.option("--model-bytes", type=ByteSize(), default=None,
              help="Parameter bytes of the whole model in the all-gather dtype, e.g. 140GB "
                   "(all dense, spread evenly over --layers).")
@click.option("--expert-bytes", type=ByteSize(), default=None,
              help="With --model-bytes: the routed experts' share, spread over the MoE layers "
                   "and gathered over the expert-DP group (required with --ep > 1).")
@click.option("--layers", type=click.IntRange(min=1), default=None,
              help="Transformer layers of the whole model (with --model-bytes; optional with "
                   "a description).")
@click.option("--model-config", type=click.Path(dir_okay=False), default=None,
              help="Megatron (YAML/JSON) or Hugging Face config.json of the model.")
@with_model
@click.option("--schedule", type=click.Choice(SCHEDULES), default=None,
              help="fsdp: Megatron-FSDP (the only reader of the all-gather group); dist-opt: "
                   "the distributed optimizer with overlap_grad_reduce/overlap_param_gather. "
                   "Default: from --dp-impl or the recipe's ddp: block, else fsdp.")
@click.option("--overlap-param-gather-with-optimizer-step", "opt_step", is_flag=True,
              default=False, help="dist-opt: dispatch every chunk's all-gather in the "
                                  "optimizer step (interleaved pipelines only).")
@click.option("--compute-ms", type=float, default=None,
              help="Backward compute time of one transformer layer (ms); or use --mfu.")
@click.option("--mfu", type=float, default=None,
              help="Model FLOPs utilisation in (0, 1]: compute from FLOPs at this fraction of "
                   "the GPU's peak (needs a model description and tokens).")
@click.option("--peak-tflops", type=float, default=None,
              help="Dense BF16 peak per GPU (default: the topology's [node] peak_bf16_tflops).")
@click.option("--micro-batch-size", type=click.IntRange(min=1), default=None,
              help="Sequences per micro-batch (tokens = this x --seq-length).")
@click.option("--seq-length", type=click.IntRange(min=1), default=None,
              help="Tokens per sequence.")
@click.option("--bytes-per-param", type=float, default=2.0, show_default=True,
              help="Bytes of one parameter in the all-gather dtype (2: bf16).")
@click.option("--decoder-first-pipeline-num-layers", "first_layers",
              type=click.IntRange(min=1), default=None,
              help="Layers of the first pipeline stage (num_layers_in_first_pipeline_stage).")
@click.option("--decoder-last-pipeline-num-layers", "last_layers",
              type=click.IntRange(min=1), default=None,
              help="Layers of the last pipeline stage (num_layers_in_last_pipeline_stage).")
@click.option("--account-for-embedding-in-pipeline-split", "acc_embedding", is_flag=True,
              default=None, help="Count the embedding as a layer of the first stage.")
@click.option("--account-for-loss-in-pipeline-split", "acc_loss", is_flag=True, default=None,
              help="Count the loss as a layer of the last stage.")
@click.option("--pipeline-model-parallel-layout", "pp_layout", default=None,
              help="Megatron's layer layout, e.g. 'Et*3|(tt|)*29,m|L' (E embedding, t layer, "
                   "m MTP layer (not priced), L loss, | between pp x vpp virtual stages); it "
                   "places every layer (--layers defaults to its t count).")
@click.option("--grad-scale", type=click.FloatRange(min=0), default=None,
              help="Gradient bytes per parameter byte (2 for fp32 grads of bf16 params). "
                   "Default: from the recipe's ddp.grad_reduce_in_fp32, else 1.")
@click.option("--rs-kind", default="dp_cp", show_default=True,
              help="Group kind of the dense gradient reduce-scatter.")
@click.option("--ag-kind", default=None,
              help="Group kind of the dense all-gather (fsdp; default the --rs-kind's "
                   "all-gather twin, e.g. dp_cp_ag, when the layout has it, else --rs-kind); "
                   "it must have the reduce-scatter group's ranks.")
@click.option("--nccl", default="2.28", show_default=True,
              help="NCCL release whose tuning and memory rules apply (2.23 or 2.28).")
@click.option("--comm-memory-mb", type=click.FloatRange(min=0), default=None,
              help="GPU memory of one NCCL communicator (default: computed from NCCL's "
                   "buffers per channel and protocol; the inputs are printed).")
@click.option("--collnet", is_flag=True, default=False,
              help="Let NCCL use CollNet (InfiniBand SHARP) where the topology's switches "
                   "have it (NCCL_COLLNET_ENABLE=1).")
@click.option("--one-launch-queue/--no-one-launch-queue", "launch_queue", default=None,
              help="Add the CUDA_DEVICE_MAX_CONNECTIONS=1 scenario (default: for dist-opt; "
                   "Megatron-LM refuses that setting with Megatron-FSDP).")
@click.option("--explain", is_flag=True, default=False,
              help="Print NCCL's algorithm/protocol table for each collective.")
@output_options(formats=("table", "json"), show_all=False)
@megatron_args_options()
def simulate_cmd(topology, hosts, first_device, model_bytes, expert_bytes, layers, model_config,
                 schedule,
                 opt_step, compute_ms, mfu, peak_tflops, micro_batch_size, seq_length,
                 bytes_per_param, first_layers, last_layers, acc_embedding, acc_loss,
                 pp_layout, grad_scale, rs_kind, ag_kind, nccl, comm_memory_mb, collnet,
                 launch_queue, explain, fmt, quiet, **kwargs):
    model_fields = {name: kwargs.pop(name) for _, name, _ in _MODEL_FLAGS}
    dp = dp_impl_from_options(**kwargs)
    launch, launch_from = launch_from_options(**kwargs)
    schedule, schedule_from = simulate_schedule(schedule, dp)
    grad_scale, grad_from = simulate_grad_scale(grad_scale, bytes_per_param, dp)
    hosts_list = read_hosts(hosts) if hosts else None
    layout, cluster = _layout_and_cluster(topology, kwargs, hosts_list=hosts_list,
                                          first_device=first_device)
    stages, _ = job_stages(layout.config, model_bytes=model_bytes, layers=layers,
                           model_fields=model_fields, model_config=model_config,
                           micro_batch_size=micro_batch_size, seq_length=seq_length,
                           bytes_per_param=bytes_per_param, first=first_layers,
                           last=last_layers, embedding=acc_embedding, loss=acc_loss,
                           expert_bytes=expert_bytes, pp_layout=pp_layout)
    inputs = SimulateInputs(stages=stages, schedule=schedule, compute_ms=compute_ms, mfu=mfu,
                            peak_tflops=peak_tflops, grad_scale=grad_scale,
                            bytes_per_param=bytes_per_param, rs_kind=rs_kind, ag_kind=ag_kind,
                            comm_memory_mb=comm_memory_mb, collnet=collnet, nccl=nccl,
                            param_gather_with_optimizer_step=opt_step,
                            launch_queue=launch_queue, **_reader_inputs(layout, schedule, dp,
                                                                        launch))
    rep = place_and_simulate(layout, cluster, inputs, hosts=hosts_list,
                             first_device=first_device)
    sources = {"schedule": [schedule, schedule_from], "grad_scale": [grad_scale, grad_from],
               "communicators": [launch, launch_from], "dp_impl": dp.to_dict()}
    if fmt == "json":
        echo(to_json(dict(rep.to_dict(), topology=cluster.summary(), inputs_from=sources)))
    else:
        if not quiet:
            echo(_sources_line(schedule, schedule_from, grad_scale, bytes_per_param, grad_from,
                               launch, launch_from, dp))
        echo(format_simulate(rep, cluster, quiet=quiet, explain=explain))


def simulate_schedule(schedule: str | None, dp) -> tuple[str, str]:
    """``(schedule, where it came from)``: ``--schedule``, else the implementation of
    ``--dp-impl`` or the recipe's ``ddp:`` block, else ``fsdp``; a flag that contradicts the
    implementation, or an implementation no schedule models, is refused."""
    implied = {"fsdp": "fsdp", "dist-opt": "dist-opt"}.get(dp.impl)
    if dp.impl not in ("unknown", "fsdp", "dist-opt") or (
            dp.impl == "fsdp" and dp.sharding == "no_shard"):
        fail(f"{dp.source} names {dp.name}, which simulate does not model: "
             f"{dp.sentence('0.19')}; simulate models Megatron-FSDP with a sharding strategy "
             f"(--schedule fsdp) and the distributed optimizer (--schedule dist-opt).")
    if schedule is not None:
        if implied is not None and implied != schedule:
            fail(f"--schedule {schedule} conflicts with {dp.source} ({dp.name}, schedule "
                 f"{implied}); give one of them.")
        return schedule, "--schedule"
    if implied is not None:
        return implied, dp.source
    return "fsdp", "default"


def simulate_grad_scale(grad_scale: float | None, bytes_per_param: float,
                        dp) -> tuple[float, str]:
    """``(gradient bytes per parameter byte, where it came from)``: ``--grad-scale``, else
    the recipe's ``ddp.grad_reduce_in_fp32`` (fp32: 4 bytes over --bytes-per-param), else 1;
    a flag that contradicts the recipe is refused."""
    from_recipe = None
    if dp.grad_reduce_in_fp32 is not None:
        from_recipe = 4.0 / bytes_per_param if dp.grad_reduce_in_fp32 else 1.0
    if grad_scale is not None:
        if from_recipe is not None and abs(grad_scale - from_recipe) > 1e-9:
            fail(f"--grad-scale {grad_scale:g} conflicts with {dp.source} grad_reduce_in_fp32 "
                 f"{str(dp.grad_reduce_in_fp32).lower()} (gradient scale {from_recipe:g} with "
                 f"--bytes-per-param {bytes_per_param:g}); give one of them.")
        return grad_scale, "--grad-scale"
    if from_recipe is not None:
        return from_recipe, f"{dp.source} grad_reduce_in_fp32"
    return 1.0, "default"


def _reader_inputs(layout, schedule: str, dp, launch: str) -> dict:
    """Who reads the AG group under the schedule, and the memory case, for SimulateInputs."""
    from ..ag_readers import AG_PROFILES, DPImpl, memory_case, memory_paid

    profile = layout.mcore if layout.mcore in AG_PROFILES else "0.19"
    modelled = dp if dp.impl != "unknown" else DPImpl(
        "fsdp" if schedule == "fsdp" else "dist-opt")
    read = modelled.reads(profile)
    return {"reader_words": modelled.sentence(profile),
            "memory_words": memory_case(launch, read),
            "memory_paid": memory_paid(launch, read)}


def _sources_line(schedule, schedule_from, grad_scale, bytes_per_param, grad_from, launch,
                  launch_from, dp) -> str:
    width = grad_scale * bytes_per_param
    dtype = ("fp32" if abs(width - 4.0) < 1e-9 else "the parameters' dtype"
             if abs(grad_scale - 1.0) < 1e-9 else f"{width:g} bytes per element")
    lines = [f"schedule {schedule} (from {schedule_from}); gradient reduce-scatter "
             f"{grad_scale:g} x the parameter bytes ({dtype}, from {grad_from}); communicators "
             f"{launch} (from {launch_from})"]
    if dp.impl == "dist-opt" and schedule == "dist-opt":
        off = [k for k in ("overlap_grad_reduce", "overlap_param_gather")
               if getattr(dp, k) is False]
        if off:
            lines.append(f"note: the dist-opt schedule models overlap_grad_reduce and "
                         f"overlap_param_gather on; {dp.source} has {', '.join(off)} off")
    return "\n".join([dp.describe()] + lines)


def register(main: click.Group) -> None:
    """Add ``topology``, ``place`` and ``simulate`` to the ``simharness`` group."""
    for command in (topology_group, place_cmd, simulate_cmd):
        main.add_command(command)
