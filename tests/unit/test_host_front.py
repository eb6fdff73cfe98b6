"""The CC/CXX front scripts of setuptools and meson builds: compiles go through the
cache, calls that compile nothing (links, preprocessing, meson's version and define
questions) go straight to the compiler, and every call gets the job's prefix map."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from wheelkiln.builder.toolchain import (
    DEBUG_PREFIX,
    FRONT_CACHE,
    JOB_DIR,
    Launch,
    toolchain_environment,
)


@pytest.mark.parametrize(
    ("args", "through_cache"),
    [
        (["-c", "a.c", "-o", "a.o"], True),
        (["-O2", "-S", "a.c"], True),
        (["-o", "m.so", "a.o", "-shared", "-fPIC"], False),  # a link
        (["-cpp", "-x", "c", "-E", "-dM", "-"], False),  # meson's define question
        (["--version"], False),
        (["-Wl,--version"], False),
        (["-DX= -c ", "-E", "a.c"], True),  # an argument that only looks like -c: the safe way
    ],
)
def test_only_compiles_go_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], through_cache: bool
) -> None:
    log, compiler, env = _cached_front(tmp_path, monkeypatch, "meson")
    subprocess.run(
        [env["CC"], *args],
        env={
            "PATH": "/usr/bin:/bin", DEBUG_PREFIX: "/job", "KILN_SEAT_FRONT": "0",
            FRONT_CACHE: env[FRONT_CACHE],
        },
        check=True,
    )  # fmt: skip
    called = " ".join(args)
    expected = [f"gcc {called} -fdebug-prefix-map=/job=."]
    if through_cache:
        expected.insert(0, f"cache {compiler} {called} -fdebug-prefix-map=/job=.")
    assert log.read_text().splitlines() == expected


@pytest.mark.parametrize(
    ("args", "tmpdir", "through_cache"),
    [
        # psutil's probe: a tempfile.NamedTemporaryFile source, random name, every build.
        (["-c", "/tmp/tmpk2x9q1.c", "-o", "/tmp/tmpz/tmpk2x9q1.o"], None, False),
        (["-c", "/var/tmp/probe.cpp"], None, False),
        (["-c", "/scratch/tmpq.c"], "/scratch", False),
        # The job's own sources, in a job directory under /tmp (a test's, a CI runner's).
        (["-c", "/tmp/job/src/a.c", "-o", "/tmp/job/build/a.o"], None, True),
        # A temp directory only as an include directory or an object: a real TU.
        (["-isystem", "/tmp/inc", "-c", "a.c", "-o", "/tmp/x/a.o"], None, True),
        (["-c", "/scratch/tmpq.c"], None, True),  # not a temp directory here
    ],
)
def test_a_source_in_a_temp_directory_outside_the_job_is_a_probe(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    tmpdir: str | None,
    through_cache: bool,
) -> None:
    log, _, env = _cached_front(tmp_path, monkeypatch, "setuptools")
    subprocess.run(
        [env["CC"], *args],
        env={
            "PATH": "/usr/bin:/bin", JOB_DIR: "/tmp/job", "KILN_SEAT_FRONT": "0",
            FRONT_CACHE: env[FRONT_CACHE], **({"TMPDIR": tmpdir} if tmpdir else {}),
        },
        check=True,
    )  # fmt: skip
    assert log.read_text().startswith("cache ") is through_cache, log.read_text()
    assert len(log.read_text().splitlines()) == (2 if through_cache else 1)


def test_without_the_job_environment_a_compile_goes_straight_to_the_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script names no cache of its own (its bytes are the same wherever kiln is
    installed): run again by hand, without the job's environment, it still compiles."""
    log = tmp_path / "log"
    compiler = _logging_compiler(tmp_path / "gcc", log)
    monkeypatch.setenv("KILN_HOST_CC", str(compiler))
    env = toolchain_environment(
        Launch(str(tmp_path / "ccache")), "meson", tmp_path / "bin", scripts_dir=tmp_path / "s"
    )
    assert str(tmp_path / "ccache") not in Path(env["CC"]).read_text()
    log.unlink(missing_ok=True)
    subprocess.run([env["CC"], "-c", "a.c"], env={"PATH": "/usr/bin:/bin"}, check=True)
    assert log.read_text().splitlines() == ["gcc -c a.c"]


def _cached_front(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, system: str
) -> tuple[Path, Path, dict[str, str]]:
    """The log each call writes, the logging compiler, and a build environment whose CC
    front runs it through a logging cache."""
    log = tmp_path / "log"
    compiler, cache = _logging_compiler(tmp_path / "gcc", log), tmp_path / "ccache"
    cache.write_text(f'#!/bin/sh\necho "cache $*" >> {log}\nexec "$@"\n')
    cache.chmod(0o755)
    monkeypatch.setenv("KILN_HOST_CC", str(compiler))
    env = toolchain_environment(
        Launch(str(cache)), system, tmp_path / "bin", scripts_dir=tmp_path / "scripts"
    )
    log.unlink(missing_ok=True)  # the front's own version probe
    return log, compiler, env


def _logging_compiler(path: Path, log: Path) -> Path:
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> {log}\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("environ", "called"),
    [
        ({"CC": "{bin}/clang"}, "clang -c a.c"),  # the recipe's or the caller's CC
        ({"CC": "ccache {bin}/clang -m64"}, "clang -m64 -c a.c"),  # kiln runs the cache
        ({"CC": "{bin}/clang", "KILN_HOST_CC": "{bin}/gcc-13"}, "gcc-13 -c a.c"),
        ({}, None),  # gcc, the default
    ],
)
def test_the_front_runs_the_compiler_the_build_names(
    tmp_path: Path, environ: dict[str, str], called: str | None
) -> None:
    """The fronts replace CC and CXX: a recipe that set CC = "clang" was built with gcc,
    saying nothing."""
    from wheelkiln.builder.toolchain import host_compilers

    log, bin_dir = tmp_path / "log", tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("clang", "gcc-13"):
        _logging_compiler(bin_dir / name, log)
    filled = {key: value.replace("{bin}", str(bin_dir)) for key, value in environ.items()}
    if called is None:
        assert host_compilers(filled)["cc"] == ["gcc"]
        return
    env = toolchain_environment(
        Launch(None, seat_wrapper=False), "setuptools", tmp_path / "kiln-bin",
        scripts_dir=tmp_path / "s", environ=filled,
    )  # fmt: skip
    assert "CC" not in env  # no cache and no wrapper: the build's own CC stands
    env = toolchain_environment(
        Launch(str(bin_dir / "gcc-13")), "setuptools", tmp_path / "kiln-bin",
        scripts_dir=tmp_path / "s", environ=filled,
    )  # fmt: skip
    log.unlink(missing_ok=True)  # the front's version probe
    subprocess.run([env["CC"], "-c", "a.c"], env={"PATH": "/usr/bin:/bin"}, check=True)
    assert log.read_text().splitlines() == [called]


def test_a_compiler_that_is_not_a_command_line_is_refused_by_its_name() -> None:
    from wheelkiln.builder.toolchain import host_compilers
    from wheelkiln.errors import UsageError

    with pytest.raises(UsageError, match=r"CC=\"clang '\" is not a command line \(No closing"):
        host_compilers({"CC": "clang '"})
    with pytest.raises(UsageError, match=r"CXX=.* is not a command line \(a line break in it\)"):
        host_compilers({"CXX": "'g++\necho hi'"})


def test_a_chosen_compilers_version_is_a_tool_version(tmp_path: Path) -> None:
    from wheelkiln.builder import probes
    from wheelkiln.builder.toolchain import chosen_compiler_versions

    version = tmp_path / "version"
    version.write_text("clang version 18.1.0\n")
    clang = tmp_path / "clang"
    clang.write_text(f'#!/bin/sh\n[ "$1" = --version ] && cat {version}\n')
    clang.chmod(0o755)
    assert chosen_compiler_versions({}) == {}  # gcc and g++: the gcc entry says it
    probes.start_job()
    assert chosen_compiler_versions({"CC": f"ccache {clang} -m64"}) == {
        "cc": f"{clang} -m64: clang version 18.1.0"
    }
    version.write_text("clang version 19.1.0\n")
    probes.start_job()  # the next job asks again
    assert chosen_compiler_versions({"CC": str(clang)})["cc"].endswith("version 19.1.0")
