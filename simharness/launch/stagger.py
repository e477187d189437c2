"""Start-up slots: at most N ranks import torch at the same time (:func:`start_slot`).

Every rank of a launch starts at once; 64 interpreters importing torch on 2 cores take
turns every few milliseconds and each import runs cold in the caches. With
``LaunchSpec(start_slots=N)`` the launcher makes a folder of N lock files and sets
:data:`SLOTS_ENV` to ``FOLDER:N``; the rank bootstrap takes the lock ``rank % N``
(``flock``, blocking: a waiting rank uses no CPU) before its heavy imports and releases it
just before the target runs. The ranks are still separate interpreters, started together,
each with its own hash seed; only their import phases are spread out. Without the variable
(plain ``torchrun``, ``srun``) nothing waits.

>>> parse_slots("/tmp/s:4")
('/tmp/s', 4)
>>> parse_slots("bad") is None
True
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable

#: ``FOLDER:N``, set by the launcher for the ranks.
SLOTS_ENV = "SIMHARNESS_START_SLOTS"


def parse_slots(value: str | None) -> tuple[str, int] | None:
    """``(folder, n)`` from :data:`SLOTS_ENV`'s value, or None when absent or malformed."""
    if not value:
        return None
    folder, _, count = value.rpartition(":")
    if not folder or not count.isdigit() or int(count) < 1:
        return None
    return folder, int(count)


def start_slot(value: str | tuple[str, int] | None, rank: int) -> Callable[[], None]:
    """Wait for start slot ``rank % n`` (see the module doc); returns ``release()``.
    ``value``: the variable's text, or ``(folder, n)`` as
    :func:`simharness.envvars.read` gives it (which refuses a malformed value).

    With no (or a malformed) value, or a folder that cannot be opened, nothing waits."""
    slots = value if isinstance(value, tuple) else parse_slots(value)
    if slots is None:
        return lambda: None
    folder, count = slots
    try:
        fd = os.open(os.path.join(folder, f"slot-{rank % count}"), os.O_RDWR | os.O_CREAT,
                     0o600)
    except OSError:
        return lambda: None
    fcntl.flock(fd, fcntl.LOCK_EX)
    released: list[bool] = []

    def release() -> None:
        if not released:
            released.append(True)
            os.close(fd)  # closing drops the lock

    return release
