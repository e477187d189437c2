"""The rank bootstrap: ``python -m simharness.launch.bootstrap [--shim] -- TARGET ARGS``.

Published as ``python -m simharness.launch.rank`` (the same entry, kept as that name).

TARGET is ``script.py`` or ``-m module`` (``-- -m pytest tests/x.py``). The rank reads its
torchrun variables (or Slurm's, see :func:`simharness.launch.env.slurm_environ`), installs
the GPU shim when ``--shim`` is given (before any user code is imported), then runs the
target as ``__main__`` with ``sys.argv`` and ``sys.path[0]`` as ``python script.py`` /
``python -m module`` would set them. It works under ``simharness run``, plain ``torchrun``
and ``srun``::

    torchrun --nproc-per-node 8 -m simharness.launch.rank --shim -- -m pytest tests/unit_tests

Exit status: the target's own; :data:`NEEDS_GPU_EXIT` (77) with one ``error:`` line when
the target stops on :class:`simharness.errors.NeedsGPU`; 2 with one ``error:`` line for bad
arguments or a missing rank environment.

>>> parse(["--shim", "--", "-m", "pytest", "-q"])
RankArgs(shim=True, module='pytest', script=None, args=('-q',))
>>> parse(["--", "train.py", "--lr", "1"]).script
'train.py'
"""

from __future__ import annotations

import os
import runpy
import sys
from dataclasses import dataclass

from ..errors import SimharnessError, needs_gpu_message
from .env import RankEnv, slurm_environ

#: Exit status of a rank whose target stopped on NeedsGPU (automake's "skipped").
NEEDS_GPU_EXIT = 77

USAGE = ("usage: python -m simharness.launch.rank [--shim] [--lazy-gloo] -- "
         "(script.py | -m module) [ARGS...]")


class RankUsageError(SimharnessError, ValueError):
    """Bad arguments to the per-rank bootstrap."""


@dataclass(frozen=True)
class RankArgs:
    """What one rank runs: ``script`` or ``module`` (exactly one), its ``args``, the shim."""

    shim: bool
    module: str | None
    script: str | None
    args: tuple[str, ...]
    #: ``TORCH_GLOO_LAZY_INIT=1`` (``gpu_shim.install(lazy_gloo=)``); capture sets it
    lazy_gloo: bool = False
    #: capture: compute on a CUDA tensor stops the rank (``gpu_shim.install(compute_stops=)``)
    compute_stops: bool = False

    def __repr__(self) -> str:
        return (f"RankArgs(shim={self.shim}, module={self.module!r}, script={self.script!r}, "
                f"args={self.args!r})")


def parse(argv: list[str]) -> RankArgs:
    """Parse the bootstrap's arguments (everything after ``--`` is the target)."""
    if "--" not in argv:
        raise RankUsageError(f"missing `--` before the target; {USAGE}")
    cut = argv.index("--")
    opts, target = argv[:cut], argv[cut + 1:]
    unknown = [o for o in opts if o not in ("--shim", "--lazy-gloo")]
    if unknown:
        raise RankUsageError(f"unknown option(s) {' '.join(unknown)}; {USAGE}")
    if not target or (target[0] == "-m" and len(target) < 2):
        raise RankUsageError(f"no target after `--`; {USAGE}")
    shim, lazy = "--shim" in opts, "--lazy-gloo" in opts
    if target[0] == "-m":
        return RankArgs(shim, target[1], None, tuple(target[2:]), lazy)
    if target[0].startswith("-"):
        raise RankUsageError(f"target {target[0]!r} must be a script or `-m module`; {USAGE}")
    return RankArgs(shim, None, target[0], tuple(target[1:]), lazy)


def prepare(rank_args: RankArgs) -> RankEnv:
    """Fill Slurm-derived variables, check the rank environment, install the shim if asked."""
    os.environ.update(slurm_environ(os.environ))
    env = RankEnv.from_environ(os.environ)
    if rank_args.script is not None and not os.path.isfile(rank_args.script):
        raise RankUsageError(f"script {rank_args.script!r} does not exist (cwd {os.getcwd()})")
    if rank_args.shim:
        from . import gpu_shim  # imports torch

        gpu_shim.install(env.local_rank, env.local_world_size, lazy_gloo=rank_args.lazy_gloo,
                         compute_stops=rank_args.compute_stops)
    return env


def run_target(rank_args: RankArgs) -> None:
    """Run the target as ``__main__`` in this interpreter (raises what it raises)."""
    if rank_args.module is not None:
        sys.argv = [rank_args.module, *rank_args.args]  # runpy puts the module's file first
        runpy.run_module(rank_args.module, run_name="__main__", alter_sys=True)
    else:
        script = rank_args.script
        assert script is not None
        sys.argv = [script, *rank_args.args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script.py`
        runpy.run_path(script, run_name="__main__")


def main(argv: list[str] | None = None) -> int:
    """Entry of ``python -m simharness.launch.rank``; returns the exit status."""
    try:
        rank_args = parse(sys.argv[1:] if argv is None else argv)
        prepare(rank_args)
    except SimharnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        run_target(rank_args)
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except Exception as exc:
        stop = needs_gpu_message(exc)  # also one that torch.compile wrapped in its own error
        if stop is None:
            raise
        print(f"error: {stop}", file=sys.stderr)
        return NEEDS_GPU_EXIT
    finally:
        _report_ignored()
    return 0


def _report_ignored() -> None:
    """Rank 0 of a script says once which GPU-only options the shim dropped."""
    from . import gpu_shim

    shim = gpu_shim.active()
    if shim is None or os.environ.get("RANK", "0") != "0" or os.environ.get("SIMHARNESS_RUN_DIR"):
        return
    items = shim.ignored_summary()
    if items:
        print("simharness shim: ignored (GPU-only, not run on CPU): " + "; ".join(items),
              file=sys.stderr)


def run_as_main() -> None:
    """``python -m``: run :func:`main` and exit with its status."""
    status = main()
    if status == NEEDS_GPU_EXIT:
        # The rank abandons a job whose gloo groups are still alive: their threads, joined
        # by C++ destructors at interpreter exit, can abort the process ("terminate called
        # without an active exception", SIGABRT) and hide the 77. Leave without teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    run_as_main()
