"""A rank prefixes its own output: :func:`prefix_output`.

torch's agent prefixes a rank's lines (``--tee`` with ``log_line_prefix_template``) by
sending them to files and tailing each file from a thread of the agent that polls every
0.1 s (torch/distributed/elastic/multiprocessing/tail_log.py): two threads per rank in the
agent. At 64 ranks on 2 cores that polling cost 20-40 CPU-seconds per capture. Instead the
launcher (``LaunchSpec(prefix_in_rank=True)``) leaves the ranks' output alone and sets
:data:`PREFIX_ENV`; the rank bootstrap then calls :func:`prefix_output` first thing: file
descriptors 1 and 2 become a pipe, and a thread of the rank, blocked in ``read``, writes
each line to the original stderr with the prefix. What the process writes at the file
descriptor level (C++ libraries, subprocesses) is prefixed too, and nothing reaches stdout.

>>> split_lines(b"[rank3]:", b"a\\nb\\npar")
(b'[rank3]:a\\n[rank3]:b\\n', b'par')
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable

#: Set (to anything) by the launcher: the rank prefixes its own output ``[rankN]:``.
PREFIX_ENV = "SIMHARNESS_PREFIX_OUTPUT"
_DRAIN_S = 2.0


def split_lines(prefix: bytes, data: bytes) -> tuple[bytes, bytes]:
    """The complete lines of ``data``, each prefixed, and the unfinished rest."""
    *lines, rest = data.split(b"\n")
    return b"".join(prefix + ln + b"\n" for ln in lines), rest


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError:
            return  # the reader is gone: nothing to report to
        view = view[n:]


def prefix_output(prefix: str) -> Callable[[], None]:
    """Send this process's fd 1 and 2 through a prefixing thread to the current fd 2;
    returns ``drain()``, which flushes, ends the pipe and waits (up to 2 s) for the thread
    to write what is left. Call it before the process ends (``os._exit`` included)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    target = os.dup(2)
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    tag = prefix.encode()
    if sys.stdout is not None and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # lines in order with stderr's

    def pump() -> None:
        rest = b""
        while True:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            lines, rest = split_lines(tag, rest + chunk)
            if lines:
                _write_all(target, lines)
        if rest:
            _write_all(target, tag + rest + b"\n")
        os.close(read_fd)

    thread = threading.Thread(target=pump, name="simharness-output", daemon=True)
    thread.start()
    done: list[bool] = []

    def drain() -> None:
        if done:
            return
        done.append(True)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # closed, or re-entered from a signal handler: skip
                with contextlib.suppress(OSError, ValueError, RuntimeError):
                    stream.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(target, 2)    # late writes (interpreter teardown) still reach stderr
        os.dup2(devnull, 1)
        os.close(devnull)
        thread.join(_DRAIN_S)  # a child still holding the pipe: give up after the wait

    return drain
