"""Typed errors raised by simharness.

Every error carries the offending values in its message and says how to fix
them; the CLI prints ``error: <message>`` and exits 2.
"""

import re


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


class GroupMismatch(SimharnessError, RuntimeError):
    """One ``new_group`` call made with different ``ranks`` on different ranks (a
    rank-dependent ``new_group``), found by the GPU shim when the group is first used.

    The message starts with :data:`GROUP_MISMATCH_PREFIX` and names the group, the ranks
    that passed each list and where, and the fix; ``simharness run`` reports it as the
    test's cause, also for the ranks it left waiting.
    """


#: How a :class:`GroupMismatch` message starts.
GROUP_MISMATCH_PREFIX = "rank-dependent new_group: "


def group_mismatch_in(exc: BaseException | None) -> GroupMismatch | None:
    """The :class:`GroupMismatch` that ``exc`` is or was raised under (its cause or
    context, followed a few levels deep); None when there is none.

    >>> group_mismatch_in(KeyError("x")) is None
    True
    """
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, GroupMismatch):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
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


#: Packages that exist only for NVIDIA GPUs (their wheels build CUDA kernels, or import
#: them; ``pynvml`` binds the NVIDIA driver's management library, NVML): a test or script
#: that imports one and stops on its absence needs a GPU machine.
#: Top-level module names; Megatron's own fused kernels (``*_cuda``) and apex's ``amp_C``
#: are the extension modules megatron-core imports by these names.
GPU_ONLY_PACKAGES = frozenset({
    "transformer_engine", "transformer_engine_torch", "apex", "amp_C", "flash_attn",
    "flash_attn_interface", "flash_attn_2_cuda", "flash_attn_3", "deep_ep", "deep_gemm",
    "flashinfer", "mamba_ssm", "causal_conv1d", "grouped_gemm", "nv_grouped_gemm", "cupy",
    "nvshmem", "fused_layer_norm_cuda", "fused_weight_gradient_mlp_cuda",
    "scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda",
    "scaled_softmax_cuda", "fast_hadamard_transform", "emerging_optimizers", "pynvml"})


#: How messages name the packages: the module names, and their project names.
_PACKAGE_WORDS = tuple(sorted({(p, p) for p in GPU_ONLY_PACKAGES} | {
    ("Transformer Engine", "transformer_engine"), ("TransformerEngine", "transformer_engine"),
    ("transformer-engine", "transformer_engine"), ("flash-attn", "flash_attn"),
    ("FlashAttention", "flash_attn"), ("DeepEP", "deep_ep"), ("mamba-ssm", "mamba_ssm"),
    ("nvidia-ml-py", "pynvml")}))


class MissingGPUPackage(NeedsGPU):
    """An ``ImportError`` of a package in :data:`GPU_ONLY_PACKAGES`: a named stop, not a
    failure (``simharness run`` skips the test: "needs transformer_engine, a GPU-only
    package").

    >>> str(MissingGPUPackage("apex", "t.py:3", "No module named 'apex'"))
    "needs apex, a GPU-only package (No module named 'apex' at t.py:3)"
    """

    def __init__(self, package: str, where: str, detail: str = ""):
        SimharnessError.__init__(self, f"needs {package}, a GPU-only package ({detail} at "
                                       f"{where})")
        self.package = package
        self.call = f"import {package}"
        self.where = where
        self.why = detail

    def __reduce__(self):
        return (type(self), (self.package, self.where, self.why))


def missing_gpu_package(exc: BaseException | None) -> MissingGPUPackage | None:
    """The :class:`MissingGPUPackage` that ``exc`` stands for: ``exc`` (or the error it was
    raised ``from``) is an ``ImportError`` of a module in :data:`GPU_ONLY_PACKAGES`, by its
    ``name``, or by its message naming one (``ImportError("transformer_engine is needed")``),
    or is an error out of what code binds in such a package's place (nothing: a
    ``NameError``; a ``None``, a ``MagicMock``, another package's class;
    :mod:`simharness.package_stand_ins`), or an error whose message asks to install such a
    package, which is absent (:func:`_asked_for`: Megatron-Core's "apply_rope_fusion is
    not available. Please install TE >= 1.4."). An error merely raised while
    handling one (``__context__``) is not.

    >>> try:
    ...     import transformer_engine.pytorch
    ... except ImportError as e:
    ...     missing_gpu_package(e).package
    'transformer_engine'
    >>> missing_gpu_package(ImportError("No module named 'numpyx'")) is None
    True
    >>> missing_gpu_package(ModuleNotFoundError("nvidia-ml-py does not seem to be installed "
    ...                                         "or it can't be imported.")).package
    'pynvml'
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ImportError):
            name = (exc.name or "").split(".")[0]
            text = str(exc)
            named = [p for word, p in _PACKAGE_WORDS
                     if re.search(rf"\b{re.escape(word)}\b", text)]
            found = name if name in GPU_ONLY_PACKAGES else (named[0] if named else None)
            if found is not None:
                return MissingGPUPackage(found, _import_site(exc), f"{type(exc).__name__}: "
                                                                 f"{text}")
        asked = _asked_for(str(exc)) if not isinstance(exc, ImportError) else None
        if asked is not None:  # "apply_rope_fusion is not available. Please install TE"
            return MissingGPUPackage(asked, _import_site(exc), f"{type(exc).__name__}: {exc}")
        from .package_stand_ins import stand_in_stop

        stand_in = stand_in_stop(exc, GPU_ONLY_PACKAGES)
        if stand_in is not None:
            return MissingGPUPackage(*stand_in)
        exc = exc.__cause__
    return None


#: The words a message may name a package by when it asks to install it: the module and
#: project names, and "TE", Megatron-Core's own word for Transformer Engine.
_ASKED_WORDS = (*_PACKAGE_WORDS, ("TE", "transformer_engine"))


def _asked_for(text: str) -> str | None:
    """The GPU-only package a message asks to install ("install" and the package's name in
    it), when that package cannot be imported here; None otherwise.

    >>> _asked_for("apply_rope_fusion is not available. Please install TE >= 1.4.")
    'transformer_engine'
    >>> _asked_for("TE is slow here"), _asked_for("please install numpy")
    (None, None)
    """
    from .package_stand_ins import first_absent

    if not re.search(r"\binstall", text, re.I):
        return None
    for word, package in _ASKED_WORDS:
        if re.search(rf"\b{re.escape(word)}\b", text) and first_absent([package]):
            return package
    return None


#: The last error line of pytest's report of a module that failed to import, and the
#: frame above it ("path.py:14: in <module>").
_REPORT_ERROR = re.compile(r"^E\s+((?:ModuleNotFoundError|ImportError): .*)$", re.M)
_REPORT_FRAME = re.compile(r"^(\S+?\.py):(\d+): in ", re.M)


def missing_gpu_package_in_report(text: str) -> MissingGPUPackage | None:
    r"""The :class:`MissingGPUPackage` a failed collection stands for, from pytest's text of
    it (the exception itself is gone by then): its last ``E`` line is an ``ImportError`` of
    a module in :data:`GPU_ONLY_PACKAGES` ("No module named 'transformer_engine'"), or one
    naming such a package that is absent; the site is the frame above it.

    >>> m = missing_gpu_package_in_report("t.py:14: in <module>\n    import transformer_engine"
    ...     "\nE   ModuleNotFoundError: No module named 'transformer_engine'")
    >>> m.package, m.where
    ('transformer_engine', 't.py:14')
    >>> missing_gpu_package_in_report("E   ModuleNotFoundError: No module named 'numpyx'")
    """
    errors = _REPORT_ERROR.findall(text)
    if not errors:
        return None
    line = errors[-1]
    named = re.search(r"No module named '([\w.]+)'", line)
    exc = ImportError(line.split(": ", 1)[1], name=named.group(1) if named else None)
    found = missing_gpu_package(exc)
    if found is None:
        return None
    head = text[:text.rfind(line)]
    frames = _REPORT_FRAME.findall(head)
    where = f"{frames[-1][0]}:{frames[-1][1]}" if frames else "<unknown>:0"
    return MissingGPUPackage(found.package, where, line)


def _import_site(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of ``exc``'s traceback outside importlib."""
    where = "<unknown>:0"
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith("<frozen"):
            where = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def needs_gpu_in(exc: BaseException | None) -> NeedsGPU | None:
    """The :class:`NeedsGPU` that ``exc`` is, or that it was raised from or while handling
    (``__cause__`` / ``__context__``, even under ``from None``), or the
    :class:`MissingGPUPackage` it stands for (:func:`missing_gpu_package`), else None.
    torch.compile wraps an error raised while tracing in its own (``TorchRuntimeError``,
    ``from None``): the stop is still the reason the test could not run.

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
    first = exc
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, NeedsGPU):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return missing_gpu_package(first)


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
    under = "" if stop is exc or isinstance(stop, MissingGPUPackage) else \
        f" (raised under {type(exc).__name__})"
    return f"{stop}{under}"
