"""Why ``monitored_barrier`` hangs under ``TORCH_GLOO_LAZY_INIT=1``: a plain-torch reproduction.

No simharness code runs here: two processes, one gloo default group over a FileStore (so
the only listening TCP socket in each process is gloo's device listener). Rank 0 calls
``dist.monitored_barrier(timeout=1s)``; rank 1 never does (it sleeps, then leaves). Rank 0
should raise "Rank 1 failed to pass monitoredBarrier" after 1 s. With lazy init it sometimes
waits the group's whole timeout instead.

The cause, in gloo's source (pytorch/gloo, ``gloo/transport/tcp``): with lazy init,
``Context::getPair`` starts a pair's connection on first use (``context.cc``); one side of
a pair is the initiator and the other the listener, picked by ``Device::isInitiator``
(``device.cc``: the larger ``sin_port``, compared as stored, in network byte order). The
listener only registers a callback and waits for the peer to connect. torch's
``ProcessGroupGloo::monitoredBarrier`` on rank 0 posts a ``recv`` from every other rank
before it waits with the barrier's timeout, and ``Pair::recv`` calls ``verifyConnected``,
which for a pair still ``CONNECTING`` waits for the connection with the pair's own timeout,
not the barrier's. So when rank 0 is the listener of the pair with the absent rank, rank 0
blocks in posting the recv (measured: still there at 16 s, twice the group's 8 s timeout);
when it is the initiator, its connect is accepted by the absent rank's listener thread, and
the 1 s timeout works. Eagerly (the default), every pair is
connected inside ``init_process_group``, and this cannot happen.

The run predicts each trial from the two listening ports (read from ``/proc``) before it
happens and prints how many trials matched the prediction:

    python bench/gloo_lazy_barrier.py --trials 20
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GROUP_TIMEOUT_S = 8.0
BARRIER_TIMEOUT_S = 1.0


def listening_ports(pid: int) -> set[int]:
    """TCP ports that process ``pid`` listens on (from /proc/PID/fd and /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # state LISTEN
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def as_stored(port: int) -> int:
    """The port as gloo compares it: ``sin_port`` (network byte order) read as a host int."""
    return socket.htons(port)


def rank_main(rank: int, path: str, ready: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
    open(f"{ready}.{rank}", "w").close()
    while not os.path.exists(f"{ready}.go"):
        time.sleep(0.05)
    if rank == 1:
        time.sleep(GROUP_TIMEOUT_S + 3)
        os._exit(0)
    t0 = time.monotonic()
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=BARRIER_TIMEOUT_S))
        outcome = "passed"
    except RuntimeError as exc:
        outcome = "error: " + str(exc).splitlines()[0][:80]
    with contextlib.suppress(BrokenPipeError):
        print(f"{time.monotonic() - t0:.2f} {outcome}", flush=True)
    os._exit(0)


def trial(lazy: bool) -> tuple[float, str, bool | None, bool | None]:
    """One trial: (rank 0's seconds in monitored_barrier, outcome, predicted to hang from the
    ports as gloo compares them, and from the plain port numbers)."""
    env = dict(os.environ, TORCH_GLOO_LAZY_INIT="1" if lazy else "0", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        ready = os.path.join(tmp, "ready")
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--file",
                                   os.path.join(tmp, "store"), "--ready", ready],
                                  env=env, stdout=subprocess.PIPE, text=True)
                 for r in range(2)]
        while not all(os.path.exists(f"{ready}.{r}") for r in range(2)):
            time.sleep(0.05)
        ports = [listening_ports(p.pid) for p in procs]
        predicted = plain = None
        if all(len(p) == 1 for p in ports):
            p0, p1 = (next(iter(p)) for p in ports)
            predicted = as_stored(p0) < as_stored(p1)  # rank 0 is the pair's listener
            plain = p0 < p1
        open(f"{ready}.go", "w").close()
        limit = GROUP_TIMEOUT_S * 2
        try:
            out = procs[0].communicate(timeout=limit)[0].split(maxsplit=1)
        except subprocess.TimeoutExpired:
            out = [str(limit), f"still waiting after {limit:g}s (killed)"]
        for p in procs:
            p.kill()
            p.wait()
    return float(out[0]), out[1], predicted, plain


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--ready", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank is not None:
        rank_main(args.rank, args.file, args.ready)
        return 0
    print(f"rank 1 never calls monitored_barrier(timeout={BARRIER_TIMEOUT_S:g}s); group "
          f"timeout {GROUP_TIMEOUT_S:g}s; 'stuck' = rank 0 waited > 2x the barrier timeout")
    for lazy in (True, False):
        stuck = matched = plain_matched = known = 0
        for _ in range(args.trials):
            seconds, outcome, predicted, plain = trial(lazy)
            hung = seconds > 2 * BARRIER_TIMEOUT_S
            stuck += hung
            if lazy and predicted is not None:
                known += 1
                matched += predicted == hung
                plain_matched += plain == hung
            print(f"  lazy={int(lazy)} {seconds:5.2f}s stuck={hung!s:5} "
                  f"predicted={predicted!s:5} {outcome}", flush=True)
        line = f"TORCH_GLOO_LAZY_INIT={int(lazy)}: stuck in {stuck} of {args.trials}"
        if lazy:
            line += (f"; predicted from the ports as gloo compares them: right in {matched} of "
                     f"{known} (from the plain port numbers: {plain_matched} of {known})")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
