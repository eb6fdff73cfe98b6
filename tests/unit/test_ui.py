"""Output read by a pipe or a CI log does not depend on where the command started:
messages are never hard-wrapped, tables are laid out at one fixed width, and values
(paths) are shown whole."""

from __future__ import annotations

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
