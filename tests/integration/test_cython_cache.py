"""The Cython cache on examples/demo-cython (meson-python, eight Cython modules, one of
them 22.5k lines of C): a tree in another directory shares the entries and a changed
.pxd misses (one build), in-process cythonize() shares them too; hot builds hit for
Cython and C, and N=3 shards hand every transpile over (``slow``: the CI budget of this
file holds the cold build and one more).

Every test starts from one cold build per run (``cython_cold``), copying its tree and
cache before building, so each build here runs in a directory of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln, expected_checksum

pytestmark = pytest.mark.compile

CELL = "demo-cython-py3.11-linux-x86_64"
SMALL = [f"<root>/src/demo_cython/_m{index}.pyx" for index in range(1, 8)]
MODULES = sorted(["<build>/_big.pyx", *SMALL])


def _copy(cold: dict[str, Any], tmp_path: Path) -> tuple[Path, Path]:
    """The cold build's tree and cache copied under *tmp_path*, and a recipe for them."""
    tree = tmp_path / "demo-cython"
    shutil.copytree(cold["tree"], tree)
    shutil.copytree(cold["cache"], tmp_path / "ccache")
    recipe = tmp_path / "demo-cython.toml"
    recipe.write_text(cold["recipe"].read_text().replace(str(cold["tree"]), str(tree)))
    return tree, recipe


def run_wheel(wheel: str, tmp_path: Path) -> int:
    """demo_cython.answer() from the wheel, unpacked onto PYTHONPATH (no pip: faster)."""
    target = tmp_path / "site"
    shutil.rmtree(target, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    result = subprocess.run(
        [sys.executable, "-c", "import demo_cython; print(demo_cython.answer())"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(target)},
        cwd=tmp_path, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def _build(kiln: Kiln, recipe: Path, tmp_path: Path, *extra: str) -> dict[str, Any]:
    return kiln.json("build", recipe, "--out", tmp_path / "out", "--workdir", tmp_path / "work",
                     "--cache-dir", tmp_path / "ccache", "--no-wheel-cache", *extra)  # fmt: skip


def _generated_c(work: Path, suffix: str = "") -> dict[str, bytes]:
    """The C files Cython wrote in a build, by module."""
    build = work / (f"{CELL}-{suffix}" if suffix else CELL) / "build"
    return {path.name: path.read_bytes() for path in sorted(build.glob("*.so.p/*.pyx.c"))}


def test_cold_build_transpiles_every_module_once(cython_cold: dict[str, Any]) -> None:
    record = cython_cold["record"]
    assert record["cython"]["misses"] == record["cython"]["total"] == 8
    assert record["cython"]["uncached"] == 0, "every transpile went through the cache"
    assert record["cython"]["missed"] == MODULES
    assert record["cache"]["misses"] == record["cache"]["total"] == 8
    generated = _generated_c(cython_cold["work"])
    assert len(generated) == 8
    assert generated["_big.pyx.c"].count(b"\n") >= 20_000, "the long TU the example promises"


def test_another_directory_hits_and_a_changed_pxd_misses(
    kiln: Kiln, tmp_path: Path, cython_cold: dict[str, Any]
) -> None:
    kiln = Kiln(cython_cold["home"], tmp_path / "state")  # its environment's path is keyed
    tree, recipe = _copy(cython_cold, tmp_path)
    pxd = tree / "src" / "demo_cython" / "weights.pxd"  # cimported by _m7 only
    pxd.write_text(pxd.read_text().replace("return 5", "return 9"))
    build = _build(kiln, recipe, tmp_path)
    # The tree moved: the seven modules untouched by the change hit, for Cython and C ...
    assert build["cython"]["missed"] == ["<root>/src/demo_cython/_m7.pyx"], build["cython"]
    assert (build["cython"]["hits"], build["cython"]["misses"]) == (7, 1)
    assert (build["cache"]["hits"], build["cache"]["misses"]) == (7, 1), build["cache"]
    # ... each hit writing the bytes Cython wrote in the cold build's directory,
    before, after = _generated_c(cython_cold["work"]), _generated_c(tmp_path / "work")
    assert {name for name in before if after[name] == before[name]} == set(before) - {"_m7.pyx.c"}
    # and the module that cimports the changed .pxd was transpiled again, with the change.
    assert after["_m7.pyx.c"] != before["_m7.pyx.c"]
    assert b"return 9" in after["_m7.pyx.c"] and b"return 5" in before["_m7.pyx.c"]
    assert run_wheel(build["wheel"]["path"], tmp_path) == expected_checksum(tree)
    assert expected_checksum(tree) != expected_checksum(cython_cold["tree"])
    # The cold build (or an earlier one in its KILN_HOME) passed meson's sanity checks
    # with these compilers: skipped here (builder/meson_sanity.py; the unit tests show
    # that a changed compiler checks again).
    def meson_log(record: dict[str, Any]) -> str:
        return (Path(record["log"]).parent / "build/meson-logs/meson-log.txt").read_text()

    assert "sanity tests disabled" in meson_log(build)
    assert "Sanity check" not in meson_log(build)


@pytest.mark.slow  # one more build than the CI budget holds; the link job below is hot too
def test_hot_build_is_all_hits(kiln: Kiln, tmp_path: Path, cython_cold: dict[str, Any]) -> None:
    kiln = Kiln(cython_cold["home"], tmp_path / "state")  # its environment's path is keyed
    _, recipe = _copy(cython_cold, tmp_path)
    hot = _build(kiln, recipe, tmp_path)
    assert (hot["cython"]["hits"], hot["cython"]["misses"]) == (8, 0), hot["cython"]
    assert (hot["cache"]["hits"], hot["cache"]["misses"]) == (8, 0), hot["cache"]
    assert _generated_c(tmp_path / "work") == _generated_c(cython_cold["work"])


@pytest.mark.slow  # four builds: over the CI budget of this file
def test_sharded_three_ways_link_has_no_misses_of_either_kind(
    kiln: Kiln, tmp_path: Path, cython_cold: dict[str, Any]
) -> None:
    tree = tmp_path / "demo-cython"
    shutil.copytree(cython_cold["tree"], tree)
    recipe = tmp_path / "demo-cython.toml"
    recipe.write_text(cython_cold["recipe"].read_text().replace(str(cython_cold["tree"]), str(tree)))
    report = kiln.json("build", recipe, "--shards", "3", "--jobs", "1", "--out", tmp_path / "out",
                       "--workdir", tmp_path / "work")  # fmt: skip
    transpiled: list[str] = []
    for index, shard in enumerate(report["shards"]):
        assert shard["shard"]["gate"]["passed"], shard["shard"]["gate"]
        log = tmp_path / "work" / f"{CELL}-shard-{index}-of-3" / "cython.jsonl"
        records = [json.loads(line) for line in log.read_text().splitlines()]
        mine = [r["source"] for r in records if r["outcome"] == "miss"]
        assert shard["cython"]["stubs"] == 8 - len(mine), shard["cython"]
        transpiled += mine
    # Each module transpiled by exactly one shard: the owner of its C TU.
    assert sorted(transpiled) == MODULES
    link = report["link"]
    assert link["link"]["gate"]["passed"], link["link"]["gate"]
    assert (link["cython"]["hits"], link["cython"]["misses"]) == (8, 0), link["cython"]
    assert (link["cache"]["hits"], link["cache"]["misses"]) == (8, 0), link["cache"]
    assert run_wheel(link["wheel"]["path"], tmp_path) == expected_checksum(tree)
    # The link job's tree is not the cold build's: its hits wrote the same C all the same.
    assert _generated_c(tmp_path / "work") == _generated_c(cython_cold["work"])


def test_in_process_cythonize_hits_from_another_directory(
    tmp_path: Path, cython_cold: dict[str, Any]
) -> None:
    """setuptools' path: cythonize() inside the build's Python, through the site hook.
    Run here by Cython's own ``cythonize`` command (in process too), without a kiln
    build around it: the build environment of the cold build has Cython."""
    from wheelkiln.builder.toolchain import cython_fronts
    from wheelkiln.cache import cython as cython_cache

    bin_dir = Path(cython_cold["record"]["build_env"]) / "bin"
    _, site_hook = cython_fronts(tmp_path / "scripts")
    generated: dict[str, bytes] = {}
    for name in ("first", "second"):
        tree = tmp_path / name
        shutil.copytree(cython_cold["tree"] / "src", tree)
        log = tmp_path / f"{name}.jsonl"
        env = {
            **os.environ,
            "PYTHONPATH": site_hook,
            **cython_cache.environment(cache_dir=str(tmp_path / "cache"), log_path=str(log),
                                       package_root=str(tree), build_dir=str(tree / "build"),
                                       envs_dirs=[str(tmp_path / ".envs")], recache=False),
        }  # fmt: skip
        subprocess.run([bin_dir / "cythonize", "--force", "demo_cython/_m7.pyx"], cwd=tree,
                       env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)  # fmt: skip
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert [(r["source"], r["front"]) for r in records] == [
            ("<root>/demo_cython/_m7.pyx", "cythonize")]  # fmt: skip
        generated[name] = (tree / "demo_cython" / "_m7.c").read_bytes()
        outcome = records[0]["outcome"]
        assert outcome == ("miss" if name == "first" else "hit")
    assert generated["second"] == generated["first"]
    # cythonize() writes the source's absolute path into one place: the metadata comment
    # (the cached bytes keep the first tree's; no compiler sees a comment).
    text = generated["first"].decode()
    metadata_end = text.index("END: Cython Metadata */")
    assert str(tmp_path / "first") in text[:metadata_end]
    assert str(tmp_path) not in text[metadata_end:]


def test_the_shared_utility_module_is_cached_on_the_command_line_and_in_process(
    tmp_path: Path, cython_cold: dict[str, Any]
) -> None:
    """Cython's shared utility module (``--generate-shared``, and cythonize()'s
    ``shared_utility_qualified_name``) has no source: Cython 3.1 wrote a temporary
    directory's random name into it, so its C TU missed the compiler cache in every
    build. Through the fronts another tree's transpile is a hit, written from the cache
    byte for byte, and in a shard only the owner of the C file runs it."""
    from wheelkiln.builder.toolchain import cython_fronts
    from wheelkiln.cache import cython as cython_cache
    from wheelkiln.shard import partition

    bin_dir = Path(cython_cold["record"]["build_env"]) / "bin"
    front_dirs, site_hook = cython_fronts(tmp_path / "scripts")
    in_process = (
        "from distutils.extension import Extension\n"
        "from Cython.Build import cythonize\n"
        "cythonize([Extension('pkg._cyutility', ['pkg/_cyutility.c'])],"
        " shared_utility_qualified_name='pkg._cyutility', quiet=True)\n"
    )
    generated: dict[tuple[str, str], bytes] = {}
    for name in ("first", "second"):
        tree = tmp_path / name
        (tree / "build" / "pkg").mkdir(parents=True)
        (tree / "pkg").mkdir()
        log = tmp_path / f"{name}.jsonl"
        env = {
            **os.environ,
            "PATH": os.pathsep.join([*front_dirs, str(bin_dir), os.environ["PATH"]]),
            "PYTHONPATH": site_hook,
            **cython_cache.environment(cache_dir=str(tmp_path / "cache"), log_path=str(log),
                                       package_root=str(tree), build_dir=str(tree / "build"),
                                       envs_dirs=[str(tmp_path / ".envs")], recache=False),
        }  # fmt: skip
        cli_output = tree / "build" / "pkg" / "_cyutility.c"
        subprocess.run(["cython", "-3", "--fast-fail", f"--generate-shared={cli_output}"],
                       cwd=tree / "build", env=env, check=True, capture_output=True,
                       stdin=subprocess.DEVNULL)  # fmt: skip
        subprocess.run([bin_dir / "python", "-W", "ignore", "-c", in_process], cwd=tree,
                       env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)  # fmt: skip
        records = [json.loads(line) for line in log.read_text().splitlines()]
        outcome = "miss" if name == "first" else "hit"
        assert [(r["source"], r["front"], r["outcome"]) for r in records] == [
            ("<build>/pkg/_cyutility.c", "cli", outcome),
            ("<root>/pkg/_cyutility.c", "cythonize", outcome),
        ]
        generated[name, "cli"] = cli_output.read_bytes()
        generated[name, "cythonize"] = (tree / "pkg" / "_cyutility.c").read_bytes()
    for front in ("cli", "cythonize"):
        assert generated["second", front] == generated["first", front]
        assert generated["first", front].count(b"\n") > 10_000, "Cython's utility code"
    # A shard that does not own the C TU writes a placeholder and runs no Cython.
    tree = tmp_path / "first"
    owner = partition.shard_of("<build>/pkg/_cyutility.c", 2)
    log = tmp_path / "shard.jsonl"
    env = {
        **os.environ,
        "PATH": os.pathsep.join([*front_dirs, str(bin_dir), os.environ["PATH"]]),
        "KILN_SHARD_COUNT": "2", "KILN_SHARD_INDEX": str(1 - owner),
        "KILN_PACKAGE_ROOT": str(tree), "KILN_BUILD_DIR": str(tree / "build"),
        **cython_cache.environment(cache_dir=str(tmp_path / "cache"), log_path=str(log),
                                   package_root=str(tree), build_dir=str(tree / "build"),
                                   envs_dirs=[], recache=False),
    }  # fmt: skip
    subprocess.run(["cython", "-3", "--fast-fail",
                    "--generate-shared=" + str(tree / "build" / "pkg" / "_cyutility.c")],
                   cwd=tree / "build", env=env, check=True, stdin=subprocess.DEVNULL)  # fmt: skip
    assert json.loads(log.read_text())["outcome"] == "stub"
    assert b"transpiled by the shard that owns this TU" in (
        tree / "build" / "pkg" / "_cyutility.c"
    ).read_bytes()


OLD_BUILD_EXT_SETUP = """\
from distutils.core import setup
from distutils.extension import Extension
from Cython.Distutils.old_build_ext import old_build_ext

setup(name="oldpkg", cmdclass={"build_ext": old_build_ext},
      ext_modules=[Extension("oldpkg.answer", ["oldpkg/answer.pyx"])])
"""


def test_old_build_ext_transpiles_through_the_cache(
    tmp_path: Path, cython_cold: dict[str, Any]
) -> None:
    """``Cython.Distutils.old_build_ext`` (PyYAML's setup.py) calls
    ``Cython.Compiler.Main.compile`` once per .pyx, not cythonize(): the site hook
    routes it through the cache too. Another tree hits with the same C; a changed .pxd
    the module cimports misses, and the module computes the new answer."""
    from wheelkiln.builder.toolchain import cython_fronts
    from wheelkiln.cache import cython as cython_cache

    python = Path(cython_cold["record"]["build_env"]) / "bin" / "python"
    _, site_hook = cython_fronts(tmp_path / "scripts")
    pristine = tmp_path / "pristine"
    (pristine / "oldpkg").mkdir(parents=True)
    (pristine / "setup.py").write_text(OLD_BUILD_EXT_SETUP)
    (pristine / "oldpkg" / "__init__.py").write_text("")
    (pristine / "oldpkg" / "base.pxd").write_text("cdef inline int base():\n    return 40\n")
    (pristine / "oldpkg" / "answer.pyx").write_text(
        "from oldpkg.base cimport base\n\ndef answer():\n    return base() + 2\n")  # fmt: skip

    def build(name: str, pxd_value: int | None = None) -> tuple[str, bytes, int]:
        tree = tmp_path / name
        shutil.copytree(pristine, tree)
        if pxd_value is not None:
            (tree / "oldpkg" / "base.pxd").write_text(
                f"cdef inline int base():\n    return {pxd_value}\n")  # fmt: skip
        log = tmp_path / f"{name}.jsonl"
        env = {
            **os.environ,
            "PYTHONPATH": site_hook,
            **cython_cache.environment(cache_dir=str(tmp_path / "cache"), log_path=str(log),
                                       package_root=str(tree), build_dir=str(tree / "build"),
                                       envs_dirs=[], recache=False),
        }  # fmt: skip
        subprocess.run([python, "-W", "ignore", "setup.py", "build_ext", "--inplace"], cwd=tree,
                       env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)  # fmt: skip
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert [(r["source"], r["output"], r["front"]) for r in records] == [
            ("<root>/oldpkg/answer.pyx", "<root>/oldpkg/answer.c", "compile")]  # fmt: skip
        answer = subprocess.run(
            [python, "-c", "import oldpkg.answer; print(oldpkg.answer.answer())"], cwd=tree,
            capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL,
        ).stdout  # fmt: skip
        return records[0]["outcome"], (tree / "oldpkg" / "answer.c").read_bytes(), int(answer)

    first = build("first")
    assert (first[0], first[2]) == ("miss", 42)
    second = build("second")
    assert (second[0], second[2]) == ("hit", 42)
    assert second[1] == first[1]
    changed = build("changed", pxd_value=41)
    assert (changed[0], changed[2]) == ("miss", 43)
    assert changed[1] != first[1]
