"""How many CUDA GPUs this machine has, and a skip for a test that needs more."""

import pytest


def gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


def need(world: int):
    if gpus() < world:
        pytest.skip(f"needs {world} GPUs (torch.cuda.device_count() >= {world}), "
                    f"found {gpus()}")
