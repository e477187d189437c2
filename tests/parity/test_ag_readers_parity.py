"""``simharness.ag_readers.TABLE`` against megatron-core's own source: who reads the AG groups.

Every ``.py`` file under ``megatron/core`` is parsed (never imported) and every place that
reads one of the groups ``create_all_gather_group`` builds is listed with its enclosing
function and side (dense ``dp_cp_ag`` / expert ``ep_dp_ag``):

- a call with ``independent_all_gather=`` anything but ``False`` (Megatron's
  ``get_data_parallel_group`` and Megatron-FSDP's ``get_fsdp_group``; the side comes from
  ``is_expert_parallel=``: absent or ``False`` dense, ``True`` expert, an expression both);
- ``has_separate_all_gather_group()`` and ``create_all_gather_groups()`` calls;
- the attribute or string ``dp_cp_ag`` / ``expt_dp_ag`` (``pg_collection.dp_cp_ag``,
  ``getattr(pg_collection, 'dp_cp_ag')``);
- the globals ``_DATA_PARALLEL_GROUP_WITH_CP_AG`` / ``_EXPERT_DATA_PARALLEL_GROUP_AG``.

Each site's file says whose it is: ``distributed/fsdp/...`` Megatron-FSDP,
``distributed/distributed_data_parallel.py`` / ``distributed/param_and_grad_buffer.py`` DDP
(with or without the distributed optimizer), ``optimizer/...`` the distributed optimizer,
``distributed/torch_fully_sharded_data_parallel.py`` torch FSDP2; ``parallel_state.py``
defines the groups and ``process_groups_config.py`` carries them (neither is a reader).
The table fails the test when a reader in the code is not in it, when one of its sites has
no call site, or when a site belongs to another implementation than its row.

The installed megatron-core (0.16.1) is always scanned; 0.17.1, 0.18.2 and 0.19.2 are
scanned when their trees are cached (``.venv/bin/python tests/support/mcore_sources.py``).
"""

from __future__ import annotations

import ast
import importlib.util
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import mcore_sources as S
from support import megatron_harness as H
from support.paths import ROOT

from simharness.ag_readers import TABLE, Reader, Site

AG_NAMES = {"dp_cp_ag": "dense", "expt_dp_ag": "expert"}
AG_GLOBALS = {"_DATA_PARALLEL_GROUP_WITH_CP_AG": "dense",
              "_EXPERT_DATA_PARALLEL_GROUP_AG": "expert"}
AG_CALLS = {"has_separate_all_gather_group": "dense", "create_all_gather_groups": "both"}

# Whose code a file is (first matching prefix of its path under megatron/core/).
ROLES = (
    ("parallel_state.py", "definition"),
    ("process_groups_config.py", "plumbing"),
    ("distributed/fsdp/", "fsdp"),
    ("distributed/torch_fully_sharded_data_parallel", "torch-fsdp2"),
    ("distributed/distributed_data_parallel", "ddp"),
    ("distributed/param_and_grad_buffer.py", "ddp"),
    ("optimizer/", "dist-opt"),
)
NOT_READERS = ("definition", "plumbing")
# The implementations whose rows may cite a file of each role ("ddp" files are shared by
# plain DDP and DDP with the distributed optimizer).
ROLE_IMPLS = {"fsdp": ("fsdp", "fsdp-v2"), "torch-fsdp2": ("torch-fsdp2",),
              "ddp": ("ddp", "dist-opt"), "dist-opt": ("dist-opt",)}

# megatron-core release -> the simharness profile whose rows cite it.
VERSIONS = {"0.16.1": "0.16", "0.17.1": "0.16", "0.18.2": "0.18", "0.19.2": "0.19"}


@dataclass(frozen=True)
class CallSite:
    path: str  # under megatron/core/
    function: str  # enclosing Class.method, or <module>
    line: int
    side: str  # dense / expert / both
    what: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.path, self.function, self.side)


def role(path: str) -> str:
    """Whose code ``path`` (under megatron/core/) is; ``other`` when no rule names it."""
    return next((r for prefix, r in ROLES if path.startswith(prefix)), "other")


def _call_side(call: ast.Call) -> str:
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    value = kw.get("is_expert_parallel")
    if value is None:
        return "dense"
    if isinstance(value, ast.Constant):
        return "expert" if value.value else "dense"
    return "both"


def _site(node: ast.AST) -> tuple[str, str] | None:
    """``(side, what)`` when ``node`` reads an AG group."""
    if isinstance(node, ast.Call):
        for k in node.keywords:
            if k.arg == "independent_all_gather" and not (
                    isinstance(k.value, ast.Constant) and k.value.value is False):
                return _call_side(node), "independent_all_gather"
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) \
            else None
        if name in AG_CALLS:
            return AG_CALLS[name], f"{name}()"
    elif isinstance(node, ast.Attribute) and node.attr in AG_NAMES:
        return AG_NAMES[node.attr], f".{node.attr}"
    elif isinstance(node, ast.Constant) and node.value in AG_NAMES:
        return AG_NAMES[node.value], repr(node.value)
    elif isinstance(node, ast.Name) and node.id in AG_GLOBALS:
        return AG_GLOBALS[node.id], node.id
    return None


def scan_source(text: str, path: str) -> list[CallSite]:
    """Every AG read in one file's source, with its enclosing ``Class.function``."""
    out: list[CallSite] = []

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, scope + (child.name,))
                continue
            found = _site(child)
            if found is not None:
                out.append(CallSite(path, ".".join(scope) or "<module>", child.lineno, *found))
            visit(child, scope)

    with warnings.catch_warnings():  # Megatron's invalid escape sequences are not ours
        warnings.simplefilter("ignore")
        tree = ast.parse(text, filename=path)
    visit(tree, ())
    return out


# Every pattern above contains one of these literally: files without any are not parsed.
NEEDLES = ("independent_all_gather", "dp_cp_ag", "expt_dp_ag", "all_gather_group", "_AG")


def scan_tree(core: Path) -> list[CallSite]:
    """Every AG read under a ``megatron/core`` folder."""
    sites: list[CallSite] = []
    for file in sorted(core.rglob("*.py")):
        text = file.read_text(encoding="utf-8")
        if any(n in text for n in NEEDLES):
            sites += scan_source(text, file.relative_to(core).as_posix())
    return sites


def disagreements(sites: list[CallSite], rows: tuple[Reader, ...]) -> list[str]:
    """What the table ``rows`` and the scanned ``sites`` disagree on (empty: they agree)."""
    problems: list[str] = []
    readers = [s for s in sites if role(s.path) not in NOT_READERS]
    code = {s.key: s for s in readers}
    cited = {(s.path, s.function, s.side): (r, s) for r in rows for s in r.sites}
    for key, s in sorted(code.items()):
        if key not in cited:
            problems.append(f"reader the table lacks: {s.path}:{s.line} {s.function} reads the "
                            f"{s.side} AG group ({s.what}; code of {role(s.path)})")
    for key, (r, s) in sorted(cited.items(), key=lambda kv: kv[0]):
        if key not in code:
            problems.append(f"table reader with no call site: {r.impl} cites {s.path} "
                            f"{s.function} ({s.side})")
        allowed = ROLE_IMPLS.get(role(s.path), ())
        if r.impl not in allowed:
            problems.append(f"{r.impl} cites {s.path} {s.function}, which is code of "
                            f"{role(s.path)}")
    for r in rows:
        sides = {s.side for s in r.sites}
        for side, flag in (("dense", r.dense), ("expert", r.expert)):
            if flag != bool(sides & {side, "both"}):
                problems.append(f"{r.impl} says it {'reads' if flag else 'does not read'} the "
                                f"{side} AG group, its sites say otherwise")
    return problems


# ---------------------------------------------------------------- synthetic trees
def _synthetic_tree(root: Path, rows: tuple[Reader, ...]) -> Path:
    """A ``megatron/core`` tree with exactly the call sites ``rows`` cite."""
    calls = {"dense": "independent_all_gather=True",
             "expert": "is_expert_parallel=True, independent_all_gather=True",
             "both": "is_expert_parallel=flag, independent_all_gather=True"}
    files: dict[str, dict[tuple[str, ...], list[str]]] = {}
    for r in rows:
        for s in r.sites:
            body = files.setdefault(s.path, {}).setdefault(tuple(s.function.split(".")), [])
            body.append(f"index.get_fsdp_group({calls[s.side]})")
    core = root / "megatron" / "core"
    for path, funcs in files.items():
        lines = []
        for scope, body in funcs.items():
            *cls, fn = scope
            pad = "    " * len(cls)
            lines += [f"class {c}:" for c in cls] + [f"{pad}def {fn}(self, index, flag):"]
            lines += [f"{pad}    {b}" for b in body]
        (core / path).parent.mkdir(parents=True, exist_ok=True)
        (core / path).write_text("\n".join(lines) + "\n")
    (core / "parallel_state.py").write_text(
        "_DATA_PARALLEL_GROUP_WITH_CP_AG = None\n"
        "def get_data_parallel_group(independent_all_gather=False):\n"
        "    return _DATA_PARALLEL_GROUP_WITH_CP_AG\n")
    return core


@pytest.mark.parametrize("profile", sorted(TABLE))
def test_synthetic_tree_of_the_table_agrees(tmp_path, profile):
    core = _synthetic_tree(tmp_path, TABLE[profile])
    assert disagreements(scan_tree(core), TABLE[profile]) == []


def test_an_extra_reader_in_the_distributed_optimizer_is_reported(tmp_path):
    core = _synthetic_tree(tmp_path, TABLE["0.16"])
    (core / "optimizer").mkdir()
    (core / "optimizer" / "distrib_optimizer.py").write_text(
        "from megatron.core import parallel_state\n"
        "class DistributedOptimizer:\n"
        "    def _build_param_gather_group(self):\n"
        "        return parallel_state.get_data_parallel_group(\n"
        "            with_context_parallel=True, independent_all_gather=True)\n")
    problems = disagreements(scan_tree(core), TABLE["0.16"])
    assert problems == [
        "reader the table lacks: optimizer/distrib_optimizer.py:4 "
        "DistributedOptimizer._build_param_gather_group reads the dense AG group "
        "(independent_all_gather; code of dist-opt)"]


def test_a_pg_collection_read_in_ddp_is_reported(tmp_path):
    core = _synthetic_tree(tmp_path, TABLE["0.19"])
    (core / "distributed" / "param_and_grad_buffer.py").write_text(
        "class _ParamAndGradBucketGroup:\n"
        "    def start_param_sync(self, pg_collection):\n"
        "        return getattr(pg_collection, 'expt_dp_ag', None)\n")
    problems = disagreements(scan_tree(core), TABLE["0.19"])
    assert len(problems) == 1 and "_ParamAndGradBucketGroup.start_param_sync reads the expert" \
        in problems[0] and "code of ddp" in problems[0]


def test_a_table_site_without_call_site_is_reported(tmp_path):
    core = _synthetic_tree(tmp_path, TABLE["0.18"])
    (core / "distributed" / "fsdp" / "mcore_fsdp_adapter.py").unlink()
    problems = disagreements(scan_tree(core), TABLE["0.18"])
    assert sorted(problems) == [
        "table reader with no call site: fsdp cites distributed/fsdp/mcore_fsdp_adapter.py "
        f"FullyShardedDataParallel._init_dist_index ({side})" for side in ("dense", "expert")]


def test_a_site_cited_under_the_wrong_implementation_is_reported():
    site = CallSite("distributed/fsdp/src/megatron_fsdp/utils.py", "X.f", 1, "dense", "x")
    rows = (Reader("dist-opt", True, False, (), "", (Site(site.path, "X.f", "dense", ""),)),)
    assert disagreements([site], rows) == [
        "dist-opt cites distributed/fsdp/src/megatron_fsdp/utils.py X.f, which is code of fsdp"]


def test_definition_and_plumbing_are_not_readers():
    sites = scan_source("_DATA_PARALLEL_GROUP_WITH_CP_AG = None\n", "parallel_state.py") \
        + scan_source("class P:\n    def f(self):\n        return {'dp_cp_ag': None}\n",
                      "process_groups_config.py")
    assert [s.side for s in sites] == ["dense", "dense"]
    assert disagreements(sites, ()) == []


def test_sides_of_the_call_forms():
    text = ("def f(i, pg, g):\n"
            "    i.get_fsdp_group(independent_all_gather=True)\n"
            "    i.get_fsdp_group(is_expert_parallel=True, independent_all_gather=True)\n"
            "    i.get_fsdp_group(is_expert_parallel=g, independent_all_gather=True)\n"
            "    i.get_fsdp_group(independent_all_gather=False)\n"
            "    pg.expt_dp_ag\n"
            "    has_separate_all_gather_group()\n")
    assert [(s.line, s.side) for s in scan_source(text, "x.py")] == [
        (2, "dense"), (3, "expert"), (4, "both"), (6, "expert"), (7, "dense")]


# ---------------------------------------------------------------- real sources
def _installed_core() -> Path:
    H.require_installed_megatron()
    spec = importlib.util.find_spec("megatron.core")
    assert spec is not None and spec.submodule_search_locations
    core = Path(next(iter(spec.submodule_search_locations)))
    info = (core / "package_info.py").read_text()
    assert "MINOR = 16" in info and "PATCH = 1" in info, "the test venv pins megatron-core 0.16.1"
    return core


@pytest.mark.parity
@pytest.mark.parametrize("version", list(VERSIONS))
def test_table_matches_megatron_source(version):
    if version == "0.16.1":
        core = _installed_core()
    else:
        found = S.cached_sources(ROOT, version)
        if found is None:
            pytest.skip(f"megatron-core {version}'s source tree is not cached; run "
                        f"{S.fetch_command(version)}")
        core = found
    sites = scan_tree(core)
    assert sites, f"no AG read found under {core}: the scan is broken"
    problems = disagreements(sites, TABLE[VERSIONS[version]])
    assert not problems, (f"simharness.ag_readers.TABLE[{VERSIONS[version]!r}] and "
                          f"megatron-core {version} ({core}) disagree:\n" + "\n".join(problems))
