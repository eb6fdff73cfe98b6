"""The CC/CXX front scripts of setuptools and meson builds: compiles go through the
cache, calls that compile nothing (links, preprocessing, meson's version and define
questions) go straight to the compiler, and every call gets the job's prefix map."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from wheelkiln.builder.toolchain import DEBUG_PREFIX, FRONT_CACHE, Launch, toolchain_environment


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
    log = tmp_path / "log"
    compiler, cache = tmp_path / "gcc", tmp_path / "ccache"
    compiler.write_text(f'#!/bin/sh\necho "gcc $*" >> {log}\n')
    cache.write_text(f'#!/bin/sh\necho "cache $*" >> {log}\nexec "$@"\n')
    for script in (compiler, cache):
        script.chmod(0o755)
    monkeypatch.setenv("KILN_HOST_CC", str(compiler))
    env = toolchain_environment(
        Launch(str(cache)), "meson", tmp_path / "bin", scripts_dir=tmp_path / "scripts"
    )
    log.unlink(missing_ok=True)  # the front's own version probe
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


def test_without_the_job_environment_a_compile_goes_straight_to_the_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script names no cache of its own (its bytes are the same wherever kiln is
    installed): run again by hand, without the job's environment, it still compiles."""
    log = tmp_path / "log"
    compiler = tmp_path / "gcc"
    compiler.write_text(f'#!/bin/sh\necho "gcc $*" >> {log}\n')
    compiler.chmod(0o755)
    monkeypatch.setenv("KILN_HOST_CC", str(compiler))
    env = toolchain_environment(
        Launch(str(tmp_path / "ccache")), "meson", tmp_path / "bin", scripts_dir=tmp_path / "s"
    )
    assert str(tmp_path / "ccache") not in Path(env["CC"]).read_text()
    log.unlink(missing_ok=True)
    subprocess.run([env["CC"], "-c", "a.c"], env={"PATH": "/usr/bin:/bin"}, check=True)
    assert log.read_text().splitlines() == ["gcc -c a.c"]
