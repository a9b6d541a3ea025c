"""Compile our C++ kernels against the installed torch: `python -m llm.engine.kernels`.

One g++ call per kernel (~10-30 s on 2 cores), no ninja and no pybind: the library registers its
operators with TORCH_LIBRARY and is loaded by torch.ops.load_library. The flags target AVX2 +
FMA, which every machine of our pool has, so a library built on one machine runs on the others;
code for more (the attention's AVX512-BF16 scores) sits in functions compiled for it by a
target attribute and is chosen at run time by what the CPU has.
`make export` builds it; the engine builds it at load when it is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.utils.cpp_extension

SOURCE_DIR = Path(__file__).resolve().parent
REPO_ROOT = SOURCE_DIR.parents[2]
BUILD_DIR = Path(os.environ.get("LLM_KERNELS_DIR", REPO_ROOT / "build" / "kernels"))
KERNELS = ("paged_attention", "row_ops", "lora", "amx_linear")
# The CPU features the code is compiled for (llm.engine.attention checks the CPU has them).
REQUIRED_CPU_FLAGS = frozenset({"avx2", "fma", "f16c"})
# -ffast-math for compiling only (vectorised exponentials, reassociated sums): linked with it, gcc
# adds crtfastmath.o, whose constructor flushes denormals to zero for the whole process.
CXXFLAGS = ("-O3", "-mavx2", "-mfma", "-mf16c", "-ffast-math", "-fopenmp", "-fPIC", "-std=c++20")
LDFLAGS = ("-shared", "-fopenmp")


class KernelBuildError(RuntimeError):
    """The kernel could not be compiled; the message carries the compiler's output."""


def compiler() -> str | None:
    """The C++ compiler to use: $CXX, else g++ on the PATH (None when there is none)."""
    return os.environ.get("CXX") or shutil.which("g++")


def library_path(name: str) -> Path:
    """Where the library for the current source, torch and flags lives (built or not)."""
    key = hashlib.sha256()
    key.update((SOURCE_DIR / f"{name}.cpp").read_bytes())
    key.update(torch.__version__.encode())
    key.update(" ".join(CXXFLAGS + LDFLAGS).encode())
    return BUILD_DIR / f"{name}-{key.hexdigest()[:16]}.so"


def build(name: str) -> Path:
    """Compile kernel `name` unless its library is current; the library's path. Written to a
    temporary file and renamed, so a concurrent loader never sees half a library."""
    target = library_path(name)
    if target.exists():
        return target
    cxx = compiler()
    if cxx is None:
        raise KernelBuildError(f"no C++ compiler to build {name} (install g++ or set CXX)")
    include = [f"-I{path}" for path in torch.utils.cpp_extension.include_paths()]
    libraries = torch.utils.cpp_extension.library_paths()
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so.part", delete=False) as part:
        partial = Path(part.name)
    objects = partial.with_suffix(".o")
    compile_command = [
        cxx,
        *CXXFLAGS,
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *include,
        "-c",
        str(SOURCE_DIR / f"{name}.cpp"),
        "-o",
        str(objects),
    ]
    link_command = [
        cxx,
        *LDFLAGS,
        str(objects),
        "-o",
        str(partial),
        *[f"-L{path}" for path in libraries],
        "-lc10",
        "-ltorch_cpu",
        "-lm",
        *[f"-Wl,-rpath,{path}" for path in libraries],
    ]
    try:
        for step, command in (("compiling", compile_command), ("linking", link_command)):
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise KernelBuildError(f"{step} {name} failed ({cxx}, exit {result.returncode}):\n{result.stderr[-4000:]}")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
        objects.unlink(missing_ok=True)
    for stale in target.parent.glob(f"{name}-*.so"):  # older sources' (a process that loaded one keeps its mapping)
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", help=f"which kernels (default: all of {', '.join(KERNELS)})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.kernels) - set(KERNELS))
    if unknown:
        parser.error(f"unknown kernel {unknown[0]!r}: choose from {', '.join(KERNELS)}")
    for name in args.kernels or KERNELS:
        current = library_path(name).exists()
        started = time.perf_counter()
        try:
            path = build(name)
        except KernelBuildError as error:
            print(f"kernels: {error}", file=sys.stderr)
            return 1
        state = "up to date" if current else f"built in {time.perf_counter() - started:.0f} s"
        print(f"kernels: {name} {state}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
