"""Rendering a bench summary: Markdown tables for docs, JSON for tools, and a
self-contained HTML page (Vega-Lite plots rendered to inline SVG, no scripts; see
:mod:`wheelkiln.plots`) with every run as a point.

Rendering is the only thing here; the numbers come from :mod:`wheelkiln.bench.stats`.
"""

from __future__ import annotations

import html
import json
import math
from itertools import groupby
from typing import Any

from wheelkiln.bench.stats import GroupStats, Ratio, RatioKey, Summary

GROUP_COLUMNS = (
    "target", "builder", "arch", "jobs", "shards", "scenario", "n", "median wall", "min–max",
    "hits/misses",
)
RATIO_COLUMNS = ("target", "builder", "arch", "jobs", "shards", "ratio", "value", "n")
RIGHT = {"jobs", "shards", "n", "median wall", "min–max", "hits/misses", "value"}


def _number(seconds: float) -> str:
    # Records come from a store anyone can edit: inf, nan and 1e308 must still print.
    if not math.isfinite(seconds):
        return str(seconds)
    if abs(seconds) >= 1e7:
        return f"{seconds:.3g}"
    if seconds < 10:
        return f"{seconds:.2f}"
    if seconds < 100:
        return f"{seconds:.1f}"
    return f"{seconds:,.0f}"


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{_number(value)} s"


def _count(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:g}"


MARKDOWN_ESCAPES = str.maketrans({
    "\\": "\\\\", "|": "\\|", "`": "\\`", "[": "\\[", "]": "\\]",
    "&": "&amp;", "<": "&lt;", ">": "&gt;", "\n": " ", "\r": " ",
})
"""A value from the store (or its path) as Markdown text: the report is rendered as HTML
by mkdocs, so a target named ``<script>`` must stay text, ``[x](javascript:...)`` must
not become a link, a backtick must not open a code span, and a backslash must not undo
the escape of a ``|`` after it (a column of its own). Not a code span for the path:
inside one an entity would show as ``&lt;``, and a backtick would end it."""


def _cell(text: str) -> str:
    return text.translate(MARKDOWN_ESCAPES)


def _table(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |"]
    lines.append("|" + "|".join("---:" if c in RIGHT else "---" for c in columns) + "|")
    lines.extend("| " + " | ".join(_cell(value) for value in row) + " |" for row in rows)
    return lines


def _condition(condition: RatioKey) -> list[str]:
    return [condition.target, condition.builder, condition.arch, str(condition.jobs),
            str(condition.shards)]


def _group_row(group: GroupStats) -> list[str]:
    n = str(group.n) + (f" (+{group.failed} failed)" if group.failed else "")
    spread = (
        "–" if group.min_wall is None or group.max_wall is None
        else f"{_number(group.min_wall)}–{_number(group.max_wall)} s"
    )
    return [
        *_condition(group.key.condition), group.key.scenario, n, seconds(group.median_wall),
        spread, f"{_count(group.median_hits)}/{_count(group.median_misses)}",
    ]


def _ratio_row(ratio: Ratio) -> list[str]:
    return [*_condition(ratio.condition), ratio.name, f"{ratio.value:.2f}×",
            f"{ratio.numerator_n}/{ratio.denominator_n}"]


def render_markdown(summary: Summary, *, source: str = "") -> str:
    lines = ["## Bench results", ""]
    if not summary.groups:
        lines.append(
            f"No bench records{f' in {_cell(source)}' if source else ''}. "
            "Run `kiln bench TARGET --scenario all` to add some."
        )
        return "\n".join(lines) + "\n"
    lines += [
        f"{summary.records} run(s){f' from {_cell(source)}' if source else ''}. Medians over the "
        "successful runs of each key, n beside them (failed runs are counted, never "
        "averaged in). Wall is the whole build step as the harness timed it: source copy, "
        "build environment, build. hits/misses are median compiler-cache counters. "
        "`frozen*`: a cache could not be emptied; shown, left out of every ratio.",
        "",
        *_table(GROUP_COLUMNS, [_group_row(group) for group in summary.groups]),
        "",
        "### Ratios",
        "",
    ]
    if summary.ratios:
        lines += [
            "Ratios of medians, only between scenarios of one target, builder, arch, jobs and "
            "shards; n is numerator/denominator runs.",
            "",
            *_table(RATIO_COLUMNS, [_ratio_row(ratio) for ratio in summary.ratios]),
        ]
    else:
        lines.append("None yet: a ratio needs two scenarios with successful runs under one key.")
    return "\n".join(lines) + "\n"


def _condition_json(condition: RatioKey) -> dict[str, Any]:
    return {
        "target": condition.target, "builder": condition.builder, "arch": condition.arch,
        "jobs": condition.jobs, "shards": condition.shards,
    }


def summary_json(
    summary: Summary, *, source: str = "", warnings: list[str] | None = None
) -> dict[str, Any]:
    return {
        "store": source,
        "records": summary.records,
        "warnings": list(warnings or []),
        "groups": [
            {
                **_condition_json(group.key.condition),
                "scenario": group.key.scenario,
                "n": group.n,
                "failed": group.failed,
                "median_wall_seconds": group.median_wall,
                "min_wall_seconds": group.min_wall,
                "max_wall_seconds": group.max_wall,
                "median_cpu_seconds": group.median_cpu,
                "median_hits": group.median_hits,
                "median_misses": group.median_misses,
                "in_ratios": group.in_ratios,
            }
            for group in summary.groups
        ],
        "ratios": [
            {
                **_condition_json(ratio.condition),
                "ratio": ratio.name,
                "value": ratio.value,
                "numerator_n": ratio.numerator_n,
                "denominator_n": ratio.denominator_n,
            }
            for ratio in summary.ratios
        ],
    }


def json_safe(value: Any) -> Any:
    """JSON has no inf or nan (Python would write the invalid tokens ``Infinity`` and
    ``NaN``): a non-finite number becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_safe(item) for item in value]
    return value


def render_json(summary: Summary, *, source: str = "", warnings: list[str] | None = None) -> str:
    data = json_safe(summary_json(summary, source=source, warnings=warnings))
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


# --- HTML -------------------------------------------------------------------------------

POINT_COLORS = {"in ratios": "#1f77b4", "out of every ratio": "#9e9e9e"}
PLOT_WIDTH = 640


def _drawable(wall: float) -> bool:
    """A log axis has room for finite positive values only."""
    return math.isfinite(wall) and wall > 0


def _chart(groups: list[GroupStats]) -> Any:
    """One row per scenario: every successful run a point on a log time axis, the median
    a red tick. Rows that stay out of every ratio (frozen*) are grey."""
    import altair as alt

    from wheelkiln.plots import inline_data

    labels = [f"{g.key.scenario} (n={g.n})" for g in groups]
    points: list[dict[str, Any]] = [
        {"scenario": label, "wall": wall, "seconds": seconds(wall),
         "kind": "in ratios" if group.in_ratios else "out of every ratio"}
        for group, label in zip(groups, labels, strict=True)
        for wall in group.walls if _drawable(wall)
    ]
    medians: list[dict[str, Any]] = [
        {"scenario": label, "wall": group.median_wall}
        for group, label in zip(groups, labels, strict=True)
        if group.median_wall is not None and _drawable(group.median_wall)
    ]
    y = alt.Y("scenario:N", sort=labels, title=None, axis=alt.Axis(labelLimit=220))
    # Padding in pixels keeps the extreme runs off the frame, whatever their values.
    x = alt.X("wall:Q", title="wall seconds (log)",
              scale=alt.Scale(type="log", nice=False, padding=14))
    kinds: list[str] = sorted({str(p["kind"]) for p in points}) or ["in ratios"]
    dots = alt.Chart(inline_data(points)).mark_circle(size=70, opacity=0.6).encode(
        x=x, y=y, color=alt.Color("kind:N", title=None, legend=alt.Legend(orient="top"),
                                  scale=alt.Scale(domain=kinds,
                                                  range=[POINT_COLORS[k] for k in kinds])))
    ticks = alt.Chart(inline_data(medians)).mark_tick(
        color="#d62728", thickness=2, size=20).encode(x=x, y=y)
    return (dots + ticks).properties(width=PLOT_WIDTH, height=34 * len(groups))


def _undrawn(groups: list[GroupStats]) -> int:
    return sum(1 for g in groups for wall in g.walls if not _drawable(wall))


def render_html(summary: Summary, *, source: str = "") -> str:
    """The bench page: per (target, builder, arch, jobs, shards), every run as a point
    with the median and n, the table of medians and the ratios of that key."""
    from wheelkiln.plots import html_page, html_table, plot_block

    parts = ["<h1>Bench results</h1>"]
    if not summary.groups:
        parts.append(f"<p>No bench records{html.escape(f' in {source}' if source else '')}.</p>")
        return html_page("kiln bench", "".join(parts))
    parts.append(
        f'<p class="note">{summary.records} run(s){html.escape(f" from {source}" if source else "")}.'
        " Every dot is one run (log time axis), the red tick the median, n the successful "
        "runs it is taken over. Wall is the whole build step. Ratios only within one target, "
        'builder, arch, jobs and shards. <span class="badge frozen-star">frozen*</span> a '
        "frozen run in which a cache could not be emptied: shown in grey, left out of every "
        "ratio.</p>"
    )
    ratios_by_condition = {
        condition: list(items)
        for condition, items in groupby(summary.ratios, key=lambda r: r.condition)
    }
    for condition, items in groupby(summary.groups, key=lambda g: g.key.condition):
        groups = list(items)
        title = (f"{condition.target} · {condition.builder} · {condition.arch} · "
                 f"{condition.jobs} jobs · {condition.shards} shard(s)")
        parts.append(f"<h2>{html.escape(title)}</h2>")
        if any(_drawable(w) for g in groups for w in g.walls):
            parts.append(plot_block(_chart(groups), f"every run of {title}"))
        undrawn = _undrawn(groups)
        if undrawn:
            parts.append(f'<p class="note">{undrawn} run(s) with a wall time that has no place '
                         "on a log axis (zero, negative, infinite or not a number) are not "
                         "drawn; the table counts them.</p>")
        parts.append(html_table(
            list(GROUP_COLUMNS[5:]), [_group_row(g)[5:] for g in groups], numeric=RIGHT,
            row_classes=["frozen-star" if g.key.scenario.endswith("*") else "" for g in groups]))
        ratios = ratios_by_condition.get(condition, [])
        if ratios:
            parts.append(html_table(list(RATIO_COLUMNS[5:]), [_ratio_row(r)[5:] for r in ratios],
                                    numeric=RIGHT))
    return html_page("kiln bench", "".join(parts))
