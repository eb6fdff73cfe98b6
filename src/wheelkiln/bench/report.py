"""Rendering a bench summary: Markdown tables for docs, JSON for tools, and a
self-contained HTML page (inline SVG, no scripts) with every run as a point.

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


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


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
            f"No bench records{f' in {source}' if source else ''}. "
            "Run `kiln bench TARGET --scenario all` to add some."
        )
        return "\n".join(lines) + "\n"
    lines += [
        f"{summary.records} run(s){f' from `{source}`' if source else ''}. Medians over the "
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


def _json_safe(value: Any) -> Any:
    """JSON has no inf or nan (Python would write the invalid tokens ``Infinity`` and
    ``NaN``): a non-finite number becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def render_json(summary: Summary, *, source: str = "", warnings: list[str] | None = None) -> str:
    data = _json_safe(summary_json(summary, source=source, warnings=warnings))
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


# --- HTML -------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:980px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:2px 10px;border-bottom:1px solid #ddd}
th{text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
h2{font-size:16px;margin-top:2em}.note{color:#666}svg text{font:12px system-ui,sans-serif}
"""
_PLOT_WIDTH, _LABEL_WIDTH, _ROW = 760, 150, 26


_MAX_TICK_DECADES = 12
_TICK_RANGE = (-300, 300)
"""Decades that get a tick label: 10.0**e overflows past 308."""


def _ticks(log_low: float, log_high: float) -> list[tuple[float, float]]:
    """(log10 position, value) of the 1-2-5 ticks in range; with many decades, one tick
    every few decades so the axis stays legible."""
    first = max(math.floor(log_low), _TICK_RANGE[0])
    last = min(math.ceil(log_high), _TICK_RANGE[1])
    every = max(1, math.ceil((last - first) / _MAX_TICK_DECADES))
    mantissas = (1, 2, 5) if every == 1 else (1,)
    ticks = []
    for exponent in range(first, last + 1, every):
        for mantissa in mantissas:
            position = exponent + math.log10(mantissa)
            if log_low <= position <= log_high:
                ticks.append((position, mantissa * 10.0**exponent))
    return ticks


def _plot(groups: list[GroupStats]) -> str:
    """One row per scenario, every run a dot on a log time axis, the median a bar.

    The axis is computed in log10 space, so any finite positive wall fits (1e-300 s and
    1e308 s on one axis). A run at zero or below sits at the left edge, an infinite one
    at the right edge; a nan has no place on an axis and is not drawn.
    """
    walls = [w for g in groups for w in g.walls if math.isfinite(w) and w > 0]
    if not walls:
        return ""
    margin = math.log10(1.3)
    log_low, log_high = math.log10(min(walls)) - margin, math.log10(max(walls)) + margin
    span = log_high - log_low
    inner = _PLOT_WIDTH - _LABEL_WIDTH - 20

    def x_at(position: float) -> float:
        return _LABEL_WIDTH + inner * (min(max(position, log_low), log_high) - log_low) / span

    def x(value: float) -> float:
        if value == math.inf:
            return x_at(log_high)
        return x_at(math.log10(value) if value > 0 else log_low)

    height = _ROW * len(groups) + 30
    parts = [f'<svg width="{_PLOT_WIDTH}" height="{height}" role="img">']
    for position, tick in _ticks(log_low, log_high):
        parts.append(f'<line x1="{x_at(position):.1f}" x2="{x_at(position):.1f}" y1="0" '
                     f'y2="{height - 20}" stroke="#eee"/>')
        parts.append(f'<text x="{x_at(position):.1f}" y="{height - 5}" text-anchor="middle">'
                     f"{html.escape(seconds(tick))}</text>")
    for row, group in enumerate(groups):
        y = _ROW * row + _ROW / 2
        color = "#999" if not group.in_ratios else "#1f77b4"
        label = f"{group.key.scenario} (n={group.n})"
        parts.append(f'<text x="0" y="{y + 4:.1f}">{html.escape(label)}</text>')
        for wall in group.walls:
            if math.isnan(wall):
                continue
            parts.append(f'<circle cx="{x(wall):.1f}" cy="{y:.1f}" r="4" fill="{color}" '
                         f'fill-opacity=".55"><title>{html.escape(seconds(wall))}</title></circle>')
        if group.median_wall is not None and not math.isnan(group.median_wall):
            mx = x(group.median_wall)
            parts.append(f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{y - 9:.1f}" y2="{y + 9:.1f}" '
                         f'stroke="#d62728" stroke-width="2"><title>median '
                         f"{html.escape(seconds(group.median_wall))}</title></line>")
    parts.append("</svg>")
    return "".join(parts)


def _html_table(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="n">{html.escape(v)}</td>' if c in RIGHT else f"<td>{html.escape(v)}</td>"
            for c, v in zip(columns, row, strict=True)
        ) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(summary: Summary, *, source: str = "") -> str:
    parts = ["<!doctype html><html><head><meta charset=\"utf-8\"><title>kiln bench</title>",
             f"<style>{_CSS}</style></head><body><h1>Bench results</h1>"]
    if not summary.groups:
        parts.append(f"<p>No bench records{html.escape(f' in {source}' if source else '')}.</p>")
        return "".join(parts) + "</body></html>\n"
    parts.append(
        f'<p class="note">{summary.records} run(s){html.escape(f" from {source}" if source else "")}.'
        " Every dot is one run (log time axis), the red bar the median; grey rows "
        "(frozen*, or no successful run) stay out of every ratio. Wall is the whole build "
        "step. Ratios only within one target, builder, arch, jobs and shards.</p>"
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
        parts.append(_plot(groups))
        parts.append(_html_table(GROUP_COLUMNS[5:], [_group_row(g)[5:] for g in groups]))
        ratios = ratios_by_condition.get(condition, [])
        if ratios:
            parts.append(_html_table(RATIO_COLUMNS[5:], [_ratio_row(r)[5:] for r in ratios]))
    return "".join(parts) + "</body></html>\n"
