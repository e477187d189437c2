"""Measures of the house: line counts, docs pages, tests per tier, modules over 750 lines, the
import graph's cycles, and who imports torch.distributed and simharness.replay.

    python scripts/house.py [CHECKOUT]

Reads the source only (nothing is imported); the rules themselves are enforced by
tests/unit/architecture/test_import_rules.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.import_graph import cycles, external, graph, imports  # noqa: E402


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def main(root: Path) -> None:
    print(f"README.md lines: {lines(root / 'README.md')}")
    print(f"docs/ pages: {len(list((root / 'docs').glob('*.md')))}")
    src = sorted((root / "simharness").rglob("*.py"))
    big = sorted(((lines(p), p.relative_to(root)) for p in src if lines(p) > 750), reverse=True)
    print(f"simharness modules: {len(src)}, lines: {sum(map(lines, src))}, over 750: "
          + (", ".join(f"{p} {n}" for n, p in big) or "none"))
    tests = root / "tests"
    print(f"files directly in tests/: {len([p for p in tests.glob('*') if p.is_file()])}; "
          f"test modules: {len(list(tests.rglob('test_*.py')))}, by folder: "
          + ", ".join(f"{d.name} {len(list(d.rglob('test_*.py')))}"
                      for d in sorted(tests.iterdir()) if d.is_dir()))
    names = {p.stem for p in tests.rglob("test_*.py")}
    cross = [f"{p.relative_to(root)} -> {m}" for p in tests.rglob("*.py")
             for m in imports(root, p) if m.split(".")[-1] in names - {p.stem}]
    print(f"test modules importing another test module: {len(cross)}")
    g = graph(root)
    print(f"import cycles in simharness/: {len(cycles(g))}")
    td = sorted(m for m, ns in external(root).items()
                if any(n == "torch.distributed" or n.startswith("torch.distributed.") for n in ns))
    print(f"modules importing torch.distributed: {len(td)}: {', '.join(td)}")
    rep = sorted(m for m, deps in g.items() if not m.startswith("simharness.replay")
                 and any(d.startswith("simharness.replay") for d in deps))
    print(f"modules outside simharness.replay importing it: {', '.join(rep) or 'none'}")
    print(f"'_validate=False' in simharness/: "
          f"{sum(p.read_text().count('_validate=False') for p in src)}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
