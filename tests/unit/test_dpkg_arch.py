"""meson's ``dpkg-architecture -qDEB_HOST_MULTIARCH`` answered by a front from the kept
answer; dpkg, its tables, a DEB_ variable or the compiler changing asks again."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.scripts import install_script
from wheelkiln.builder import dpkg_arch


def _script(path: Path, body: str) -> None:
    install_script(path, "#!/bin/sh\n" + body)


def test_the_kept_answer_until_dpkg_its_tables_or_a_variable_changes(tmp_path: Path) -> None:
    bin_dir, runs, tables = tmp_path / "bin", tmp_path / "runs", tmp_path / "dpkg-data"
    bin_dir.mkdir()
    tables.mkdir()
    (tables / "cputable").write_text("amd64 x86_64\n")
    real = bin_dir / "dpkg-architecture"
    answer = f'echo "$*" >> {runs}\n[ "$1" = -qDEB_HOST_MULTIARCH ] && echo x86_64-linux-gnu\n'
    _script(real, answer)
    _script(bin_dir / "dpkg", "echo amd64\n")
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DPKG_DATADIR": str(tables)}
    store, scripts = tmp_path / "store", tmp_path / "scripts"

    def runs_so_far() -> int:
        return len(runs.read_text().splitlines()) if runs.exists() else 0

    front = dpkg_arch.dpkg_arch_front(environ, store, scripts)
    assert front is not None and runs_so_far() == 1, "asked once, by kiln"
    path = {**environ, "PATH": f"{front}:{environ['PATH']}"}
    done = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], env=path,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert (done.stdout, runs_so_far()) == ("x86_64-linux-gnu\n", 1), "answered by the front"
    subprocess.run(
        ["dpkg-architecture", "-qDEB_HOST_ARCH"], env=path, capture_output=True, check=False
    )
    assert runs_so_far() == 2, "any other question runs the real one"
    assert dpkg_arch.dpkg_arch_front(environ, store, scripts) == front
    assert runs_so_far() == 2, "kept"

    keys = {dpkg_arch.answer_key(str(real), environ)}
    keys.add(dpkg_arch.answer_key(str(real), {**environ, "DEB_HOST_ARCH": "arm64"}))
    keys.add(dpkg_arch.answer_key(str(real), {**environ, "CC": "clang"}))
    _script(bin_dir / "dpkg", "echo amd64\n")
    keys.add(dpkg_arch.answer_key(str(real), environ))
    (tables / "cputable").write_text("amd64 x86_64\narm64 aarch64\n")
    keys.add(dpkg_arch.answer_key(str(real), environ))
    _script(real, answer)
    keys.add(dpkg_arch.answer_key(str(real), environ))
    assert len(keys) == 6
    assert dpkg_arch.dpkg_arch_front(environ, store, scripts) == front, "same answer, same front"
    assert runs_so_far() == 3, "asked again for the new key"

    _script(
        real, "echo 'dpkg-architecture: warning: CC is not x86_64' >&2; echo x86_64-linux-gnu\n"
    )
    assert dpkg_arch.dpkg_arch_front(environ, store, scripts) is None, "only a bare triplet is kept"
    assert dpkg_arch.dpkg_arch_front({"PATH": str(tmp_path / "none")}, store, scripts) is None
