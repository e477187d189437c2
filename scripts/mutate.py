#!/usr/bin/env python3
"""Mutation testing of the modules in tests/mutants/modules.toml with mutmut 3 (issue 18).

Each module runs on its own, in a scratch copy of the checkout (``.mutate/<module>/``,
ignored by git; the tree itself is never mutated), with only the tests its table names;
mutmut narrows those further, per function, to the tests that call the function.

    scripts/mutate.py run [MODULE ...]        # mutate (default: every module, in order)
    scripts/mutate.py score [MODULE ...]      # killed / (mutants - equivalents), per module
    scripts/mutate.py survivors MODULE        # each survivor's diff, not yet triaged
    scripts/mutate.py show MUTANT             # one mutant's diff
    scripts/mutate.py retest MODULE           # run the untriaged survivors again (new tests)
    scripts/mutate.py recheck MODULE          # each survivor applied by hand to a scratch copy,
                                              # the module's whole test list run on it

``make mutate`` runs ``run`` then ``score`` with one worker under ``nice``
(MUTATE_JOBS=N for more workers, MUTATE_MODULES="checks rules" for a subset).
Equivalent mutants are listed, with a one-line reason, in tests/mutants/equivalent.toml
and keyed by the function and the mutated line (not mutmut's number, which moves).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "tests" / "mutants" / "modules.toml"
EQUIVALENT = ROOT / "tests" / "mutants" / "equivalent.toml"
WORK = ROOT / ".mutate"
COPIED = ["simharness", "tests", "cli.py", "README.md", "CONTRIBUTING.md", "examples"]
# mutmut exit codes (mutmut.__main__.status_by_exit_code) counted as detected.
DETECTED = {"killed", "timeout", "segfault", "caught by type check", "suspicious"}


def load_modules() -> dict[str, dict]:
    return tomllib.loads(MODULES.read_text())


def load_equivalents() -> list[dict]:
    if not EQUIVALENT.exists():
        return []
    return tomllib.loads(EQUIVALENT.read_text()).get("mutant", [])


def _dotted(path: str) -> str:
    return path[:-3].replace("/", ".")


def prepare(name: str, mod: dict) -> Path:
    """A scratch copy of the checkout with mutmut's settings for this module."""
    work = WORK / name
    work.mkdir(parents=True, exist_ok=True)
    for item in COPIED:
        src, dst = ROOT / item, work / item
        if dst.is_dir():
            shutil.rmtree(dst)
        elif dst.exists():
            dst.unlink()
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dst)
    # package data and the fetched megatron-core wheels, shared read-only
    shutil.copytree(ROOT / "topologies", work / "simharness" / "topologies")
    cache = work / ".cache"
    if not cache.exists() and (ROOT / ".cache").exists():
        cache.symlink_to(ROOT / ".cache")
    tests = [str(t) for t in mod["tests"]]
    pyproject = (ROOT / "pyproject.toml").read_text()
    # -o addopts=: no doctest collection of the mutated copy (mutmut duplicates functions).
    settings = (
        "\n[tool.mutmut]\n"
        'source_paths = ["simharness"]\n'
        # the capture tests run examples/ scripts and cli.py from mutmut's mutants/ copy
        'also_copy = ["examples", "cli.py"]\n'
        f'only_mutate = [{json.dumps(mod["path"])}]\n'
        'pytest_add_cli_args = ["-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0", '
        '"-o", "addopts=", "-q"]\n'
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        "timeout_multiplier = 5.0\n"
        "timeout_constant = 10.0\n"
    )
    (work / "pyproject.toml").write_text(pyproject + settings)
    return work


def run(names: list[str], jobs: int) -> int:
    modules = load_modules()
    status = 0
    for name in names:
        mod = modules[name]
        work = prepare(name, mod)
        mutmut = Path(sys.executable).with_name("mutmut")
        cmd = [str(mutmut), "run", "--max-children", str(jobs)]
        cmd += mod.get("functions", [])
        print(f"== {name}: {mod['path']} ({' '.join(mod['tests'])})", flush=True)
        rc = subprocess.call(cmd, cwd=work)
        status = status or rc
    return status


def retest(names: list[str], jobs: int) -> int:
    """Run each module's untriaged survivors again (mutmut reruns mutants it is named)."""
    modules = load_modules()
    status = 0
    for name in names:
        mod = modules[name]
        eq = equivalent_keys(name)
        alive = [k for k, s in results(name, mod).items()
                 if s not in DETECTED and s != "not checked"]
        shown = diffs(name, alive) if eq else {}
        again = [k for k in alive if (function_of(k), changed_line(shown.get(k, ""))) not in eq]
        if not again:
            continue
        work = prepare(name, mod)
        mutmut = Path(sys.executable).with_name("mutmut")
        print(f"== {name}: {len(again)} survivors again", flush=True)
        status = status or subprocess.call([str(mutmut), "run", "--max-children", str(jobs),
                                            *again], cwd=work)
    return status


def _apply_diff(text: str, d: str) -> str | None:
    """``text`` with a mutant's one changed line swapped in (None when it is not found)."""
    old = [ln[1:] for ln in d.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    new = [ln[1:] for ln in d.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    if len(old) != 1 or len(new) != 1 or text.count(old[0] + "\n") != 1:
        return None
    return text.replace(old[0] + "\n", new[0] + "\n", 1)


def recheck(names: list[str], only: str = "*", tests: list[str] | None = None) -> int:
    """Each untriaged survivor applied by hand to a scratch copy (``.mutate/<m>-recheck``)
    and the module's whole test list run on it: a cross-check of mutmut's per-function
    test selection. Prints ``killed``/``survived``/``skipped`` (diff not one line) each."""
    modules = load_modules()
    for name in names:
        mod = modules[name]
        eq = equivalent_keys(name)
        alive = [k for k, s in results(name, mod).items()
                 if s not in DETECTED and s != "not checked"]
        shown = diffs(name, alive)
        work = prepare(f"{name}-recheck", mod)
        src = work / mod["path"]
        original = src.read_text()
        run_tests = tests or list(mod["tests"])
        counts = {"killed": 0, "survived": 0, "skipped": 0}
        for k in alive:
            if (function_of(k), changed_line(shown[k])) in eq or not fnmatch.fnmatch(k, only):
                continue
            mutated = _apply_diff(original, shown[k])
            if mutated is None:
                verdict = "skipped"
            else:
                src.write_text(mutated)
                rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-x", "-p",
                                      "no:randomly", "-p", "no:cacheprovider", "-n", "0", "-o",
                                      "addopts=", *run_tests], cwd=work,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                verdict = "killed" if rc == 1 else "survived"
            src.write_text(original)
            counts[verdict] += 1
            print(f"{verdict:8} {k}", flush=True)
        print(f"{name}: {counts}")
    return 0


def results(name: str, mod: dict) -> dict[str, str]:
    """mutmut's verdict per mutant name, read from its .meta file."""
    from mutmut.stats import status_by_exit_code  # only with the mutate extra

    meta = WORK / name / "mutants" / (mod["path"] + ".meta")
    if not meta.exists():
        return {}
    data = json.loads(meta.read_text())
    pats = mod.get("functions") or ["*"]
    return {k: status_by_exit_code[v] for k, v in data["exit_code_by_key"].items()
            if any(fnmatch.fnmatch(k, p) for p in pats)}


def diffs(name: str, mutants: list[str]) -> dict[str, str]:
    """The unified diff of each mutant (mutmut's own rendering, run in the scratch copy)."""
    if not mutants:
        return {}
    code = ("import json, sys; from mutmut.__main__ import get_diff_for_mutant; "
            "p = sys.argv[1]; print(json.dumps({n: get_diff_for_mutant(n, path=p) "
            "for n in sys.argv[2:]}))")
    path = load_modules()[name]["path"]
    out = subprocess.run([sys.executable, "-c", code, path, *mutants], cwd=WORK / name,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"error: mutmut could not show the mutants of {name}: "
                         f"{out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def diff(name: str, mutant: str) -> str:
    return diffs(name, [mutant])[mutant]


def changed_line(d: str) -> str:
    """The first added line of a diff, stripped: what identifies a mutant across renumbering."""
    plus = [ln[1:].strip() for ln in d.splitlines() if ln.startswith("+") and not
            ln.startswith("+++")]
    return plus[0] if plus else ""


def function_of(mutant: str) -> str:
    return mutant.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]


def equivalent_keys(name: str) -> set[tuple[str, str]]:
    return {(e["function"], e["line"]) for e in load_equivalents() if e["module"] == name}


def score(names: list[str]) -> int:
    modules = load_modules()
    below = 0
    print(f"{'module':16} {'mutants':>7} {'killed':>7} {'equiv':>6} {'survived':>8} "
          f"{'score':>7} {'target':>6}")
    for name in names:
        mod = modules[name]
        res = results(name, mod)
        if not res:
            print(f"{name:16} (no results: run `scripts/mutate.py run {name}`)")
            below += 1
            continue
        eq = equivalent_keys(name)
        untested = [k for k, s in res.items() if s == "not checked"]
        killed = sum(1 for s in res.values() if s in DETECTED)
        alive = [k for k, s in res.items() if s not in DETECTED and s != "not checked"]
        shown = diffs(name, alive) if eq else {}
        n_eq = sum(1 for k in alive if (function_of(k), changed_line(shown.get(k, ""))) in eq)
        total = len(res) - len(untested) - n_eq
        pct = 100.0 * killed / total if total else 100.0
        flag = "" if pct >= mod["target"] else "  BELOW TARGET"
        if untested:
            flag += f"  ({len(untested)} not run yet)"
        below += pct < mod["target"] or bool(untested)
        print(f"{name:16} {len(res):7} {killed:7} {n_eq:6} {len(alive) - n_eq:8} "
              f"{pct:6.1f}% {mod['target']:5}%{flag}")
    return 1 if below else 0


def survivors(name: str) -> None:
    mod = load_modules()[name]
    eq = equivalent_keys(name)
    alive = sorted(k for k, s in results(name, mod).items()
                   if s not in DETECTED and s != "not checked")
    for k, d in diffs(name, alive).items():
        if (function_of(k), changed_line(d)) not in eq:
            print(f"# {k}: {results(name, mod)[k]}\n{d}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["run", "score", "survivors", "show", "retest",
                                       "recheck"])
    p.add_argument("names", nargs="*")
    p.add_argument("--only", default="*", help="recheck: an fnmatch pattern of mutant names")
    p.add_argument("--tests", nargs="*", help="recheck: these tests instead of the module's")
    p.add_argument("--jobs", type=int, default=int(os.environ.get("MUTATE_JOBS", "1")))
    a = p.parse_args(argv)
    modules = load_modules()
    names = a.names or list(modules)
    if a.command == "show":
        for m in a.names:
            mod = next(n for n, v in modules.items() if m.startswith(_dotted(v["path"]) + "."))
            print(diff(mod, m))
        return 0
    unknown = [n for n in names if n not in modules]
    if unknown:
        print(f"error: unknown module(s) {unknown}; known: {list(modules)} "
              f"(tests/mutants/modules.toml)", file=sys.stderr)
        return 2
    if a.command == "run":
        return run(names, a.jobs)
    if a.command == "retest":
        return retest(names, a.jobs)
    if a.command == "recheck":
        return recheck(names, a.only, a.tests)
    if a.command == "score":
        return score(names)
    for n in names:
        survivors(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
