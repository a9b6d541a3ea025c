"""Triton's console: CUDA noise folded into one line on GPU-less hosts, every real error kept."""

from __future__ import annotations

import io

from tools.serve.triton_console import EXPLANATION, CudaNoiseFilter, forward

# Triton 2.51's own lines on a host without an NVIDIA driver (`make serve`, 2026-12).
NO_GPU_START = [
    b"I1202 17:10:23.740148 9237 cache_manager.cc:174] \"Creating TritonCache with name: 'local'\"\n",
    b'W1202 17:10:23.740797 9237 pinned_memory_manager.cc:273] "Unable to allocate pinned system memory, pinned memory pool '
    b'will not be available: CUDA driver version is insufficient for CUDA runtime version"\n',
    b'I1202 17:10:23.740814 9237 cuda_memory_manager.cc:117] "CUDA memory pool disabled"\n',
    b'E1202 17:10:23.740896 9237 server.cc:241] "CudaDriverHelper has not been initialized."\n',
    b'I1202 17:10:23.742075 9237 model_lifecycle.cc:472] "loading: encoder:1"\n',
    b'W1202 17:10:28.522956 9237 pinned_memory_manager.cc:170] "failed to allocate pinned system memory: no pinned memory pool, '
    b'falling back to non-pinned system memory"\n',
    b'E1202 17:10:29.999076 9237 ensemble_scheduler.cc:1468] "unable to create stream for embed: CUDA driver version is '
    b'insufficient for CUDA runtime version"\n',
    b"E1202 17:10:30.100000 9237 model_lifecycle.cc:641] \"failed to load 'encoder' version 1: Invalid argument\"\n",
    b'I1202 17:10:30.001492 9237 http_server.cc:4713] "Started HTTPService at 127.0.0.1:35869"\n',
]


def filtered(lines: list[bytes]) -> list[bytes]:
    sink = io.BytesIO()
    forward(lines, sink, CudaNoiseFilter())
    return sink.getvalue().splitlines(keepends=True)


def test_the_cuda_lines_of_a_gpu_less_host_become_one_explanation() -> None:
    shown = filtered(NO_GPU_START)
    assert shown.count(EXPLANATION) == 1
    assert not any(b"CUDA" in line or b"pinned" in line for line in shown if line != EXPLANATION)


def test_every_other_line_passes_in_order_errors_included() -> None:
    shown = [line for line in filtered(NO_GPU_START) if line != EXPLANATION]
    assert shown == [NO_GPU_START[0], NO_GPU_START[4], NO_GPU_START[7], NO_GPU_START[8]]


def test_nothing_is_hidden_until_triton_says_the_driver_is_missing() -> None:
    gpu_host = [
        b'I1202 cuda_memory_manager.cc:117] "CUDA memory pool disabled"\n',
        b'W1202 pinned_memory_manager.cc:170] "failed to allocate pinned system memory: no pinned memory pool, '
        b'falling back to non-pinned system memory"\n',
    ]
    assert filtered(gpu_host) == gpu_host
