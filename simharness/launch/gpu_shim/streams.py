"""CUDA streams, events and NVTX ranges on a CPU rank.

On a CPU rank every op has finished when its call returns, so the order that streams and
events exist to enforce on a GPU already holds: waiting (``wait_stream``, ``wait_event``,
``Event.wait``, ``synchronize``) has nothing left to wait for, ``query()`` is True, and a
``record`` stamps the host clock (``time.perf_counter``) when the work before it is done,
which is what ``elapsed_time`` measures on a GPU: these stand-ins are faithful, not
approximations. Each local device has its default stream (``stream_id`` 0) and a current
stream; ``torch.cuda.stream(s)`` sets it and restores it. NVTX ranges
(``torch.cuda.nvtx``) annotate a profiler timeline that a CPU rank does not have: no-ops
(``range_push`` returns the depth, as NVTX's ``nvtxRangePushA`` does).

Not kept: what a kernel would overlap (nothing runs concurrently), CUDA graph capture
(``torch.cuda.CUDAGraph``, ``graph``: refused with NeedsGPU), inter-process events
(``Event(interprocess=True).ipc_handle()``: refused).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...errors import NeedsGPU

if TYPE_CHECKING:
    from .lifecycle import Shim

from .common import _device_index, _replace_everywhere, _set, user_site

#: torch.cuda names answered here.
STREAM_CALLS = ("Stream", "Event", "current_stream", "default_stream", "stream", "set_stream",
                "is_current_stream_capturing")
#: torch.cuda.nvtx names answered as no-ops.
NVTX_CALLS = ("range_push", "range_pop", "range_start", "range_end", "mark", "range")


class Event:
    """A CUDA event on a CPU rank: recorded at the host clock, never pending.

    >>> a, b = Event(enable_timing=True), Event(enable_timing=True)
    >>> a.record(); b.record(); b.synchronize()
    >>> a.query(), 0 <= a.elapsed_time(b) < 1000
    (True, True)
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, external: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        self._at: float | None = None

    def record(self, stream: Any = None) -> None:
        self._at = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end_event: Any) -> float:
        """Milliseconds from this record to ``end_event``'s, as CUDA's
        ``cudaEventElapsedTime``; both must be recorded, with timing enabled."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("CUDA error: invalid resource handle (simharness shim: "
                               "elapsed_time needs both events made with enable_timing=True)")
        if self._at is None or end_event._at is None:
            raise RuntimeError("CUDA error: device not ready (simharness shim: both events "
                               "must be recorded before elapsed_time)")
        return (end_event._at - self._at) * 1000.0

    def ipc_handle(self) -> Any:
        raise NeedsGPU("torch.cuda.Event.ipc_handle", user_site())

    @property
    def cuda_event(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<torch.cuda.Event (simharness shim) recorded={self._at is not None}>"


_IDS = itertools.count(1)


class Stream:
    """A CUDA stream on a CPU rank: work on it is done when its call returns. ``_shim``
    (set on the class :func:`_patch_streams` makes) holds the current device and each
    device's current stream."""

    _shim: Any = None
    device_type = 1  # c10::DeviceType::CUDA

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        current = self._shim.current_device if self._shim is not None else 0
        index = _device_index(device if device is not None else "cuda", current)
        self.device_index = current if index is None else index
        self.priority = priority
        self.stream_id = int(kwargs.get("stream_id", next(_IDS)))
        self._previous: list[Any] = []

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda", self.device_index)

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    def wait_event(self, event: Any) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> Any:
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def __enter__(self) -> Any:
        streams = self._shim.streams
        self._previous.append(streams.get(self.device_index))
        streams[self.device_index] = self
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._shim.streams[self.device_index] = self._previous.pop()

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Stream) and other.stream_id == self.stream_id
                and other.device_index == self.device_index)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index))

    def __repr__(self) -> str:
        return (f"<torch.cuda.Stream (simharness shim) device=cuda:{self.device_index} "
                f"cuda_stream={self.stream_id:#x}>")


class StreamCalls:
    """``torch.cuda.current_stream`` / ``default_stream`` / ``set_stream`` / ``stream`` over
    ``shim.streams`` (each device's current stream; the default one has ``stream_id`` 0)."""

    def __init__(self, shim: Any, stream_type: type):
        self.shim = shim
        self.defaults = {d: stream_type(d, stream_id=0) for d in range(shim.local_world_size)}
        shim.streams = dict(self.defaults)

    def _device(self, device: Any) -> int:
        i = _device_index(device if device is not None else "cuda", self.shim.current_device)
        if i is None or not 0 <= i < self.shim.local_world_size:
            raise RuntimeError(f"CUDA error: invalid device ordinal (simharness shim: device "
                               f"{device!r}, {self.shim.local_world_size} devices on this "
                               f"node)")
        return i

    def current_stream(self, device: Any = None) -> Any:
        i = self._device(device)
        return self.shim.streams.get(i) or self.defaults[i]

    def default_stream(self, device: Any = None) -> Any:
        return self.defaults[self._device(device)]

    def set_stream(self, stream: Any) -> None:
        if stream is not None:
            self.shim.streams[stream.device_index] = stream

    def stream(self, s: Any) -> StreamContext:
        return StreamContext(s)


class StreamContext:
    """``torch.cuda.stream(s)``: like torch's ``StreamContext`` (``torch/cuda/__init__.py``,
    2.13), an object that may be entered again once left (Megatron-Core's
    ``param_and_grad_buffer.py`` enters one ``stream_context`` twice in ``start_grad_sync``);
    ``as`` binds None, as torch's ``__enter__`` returns nothing.

    >>> class S:
    ...     n = 0
    ...     def __enter__(self): S.n += 1
    ...     def __exit__(self, *e): S.n -= 1
    >>> ctx = StreamContext(S())
    >>> with ctx as got:
    ...     inside = S.n
    >>> with ctx:
    ...     again = S.n
    >>> got, inside, again, S.n
    (None, 1, 1, 0)
    """

    def __init__(self, stream: Any):
        self.stream = stream

    def __enter__(self) -> None:
        if self.stream is not None:
            self.stream.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.stream is not None:
            self.stream.__exit__(*exc)


class Nvtx:
    """``torch.cuda.nvtx`` as no-ops; ``range_push`` / ``range_pop`` return the depth, as
    NVTX's ``nvtxRangePushA`` / ``nvtxRangePop`` do.

    >>> n = Nvtx(); n.range_push("a"), n.range_push("b"), n.range_pop(), n.range_pop()
    (0, 1, 1, 0)
    """

    def __init__(self) -> None:
        self.depth = 0

    def range_push(self, msg: str) -> int:
        self.depth += 1
        return self.depth - 1

    def range_pop(self) -> int:
        if self.depth == 0:
            return -1
        self.depth -= 1
        return self.depth

    def range_start(self, msg: str) -> int:
        return 0

    def range_end(self, range_id: int) -> None:
        return None

    def mark(self, msg: str) -> None:
        return None

    @contextlib.contextmanager
    def range(self, msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
        self.range_push(msg)
        try:
            yield
        finally:
            self.range_pop()


def _patch_streams(shim: Shim) -> None:
    import torch
    import torch.cuda
    import torch.cuda.nvtx

    stream_type = type("Stream", (Stream,), {"_shim": shim, "__module__": "torch.cuda"})
    calls = StreamCalls(shim, stream_type)
    answers: dict[str, Any] = {
        "Stream": stream_type, "Event": Event, "current_stream": calls.current_stream,
        "default_stream": calls.default_stream, "set_stream": calls.set_stream,
        "stream": calls.stream, "is_current_stream_capturing": lambda: False}
    for name, value in answers.items():
        original = getattr(torch.cuda, name, None)
        _set(shim, torch.cuda, name, value)
        if original is not None:
            _replace_everywhere(shim, "torch.cuda", original, value)
    # a stream keeps a tensor's memory until the stream's work is done: already done here
    _set(shim, torch.Tensor, "record_stream", lambda self, stream: None)
    nvtx = Nvtx()
    for name in NVTX_CALLS:
        _set(shim, torch.cuda.nvtx, name, getattr(nvtx, name))
