"""Output helpers of the command line: tables, rank lists, JSON, CSV, colour.

Colour: use :func:`style` and :func:`echo`; click strips the escapes when the
stream is not a terminal (or ``--no-color``/``NO_COLOR`` is set), so colour
appears only on a TTY. Large outputs: :func:`head_tail` picks the rows to
show (first and last) and :func:`more_line` says how many were left out.

>>> print(click.unstyle(render_table(["kind", "groups"], [["tp", 8], ["dp_cp", 4]])))
kind   groups
tp          8
dp_cp       4
>>> format_ranks(list(range(0, 2048, 8)))
'[0, 8, 16, ..., 2040] (256 ranks, stride 8)'
>>> head_tail(100, head=3, tail=2)
([0, 1, 2], [98, 99])
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any

import click
import numpy as np

from ..ranktext import format_rank_set, format_ranks  # noqa: F401 - re-exported
from ..reports import findings_exit_code, severity_counts  # noqa: F401 - re-exported

# Tables longer than this are summarised (first HEAD, last TAIL rows) unless --all.
SUMMARY_THRESHOLD = 16
HEAD, TAIL = 6, 2

SEVERITY_STYLE: dict[str, dict[str, Any]] = {
    "error": dict(fg="red", bold=True), "warning": dict(fg="yellow", bold=True),
    "info": dict(fg="cyan")}


# ------------------------------------------------------------------- basics
def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    click.echo(text, err=err, nl=nl)


def style(text: str, **kw) -> str:
    """``click.style``; the escapes are stripped on non-terminals by :func:`echo`."""
    return click.style(text, **kw)


def heading(text: str) -> str:
    return style(text, bold=True)


def dim(text: str) -> str:
    return style(text, dim=True)


def terminal_width(default: int = 100) -> int:
    return max(60, shutil.get_terminal_size((default, 24)).columns)


def wrap(text: str, *, indent: int = 0, width: int | None = None) -> str:
    """``text`` wrapped to the terminal, every line indented by ``indent``."""
    import textwrap

    width = width or terminal_width()
    return textwrap.fill(text, width=max(40, width - 1), initial_indent=" " * indent,
                         subsequent_indent=" " * indent, break_on_hyphens=False,
                         break_long_words=False)


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def onoff(value: bool) -> str:
    return "on" if value else "off"


# --------------------------------------------------------------- summarising
def head_tail(n: int, *, show_all: bool = False, head: int = HEAD,
              tail: int = TAIL, threshold: int = SUMMARY_THRESHOLD) -> tuple[list[int], list[int]]:
    """Indices to print of ``n`` rows: all when small or ``show_all``, else first/last."""
    if show_all or n <= max(threshold, head + tail):
        return list(range(n)), []
    return list(range(head)), list(range(n - tail, n))


def more_line(omitted: int, what: str = "groups", hint: bool = True) -> str:
    text = f"... {omitted} more {what} ..."
    if hint:
        text += " (--all shows every one)"
    return dim(text)


# -------------------------------------------------------------------- tables
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def render_table(headers: Sequence[str] | None, rows: Iterable[Sequence[Any]], *,
                 indent: int = 0, gap: int = 2, align: str | None = None) -> str:
    """Columns padded to the widest cell; numbers right-aligned (``align``: 'l'/'r' per column).

    A row that is a plain ``str`` is printed as-is (e.g. a "... N more ..." line).
    """
    rows = [r if isinstance(r, str) else ["" if c is None else c for c in r] for r in rows]
    table_rows = [r for r in rows if not isinstance(r, str)]
    ncol = max([len(headers or ())] + [len(r) for r in table_rows]) if (headers or table_rows) \
        else 0
    widths = [0] * ncol
    for r in ([headers] if headers else []) + table_rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], click.unstyle(str(c)).__len__())
    right = [False] * ncol
    if align:
        right = [a == "r" for a in align.ljust(ncol, "l")]
    else:
        for i in range(ncol):
            col = [r[i] for r in table_rows if i < len(r) and r[i] != ""]
            right[i] = bool(col) and all(_is_number(c) for c in col)
    pad = " " * indent
    sep = " " * gap

    def line(cells, head=False):
        out = []
        for i, c in enumerate(cells):
            text = str(c)
            fill = widths[i] - len(click.unstyle(text))
            text = (" " * fill + text) if right[i] else (text + " " * fill)
            out.append(text)
        s = pad + sep.join(out).rstrip()
        return heading(s) if head else s

    lines = [line(headers, head=True)] if headers else []
    for r in rows:
        lines.append(pad + r if isinstance(r, str) else line(r))
    return "\n".join(lines)


def pack_cells(cells: Sequence[str], *, indent: int = 2, width: int | None = None,
               gap: int = 3) -> str:
    """Lay short cells out in as many columns as fit the terminal (row by row)."""
    if not cells:
        return ""
    width = width or terminal_width()
    cw = max(len(click.unstyle(c)) for c in cells)
    ncol = max(1, (width - indent + gap) // (cw + gap))
    nrow = -(-len(cells) // ncol)
    lines = []
    for r in range(nrow):
        parts = []
        for c in range(ncol):
            i = r * ncol + c
            if i < len(cells):
                cell = cells[i]
                parts.append(cell + " " * (cw - len(click.unstyle(cell))))
        lines.append(" " * indent + (" " * gap).join(parts).rstrip())
    return "\n".join(lines)


# ---------------------------------------------------------------- JSON / CSV
def _json_default(obj: Any):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (tuple, set, frozenset, range)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def to_json(obj: Any, *, indent: int | None = 2) -> str:
    return json.dumps(obj, indent=indent, default=_json_default)


def echo_json(obj: Any, *, indent: int | None = 2) -> None:
    echo(to_json(obj, indent=indent))


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def echo_csv(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    echo(csv_text(header, rows), nl=False)


def row_strings(arr: np.ndarray, sep: str = " ") -> list[str]:
    """Each row of an integer array as text, fields joined by ``sep`` (C speed).

    >>> row_strings(np.array([[0, 1], [2, 3]]), ",")
    ['0,1', '2,3']
    """
    arr = np.asarray(arr)
    if arr.ndim != 2 or arr.shape[0] == 0:
        return []
    if arr.shape[1] == 0:
        return [""] * arr.shape[0]
    text = json.dumps(arr.tolist())[2:-2]
    return text.replace(", ", sep).split("]" + sep + "[")


_POW10 = 10 ** np.arange(19, dtype=np.int64)


def int_csv_block(arr: np.ndarray, insert: str = "", at: int = 1) -> str:
    """CSV lines of a non-negative integer array, built byte by byte in numpy.

    ``insert`` (already CSV-quoted text) goes in as extra field(s) before column
    ``at`` on every row. Millions of rows take well under a second.

    >>> int_csv_block(np.array([[5, 0, 12], [10, 3, 7]]), "tp,TP", at=1)
    '5,tp,TP,0,12\\n10,tp,TP,3,7\\n'
    """
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if arr.ndim != 2 or arr.shape[0] == 0:
        return ""
    if arr.min() < 0:
        raise ValueError("int_csv_block formats non-negative integers only")
    n, c = arr.shape
    digits = np.maximum(np.searchsorted(_POW10, arr, side="right"), 1)
    ins = insert.encode("utf-8")
    extra = len(ins) + 1 if insert else 0
    row_len = (digits + 1).sum(axis=1) + extra
    ends = np.cumsum(row_len)
    pos = ends - row_len
    buf = np.empty(int(ends[-1]), dtype=np.uint8)
    for j in range(c):
        if insert and j == at:
            buf[pos[:, None] + np.arange(len(ins))] = np.frombuffer(ins, dtype=np.uint8)
            buf[pos + len(ins)] = ord(",")
            pos = pos + extra
        d, x = digits[:, j], arr[:, j]
        for k in range(int(d.max())):
            m = d > k
            buf[pos[m] + d[m] - 1 - k] = (x[m] // _POW10[k]) % 10 + 48
        buf[pos + d] = ord(",") if j < c - 1 else ord("\n")
        pos = pos + d + 1
    return buf.tobytes().decode("utf-8")


def ranks_cell(ranks: Sequence[int] | np.ndarray) -> str:
    """Ranks in one CSV cell: space-separated (no commas to quote)."""
    return " ".join(str(int(x)) for x in np.asarray(ranks).ravel())


# ------------------------------------------------------------------- writing
#: the format each file suffix means; a suffix not listed says nothing about the format
SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".tsv": "csv", ".txt": "table",
                  ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".svg": "svg",
                  ".png": "png"}


def check_format_suffix(fmt: str, path: str | None, option: str = "--out") -> None:
    """Refuse (:class:`~simharness._cli.errors.InputError`) writing format ``fmt`` into a
    file whose suffix means another format (``export -f csv --out x.json``); a path with
    no suffix, or one :data:`SUFFIX_FORMATS` does not list, is taken as given.

    >>> check_format_suffix("json", "plan.json"); check_format_suffix("csv", "ranks.out")
    >>> check_format_suffix("csv", "x.json")
    Traceback (most recent call last):
    ...
    simharness._cli.errors.InputError: --format csv writes CSV, but --out x.json ends in .json \
(json); use --format json, or an --out path ending in .csv
    """
    if not path or path == "-":
        return
    suffix = os.path.splitext(path)[1].lower()
    meant = SUFFIX_FORMATS.get(suffix)
    if meant is None or meant == fmt:
        return
    from .errors import fail

    ends = [s for s, f in SUFFIX_FORMATS.items() if f == fmt]
    other = f", or an {option} path ending in {ends[0]}" if ends else ""
    fail(f"--format {fmt} writes {fmt.upper()}, but {option} {path} ends in {suffix} "
         f"({meant}); use --format {meant}{other}")


def check_writable(path: str | None, option: str) -> None:
    """Fail before any work starts when ``path`` (given to ``option``) cannot be written.

    Opens it for appending (an existing file keeps its contents) and removes it again
    if it did not exist, so a replay does not run every rank and then fail on its report.
    """
    if not path or path == "-":
        return
    existed = os.path.lexists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write there ({exc.strerror}); choose a writable "
                                 f"path for {option}", path) from None
    if not existed:
        with contextlib.suppress(OSError):
            os.unlink(path)


class Sink:
    """Text destination: stdout, or ``path`` (written atomically on close).

    >>> with Sink(None) as s: s.write("")
    """

    def __init__(self, path: str | None):
        self.path = path
        self._file: tuple[IO[str], str, str] | None = None  # (open temp file, its path, path)

    def __enter__(self) -> Sink:
        if self.path and self.path != "-":
            directory = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(directory):
                raise FileNotFoundError(2, "no such directory (create it first)", directory)
            tmp = f"{self.path}.tmp{os.getpid()}"
            try:  # errors name the user's path, not the temporary file beside it
                fh = open(tmp, "w", encoding="utf-8", newline="")  # noqa: SIM115 - closed in exit
            except OSError as exc:
                raise OSError(exc.errno, f"cannot write there ({exc.strerror}); choose a "
                                         f"writable path for the output", self.path) from None
            self._file = (fh, tmp, self.path)
        return self

    def write(self, text: str) -> None:
        if self._file is not None:
            self._file[0].write(text)
        else:
            click.echo(text, nl=False)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._file is not None:
            fh, tmp, path = self._file
            fh.close()
            if exc_type is None:
                try:
                    os.replace(tmp, path)
                except OSError as err:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise OSError(err.errno, f"cannot write there ({err.strerror}); choose a "
                                             f"writable path for the output", path) from None
            else:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        else:
            with contextlib.suppress(BrokenPipeError, ValueError):
                sys.stdout.flush()


# ---------------------------------------------------------------- findings
SEVERITY_ORDER = ("error", "warning", "info")
SEVERITY_MARK = {"error": "x", "warning": "!", "info": "i"}


def _finding_ranks(f) -> str:
    n = getattr(f, "n_ranks", None) or len(f.ranks)
    if not f.ranks:
        return ""
    text = format_rank_set(f.ranks, limit=8)
    if n > len(f.ranks):
        text += f" (of {n})"
    return text


def echo_findings(findings, *, strict: bool = False, indent: int = 0) -> None:
    pad = " " * indent
    if not findings:
        echo(pad + style("no findings: the layout is clean", fg="green"))
        return
    for sev in SEVERITY_ORDER:
        group = [f for f in findings if f.severity == sev]
        if not group:
            continue
        label = {"error": "errors", "warning": "warnings", "info": "info"}[sev]
        if strict and sev == "warning":
            label += " (failures under --strict)"
        echo(pad + style(f"{label} ({len(group)})", **SEVERITY_STYLE[sev]))
        for f in group:
            extra = []
            ranks = _finding_ranks(f)
            if ranks:
                extra.append(f"ranks {ranks}")
            if f.groups:
                gs = list(f.groups)
                extra.append("groups " + ", ".join(gs[:6]) + (" ..." if len(gs) > 6 else ""))
            mark = style(SEVERITY_MARK[sev], **SEVERITY_STYLE[sev])
            text = wrap(f"{f.code}: {f.message}", indent=len(pad) + 4)
            text = text.replace(f.code, style(f.code, bold=True), 1)
            echo(f"{pad}  {mark} {text.lstrip()}")
            if extra:
                echo(dim(wrap("; ".join(extra), indent=len(pad) + 4)))


def findings_verdict(findings, strict: bool) -> str:
    counts = severity_counts(findings)
    code = findings_exit_code(findings, strict)
    text = (f"{plural(counts['error'], 'error')}, {plural(counts['warning'], 'warning')}"
            f", {counts['info']} info: ")
    if code:
        return text + style("FAIL", fg="red", bold=True) + " (exit 1)"
    return text + style("OK", fg="green", bold=True)
