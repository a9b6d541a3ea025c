"""Forward Triton's console output, with its CUDA noise on GPU-less hosts folded into one line.

The wheel's tritonserver is a CUDA build. On a host without a usable NVIDIA driver it
starts fine and serves the CPU models, but prints errors that look fatal:
`CudaDriverHelper has not been initialized.`, `unable to create stream for embed: CUDA
driver version is insufficient for CUDA runtime version`, and warnings about the pinned
memory pool. They only say that CUDA is off. Once Triton has said the driver is missing
(and only then, so on a GPU host nothing is hidden), those known lines are dropped and one
line explains them; every other line, errors included, passes unchanged. Debug logging
(`-v`) shows everything.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import BinaryIO

# Triton's words for "this host has no usable CUDA driver" (Triton 2.51).
NO_DRIVER_SIGNS = (b"CUDA driver version is insufficient for CUDA runtime version", b"CudaDriverHelper has not been initialized")
# What follows from that and nothing else: no pinned memory pool, no CUDA memory pool, no CUDA streams.
CONSEQUENCES = (
    *NO_DRIVER_SIGNS,
    b"CUDA memory pool disabled",
    b"no pinned memory pool, falling back to non-pinned system memory",
)
EXPLANATION = (
    b"note: Triton's CUDA messages are hidden: this host has no usable NVIDIA driver, so Triton runs without CUDA "
    b"(no pinned memory, no CUDA streams); harmless for CPU models. -v shows them.\n"
)


class CudaNoiseFilter:
    """Decides line by line; stateful, since only the driver's absence makes the lines harmless."""

    def __init__(self) -> None:
        self.no_driver = False
        self.explained = False
        self.hidden = 0

    def feed(self, line: bytes) -> list[bytes]:
        """The lines to print for one line of Triton's output."""
        if not self.no_driver and any(sign in line for sign in NO_DRIVER_SIGNS):
            self.no_driver = True
        if not (self.no_driver and any(known in line for known in CONSEQUENCES)):
            return [line]
        self.hidden += 1
        if self.explained:
            return []
        self.explained = True
        return [EXPLANATION]


def forward(source: Iterable[bytes], sink: BinaryIO, noise: CudaNoiseFilter | None) -> None:
    for line in source:
        for shown in noise.feed(line) if noise else [line]:
            sink.write(shown)
        sink.flush()


def start_forwarding(source: BinaryIO, sink: BinaryIO, filter_noise: bool) -> threading.Thread:
    """A daemon thread copying `source` to `sink` until every writer (Triton, its stubs) has closed it."""
    thread = threading.Thread(
        target=forward, args=(source, sink, CudaNoiseFilter() if filter_noise else None), name="triton-console", daemon=True
    )
    thread.start()
    return thread
