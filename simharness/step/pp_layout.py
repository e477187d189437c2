"""Megatron's ``pipeline_model_parallel_layout`` strings -> the layers of each stage.

Megatron-Core (0.14+; read at megatron-core 0.16.1,
``megatron/core/transformer/pipeline_parallel_layer_layout.py``) lets a job place
every layer by hand: one string, virtual stages separated by ``|``, one letter
per layer -- ``E`` the embedding, ``t`` a transformer (decoder) layer, ``m`` a
multi-token-prediction layer, ``L`` the loss (output layer). ``x*n`` repeats a
letter, ``(...)*n`` a group (no nesting); commas are cosmetic
(``parse_str_to_list``, lines 283-321). There are ``pp x vpp`` virtual stages:
stage ``i`` belongs to pipeline rank ``i % pp``, chunk ``i // pp`` (the 1D -> 2D
conversion of ``__init__``, lines 47-54), and decoder layers are numbered in
that order (``get_layer_offset``, lines 170-192). ``validate_layer_layout``
(lines 85-150) asks for ``E`` first and ``L`` last, each exactly once, as many
``t`` as the model has layers, and MTP layers after every decoder layer, in
the last chunk of their rank; ``transformer_config.py`` forbids mixing the
layout with ``num_layers_in_first/last_pipeline_stage`` and
``account_for_embedding/loss_in_pipeline_split``, and a given
``virtual_pipeline_model_parallel_size`` must equal the layout's.

The parser here is our own (same syntax, typed errors that name the string).
MTP layers are accepted and placed but not priced (the model description has
no MTP layers).

>>> expand_layout("Et*3|(tt|)*2,m|L")
('Ettt', 'tt', 'tt', 'm', 'L')
>>> layout_split("Et*3|(tt|)*2,m|L", pp=5, num_layers=7)
((range(0, 3),), (range(3, 5),), (range(5, 7),), (range(7, 7),), (range(7, 7),))
>>> layout_split("Ett|tt|tt|ttL", pp=2, num_layers=8)   # vpp 2: chunk-major numbering
((range(0, 2), range(4, 6)), (range(2, 4), range(6, 8)))
"""

from __future__ import annotations

import re

from ..topology.errors import TopologyError

LETTERS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")
_SINGLE = re.compile(r"([^()*\d])\*(\d+)")   # any letter or '|' (an empty stage)


def _bad(text: str, why: str) -> TopologyError:
    return TopologyError(f"pipeline_model_parallel_layout {text!r}: {why} (Megatron's syntax: "
                         "E embedding, t layer, m MTP layer, L loss, | between virtual stages, "
                         "x*n and (...)*n repeat, e.g. 'Et*3|(tt|)*29,m|L')")


def expand_layout(text: str) -> tuple[str, ...]:
    """The virtual stages of a layout string, repetitions unrolled (one letter a layer)."""
    if not isinstance(text, str) or not text.strip():
        raise _bad(str(text), "give a non-empty layout string")
    s = text.strip().replace(",", "")
    s = _GROUP.sub(lambda m: m.group(1) * int(m.group(2)), s)
    s = _SINGLE.sub(lambda m: m.group(1) * int(m.group(2)), s)
    for ch in s:
        if ch in "()":
            raise _bad(text, "unbalanced or nested parentheses, or a group without '*n' after "
                             "it")
        if ch == "*" or ch.isdigit():
            raise _bad(text, "'*' must follow a letter or a (...) group and be followed by a "
                             "whole number")
        if ch != "|" and ch not in LETTERS:
            raise _bad(text, f"unknown layer letter {ch!r}; known: {', '.join(LETTERS)}")
    return tuple(s.split("|"))


def layout_split(text: str, pp: int, *, vpp: int | None = None,
                 num_layers: int | None = None) -> tuple[tuple[range, ...], ...]:
    """Per pipeline stage, per virtual chunk: the decoder layers it builds, as
    :func:`.workload.pipeline_split` gives them, with Megatron's checks.

    ``vpp``: the job's virtual pipeline size, if set (it must equal the layout's);
    ``num_layers``: the model's decoder layers, if known (the ``t`` count must equal it).
    """
    stages = expand_layout(text)
    if len(stages) % pp:
        raise _bad(text, f"{len(stages)} virtual stages do not divide by --pp {pp}; give pp x "
                         "vpp stages")
    v = len(stages) // pp
    if vpp is not None and int(vpp) != v:
        raise _bad(text, f"{len(stages)} stages over --pp {pp} mean vpp {v}, but the job sets "
                         f"--vpp {vpp}; drop --vpp or give {pp * int(vpp)} stages")
    flat = "".join(stages)
    for letter, where, pos in (("E", "first", 0), ("L", "last", -1)):
        if flat.count(letter) != 1 or flat[pos] != letter:
            raise _bad(text, f"the {LETTERS[letter]} ({letter}) must come exactly once, as the "
                             f"{where} layer")
    decoders = flat.count("t")
    if not decoders:
        raise _bad(text, "no decoder layer (t) in the layout")
    if num_layers is not None and decoders != num_layers:
        raise _bad(text, f"{decoders} decoder layers (t) but the model has {num_layers}; the "
                         "layout must place every layer")
    if "m" in flat:
        if "t" in flat[flat.index("m"):]:
            raise _bad(text, "decoder layers (t) must come before the MTP layers (m)")
        if any("m" in st for i, st in enumerate(stages) if i // pp < v - 1):
            raise _bad(text, "MTP layers (m) must be in the last virtual stage of their "
                             "pipeline rank")
    out: list[list[range]] = [[] for _ in range(pp)]
    start = 0
    for i, st in enumerate(stages):   # chunk-major: stage i is rank i % pp, chunk i // pp
        n = st.count("t")
        out[i % pp].append(range(start, start + n))
        start += n
    return tuple(tuple(r) for r in out)
