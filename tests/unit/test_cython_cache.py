"""The Cython cache's pieces that need no Cython: path keys, command lines, depfiles,
manifests (a changed dependency misses), the log's counters, the shard's stub decision,
and the fronts finding the real ``cython`` past themselves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import install_script
from wheelkiln import cython_front
from wheelkiln.cache import cython as store
from wheelkiln.per_tu import CYTHON_FRONT_MARK
from wheelkiln.shard import partition


def test_path_keys_are_relative_to_root_build_and_cython() -> None:
    paths = store.PathKeys("/w/job/src", "/w/job/build", "/env/Cython")
    assert paths.key("../src/pkg/a.pyx", "/w/job/build") == "<root>/pkg/a.pyx"
    assert paths.key("x.pyx.c", "/w/job/build/m.so.p") == "<build>/m.so.p/x.pyx.c"
    assert paths.key("/env/Cython/Includes/libc/math.pxd", "/") == "<cython>/Includes/libc/math.pxd"
    assert paths.key("/usr/include/x.pxd", "/") == "/usr/include/x.pxd"
    assert paths.path("<root>/pkg/a.pyx") == "/w/job/src/pkg/a.pyx"
    other = store.PathKeys("/elsewhere/src", "/elsewhere/build", None)
    assert other.path(paths.key("/w/job/src/pkg/a.pyx", "/")) == "/elsewhere/src/pkg/a.pyx"
    text = "-I/w/job/src/inc -I/w/job/build"
    assert paths.tokenize(text) == "-I<root>/inc -I<build>"
    assert other.detokenize(paths.tokenize(text)) == "-I/elsewhere/src/inc -I/elsewhere/build"


def test_paths_in_the_jobs_temp_directory_are_keyed_by_it() -> None:
    # A backend's copy of the tree in a TemporaryDirectory (frozenlist's), named the same
    # in every job by the site hook: the key holds no workdir.
    paths = store.PathKeys("/w/job/src", "/w/job/build", None, (), "/w/job/tmp")
    copy = "/w/job/tmp/.tmp-pkg-pep517-ab12cd34/src"
    assert paths.key("pkg/_m.pyx", copy) == "<tmp>/.tmp-pkg-pep517-ab12cd34/src/pkg/_m.pyx"
    other = store.PathKeys("/o/job/src", "/o/job/build", None, (), "/o/job/tmp")
    assert other.path(paths.key("pkg/_m.pyx", copy)) == "/o/job/tmp/.tmp-pkg-pep517-ab12cd34/src/pkg/_m.pyx"
    assert paths.tokenize(f"-I{copy}/inc") == "-I<tmp>/.tmp-pkg-pep517-ab12cd34/src/inc"


def test_the_site_hook_names_temp_files_the_same_in_every_job(tmp_path: Path) -> None:
    """Each temp name is the first free one of a fixed sequence, whatever other temp
    files the process made before; only where the build's TMPDIR is the job's own."""
    from wheelkiln.builder.toolchain import cython_fronts

    _, site_hook = cython_fronts(tmp_path / "scripts")
    code = (
        "import os, sys, tempfile\n"
        "names = {p: os.path.basename(tempfile.mkdtemp(prefix=p)) for p in sys.argv[1:]}\n"
        "print(' '.join(names[p] for p in sorted(names)))\n"
    )

    def names(job: str, prefixes: list[str], own: bool = True) -> str:
        job_tmp = tmp_path / job / "tmp"
        job_tmp.mkdir(parents=True)
        env = {**os.environ, "PYTHONPATH": site_hook, "TMPDIR": str(job_tmp)}
        env.pop("KILN_JOB_TMP", None)
        if own:
            env["KILN_JOB_TMP"] = str(job_tmp)
        done = subprocess.run([sys.executable, "-c", code, *prefixes], env=env, check=True,
                              capture_output=True, text=True)  # fmt: skip
        return done.stdout.strip()

    job_tmp = tmp_path / "m" / "tmp"
    job_tmp.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": site_hook, "TMPDIR": str(job_tmp), "KILN_JOB_TMP": str(job_tmp)}
    twice = subprocess.run([sys.executable, "-W", "ignore", "-c",
                            "import tempfile; print(tempfile.mktemp() != tempfile.mktemp())"],
                           env=env, check=True, capture_output=True, text=True)  # fmt: skip
    assert twice.stdout.strip() == "True", "mktemp creates nothing: it keeps random names"
    first = names("a", ["x-", "y-"])
    assert names("b", ["y-", "x-", "z-"]).startswith(first.split()[0])  # order: no matter
    assert names("c", ["x-", "y-"]) == first
    assert names("d", ["x-", "y-"], own=False) != names("e", ["x-", "y-"], own=False)


def test_multiprocessing_sockets_leave_a_deep_job_temp_directory(tmp_path: Path) -> None:
    """An AF_UNIX path holds at most 108 bytes: a Manager's listener (and the
    forkserver's) below a deep job directory could not be bound; it goes to /tmp."""
    from wheelkiln.builder.toolchain import cython_fronts

    _, site_hook = cython_fronts(tmp_path / "scripts")
    job_tmp = tmp_path / ("deep" * 30) / "tmp"
    job_tmp.mkdir(parents=True)
    code = (
        "from multiprocessing.connection import Listener\n"
        "with Listener(family='AF_UNIX') as listener:\n    print(listener.address)\n"
    )
    env = {**os.environ, "PYTHONPATH": site_hook, "TMPDIR": str(job_tmp), "KILN_JOB_TMP": str(job_tmp)}
    env.pop("KILN_OUTER_TMPDIR", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("/tmp/pymp-"), done.stdout


def test_paths_in_a_build_environment_are_keyed_by_its_key_not_the_workdir() -> None:
    # Cython's own package lies inside the environment too: the longer prefix wins.
    envs = ["/w/.envs", "/home/a/envs"]  # the view, and the environments themselves
    paths = store.PathKeys("/w/job/src", "/w/job/build", "/w/.envs/k1/Cython", envs)
    site = "lib/python3.11/site-packages"
    key = f"<envs>/k1/{site}/numpy/__init__.pxd"
    assert paths.key(f"/w/.envs/k1/{site}/numpy/__init__.pxd", "/") == key
    assert paths.key(f"/home/a/envs/k1/{site}/numpy/__init__.pxd", "/") == key  # sys.path
    assert paths.key("/w/.envs/k1/Cython/Includes/libc/math.pxd", "/") == (
        "<cython>/Includes/libc/math.pxd")  # fmt: skip
    assert paths.tokenize(f"-I/w/.envs/k1/{site}/numpy/core/include") == (
        f"-I<envs>/k1/{site}/numpy/core/include")  # fmt: skip
    other = store.PathKeys("/o/job/src", "/o/job/build", None, ["/deeper/o/.envs", "/b/envs"])
    assert other.path(key) == f"/deeper/o/.envs/k1/{site}/numpy/__init__.pxd"


def test_command_line_parsing_and_key_arguments() -> None:
    call = cython_front.CythonCall(["-M", "--fast-fail", "-3", "/w/src/a.pyx", "-o", "a.pyx.c"])
    assert (call.sources, call.output, call.depfile, call.cacheable) == (
        ["/w/src/a.pyx"],
        "a.pyx.c",
        True,
        True,
    )
    paths = store.PathKeys("/w/src", "/w/build", None)
    assert call.key_arguments(paths) == ["--fast-fail", "-3"]
    cplus = cython_front.CythonCall(
        ["--cplus", "-X", "boundscheck=False", "b.pyx", "-I", "/w/src/inc"]
    )
    assert cplus.output == "b.cpp" and cplus.cacheable
    assert cplus.key_arguments(paths) == ["--cplus", "-X", "boundscheck=False", "-I", "<root>/inc"]
    assert not cython_front.CythonCall(["-a", "c.pyx"]).cacheable  # writes an .html too
    assert not cython_front.CythonCall(["a.pyx", "b.pyx"]).cacheable
    assert cython_front.CythonCall(["--version"]).sources == []


@pytest.mark.parametrize(
    "args",
    [
        ["-3", "--fast-fail", "--generate-shared=/w/build/pkg/_cyutility.c"],
        ["-3", "--fast-fail", "--generate-shared", "/w/build/pkg/_cyutility.c"],
    ],
)
def test_the_shared_utility_module_is_a_call_of_its_own(args: list[str]) -> None:
    call = cython_front.CythonCall(args)
    assert (call.shared, call.sources, call.cacheable) == ("/w/build/pkg/_cyutility.c", [], True)
    paths = store.PathKeys("/w/src", "/w/build", None)
    assert call.key_arguments(paths) == ["-3", "--fast-fail"]  # the output is keyed apart
    key = cython_front.shared_module_key("3.1.8", paths, call.shared, "/w/build", "cli",
                                         call.key_arguments(paths))  # fmt: skip
    moved = store.PathKeys("/x/src", "/x/build", None)
    assert key == cython_front.shared_module_key(
        "3.1.8", moved, "/x/build/pkg/_cyutility.c", "/x/build", "cli", ["-3", "--fast-fail"]
    ), "another copy of the tree has the same key"
    assert key != cython_front.shared_module_key(
        "3.1.7", paths, call.shared, "/w/build", "cli", call.key_arguments(paths)
    ), "another Cython writes other utility code"
    assert key != cython_front.shared_module_key(
        "3.1.8", paths, call.shared, "/w/build", "cli", ["-3"]
    )


def test_depfile_paths_read_cythons_format() -> None:
    text = "a.pyx.c: \\\n  ../src/a.pyx \\\n  ../src/my\\ dir/common.pxd \\\n  /env/Cython/Includes/libc/math.pxd\n"
    assert store.depfile_paths(text) == [
        "../src/a.pyx", "../src/my dir/common.pxd", "/env/Cython/Includes/libc/math.pxd"]  # fmt: skip


def _entry(tmp_path: Path, paths: store.PathKeys, output: bytes) -> store.Entry:
    deps = cython_front._dependencies(paths, ["pkg/a.pyx", "pkg/common.pxd"], str(tmp_path / "src"))
    digest = store.sha256_bytes(output)
    return store.Entry(deps, {"": digest}, "a.c: \\\n  <root>/pkg/a.pyx\n")


def test_manifest_hits_only_while_every_dependency_is_unchanged(tmp_path: Path) -> None:
    pkg = tmp_path / "src" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "a.pyx").write_text("cimport common\n")
    (pkg / "common.pxd").write_text("cdef int x\n")
    paths = store.PathKeys(str(tmp_path / "src"), str(tmp_path / "build"), None)
    cache = store.TranspileCache(str(tmp_path / "cache"))
    cache.store(
        "k" * 64,
        _entry(tmp_path, paths, b"/* one */"),
        {store.sha256_bytes(b"/* one */"): b"/* one */"},
    )
    hit = cache.lookup("k" * 64, paths)
    assert hit is not None and cache.read_result(hit.outputs[""]) == b"/* one */"
    assert hit.depfile == "a.c: \\\n  <root>/pkg/a.pyx\n"
    assert cache.lookup("j" * 64, paths) is None

    # A copy of the tree elsewhere finds the entry: dependencies are keyed by <root>.
    moved = tmp_path / "moved"
    (moved / "pkg").mkdir(parents=True)
    for name in ("a.pyx", "common.pxd"):
        (moved / "pkg" / name).write_bytes((pkg / name).read_bytes())
    assert cache.lookup("k" * 64, store.PathKeys(str(moved), None, None)) is not None

    (pkg / "common.pxd").write_text("cdef long x\n")
    assert cache.lookup("k" * 64, paths) is None, "a changed .pxd must miss"
    cache.store(
        "k" * 64,
        _entry(tmp_path, paths, b"/* two */"),
        {store.sha256_bytes(b"/* two */"): b"/* two */"},
    )
    second = cache.lookup("k" * 64, paths)
    assert second is not None and cache.read_result(second.outputs[""]) == b"/* two */"
    (pkg / "common.pxd").write_text("cdef int x\n")  # back: the older entry serves again
    first = cache.lookup("k" * 64, paths)
    assert first is not None and cache.read_result(first.outputs[""]) == b"/* one */"


def test_read_log_counts_uncached_calls_as_misses(tmp_path: Path) -> None:
    log = tmp_path / store.LOG_NAME
    for source, outcome in [("<root>/a.pyx", "hit"), ("<root>/b.pyx", "miss"),
                            ("<root>/c.pyx", "uncached"), ("<root>/d.pyx", "stub")]:  # fmt: skip
        store.append_log(str(log), {"source": source, "outcome": outcome})
    with log.open("a") as handle:
        handle.write('{"source": "<root>/torn')  # a line torn by a killed build
    counts = store.read_log(log)
    assert counts == {"hits": 1, "misses": 2, "uncached": 1, "stubs": 1, "total": 3,
                      "missed": ["<root>/b.pyx", "<root>/c.pyx"]}  # fmt: skip
    assert store.read_log(tmp_path / "absent.jsonl")["total"] == 0


def test_a_shard_stubs_exactly_the_transpiles_whose_c_tu_another_shard_owns(tmp_path: Path) -> None:
    root, build = tmp_path / "src", tmp_path / "build"
    outputs = [f"_m{index}.so.p/_m{index}.pyx.c" for index in range(12)]
    owners = {out: partition.shard_of(f"<build>/{out}", 3) for out in outputs}
    for index in range(3):
        environ = {"KILN_SHARD_COUNT": "3", "KILN_SHARD_INDEX": str(index),
                   "KILN_PACKAGE_ROOT": str(root), "KILN_BUILD_DIR": str(build)}  # fmt: skip
        stubbed = {out for out in outputs if cython_front.owned_elsewhere(out, str(build), environ)}
        assert stubbed == {out for out, owner in owners.items() if owner != index}
    assert not cython_front.owned_elsewhere(outputs[0], str(build), {"KILN_SHARD_COUNT": ""})


def test_find_real_skips_kiln_fronts(tmp_path: Path) -> None:
    fronts, real = tmp_path / "fronts", tmp_path / "env-bin"
    for directory, text in ((fronts, f"#!/bin/sh\n# {CYTHON_FRONT_MARK}\n"), (real, "#!/bin/sh\n")):
        directory.mkdir()
        (directory / "cython").write_text(text)
        (directory / "cython").chmod(0o755)
    other_front = tmp_path / "other"
    other_front.mkdir()
    (other_front / "cython").write_text(f"#!/bin/sh\n# {CYTHON_FRONT_MARK}\n")
    (other_front / "cython").chmod(0o755)
    path = f"{fronts}:{other_front}:{real}"
    assert store.find_real("cython", str(fronts), {"PATH": path}) == str(real / "cython")
    assert store.find_real("cython3", str(fronts), {"PATH": path}) is None


@pytest.mark.parametrize("depfile", [True, False])
def test_placeholder_and_its_depfile(tmp_path: Path, depfile: bool) -> None:
    out = tmp_path / "m.so.p" / "m.pyx.c"
    cython_front.write_placeholder(str(out), depfile, str(tmp_path))
    assert out.read_text().startswith("/* wheelkiln:")
    assert (out.parent / "m.pyx.c.dep").exists() == depfile
    if depfile:
        assert (out.parent / "m.pyx.c.dep").read_text() == "m.so.p/m.pyx.c:\n"


@pytest.mark.parametrize(
    "script",
    [
        "#!{env}/bin/python\nimport sys\n",  # pip's console script
        "#!/bin/sh\n'''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")\"/'python' \"$0\" \"$@\"\n' '''\n",  # uv's
    ],
)
def test_cython_package_is_found_for_pip_and_uv_scripts(tmp_path: Path, script: str) -> None:
    env = tmp_path / "env"
    package = env / "lib" / "python3.11" / "site-packages" / "Cython"
    package.mkdir(parents=True)
    (package / "Shadow.py").write_text('# cython.* namespace\n__version__ = "3.3.1"\n')
    (env / "bin").mkdir()
    (env / "bin" / "cython").write_text(script.format(env=env))
    assert store.cython_package(str(env / "bin" / "cython")) == ("3.3.1", str(package))


def test_cython_version_is_answered_from_the_cache_until_cython_changes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / "env"
    package = env / "lib" / "python3.11" / "site-packages" / "Cython"
    package.mkdir(parents=True)
    shadow = package / "Shadow.py"
    shadow.write_text('__version__ = "3.3.1"\n')
    runs = tmp_path / "runs"
    script = env / "bin" / "cython"
    script.parent.mkdir()

    def install(version: str) -> None:
        install_script(
            script,
            f"#!/bin/sh\necho run >> {runs}\necho 'Cython version {version}'\n"
            f"echo 'Cython version {version}' >&2\n",
        )

    install("3.3.1")
    fronts = tmp_path / "fronts"
    fronts.mkdir()
    (fronts / "cython").write_text(f"#!/bin/sh\n# {CYTHON_FRONT_MARK}\n")
    environ = {"PATH": f"{fronts}:{script.parent}", store.ENV_CACHE: str(tmp_path / "cache")}

    def version() -> tuple[str, str, int]:
        assert cython_front.transpile(str(fronts / "cython"), ["-V"], environ) == 0
        out, err = capfd.readouterr()
        return out, err, len(runs.read_text().splitlines())

    assert version() == ("Cython version 3.3.1\n", "Cython version 3.3.1\n", 1)
    assert version() == ("Cython version 3.3.1\n", "Cython version 3.3.1\n", 1), "kept"
    install("3.3.2")
    shadow.write_text('__version__ = "3.3.2"\n')
    assert version() == ("Cython version 3.3.2\n", "Cython version 3.3.2\n", 2)
    assert version()[2] == 2
    # Without a cache (the uncached build) Cython answers every time.
    del environ[store.ENV_CACHE]
    assert version() == ("Cython version 3.3.2\n", "Cython version 3.3.2\n", 3)


def _fake_cython(env: Path, runs: Path, version: str) -> Path:
    """A Cython "installed" in *env* (a new script each time, as pip and uv write one)
    that logs each run to *runs* and answers ``-V`` on both streams."""
    package = env / "lib" / "python3.11" / "site-packages" / "Cython"
    package.mkdir(parents=True, exist_ok=True)
    (package / "Shadow.py").write_text(f'__version__ = "{version}"\n')
    script = env / "bin" / "cython"
    script.parent.mkdir(exist_ok=True)
    install_script(
        script,
        f"#!/bin/sh\necho run >> {runs}\necho 'Cython version {version}'\n"
        f"echo 'to stderr {version}' >&2\n",
    )
    return script


def test_the_front_script_answers_cython_v_itself_until_cython_changes(tmp_path: Path) -> None:
    """meson asks ``cython -V`` twice per setup: the front script answers from the kept
    answer the build hands it, without starting Python or Cython; a reinstalled Cython
    is asked again, and its answer is kept for the next build."""
    import subprocess

    from wheelkiln.builder.toolchain import cython_fronts

    env, runs, cache_dir = tmp_path / "env", tmp_path / "runs", str(tmp_path / "cache")
    _fake_cython(env, runs, "3.3.1")
    directories, _ = cython_fronts(tmp_path / "scripts")
    front = Path(directories[0]) / "cython"
    behind = f"{env / 'bin'}:/usr/bin:/bin"

    def build(expect_runs: int) -> tuple[str, str]:
        """One build's setup and meson's question; the real Cython's runs so far."""
        environ = {"PATH": f"{front.parent}:{behind}", store.ENV_CACHE: cache_dir,
                   **store.version_environment(cache_dir, behind)}  # fmt: skip
        done = subprocess.run(
            [str(front), "-V"], env=environ, capture_output=True, text=True, check=True
        )
        assert len(runs.read_text().splitlines()) == expect_runs
        return done.stdout, done.stderr

    assert store.version_environment(cache_dir, behind) == {}, "nothing kept yet"
    assert build(1) == ("Cython version 3.3.1\n", "to stderr 3.3.1\n"), "Python front asks"
    assert store.version_environment(cache_dir, behind) == {
        store.ENV_VERSION_STDOUT: "Cython version 3.3.1\n",
        store.ENV_VERSION_STDERR: "to stderr 3.3.1\n",
    }
    assert build(1) == ("Cython version 3.3.1\n", "to stderr 3.3.1\n"), "answered by sh"
    _fake_cython(env, runs, "3.3.2")
    assert store.version_environment(cache_dir, behind) == {}, "a new Cython is another key"
    assert build(2) == ("Cython version 3.3.2\n", "to stderr 3.3.2\n")
    assert build(2) == ("Cython version 3.3.2\n", "to stderr 3.3.2\n")
    # Other questions, and an answer for another name, still go to the real thing.
    environ = {"PATH": f"{front.parent}:{behind}", **store.version_environment(cache_dir, behind)}
    subprocess.run([str(front), "-V", "x.pyx"], env=environ, capture_output=True, check=False)
    assert len(runs.read_text().splitlines()) == 3
    assert store.version_environment(None, behind) == {}, "an uncached build keeps nothing"


def test_a_failed_version_answer_is_not_kept(tmp_path: Path) -> None:
    env, runs = tmp_path / "env", tmp_path / "runs"
    script = _fake_cython(env, runs, "3.3.1")
    script.write_text(f"#!/bin/sh\necho run >> {runs}\nexit 3\n")
    cache = store.TranspileCache(str(tmp_path / "cache"))
    assert cython_front.version_answer(str(script), ["-V"], cache) == (3, "", "")
    assert store.version_environment(cache.directory, str(script.parent)) == {}
    assert cython_front.version_answer(str(script), ["-V"], cache) == (3, "", "")
    assert len(runs.read_text().splitlines()) == 2


def test_json_reads_and_writes_without_the_json_module() -> None:
    import json

    manifest = [{"deps": [["<root>/a.pyx", "ab" * 32], ["<cython>/libc/math.pxd", None]],
                 "outputs": {"": "cd" * 32, "a.h": "ef" * 32},
                 "depfile": 'a.c: \\\n  <root>/a\\ b.pyx "q" \u00e9\u4e2d\n',
                 "n": [1, -2.5e-3, True, False]}]  # fmt: skip
    text = json.dumps(manifest, indent=1, sort_keys=True)
    assert store.loads(text) == json.loads(text) == manifest
    assert store.loads(f"  \n{text}\n") == manifest
    for bad in ("", "[1, 2", "[1] [2]", '{"a": NaN}', "[Infinity]", "{'a': 1}"):
        with pytest.raises(ValueError):
            store.loads(bad)
    record = {"source": '<root>/a "b"\\c\n\u00e9\ud800', "seconds": 0.017006, "n": 3,
              "none": None, "flag": True, "outcome": "hit"}  # fmt: skip
    assert store.dumps_line(record) == json.dumps(record, sort_keys=True)
    nested = {"b": [1, {"c": 2}], "a": float("nan")}
    assert store.dumps_line(nested) == json.dumps(nested, sort_keys=True)
    assert store.sha256_bytes(b"kiln") == __import__("hashlib").sha256(b"kiln").hexdigest()


def test_a_hit_on_the_command_line_imports_no_json_hashlib_or_re(tmp_path: Path) -> None:
    """The hot path imports nothing it does not need: each of these costs a transpile
    hit more than the rest of its work (json and re ~20 ms, hashlib ~6 ms)."""
    import json
    import subprocess

    from wheelkiln import per_tu

    root, build, cache_dir = tmp_path / "src", tmp_path / "build", tmp_path / "cache"
    (root / "pkg").mkdir(parents=True)
    build.mkdir()
    (root / "pkg" / "a.pyx").write_text("cimport common\n")
    (root / "pkg" / "common.pxd").write_text("cdef int x\n")
    env, runs = tmp_path / "env", tmp_path / "runs"
    real = _fake_cython(env, runs, "3.3.1")
    fronts = tmp_path / "fronts"
    fronts.mkdir()
    (fronts / "cython").write_text(f"#!/bin/sh\n# {CYTHON_FRONT_MARK}\n")
    args = ["-M", "--fast-fail", "-3", str(root / "pkg" / "a.pyx"), "-o", "a.so.p/a.pyx.c"]
    paths = store.PathKeys(str(root), str(build), None)
    package = store.cython_package(str(real))
    assert package is not None
    call = cython_front.CythonCall(args)
    key = store.module_key([package[0], "<root>/pkg/a.pyx", store.file_digest(args[3]) or "",
                            "<build>/a.so.p/a.pyx.c", "<build>", "cli", *call.key_arguments(paths)])  # fmt: skip
    cache = store.TranspileCache(str(cache_dir))
    deps = cython_front._dependencies(
        paths, [args[3], str(root / "pkg" / "common.pxd")], str(build)
    )
    output = b"/* the transpile */\n"
    cache.store(key, store.Entry(deps, {"": store.sha256_bytes(output)}, "a.so.p/a.pyx.c: \\\n  <root>/pkg/a.pyx\n"),
                {store.sha256_bytes(output): output})  # fmt: skip
    environ = {"PATH": f"{fronts}:{real.parent}:/usr/bin:/bin", store.ENV_CACHE: str(cache_dir),
               store.ENV_ROOT: str(root), store.ENV_BUILD_DIR: str(build),
               store.ENV_LOG: str(tmp_path / "log.jsonl")}  # fmt: skip
    argv = per_tu.cython_front_argv()
    argv[-1] = argv[-1].replace(
        "sys.exit(main())",
        "code=main();print(sorted(m for m in ('json','hashlib','re') if m in sys.modules));sys.exit(code)",
    )
    done = subprocess.run([*argv, str(fronts / "cython"), *args], env=environ, cwd=build,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]", done.stdout
    assert (build / "a.so.p" / "a.pyx.c").read_bytes() == output
    assert (
        build / "a.so.p" / "a.pyx.c.dep"
    ).read_text() == f"a.so.p/a.pyx.c: \\\n  {root}/pkg/a.pyx\n"
    assert not runs.exists(), "a hit runs no Cython"
    assert json.loads((tmp_path / "log.jsonl").read_text())["outcome"] == "hit"


def test_the_site_hook_chains_a_shadowed_sitecustomize_and_imports_little(tmp_path: Path) -> None:
    """Every Python start of a build imports the hook (meson, the backend, a generator
    script): it loads no importlib.util (~10 ms) unless it has a sitecustomize of the
    build's to run, which it runs; its bytecode is written beside it."""
    import subprocess
    import sys

    from wheelkiln.per_tu import SRC_DIR

    hook = store.write_site_hook(str(tmp_path / "scripts"), SRC_DIR)
    assert list((Path(hook) / "__pycache__").glob("sitecustomize.*.pyc"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("print('the build s own sitecustomize ran')\n")
    check = "import sys; sys.path[:0] = {path!r}; import sitecustomize; print('importlib.util' in sys.modules)"

    def start(path: list[str]) -> list[str]:  # -S: no site, so nothing else loads modules
        code = check.format(path=path)
        done = subprocess.run(
            [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True
        )
        return done.stdout.splitlines()

    assert start([hook]) == ["False"]
    assert start([hook, str(other)]) == ["the build s own sitecustomize ran", "True"]
