"""The meson front answers exactly ``meson --version`` from what the real meson said
once, hands everything else to the real meson, and asks again after meson changes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.scripts import install_script
from wheelkiln.builder.meson_version import meson_front


def test_the_front_answers_the_version_and_passes_the_rest(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    meson = bin_dir / "meson"

    def install(version: str) -> None:
        install_script(
            meson,
            f'#!/bin/sh\necho "$*" >> {runs}\n'
            f'if [ "$*" = --version ]; then echo {version}; else echo "real meson: $*"; fi\n',
        )

    def call(front: str | None, *args: str) -> tuple[str, list[str]]:
        assert front is not None
        out = subprocess.run([f"{front}/meson", *args], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
        asked = runs.read_text().splitlines() if runs.exists() else []
        runs.unlink(missing_ok=True)
        return out, asked

    install("1.12.1")
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    store, scripts = tmp_path / "meson-version", tmp_path / "fronts"
    front = meson_front(environ, store, scripts)
    assert runs.read_text() == "--version\n", "asked once, when the front was made"
    runs.unlink()
    assert call(front, "--version") == ("1.12.1\n", []), "answered without starting meson"
    assert call(front, "setup", "src", "build") == ("real meson: setup src build\n",
                                                    ["setup src build"])  # fmt: skip
    assert call(front, "--version", "x") == ("real meson: --version x\n", ["--version x"])
    assert meson_front(environ, store, scripts) == front
    assert not runs.exists(), "the kept answer"
    install("1.13.0")
    front = meson_front(environ, store, scripts)
    assert runs.read_text() == "--version\n"
    runs.unlink()
    assert call(front, "--version") == ("1.13.0\n", [])


def test_no_front_without_a_meson_that_answers_a_version(tmp_path: Path) -> None:
    assert meson_front({"PATH": str(tmp_path)}, tmp_path / "s", tmp_path / "f") is None
    meson = tmp_path / "meson"
    meson.write_text("#!/bin/sh\necho 'WARNING: something' >&2\necho 1.12.1\n")
    meson.chmod(0o755)
    assert meson_front({"PATH": str(tmp_path)}, tmp_path / "s", tmp_path / "f") is None
    assert not (tmp_path / "s").exists()


def test_no_front_where_the_answer_cannot_be_kept(tmp_path: Path) -> None:
    meson = tmp_path / "meson"
    install_script(meson, "#!/bin/sh\necho 1.12.1\n")
    (tmp_path / "home").write_text("a file, where the store's parent would be")
    # meson then runs as it is, asked by meson-python itself: the build goes on
    assert meson_front({"PATH": str(tmp_path)}, tmp_path / "home" / "s", tmp_path / "f") is None
