"""Output read by a pipe or a CI log does not depend on where the command started:
messages are never hard-wrapped, tables are laid out at one fixed width, and values
(paths) are shown whole."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from wheelkiln import ui
from wheelkiln.cli.options import summary_table as _summary_table

LONG_PATH = "/tmp/" + "a-rather-long-directory-name/" * 4 + "demo_cpp-0.1.0-cp311-linux_x86_64.whl"


@pytest.mark.parametrize("columns", [None, "20", "300"])
def test_without_a_terminal_output_ignores_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], columns: str | None
) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    console = ui._Console(stderr=True, highlight=False)
    monkeypatch.setattr(ui, "console", console)
    assert not console.is_terminal
    assert console.width == ui.LOG_WIDTH
    ui.warn(f"{LONG_PATH}: line 7 is a torn last line (no newline at the end of the file), skipped")
    ui.info(f"Wrote {LONG_PATH}: 3 recipes, 12 cells")
    ui.error(f"--out {LONG_PATH}: cannot write in /proc (No such file or directory).",
             hint="Choose a location you can write to (it is created if missing).")
    short = LONG_PATH.replace("a-rather-long-directory-name/", "", 2)  # fits a 160 table
    console.print(_summary_table("kiln build", [("wheel", short), ("cell", "demo"),
                                                ("record", LONG_PATH + "x" * 100)]))
    lines = capsys.readouterr().err.splitlines()
    assert lines[:4] == [
        f"warning: {LONG_PATH}: line 7 is a torn last line (no newline at the end of the file), "
        "skipped",
        f"Wrote {LONG_PATH}: 3 recipes, 12 cells",
        f"error: --out {LONG_PATH}: cannot write in /proc (No such file or directory).",
        "Choose a location you can write to (it is created if missing).",
    ]
    assert any(short in line for line in lines[4:]), lines
    # Longer than the table is wide: folded inside its cell, never cut off.
    record_cell = "".join(line.split("│")[2].strip() for line in lines[4:] if line.count("│") == 3
                          and line.split("│")[1].strip() in ("record", ""))
    assert LONG_PATH + "x" * 100 in record_cell


def test_an_explicit_width_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "20")
    assert ui._Console(width=50).width == 50


def test_info_markup_still_works_and_a_broken_tag_is_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ui.info("[green]ok[/green] built")
    ui.info("Wrote /tmp/out[/x]/report.md")
    assert capsys.readouterr().err.splitlines() == ["ok built", "Wrote /tmp/out[/x]/report.md"]


def test_emoji_codes_in_a_path_print_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """rich would turn ``:fire:`` in a TU's path into an emoji; kiln writes no codes."""
    path = "/work/src/kernels:fire:/a:thumbs_up:.cu"
    ui.info(f"missed {path}")
    ui.console.print(_summary_table("kiln link", [("tu", path)]))
    with ui.step(f"Building {path}"):
        pass
    err = capsys.readouterr().err
    assert f"missed {path}\n" in err
    assert err.count(path) == 4 and "\N{FIRE}" not in err


def test_without_a_terminal_a_long_step_says_where_it_is_every_interval(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ui, "console", ui._Console(stderr=True, highlight=False))
    monkeypatch.setenv("KILN_PROGRESS_SECONDS", "0.05")
    with ui.step("Building demo") as running:
        running.line("-- Configuring done")  # no progress: not shown
        running.line("[3/27] Building CUDA object k03.cu.o [/dim] kept as text")
        time.sleep(0.3)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "▶ Building demo"
    beats = lines[1:-1]
    assert len(beats) >= 2, lines
    assert all(
        beat == "  … Building demo: 0 s so far; [3/27] Building CUDA object k03.cu.o [/dim] kept as text"
        for beat in beats
    ), beats
    assert lines[-1].startswith("✓ Building demo (")


def test_a_quick_step_says_nothing_between_its_start_and_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ui, "console", ui._Console(stderr=True, highlight=False))
    monkeypatch.delenv("KILN_PROGRESS_SECONDS", raising=False)
    with ui.step("Building demo") as running:
        running.line("[1/2] Building CXX object a.o")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0] == "▶ Building demo", lines


@pytest.mark.parametrize("value", ["", "0", "-3", "nan", "inf", "soon"])
def test_an_interval_that_is_no_positive_number_is_the_default(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("KILN_PROGRESS_SECONDS", value)
    assert ui._progress_every() == ui.PROGRESS_EVERY


def test_where_work_runs_elsewhere_its_logs_say_where_it_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "build.log"
    log.write_text("+ backend\n" + "x" * 40_000 + "\n[12/80] Linking target a.so\nwarning: slow\n")
    assert ui.latest_progress(log) == "[12/80] Linking target a.so"
    assert ui.latest_progress(tmp_path / "absent.log") is None
    monkeypatch.setattr(ui, "console", ui._Console(stderr=True, highlight=False))
    monkeypatch.setenv("KILN_PROGRESS_SECONDS", "0.05")
    with ui.step("Compiling 2 shards", where=lambda: "shard 1/2: " + str(ui.latest_progress(log))):
        time.sleep(0.2)
    beats = capsys.readouterr().err.splitlines()[1:-1]
    assert beats and all(
        beat == "  … Compiling 2 shards: 0 s so far; shard 1/2: [12/80] Linking target a.so"
        for beat in beats
    ), beats


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.4, "0 s"), (59.9, "59 s"), (303, "5 min 3 s"), (7620, "2 h 7 min")],
)
def test_elapsed_reads_for_people(seconds: float, shown: str) -> None:
    assert ui.elapsed(seconds) == shown


def test_on_a_terminal_the_spinner_shows_a_build_line_as_text() -> None:
    shown: list[str] = []

    class Spinner:
        def update(self, text: str) -> None:
            shown.append(text)

    running = ui.Step("Building demo", Spinner())  # type: ignore[arg-type]
    running.line("[1/2] Building CXX object out[/x]/a.o")
    assert shown == ["Building demo: [dim][1/2] Building CXX object out\\[/x]/a.o[/dim]"]
    ui.console.print(shown[0])  # rich reads it without a MarkupError


def test_help_without_a_terminal_ignores_columns() -> None:
    import os
    import subprocess
    import sys

    def help_text(columns: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "wheelkiln", "build", "--help"],
            capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": columns},
        )  # fmt: skip
        return done.stdout

    narrow, wide = help_text("20"), help_text("300")
    assert narrow == wide
    assert max(len(line) for line in narrow.splitlines()) <= 100
    assert "Build one cell of RECIPE (a path, or a name under recipes/) into a wheel." in narrow
