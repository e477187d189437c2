"""Seeded draws of configurations at the edges of validation (rank offsets and windows,
edited orders, the all-gather option with GTP), per profile and the megatron-core release
it models. The parity tests run them through megatron-core; the rule-verdict tests pin
simharness's verdicts on the same draws."""

from __future__ import annotations

import os
import random

from simharness.profiles import get_profile

# SIMHARNESS_EDGE_SEED / SIMHARNESS_EDGE_SCALE=10 for a longer held-out hunt.
SEED = os.environ.get("SIMHARNESS_EDGE_SEED", "20261203")
SCALE = int(os.environ.get("SIMHARNESS_EDGE_SCALE", "1"))
DRAWS = {"offset": 24 * SCALE, "order": 30 * SCALE, "gtp-ag": 24 * SCALE}  # per release
RELEASES = [("0.16", "0.16.1"), ("0.16", "0.17.1"), ("0.18", "0.18.2"), ("0.19", "0.19.2")]
BASE = ["tp", "cp", "ep", "dp", "pp"]


# ------------------------------------------------------------------ drawing
def _sizes(rng: random.Random, gtp_axis: bool) -> dict:
    """Sizes Megatron may or may not accept (divisibility is left to chance)."""
    kw = dict(tensor_model_parallel_size=rng.choice([1, 1, 2, 4]),
              pipeline_model_parallel_size=rng.choice([1, 1, 2]),
              context_parallel_size=rng.choice([1, 1, 2]),
              expert_model_parallel_size=rng.choice([1, 1, 2]))
    if rng.random() < 0.3:
        kw["expert_tensor_parallel_size"] = rng.choice([1, 2])
    if gtp_axis and rng.random() < 0.3:
        kw["gtp_remat_size"] = rng.choice([1, 2])
    return kw


def _window(kw: dict, rng: random.Random) -> int:
    gtp = kw.get("gtp_remat_size", 1)
    return (kw["tensor_model_parallel_size"] * kw["pipeline_model_parallel_size"]
            * kw["context_parallel_size"] * gtp * rng.choice([1, 2, 3]))


def _draw_offset(rng: random.Random, gtp_axis: bool, windows: bool) -> tuple[int, bool, dict]:
    kw = _sizes(rng, gtp_axis)
    W = _window(kw, rng)
    offset = rng.randint(0, 2 * W)
    mode = rng.choice(["fits", "past", "no-local"])
    if mode == "fits":
        world = offset + W + rng.randint(0, 3)
    elif mode == "past":
        world = rng.randint(max(1, W // 2), max(1, offset + W - 1))
    else:
        world = W
    kw["rank_offset"] = offset
    if mode != "no-local":
        kw["local_world_size"] = W
    return world, rng.random() < 0.5, kw


def _draw_order(rng: random.Random, gtp_axis: bool, windows: bool) -> tuple[int, bool, dict]:
    kw = _sizes(rng, gtp_axis)
    tokens = rng.sample(BASE, len(BASE))
    edit = rng.choice(["drop", "drop-tp", "repeat", "repeat", "gtp", "upper", "unknown", "none"])
    if edit.startswith("drop"):
        tokens.remove("tp" if edit == "drop-tp" else rng.choice(BASE))
    elif edit == "repeat":
        tokens.insert(rng.randint(0, len(tokens)), rng.choice(BASE))
    elif edit == "gtp":
        tokens.insert(rng.randint(0, len(tokens)), "gtp_remat")
    elif edit == "unknown":
        tokens.insert(rng.randint(0, len(tokens)), "xx")
    order = "-".join(tokens)
    kw["order"] = order.upper() if edit == "upper" else order
    W = _window(kw, rng)
    world = W
    if windows and edit == "repeat" and rng.random() < 0.3:  # first W ranks of a bigger world
        kw["local_world_size"] = W
        world = W + rng.randint(1, 2 * W)
    return world, rng.random() < 0.3, kw


def _draw_gtp_ag(rng: random.Random, gtp_axis: bool, windows: bool) -> tuple[int, bool, dict]:
    tp = rng.choice([1, 2])
    kw = dict(tensor_model_parallel_size=tp, pipeline_model_parallel_size=rng.choice([1, 2]),
              expert_model_parallel_size=rng.choice([1, 2]),
              expert_tensor_parallel_size=rng.choice([1, tp]),
              gtp_remat_size=rng.choice([1, 1, 2]), expert_gtp_remat_size=rng.choice([1, 2]))
    if rng.random() < 0.3:
        kw["order"] = rng.choice(["tp-gtp_remat-cp-ep-dp-pp", "gtp_remat-tp-cp-ep-dp-pp",
                                  "tp-cp-ep-dp-pp-gtp_remat"])
    W = (tp * kw["pipeline_model_parallel_size"] * kw["gtp_remat_size"]
         * kw["expert_gtp_remat_size"] * kw["expert_model_parallel_size"] * rng.choice([1, 2]))
    world = W
    if windows and rng.random() < 0.3:  # a window further up a bigger world
        kw["rank_offset"] = rng.choice([W, 2 * W, 3 * W])
        kw["local_world_size"] = W
        world = kw["rank_offset"] + W + rng.choice([0, W])
    return world, rng.random() < 0.85, kw


DRAWERS = {"offset": _draw_offset, "order": _draw_order, "gtp-ag": _draw_gtp_ag}


def generated(mcore: str, release: str) -> list[tuple[str, int, bool, dict]]:
    """``(class, torch world, all-gather on, Megatron keyword arguments)``, seeded."""
    prof = get_profile(mcore)
    rng = random.Random(f"{SEED}-{release}")
    out = []
    for cls, n in DRAWS.items():
        windows = release != "0.16.1"  # 0.16.1 has no rank_offset / local_world_size
        if (cls == "offset" and not windows) or (cls == "gtp-ag" and not prof.gtp_axis):
            continue
        for _ in range(n):
            out.append((cls, *DRAWERS[cls](rng, prof.gtp_axis, windows)))
    return out
