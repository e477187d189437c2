"""The import graph of ``simharness/``, read from the source (no module is imported).

Every ``import`` and ``from ... import`` counts, at module level or inside a function,
except those under ``if TYPE_CHECKING:`` (they never run).

    >>> g = graph(ROOT)
    >>> "simharness.config" in g
    True
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(root: Path, path: Path) -> str:
    """``simharness/launch/toolbox.py`` -> ``simharness.launch.toolbox``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_nodes(tree: ast.AST):
    """The nodes of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports(root: Path, path: Path) -> set[str]:
    """Absolute names of every module (and imported name) ``path`` imports at run time."""
    mod = module_name(root, path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")
                up = up[: len(up) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the simharness modules it imports (itself left out)."""
    files = sorted((root / "simharness").rglob("*.py"))
    mods = {module_name(root, f): f for f in files}
    return {name: {m for m in imports(root, f) if m in mods and m != name}
            for name, f in mods.items()}


def external(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> every name it imports, simharness's own included."""
    return {module_name(root, f): imports(root, f)
            for f in sorted((root / "simharness").rglob("*.py"))}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Groups of two or more modules that import each other, directly or not (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out
