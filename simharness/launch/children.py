"""Processes a rank started end with it (Linux ``/proc``; elsewhere nothing is done).

A captured script may start processes of its own (a data-loader worker, a ``subprocess``
left running, a daemon that double-forks). torchrun's agent kills a rank's process group
only when it stops the rank; a child the rank left behind when it ended would outlive the
capture or the run. So a capture rank, and each rank of ``simharness run``
(:mod:`simharness.pytest_ranks.rank_plugin`),

* becomes a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4+): a
  descendant whose parent exits is re-parented to the rank, not to init, so it stays in
  the rank's tree;
* when it ends (record written, or stopped), sends SIGTERM to every descendant, waits a
  moment, then SIGKILL to those left (:func:`end_descendants`).

``simharness run`` keeps a backstop for ranks that could not do it themselves (killed by
the launcher, ``os._exit`` in a test): while its ranks run, the runner is the subreaper
(:func:`orphans_ended`), so what they left behind is re-parented to it and ended after each
round of ranks.

``--fast`` does the same per rank inside its worker: the processes a rank started, and
their descendants, are ended when the rank ends (:func:`descendants` before and after).

>>> import os
>>> descendants(os.getpid()) == descendants(os.getpid())
True
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

PR_SET_CHILD_SUBREAPER = 36   # linux/prctl.h
PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, arg: Any) -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper(on: bool = True) -> bool:
    """Make this process the reaper of its orphaned descendants (``on=False``: stop being
    it); whether it worked."""
    return _prctl(PR_SET_CHILD_SUBREAPER, int(on))


def is_subreaper() -> bool:
    """Whether this process is a child subreaper now (False where it cannot be read)."""
    flag = ctypes.c_int(0)
    return _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) and bool(flag.value)


@contextlib.contextmanager
def orphans_ended(wait_s: float = 1.0) -> Iterator[None]:
    """While inside, this process is a child subreaper; on leaving, every descendant that
    was not there on entry is ended (:func:`end_processes`), and the flag is put back.

    >>> with orphans_ended():
    ...     is_subreaper() or not os.path.exists("/proc/self/task")
    True
    """
    before = frozenset(descendants(os.getpid()))
    was = is_subreaper()
    become_subreaper()
    try:
        yield
    finally:
        end_descendants(keep=before, wait_s=wait_s)
        if not was:
            become_subreaper(False)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError), \
                open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
            out.extend(int(c) for c in fh.read().split())
    return out


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (children first), from ``/proc``; [] where there is none."""
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = _children(todo.pop())
        out.extend(k for k in kids if k not in out)
        todo.extend(kids)
    return out


def end_processes(pids: list[int], wait_s: float = 1.0) -> list[int]:
    """SIGTERM ``pids``, then SIGKILL those alive after ``wait_s``; returns those signalled."""
    hit = []
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGTERM)
            hit.append(p)
    deadline = time.monotonic() + wait_s
    alive = list(hit)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    for p in alive:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
    for p in hit:  # our own children: reap them (others are reaped by their parent)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(p, os.WNOHANG)
    return hit


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            state = fh.read().rpartition(")")[2].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


def end_descendants(pid: int | None = None, keep: frozenset[int] = frozenset(),
                    wait_s: float = 1.0) -> list[int]:
    """End every descendant of ``pid`` (default: this process) but ``keep``."""
    return end_processes([p for p in descendants(pid or os.getpid()) if p not in keep], wait_s)


__all__ = ["become_subreaper", "descendants", "end_descendants", "end_processes",
           "is_subreaper", "orphans_ended"]
