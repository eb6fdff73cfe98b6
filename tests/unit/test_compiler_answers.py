"""meson's compiler questions answered by the CC/CXX fronts from kept answers: the
compiler is not started for a kept answer, and another compiler, linker or variable
asks again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.scripts import install_script
from wheelkiln.builder import compiler_answers
from wheelkiln.builder.toolchain import DEBUG_PREFIX, Launch, toolchain_environment

DEFINES = ("-cpp", "-x", "c", "-E", "-dM", "-")


def _compiler(path: Path, runs: Path, version: str) -> None:
    """A compiler (a new file each time, as a package upgrade writes one) that logs its
    runs; its -dumpmachine fails, which must never be kept."""
    install_script(
        path,
        f'#!/bin/sh\necho "$*" >> {runs}\n'
        'case "$1" in\n'
        f"  --version) echo 'fakecc {version}';;\n"
        f"  -cpp) cat >/dev/null; echo '#define __FAKE__ {version}';;\n"
        "  -Wl,--version) echo 'GNU ld 2.40'; echo \"collect2 /tmp/cc$$.res\" >&2;;\n"
        "  -dumpmachine) exit 1;;\n"
        "esac\n",
    )


def test_kept_answers_until_the_compiler_linker_or_a_variable_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, runs, store = tmp_path / "bin", tmp_path / "runs", tmp_path / "answers"
    bin_dir.mkdir()
    compiler = bin_dir / "fakecc"
    _compiler(compiler, runs, "1.0")
    monkeypatch.setenv("KILN_HOST_CC", str(compiler))
    monkeypatch.setenv("KILN_HOST_CXX", str(compiler))
    tools = toolchain_environment(
        Launch(None, seat_wrapper=True), "meson", tmp_path / "kiln-bin", scripts_dir=tmp_path / "s"
    )
    fronts = {"cc": Path(tools["CC"]), "c++": Path(tools["CXX"])}
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", DEBUG_PREFIX: "/job", "KILN_SEAT_FRONT": "0"}

    def ask(environ: dict[str, str], *question: str) -> tuple[str, str, int]:
        runs.write_text("")
        done = subprocess.run([tools["CC"], *question], env=environ, input="",
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert done.returncode == (1 if question == ("-dumpmachine",) else 0)
        return done.stdout, done.stderr, len(runs.read_text().splitlines())

    real = {
        question: ask(environ, *question)
        for question in (("--version",), DEFINES, ("-Wl,--version",))
    }
    assert all(started == 1 for _, _, started in real.values())
    answered = {**environ, **compiler_answers.prepare(fronts, environ, store)}
    assert ask(answered, "--version") == ("fakecc 1.0\n", "", 0), "answered without the compiler"
    assert ask(answered, *DEFINES) == ("#define __FAKE__ 1.0\n", "", 0)
    out, err, started = ask(answered, "-Wl,--version")
    assert (out, started) == ("GNU ld 2.40\n", 0) and err.startswith("collect2 /tmp/cc")
    assert ask(answered, "-dumpmachine")[2] == 1, "a failed answer is not kept"
    assert ask(answered, "-c", "x.c")[2] == 1, "anything else runs"
    assert ask(environ, "--version")[2] == 1, "without the variable the compiler answers"
    assert compiler_answers.prepare(fronts, environ, store) == compiler_answers.prepare(
        fronts, environ, store
    )

    _compiler(compiler, runs, "1.0")  # reinstalled, same version line
    again = compiler_answers.prepare(fronts, environ, store)
    assert again != {k: v for k, v in answered.items() if k == compiler_answers.ENV_ANSWERS}
    _compiler(compiler, runs, "2.0")
    upgraded = {**environ, **compiler_answers.prepare(fronts, environ, store)}
    assert ask(upgraded, "--version") == ("fakecc 2.0\n", "", 0)
    keys = {compiler_answers.answers_key(fronts, environ)}
    ld = bin_dir / "ld"
    ld.write_text("#!/bin/sh\n")
    ld.chmod(0o755)
    keys.add(compiler_answers.answers_key(fronts, environ))
    keys.add(compiler_answers.answers_key(fronts, {**environ, "COMPILER_PATH": "/opt/gnu"}))
    keys.add(compiler_answers.answers_key(fronts, {**environ, "LC_ALL": "de_DE.UTF-8"}))
    assert len(keys) == 4, "another linker or driver variable is another key"
    view = tmp_path / "view"
    view.symlink_to(bin_dir)  # <workdir>/.envs: the same directory seen from elsewhere
    seen = {**environ, "PATH": f"{view}:/usr/bin:/bin"}
    assert compiler_answers.answers_key(fronts, seen) == compiler_answers.answers_key(
        fronts, environ
    )
    longer = {**environ, "PATH": f"{tmp_path}:{environ['PATH']}"}
    assert compiler_answers.answers_key(fronts, longer) != compiler_answers.answers_key(
        fronts, environ
    )
    assert not any(name.name.startswith(".") for name in store.iterdir()), "no staged leftovers"


def test_an_unwritable_home_keeps_no_answers_and_builds_on(tmp_path: Path) -> None:
    front = tmp_path / "cc"
    front.write_text("#!/bin/sh\n# wheelkiln host compiler front: gcc: gcc 12\n")
    store = tmp_path / "answers"
    store.write_text("a file where the directory would be")
    assert compiler_answers.prepare({"cc": front}, {"PATH": "/usr/bin:/bin"}, store) == {}
