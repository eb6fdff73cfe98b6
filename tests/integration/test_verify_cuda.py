"""kiln verify on real nvcc output: two builds of the same CUDA sources in different
directories are equivalent, a changed device constant is not.

Broke: every CUDA wheel was "different". nvcc names modules by a hash of the source's
absolute path (``__cudaRegisterLinkedBinary_<hash>_4_k_cu_<id>`` exported from ``-rdc``
modules, ``_GLOBAL__N__<hash>_…`` inside the compressed PTX of the fatbin), and ld
orders the symbol hash table, PLT and GOT by those names.
"""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from wheelkiln.wheels.compare import compare_wheels, exported_symbols

pytestmark = [pytest.mark.compile, pytest.mark.cuda]

RDC_SOURCE = """\
namespace { __device__ int scale(int x) { return x * DEVICE_FACTOR; } }
__device__ int twice(int x);
__global__ void kern(int* out) { out[threadIdx.x] = twice(scale(threadIdx.x)); }
extern "C" int host_answer() { return 42; }
void launch(int* p) { kern<<<1, 1>>>(p); }
"""
RDC_HELPER = "__device__ int twice(int x) { return 2 * x; }\n"
WHOLE_SOURCE = """\
static __device__ int counter[4];
namespace { __global__ void anon_kern(int* o) { o[0] = counter[0] + 7; } }
void launch_whole(int* p) { anon_kern<<<1, 1>>>(p); }
"""


def _build(directory: Path, device_factor: int) -> Path:
    """One extension-like shared object: two -rdc TUs with a cross-TU device call, their
    device link, and one whole-program TU (compressed PTX in its fatbin)."""
    directory.mkdir(parents=True)
    (directory / "k.cu").write_text(RDC_SOURCE)
    (directory / "helper.cu").write_text(RDC_HELPER)
    (directory / "whole.cu").write_text(WHOLE_SOURCE)
    nvcc = ["nvcc", "-arch=sm_80", "-Xcompiler", "-fPIC"]
    steps = [
        [*nvcc, "-rdc=true", f"-DDEVICE_FACTOR={device_factor}", "-c", "k.cu", "-o", "k.o"],
        [*nvcc, "-rdc=true", "-c", "helper.cu", "-o", "helper.o"],
        [*nvcc, "-c", "whole.cu", "-o", "whole.o"],
        [*nvcc, "-dlink", "k.o", "helper.o", "-o", "dlink.o"],
        ["nvcc", "-arch=sm_80", "-shared", "k.o", "helper.o", "whole.o", "dlink.o", "-o", "m.so"],
    ]
    for step in steps:
        subprocess.run(step, cwd=directory, check=True, capture_output=True)
    wheel = directory / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(directory / "m.so", "pkg/_m.cpython-311-x86_64-linux-gnu.so")
        archive.writestr("pkg-1.0.dist-info/RECORD", str(directory))
    return wheel


def test_same_cuda_sources_built_in_two_directories_are_equivalent(tmp_path: Path) -> None:
    first = _build(tmp_path / "first-tree", device_factor=3)
    second = _build(tmp_path / "second" / "tree", device_factor=3)
    name = "pkg/_m.cpython-311-x86_64-linux-gnu.so"
    with zipfile.ZipFile(first) as a, zipfile.ZipFile(second) as b:
        raw_a, raw_b = exported_symbols(a.read(name)), exported_symbols(b.read(name))
    differing = sorted(raw_a ^ raw_b)
    assert differing and all(
        "cudaRegisterLinkedBinary_" in s or "fatbinwrap_" in s for s in differing
    )

    result = compare_wheels(first, second)
    assert result.equivalent, result.as_dict()
    assert result.nvcc_temp_names_only == [name]
    assert result.symbol_differences == {}


def test_a_changed_device_constant_still_differs(tmp_path: Path) -> None:
    """Only device code changes (the host code is the same): the difference lives in the
    fatbin, partly compressed, and must survive the blanking."""
    first = _build(tmp_path / "first-tree", device_factor=3)
    changed = _build(tmp_path / "changed-tree", device_factor=5)
    result = compare_wheels(first, changed)
    assert not result.equivalent
    assert result.differing == ["pkg/_m.cpython-311-x86_64-linux-gnu.so"]
    assert result.nvcc_temp_names_only == []
