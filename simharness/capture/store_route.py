"""Rank records through the c10d store: ``python -m simharness.capture.rank --via-store``.

Across nodes without a shared folder, each rank hands its record to rank 0 through the
job's own c10d store, the ``TCPStore`` torchrun's agent serves at ``MASTER_ADDR:MASTER_PORT``
(the one ``init_process_group`` uses): the record (JSON) goes under
``simharness-capture/<run id>/rank-NNNNN.json`` and a counter ``.../done`` is raised by one.
Rank 0, once its own record is handed off, waits until the counter reaches the world size
(or ``wait_s`` passes), writes every record it got into its ``--out-dir`` (so
``simharness capture --merge DIR`` works on rank 0's node unchanged) and the merged capture
into ``DIR/capture.json``. A rank whose record never arrived is ``not-run`` there.

The store must outlive the ranks: torchrun's agent store does (``TORCHELASTIC_USE_AGENT_STORE``).
Without it (``srun`` starting the ranks directly, where rank 0's process hosts the store),
use the shared-folder route (``--out-dir`` on a shared file system).

>>> record_key("job7", 3)
'simharness-capture/job7/rank-00003.json'
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .merge import merge_records, record_name, write_record
from .record import CaptureError
from .stall import partial_name

PREFIX = "simharness-capture"
CAPTURE_FILE = "capture.json"
CONNECT_TIMEOUT_S = 60.0
_POLL_S = 0.2


def record_key(run_id: str, rank: int) -> str:
    return f"{PREFIX}/{run_id}/{record_name(rank)}"


class StoreRoute:
    """One rank's connection to the job's store (a client per thread)."""

    def __init__(self, environ: Mapping[str, str], rank: int, world_size: int):
        addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT", "")
        if not addr or not port.isdigit():
            raise CaptureError(f"--via-store needs MASTER_ADDR and MASTER_PORT (got "
                               f"{addr!r}, {port!r}): run the rank under torchrun, or write "
                               f"the records to a shared folder with --out-dir alone.")
        self.addr, self.port = addr, int(port)
        self.run_id = environ.get("TORCHELASTIC_RUN_ID") or "none"
        self.rank, self.world_size = rank, world_size
        self._local = threading.local()

    def _store(self) -> Any:
        store = getattr(self._local, "store", None)
        if store is None:
            from torch.distributed import TCPStore

            store = TCPStore(self.addr, self.port, is_master=False, wait_for_workers=False,
                             timeout=timedelta(seconds=CONNECT_TIMEOUT_S))
            self._local.store = store
        return store

    @property
    def done_key(self) -> str:
        return f"{PREFIX}/{self.run_id}/done"

    def hand_off(self, record: Mapping[str, Any]) -> None:
        """Put this rank's record into the store and count it."""
        store = self._store()
        store.set(record_key(self.run_id, int(record["rank"])), json.dumps(record, default=str))
        store.add(self.done_key, 1)

    def handed_off(self) -> int:
        """How many ranks have handed off their record."""
        return int(self._store().add(self.done_key, 0))

    # the board of blocked ranks (:class:`~.stall.Stall`): partial records on the store
    def _partial_key(self, rank: int) -> str:
        return f"{PREFIX}/{self.run_id}/{partial_name(rank)}"

    def put_partial(self, record: Mapping[str, Any]) -> None:
        """This rank is blocked: its partial record, under ``.../partial-NNNNN.json``."""
        self._store().set(self._partial_key(self.rank), json.dumps(record, default=str))

    def drop_partial(self) -> None:
        """This rank moved on: its partial record emptied (never deleted, so that a reader
        between its ``check`` and its ``get`` does not wait on a key that went away)."""
        self._store().set(self._partial_key(self.rank), "")

    def posted(self) -> dict[int, bytes]:
        """Each rank's handed-off record, else its partial record (the ranks with neither
        left out)."""
        store = self._store()
        out = {}
        for r in range(self.world_size):
            for key in (record_key(self.run_id, r), self._partial_key(r)):
                if store.check([key]):
                    raw = bytes(store.get(key))
                    if raw:
                        out[r] = raw
                        break
        return out

    def collect(self, out_dir: str, wait_s: float) -> str:
        """Rank 0: wait for every record (at most ``wait_s``), write them and the merged
        capture into ``out_dir``; returns the capture file's path."""
        store = self._store()
        deadline = time.monotonic() + wait_s
        while self.handed_off() < self.world_size and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        os.makedirs(out_dir, exist_ok=True)
        for r in range(self.world_size):
            key = record_key(self.run_id, r)
            if store.check([key]):
                write_record(out_dir, json.loads(store.get(key)))
        cap = merge_records(out_dir, meta={"route": "c10d-store", "run_id": self.run_id})
        path = os.path.join(out_dir, CAPTURE_FILE)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(cap.to_json())
        os.replace(tmp, path)
        return path
