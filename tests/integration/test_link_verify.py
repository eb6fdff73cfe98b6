"""The sharded wheel is a deliverable: the link job builds it, names a compile error as a
build failure, checks it as an unsharded build's wheel is checked, and smoke-tests it in
an environment with its runtime dependencies. Also: a killed shard is named with its
signal, and a wheel served from the wheel cache is still smoke-tested.

A small setuptools C package written per test keeps these fast; its runtime dependency
and its test-only requirement are pure-Python wheels made here, installed by file URL,
so nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from tests.conftest import Kiln
from wheelkiln.builder.toolchain import find_nvcc, toolkit_home

pytestmark = pytest.mark.compile

CELL = "kiln-tiny-py3.11-linux-x86_64"
WHEEL = "kiln_tiny-1.0-cp311-cp311-linux_x86_64.whl"

# Three TUs, one extension module: answer() = 40 + 1 + 1 when every TU is linked.
SOURCES = {
    "csrc/module.c": """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
int part_b(void);
int part_c(void);
static PyObject *answer(PyObject *self, PyObject *args) {
    return PyLong_FromLong(40 + part_b() + part_c());
}
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, "the answer"}, {0}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", 0, -1, methods};
PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
""",
    "csrc/b.c": "int part_b(void) { return 1; }\n",
    "csrc/c.c": "int part_c(void) { return 1; }\n",
}


def pure_wheel(directory: Path, name: str, body: str) -> Path:
    """A pure-Python wheel of one module, written by hand (no build, no network)."""
    path = directory / f"{name}-1.0-py3-none-any.whl"
    files = {
        f"{name}.py": body,
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{member},,\n" for member in files) + f"{name}-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
        wheel.writestr(f"{name}-1.0.dist-info/RECORD", record)
    return path


def tiny_package(
    root: Path, *, dependencies: tuple[str, ...] = (), init: str = "from ._native import answer\n"
) -> Path:
    tree = root / "kiln-tiny"
    for relative, text in {
        **SOURCES,
        # The same build requirements as demo-cpp: the session's build environment serves.
        "pyproject.toml": '[build-system]\nrequires = ["setuptools>=64", "pybind11>=2.12"]\n'
        'build-backend = "setuptools.build_meta"\n\n[project]\nname = "kiln-tiny"\n'
        f'version = "1.0"\ndependencies = {json.dumps(list(dependencies))}\n',
        "setup.py": "from setuptools import Extension, setup\n"
        "setup(package_dir={'': 'src'}, packages=['kiln_tiny'], ext_modules=[Extension("
        "'kiln_tiny._native', ['csrc/module.c', 'csrc/b.c', 'csrc/c.c'])])\n",
        "src/kiln_tiny/__init__.py": init,
    }.items():
        path = tree / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tree


def tiny_recipe(tree: Path, directory: Path, *, verify: str) -> Path:
    path = directory / "kiln-tiny.toml"
    path.write_text(
        f'name = "kiln-tiny"\n[source]\npath = "{tree}"\n[build]\nfrontend = "pip"\n'
        '[matrix]\npython = ["3.11"]\nplatforms = ["linux-x86_64"]\nlinks_torch = false\n'
        '[sharding]\ncount = 3\npartition = "seat"\nplatforms = ["linux-x86_64"]\n'
        f"[verify]\n{verify}\n"
    )
    return path


def _shard_all(kiln: Kiln, recipe: Path, tmp_path: Path, count: int) -> Path:
    shards = tmp_path / "shards"
    for index in range(count):
        kiln("shard", recipe, "--index", str(index), "--count", str(count), "--out", shards,
             "--workdir", tmp_path / "work")
    return shards


def test_compile_error_in_the_link_build_is_a_build_failure_naming_the_tu(
    kiln: Kiln, tmp_path: Path
) -> None:
    tree = tiny_package(tmp_path)
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    shards = _shard_all(kiln, recipe, tmp_path, 1)
    # The source changes between the shard jobs and the link job.
    (tree / "csrc" / "c.c").write_text("int part_c(void) { return 1 }\n")
    result = kiln("link", recipe, "--archives", shards, "--out", tmp_path / "dist",
                  "--workdir", tmp_path / "work", check=False)
    message = " ".join(result.stderr.split())
    assert result.returncode == 4, result.stderr
    assert f"error: The link job's full build of {CELL} failed (exit 1) compiling csrc/c.c:" in message
    # gcc quotes with ' or with ‘’, depending on the locale
    assert re.search(r"csrc/c\.c:1:28: error: expected .;. before .}. token", message), message
    assert "No wheel was made." in message
    assert "gate" not in message and "The wheel was kept" not in message
    assert "Traceback" not in result.stderr
    record = json.loads((tmp_path / "dist" / f"{CELL}.link.json").read_text())
    assert record["wheel"] is None and record["exit_code"] == 1
    assert record["link"]["build_failure"].startswith(f"The link job's full build of {CELL} failed")


def test_link_wheel_missing_a_declared_module_fails_verification(kiln: Kiln, tmp_path: Path) -> None:
    tree = tiny_package(tmp_path)
    recipe = tiny_recipe(
        tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so", "kiln_tiny/_extra*.so"]'
    )
    result = kiln("build", recipe, "--shards", "2", "--out", tmp_path / "dist",
                  "--workdir", tmp_path / "work", check=False)
    message = " ".join(result.stderr.split())
    assert result.returncode == 4, result.stderr
    assert (
        f"error: {WHEEL}: no extension module matches verify.extension_modules 'kiln_tiny/_extra*.so'. "
        "Extension modules in the wheel: kiln_tiny/_native.cpython-311-x86_64-linux-gnu.so." in message
    )
    assert f"was not copied to {tmp_path / 'dist'}" in message
    assert not list((tmp_path / "dist").glob("*.whl")), "a wheel failing [verify] is not published"
    record = json.loads((tmp_path / "dist" / f"{CELL}.link.json").read_text())
    assert record["verify"]["passed"] is False
    assert Path(record["wheel"]["path"]).is_file(), "the wheel is kept in the link job's directory"
    assert record["link"]["gate"]["passed"], "the handoff itself was fine"


def test_a_wheel_failing_its_checks_does_not_hide_a_failed_link_gate(kiln: Kiln, tmp_path: Path) -> None:
    # The wheel's check stops the link job first; the handover's failure is still said.
    tree = tiny_package(tmp_path)
    recipe = tiny_recipe(
        tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so", "kiln_tiny/_extra*.so"]'
    )
    kiln("shard", recipe, "--index", "0", "--count", "2", "--out", tmp_path / "shards",
         "--workdir", tmp_path / "work")
    result = kiln("link", recipe, "--archives", tmp_path / "shards", "--count", "2",
                  "--out", tmp_path / "dist", "--workdir", tmp_path / "work", check=False)
    message = " ".join(result.stderr.split())
    assert result.returncode == 4, result.stderr
    assert "no extension module matches verify.extension_modules 'kiln_tiny/_extra*.so'" in message
    assert "The link gate failed too: - shard 2/2 is missing" in message
    record = json.loads((tmp_path / "dist" / f"{CELL}.link.json").read_text())
    assert record["verify"]["passed"] is False and record["link"]["gate"]["passed"] is False


def test_smoke_runs_with_runtime_and_test_requirements_after_link_build_and_cache_hit(
    kiln: Kiln, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    runtime = pure_wheel(wheels, "kiln_runtime_dep", "OFFSET = 0\n")
    test_only = pure_wheel(wheels, "kiln_test_dep", "EXPECTED = 42\n")
    # __init__ imports a runtime dependency that is no build requirement.
    tree = tiny_package(
        tmp_path,
        dependencies=(f"kiln_runtime_dep @ {runtime.as_uri()}",),
        init="import kiln_runtime_dep\nfrom ._native import answer as _answer\n"
        "def answer():\n    return _answer() + kiln_runtime_dep.OFFSET\n",
    )
    smoke = (
        "import os, kiln_tiny, kiln_test_dep; "
        "assert os.environ.get('KILN_TEST_BREAK_SMOKE') != '1', 'broken on purpose'; "
        "assert kiln_tiny.answer() == kiln_test_dep.EXPECTED, kiln_tiny.answer()"
    )
    recipe = tiny_recipe(
        tree,
        tmp_path,
        verify=f'import = "kiln_tiny"\nextension_modules = ["kiln_tiny/_native*.so"]\n'
        f"smoke = {json.dumps(smoke)}\nrequires = [{json.dumps('kiln_test_dep @ ' + test_only.as_uri())}]",
    )
    # The wheel's Requires-Dist first, spelled as its setuptools writes the name (65 wrote
    # kiln-runtime-dep, newer ones keep kiln_runtime_dep): compared by canonical name.
    requires = [f"kiln-runtime-dep @ {runtime.as_uri()}", f"kiln-test-dep @ {test_only.as_uri()}"]

    def canonical(requirements: list[str]) -> list[str]:
        return [re.sub(r"^[A-Za-z0-9._-]+", lambda m: canonicalize_name(m[0]), r) for r in requirements]

    # The link job of a sharded build (the deliverable), smoke-tested.
    report = kiln.json("build", recipe, "--shards", "2", "--smoke", "--out", tmp_path / "sharded",
                       "--workdir", tmp_path / "work")
    link_smoke = report["link"]["verify"]["smoke"]
    assert link_smoke["ran"] and link_smoke["passed"]
    assert canonical(link_smoke["requires"]) == requires

    # An unsharded build, then the same inputs served from the wheel cache: smoke runs both times.
    def build(out: str, **env: str) -> subprocess.CompletedProcess[str]:
        return kiln("build", recipe, "--smoke", "--json", "--out", tmp_path / out,
                    "--workdir", tmp_path / "work", "--cache-dir", tmp_path / "ccache",
                    env=env, check=False)

    cold = build("cold")
    assert cold.returncode == 0, cold.stderr
    cold_record = json.loads(cold.stdout)
    assert cold_record["verify"]["smoke"]["ran"] and "wheel_cache" not in cold_record
    hit = build("hit")
    assert hit.returncode == 0, hit.stderr
    hit_record = json.loads(hit.stdout)
    assert hit_record["wheel_cache"]["hit"]
    assert hit_record["verify"]["smoke"]["ran"] and hit_record["verify"]["smoke"]["passed"]
    assert hit_record["verify"]["smoke"]["environment"] == link_smoke["environment"], "one cached env"
    # Proof that the smoke code really runs on a wheel-cache hit: break it, and the hit fails.
    broken = build("broken", KILN_TEST_BREAK_SMOKE="1")
    assert broken.returncode == 4, broken.stderr
    assert f"error: The smoke test of {WHEEL} failed" in broken.stderr
    assert "AssertionError: broken on purpose" in broken.stderr
    assert "the wheel cache" in broken.stderr, "it was served from the wheel cache"


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_a_killed_shard_is_named_with_its_signal(kiln: Kiln, tmp_path: Path) -> None:
    tree = tiny_package(tmp_path)
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    argv = [sys.executable, "-m", "wheelkiln", "build", str(recipe), "--shards", "3", "--json",
            "--out", str(tmp_path / "dist"), "--workdir", str(tmp_path / "work")]
    proc = subprocess.Popen(argv, env=kiln.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    shard_process = None
    deadline = time.monotonic() + 120
    while shard_process is None and proc.poll() is None and time.monotonic() < deadline:
        for pid in _descendants(proc.pid):
            words = _cmdline(pid)
            if "shard" in words and words[words.index("--index") + 1 : words.index("--index") + 2] == ["1"]:
                shard_process = pid
                os.kill(pid, signal.SIGKILL)
                break
        time.sleep(0.02)
    stdout, stderr = proc.communicate(timeout=600)
    # The killed shard's own build ran on as an orphan; end it (only what this test started).
    for pid in [p for p in Path("/proc").iterdir() if p.name.isdigit()]:
        if any(str(tmp_path) in word for word in _cmdline(int(pid.name))):
            with contextlib.suppress(OSError):
                os.kill(int(pid.name), signal.SIGKILL)
    assert shard_process is not None, "shard 2/3 was never seen running"
    message = " ".join(stderr.split())
    assert proc.returncode == 5, stderr
    assert "shard 2/3 was killed by SIGKILL" in message
    assert "- shard 2/3: killed by SIGKILL after" in message
    report: dict[str, Any] = json.loads(stdout)
    killed = report["shards"][1]
    assert killed["shard"] == {"index": 1, "count": 3}
    process = {key: killed["process"][key] for key in ("exit_code", "signal", "status")}
    assert process == {"exit_code": -9, "signal": "SIGKILL", "status": "killed by SIGKILL"}
    assert [s["process"]["status"] for s in report["shards"]] == ["passed", "killed by SIGKILL", "passed"]
    assert "shard 2/3 is missing" in " ".join(report["gate"]["problems"])


def test_no_link_job_runs_when_no_shard_passed(kiln: Kiln, tmp_path: Path) -> None:
    # Every shard fails the same way (the package's own build breaks): a link job would
    # only build the whole package again, unsharded, and fail its gate all the same.
    tree = tiny_package(tmp_path)
    (tree / "setup.py").write_text("raise SystemExit('kiln-tiny is broken on purpose')\n")
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    result = kiln("build", recipe, "--shards", "2", "--json", "--out", tmp_path / "dist",
                  "--workdir", tmp_path / "work", check=False)
    message = " ".join(result.stderr.split())
    # Exit 4: the package's own build failed, as it would unsharded; not a gate verdict.
    assert result.returncode == 4, result.stderr
    assert "No shard of kiln-tiny-py3.11-linux-x86_64 passed, so its link job did not run" in message
    for label in ("1/2", "2/2"):  # the build's own failure, not a launcher to check
        assert (f"- shard {label}: its build failed: the build failed (exit 1) before it compiled "
                "any of its TUs; its last lines: kiln-tiny is broken on purpose") in message
    assert "builds it in one job" in message
    assert "Linking" not in result.stderr and not (tmp_path / "dist").exists()
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["link"] is None
    assert [s["process"]["status"] for s in report["shards"]] == ["exit 4", "exit 4"]
    assert report["gate"]["passed"] is False
    assert report["gate"]["problems"][-1] == (
        "link job: No shard of kiln-tiny-py3.11-linux-x86_64 passed, so its link job did not run")


def test_a_package_that_excludes_the_cells_python_is_refused_before_any_build(
    kiln: Kiln, tmp_path: Path
) -> None:
    # pywavelets 1.10 (requires-python >=3.12) on 3.11: its environment was made and meson
    # run, then meson-python refused; sharded, each shard's gate found its slice unbuilt.
    tree = tiny_package(tmp_path)
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'requires-python = ">=3.99"\n')
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    version = ".".join(map(str, sys.version_info[:3]))
    for shards in ((), ("--shards", "2")):
        result = kiln("build", recipe, *shards, "--out", tmp_path / "dist",
                      "--workdir", tmp_path / "work", check=False)
        message = " ".join(result.stderr.split())
        assert result.returncode == 4, result.stderr
        assert (f"error: The package supports Python >=3.99 ({pyproject}: [project] "
                "requires-python); cell kiln-tiny-py3.11-linux-x86_64 builds with Python "
                f"{version}, so no wheel can be made for it.") in message
        assert "(--cell python=X.Y), or take 3.11 out of the recipe's [matrix] python" in message
        assert "Traceback" not in result.stderr and "Sharding" not in result.stderr
        # Refused before its tree was copied, its environment made or a shard started.
        assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())
        assert not (tmp_path / "dist").exists()


def test_a_package_that_records_its_build_directory_ships_the_same_wheel_sharded(
    kiln: Kiln, tmp_path: Path
) -> None:
    # contourpy's _build_config.py names its build and source directories: kiln refused
    # its wheel, unsharded and sharded, and the link job (in a directory of its own) would
    # have recorded another one than the unsharded build.
    tree = tiny_package(tmp_path)
    setup = tree / "setup.py"
    setup.write_text(
        "import os, pathlib\n"
        "pathlib.Path('src/kiln_tiny/_where.py').write_text(f'BUILT_IN = {os.getcwd()!r}\\n')\n"
        + setup.read_text()
    )
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    work = tmp_path / "work"
    one = kiln("build", recipe, "--json", "--out", tmp_path / "one", "--workdir", work,
               "--no-wheel-cache")
    sharded = kiln("build", recipe, "--shards", "2", "--json", "--out", tmp_path / "two",
                   "--workdir", work)
    built_in = os.path.realpath(work / "kiln-tiny-py3.11-linux-x86_64" / "src")
    records = [json.loads(one.stdout), json.loads(sharded.stdout)["link"]]
    for result, record in zip((one, sharded), records, strict=True):
        with zipfile.ZipFile(record["wheel"]["path"]) as wheel:
            assert wheel.read("kiln_tiny/_where.py").decode() == f"BUILT_IN = {built_in!r}\n"
        assert record["verify"]["build_directory_named_in"] == ["kiln_tiny/_where.py"]
        assert "note: kiln_tiny/_where.py record(s) where the package was built" in " ".join(
            result.stderr.split()
        )
    assert records[1]["cache"]["misses"] == 0
    with zipfile.ZipFile(records[1]["wheel"]["path"]) as wheel:
        wheel.extractall(tmp_path / "site")
    answer = subprocess.run(
        [sys.executable, "-c", "from kiln_tiny import answer; print(answer())"],
        cwd=tmp_path / "site", capture_output=True, text=True, check=False,
    )
    assert answer.stdout.strip() == "42", answer.stderr


def test_a_sharded_lto_build_says_the_link_job_generates_the_code(
    kiln: Kiln, tmp_path: Path
) -> None:
    # rapidfuzz compiles every TU with -flto: its link job took 172 s with 10 hits and no
    # miss, and nothing said why.
    tree = tiny_package(tmp_path)
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    recipe.write_text(recipe.read_text().replace('frontend = "pip"\n',
                                                 'frontend = "pip"\nenv = { CFLAGS = "-flto" }\n'))
    result = kiln("build", recipe, "--shards", "3", "--json", "--out", tmp_path / "dist",
                  "--workdir", tmp_path / "work")
    link = json.loads(result.stdout)["link"]
    assert link["link"]["lto"] == {"tus": 3, "lto_tus": 3}
    assert (link["cache"]["hits"], link["cache"]["misses"]) == (3, 0)
    assert (f"LTO: 3 of the 3 TUs the shards compiled are -flto objects, whose machine code "
            f"the link job generates when it links them (its {link['wall_seconds']:.1f} s)"
            ) in " ".join(result.stderr.split())
    with zipfile.ZipFile(link["wheel"]["path"]) as wheel:
        wheel.extractall(tmp_path / "site")
    answer = subprocess.run(
        [sys.executable, "-c", "from kiln_tiny import answer; print(answer())"],
        cwd=tmp_path / "site", capture_output=True, text=True, check=False,
    )
    assert answer.stdout.strip() == "42", answer.stderr
    # What the cache handed the link job: GCC's LTO objects, code still to be generated.
    objects = sorted((tmp_path / "work" / "kiln-tiny-py3.11-linux-x86_64" / "src").rglob("*.o"))
    assert len(objects) == 3 and all(b".gnu.lto_" in o.read_bytes() for o in objects), objects


@pytest.mark.cuda
def test_a_package_that_finds_the_toolkit_from_nvcc_on_path_finds_it(
    kiln: Kiln, tmp_path: Path
) -> None:
    # pycuda's CUDA_ROOT defaults to dirname(nvcc)/.. for the nvcc on PATH, which is kiln's
    # front: it took $KILN_HOME/bin for the toolkit ("cuda.h: No such file or directory"),
    # unsharded and in every shard, where a build without kiln finds the toolkit.
    tree = tiny_package(tmp_path)
    (tree / "csrc" / "c.c").write_text("#include <cuda.h>\nint part_c(void) { return CUDA_VERSION; }\n")
    (tree / "setup.py").write_text(
        "import os, shutil\nfrom setuptools import Extension, setup\n"
        "root = os.path.realpath(os.path.join(os.path.dirname(shutil.which('nvcc')), '..'))\n"
        "setup(package_dir={'': 'src'}, packages=['kiln_tiny'], ext_modules=[Extension("
        "'kiln_tiny._native', ['csrc/module.c', 'csrc/b.c', 'csrc/c.c'], "
        "include_dirs=[os.path.join(root, 'include')])])\n"
    )
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    nvcc = find_nvcc()
    assert nvcc is not None
    header = toolkit_home(nvcc) / "include" / "cuda.h"
    version = re.search(r"#define CUDA_VERSION (\d+)", header.read_text())
    assert version is not None
    report = kiln.json("build", recipe, "--shards", "2", "--out", tmp_path / "dist",
                       "--workdir", tmp_path / "work")
    link = report["link"]
    assert link["cache"]["misses"] == 0
    with zipfile.ZipFile(link["wheel"]["path"]) as wheel:
        wheel.extractall(tmp_path / "site")
    answer = subprocess.run(
        [sys.executable, "-c", "from kiln_tiny import answer; print(answer())"],
        cwd=tmp_path / "site", capture_output=True, text=True, check=False,
    )
    assert answer.stdout.strip() == str(41 + int(version[1])), answer.stderr
