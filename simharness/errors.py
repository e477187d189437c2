"""Typed errors raised by simharness.

Every error carries the offending values in its message and says how to fix
them; the CLI prints ``error: <message>`` and exits 2.
"""


class SimharnessError(Exception):
    """Base class of every error simharness raises on bad input."""


class LayoutError(SimharnessError, ValueError):
    """A parallelism configuration that Megatron-Core or NeMo would reject.

    ``megatron_error`` names the exception type Megatron raises for the same
    input (``"RuntimeError"``, ``"AssertionError"``, ``"ValueError"``,
    ``"TypeError"``, ``"KeyError"``) or ``None`` where only simharness rejects it.
    ``values`` holds the offending values; a validation error also names its rule
    (``values["rule"]``, a name in :data:`simharness.rules.RULES`).
    """

    def __init__(self, message: str, *, megatron_error: str | None = None, **values):
        super().__init__(message)
        self.megatron_error = megatron_error
        self.values = values


class GroupNotInitialized(SimharnessError, LookupError):
    """A Megatron getter asked for a group that does not exist on that rank.

    Megatron raises ``AssertionError`` with ``message`` (e.g. the 0.16 getter
    ``get_data_parallel_group(with_context_parallel=True,
    independent_all_gather=True)`` when ``create_all_gather_group`` is off).
    """

    megatron_error = "AssertionError"


def whole_number_problem(name: str, value: object, low: int) -> str | None:
    """Why ``value`` is not a whole number ``>= low`` (bools refused), or None.

    >>> whole_number_problem("iters", 3, 0) is None
    True
    >>> whole_number_problem("steps", True, 1)
    'steps must be a whole number >= 1, got True'
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        return f"{name} must be a whole number >= {low}, got {value!r}"
    return None


class NeedsGPU(SimharnessError, RuntimeError):
    """A call that needs a real GPU, stopped by the CPU shim (``simharness.launch.gpu_shim``).

    ``call`` names the torch call, ``where`` the user's ``file:line`` that made it.
    ``simharness run`` reports a test that raises it as *skipped: needs GPU*.

    >>> str(NeedsGPU("torch.cuda.Stream", "model.py:12"))[:51]
    'needs a real GPU: torch.cuda.Stream at model.py:12 '
    """

    def __init__(self, call: str, where: str, why: str = ""):
        why = why or "the CPU shim maps only data movement; run this on a GPU machine"
        super().__init__(f"needs a real GPU: {call} at {where} ({why})")
        self.call = call
        self.where = where
        self.why = why

    def __reduce__(self):  # picklable across processes with its three fields
        return (type(self), (self.call, self.where, self.why))


def needs_gpu_in(exc: BaseException | None) -> NeedsGPU | None:
    """The :class:`NeedsGPU` that ``exc`` is, or that it was raised from or while handling
    (``__cause__`` / ``__context__``, even under ``from None``), else None. torch.compile
    wraps an error raised while tracing in its own (``TorchRuntimeError``, ``from None``):
    the stop is still the reason the test could not run.

    >>> try:
    ...     try:
    ...         raise NeedsGPU("torch.cuda.Stream", "m.py:3")
    ...     except NeedsGPU:
    ...         raise RuntimeError("while tracing") from None
    ... except RuntimeError as e:
    ...     needs_gpu_in(e).call
    'torch.cuda.Stream'
    >>> needs_gpu_in(ValueError("x")) is None
    True
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, NeedsGPU):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def needs_gpu_message(exc: BaseException | None) -> str | None:
    """The line for the :class:`NeedsGPU` in ``exc`` (:func:`needs_gpu_in`), naming the error
    it was raised under when another error wraps it; None when there is none.

    >>> needs_gpu_message(NeedsGPU("torch.cuda.Event", "m.py:1"))[:47]
    'needs a real GPU: torch.cuda.Event at m.py:1 (t'
    >>> try:
    ...     try:
    ...         raise NeedsGPU("torch.cuda.Stream", "m.py:3", "why")
    ...     except NeedsGPU:
    ...         raise KeyError("x") from None
    ... except KeyError as e:
    ...     needs_gpu_message(e)
    'needs a real GPU: torch.cuda.Stream at m.py:3 (why) (raised under KeyError)'
    """
    stop = needs_gpu_in(exc)
    if stop is None:
        return None
    under = "" if stop is exc else f" (raised under {type(exc).__name__})"
    return f"{stop}{under}"
