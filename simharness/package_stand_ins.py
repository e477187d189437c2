"""Stand-ins that code binds when a GPU-only package is missing, and the errors they cause.

Megatron-Core imports Transformer Engine in a ``try`` and, without it, binds a stand-in in
its place:

* ``te = MagicMock()`` in the ``except ImportError`` of ``import transformer_engine as te``
  (``megatron/core/extensions/transformer_engine.py``); a class written over it
  (``class TELinear(te.pytorch.Linear)``) is a mock too, and so is what it builds;
* ``TESpecProvider = None`` on the ``else`` of ``if HAVE_TE:``, where ``HAVE_TE`` is set
  beside that import (``megatron/core/models/gpt/gpt_layer_specs.py``);
* another package's class: ``from torch.optim import AdamW as Adam`` where Transformer
  Engine's or apex's ``FusedAdam`` is missing (``megatron/core/optimizer/__init__.py``).

A test that reaches one fails far from any import: ``'NoneType' object is not callable``,
``Mock object has no attribute 'cuda'``, a ``StopIteration`` out of a mock's call, torch's
``AdamW`` refusing ``lr=None`` that ``FusedAdam`` takes. Each is
the package's absence, so it is a named stop (``simharness.errors.MissingGPUPackage``, made
from what :func:`stand_in_stop` finds).
The link from the failure to the package is read from the objects (the failing mock's
parents, the None the failing line calls) and from the source of the module that binds the
stand-in (which branch binds it, beside which import), never guessed from a name; the
package must also be absent here.
"""

from __future__ import annotations

import ast
import functools
import gc
import importlib.util
import linecache
import re
import sys
from types import FrameType, ModuleType, TracebackType

#: (package, where, detail): the missing package, the failing ``file:line``, what happened.
Stop = tuple[str, str, str]

_NONE_ERROR = re.compile(r"'NoneType' object (is not callable|is not subscriptable|has no "
                         r"attribute)")
_IDENT = re.compile(r"[A-Za-z_]\w*")


def stand_in_stop(exc: BaseException, packages: frozenset[str]) -> Stop | None:
    """The missing package of ``packages`` (the GPU-only ones) whose stand-in ``exc`` ran
    into, else None. The garbage collector is paused meanwhile: a rank that collects inside
    this reading would run the code's own finalizers at a point the other ranks do not
    (Megatron-LM's test containers call ``torch.distributed.barrier`` in ``__del__``)."""
    collecting = gc.isenabled()
    gc.disable()  # no finalizer of the code's own runs inside this reading of its source
    try:
        if type(exc) is NameError:
            return _missing_name(exc, packages)
        if isinstance(exc, (TypeError, AttributeError)) and _NONE_ERROR.search(str(exc)):
            return _none_stand_in(exc, packages)
        return _mock_stand_in(exc, packages) or _class_stand_in(exc, packages)
    finally:
        if collecting:
            gc.enable()


# -- nothing bound in a package's place ----------------------------------------------------


def _missing_name(exc: NameError, packages: frozenset[str]) -> Stop | None:
    """A ``NameError`` in a module that imports the name only from a GPU-only package that is
    not installed (Megatron-Core's ``random.py`` imports ``FP8GlobalStateManager`` from
    ``transformer_engine`` in a ``try`` and uses it on a branch taken without it)."""
    name = getattr(exc, "name", None)
    frame, lineno = _innermost(exc.__traceback__)
    if not name or frame is None:
        return None
    path = frame.f_code.co_filename
    tree = _parse(path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            module, names = node.module, [a.asname or a.name for a in node.names]
        elif isinstance(node, ast.Import):
            hits = [a.name for a in node.names if (a.asname or a.name.split(".")[0]) == name]
            module, names = (hits[0], [name]) if hits else ("", [])
        else:
            continue
        root = module.split(".")[0]
        if name in names and root in packages and first_absent([root]):
            return (root, f"{path}:{lineno}",
                    f"NameError: name {name!r} is not defined; it is imported from {module} "
                    f"(line {node.lineno})")
    return None


# -- None bound in a package's place --------------------------------------------------------


def _none_stand_in(exc: BaseException, packages: frozenset[str]) -> Stop | None:
    frame, lineno = _innermost(exc.__traceback__)
    if frame is None:
        return None
    path = frame.f_code.co_filename
    line = linecache.getline(path, lineno)
    for name in dict.fromkeys(_IDENT.findall(line)):
        if name in frame.f_locals or name not in frame.f_globals \
                or frame.f_globals[name] is not None:
            continue
        found = _none_binding(path, name, frame.f_globals, packages)
        if found is not None:
            package, bound_at, why = found
            return (package, f"{path}:{lineno}",
                    f"{_said(exc)}; {name} is the None that {bound_at} binds "
                    f"{why}")
    return None


def _none_binding(path: str, name: str, module_globals: dict, packages: frozenset[str],
                  depth: int = 0) -> tuple[str, str, str] | None:
    """(package, file:line, why) when the module at ``path`` binds ``name`` to None on the
    branch taken without a GPU-only package: the ``else`` of ``if FLAG:`` or ``if FLAG and
    ...:`` (FLAG false here and set where the package is imported), or the ``except`` of a
    ``try`` that imports the name from the package; or imports ``name`` from a module that
    does."""
    tree = _parse(path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _defines(node.body, name) \
                and (at := _assigns_none(node.orelse, name)):
            flag = _false_flag(node.test, module_globals)
            if flag is None:
                continue
            package = first_absent(_packages_imported(node.body, packages)) or _flag_package(
                tree, flag, packages)
            if package is not None:
                return package, f"{path}:{at}", (f"when {flag} is false ({package} is not "
                                                 f"installed)")
        if isinstance(node, ast.Try):
            package = first_absent(_packages_imported(node.body, packages, only_binding=name))
            if package is None:
                continue
            for handler in node.handlers:
                if at := _assigns_none(handler.body, name):
                    return package, f"{path}:{at}", (f"when {package} cannot be imported (not "
                                                     "installed)")
    for node in tree.body if depth < 3 else ():
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    module = sys.modules.get(node.module)
                    origin = getattr(module, "__file__", None) or ""
                    if module is not None and getattr(module, alias.name, 0) is None:
                        return _none_binding(origin, alias.name, vars(module), packages,
                                             depth + 1)
    return None


def _false_flag(test: ast.expr, module_globals: dict) -> str | None:
    """The name that makes ``test`` false here: ``FLAG`` or an operand of ``FLAG and ...``
    bound to False in the module."""
    operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) \
        else [test]
    for operand in operands:
        if isinstance(operand, ast.Name) and module_globals.get(operand.id) is False:
            return operand.id
    return None


def _defines(body: list[ast.stmt], name: str) -> bool:
    """``body`` binds ``name``: by an import, a class or function, or an assignment."""
    for stmt in body:
        for s in ast.walk(stmt):
            if isinstance(s, (ast.Import, ast.ImportFrom)) \
                    and any((a.asname or a.name.split(".")[0]) == name for a in s.names):
                return True
            if isinstance(s, (ast.ClassDef, ast.FunctionDef)) and s.name == name:
                return True
            if isinstance(s, ast.Assign) and _binds(s, name):
                return True
    return False


def _flag_package(tree: ast.Module, flag: str, packages: frozenset[str]) -> str | None:
    """The GPU-only package whose import sets ``flag``: in this module's source, or in the
    module ``flag`` is imported from (``from megatron.core.extensions.transformer_engine
    import HAVE_TE``)."""
    found = _package_setting(tree, flag, packages)
    if found is not None:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and any((a.asname or a.name) == flag for a in node.names):
            module = sys.modules.get(node.module)
            source = _parse(getattr(module, "__file__", None) or "")
            if source is not None:
                original = next(a.name for a in node.names if (a.asname or a.name) == flag)
                return _package_setting(source, original, packages)
    return None


def _package_setting(tree: ast.Module, flag: str, packages: frozenset[str]) -> str | None:
    """The absent GPU-only package imported in the ``try`` whose body sets ``flag = True``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(s, ast.Assign) and _binds(s, flag)
                and isinstance(s.value, ast.Constant) and s.value.value is True
                for s in node.body):
            package = first_absent(_packages_imported(node.body, packages))
            if package is not None:
                return package
    return None


# -- a mock bound in a package's place ------------------------------------------------------


def _mock_stand_in(exc: BaseException, packages: frozenset[str]) -> Stop | None:
    from unittest import mock

    candidates = []
    if isinstance(exc, AttributeError) and isinstance(getattr(exc, "obj", None),
                                                      mock.NonCallableMock):
        candidates.append(exc.obj)
    candidates += [frame.f_locals["self"] for frame, _ in _frames(exc.__traceback__)
                   if frame.f_code.co_filename == mock.__file__
                   and isinstance(frame.f_locals.get("self"), mock.NonCallableMock)]
    if not candidates:
        return None
    roots = {id(r): r for m in candidates for r in _mock_roots(m, mock)}
    frame, lineno = _innermost(exc.__traceback__, outside=mock.__file__)
    where = f"{frame.f_code.co_filename}:{lineno}" if frame is not None else "<unknown>:0"
    for module in list(sys.modules.values()):
        found = _mock_binding(module, roots, packages)
        if found is not None:
            package, name, path, at = found
            return (package, where,
                    f"{_said(exc)}; the object is built from {name}, the mock "
                    f"that {path}:{at} binds in the place of {package} (not installed)")
    return None


def _mock_roots(m, mock, depth: int = 0) -> list:
    """The mocks ``m`` descends from: its parents' root, and through a class written over
    a mock (``class C(te.pytorch.Linear)`` makes ``C`` a mock whose calls return its
    bases in turn), the roots of those bases."""
    if depth > 8:
        return []
    root, seen = m, set()
    while id(root) not in seen:
        seen.add(id(root))
        parent = root.__dict__.get("_mock_new_parent") or root.__dict__.get("_mock_parent")
        if parent is None:
            break
        root = parent
    out = [root]
    effect = m.__dict__.get("_mock_side_effect")
    if type(effect).__name__ == "tuple_iterator":
        bases = effect.__reduce__()[1][0]
        out += [r for b in bases if isinstance(b, mock.NonCallableMock)
                for r in _mock_roots(b, mock, depth + 1)]
    if root is not m and root.__dict__.get("_mock_side_effect") is not None:
        out += _mock_roots(root, mock, depth + 1)
    return out


def _mock_binding(module: ModuleType | None, roots: dict[int, object],
                  packages: frozenset[str]) -> tuple[str, str, str, int] | None:
    names = _names_bound(module, lambda v: id(v) in roots)
    if not names:
        return None
    path = getattr(module, "__file__", None) or ""
    tree = _parse(path)
    if tree is None:
        return None
    for name in names:
        found = _mock_source(tree, name, vars(module), packages)
        if found is not None:
            return found[0], name, path, found[1]
    return None


def _mock_source(tree: ast.Module, name: str, module_globals: dict, packages: frozenset[str],
                 depth: int = 0) -> tuple[str, int] | None:
    """(package, line) when the module binds ``name`` to a mock in the ``except`` of a
    ``try`` that imports it from a missing GPU-only package, or defines ``class name(B)``
    with a base ``B`` (``te.pytorch.Linear``) rooted in such a mock of the module."""
    from unittest import mock

    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            package = first_absent(_packages_imported(node.body, packages, only_binding=name))
            if package is None:
                continue
            for handler in node.handlers:
                for s in ast.walk(handler):
                    if isinstance(s, ast.Assign) and _binds(s, name):
                        return package, s.lineno
        if isinstance(node, ast.ClassDef) and node.name == name and depth < 8:
            for base in node.bases:
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and isinstance(
                        module_globals.get(base.id), mock.NonCallableMock):
                    found = _mock_source(tree, base.id, module_globals, packages, depth + 1)
                    if found is not None:
                        return found[0], node.lineno
    return None


# -- another package's class bound in a package's place -----------------------------------


def _class_stand_in(exc: BaseException, packages: frozenset[str]) -> Stop | None:
    """A class the code binds in the except of a GPU-only package's import (Megatron-Core's
    ``from torch.optim import AdamW as Adam`` without Transformer Engine's or apex's
    FusedAdam; ``LNImpl = WrappedTorchNorm`` without apex), raising from one of its own
    methods, called from code of the binding module's package (``megatron``): the stand-in
    refused what the package's class would take (``lr=None``, sequence parallelism)."""
    frames = _frames(exc.__traceback__)
    for frame, lineno in reversed(frames):
        local = frame.f_locals
        cls = local.get("cls") if isinstance(local.get("cls"), type) else \
            type(local["self"]) if "self" in local else None
        if cls is None or not any(frame.f_code is _code(vars(k).get(frame.f_code.co_name))
                                  for k in cls.__mro__):
            continue
        callers = {str(f.f_globals.get("__name__", "")).split(".")[0] for f, _ in frames
                   if f.f_globals.get("__name__") not in {k.__module__ for k in cls.__mro__}}
        for module in list(sys.modules.values()):
            if str(getattr(module, "__name__", "")).split(".")[0] not in callers:
                continue
            names = _names_bound(module, lambda v, c=cls: v is c)
            if not names:
                continue
            found = _class_source(getattr(module, "__file__", None) or "", names, packages)
            if found is not None:
                package, name, at = found
                return (package, f"{frame.f_code.co_filename}:{lineno}",
                        f"{_said(exc)}; in {cls.__module__}.{cls.__qualname__}, which "
                        f"{module.__file__}:{at} binds as {name} in the place of {package} "
                        "(not installed)")
        return None
    return None


def _code(attr: object) -> object:
    """The code object of a function, method, staticmethod or classmethod (else None)."""
    return getattr(getattr(attr, "__func__", attr), "__code__", None)


def _class_source(path: str, names: list[str],
                  packages: frozenset[str]) -> tuple[str, str, int] | None:
    """(package, name, line) when the module binds one of ``names`` in an ``except`` of a
    ``try`` that imports a missing GPU-only package."""
    tree = _parse(path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        package = first_absent(_packages_imported(node.body, packages))
        if package is None:
            continue
        for handler in node.handlers:
            for s in ast.walk(handler):
                if isinstance(s, ast.ImportFrom) \
                        and str(s.module).split(".")[0] not in packages:
                    bound = [a.asname or a.name for a in s.names]
                elif isinstance(s, ast.Assign):
                    bound = [n for n in names if _binds(s, n)]
                else:
                    continue
                for name in names:
                    if name in bound:
                        return package, name, s.lineno
    return None


def _names_bound(module: ModuleType | None, test) -> list[str]:
    """The module's global names whose value passes ``test``."""
    return [n for n, v in list(getattr(module, "__dict__", {}).items()) if test(v)]


def _said(exc: BaseException) -> str:
    """``TypeError: message``, or the type alone when the message is empty."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# -- source reading -------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _parse(path: str) -> ast.Module | None:
    if not path.endswith(".py"):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _binds(stmt: ast.Assign, name: str) -> bool:
    for target in stmt.targets:
        elts = target.elts if isinstance(target, ast.Tuple) else [target]
        if any(isinstance(e, ast.Name) and e.id == name for e in elts):
            return True
    return False


def _assigns_none(body: list[ast.stmt], name: str) -> int:
    """The line of a statement in ``body`` that binds ``name`` to None (0 when none)."""
    for stmt in body:
        for s in ast.walk(stmt):
            if not isinstance(s, ast.Assign):
                continue
            for target in s.targets:
                if isinstance(target, ast.Name) and target.id == name \
                        and isinstance(s.value, ast.Constant) and s.value.value is None:
                    return s.lineno
                if isinstance(target, ast.Tuple) and isinstance(s.value, ast.Tuple):
                    for t, v in zip(target.elts, s.value.elts, strict=False):
                        if isinstance(t, ast.Name) and t.id == name \
                                and isinstance(v, ast.Constant) and v.value is None:
                            return s.lineno
    return 0


def _packages_imported(body: list[ast.stmt], packages: frozenset[str],
                       only_binding: str | None = None) -> list[str]:
    """The ``packages`` that ``body`` imports (only those binding ``only_binding``)."""
    out = []
    for stmt in body:
        for s in ast.walk(stmt):
            if isinstance(s, ast.ImportFrom) and s.module and not s.level:
                roots = [(s.module.split(".")[0], a.asname or a.name) for a in s.names]
            elif isinstance(s, ast.Import):
                roots = [(a.name.split(".")[0], a.asname or a.name.split(".")[0])
                         for a in s.names]
            else:
                continue
            out += [root for root, bound in roots if root in packages
                    and (only_binding is None or bound == only_binding)]
    return out


def first_absent(packages: list[str]) -> str | None:
    """The first of ``packages`` not installed here."""
    for package in packages:
        try:
            if importlib.util.find_spec(package) is None:
                return package
        except (ImportError, ValueError):
            return package
    return None


def _frames(tb: TracebackType | None) -> list[tuple[FrameType, int]]:
    """(frame, line) of each entry of a traceback, outermost first."""
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


def _innermost(tb: TracebackType | None, outside: str = "") -> tuple[FrameType | None, int]:
    """The innermost (frame, line) of a traceback, of a file other than ``outside``."""
    for frame, line in reversed(_frames(tb)):
        if frame.f_code.co_filename != outside:
            return frame, line
    return None, 0
