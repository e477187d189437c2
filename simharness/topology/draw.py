"""A picture of a cluster: nodes (with their GPUs and NVLink domains), NICs
wired to leaf switches (coloured by rail), and the spine. Written as SVG by
hand (no dependency); PNG only where matplotlib is installed.

>>> from simharness.topology import load_cluster
>>> svg = to_svg(load_cluster("dgx-h100-superpod", nodes=2))
>>> svg.startswith("<svg") and svg.count('class="leaf"')
8
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from .cluster import Cluster
from .errors import TopologyError

MAX_NODES = 32
RAIL_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf")
_SQ, _GAP, _COLS = 8, 2, 8


def _shapes(cluster: Cluster) -> tuple[list[tuple], int, int]:
    """Drawing primitives ``(kind, ...)`` and the canvas size."""
    shown = min(cluster.nodes, MAX_NODES)
    gpn = cluster.gpus_per_node
    cols = min(gpn, _COLS)
    rows = -(-gpn // cols)
    node_w = max(cols * (_SQ + _GAP) + 12, 12 * max(cluster.nics_per_node, 1) + 12)
    node_h = rows * (_SQ + _GAP) + 26
    pitch = node_w + 14
    y_spine, y_leaf, y_node = 60, 160, 290
    title = (f"{cluster.spec.name}: {cluster.nodes} nodes, {cluster.n_devices} GPUs, "
             f"{cluster.n_domains} NVLink domain(s) of {cluster.domain_gpus}, "
             f"{cluster.n_nics} NICs, {cluster.n_leaves} leaves"
             + (", spine" if cluster.has_spine else ""))
    width = max(pitch * shown + 40, 420, int(7.5 * len(title)) + 40)  # ~7.5 px per character
    height = y_node + node_h + 60
    out: list[tuple] = []
    out.append(("text", 20, 24, title, 14, "start", "title"))
    if shown < cluster.nodes:
        out.append(("text", 20, 42, f"first {shown} of {cluster.nodes} nodes drawn", 11, "start",
                    "note"))
    x0 = 20
    node_x = [x0 + i * pitch for i in range(shown)]
    # NVLink domains spanning several nodes: one shaded box around them.
    npd = cluster.spec.nodes_per_domain
    if npd > 1:
        for first in range(0, shown, npd):
            last = min(first + npd, shown) - 1
            out.append(("rect", node_x[first] - 5, y_node - 8, node_x[last] + node_w - node_x[first]
                        + 10, node_h + 16, "#fff3d6", "#d9a400",
                        f"NVLink domain {first // npd}", "domain"))
    leaf_pos: dict[int, tuple[float, float]] = {}
    if cluster.n_nics:
        leaves = sorted({int(cluster.leaf_of(n * gpn + j)) for n in range(shown)
                         for j in range(gpn)})
        leaf_pitch = max((width - 40) / max(len(leaves), 1), 40)
        for i, leaf in enumerate(leaves):
            x = 20 + i * leaf_pitch + leaf_pitch / 2
            leaf_pos[leaf] = (x, y_leaf)
    if cluster.has_spine and leaf_pos:
        sx = width / 2
        for x, y in leaf_pos.values():
            out.append(("line", x, y, sx, y_spine + 14, "#888888", "uplink"))
        out.append(("rect", sx - 60, y_spine - 10, 120, 24, "#e8e8e8", "#555555", "spine",
                    "spine"))
        out.append(("text", sx, y_spine + 6, "spine", 11, "middle", "label"))
    per_nic = gpn // cluster.nics_per_node if cluster.n_nics else 0
    for i in range(shown):
        x = node_x[i]
        # NIC -> leaf cables first, so boxes draw on top.
        for nic in range(cluster.nics_per_node):
            leaf = int(cluster.leaf_of(i * gpn + nic * per_nic))
            lx, ly = leaf_pos[leaf]
            rail = int(cluster.rail_of(i * gpn + nic * per_nic))
            nx_ = x + 12 + nic * 12
            out.append(("line", nx_, y_node, lx, ly + 12, RAIL_COLOURS[rail % len(RAIL_COLOURS)],
                        "cable"))
        fill = "#dff0d8" if npd == 1 else "#ffffff"
        out.append(("rect", x, y_node, node_w, node_h, fill, "#3c763d",
                    f"node {i}" + (" (one NVLink domain)" if npd == 1 else ""), "node"))
        out.append(("text", x + node_w / 2, y_node + node_h - 6, f"node {i}", 10, "middle",
                    "label"))
        for g in range(gpn):
            r, c = divmod(g, cols)
            out.append(("rect", x + 6 + c * (_SQ + _GAP), y_node + 14 + r * (_SQ + _GAP), _SQ,
                        _SQ, "#76b900", "#2d4700", cluster.device_name(i * gpn + g), "gpu"))
        for nic in range(cluster.nics_per_node):
            out.append(("rect", x + 9 + nic * 12, y_node - 3, 6, 6, "#333333", "#333333",
                        f"nic {i * cluster.nics_per_node + nic}", "nic"))
    for leaf, (x, y) in leaf_pos.items():
        rail = leaf % cluster.nics_per_node if cluster.rail_wired else 0
        colour = RAIL_COLOURS[rail % len(RAIL_COLOURS)] if cluster.rail_wired else "#555555"
        label = f"leaf {leaf}" + (f" rail {rail}" if cluster.rail_wired else "")
        out.append(("rect", x - 18, y - 10, 36, 22, "#f5f5f5", colour, label, "leaf"))
        out.append(("text", x, y + 5, f"L{leaf}", 9, "middle", "label"))
    return out, int(width), int(height)


def to_svg(cluster: Cluster) -> str:
    """The picture as an SVG document (a string)."""
    shapes, w, h = _shapes(cluster)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" font-family="sans-serif">',
             f'<rect width="{w}" height="{h}" fill="white"/>']
    for s in shapes:
        if s[0] == "rect":
            _, x, y, rw, rh, fill, stroke, tip, cls = s
            parts.append(f'<rect class="{cls}" x="{x:.1f}" y="{y:.1f}" width="{rw:.1f}" '
                         f'height="{rh:.1f}" fill="{fill}" stroke="{stroke}"><title>'
                         f'{escape(tip)}</title></rect>')
        elif s[0] == "line":
            _, x1, y1, x2, y2, colour, cls = s
            parts.append(f'<line class="{cls}" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" '
                         f'y2="{y2:.1f}" stroke="{colour}" stroke-width="1"/>')
        else:
            _, x, y, text, size, anchor, cls = s
            parts.append(f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" font-size="{size}" '
                         f'text-anchor="{anchor}">{escape(text)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _to_png(cluster: Cluster, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise TopologyError(f"cannot write {path}: PNG output needs matplotlib, which is not "
                            "installed; write an .svg file instead") from None
    shapes, w, h = _shapes(cluster)
    fig = plt.figure(figsize=(w / 100, h / 100), dpi=100)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, w)
    ax.set_ylim(h, 0)
    ax.axis("off")
    for s in shapes:
        if s[0] == "rect":
            ax.add_patch(Rectangle((s[1], s[2]), s[3], s[4], facecolor=s[5], edgecolor=s[6],
                                   linewidth=0.8))
        elif s[0] == "line":
            ax.plot([s[1], s[3]], [s[2], s[4]], color=s[5], linewidth=0.6)
        else:
            ax.text(s[1], s[2], s[3], fontsize=s[4] * 0.75,
                    ha={"start": "left", "middle": "center"}[s[5]])
    fig.savefig(path)
    plt.close(fig)


def write_picture(cluster: Cluster, path: str | Path) -> Path:
    """Write ``path`` (``.svg``, or ``.png`` with matplotlib); returns the path."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".svg":
        path.write_text(to_svg(cluster))
    elif suffix == ".png":
        _to_png(cluster, path)
    else:
        raise TopologyError(f"cannot write {str(path)!r}: --out takes a .svg or .png file name")
    return path
