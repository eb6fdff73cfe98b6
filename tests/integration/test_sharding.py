"""Sharded builds end to end: shards hand over a cache, the link job sees zero misses,
and the wheel is equivalent to an unsharded build. Real compilers, real ccache."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln, copy_example, expected_checksum, pure_package, recipe_for
from wheelkiln.cells import shard_archive
from wheelkiln.shard.partition import shard_of, tu_key

pytestmark = pytest.mark.compile


def sharded(kiln: Kiln, recipe: Path, tmp_path: Path, count: int, *extra: str,
            env: dict[str, str] | None = None) -> dict[str, Any]:
    return kiln.json("build", recipe, "--shards", str(count), "--out", tmp_path / f"out-{count}",
                     "--workdir", tmp_path / "work", *extra, env=env)


def exported(wheel: str) -> dict[str, set[str]]:
    import zipfile

    symbols: dict[str, set[str]] = {}
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".so"):
                data = archive.read(name)
                path = Path(wheel).with_suffix(".tmp.so")
                path.write_bytes(data)
                out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(path)],
                                     capture_output=True, text=True, check=True).stdout
                symbols[name] = {line.split()[0] for line in out.splitlines() if line}
                path.unlink()
    return symbols


# N=2 is tests/integration/test_github_steps.py's demo-kernels test: the same build,
# gates and wheel checks, reached through the emitted GitHub workflow's own steps.
@pytest.mark.cuda
# N = 2 runs through the GitHub workflow steps (test_github_steps.py); N = 1, where one
# shard holds every TU, on a small package below.
@pytest.mark.parametrize("count", [4, 7])
def test_demo_kernels_sharded_links_with_zero_misses(
    kiln: Kiln, kernels_cold: dict[str, Any], tmp_path: Path, installed, count: int
) -> None:
    # N=4 compiles ahead in the stubs' slots (shard/ahead.py, KILN_SHARD_AHEAD=1); N=7 as
    # by default, without.
    ahead = count == 4
    report = sharded(kiln, kernels_cold["recipe"], tmp_path, count,
                     env={"KILN_SHARD_AHEAD": "1"} if ahead else None)
    link = report["link"]
    assert link["cache"]["misses"] == 0
    assert link["cache"]["hits"] == link["cache"]["total"] == kernels_cold["record"]["cache"]["total"]
    # Configure succeeded in every shard: CMake's probes were never stubbed, and families
    # that are empty in a shard are skipped by their if(TARGET ...) guards.
    assert len(report["shards"]) == count
    assert all(s["shard"]["gate"]["passed"] for s in report["shards"])
    compiled = sum(s["shard"]["actions"].get("compile", 0) for s in report["shards"])
    assert compiled == 26, "every TU (24 kernels, dispatcher, module) compiled in exactly one shard"
    # With it on, stubs' slots compiled some of their shard's own TUs first: ninja's own
    # calls of those were cache hits, and the link job still missed nothing.
    compiled_ahead = sum(s["shard"]["actions"].get("ahead", 0) for s in report["shards"])
    assert compiled_ahead > 0 if ahead else compiled_ahead == 0
    # CMake's try_compile probes (compiles and their links) are never stubbed: every stub is
    # another shard's TU. A shard runs them where the cell's compiler identification and
    # check results were not kept yet (by an earlier shard job of the cell), and all of them.
    stubs = sum(s["shard"]["actions"].get("stub", 0) for s in report["shards"])
    assert stubs == 26 * (count - 1)
    probes = [s["shard"]["actions"].get("probe", 0) for s in report["shards"]]
    assert all(probe == 0 or probe >= 4 for probe in probes), probes
    answer = installed(link["wheel"]["path"], "import demo_kernels; print(demo_kernels.checksum())")
    assert int(answer) == expected_checksum(kernels_cold["tree"])
    assert exported(link["wheel"]["path"]) == exported(kernels_cold["record"]["wheel"]["path"])
    verdict = json.loads(kiln("verify", link["wheel"]["path"], kernels_cold["record"]["wheel"]["path"],
                              "--json").stdout)
    assert verdict["equivalent"], verdict


@pytest.mark.parametrize("partition", ["source", "seat"])
def test_demo_cpp_sharded_equivalent_to_unsharded(kiln: Kiln, tmp_path: Path, installed, partition: str) -> None:
    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(tree, "demo-cpp", tmp_path)
    reference = kiln.json("build", recipe, "--out", tmp_path / "ref", "--workdir", tmp_path / "refwork",
                          "--cache-dir", tmp_path / "refcache", "--no-wheel-cache")
    report = sharded(kiln, recipe, tmp_path, 3, "--partition", partition)
    link = report["link"]
    assert link["cache"]["misses"] == 0 and link["cache"]["total"] == reference["cache"]["total"]
    # The reference went to another --out: its cold wall time is found in the state home.
    assert report["unsharded_cold_seconds"] == reference["wall_seconds"]
    # Each shard stored an entry for each real TU it compiled (its cache starts empty):
    # under the seat partition each TU in one shard; under the source partition, TUs
    # outside the recipe's source globs (csrc/{core,extra}/{dispatch,module}.cpp) are
    # compiled in all 3 shards. And one figure is a shard's seconds: the shard job's own
    # wall time.
    shards = report["shards"]
    stores = sum(s["cache"]["stores"] for s in shards)
    assert stores == reference["cache"]["total"] + (0 if partition == "seat" else 2 * 4)
    assert report["slowest_shard_plus_link_seconds"] == pytest.approx(
        max(s["process"]["wall_seconds"] for s in shards) + link["wall_seconds"], abs=0.002)
    assert [s["process"]["jobs"] for s in shards] == report["measured"]["jobs"]
    answer = installed(link["wheel"]["path"], "import demo_cpp; print(demo_cpp.checksum())")
    assert int(answer) == expected_checksum(tree)
    verdict = json.loads(kiln("verify", link["wheel"]["path"], reference["wheel"]["path"], "--json").stdout)
    assert verdict["equivalent"], verdict
    assert not verdict["symbol_differences"]


def _owner(tree: Path, relative: str, count: int) -> int:
    return shard_of(tu_key(tree / relative, tree), count)


def test_compile_error_fails_its_shard(kiln: Kiln, tmp_path: Path) -> None:
    tree = copy_example("demo-cpp", tmp_path)
    broken = "csrc/generated/core/core_t03.cpp"
    path = tree / broken
    path.write_text(path.read_text() + "\nint broken( { return 0; }\n")
    recipe = recipe_for(tree, "demo-cpp", tmp_path)
    index = _owner(tree, broken, 3)
    result = kiln("shard", recipe, "--index", str(index), "--count", "3", "--partition", "seat",
                  "--out", tmp_path / "shards", "--workdir", tmp_path / "work", check=False)
    # The package's own TU is broken, as it is unsharded: a build failure (exit 4).
    assert result.returncode == 4, result.stderr
    message = " ".join(result.stderr.split())
    assert (f"The build of shard {index + 1}/3 of demo-cpp-py3.11-linux-x86_64 failed, as it "
            "would unsharded: - compiler diagnostics in the build log: "
            "csrc/generated/core/core_t03.cpp:49:") in message
    assert "- 1 TU compile(s) failed in the wrapper: csrc/generated/core/core_t03.cpp" in message
    assert not list((tmp_path / "shards").glob("*.tar.gz")), "a failed shard packs no archive"


def test_a_package_with_nothing_to_compile_is_told_to_build_unsharded(
    kiln: Kiln, tmp_path: Path
) -> None:
    # A pure-Python package (flit_core) under --shards: its build calls no compiler, which
    # is no misconfigured launcher to look for, and its wheel says why.
    recipe = pure_package(tmp_path)
    result = kiln("shard", recipe, "--index", "0", "--count", "2", "--out", tmp_path / "shards",
                  "--workdir", tmp_path / "work", check=False)
    assert result.returncode == 5, result.stderr
    assert (
        "nothing to shard: the build called no compiler and its wheel, "
        "purepkg-0.1-py2.py3-none-any.whl, holds no extension module. Build it unsharded: "
        "kiln build without --shards, and no [sharding] count above 1 in its recipe"
    ) in result.stderr
    assert "wrapper never invoked" not in result.stderr
    built = kiln.json("build", recipe, "--out", tmp_path / "out", "--workdir", tmp_path / "work")
    assert Path(built["wheel"]["path"]).name == "purepkg-0.1-py2.py3-none-any.whl"


MESON_PYPROJECT = """\
[build-system]
requires = ["meson-python>=0.15", "meson>=1.2", "ninja", "pybind11>=2.12"]
build-backend = "mesonpy"

[project]
name = "genpkg"
version = "0.1"
"""


@pytest.mark.parametrize("backend", ["cmake", "meson"])
def test_a_generator_linked_against_a_stubbed_static_library_is_made_whole(
    kiln: Kiln, tmp_path: Path, installed, backend: str
) -> None:
    # A static library of four objects, a code generator linked against it that the
    # build runs, and a module that includes its output. A shard that stubbed some of
    # the library's objects packed the stubs into libcore.a; the generator's link failed
    # on them and the shard stopped before its own compiles. CMake writes a plain
    # archive, meson a thin one (its members are paths).
    tree = tmp_path / "genpkg"
    shutil.copytree(Path(__file__).parent / "fixtures" / "static-generator", tree)
    if backend == "meson":
        (tree / "pyproject.toml").write_text(MESON_PYPROJECT)
    recipe = tmp_path / "genpkg.toml"
    recipe.write_text(
        'name = "genpkg"\n[source]\npath = "genpkg"\n'
        '[matrix]\npython = ["3.11"]\nplatforms = ["linux-x86_64"]\n'
        '[verify]\nimport = "genpkg"\n'
    )
    result = kiln.json("build", recipe, "--shards", "3", "--out", tmp_path / "out",
                       "--workdir", tmp_path / "work")
    assert result["gate"] == {"passed": True, "problems": []}
    link = result["link"]
    assert link["cache"]["misses"] == 0 and link["cache"]["hits"] == link["cache"]["total"] == 6
    assert all(shard["shard"]["gate"]["passed"] for shard in result["shards"])
    # a*97 + b*98 + c*99 + d*100 at 1 (the generated table) + a(2) + b(3)
    answer = installed(link["wheel"]["path"], "import genpkg; print(genpkg.answer())")
    assert int(answer) == 97 + 98 + 99 + 100 + 2 * 97 + 3 * 98
    logs = "".join(path.read_text() for path in (tmp_path / "work").glob("*-shard-*/build.log"))
    done = "indexed it again" if backend == "meson" else "wrote them into it"
    assert "libcore.a held" in logs and f"compiled them for real and {done}" in logs


def _shard_all(kiln: Kiln, recipe: Path, tmp_path: Path, count: int, shards: Path, workdir: str = "work") -> None:
    for index in range(count):
        kiln("shard", recipe, "--index", str(index), "--count", str(count), "--partition", "seat",
             "--out", shards, "--workdir", tmp_path / workdir)


def test_missing_shard_still_links_and_fails_naming_it(kiln: Kiln, tmp_path: Path) -> None:
    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(tree, "demo-cpp", tmp_path)
    shards = tmp_path / "shards"
    _shard_all(kiln, recipe, tmp_path, 3, shards)
    (shards / shard_archive("demo-cpp-py3.11-linux-x86_64", 1, 3)).unlink()
    result = kiln("link", recipe, "--archives", shards, "--count", "3", "--out", tmp_path / "dist",
                  "--workdir", tmp_path / "work", check=False)
    assert result.returncode == 5
    assert "shard 2/3 is missing" in result.stderr
    assert "cache miss(es)" in result.stderr
    wheels = list((tmp_path / "dist").glob("*.whl"))
    assert len(wheels) == 1, "the self-healed wheel is kept"


def test_shard_from_other_arch_list_is_named_not_merged(kiln: Kiln, tmp_path: Path) -> None:
    tree = copy_example("demo-cpp", tmp_path)
    lane = '\n[[matrix.cuda]]\nversion = "13.0"\narch_list = ["{}"]\n'
    recipes = {}
    for arch in ("8.0", "9.0"):
        where = tmp_path / f"recipe-{arch}"
        where.mkdir()
        recipes[arch] = recipe_for(tree, "demo-cpp", where,
                                   **{"links_torch = false\n": "links_torch = false\n" + lane.format(arch)})
    recipe_80, recipe_90 = recipes["8.0"], recipes["9.0"]
    shards = tmp_path / "shards"
    kiln("shard", recipe_80, "--index", "0", "--count", "2", "--partition", "seat", "--out", shards,
         "--workdir", tmp_path / "work")
    kiln("shard", recipe_90, "--index", "1", "--count", "2", "--partition", "seat", "--out", shards,
         "--workdir", tmp_path / "work")
    result = kiln("link", recipe_80, "--archives", shards, "--out", tmp_path / "dist",
                  "--workdir", tmp_path / "work", check=False)
    assert result.returncode == 5
    assert "shard 2/2 was built with a different toolchain (arch_list: shard has ['9.0'], " \
           "link job has ['8.0']); not merged" in result.stderr.replace("\n", " ").replace("  ", " ")


def test_tampered_archive_is_rejected_by_link(kiln: Kiln, tmp_path: Path) -> None:
    import io
    import tarfile

    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(tree, "demo-cpp", tmp_path)
    shards = tmp_path / "shards"
    shards.mkdir()
    archive = shards / shard_archive("demo-cpp-py3.11-linux-x86_64", 0, 1)
    with tarfile.open(archive, "w:gz") as tar:
        blob = json.dumps({"cell": "demo-cpp-py3.11-linux-x86_64", "toolchain": {}}).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
        evil = tarfile.TarInfo("cache/../../escaped")
        evil.size = 1
        tar.addfile(evil, io.BytesIO(b"x"))
    result = kiln("link", recipe, "--archives", shards, "--out", tmp_path / "dist", "--workdir",
                  tmp_path / "work", check=False)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "work" / "escaped").exists()


PROBE_PACKAGE = {
    "pyproject.toml": """
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"
[project]
name = "probepkg"
version = "0.1"
""",
    # Like pycryptodome's setup.py: compile a toolchain probe under a name no list knows
    # and link it into an executable, then build several extensions one after another.
    "setup.py": '''
import os, subprocess, sys
from setuptools import setup, Extension
from setuptools.command.build_ext import build_ext

class Build(build_ext):
    def run(self):
        cc = os.environ.get("CC", "cc").split()
        os.makedirs("build", exist_ok=True)
        with open("build/test1.c", "w") as f:
            f.write("int main(void) { return 0; }\\n")
        subprocess.check_call(cc + ["-c", "build/test1.c", "-o", "build/test1.o"])
        subprocess.check_call(cc + ["build/test1.o", "-o", "build/test1"])
        subprocess.check_call(["build/test1"])
        super().run()

exts = [Extension(f"probepkg.m{i}", [f"src/m{i}.c", f"src/part{i}a.c", f"src/part{i}b.c"],
                  extra_compile_args=["-fvisibility=hidden"]) for i in range(4)]
setup(packages=["probepkg"], package_dir={"": "src"}, ext_modules=exts, cmdclass={"build_ext": Build})
''',
}


def _probe_package(root: Path) -> Path:
    tree = root / "probepkg"
    (tree / "src" / "probepkg").mkdir(parents=True)
    for name, text in PROBE_PACKAGE.items():
        (tree / name).write_text(text)
    (tree / "src" / "probepkg" / "__init__.py").write_text("")
    for i in range(4):
        for part in "ab":
            (tree / "src" / f"part{i}{part}.c").write_text(
                f'__attribute__((visibility("hidden"))) long part{i}{part}(void) {{ return {i * 10 + ord(part)}; }}\n')
        (tree / "src" / f"m{i}.c").write_text(f"""
#include <Python.h>
__attribute__((visibility("hidden"))) long part{i}a(void);
__attribute__((visibility("hidden"))) long part{i}b(void);
static PyObject *value(PyObject *s, PyObject *a) {{ return PyLong_FromLong(part{i}a() + part{i}b()); }}
static PyMethodDef methods[] = {{{{"value", value, METH_NOARGS, ""}}, {{0}}}};
static struct PyModuleDef mod = {{PyModuleDef_HEAD_INIT, "m{i}", 0, -1, methods}};
__attribute__((visibility("default"))) PyMODINIT_FUNC PyInit_m{i}(void) {{ return PyModule_Create(&mod); }}
""")
    return tree


def test_unlisted_toolchain_probe_and_sequential_extensions(kiln: Kiln, tmp_path: Path, installed) -> None:
    tree = _probe_package(tmp_path)
    recipe = tmp_path / "probepkg.toml"
    recipe.write_text(f'name = "probepkg"\n[source]\npath = "{tree}"\n[sharding]\ncount = 3\n')
    report = sharded(kiln, recipe, tmp_path, 3)
    link = report["link"]
    assert link["cache"]["misses"] == 0
    # 12 extension TUs plus the probe, which every shard compiles for itself.
    assert link["cache"]["total"] == 13
    for shard in report["shards"]:
        assert shard["shard"]["gate"]["passed"], shard["shard"]["gate"]
    compiled_tus = [s["shard"]["actions"].get("compile", 0) for s in report["shards"]]
    sources = [f"src/{name}{i}{part}.c" for i in range(4) for name, part in
               (("m", ""), ("part", "a"), ("part", "b"))] + ["build/test1.c"]
    expected = [sum(1 for source in sources if _owner(tree, source, 3) == index) for index in range(3)]
    assert compiled_tus == expected, "every in-slice TU is compiled; no shard aborts"
    code = "import probepkg.m0, probepkg.m3; print(probepkg.m0.value() + probepkg.m3.value())"
    assert int(installed(link["wheel"]["path"], code)) == (97 + 98) + (60 + 97 + 98)


def test_both_partitions_refused_at_runtime(kiln: Kiln, tmp_path: Path) -> None:
    tree = copy_example("demo-kernels", tmp_path)
    recipe = recipe_for(tree, "demo-kernels", tmp_path)
    result = kiln("shard", recipe, "--index", "0", "--count", "2", "--partition", "source",
                  "--out", tmp_path / "s", check=False)
    assert result.returncode == 2
    assert "the source partition needs sharding.source_globs" in result.stderr



@pytest.mark.parametrize(("count", "backend"), [(1, "ccache"), (2, "sccache")])
def test_small_package_sharded_links_with_zero_misses(
    kiln: Kiln, tmp_path: Path, installed, count: int, backend: str
) -> None:
    """N = 1: the one shard compiles every TU and stubs none. N = 2 with sccache: its
    entries reach the link job from other job directories. Either way the link job hits
    every TU."""
    from tests.integration.test_link_verify import tiny_package, tiny_recipe

    tree = tiny_package(tmp_path)
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    report = sharded(kiln, recipe, tmp_path, count, "--cache", backend)
    assert len(report["shards"]) == count
    assert all(s["shard"]["gate"]["passed"] for s in report["shards"])
    assert sum(s["shard"]["actions"].get("compile", 0) for s in report["shards"]) == 3
    assert sum(s["shard"]["actions"].get("stub", 0) for s in report["shards"]) == 3 * (count - 1)
    link = report["link"]
    assert (link["cache"]["misses"], link["cache"]["hits"], link["cache"]["total"]) == (0, 3, 3)
    assert installed(link["wheel"]["path"], "import kiln_tiny; print(kiln_tiny.answer())") == "42"
