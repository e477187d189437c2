"""One rank of megatron-core 0.19.2's ``initialize_model_parallel`` (the capture example's
``init``), for timing ``simharness capture`` (issue 14)::

    simharness capture -n 64 -- python bench/capture_megatron019.py --tp 2 --pp 4 --cp 2 \\
        --create-all-gather-group

0.19.2's ``parallel_state.py`` is loaded from the pinned wheel's cache (``make fetch-mcore``)
with the stubs of ``tests/support/megatron_harness.py``, as the parity tests load it, so the rank
imports torch and that file, not the rest of megatron-core (which the installed 0.16.1 is).
"""

import os
import runpy
import sys

import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

import megatron_harness  # noqa: E402

example = runpy.run_path(os.path.join(ROOT, "examples", "capture", "megatron_init.py"))
args = example["parse"]()
dist.init_process_group(backend="nccl")
ps = megatron_harness.load_version(ROOT, "0.19.2")
example["init"](ps, args)
