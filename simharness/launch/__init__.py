"""Start ranks the way ``torchrun`` does, optionally with a CPU stand-in for the GPU calls.

Shared by ``simharness run`` and capture's faithful mode. One module per concept:

- :mod:`.env`: the environment variables torchrun's agent sets for each rank;
- :mod:`.gpu_shim` (a package, one module per torch surface):
  ``install(local_rank, local_world_size)`` answers the CUDA device calls per local rank,
  turns NCCL into gloo and moves CUDA tensors to CPU, refusing with
  :class:`simharness.errors.NeedsGPU` what truly needs a GPU;
- :mod:`.bootstrap`: ``python -m simharness.launch.bootstrap [--shim] -- script.py ARGS`` (or
  ``-- -m pytest ARGS``; published as ``python -m simharness.launch.rank``), the rank
  bootstrap, usable under plain torchrun/srun;
- :mod:`.launcher`: ``launch(LaunchSpec(...))`` starts W ranks through torch's own elastic
  agent on loopback and returns each rank's exit status;
- :mod:`.toolbox`: what the three rank starters (this launcher, the forked replay ranks,
  capture's fork pool) share, and what each guarantees: timeout, grace, stacks, no
  leftover processes.

Importing this package (or any module in it) has no side effects and does not import torch;
installing the shim is explicit.
"""
