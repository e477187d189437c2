"""Plan files: a layout exported as JSON (schema ``simharness.layout/1``), written and read.

One writer for every plan the project saves (``simharness export``, ``replay --save-plan``
/ ``--print-torchrun``): pretty at the top, one group per line, so plans read and diff well.

>>> from simharness import ParallelismConfig, build_layout
>>> from simharness.layout import Layout
>>> layout = build_layout(ParallelismConfig(world_size=4, tensor_model_parallel_size=2))
>>> text = plan_json(layout)
>>> Layout.from_json(text).groups("tp").tolist()
[[0, 1], [2, 3]]
>>> [line.strip() for line in text.splitlines() if "[2, 3]" in line][:1]  # a group a line
['[2, 3]']
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from .configfile import ConfigFileError
from .errors import SimharnessError

if TYPE_CHECKING:  # pragma: no cover
    from .layout import Layout


def plan_json(layout: Layout) -> str:
    """The plan file's text: ``layout.to_dict()`` with each group on a line of its own."""
    d = layout.to_dict(groups=False)
    texts = {}
    for k in layout.kinds:
        arr = layout.groups(k)
        if arr.shape[0] == 0:
            texts[k] = "[]"
        else:
            body = json.dumps(arr.tolist())[1:-1].replace("], [", "],\n        [")
            texts[k] = "[\n        " + body + "\n      ]"
        d["kinds"][k]["groups"] = f"@@groups:{k}@@"
    text = json.dumps(d, indent=2)
    return re.sub(r'"@@groups:([^@"]+)@@"', lambda m: texts[m.group(1)], text) + "\n"


def write_plan(layout: Layout, path: str) -> None:
    """Write :func:`plan_json` to ``path`` (a :class:`ConfigFileError` naming it on failure)."""
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(plan_json(layout))
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot write the plan: {exc.strerror or exc}.",
                              path=path) from None


def read_plan(path: str, missing_hint: str = "check the path") -> Layout:
    """Read a plan file. Every failure is a :class:`SimharnessError` that starts with ``path``."""
    from .layout import Layout

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: no such file; {missing_hint}.", path=path) from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a text file; expected the JSON that "
                              f"'simharness export' writes.", path=path) from None
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read: {exc.strerror}.", path=path) from None
    try:
        return Layout.from_json(text)
    except SimharnessError as exc:
        raise SimharnessError(f"{path}: {exc}") from None
