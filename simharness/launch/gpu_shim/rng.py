"""The CUDA random number generators, one per local device, as CPU generators.

torch keeps one default generator per CUDA device (``torch.cuda.default_generators``);
``torch.cuda.get_rng_state`` / ``set_rng_state`` / ``manual_seed`` / ``seed`` /
``initial_seed`` (and their ``_all`` forms) read and write the current device's (or the
given one's), and ``torch.random.fork_rng`` saves and restores them through those calls.
Megatron's ``CudaRNGStatesTracker`` (``megatron/core/tensor_parallel/random.py``, 0.16.1:
``add``, ``fork``; ``_set_cuda_rng_state`` sets ``torch.cuda.default_generators[idx]``'s
state through ``torch.cuda._lazy_call``) keeps named states and swaps them in and out.

Here each local device ``d`` has a ``torch.Generator()`` on the CPU, seeded as torch seeds
a fresh CUDA generator (``default_rng_seed_val``, 67280421310721, c10/core/GeneratorImpl.h);
``torch.cuda.default_generators`` is the tuple of them and ``_lazy_call`` runs its callback
at once (what torch does once CUDA is initialised), so torch's and Megatron's own code reads
and writes them. A random op that names a CUDA device (``torch.randn(..., device="cuda")``)
and an in-place draw on a tensor put on CUDA (``w.normal_()``, ``torch.nn.init`` on a
parameter made on CUDA) without a ``generator=`` draw from the current device's generator
(:func:`draws_on_cuda`). So saving, forking and restoring states gives the same
numbers as the same sequence on CPU generators.

Not faithful: the numbers are the CPU generator's (Mersenne Twister), not those of CUDA's
Philox, so a GPU draws other numbers from the same seed, and a state is the CPU generator's
5056 bytes, not CUDA's 16; a draw on a tensor computed from CUDA tensors (dropout on an
activation) uses torch's CPU generator, as the shim cannot tell it was meant for a GPU.

>>> DEFAULT_SEED
67280421310721
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ...errors import NeedsGPU

if TYPE_CHECKING:
    from .lifecycle import Shim

from .common import _device_index, _replace_everywhere, _set, user_site

#: The seed of a fresh torch generator, CPU or CUDA (c10/core/GeneratorImpl.h).
DEFAULT_SEED = 67280421310721

#: Random ops (``torch.`` functions, ``torch.nn.functional.`` ones as ``F.``, ``Tensor``
#: methods bare); every function of ``torch.nn.init`` is one too.
RANDOM_OPS = frozenset("""
    normal_ uniform_ bernoulli_ random_ exponential_ geometric_ log_normal_ cauchy_
    multinomial bernoulli
    torch.rand torch.randn torch.randint torch.randperm torch.normal torch.bernoulli
    torch.multinomial torch.rand_like torch.randn_like torch.randint_like torch.dropout
    torch.dropout_ torch.alpha_dropout torch.feature_dropout torch.native_dropout
    F.dropout F.dropout1d F.dropout2d F.dropout3d F.alpha_dropout F.feature_alpha_dropout
    F.rrelu F.gumbel_softmax
    """.split())

#: torch.cuda's RNG calls answered here.
RNG_CALLS = ("get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
             "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed")


def make_generators(n: int) -> tuple[Any, ...]:
    """``n`` CPU generators, each seeded as a fresh CUDA generator is."""
    import torch

    return tuple(torch.Generator().manual_seed(DEFAULT_SEED) for _ in range(n))


class CudaGenerators:
    """torch.cuda's RNG calls (:data:`RNG_CALLS`) over ``gens``, one CPU generator per local
    device; ``current()`` is the current device's index.

    >>> g = CudaGenerators(make_generators(2), lambda: 1)
    >>> g.manual_seed(7)
    >>> g.initial_seed(), g.gens[0].initial_seed() == DEFAULT_SEED
    (7, True)
    >>> g.set_rng_state(g.get_rng_state(0), "cuda:1")
    >>> g.gens[1].get_state().equal(g.gens[0].get_state())
    True
    """

    def __init__(self, gens: tuple[Any, ...], current: Callable[[], int]):
        self.gens = gens
        self.current = current

    def _index(self, device: Any) -> int:
        i = _device_index(device, self.current())
        if i is None or not 0 <= i < len(self.gens):
            raise RuntimeError(f"CUDA error: invalid device ordinal (simharness shim: device "
                               f"{device!r}, {len(self.gens)} devices on this node)")
        return i

    def get_rng_state(self, device: Any = "cuda") -> Any:
        return self.gens[self._index(device)].get_state()

    def set_rng_state(self, new_state: Any, device: Any = "cuda") -> None:
        self.gens[self._index(device)].set_state(new_state.clone())

    def get_rng_state_all(self) -> list[Any]:
        return [g.get_state() for g in self.gens]

    def set_rng_state_all(self, new_states: Any) -> None:
        for g, state in zip(self.gens, new_states, strict=False):
            g.set_state(state.clone())

    def manual_seed(self, seed: Any) -> None:
        self.gens[self.current()].manual_seed(int(seed))

    def manual_seed_all(self, seed: Any) -> None:
        for g in self.gens:
            g.manual_seed(int(seed))

    def seed(self) -> None:
        self.gens[self.current()].seed()

    def seed_all(self) -> None:
        value = self.gens[0].seed()
        for g in self.gens[1:]:
            g.manual_seed(value)

    def initial_seed(self) -> int:
        return int(self.gens[self.current()].initial_seed())


def lazy_call(callable: Any, **_kwargs: Any) -> None:  # noqa: A002  (torch's name)
    """``torch.cuda._lazy_call``: run the callback now, as torch does once CUDA started."""
    try:
        callable()
    except (RuntimeError, AttributeError) as exc:  # a callback that reaches CUDA itself
        raise NeedsGPU(f"torch.cuda._lazy_call({getattr(callable, '__qualname__', '?')})",
                       user_site()) from exc


def _patch_rng(shim: Shim) -> None:
    import torch
    import torch.cuda
    import torch.cuda.random

    calls = CudaGenerators(make_generators(shim.local_world_size), lambda: shim.current_device)
    shim.generators = calls.gens
    for name in RNG_CALLS:
        value = getattr(calls, name)
        original = getattr(torch.cuda, name, None)
        _set(shim, torch.cuda, name, value)
        if original is not None:
            _replace_everywhere(shim, "torch.cuda", original, value)
    _replace_everywhere(shim, "torch.cuda", torch.cuda._lazy_call, lazy_call)
    _set(shim, torch.cuda, "_lazy_call", lazy_call)
    _set(shim, torch.cuda, "default_generators", calls.gens)


def random_ops() -> frozenset[Any]:
    """The functions and ``Tensor`` methods named in :data:`RANDOM_OPS`, and
    ``torch.nn.init``'s."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    import torch.nn.init

    owners = {"torch": torch, "F": F, "": torch.Tensor}
    out = set()
    for name in RANDOM_OPS:
        owner, _, attr = name.rpartition(".")
        found = getattr(owners[owner], attr, None)
        if found is not None:
            out.add(found)
    out.update(f for n, f in vars(torch.nn.init).items()
               if callable(f) and not n.startswith("_") and n.endswith("_"))
    return frozenset(out)


@contextlib.contextmanager
def on_generator(gen: Any) -> Iterator[None]:
    """Run the body on ``gen``: torch's CPU default generator holds ``gen``'s state while
    inside (so ops that take no ``generator=``, such as dropout, draw from it too), ``gen``
    takes the state it ends in, and the CPU generator gets its own back."""
    import torch

    cpu = torch.default_generator
    saved = cpu.get_state()
    cpu.set_state(gen.get_state())
    try:
        yield
    finally:
        gen.set_state(cpu.get_state())
        cpu.set_state(saved)


def draws_on_cuda(func: Any, ops: frozenset[Any], asked: bool, args: tuple, kwargs: dict,
                  born: Any) -> bool:
    """Whether ``func`` is a random draw meant for a CUDA device, without its own generator:
    it names a CUDA device (``asked``), or a tensor argument was put on CUDA (``born``: a
    :class:`~simharness.launch.cuda_origin.Origins` of tensors made on CUDA)."""
    if kwargs.get("generator") is not None or func not in ops:
        return False
    return asked or born.any_marked((args, kwargs))
