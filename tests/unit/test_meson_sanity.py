"""meson's sanity checks are skipped only where a build with the same compilers, Cython,
flags and build environment passed them; anything else is another key."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_cmake_id import fake_compilers
from wheelkiln.builder.meson_sanity import NATIVE_FILE, mark, sanity_key, skip_settings


def test_the_key_follows_the_compilers_cython_flags_and_environment(tmp_path: Path) -> None:
    env = fake_compilers(tmp_path / "bin", "12.2.0")
    build_env = tmp_path / "envs" / "aaaa"

    def key(environ: dict[str, str], where: Path = build_env) -> str:
        return sanity_key(environ, where, [("setup-args", "-Dx=1")])

    base = key(env)
    assert key(dict(env)) == base
    # What no check reads (and names the job) leaves the key alone.
    assert key({**env, "SOURCE_DATE_EPOCH": "1", "CCACHE_DIR": "/w/job/c"}) == base
    assert sanity_key(
        env, build_env, [("build-dir", "/w/job-link/build"), ("compile-args", "-k0"),
                         ("setup-args", "-Dx=1")]
    ) == base  # fmt: skip
    # Another compiler version, CC, flags, Cython, build environment or setting: another key.
    assert key(fake_compilers(tmp_path / "bin2", "12.3.0")) != base
    assert key({**env, "CC": str(tmp_path / "bin" / "gcc")}) != base
    assert key({**env, "CFLAGS": "-O1"}) != base
    assert key({**env, "PKG_CONFIG_PATH": "/opt/lib/pkgconfig"}) != base
    cython = tmp_path / "front" / "cython"
    cython.parent.mkdir()
    cython.write_text("#!/bin/sh\n")
    cython.chmod(0o755)
    assert key({**env, "PATH": f"{cython.parent}:{env['PATH']}"}) != base
    assert key(env, tmp_path / "envs" / "bbbb") != base
    assert sanity_key(env, build_env, []) != base


def test_a_native_file_skips_the_checks_only_once_a_build_passed_them(tmp_path: Path) -> None:
    marker = tmp_path / "meson-sanity" / "key"
    native = tmp_path / "job" / "kiln-meson-native.ini"
    native.parent.mkdir()
    assert skip_settings(marker, native) == ()
    assert not native.exists()
    mark(marker)
    assert skip_settings(marker, native) == (("setup-args", f"--native-file={native}"),)
    assert native.read_text() == NATIVE_FILE == "[properties]\nskip_sanity_check = true\n"
    mark(marker)  # again: unchanged
    assert marker.read_text() == "passed\n"
