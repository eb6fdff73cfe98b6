"""Bench reports: readable Markdown, JSON, and the CLI's handling of bad input (clear
message, non-zero exit, store untouched) and torn stores (warn, still render)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from wheelkiln.bench import store
from wheelkiln.bench.report import render_html, render_json, render_markdown, seconds
from wheelkiln.bench.stats import summarize
from wheelkiln.cli.bench import bench_group
from wheelkiln.errors import KilnError


def rec(scenario: str, wall: float, **extra: Any) -> dict[str, Any]:
    return {"target": "demo", "cell": "demo-py3.11-linux-x86_64", "builder": "farm|1",
            "arch": "x86_64", "jobs": 8, "shards": 1, "scenario": scenario, "status": "ok",
            "step_wall_seconds": wall, "cache": {"hits": 0 if scenario == "cold" else 24,
                                                 "misses": 24 if scenario == "cold" else 0},
            **extra}


RECORDS = [rec("cold", 200.0), rec("cold", 220.0), rec("warm", 11.0), rec("hot", 10.0),
           rec("hot", 12.0), rec("warm", 99.0, status="failed")]


def test_markdown_tables() -> None:
    text = render_markdown(summarize(RECORDS), source="/s/results.jsonl")
    lines = text.splitlines()
    assert lines[0] == "## Bench results"
    header = next(line for line in lines if line.startswith("| target"))
    assert header == ("| target | builder | arch | jobs | shards | scenario | n | median wall "
                      "| min–max | hits/misses |")
    rows = [line for line in lines if line.startswith("| demo")]
    assert rows[0] == ("| demo-py3.11-linux-x86_64 | farm\\|1 | x86_64 | 8 | 1 | cold | 2 | "
                       "210 s | 200–220 s | 0/24 |")
    assert "| warm | 1 (+1 failed) | 11.0 s |" in rows[1]
    assert "### Ratios" in text
    assert any("| cold/hot | 19.09× | 2/2 |" in line for line in lines)
    assert any("| warm/hot | 1.00× | 1/2 |" in line for line in lines)


def test_markdown_for_an_empty_store_says_what_to_do() -> None:
    assert "kiln bench TARGET" in render_markdown(summarize([]))


def test_json_report_round_trips() -> None:
    data = json.loads(render_json(summarize(RECORDS), source="s", warnings=["w"]))
    assert data["records"] == 6 and data["warnings"] == ["w"]
    cold = next(g for g in data["groups"] if g["scenario"] == "cold")
    assert cold["median_wall_seconds"] == 210.0 and cold["n"] == 2 and cold["in_ratios"]
    assert {r["ratio"] for r in data["ratios"]} == {"cold/warm", "cold/hot", "warm/hot"}


def _page_root(page: str) -> Any:
    import xml.etree.ElementTree as ET

    body = page.split("<body>", 1)[1].removesuffix("</body></html>\n")
    return ET.fromstring(f"<div>{body}</div>")  # well-formed, every value escaped


def _points(root: Any) -> list[Any]:
    """The point marks of every plot: vl-convert draws each as a path in the symbol
    mark group."""
    return [path for group in root.iter("{http://www.w3.org/2000/svg}g")
            if group.get("class", "").startswith("mark-symbol role-mark")
            for path in group.findall("{http://www.w3.org/2000/svg}path")]


def test_html_plots_every_run_and_shows_frozen_star_out_of_every_ratio() -> None:
    page = render_html(summarize([*RECORDS, rec("frozen*", 400.0)]), source="<s>")
    root = _page_root(page)
    assert len(_points(root)) == 6  # five successful runs plus frozen*; the failed warm is no point
    assert "&lt;s&gt;" in page and "cold/hot" in page
    assert "<script" not in page and "http" not in page.replace("http://www.w3.org/", "")
    # frozen* is drawn (grey, its own row), marked in the table, and in no ratio.
    assert "frozen* (n=1)" in page and "out of every ratio" in page
    rows = [tr for tr in root.iter("tr") if tr.get("class") == "frozen-star"]
    assert len(rows) == 1 and rows[0].find("td").text == "frozen*"
    assert "frozen" not in " ".join(td.text or "" for table in root.iter("table")
                                    for td in table.iter("td") if "/" in (td.text or ""))
    assert render_html(summarize([])).count("No bench records") == 1


EXTREME_WALLS = {
    "huge": [1e308], "largest float": [1.7976931348623157e308], "inf": [float("inf")],
    "nan": [float("nan")], "negative": [-5.0], "zero": [0.0], "-inf": [float("-inf")],
    "tiny": [1e-300], "subnormal": [5e-324], "both ends": [5e-324, 1e308, 2.0],
}


@pytest.mark.parametrize("case", sorted(EXTREME_WALLS))
def test_every_format_renders_extreme_walls(case: str) -> None:
    """A store anyone can edit may hold any number: every format still renders, the
    points stay inside the plot, a run with no place on a log axis is said to be left
    out, and the JSON stays JSON."""
    import math
    import re

    from wheelkiln.bench.report import PLOT_WIDTH

    walls = EXTREME_WALLS[case]
    summary = summarize([rec("cold", wall) for wall in walls] + [rec("hot", 1.0)])
    page = render_html(summary)
    root = _page_root(page)
    drawn = [wall for wall in walls if math.isfinite(wall) and wall > 0]
    points = _points(root)
    assert len(points) == len(drawn) + 1
    for point in points:
        x = float(re.match(r"translate\(([^,]+),", point.get("transform")).group(1))
        assert 0 <= x <= PLOT_WIDTH, x
    undrawn = len([w for w in walls if not math.isnan(w)]) - len(drawn)
    assert (f"{undrawn} run(s) with a wall time that has no place" in page) == (undrawn > 0)
    data = json.loads(render_json(summary), parse_constant=lambda token: pytest.fail(token))
    assert {g["scenario"] for g in data["groups"]} == {"cold", "hot"}
    assert "| cold |" in render_markdown(summary)


@pytest.mark.parametrize(("value", "shown"), [(None, "–"), (1.234, "1.23 s"), (12.34, "12.3 s"),
                                              (1234.5, "1,234 s"), (1e308, "1e+308 s"),
                                              (float("inf"), "inf s"), (-5.0, "-5.00 s")])
def test_seconds_format(value: float | None, shown: str) -> None:
    assert seconds(value) == shown


def write_store(path: Path, records: list[dict[str, Any]]) -> None:
    for record in records:
        store.append(record, path)


def test_report_cli_warns_about_a_torn_line_and_still_renders(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    write_store(path, RECORDS)
    with path.open("ab") as handle:
        handle.write(b'{"target": "demo", "scen')
    before = path.read_bytes()
    result = CliRunner().invoke(bench_group, ["report", "--store", str(path)])
    assert result.exit_code == 0, result.output
    assert "line 7" in result.stderr and "torn" in result.stderr
    assert "| cold/hot |" in result.stdout
    assert path.read_bytes() == before


def test_report_cli_json_and_target_filter(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    write_store(path, [*RECORDS, {**rec("cold", 5.0), "target": "other", "cell": "other-c"}])
    result = CliRunner().invoke(bench_group, ["report", "--store", str(path), "--format", "json",
                                              "--target", "other"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [g["target"] for g in data["groups"]] == ["other-c"]
    out = tmp_path / "docs" / "bench.md"
    result = CliRunner().invoke(bench_group, ["report", "--store", str(path), "--out", str(out)])
    assert result.exit_code == 0 and out.read_text().startswith("## Bench results")


def test_report_cli_refuses_a_corrupt_store_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    garbage = bytes(range(256)) * 4
    path.write_bytes(garbage)
    result = CliRunner().invoke(bench_group, ["report", "--store", str(path)])
    assert result.exit_code != 0
    assert isinstance(result.exception, KilnError)
    assert "corrupt store" in result.exception.message
    assert path.read_bytes() == garbage


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    path = tmp_path / "demo.toml"
    path.write_text('name = "demo"\n[source]\npath = "pkg"\n')
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-recipe", "--scenario", "cold"], "No recipe named 'no-such-recipe'"),
        (["RECIPE", "--scenario", "lukewarm"], "Invalid value for '--scenario'"),
        (["--scenario", "lukewarm", "RECIPE"], "Invalid value for '--scenario'"),
        (["run", "RECIPE", "--jobs", "0"], "Invalid value for '--jobs'"),
        (["RECIPE", "--scenario", "frozen"], "--destructive"),
        (["RECIPE", "--scenario", "all", "--shards", "4"], "--shards benches cold"),
        (["RECIPE", "--repeat", "0"], "Invalid value for '--repeat'"),
        (["RECIPE", "--cell", "python=2.7"], "matches no cell"),
        (["report", "--format", "pdf"], "Invalid value for '--format'"),
    ],
)
def test_bad_input_is_a_clear_error_and_the_store_is_untouched(
    tmp_path: Path, recipe: Path, args: list[str], message: str
) -> None:
    path = tmp_path / "results.jsonl"
    write_store(path, RECORDS)
    before = path.read_bytes()
    argv = [str(recipe) if a == "RECIPE" else a for a in args] + ["--store", str(path)]
    result = CliRunner().invoke(bench_group, argv, env={"KILN_STATE_HOME": str(tmp_path / "st"),
                                                        "KILN_HOME": str(tmp_path / "home")})
    assert result.exit_code != 0
    shown = result.exception.render() if isinstance(result.exception, KilnError) else result.output
    assert message in shown
    assert path.read_bytes() == before
    assert not (tmp_path / "home").exists()


def test_bench_refuses_a_corrupt_store_before_building(tmp_path: Path, recipe: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"\x00\x01garbage\n\xff\xfe\n")
    before = path.read_bytes()
    result = CliRunner().invoke(bench_group, [str(recipe), "--store", str(path)],
                                env={"KILN_STATE_HOME": str(tmp_path / "st"),
                                     "KILN_HOME": str(tmp_path / "home")})
    assert isinstance(result.exception, KilnError)
    assert "corrupt store" in result.exception.message
    assert path.read_bytes() == before
    assert not (tmp_path / "home").exists()


def test_markdown_keeps_every_value_text() -> None:
    """mkdocs renders the report as HTML: a value from the store is never markup."""
    hostile = rec("cold", 5.0, target="<script>alert(1)</script>", cell=None,
                  builder="[x](javascript:alert(1))", arch="a\\|b&c`d")
    text = render_markdown(summarize([hostile, rec("hot", 1.0)]),
                           source="/s/`<img src=x onerror=alert(1)>`.jsonl")
    assert "<script" not in text and "<img" not in text
    row = next(line for line in text.splitlines() if "script" in line)
    assert row.startswith("| &lt;script&gt;alert(1)&lt;/script&gt; | "
                          "\\[x\\](javascript:alert(1)) | a\\\\\\|b&amp;c\\`d | 8 | 1 | cold |")
    assert row.count(" | ") == len(("target", "builder", "arch", "jobs", "shards", "scenario",
                                    "n", "median wall", "min–max", "hits/misses")) - 1
    assert "from /s/\\`&lt;img src=x onerror=alert(1)&gt;\\`.jsonl. Medians" in text
    empty = render_markdown(summarize([]), source="<b>s</b>")
    assert "No bench records in &lt;b&gt;s&lt;/b&gt;." in empty


def test_report_refuses_to_write_over_the_store(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    write_store(path, RECORDS)
    before = path.read_bytes()
    (tmp_path / "link.md").symlink_to(path)
    (tmp_path / "hard.md").hardlink_to(path)
    for out in (path, tmp_path / "sub" / ".." / "results.jsonl", tmp_path / "link.md",
                tmp_path / "hard.md"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        result = CliRunner().invoke(bench_group, ["report", "--store", str(path),
                                                  "--out", str(out)])
        assert isinstance(result.exception, KilnError), result.output
        assert result.exception.exit_code == 2
        assert result.exception.message == (
            f"--out {out} is the results store {path}: the report would overwrite every "
            "record in it.")
        assert path.read_bytes() == before


def test_report_for_a_target_that_matches_nothing_lists_the_targets(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    write_store(path, [*RECORDS, {**rec("cold", 5.0), "target": "other", "cell": "other-c"}])
    result = CliRunner().invoke(bench_group, ["report", "--store", str(path),
                                              "--target", "typo"])
    assert isinstance(result.exception, KilnError) and result.exception.exit_code == 2
    assert result.exception.message == f"No record in {path} matches --target typo."
    assert result.exception.hint is not None
    assert result.exception.hint.startswith("Targets there: demo, other.")


def test_report_selects_around_a_cell_that_is_no_text(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    write_store(path, [rec("cold", 5.0, cell=["a", "b"]), rec("cold", 6.0, cell={"x": 1}),
                       rec("cold", 7.0, target="b")])
    result = CliRunner().invoke(bench_group, ["report", "--store", str(path), "--target", "b",
                                              "--format", "json"])
    assert result.exit_code == 0, result.output
    assert [g["n"] for g in json.loads(result.stdout)["groups"]] == [1]
