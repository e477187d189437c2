"""The GPU shim's identity table and stand-ins, pure (nothing installed in this process):
the named GPUs, the per-device generators, events, streams, NVTX, and GPU-only packages."""

from __future__ import annotations

import time
import types

import pytest
import torch
from support.cli_errors import fails

from simharness.errors import MissingGPUPackage, missing_gpu_package, needs_gpu_message
from simharness.launch.gpu_shim.identity import (
    GPUS,
    DeviceProperties,
    UnknownGPU,
    gpu_spec,
)
from simharness.launch.gpu_shim.rng import (
    DEFAULT_SEED,
    CudaGenerators,
    make_generators,
    on_generator,
)
from simharness.launch.gpu_shim.streams import Event, Nvtx, Stream, StreamCalls

# -- the identity table ---------------------------------------------------------------------


def test_each_gpu_reports_its_datasheet_figures_as_torch_names_them():
    want = {"h100": ("NVIDIA H100 80GB HBM3", (9, 0), 132, 80),
            "h200": ("NVIDIA H200", (9, 0), 132, 141),
            "b200": ("NVIDIA B200", (10, 0), 148, 180),
            "a100": ("NVIDIA A100-SXM4-80GB", (8, 0), 108, 80),
            "v100": ("Tesla V100-SXM2-32GB", (7, 0), 80, 32)}
    for key, (name, cc, sms, gb) in want.items():
        p = DeviceProperties(gpu_spec(key))
        assert (p.name, (p.major, p.minor), p.multi_processor_count, p.total_memory) == \
            (name, cc, sms, gb * 10**9)
    for spec in GPUS.values():  # every row says where its figures come from
        assert "datasheet" in spec.source, spec
        assert DeviceProperties(spec).warp_size == 32


def test_the_default_is_the_h100_and_names_are_read_strictly():
    assert gpu_spec(None) is gpu_spec("") is gpu_spec(" H100 ") is GPUS["h100"]
    for bad in ("h100x", "H100 80GB", "gb200", "0"):
        with pytest.raises(UnknownGPU, match=f"GPU '{bad}' is not one the shim knows; give "
                                             f"one of a100, a100-40gb, b200, h100, "):
            gpu_spec(bad)


def test_run_refuses_an_unknown_gpu_in_one_line(monkeypatch):
    monkeypatch.delenv("SIMHARNESS_GPU", raising=False)
    fails(["run", "-n", "2", "--gpu", "mi300x", "--", "python", "x.py"],
          "--gpu: GPU 'mi300x' is not one the shim knows", "h100, h100-pcie, h200")
    monkeypatch.setenv("SIMHARNESS_GPU", "a200")
    fails(["run", "-n", "2", "--", "python", "x.py"],
          "the environment's SIMHARNESS_GPU: GPU 'a200' is not one")


# -- generators -----------------------------------------------------------------------------


def test_per_device_generators_fork_and_restore_as_cpu_generators_do():
    device = [0]
    cuda = CudaGenerators(make_generators(2), lambda: device[0])
    assert cuda.initial_seed() == DEFAULT_SEED
    cuda.manual_seed(1234)                               # device 0 only
    saved = cuda.get_rng_state()
    with on_generator(cuda.gens[0]):
        first = torch.randn(3)
    cuda.set_rng_state(saved)                            # restore: the same numbers again
    with on_generator(cuda.gens[0]):
        again = torch.randn(3)
    cpu = torch.Generator().manual_seed(1234)
    assert torch.equal(first, again) and torch.equal(first, torch.randn(3, generator=cpu))
    device[0] = 1                                        # device 1 was not seeded
    assert cuda.initial_seed() == DEFAULT_SEED
    cuda.manual_seed_all(5)
    assert [g.initial_seed() for g in cuda.gens] == [5, 5]
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        cuda.get_rng_state(2)


def test_a_draw_on_a_device_generator_leaves_the_cpu_generator_alone():
    torch.manual_seed(7)
    cpu_before = torch.get_rng_state()
    gen = torch.Generator().manual_seed(99)
    with on_generator(gen):
        a = torch.nn.functional.dropout(torch.ones(8), 0.5)  # takes no generator=
    assert torch.equal(torch.get_rng_state(), cpu_before)
    with on_generator(torch.Generator().manual_seed(99)):
        b = torch.nn.functional.dropout(torch.ones(8), 0.5)
    assert torch.equal(a, b)
    assert not torch.equal(gen.get_state(), torch.Generator().manual_seed(99).get_state())


# -- events, streams, NVTX ------------------------------------------------------------------


def test_events_time_with_the_host_clock_and_refuse_what_cuda_refuses():
    start, end = Event(enable_timing=True), Event(enable_timing=True)
    with pytest.raises(RuntimeError, match="both events must be recorded"):
        start.elapsed_time(end)
    start.record()
    time.sleep(0.02)
    end.record()
    assert 20 <= start.elapsed_time(end) < 2000 and end.query()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        Event().elapsed_time(end)


def test_streams_per_device_with_a_current_one_set_and_restored():
    shim = types.SimpleNamespace(current_device=1, local_world_size=2, streams={})
    kind = type("Stream", (Stream,), {"_shim": shim})
    calls = StreamCalls(shim, kind)
    default = calls.current_stream()
    assert default == calls.default_stream(1) and default.stream_id == 0
    assert default.device == torch.device("cuda", 1) and calls.default_stream(0) != default
    side = kind()
    with calls.stream(side):
        assert calls.current_stream() == side and calls.current_stream(0) != side
        ev = side.record_event()
    assert calls.current_stream() == default and ev.query()
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        calls.current_stream(2)
    # torch.cuda.stream(s) is an object, entered twice as Megatron's start_grad_sync does
    ctx = calls.stream(side)
    for _ in range(2):
        with ctx as bound:
            assert bound is None and calls.current_stream() == side
        assert calls.current_stream() == default
    with calls.stream(None):
        assert calls.current_stream() == default


def test_nvtx_depth_as_nvtx_returns_it():
    n = Nvtx()
    with n.range("outer"):
        assert n.range_push("inner") == 1
        assert n.range_pop() == 1
    assert n.range_pop() == -1  # nothing open


# -- GPU-only packages ----------------------------------------------------------------------


def test_an_import_error_of_a_gpu_only_package_is_a_named_stop_and_others_are_not():
    try:
        import transformer_engine.pytorch  # noqa: F401
    except ImportError as exc:
        stop = missing_gpu_package(exc)
        assert isinstance(stop, MissingGPUPackage) and stop.package == "transformer_engine"
        assert needs_gpu_message(exc).startswith(
            "needs transformer_engine, a GPU-only package (ModuleNotFoundError: No module "
            "named 'transformer_engine' at ")
    said = ImportError("Transformer Engine is not installed: pip install transformer-engine")
    assert missing_gpu_package(said).package == "transformer_engine"
    assert missing_gpu_package(ImportError("cannot import name 'x' from 'numpy'")) is None
    assert missing_gpu_package(ImportError("No module named 'apexy'", name="apexy")) is None
    try:
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            raise AssertionError("a test's own failure while handling it") from None
    except AssertionError as exc:
        assert missing_gpu_package(exc) is None  # raised while handling: not the cause
    try:
        try:
            import deep_ep  # noqa: F401
        except ImportError as e:
            raise RuntimeError("DeepEP dispatcher unavailable") from e
    except RuntimeError as exc:
        assert missing_gpu_package(exc).package == "deep_ep"


def test_a_name_imported_only_from_a_missing_gpu_package_is_a_named_stop(tmp_path, monkeypatch):
    """Megatron-Core's pattern: ``FP8GlobalStateManager`` from transformer_engine in a ``try``,
    used on a branch taken without it: a NameError that means the package is missing (also
    ``import apex`` in a ``try``). A NameError of a name the module never imports from such a
    package stays the code's own."""
    (tmp_path / "fp8_user.py").write_text(
        "try:\n"
        "    from transformer_engine.pytorch.fp8 import FP8GlobalStateManager\n"
        "    import apex\n"
        "except ImportError:\n"
        "    pass\n"
        "def fp8():\n"
        "    return FP8GlobalStateManager.is_fp8_enabled()\n"
        "def norm():\n"
        "    return apex.normalization\n"
        "def typo():\n"
        "    return FP8GlobalStateManagr\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    mod = importlib.import_module("fp8_user")
    with pytest.raises(NameError) as got:
        mod.fp8()
    stop = missing_gpu_package(got.value)
    assert stop is not None and stop.package == "transformer_engine"
    assert stop.where == f"{tmp_path / 'fp8_user.py'}:7"
    assert "imported from transformer_engine.pytorch.fp8 (line 2)" in str(stop)
    with pytest.raises(NameError) as apex:
        mod.norm()
    assert missing_gpu_package(apex.value).package == "apex"
    with pytest.raises(NameError) as own:
        mod.typo()
    assert missing_gpu_package(own.value) is None


def _stand_in_modules(tmp_path, monkeypatch):
    """Megatron-Core's two stand-ins for a missing Transformer Engine, in small: a MagicMock
    bound in the ``except`` of its import (classes written over it are mocks too), and a
    None bound on the ``else`` of ``if HAVE_TE:`` in a module that imports the flag."""
    (tmp_path / "te_ext.py").write_text(
        "try:\n"
        "    import transformer_engine as te\n"
        "    HAVE_TE = True\n"
        "except ImportError:\n"
        "    from unittest.mock import MagicMock\n"
        "    te = MagicMock()\n"
        "    HAVE_TE = False\n"
        "class TELinear(te.pytorch.Linear):\n"
        "    pass\n"
        "class TEGroupedLinear(TELinear):\n"
        "    pass\n"
        "class TEOnce(te.pytorch.Linear):\n"
        "    pass\n"
        "def te_min_version():\n"
        "    return True\n"
        "if HAVE_TE and te_min_version():\n"
        "    class TEGroupedOnly(te.pytorch.Linear):\n"
        "        pass\n"
        "else:\n"
        "    TEGroupedOnly = None\n", encoding="utf-8")
    (tmp_path / "te_specs.py").write_text(
        "from te_ext import HAVE_TE\n"
        "OWN_FLAG = False\n"
        "if HAVE_TE:\n"
        "    from te_ext import TELinear as Provider\n"
        "else:\n"
        "    Provider, Other = None, None\n"
        "if OWN_FLAG:\n"
        "    from te_ext import TELinear as Plain\n"
        "else:\n"
        "    Plain = None\n"
        "def build():\n"
        "    return Provider()\n"
        "def plain():\n"
        "    return Plain()\n"
        "def grouped():\n"
        "    from te_ext import TEGroupedLinear\n"
        "    return TEGroupedLinear().cuda()\n"
        "from te_ext import TEGroupedOnly\n"
        "def grouped_only():\n"
        "    return TEGroupedOnly()\n"
        "def twice():\n"
        "    from te_ext import TEOnce\n"
        "    TEOnce()\n"
        "    return TEOnce()\n", encoding="utf-8")
    return _import_fresh(tmp_path, monkeypatch, "te_ext", "te_specs")


def _import_fresh(tmp_path, monkeypatch, *names):
    """The modules ``names`` written in ``tmp_path``, imported anew (not a copy another
    test left in ``sys.modules``)."""
    import importlib
    import sys

    monkeypatch.syspath_prepend(str(tmp_path))
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tuple(importlib.import_module(name) for name in names)


def test_a_stand_in_for_a_missing_gpu_package_is_a_named_stop(tmp_path, monkeypatch):
    _, specs = _stand_in_modules(tmp_path, monkeypatch)
    with pytest.raises(TypeError) as none:
        specs.build()
    stop = missing_gpu_package(none.value)
    assert stop is not None and stop.package == "transformer_engine"
    assert stop.where == f"{tmp_path / 'te_specs.py'}:12"
    assert (f"Provider is the None that {tmp_path / 'te_specs.py'}:6 binds when HAVE_TE is "
            "false (transformer_engine is not installed)") in str(stop)
    with pytest.raises(AttributeError) as mocked:
        specs.grouped()
    stop = missing_gpu_package(mocked.value)
    assert stop is not None and stop.package == "transformer_engine"
    assert stop.where == f"{tmp_path / 'te_specs.py'}:17"
    assert f"the mock that {tmp_path / 'te_ext.py'}:" in str(stop)
    assert needs_gpu_message(mocked.value).startswith("needs transformer_engine, a GPU-only "
                                                      "package (AttributeError: Mock object")
    with pytest.raises(TypeError) as imported_none:  # None bound in te_ext, imported by name
        specs.grouped_only()
    stop = missing_gpu_package(imported_none.value)
    assert stop is not None and stop.where == f"{tmp_path / 'te_specs.py'}:20"
    assert (f"TEGroupedOnly is the None that {tmp_path / 'te_ext.py'}:20 binds when HAVE_TE "
            "is false") in str(stop)
    with pytest.raises(StopIteration) as spent:  # a class over a mock, called twice
        specs.twice()
    stop = missing_gpu_package(spent.value)
    assert stop is not None and stop.where == f"{tmp_path / 'te_specs.py'}:24"
    assert (f"(StopIteration; the object is built from TEOnce, the mock that "
            f"{tmp_path / 'te_ext.py'}:12 binds") in str(stop)


def test_a_none_or_a_mock_of_the_code_s_own_stays_a_failure(tmp_path, monkeypatch):
    from unittest.mock import MagicMock

    _, specs = _stand_in_modules(tmp_path, monkeypatch)
    with pytest.raises(TypeError) as flag_of_its_own:
        specs.plain()  # None on the else of a flag no GPU-only package sets
    assert missing_gpu_package(flag_of_its_own.value) is None
    own = None
    with pytest.raises(TypeError) as none:
        own()
    assert missing_gpu_package(none.value) is None
    with pytest.raises(AttributeError) as mocked:
        MagicMock(spec=str).cuda()  # the test's own mock, though te's stand-in is loaded
    assert missing_gpu_package(mocked.value) is None


def test_another_package_s_class_bound_for_a_missing_one_is_a_named_stop(tmp_path,
                                                                         monkeypatch):
    """Megatron-Core's optimizer without Transformer Engine or apex: ``from torch.optim
    import AdamW as Adam`` in the inner ``except``, which refuses the ``lr=None`` FusedAdam
    takes; ``LNImpl = WrappedTorchNorm`` without apex, whose ``__new__`` refuses sequence
    parallelism. A stop when the stand-in raises from its own method, called from the
    binding module's package; the same class called by a test of its own stays a failure."""
    (tmp_path / "strict_opt.py").write_text(
        "class StrictAdam:\n"
        "    def __init__(self, lr):\n"
        "        if not 0.0 <= lr:\n"
        "            raise ValueError(lr)\n"
        "class StrictNorm:\n"
        "    def __new__(cls, sequence_parallel):\n"
        "        assert not sequence_parallel, 'sequence parallel not supported'\n"
        "        return object.__new__(cls)\n", encoding="utf-8")
    (tmp_path / "fused_opt.py").write_text(
        "try:\n"
        "    from transformer_engine.pytorch.optimizers import FusedAdam as Adam\n"
        "except ImportError:\n"
        "    try:\n"
        "        from apex.optimizers import FusedAdam as Adam\n"
        "    except ImportError:\n"
        "        from strict_opt import StrictAdam as Adam\n"
        "try:\n"
        "    import apex\n"
        "    LNImpl = apex.normalization.FusedLayerNorm\n"
        "except ImportError:\n"
        "    from strict_opt import StrictNorm\n"
        "    LNImpl = StrictNorm\n"
        "def make(lr):\n"
        "    return Adam(lr)\n"
        "def norm(sp):\n"
        "    return LNImpl(sp)\n", encoding="utf-8")
    fused, strict = _import_fresh(tmp_path, monkeypatch, "fused_opt", "strict_opt")
    with pytest.raises(TypeError) as adam:
        fused.make(None)
    stop = missing_gpu_package(adam.value)
    assert stop is not None and stop.package == "transformer_engine"
    assert stop.where == f"{tmp_path / 'strict_opt.py'}:3"
    assert (f"in strict_opt.StrictAdam, which {tmp_path / 'fused_opt.py'}:7 binds as Adam in "
            "the place of transformer_engine (not installed)") in str(stop)
    with pytest.raises(AssertionError) as norm:
        fused.norm(True)
    stop = missing_gpu_package(norm.value)
    assert stop is not None and stop.package == "apex"
    assert f"{tmp_path / 'fused_opt.py'}:12 binds as StrictNorm" in str(stop)
    with pytest.raises(TypeError) as own:
        strict.StrictAdam(None)  # the class used by the test itself
    assert missing_gpu_package(own.value) is None


def test_no_finalizer_runs_while_a_failure_s_stand_in_is_read(monkeypatch):
    """A rank reading sources after a failure must not collect garbage there: Megatron-LM's
    test containers call a barrier in ``__del__``, and one rank's collection at a point the
    others pass without one is a hang."""
    import gc

    from simharness import package_stand_ins

    seen = []
    monkeypatch.setattr(package_stand_ins, "_mock_stand_in",
                        lambda exc, packages: seen.append(gc.isenabled()))
    monkeypatch.setattr(package_stand_ins, "_class_stand_in", lambda exc, packages: None)
    assert gc.isenabled()
    assert package_stand_ins.stand_in_stop(ValueError("x"), frozenset()) is None
    assert seen == [False] and gc.isenabled()
