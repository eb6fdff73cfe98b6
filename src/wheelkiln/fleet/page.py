"""A fleet run's page: per builder, time series of CPU, memory, disk, network and the
compiler cache's counters; a Gantt of every build on one time axis, coloured by outcome;
the slowest cells; and what was built with which tools.

Times are seconds since the run started. The page is one static HTML file with the
plots inline as SVG (see :mod:`wheelkiln.plots`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from wheelkiln.fleet.folder import RunFolder
from wheelkiln.fleet.summary import builder_figures, slowest
from wheelkiln.plots import (
    NAV_END,
    NAV_START,
    OUTCOME_COLORS,
    html_page,
    html_table,
    inline_data,
    plot_block,
)

MIB = 2**20
SERIES: tuple[tuple[str, str, str, tuple[tuple[str, str, float], ...]], ...] = (
    ("cpu", "CPU (%)", "%", (("user", "user", 1), ("system", "system", 1),
                             ("iowait", "iowait", 1))),
    ("memory", "memory used (GiB)", "GiB", (("used_bytes", "used", 2**30),)),
    ("disk", "disk (MiB/s)", "MiB/s", (("read_bytes_per_s", "read", MIB),
                                       ("write_bytes_per_s", "write", MIB))),
    ("net", "network (MiB/s)", "MiB/s", (("rx_bytes_per_s", "receive", MIB),
                                         ("tx_bytes_per_s", "transmit", MIB))),
)
CACHE_SERIES = ("hits", "misses", "stores", "remote_reads", "remote_writes")
WIDTH = 860


def _figure(value: Any) -> float | None:
    """A finite number from the run folder, else None (shown as "–")."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _number(value: Any) -> float:
    return _figure(value) or 0.0


def _long_rows(samples: Sequence[Mapping[str, Any]], origin: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for sample in samples:
        elapsed = round(_number(sample.get("t")) - origin, 3)
        for section, title, _, series in SERIES:
            values = sample.get(section)
            values = values if isinstance(values, dict) else {}
            for key, name, scale in series:
                rows.append({"elapsed": elapsed, "metric": title, "series": name,
                             "value": round(_number(values.get(key)) / scale, 3)})
        cache = sample.get("cache")
        if isinstance(cache, dict):
            for key in CACHE_SERIES:
                if key in cache:
                    rows.append({"elapsed": elapsed, "metric": "compiler cache (count)",
                                 "series": key, "value": _number(cache[key])})
    return rows


def builder_chart(samples: Sequence[Mapping[str, Any]], origin: float, end: float) -> Any:
    """Stacked small multiples sharing the time axis, one per measured quantity."""
    import altair as alt

    rows = _long_rows(samples, origin)
    metrics = [title for _, title, _, _ in SERIES]
    if any(row["metric"] == "compiler cache (count)" for row in rows):
        metrics.append("compiler cache (count)")
    charts = []
    for metric in metrics:
        data = [row for row in rows if row["metric"] == metric]
        chart = (
            alt.Chart(inline_data(data))
            .mark_line(interpolate="step-after", strokeWidth=1.5)
            .encode(
                x=alt.X("elapsed:Q", title="seconds since the run started",
                        scale=alt.Scale(domain=[0, max(end - origin, 1.0)], nice=False)),
                y=alt.Y("value:Q", title=metric),
                color=alt.Color("series:N", title=None,
                                legend=alt.Legend(orient="right")),
            )
            .properties(width=WIDTH - 160, height=110)
        )
        charts.append(chart)
    return alt.vconcat(*charts).resolve_scale(color="independent")


def gantt_chart(builds: Sequence[Mapping[str, Any]], origin: float) -> Any:
    """Every build (and shard) as a bar from its start to its end, coloured by outcome."""
    import altair as alt

    data: list[dict[str, Any]] = [
        {"job": str(b.get("label") or b.get("cell")), "builder": str(b.get("builder")),
         "start": round(_number(b.get("start")) - origin, 3),
         "end": round(_number(b.get("end")) - origin, 3),
         "seconds": f"{_number(b.get('seconds')):.1f} s", "outcome": str(b.get("outcome"))}
        for b in builds
    ]
    order: list[str] = [row["job"] for row in sorted(data, key=lambda r: (r["start"], r["job"]))]
    domain: list[str] = sorted({str(row["outcome"]) for row in data} | {"ok"},
                    key=lambda o: list(OUTCOME_COLORS).index(o) if o in OUTCOME_COLORS else 99)
    y = alt.Y("job:N", sort=order, title=None, axis=alt.Axis(labelLimit=320))
    bars = alt.Chart(inline_data(data)).mark_bar(height=14).encode(
        x=alt.X("start:Q", title="seconds since the run started"), x2="end:Q", y=y,
        color=alt.Color("outcome:N", scale=alt.Scale(
            domain=domain, range=[OUTCOME_COLORS.get(o, "#777") for o in domain]),
            legend=alt.Legend(title="outcome", orient="top")),
    )
    labels = alt.Chart(inline_data(data)).mark_text(align="left", dx=4, fontSize=11).encode(
        x="end:Q", y=y, text="seconds:N")
    return (bars + labels).properties(width=WIDTH - 380, height=max(40, 22 * len(data)))


def _seconds(value: Any) -> str:
    seconds = _figure(value)
    return "–" if seconds is None else f"{seconds:.1f} s"


def _bytes(value: Any) -> str:
    value = _figure(value)
    if value is None:
        return "–"
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / MIB:.1f} MiB"


def _objects(value: Any) -> list[dict[str, Any]]:
    """The objects of a list in run.json (nothing where it is not a list)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _cold_sentence(cold: Any) -> str:
    if not isinstance(cold, dict) or not cold.get("namespace"):
        return ""
    how = ("forced recache, a private compiler cache per build" if cold.get("recache")
           else "sharded builds, every shard job with a private, fresh compiler cache")
    return (" Cold: a fresh cache namespace "
            f"<code>{html.escape(str(cold['namespace']))}</code>, {how}.")


def render_run_page(
    run_folder: RunFolder, *, selector: str = "", title_prefix: str = "kiln fleet run"
) -> str:
    """The page of one run. ``selector`` is HTML put above it (the published index's
    list of runs); locally a page stands alone."""
    run = run_folder.run
    builds = run_folder.builds
    samples = run_folder.samples
    origin = _number(run.get("started_epoch")) or min(
        (_number(s.get("t")) for s in samples), default=0.0)
    end = max([_number(b.get("end")) for b in builds] + [_number(s.get("t")) for s in samples]
              + [origin])
    stamp = html.escape(str(run.get("stamp")))
    parts = [NAV_START + selector + NAV_END, f"<h1>{html.escape(title_prefix)} {stamp}</h1>"]
    parts.append(f'<p class="note"><strong>{html.escape(str(run.get("note", "")))}</strong></p>')
    outcomes: dict[str, int] = {}
    for build in builds:
        outcomes[str(build.get("outcome"))] = outcomes.get(str(build.get("outcome")), 0) + 1
    builders = ", ".join(
        f"{b.get('name')} ({b.get('cpus')} CPUs, {_bytes(b.get('memory_bytes'))})"
        for b in _objects(run.get("builders")))
    parts.append(
        f"<p>{len(builds)} build(s) at once: "
        + ", ".join(f"{count} {html.escape(name)}" for name, count in sorted(outcomes.items()))
        + f"; {_seconds(run.get('wall_seconds'))} in all, started {html.escape(str(run.get('started')))}"
        + f", executor {html.escape(str(run.get('executor')))}, on {html.escape(builders)}."
        + _cold_sentence(run.get("cold")) + "</p>"
    )
    parts.append("<h2>Every build</h2>")
    if builds:
        rows = [*builds, *_objects(run.get("jobs_of_builds"))]
        parts.append(plot_block(gantt_chart(rows, origin), "Gantt of every build"))
    else:
        parts.append("<p>No build finished in this run.</p>")
    parts.append("<h2>Slowest cells</h2>")
    parts.append(html_table(
        ["cell", "builder", "outcome", "seconds", "CPU", "peak memory", "hits/misses"],
        [[str(b.get("cell")), str(b.get("builder")), str(b.get("outcome")),
          _seconds(b.get("seconds")), _seconds(b.get("cpu_seconds")),
          _bytes(b.get("peak_rss_bytes") or None),
          f"{b.get('hits', '–')}/{b.get('misses', '–')}"] for b in slowest(builds)],
        numeric={"seconds", "CPU", "peak memory", "hits/misses"},
    ))
    for figures in builder_figures(samples, builds):
        mine = [s for s in samples if str(s.get("builder")) == figures.builder]
        parts.append(f"<h2>Builder {html.escape(figures.builder)}</h2>")
        busy = (f"CPU {figures.cpu_busy_mean:.0f}% busy on average while building"
                if figures.cpu_busy_mean is not None else "no sample while building")
        parts.append(
            f'<p class="note">{figures.samples} samples over {figures.seconds:.1f} s '
            f"({figures.samples_per_second:.2f} per second); {busy}; peak memory "
            f"{_bytes(figures.memory_peak_bytes)}; disk read {_bytes(figures.disk_read_bytes)}, "
            f"written {_bytes(figures.disk_write_bytes)}; network received "
            f"{_bytes(figures.net_rx_bytes)}, sent {_bytes(figures.net_tx_bytes)}.</p>")
        parts.append(plot_block(builder_chart(mine, origin, end),
                                f"time series of builder {figures.builder}"))
    versions = run.get("tool_versions")
    if isinstance(versions, dict) and versions:
        parts.append("<h2>Tools</h2>")
        parts.append(html_table(["tool", "version"],
                                [[str(k), str(v)] for k, v in sorted(versions.items())]))
    return html_page(f"{title_prefix} {run.get('stamp')}", "".join(parts))
