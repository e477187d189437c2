"""What the rank starters share, and what each of them guarantees.

simharness starts ranks three ways:

- **the launcher** (:mod:`simharness.launch.launcher`): torch's own elastic agent starts
  every rank as a fresh interpreter through the rank bootstrap
  (:mod:`simharness.launch.bootstrap`); used by ``simharness run``, the ``world_size``
  marker of :mod:`simharness.testing` and faithful ``simharness capture``;
- **the forked replay ranks** (:mod:`simharness.replay.controller`): a helper process
  (:mod:`simharness.replay.local`) imports torch once and forks one process per rank; used by
  ``simharness replay`` and ``replay-data``;
- **the fork pool** (:mod:`simharness.capture.fork_pool`): ``simharness capture --fast`` forks
  a few workers from one interpreter, each running many ranks in turn under torch's
  ``fake`` backend.

Every starter guarantees:

- **a timeout**: a rank that runs too long is stopped and reported as such, never waited for
  forever (launcher: the rank's own watchdog, ``--timeout`` for capture and
  ``SIMHARNESS_RUN_TIMEOUT`` per test for ``simharness run``, with the caller's backstop
  behind it; forked replay ranks: the collectives' ``timeout`` and, when no rank makes
  progress for ``timeout + 30`` s, the helper; fork pool: ``timeout`` seconds per rank);
- **a grace period**: once one rank has failed or every other rank has finished, the rest
  get a few seconds to report before they are stopped (launcher: ``grace_s``, SIGTERM then
  SIGKILL, and capture's ``--grace``; forked replay ranks: one second after the first
  failure; fork pool: no new rank starts after the first failure);
- **stacks**: a rank stopped as stuck is named with where it was (launcher: the main
  thread's stack, :func:`thread_stack`, written by the rank itself; fork pool: a
  ``faulthandler`` dump asked for from outside, :func:`request_stack_dump`; forked replay
  ranks: the phase and the collective each rank had reached, read from the store);
- **no leftover processes or files**: SIGINT/SIGTERM stop every rank, whatever ends the
  run every rank process is gone and the temporary directories are removed when the
  starter returns (launcher: the agent kills each rank's process group; forked replay ranks:
  the helper's whole session is killed, and ranks die with the helper,
  ``PR_SET_PDEATHSIG``; fork pool: every worker, and an isolated rank's child, is killed and
  reaped).

The shared pieces: :func:`free_port`, :func:`versions` (recorded with every capture),
:func:`signals_caught`, the stack helpers, and :func:`refuse_world`, the up-front memory
refusal of a world of rank processes (the figure from :mod:`simharness.resources`).

Importing this module does not import torch.

>>> 1024 <= free_port() < 65536
True
>>> [f.name for f in thread_stack(threading.get_ident())][-2:]  # this thread: here, then it
['<module>', 'thread_stack']
>>> faulthandler_frames('Thread 0x2 (most recent call first):\\n  File "t.py", line 1 in f\\n'
...     'Current thread 0x1 (most recent call first):\\n  File "m.py", line 7 in wait\\n')
[('m.py', 7, 'wait')]
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def versions() -> dict[str, str | None]:
    """The torch and megatron-core a run used: ``{"torch": ..., "megatron-core": ...}``.

    torch's is ``torch.__version__``, the version of the torch this interpreter imports
    (every starter imports it to start ranks: the elastic agent, the replay helper, the fork
    pool's workers); the distribution's metadata can name another copy (a source build or a
    torch on ``PYTHONPATH`` shadows the installed one, and a copy without metadata has
    none). megatron-core's comes from its distribution metadata, without importing it (an
    import takes seconds and may fail where the ranks would not); None when not installed.
    """
    import torch

    from ..mcore import installed_version

    return {"torch": str(torch.__version__), "megatron-core": installed_version()}


@contextlib.contextmanager
def signals_caught() -> Iterator[list[int]]:
    """SIGINT/SIGTERM append their number to the yielded list instead of ending the
    process (main thread only; elsewhere nothing changes)."""
    got: list[int] = []
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: no handler
            previous[sig] = signal.signal(sig, lambda signum, _frame: got.append(signum))
    try:
        yield got
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# ------------------------------------------------------------------ stacks
def thread_stack(ident: int | None = None) -> traceback.StackSummary:
    """The stack of thread ``ident`` (default: the main thread), outermost frame first;
    empty when the thread has ended. A rank's watchdog thread reads its own main thread."""
    if ident is None:
        ident = threading.main_thread().ident
    frame = sys._current_frames().get(ident or 0)
    return traceback.extract_stack(frame) if frame is not None else traceback.StackSummary()


def register_stack_dump(sig: int, path: str):
    """On signal ``sig``, ``faulthandler`` appends every thread's stack to ``path`` (even
    while the main thread holds the GIL in C code). Returns the open file: keep it for the
    life of the process."""
    import faulthandler

    dump = open(path, "w")  # noqa: SIM115 - lives as long as the process
    faulthandler.register(sig, file=dump, all_threads=True)
    return dump


def request_stack_dump(pid: int, path: str, wait_s: float = 2.0,
                       sig: int = signal.SIGUSR1) -> str:
    """Ask process ``pid`` (which :func:`register_stack_dump` ed ``path``) for its stacks;
    the text it appended within ``wait_s`` seconds ("" when it could not be asked)."""
    try:
        size0 = os.path.getsize(path)
        os.kill(pid, sig)
    except (OSError, TypeError):
        return ""
    deadline = time.monotonic() + wait_s
    text = ""
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                fh.seek(size0)
                text = fh.read()
        except OSError:
            break
        if text.rstrip().endswith(("in <module>", "<module>")) or text.count("\n") > 40:
            break
    return text


_FH_FRAME = re.compile(r'^\s*File "(.*)", line (\d+) in (.*)$')


def faulthandler_frames(text: str) -> list[tuple[str, int, str]]:
    """The frames of the dumping thread (``Current thread``, else the first) of a
    ``faulthandler`` dump, innermost first: ``(file, line, function)``."""
    sections = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text.strip())
    main = next((s for s in sections if s.startswith("Current thread")),
                sections[0] if sections else "")
    frames = []
    for line in main.splitlines():
        m = _FH_FRAME.match(line)
        if m:
            frames.append((m.group(1), int(m.group(2)), m.group(3)))
    return frames


# ------------------------------------------------------------------ memory
def refuse_world(world_size: int, per_rank_mb: int, *, what: str, instead: str,
                 error: type[Exception], available_mb: int | None = None) -> None:
    """Raise ``error`` before any rank starts when ``world_size`` rank processes of
    ``per_rank_mb`` MB each do not fit in the memory available now
    (:func:`simharness.resources.available_memory`: ``MemAvailable``, less under a cgroup
    limit, or ``SIMHARNESS_MEMORY_LIMIT``). The message names the estimate, what is
    available, the largest world that fits, and ``instead`` (what to do).

    >>> refuse_world(4, 260, what="a run", instead="free memory", error=ValueError,
    ...              available_mb=2000)
    >>> try:
    ...     refuse_world(64, 260, what="a run", instead="free memory.", error=ValueError,
    ...                  available_mb=2000)
    ... except ValueError as exc:
    ...     print(exc)
    a run of 64 ranks needs about 16640 MB (64 processes x 260 MB each) but 2000 MB are \
available now; the largest world that fits is 7 ranks: free memory.
    """
    if available_mb is None:
        from ..resources import MIB, available_memory

        available_mb = available_memory().available // MIB
    need = world_size * per_rank_mb
    if need > available_mb:
        fits = available_mb // per_rank_mb
        raise error(f"{what} of {world_size} ranks needs about {need} MB ({world_size} "
                    f"processes x {per_rank_mb} MB each) but {available_mb} MB are available "
                    f"now; the largest world that fits is {fits} ranks: {instead}")


__all__ = ["faulthandler_frames", "free_port", "refuse_world", "register_stack_dump",
           "request_stack_dump", "signals_caught", "thread_stack", "versions"]
