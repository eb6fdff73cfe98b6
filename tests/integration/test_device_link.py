"""A CUDA device link (nvcc -dlink) in a shard, through the seat wrapper, with real nvcc
and nvlink: stubbed objects leave a device function undefined, nvlink says so in its own
words, and the wrapper tolerates that (and only that) as it does a host link."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_wrapper_compile import CCACHE, Shard, needs_ccache, needs_nvcc

pytestmark = [pytest.mark.compile, pytest.mark.cuda]

CALLER = """\
__device__ int callee(int x);
__global__ void kern(int* out) { out[0] = callee(threadIdx.x); }
"""
CALLEE = "__device__ int callee(int x) { return 2 * x; }\n"
NVCC_RDC = ["nvcc", "-arch=sm_80", "-Xcompiler", "-fPIC", "-rdc=true", "-c"]
DLINK = ["nvcc", "-arch=sm_80", "-Xcompiler=-fPIC", "-Wno-deprecated-gpu-targets", "-shared", "-dlink"]


def _shard(tmp_path: Path) -> Shard:
    shard = Shard(tmp_path, 0, 2, CCACHE)
    shard.write("caller.cu", CALLER)
    shard.write("callee.cu", CALLEE)
    shard.write("duplicate.cu", CALLER.replace("__device__ int callee(int x);", CALLEE))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"caller.cu": 0, "duplicate.cu": 0, "callee.cu": 1}))
    shard.env["KILN_PARTITION_MAP"] = str(plan)
    for name in ("caller", "callee", "duplicate"):
        compiled = shard.run(*NVCC_RDC, f"{name}.cu", "-o", f"{name}.o")
        assert compiled.returncode == 0, compiled.stderr
    return shard


def _records(shard: Shard) -> list[dict[str, object]]:
    return [json.loads(line) for line in shard.log.read_text().splitlines()]


@needs_ccache
@needs_nvcc
def test_device_link_of_a_stubbed_callee_is_tolerated(tmp_path: Path) -> None:
    shard = _shard(tmp_path)
    assert [r["action"] for r in _records(shard)] == ["compile", "stub", "compile"]
    linked = shard.run(*DLINK, "caller.o", "callee.o", "-o", "dlink.o")
    assert linked.returncode == 0, linked.stderr
    assert "nvlink error   : Undefined reference to '_Z6calleei' in 'caller.o'" in linked.stderr
    assert (shard.tree / "dlink.o").read_bytes() == shard.stub.read_bytes()  # linked on by ld
    last = _records(shard)[-1]
    assert (last["action"], last["exit"]) == ("link-unresolved", 255)
    assert last["output"] == str(shard.tree / "dlink.o")


@needs_ccache
@needs_nvcc
def test_device_link_failing_otherwise_is_not_tolerated(tmp_path: Path) -> None:
    shard = _shard(tmp_path)
    linked = shard.run(*DLINK, "caller.o", "duplicate.o", "-o", "dlink.o")
    assert linked.returncode != 0
    assert "nvlink error   : Multiple definition of '_Z4kernPi'" in linked.stderr
    last = _records(shard)[-1]
    assert last["action"] == "link" and last["exit"] != 0
