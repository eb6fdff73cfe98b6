"""The link job's failures and checks, piece by piece: which compile stopped a full build,
how a killed shard is named, what makes a wheel's module a placeholder, what a smoke
environment installs, and which `kiln build` options a sharded build refuses."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.archives import file_member, valid_manifest, write_members
from wheelkiln.builder.wheel_checks import PLACEHOLDER_MARK, check_contents, requires_dist
from wheelkiln.errors import BuildError, RecipeError, UsageError
from wheelkiln.executors.base import process_status
from wheelkiln.recipe.model import Verify
from wheelkiln.run import exit_description, signal_name
from wheelkiln.shard.link import stopping_compile
from wheelkiln.wheels.facts import inspect_wheel

ROOT = Path(__file__).resolve().parents[2]
ENV = "/tmp/kh/envs/7349ce83b28948a7"

# A link job's pip -v log: a pybind11 flag probe fails on purpose, the build goes on,
# then a generated TU fails and setuptools stops (from a real run, shortened).
SETUPTOOLS_LOG = f"""\
  running build_ext
  gcc -fPIC -c flagcheck.cpp -o flagcheck.o -std=c++23
  cc1plus: error: unrecognized command-line option '-std=c++23'
  gcc -fPIC -c flagcheck.cpp -o flagcheck.o -std=c++17
  building 'demo_cpp._core' extension
  /w/kiln-bin/cc -O3 -fPIC -Icsrc/include -I{ENV}/include -c csrc/core/dispatch.cpp -o build/t/dispatch.o
  /w/kiln-bin/cc -O3 -fPIC -Icsrc/include -I{ENV}/include -c csrc/generated/core/core_t03.cpp -o build/t/core_t03.o
  In file included from csrc/generated/core/core_t03.cpp:2:
  csrc/generated/core/core_t03.cpp:48:15: error: expected primary-expression before 'return'
     48 | int broken( {{ return 0; }}
        |               ^~~~~~
  csrc/generated/core/core_t03.cpp:48:25: error: expected declaration before '}}' token
  error: command '/w/kiln-bin/cc' failed with exit code 1
  error: subprocess-exited-with-error
"""

# CMake + ninja: a failed compile is printed after FAILED:, with its absolute source.
NINJA_LOG = """\
[1/4] Building CXX object CMakeFiles/_m.dir/src/a.cpp.o
[2/4] Building CUDA object CMakeFiles/_m.dir/src/k.cu.o
FAILED: CMakeFiles/_m.dir/src/k.cu.o
/usr/bin/ccache /usr/local/cuda/bin/nvcc -DX=1 -O3 -x cu -c /w/cell-link/src/src/k.cu -o CMakeFiles/_m.dir/src/k.cu.o
/w/cell-link/src/src/k.cu(12): error: identifier "undefined_thing" is undefined
1 error detected in the compilation of "/w/cell-link/src/src/k.cu".
ninja: build stopped: subcommand failed.
"""


def test_the_compile_that_stopped_a_setuptools_build_is_named_not_the_probe() -> None:
    assert stopping_compile(SETUPTOOLS_LOG) == (
        "csrc/generated/core/core_t03.cpp",
        [
            "csrc/generated/core/core_t03.cpp:48:15: error: expected primary-expression before 'return'",
            "csrc/generated/core/core_t03.cpp:48:25: error: expected declaration before '}' token",
        ],
    )


def test_the_failed_ninja_compile_is_named_with_its_nvcc_diagnostic() -> None:
    assert stopping_compile(NINJA_LOG) == (
        "/w/cell-link/src/src/k.cu",
        ['/w/cell-link/src/src/k.cu(12): error: identifier "undefined_thing" is undefined'],
    )


def test_a_probe_failure_the_build_went_past_names_no_tu() -> None:
    # The build failed later without a compiler diagnostic (a link, say): the probe's
    # error was an answer and must not be blamed.
    log = SETUPTOOLS_LOG.split("  building")[0] + "  /usr/bin/ld: cannot find -lfoo\n"
    assert stopping_compile(log) is None


def test_a_cmake_probe_is_never_the_stopping_compile() -> None:
    log = (
        "/usr/bin/c++ -c /w/build/CMakeFiles/CMakeScratch/TryCompile-ab/src.cxx -o src.o\n"
        "/w/build/CMakeFiles/CMakeScratch/TryCompile-ab/src.cxx:1:10: fatal error: x.h: No such file\n"
    )
    assert stopping_compile(log) is None


@pytest.mark.parametrize(
    ("returncode", "name", "status"),
    [
        (-signal.SIGKILL, "SIGKILL", "killed by SIGKILL"),
        (-signal.SIGTERM, "SIGTERM", "killed by SIGTERM"),
        (0, None, "passed"),
        (5, None, "exit 5"),
    ],
)
def test_a_shard_process_status_names_its_signal(returncode: int, name: str | None, status: str) -> None:
    assert signal_name(returncode) == name
    assert process_status(returncode) == status
    assert exit_description(returncode) == (status if name else f"exit {returncode}")


ELF = b"\x7fELF\x02\x01\x01" + bytes(64)


def _wheel(tmp_path: Path, members: dict[str, bytes], requires: tuple[str, ...] = ()) -> Path:
    path = tmp_path / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    metadata = "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
        wheel.writestr("pkg-1.0.dist-info/METADATA", metadata)
    return path


def test_a_complete_wheel_passes_its_content_checks(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"pkg/_a.cpython-311-x86_64-linux-gnu.so": ELF, "pkg/__init__.py": b""})
    check_contents(inspect_wheel(wheel), Verify(extension_modules=("pkg/_a*.so",)))


def test_a_declared_module_missing_from_the_wheel_is_named(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"pkg/_a.cpython-311-x86_64-linux-gnu.so": ELF})
    with pytest.raises(BuildError) as caught:
        check_contents(inspect_wheel(wheel), Verify(extension_modules=("pkg/_a*.so", "pkg/_b*.so")))
    assert caught.value.message == (
        "pkg-1.0-cp311-cp311-linux_x86_64.whl: no extension module matches "
        "verify.extension_modules 'pkg/_b*.so'. Extension modules in the wheel: "
        "pkg/_a.cpython-311-x86_64-linux-gnu.so."
    )


@pytest.mark.parametrize(("data", "why"), [(b"", "empty"), (b"not an object", "starts with b'not '")])
def test_a_placeholder_module_fails_even_when_no_glob_names_it(tmp_path: Path, data: bytes, why: str) -> None:
    wheel = _wheel(tmp_path, {"pkg/_a.so": ELF, "pkg/_placeholder.cpython-311-x86_64-linux-gnu.so": data})
    with pytest.raises(BuildError) as caught:
        check_contents(inspect_wheel(wheel), Verify(extension_modules=("pkg/_a*.so",)))
    assert caught.value.message.startswith(
        f"pkg-1.0-cp311-cp311-linux_x86_64.whl: extension module "
        f"pkg/_placeholder.cpython-311-x86_64-linux-gnu.so is not a shared object ({why}): a placeholder"
    )


def test_requires_dist_is_read_from_the_wheel_metadata(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {}, requires=("packaging>=20", 'pytest; extra == "test"'))
    assert requires_dist(wheel) == ["packaging>=20", 'pytest; extra == "test"']


def _kiln(tmp_path: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {"KILN_HOME": str(tmp_path / "home"), "KILN_STATE_HOME": str(tmp_path / "state"),
           "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "wheelkiln", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, check=False, stdin=subprocess.DEVNULL)


REFUSED_WITH_SHARDS = {
    "--cache-dir": ["--cache-dir", "c"],
    "--recache": ["--recache"],
    "--no-wheel-cache": ["--no-wheel-cache"],
    "--cache none": ["--cache", "none"],
}


@pytest.mark.parametrize("option", sorted(REFUSED_WITH_SHARDS))
def test_build_refuses_an_option_that_does_not_apply_with_shards(tmp_path: Path, option: str) -> None:
    result = _kiln(tmp_path, "build", ROOT / "recipes" / "demo-cpp.toml", "--shards", "2",
                   *REFUSED_WITH_SHARDS[option])
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert f"error: {option} cannot be used with --shards: a sharded build gives each shard" in message
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "home").exists(), "refused before any work"


def test_build_refuses_filter_without_shards(tmp_path: Path) -> None:
    result = _kiln(tmp_path, "build", ROOT / "recipes" / "demo-cpp.toml", "--filter", "seat")
    assert result.returncode == 2, result.stderr
    assert "error: --filter applies only with --shards N." in " ".join(result.stderr.split())


RECIPE_WITH_VERIFY = """\
name = "pkg"
[source]
path = "."
[matrix]
python = ["3.11"]
[verify]
import = "pkg"
"""


@pytest.mark.parametrize(
    ("requires", "problem"),
    [
        ('"pytest"', "key 'verify.requires': expected an array, got a string"),
        ('["--index-url=http://evil"]', "key 'verify.requires[0]': must not start with '-'"),
        ("[3]", "key 'verify.requires[0]': expected a string, got an integer"),
    ],
)
def test_verify_requires_is_a_checked_list_of_requirements(
    tmp_path: Path, requires: str, problem: str
) -> None:
    from wheelkiln.errors import RecipeError
    from wheelkiln.recipe.load import load_recipe

    path = tmp_path / "pkg.toml"
    path.write_text(RECIPE_WITH_VERIFY + f"requires = {requires}\n")
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    assert caught.value.message.startswith(f"{path}: {problem}")
    path.write_text(RECIPE_WITH_VERIFY + 'requires = ["pytest>=8", "dep @ file:///w/dep.whl"]\n')
    assert load_recipe(path).recipe.verify.requires == ("pytest>=8", "dep @ file:///w/dep.whl")


def test_a_torch_cell_smoke_tests_against_its_own_torch() -> None:
    from wheelkiln.builder.wheel_checks import cell_requirements
    from wheelkiln.cells import NO_CUDA, NO_TORCH, Cell

    assert cell_requirements(Cell("pkg", "3.11", "13.0", "2.14.1", "linux-x86_64")) == ["torch==2.14.1"]
    assert cell_requirements(Cell("pkg", "3.11", NO_CUDA, NO_TORCH, "linux-x86_64")) == []


def test_smoke_with_nothing_to_run_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from wheelkiln.builder.wheel_checks import smoke_test
    from wheelkiln.cells import NO_CUDA, NO_TORCH, Cell
    from wheelkiln.recipe.load import load_recipe

    path = tmp_path / "pkg.toml"
    path.write_text(RECIPE_WITH_VERIFY.replace('import = "pkg"\n', 'extension_modules = ["pkg/*.so"]\n'))
    wheel = _wheel(tmp_path, {"pkg/_a.so": ELF})
    result = smoke_test(wheel, load_recipe(path), Cell("pkg", "3.11", NO_CUDA, NO_TORCH, "linux-x86_64"))
    reason = f"{path} has neither [verify] smoke nor [verify] import"
    assert result == {"ran": False, "reason": reason}
    assert f"--smoke: nothing to run: {reason}." in " ".join(capsys.readouterr().err.split())


def test_a_deferred_link_placeholder_fails_though_it_is_a_shared_object(tmp_path: Path) -> None:
    # What a shard links for a deferred shared library: a real ELF file carrying the mark.
    placeholder = ELF + b"\0" * 4096 + PLACEHOLDER_MARK + b"\0" * 64
    wheel = _wheel(tmp_path, {"pkg/_a.so": ELF, "pkg/_b.cpython-311-x86_64-linux-gnu.so": placeholder})
    with pytest.raises(BuildError) as caught:
        check_contents(inspect_wheel(wheel), Verify(extension_modules=("pkg/_a*.so",)))
    assert caught.value.message == (
        "pkg-1.0-cp311-cp311-linux_x86_64.whl: extension module "
        "pkg/_b.cpython-311-x86_64-linux-gnu.so is a shard job's placeholder (an empty shared "
        "object standing in for a link the shard left to the link job)."
    )


# --------------------------------------------------------------------------- shard inputs


def _demo_cell() -> tuple[Any, Any]:
    from wheelkiln.matrix.cells import select_cell
    from wheelkiln.recipe.load import find_recipe

    loaded = find_recipe(str(ROOT / "recipes" / "demo-cpp.toml"))
    return loaded, select_cell(loaded.recipe, None)


def _shard_input(folder: Path, cell_id: str, index: int, count: int, *cache: str) -> Path:
    manifest = {**valid_manifest(cell_id, index, count), "toolchain": TOOLCHAIN}
    return write_members(
        folder / f"{cell_id}-shard-{index}-of-{count}.tar.gz",
        [file_member("manifest.json", json.dumps(manifest).encode()),
         *(file_member(name, name.encode()) for name in cache)],
    )


TOOLCHAIN = {"compilers": {"gcc": "12"}, "cache": {"ccache": "4"}, "arch_list": [], "build_env": {}}


def test_n_from_a_file_name_is_capped_as_count_is(tmp_path: Path) -> None:
    from wheelkiln.shard.link import _shard_archives

    _, cell = _demo_cell()
    folder = tmp_path / "archives"
    huge = _shard_input(folder, cell.id, 0, 1)
    huge = huge.rename(folder / f"{cell.id}-shard-0-of-1000000000000.tar.gz")
    with pytest.raises(UsageError) as caught:  # range(N) would fill the memory
        _shard_archives(folder, cell, None)
    assert caught.value.message == f"{huge}: names more than 256 shards, the most kiln builds."
    huge.rename(folder / f"{cell.id}-shard-0-of-256.tar.gz")
    assert _shard_archives(folder, cell, None)[0] == 256


def test_a_shard_input_under_a_path_with_a_control_character_is_refused(tmp_path: Path) -> None:
    from wheelkiln.shard.link import _shard_archives

    _, cell = _demo_cell()
    folder = tmp_path / "archives" / "x\n::error title=pwned::y\x1b[2J"
    _shard_input(folder, cell.id, 0, 1)
    with pytest.raises(UsageError) as caught:
        _shard_archives(tmp_path / "archives", cell, None)
    assert caught.value.message == (
        f"{tmp_path}/archives/x\\n::error title=pwned::y\\x1b[2J/{cell.id}-shard-0-of-1.tar.gz: a "
        "shard input whose path holds a control character (a newline, a terminal escape); "
        "nothing was read."
    )


def test_a_shard_whose_files_clash_with_an_earlier_shards_is_not_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before anything of it moves; the link job goes on with the other shards."""
    from wheelkiln.settings import resolve_build_settings
    from wheelkiln.shard import link

    loaded, cell = _demo_cell()
    folder = tmp_path / "archives"
    _shard_input(folder, cell.id, 0, 3, "cache/a/b")
    _shard_input(folder, cell.id, 1, 3, "cache/c", "cache/a")
    _shard_input(folder, cell.id, 2, 3, "cache/d")

    class Stop(Exception):
        pass

    seen: dict[str, Any] = {}

    def build_cell(loaded: object, cell: object, options: Any, toolchain: object) -> Any:
        seen["cache_dir"] = options.cache_dir
        seen["cache"] = sorted(p.relative_to(options.cache_dir).as_posix()
                               for p in options.cache_dir.rglob("*"))
        return SimpleNamespace(exit_code=1, stats=None)

    def failure(outcome: object, problems: list[str]) -> Exception:
        seen["problems"] = problems
        raise Stop

    monkeypatch.setattr(link, "job_toolchain", lambda *_: SimpleNamespace(versions={}))
    monkeypatch.setattr(link, "toolchain_fingerprint", lambda *_: TOOLCHAIN)
    monkeypatch.setattr(link, "build_cell", build_cell)
    monkeypatch.setattr(link, "link_build_failure", failure)
    options = resolve_build_settings(loaded, workdir=tmp_path / "work")
    with pytest.raises(Stop):
        link.run_link(loaded, cell, folder, tmp_path / "out", options)
    assert seen["cache"] == ["a", "a/b", "d"]
    assert seen["problems"] == [
        f"shard 2/3 was not merged: {folder / f'{cell.id}-shard-1-of-3.tar.gz'}, member "
        f"'cache/a': an earlier archive left a directory at {seen['cache_dir'] / 'a'}, where "
        "this one needs a file; the archive was rejected and nothing was extracted from it "
        "(what is there was kept)"
    ]


def test_a_remote_url_kiln_cannot_read_is_refused_naming_where_it_was_given(tmp_path: Path) -> None:
    from wheelkiln.recipe.load import find_recipe
    from wheelkiln.settings import resolve_build_settings

    loaded, _ = _demo_cell()
    with pytest.raises(UsageError) as caught:
        resolve_build_settings(loaded, remote="file:/x redis://:pw@[oops:6379", workdir=tmp_path)
    assert caught.value.message == (
        "--remote: 'redis://***@[oops:6379' is not a storage URL (Invalid IPv6 URL)."
    )
    recipe = tmp_path / "r.toml"
    recipe.write_text('name = "pkg"\n[source]\npath = "."\n[matrix]\npython = ["3.11"]\n'
                      '[cache]\nremote = "http://[::1"\n')
    bad = find_recipe(str(recipe))
    with pytest.raises(RecipeError) as refused:
        resolve_build_settings(bad, workdir=tmp_path)
    assert refused.value.message == (
        f"{recipe}: key 'cache.remote': 'http://[::1' is not a storage URL (Invalid IPv6 URL)."
    )
    assert resolve_build_settings(bad, remote="redis://[::1]:6379", workdir=tmp_path).remote == (
        "redis://[::1]:6379")
