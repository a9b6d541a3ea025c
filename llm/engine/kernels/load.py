"""Load a kernel library into torch (torch.ops.llm_kernels.*), building it first when missing."""

from __future__ import annotations

import functools

import torch

from llm.engine.kernels.build import REQUIRED_CPU_FLAGS, KernelBuildError, build
from llm.engine.precision import cpu_flags


class KernelUnavailable(RuntimeError):
    """A kernel cannot run here; the message says why (device, CPU features, compiler)."""


@functools.cache
def _load(name: str) -> None:
    torch.ops.load_library(str(build(name)))


def load_kernels(name: str, device: torch.device) -> None:
    """Make kernel library `name`'s operators available on `device`, or KernelUnavailable."""
    if device.type != "cpu":
        raise KernelUnavailable(f"our {name} kernels run on the CPU, not {device}")
    missing = REQUIRED_CPU_FLAGS - cpu_flags()
    if missing:
        raise KernelUnavailable(f"our {name} kernels need the CPU features {sorted(missing)}")
    try:
        _load(name)
    except (KernelBuildError, OSError, RuntimeError) as error:
        raise KernelUnavailable(f"our {name} kernels could not be built or loaded: {error}") from error
