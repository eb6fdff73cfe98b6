"""Every subcommand at its boundary: bad output paths, bad numbers and missing files give a
named error with the documented exit code (2 bad input, 6 builder busy), never a
traceback, and are refused before any work starts (no work tree, no source copy, no
build environment, nothing recorded).

The table runs in-process through ``wheelkiln.cli.main``, the same entry point as the
``kiln`` script, so it is fast; a few cases at the end go through a real process and a
pipe, as CI runs them. Unwritable locations are real ones (tests run as root, so
permission bits do not stop a write): a path under a regular file, and ``/proc``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import kiln_in_process

ROOT = Path(__file__).resolve().parents[2]
RECIPE = str(ROOT / "recipes" / "demo-cpp.toml")
PROC = "/proc/kiln-no-such-dir/out"
"""Under /proc nothing can be created, not even by root."""

BAD_OUT_DIRS = {
    "a file": ("{file}", "{file} is a file, not a directory"),
    "a dangling link": ("{dangling}/sub", "{dangling} is a symbolic link to {tmp}/gone"),
    "under a file": ("{file}/sub", "{file} is a file, so no directory can be made under it"),
    "unwritable": (PROC, "cannot write in /proc"),
}
BAD_OUT_FILES = {
    "a directory": ("{dir}", "{dir} is a directory; a file path is needed here"),
    "under a file": ("{file}/out.txt", "{file} is a file, so no file can be made under it"),
    "under a dangling link": ("{dangling}/out.txt", "{dangling} is a symbolic link to {tmp}/gone"),
    "unwritable": (PROC + ".txt", "cannot write in /proc"),
}


def _cases() -> dict[str, tuple[list[str], int, list[str]]]:
    """name → (argv, exit code, texts the message must contain)."""
    cases: dict[str, tuple[list[str], int, list[str]]] = {}
    job_commands = {
        "build": ["build", RECIPE],
        "shard": ["shard", RECIPE, "--index", "0", "--count", "2"],
        "link": ["link", RECIPE, "--archives", "{dir}"],
    }
    for command, argv in job_commands.items():
        options = ["--out", "--workdir"] + (["--cache-dir"] if command == "build" else [])
        for option in options:
            for what, (path, message) in BAD_OUT_DIRS.items():
                cases[f"{command} {option} {what}"] = (
                    [*argv, option, path], 2, [f"{option} {path}", message]
                )
        cases[f"{command} $KILN_HOME under a file"] = (
            [*argv, "KILN_HOME={file}/home"], 2, ["$KILN_HOME", "{file} is a file"]
        )
        cases[f"{command} --jobs 0"] = ([*argv, "--jobs", "0"], 2, ["Invalid value for '--jobs'"])
        cases[f"{command} --jobs -3"] = ([*argv, "-j", "-3"], 2, ["Invalid value for '--jobs'"])
        cases[f"{command} --jobs many"] = (
            [*argv, "--jobs", "many"], 2, ["Invalid value for '--jobs'", "many"]
        )
        cases[f"{command} missing recipe"] = (
            [command, "{tmp}/missing.toml", *argv[2:]], 2, ["missing.toml: no such recipe file"]
        )
    long_name = "n" * 300
    cases["build --out with a name over NAME_MAX"] = (
        ["build", RECIPE, "--out", f"{{tmp}}/{long_name}/dist"], 2,
        [f"--out {{tmp}}/{long_name}/dist: the name", "is longer than 255 bytes"],
    )
    deep = "/".join(["d" * 200] * 25)
    cases["shard --out over PATH_MAX"] = (
        ["shard", RECIPE, "--index", "0", "--out", f"{{tmp}}/{deep}"], 2,
        ["the path is longer than 4096 bytes"],
    )
    for value in ("/etc", "../..", "a/b", ".hidden", "x" * 101):
        for command, argv in job_commands.items():
            cases[f"{command} --namespace {value[:12]}"] = (
                [*argv, "--namespace", value], 2, ["Invalid value for '--namespace'", value]
            )
    cases["build --lock-timeout nan"] = (
        ["build", RECIPE, "--lock-timeout", "nan"], 2, ["Invalid value for '--lock-timeout'"]
    )
    for command, argv in (("link", job_commands["link"]),
                          ("shard-plan", ["shard-plan", "{file}", "--count", "2", "--out",
                                          "{tmp}/map.json"])):
        for value in ("0", "-1", "lots", "9" * 400):
            cases[f"{command} --max-unpacked-size {value[:10]}"] = (
                [*argv, "--max-unpacked-size", value], 2,
                ["Invalid value for '--max-unpacked-size'", value[:40]],
            )
        for value in ("0", "-1", "many"):
            cases[f"{command} --max-members {value}"] = (
                [*argv, "--max-members", value], 2, ["Invalid value for '--max-members'"]
            )
        cases[f"{command} $KILN_MAX_UNPACKED_SIZE huge"] = (
            [*argv, "KILN_MAX_UNPACKED_SIZE=" + "9" * 400], 2,
            ["KILN_MAX_UNPACKED_SIZE:", "is too large a size"],
        )
        cases[f"{command} $KILN_MAX_MEMBERS not a number"] = (
            [*argv, "KILN_MAX_MEMBERS=\u00b2"], 2, ["KILN_MAX_MEMBERS:", "not a positive whole"]
        )
    for value in ("0", "-1", "257", "two"):
        cases[f"build --shards {value}"] = (
            ["build", RECIPE, "--shards", value], 2, ["Invalid value for '--shards'"]
        )
    for value in ("-1", "soon"):
        cases[f"build --lock-timeout {value}"] = (
            ["build", RECIPE, "--lock-timeout", value], 2, ["Invalid value for '--lock-timeout'"]
        )
    for value in ("-1", "first"):
        cases[f"shard --index {value}"] = (
            ["shard", RECIPE, "--index", value], 2, ["Invalid value for '--index'"]
        )
    cases["shard --index 2 of --count 2"] = (
        ["shard", RECIPE, "--index", "2", "--count", "2"], 2, ["--index 2 is outside 0..1"]
    )
    for command in ("shard", "link"):
        for value in ("0", "-2", "300", "four"):
            argv = job_commands[command]
            argv = [a for a in argv if a not in ("--count", "2")]
            cases[f"{command} --count {value}"] = (
                [*argv, "--count", value], 2, ["Invalid value for '--count'"]
            )
    cases["shard --partition-map missing"] = (
        ["shard", RECIPE, "--index", "0", "--partition-map", "{tmp}/map.json"], 2,
        ["Invalid value for '--partition-map'", "map.json"],
    )
    cases["shard --partition-map a directory"] = (
        ["shard", RECIPE, "--index", "0", "--partition-map", "{dir}"], 2,
        ["Invalid value for '--partition-map'", "is a directory"],
    )
    cases["link --archives missing"] = (
        ["link", RECIPE, "--archives", "{tmp}/nowhere"], 2,
        ["--archives {tmp}/nowhere is not a directory", "does not exist"],
    )
    cases["link --archives a file"] = (
        ["link", RECIPE, "--archives", "{file}"], 2, ["--archives {file} is not a directory"]
    )

    for what, (path, message) in BAD_OUT_FILES.items():
        if what == "a directory":  # click's own check (dir_okay=False) comes first here
            cases[f"ci github --out {what}"] = (
                ["ci", "github", RECIPE, "--out", path], 2,
                ["Invalid value for '--out'", f"'{path}' is a directory"],
            )
        else:
            cases[f"ci github --out {what}"] = (
                ["ci", "github", RECIPE, "--out", path], 2, [f"--out {path}", message]
            )
        cases[f"shard-plan --out {what}"] = (
            ["shard-plan", "{file}", "--count", "2", "--out", path], 2, [f"--out {path}", message]
        )
        cases[f"bench report --out {what}"] = (
            ["bench", "report", "--out", path], 2, [f"--out {path}", message]
        )
        cases[f"bench run --store {what}"] = (
            ["bench", RECIPE, "--store", path], 2, [f"--store {path}", message]
        )
    for what, (path, message) in BAD_OUT_DIRS.items():
        for option in ("--cache-dir", "--workdir"):
            cases[f"bench run {option} {what}"] = (
                ["bench", RECIPE, option, path], 2, [f"{option} {path}", message]
            )
    cases["bench run $KILN_HOME under a file"] = (
        ["bench", RECIPE, "KILN_HOME={file}/home"], 2, ["$KILN_HOME", "{file} is a file"]
    )
    for option, value in (("--jobs", "0"), ("--jobs", "x"), ("--repeat", "0"),
                          ("--repeat", "-1"), ("--shards", "0"), ("--shards", "1000")):
        cases[f"bench run {option} {value}"] = (
            ["bench", RECIPE, option, value], 2, [f"Invalid value for '{option}'"]
        )
    cases["bench run spelled out, --jobs 0"] = (
        ["bench", "run", RECIPE, "--jobs", "0"], 2, ["Invalid value for '--jobs'"]
    )
    cases["bench run missing recipe"] = (
        ["bench", "{tmp}/missing.toml"], 2, ["missing.toml: no such recipe file"]
    )
    cases["bench report --store a directory"] = (
        ["bench", "report", "--store", "{dir}"], 2, ["results store {dir} is a directory"]
    )
    cases["bench report --store garbage"] = (
        ["bench", "report", "--store", "{garbage}"], 2, ["corrupt store: {garbage}"]
    )
    cases["bench report --format pdf"] = (
        ["bench", "report", "--format", "pdf"], 2, ["Invalid value for '--format'"]
    )

    for value in ("0", "-1", "lots"):
        cases[f"shard-plan --count {value}"] = (
            ["shard-plan", "{file}", "--count", value, "--out", "{tmp}/map.json"], 2,
            ["Invalid value for '--count'"],
        )
    cases["shard-plan missing source"] = (
        ["shard-plan", "{tmp}/gone.tar.gz", "--count", "2", "--out", "{tmp}/map.json"], 2,
        ["gone.tar.gz"],
    )
    cases["verify missing wheel"] = (
        ["verify", "{tmp}/a.whl", "{tmp}/b.whl"], 2, ["{tmp}/a.whl: no such wheel"]
    )
    cases["verify a file that is not a wheel"] = (
        ["verify", "{garbage}", "{garbage}"], 2, ["{garbage}: not a wheel"]
    )
    cases["matrix missing recipe"] = (
        ["matrix", "{tmp}/missing.toml"], 2, ["missing.toml: no such recipe file"]
    )
    cases["matrix --skip-existing a file"] = (
        ["matrix", RECIPE, "--skip-existing", "{file}"], 2,
        ["Invalid value for '--skip-existing'", "is a file"],
    )
    cases["ci github missing recipe"] = (
        ["ci", "github", "{tmp}/missing.toml", "--out", "{tmp}/w.yml"], 2,
        ["missing.toml: no such recipe file"],
    )
    cases["recipe check missing file"] = (
        ["recipe", "check", "{tmp}/missing.toml"], 2, ["missing.toml: no such recipe file"]
    )
    cases["recipe check garbage"] = (
        ["recipe", "check", "{garbage}"], 2, ["{garbage}: not UTF-8 text"]
    )
    cases["recipe schema extra argument"] = (
        ["recipe", "schema", "{file}"], 2, ["unexpected extra argument"]
    )
    return cases


CASES = _cases()
COMMANDS = ("build", "shard", "link", "shard-plan", "verify", "matrix", "ci github", "bench run",
            "bench report", "recipe check", "recipe schema")


def test_the_table_covers_every_subcommand() -> None:
    for command in COMMANDS:
        names = [name for name in CASES if name.startswith(command + " ")]
        assert names, f"no case for kiln {command}"


@pytest.fixture
def place(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "afile").write_text("a regular file\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "garbage").write_bytes(bytes(range(256)))
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    return {"tmp": str(tmp_path), "file": str(tmp_path / "afile"),
            "dangling": str(tmp_path / "dangling"),
            "dir": str(tmp_path / "adir"), "garbage": str(tmp_path / "garbage")}


def run_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    argv: list[str], env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """``kiln ARGV`` in this process: (exit code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path / "state"))
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    return kiln_in_process(monkeypatch, capsys, [*argv])


def no_work_started(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for made in ("work", "sources", "envs", "wheels"):
        assert not (home / made).exists(), f"work started: {home / made} exists"
    assert not list(tmp_path.glob("state/**/results.jsonl")), "a bench record was written"
    assert not list(tmp_path.rglob(".kiln-write-probe-*")), "a probe file was left behind"


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    place: dict[str, str], case: str,
) -> None:
    argv, code, texts = CASES[case]
    env = dict(a.format(**place).split("=", 1) for a in argv if a.startswith("KILN_"))
    argv = [a.format(**place) for a in argv if not a.startswith("KILN_")]
    started = time.monotonic()
    exit_code, _, err = run_main(monkeypatch, capsys, tmp_path, argv, env)
    assert time.monotonic() - started < 20, "a refusal must come before any work"
    assert "Traceback" not in err and "internal error" not in err, err
    assert exit_code == code, err
    shown = " ".join(err.split())
    for text in texts:
        assert text.format(**place) in shown, err
    no_work_started(tmp_path)
    assert (tmp_path / "afile").read_text() == "a regular file\n"


def test_builder_busy_is_exit_6_before_any_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from wheelkiln.builder_lock import HELD_ENV, BuilderLock

    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path / "state"))
    holder = BuilderLock(command="another build")
    assert holder.try_acquire()
    monkeypatch.delenv(HELD_ENV)  # held by "someone else", not inherited by kiln below
    try:
        code, _, err = run_main(monkeypatch, capsys, tmp_path,
                                ["build", RECIPE, "--lock-timeout", "0"])
    finally:
        holder.release()
    assert code == 6, err
    assert "Another build holds the builder lock" in " ".join(err.split())
    assert "another build" in err
    no_work_started(tmp_path)


@pytest.mark.parametrize(
    ("errno_", "reason", "code", "next_step"),
    [(13, "Permission denied", 2, "Check that the path exists and is writable"),
     (28, "No space left on device", 1, "free space or choose another location")],
)
def test_an_os_error_that_escapes_a_command_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    errno_: int, reason: str, code: int, next_step: str,
) -> None:
    """No check catches everything (a disk filling up, a directory removed under us): the
    boundary names the path instead of printing a traceback."""
    from wheelkiln.matrix import render

    def fail(*args: object) -> None:
        raise OSError(errno_, reason, "/srv/ci/kiln.yml")

    monkeypatch.setattr(render, "write_workflow", fail)
    exit_code, _, err = run_main(monkeypatch, capsys, tmp_path,
                                 ["ci", "github", RECIPE, "--out", str(tmp_path / "w.yml")])
    assert exit_code == code, err
    assert "Traceback" not in err
    assert err.splitlines()[0] == f"error: /srv/ci/kiln.yml: {reason}."
    assert next_step in " ".join(err.split())


# --- through a real process and a pipe, as CI runs it --------------------------------


def kiln(tmp_path: Path, *args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"KILN_HOME": str(tmp_path / "home"), "KILN_STATE_HOME": str(tmp_path / "state"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "fresh-home")}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "wheelkiln", *args], capture_output=True,
                          text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, check=False)


def test_shard_and_link_refuse_a_bad_out_before_building(tmp_path: Path) -> None:
    """The issue: both crashed only after the whole build. Now: refused at once."""
    blocker = tmp_path / "dist"
    blocker.write_text("not a directory\n")
    (tmp_path / "shards").mkdir()
    for argv in (["shard", RECIPE, "--index", "0", "--count", "2", "--out", str(blocker)],
                 ["link", RECIPE, "--archives", str(tmp_path / "shards"), "--out",
                  str(blocker / "wheels")]):
        started = time.monotonic()
        result = kiln(tmp_path, *argv)
        assert time.monotonic() - started < 30
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert f"--out {argv[-1]}: {blocker} is a file" in " ".join(result.stderr.split())
        assert not (tmp_path / "home").exists(), "a work tree was created"
    assert blocker.read_text() == "not a directory\n"


@pytest.mark.parametrize("columns", [None, "20"])
def test_errors_on_a_pipe_are_never_wrapped(tmp_path: Path, columns: str | None) -> None:
    """A long path in an error to a pipe: one line, whatever COLUMNS says and however
    long the temporary path is."""
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 6)
    deep.mkdir(parents=True)
    blocker = deep / "file"
    blocker.write_text("x")
    out = blocker / "dist"
    result = kiln(tmp_path, "build", RECIPE, "--out", str(out), columns=columns)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: --out {out}: {blocker} is a file, so no directory can be made under it."
    assert lines[1] == "Give a directory path (it is created if missing), or move the file away."


@pytest.mark.parametrize("columns", [None, "20"])
def test_warnings_on_a_pipe_are_never_wrapped(tmp_path: Path, columns: str | None) -> None:
    deep = tmp_path.joinpath(*["another-long-directory-name"] * 6)
    deep.mkdir(parents=True)
    store = deep / "results.jsonl"
    record = {"target": "demo", "cell": "demo-c", "builder": "b", "arch": "x86_64", "jobs": 1,
              "shards": 1, "scenario": "cold", "status": "ok", "step_wall_seconds": 1.0,
              "run_id": "r", "repeat": 0, "kind": "bench", "bench_schema": 1}
    store.write_text(json.dumps(record) + "\n" + '{"target": "demo", "scen')
    result = kiln(tmp_path, "bench", "report", "--store", str(store), columns=columns)
    assert result.returncode == 0, result.stderr
    warning = f"warning: {store}: line 2 is a torn last line (no newline at the end of the file;"
    assert any(line.startswith(warning) and line.endswith("skipped")
               for line in result.stderr.splitlines()), result.stderr


def test_paths_are_shown_as_written_not_as_markup(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    """Output paths are data: brackets in them are neither styling nor a crash."""
    out = tmp_path / "[bold]docs[/x]" / "bench.md"
    code, _, err = run_main(monkeypatch, capsys, tmp_path, ["bench", "report", "--out", str(out)])
    assert code == 0, err
    assert "Traceback" not in err
    assert err.splitlines() == [f"Wrote {out}"]
    assert out.read_text(encoding="utf-8").startswith("## Bench results")


# --- output locations against each other and against the source ----------------------


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A recipe for a pure-Python package whose local source is ``tmp/proj/pkg``."""
    package = tmp_path / "proj" / "pkg"
    package.mkdir(parents=True)
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tiny"\nversion = "0.1"\n'
    )
    (package / "tiny.py").write_text("")
    recipe = tmp_path / "proj" / "recipes" / "tiny.toml"
    recipe.parent.mkdir()
    recipe.write_text('name = "tiny"\n[source]\npath = "../pkg"\n[cache]\nbackend = "none"\n')
    return recipe


def _cell_id(recipe: Path) -> str:
    from wheelkiln.matrix.cells import select_cell
    from wheelkiln.recipe.load import load_recipe

    return select_cell(load_recipe(recipe).recipe, None).id


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


def test_out_in_a_job_directory_is_refused_and_its_wheels_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    tiny: Path,
) -> None:
    """The issue: the build emptied the cell's job directory, and the wheels in --out
    with it."""
    job_dir = tmp_path / "home" / "work" / _cell_id(tiny)
    older = job_dir / "wheels" / "older-1.0-py3-none-any.whl"
    older.parent.mkdir(parents=True)
    older.write_bytes(b"precious")
    code, _, err = run_main(monkeypatch, capsys, tmp_path,
                            ["build", str(tiny), "--no-wheel-cache", "--out", str(older.parent)])
    assert code == 2, err
    assert " ".join(err.split()).startswith(
        f"error: --out {older.parent} lies in {job_dir}, named as a job directory of "
        f"{job_dir.name}: kiln empties those when it builds the cell in the work directory "
        f"{job_dir.parent} ($KILN_HOME/work), and what is there would be deleted. "
        f"Choose a location outside {job_dir}."
    ), err
    assert older.read_bytes() == b"precious"
    assert sorted(p.name for p in job_dir.iterdir()) == ["wheels"], "work started"


def _overlaps(cell: str) -> dict[str, tuple[list[str], str]]:
    """name → (arguments after ``build RECIPE``, the start of the refusal), with {tmp},
    {home}, {job} (the cell's job directory in the default work directory) and {pkg}
    (the local source) filled in."""
    cache_in_job = "{home}/work/" + cell + "-link.cache"
    return {
        "--out in a shard's job directory": (
            ["--out", "{home}/work/" + cell + "-shard-0-of-2/dist"],
            "--out {home}/work/" + cell + "-shard-0-of-2/dist lies in {home}/work/" + cell
            + "-shard-0-of-2, named as a job directory of " + cell,
        ),
        "--out in the environments' view": (
            ["--out", "{home}/work/.envs/dist"],
            "--out {home}/work/.envs/dist lies in {home}/work/.envs, named as a job directory",
        ),
        "--cache-dir in a job directory's companion": (
            ["--cache-dir", cache_in_job],
            "--cache-dir " + cache_in_job + " is " + cache_in_job + ", named as a job directory",
        ),
        "--out is the work directory": (
            ["--out", "{tmp}/w", "--workdir", "{tmp}/w"],
            "the work directory {tmp}/w (--workdir) is --out {tmp}/w: the job trees would be "
            "mixed with the wheels.",
        ),
        "--workdir in --out": (
            ["--out", "{tmp}/d", "--workdir", "{tmp}/d/work"],
            "the work directory {tmp}/d/work (--workdir) lies in --out {tmp}/d:",
        ),
        "--out is --cache-dir": (
            ["--out", "{tmp}/c", "--cache-dir", "{tmp}/c"],
            "--out {tmp}/c is also --cache-dir: a cache evicts files it did not write",
        ),
        "--out in --cache-dir": (
            ["--out", "{tmp}/c/dist", "--cache-dir", "{tmp}/c"],
            "--out {tmp}/c/dist and --cache-dir {tmp}/c lie one in the other",
        ),
        "--workdir in --cache-dir": (
            ["--workdir", "{tmp}/c/work", "--cache-dir", "{tmp}/c"],
            "the work directory {tmp}/c/work (--workdir) lies in --cache-dir {tmp}/c: a cache "
            "evicts files it did not write, the job trees' among them.",
        ),
        "--out in the wheel cache": (
            ["--out", "{home}/wheels/mine"],
            "--out {home}/wheels/mine lies in {home}/wheels, the wheel cache, whose entries "
            "kiln replaces and prunes by itself.",
        ),
        "--out in the default ccache directory": (
            ["--out", "{home}/ccache/dist"],
            "--out {home}/ccache/dist lies in {home}/ccache, the default ccache cache,",
        ),
        "--workdir in the build environments": (
            ["--workdir", "{home}/envs/w"],
            "the work directory {home}/envs/w (--workdir) lies in {home}/envs, the build "
            "environments,",
        ),
        "--cache-dir in the fetched sources": (
            ["--cache-dir", "{home}/sources/c"],
            "--cache-dir {home}/sources/c lies in {home}/sources, the fetched sources,",
        ),
        "--workdir in the source": (
            ["--workdir", "{pkg}/work"],
            "the work directory {pkg}/work (--workdir) lies in the source tree {pkg} "
            "({tmp}/proj/recipes/tiny.toml: source.path): each job copies the source into the "
            "work directory, so the copy would copy itself without end. Choose a --workdir "
            "outside {pkg}.",
        ),
        "--workdir is the source": (
            ["--workdir", "{pkg}"],
            "the work directory {pkg} (--workdir) is the source tree {pkg}",
        ),
        "$KILN_HOME in the source": (
            ["KILN_HOME={pkg}/.kiln"],
            "the work directory {pkg}/.kiln/work ($KILN_HOME/work) lies in the source tree "
            "{pkg} ({tmp}/proj/recipes/tiny.toml: source.path): each job copies the source "
            "into the work directory, so the copy would copy itself without end. Choose a "
            "--workdir outside {pkg} (or set $KILN_HOME elsewhere).",
        ),
        "--out is the source": (
            ["--out", "{pkg}"],
            "--out {pkg} is the source tree ({tmp}/proj/recipes/tiny.toml: source.path): what "
            "kiln writes there would become part of the next build's source.",
        ),
        "--out through a link to the source": (
            ["--out", "{tmp}/link-to-pkg"],
            "--out {pkg} is the source tree",
        ),
        "$KILN_STATE_HOME is the source": (
            ["--workdir", "{tmp}/w", "KILN_STATE_HOME={pkg}"],
            "$KILN_STATE_HOME {pkg} is the source tree",
        ),
    }


@pytest.mark.parametrize("case", sorted(_overlaps("CELL")))
def test_locations_that_would_destroy_each_other_are_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    tiny: Path, case: str,
) -> None:
    (tmp_path / "link-to-pkg").symlink_to(tiny.parent.parent / "pkg")
    place = {"tmp": str(tmp_path), "home": str(tmp_path / "home"),
             "pkg": str(tiny.parent.parent / "pkg")}
    argv, message = _overlaps(_cell_id(tiny))[case]
    env = dict(a.format(**place).split("=", 1) for a in argv if a.startswith("KILN_"))
    argv = [a.format(**place) for a in argv if not a.startswith("KILN_")]
    source_before = _tree(tiny.parent.parent)
    code, _, err = run_main(monkeypatch, capsys, tmp_path, ["build", str(tiny), *argv], env)
    assert code == 2, err
    assert " ".join(err.split()).startswith("error: " + message.format(**place)), err
    assert _tree(tiny.parent.parent) == source_before, "the source was written to"
    for home in (tmp_path / "home", tiny.parent.parent / "pkg" / ".kiln"):
        for made in ("work", "sources", "envs", "wheels"):
            assert not (home / made).exists(), f"work started: {home / made} exists"


@pytest.mark.parametrize("option", ["--out", "--workdir", "--cache-dir"])
def test_an_empty_path_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    tiny: Path, option: str,
) -> None:
    """``--out "$DIST"`` with DIST unset wrote into the current directory."""
    code, _, err = run_main(monkeypatch, capsys, tmp_path, ["build", str(tiny), option, ""])
    assert code == 2, err
    assert (f"Invalid value for '{option}': an empty path names no location; give a "
            "directory (. for the current one).") in " ".join(err.split())
    assert not (tmp_path / "home" / "work").exists()


STOPPED = 97
"""The exit of a stand-in for the build, once it has seen what it was given."""


def _capture_build(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Stand in for ``run_build``: record its arguments and stop the command there."""
    from wheelkiln.builder import job

    seen: dict[str, object] = {}

    def fake(loaded: object, cell: object, options: object, out_dir: Path,
             **kwargs: object) -> None:
        seen.update(loaded=loaded, options=options, out_dir=out_dir)
        raise SystemExit(STOPPED)

    monkeypatch.setattr(job, "run_build", fake)
    return seen


def test_a_tilde_means_home_everywhere_it_is_checked_and_used(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    tiny: Path,
) -> None:
    """The issue: the check expanded ``~`` and the build did not, so ``--out '~/x'``
    wrote into a directory named ``~`` (or failed at the end, from a directory where
    nothing can be made)."""
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    seen = _capture_build(monkeypatch)
    code, _, err = run_main(monkeypatch, capsys, tmp_path,
                            ["build", str(tiny), "--out", "~/dist", "--workdir", "~/work",
                             "--cache-dir", "~/ccache"], {"KILN_HOME": "~/kiln"})
    assert code == STOPPED, err
    options = seen["options"]
    assert seen["out_dir"] == home / "dist"
    assert options.workdir == home / "work"  # type: ignore[attr-defined]
    assert options.cache_dir == home / "ccache"  # type: ignore[attr-defined]
    from wheelkiln.paths import kiln_home, resolve_workdir, state_home

    assert kiln_home() == home / "kiln"
    assert resolve_workdir(None) == home / "kiln" / "work"
    monkeypatch.setenv("KILN_STATE_HOME", "~/state")
    assert state_home() == home / "state"
    assert not list(tmp_path.rglob("~")), "a directory named ~ was made"


def test_out_in_the_source_is_left_out_of_its_copy_and_digest(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    tiny: Path,
) -> None:
    """``kiln build . --out wheels`` in a project: each build's wheel and record (with
    its timestamp) became source, so the next digest differed and the wheel cache never
    served. Names are matched literally, glob characters and all."""
    from wheelkiln.builder.source import source_digest

    package = tiny.parent.parent / "pkg"
    seen = _capture_build(monkeypatch)
    code, _, err = run_main(monkeypatch, capsys, tmp_path,
                            ["build", str(tiny), "--out", str(package / "out[1]" / "w*")])
    assert code == STOPPED, err
    exclude = seen["loaded"].recipe.source.exclude  # type: ignore[attr-defined]
    assert exclude == ("build", "dist", "_skbuild", ".eggs", "out[[]1]/w[*]")
    before = source_digest(package, exclude)
    (package / "out[1]" / "w*").mkdir(parents=True)
    (package / "out[1]" / "w*" / "tiny-0.1-py3-none-any.whl").write_bytes(b"a wheel")
    assert source_digest(package, exclude) == before
    (package / "out[1]" / "wx").mkdir()  # matched by the glob, not by the name
    (package / "out[1]" / "wx" / "data.txt").write_text("source")
    assert source_digest(package, exclude) != before


def test_an_out_already_excluded_leaves_the_recipe_as_it_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    tiny: Path,
) -> None:
    """``--out dist`` at the package's root is a build output already: the recipe, which
    the wheel cache's key holds, is unchanged."""
    from wheelkiln.recipe.load import load_recipe

    seen = _capture_build(monkeypatch)
    code, _, err = run_main(monkeypatch, capsys, tmp_path,
                            ["build", str(tiny), "--out", str(tiny.parent.parent / "pkg" / "dist")])
    assert code == STOPPED, err
    assert seen["loaded"] == load_recipe(tiny)


@pytest.mark.parametrize("wheel_cache", [True, False])
@pytest.mark.parametrize(("line", "message"), [
    ('requires = "setuptools>=64"',
     "pyproject.toml: [build-system] requires must be a list of strings, not a string. "
     "Fix the package's pyproject.toml, e.g. requires = [\"setuptools>=64\"]."),
    ("requires = []\nx = " + "9" * 5000,
     "pyproject.toml: not valid TOML: Exceeds the limit (4300 digits) for integer string "
     "conversion: value has 5000 digits. Fix the package."),
])
def test_a_wrong_build_system_table_is_a_named_refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    tiny: Path, wheel_cache: bool, line: str, message: str,
) -> None:
    """The wheel cache reads the table first; without it, requires-python is read first,
    and neither may end in a traceback (exit 70)."""
    pyproject = tiny.parent.parent / "pkg" / "pyproject.toml"
    pyproject.write_text(f"[build-system]\n{line}\n")
    argv = ["build", str(tiny), *([] if wheel_cache else ["--no-wheel-cache"])]
    code, _, err = run_main(monkeypatch, capsys, tmp_path, argv)
    assert code == 2, err
    # Read in the source, or in the job's copy of it.
    tree = pyproject.parent if wheel_cache else tmp_path / "home" / "work" / _cell_id(tiny) / "src"
    shown = " ".join(err[err.index("error: "):].split())
    assert shown == f"error: {tree}/{message}", err


def test_link_refuses_archives_in_a_directory_it_empties(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    tiny: Path,
) -> None:
    """The link job clears ``<cell>-link.shards`` before it reads the archives: ones
    kept there would be gone before they were read."""
    archives = tmp_path / "home" / "work" / f"{_cell_id(tiny)}-link.shards"
    archives.mkdir(parents=True)
    kept = archives / f"{_cell_id(tiny)}-shard-0-of-2.tar.gz"
    kept.write_bytes(b"an archive")
    code, _, err = run_main(monkeypatch, capsys, tmp_path,
                            ["link", str(tiny), "--archives", f"~/{archives.name}"],
                            {"HOME": str(archives.parent)})
    assert code == 2, err
    assert " ".join(err.split()).startswith(
        f"error: --archives {archives} is {archives}, named as a job directory of "
        f"{_cell_id(tiny)}"
    ), err
    assert kept.read_bytes() == b"an archive"


@pytest.mark.parametrize(
    "command", [["bench", "run", "{recipe}", "--scenario", "cold"], ["fleet", "run", "{recipe}"]]
)
def test_bench_and_fleet_refuse_a_workdir_in_the_source_before_any_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    tiny: Path, command: list[str],
) -> None:
    pkg = tiny.parent.parent / "pkg"
    source_before = _tree(tiny.parent.parent)
    argv = [word.format(recipe=tiny) for word in command]
    code, _, err = run_main(monkeypatch, capsys, tmp_path, [*argv, "--workdir", f"{pkg}/work"])
    assert code == 2, err
    assert " ".join(err.split()).startswith(
        f"error: the work directory {pkg}/work (--workdir) lies in the source tree {pkg} "
        f"({tiny}: source.path): each job copies the source into the work directory, so the "
        f"copy would copy itself without end. Choose a --workdir outside {pkg}."
    ), err
    assert _tree(tiny.parent.parent) == source_before, "the source was written to"
    assert not (tmp_path / "home" / "envs").exists(), "work started"


def test_a_quoted_tilde_in_a_file_option_means_home(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    """A quoted ``'~/...'`` reaches kiln unexpanded: every location option expands it."""
    home = tmp_path / "user"
    home.mkdir()
    code, _, err = run_main(monkeypatch, capsys, tmp_path,
                            ["bench", "report", "--store", "~/results.jsonl", "--out",
                             "~/report.md"], {"HOME": str(home)})  # fmt: skip
    assert code == 0, err
    assert (home / "report.md").is_file() and not (tmp_path / "~").exists()
    assert f"No bench records in {home / 'results.jsonl'}." in (home / "report.md").read_text()


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["bench", "report", "--out", ""], "a file name"),
        (["fleet", "run", "--runs-dir", ""], "a directory (. for the current one)"),
    ],
)
def test_an_empty_location_is_refused_saying_what_to_give(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    argv: list[str], wanted: str,
) -> None:
    code, _, err = run_main(monkeypatch, capsys, tmp_path, argv)
    assert code == 2, err
    assert f"an empty path names no location; give {wanted}." in " ".join(err.split()), err
