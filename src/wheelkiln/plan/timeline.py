"""``kiln timeline``: the shards and the link job of one cell on one time axis.

Each job's trace (:mod:`wheelkiln.shard.trace`) holds its TUs on the wall clock. Shards
on separate machines start when they start; what the cell waits for is its **critical
path**: the slowest shard, then the link job. By default the timeline lays the jobs out
that way (every shard from zero, the link job after the slowest shard), which is also
how a local run that shared cores between shards would have gone on separate machines;
``real_time`` keeps the recorded times instead.

Each job's **tail** is the end of its compiles with a job slot idle: from the last
moment every slot ran a TU to the end of the last TU. ninja (1.12 and later) starts the
ready edge with the longest chain of edges after it, then the first in the manifest, and
never knows how long an edge takes; so a target whose objects have one edge fewer after
them (a Python module linked against the package's own library) compiles last, and a
shard that holds one long such TU ends on it alone. The tail is what that costs.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelkiln.errors import UsageError
from wheelkiln.shard.trace import TRACE_SUFFIX, read_trace, trace_path

COLOURS = {
    "compile": "#4e79a7",
    "miss": "#e15759",
    "hit": "#59a14f",
    "stub": "#bab0ac",
    "probe": "#f28e2b",
}


@dataclass(frozen=True)
class Job:
    label: str
    kind: str
    index: int | None
    start: float
    end: float
    trace: dict[str, Any]
    path: Path

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Tail:
    """The end of a job's compiles with a slot idle (see the module's doc)."""

    compile_seconds: float
    """First TU start to last TU end."""
    slots: int
    """The most TUs that ran at once."""
    seconds: float
    idle_slot_seconds: float
    """Slot-seconds idle in the tail: what the job's cores waited at its end."""
    tus: tuple[str, ...]
    """The TUs still running in the tail, the last to end first."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "compile_seconds": round(self.compile_seconds, 3),
            "slots": self.slots,
            "tail_seconds": round(self.seconds, 3),
            "tail_idle_slot_seconds": round(self.idle_slot_seconds, 3),
            "tail_tus": list(self.tus),
        }


def compile_tail(trace: dict[str, Any]) -> Tail | None:
    """The tail of one job's trace; None for a trace without TUs that took time."""
    # A TU of no width holds no slot: its end, counted before its start at one instant,
    # would leave fewer than none running.
    spans = [
        (start, end, str(event["name"]))
        for event in trace["traceEvents"]
        if event["ph"] == "X"
        and (start := event["ts"] / 1e6) < (end := (event["ts"] + event["dur"]) / 1e6)
    ]
    if not spans:
        return None
    # Ends before starts at one instant: a slot handed from one TU to the next is busy.
    changes = sorted([(start, 1) for start, _, _ in spans] + [(end, -1) for _, end, _ in spans])
    running = slots = 0
    full_until = 0.0
    timeline: list[tuple[float, int]] = []
    for moment, step in changes:
        running += step
        timeline.append((moment, running))
        slots = max(slots, running)
    first, last = changes[0][0], changes[-1][0]
    for number, (_moment, count) in enumerate(timeline):
        if count == slots:
            full_until = timeline[number + 1][0]
    idle = sum(
        (slots - count) * (timeline[number + 1][0] - moment)
        for number, (moment, count) in enumerate(timeline[:-1])
        if moment >= full_until
    )
    in_tail = sorted(
        ((end, name) for _start, end, name in spans if end > full_until), reverse=True
    )
    return Tail(last - first, slots, last - full_until, idle, tuple(n for _e, n in in_tail))


@dataclass(frozen=True)
class Timeline:
    cell: str
    jobs: tuple[Job, ...]
    offsets: dict[str, float]
    """Seconds from the axis' zero to each job's start, by label."""
    critical: tuple[str, ...]
    """The labels of the jobs on the critical path."""
    critical_seconds: float
    slowest: tuple[dict[str, Any], ...]

    def merged_trace(self) -> dict[str, Any]:
        """One Chrome trace: a track per job (pid), a row per job slot (tid)."""
        events: list[dict[str, Any]] = []
        for pid, job in enumerate(self.jobs, 1):
            shift = self.offsets[job.label] - job.start
            name = job.label + (" (critical path)" if job.label in self.critical else "")
            events.append(
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
            )
            events.append(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": pid,
                    "tid": 0,
                    "args": {"sort_index": pid},
                }
            )
            for event in job.trace["traceEvents"]:
                copied = dict(event, pid=pid)
                if event["ph"] == "X":
                    copied["ts"] = round(event["ts"] + shift * 1e6)
                    copied["args"] = dict(
                        event.get("args") or {}, critical=job.label in self.critical
                    )
                elif event.get("name") == "process_name":
                    continue
                events.append(copied)
        return {
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {
                "cell": self.cell,
                "critical_path": list(self.critical),
                "critical_path_seconds": round(self.critical_seconds, 3),
            },
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "jobs": [
                {
                    "job": job.label,
                    "kind": job.kind,
                    "offset_seconds": round(self.offsets[job.label], 3),
                    "seconds": round(job.seconds, 3),
                    "tus": sum(1 for e in job.trace["traceEvents"] if e["ph"] == "X"),
                    "trace": str(job.path),
                    **(tail.as_dict() if (tail := compile_tail(job.trace)) else {}),
                }
                for job in self.jobs
            ],
            "critical_path": list(self.critical),
            "critical_path_seconds": round(self.critical_seconds, 3),
            "slowest_tus": list(self.slowest),
        }


def trace_files(paths: Sequence[Path]) -> list[Path]:
    """Traces named directly, beside named records, or inside named directories."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.glob(f"*{TRACE_SUFFIX}")))
        elif path.name.endswith(TRACE_SUFFIX):
            found.append(path)
        else:
            beside = trace_path(path)
            if not beside.is_file():
                raise UsageError(
                    f"{path}: no trace beside this record ({beside.name}).",
                    hint="kiln build, shard and link write <record>.trace.json for ninja-driven "
                    "builds; pass the records of such a build, or their directory.",
                )
            found.append(beside)
    if not found:
        raise UsageError(
            "No traces in " + ", ".join(map(str, paths)) + ".",
            hint="Pass the records, traces or output directories of kiln build, shard and link.",
        )
    return sorted(set(found))


def make_timeline(paths: Sequence[Path], *, real_time: bool = False, slowest: int = 10) -> Timeline:
    jobs = []
    for path in trace_files(paths):
        trace = read_trace(path)
        other = trace["otherData"]
        jobs.append(
            Job(
                str(other.get("job")),
                str(other.get("kind")),
                other.get("index") if isinstance(other.get("index"), int) else None,
                float(other["start"]),
                float(other["end"]),
                trace,
                path,
            )
        )
    cells = sorted({str(job.trace["otherData"].get("cell")) for job in jobs})
    if len(cells) > 1:
        raise UsageError(
            f"These traces belong to {len(cells)} cells ({', '.join(cells)}); a timeline shows one.",
            hint="Pass the traces of one cell's shards and link job.",
        )
    labels = [job.label for job in jobs]
    if len(set(labels)) != len(labels):
        raise UsageError(
            "Two traces are of the same job ("
            + ", ".join(sorted({x for x in labels if labels.count(x) > 1}))
            + ").",
            hint="Pass one run's traces: each shard once and one link job.",
        )
    order = {"shard": 0, "build": 1, "link": 2}
    jobs.sort(key=lambda job: (order.get(job.kind, 1), job.index or 0, job.label))
    shards = [job for job in jobs if job.kind == "shard"]
    others = [job for job in jobs if job.kind != "shard"]
    slowest_shard = max(shards, key=lambda job: job.seconds) if shards else None
    critical = [slowest_shard.label] if slowest_shard else []
    critical += [job.label for job in others if job.kind in ("link", "build")][:1]
    critical_seconds = sum(job.seconds for job in jobs if job.label in critical)
    offsets: dict[str, float] = {}
    if real_time:
        zero = min(job.start for job in jobs)
        offsets = {job.label: job.start - zero for job in jobs}
    else:
        after_shards = slowest_shard.seconds if slowest_shard else 0.0
        for job in jobs:
            offsets[job.label] = 0.0 if job.kind == "shard" else after_shards
    events = [
        {
            "tu": event["name"],
            "action": event.get("cat", ""),
            "job": job.label,
            "seconds": round(event["dur"] / 1e6, 3),
        }
        for job in jobs
        for event in job.trace["traceEvents"]
        if event["ph"] == "X"
    ]
    events.sort(key=lambda e: (-e["seconds"], e["tu"]))
    return Timeline(
        cells[0], tuple(jobs), offsets, tuple(critical), critical_seconds, tuple(events[:slowest])
    )


def render_html(timeline: Timeline) -> str:
    """A self-contained page: one row per job slot, a bar per TU coloured by action, the
    critical path's jobs outlined (inline SVG, no scripts, as kiln's bench report)."""
    rows: list[tuple[str, bool, list[dict[str, Any]]]] = []
    for job in timeline.jobs:
        shift = timeline.offsets[job.label] - job.start
        by_slot: dict[int, list[dict[str, Any]]] = {}
        for event in job.trace["traceEvents"]:
            if event["ph"] == "X":
                start = event["ts"] / 1e6 + shift
                by_slot.setdefault(int(event.get("tid", 0)), []).append(
                    {
                        "start": start,
                        "seconds": event["dur"] / 1e6,
                        "tu": event["name"],
                        "action": event.get("cat", ""),
                    }
                )
        for slot in sorted(by_slot) or [0]:
            rows.append(
                (
                    f"{job.label} · slot {slot + 1}",
                    job.label in timeline.critical,
                    by_slot.get(slot, []),
                )
            )
    span = max(
        [timeline.offsets[j.label] + j.seconds for j in timeline.jobs]
        + [b["start"] + b["seconds"] for _l, _c, bars in rows for b in bars]
    )
    width, left, row_height = 1000, 220, 18
    scale = (width - left - 10) / span if span > 0 else 1.0
    height = row_height * len(rows) + 40
    parts = [f'<svg width="{width}" height="{height}" role="img">']
    for number, (label, critical, bars) in enumerate(rows):
        y = 20 + number * row_height
        weight = "bold" if critical else "normal"
        parts.append(f'<text x="4" y="{y + 13}" font-weight="{weight}">{html.escape(label)}</text>')
        for bar in bars:
            x = left + bar["start"] * scale
            w = max(bar["seconds"] * scale, 1.0)
            colour = COLOURS.get(bar["action"], "#76b7b2")
            stroke = ' stroke="#000" stroke-width="1"' if critical else ""
            tip = html.escape(f"{bar['tu']} ({bar['action']}, {bar['seconds']:.2f} s)")
            parts.append(
                f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_height - 4}" '
                f'fill="{colour}"{stroke}><title>{tip}</title></rect>'
            )
    for tick in range(6):
        seconds = span * tick / 5
        x = left + seconds * scale
        parts.append(f'<text x="{x:.0f}" y="{height - 6}">{seconds:.0f} s</text>')
    parts.append("</svg>")
    legend = " ".join(
        f'<span style="background:{colour};color:#fff;padding:0 4px">{action}</span>'
        for action, colour in COLOURS.items()
    )
    slowest = "".join(
        f"<tr><td>{html.escape(e['tu'])}</td><td>{html.escape(str(e['action']))}</td>"
        f"<td>{html.escape(e['job'])}</td><td>{e['seconds']:.2f}</td></tr>"
        for e in timeline.slowest
    )
    title = html.escape(f"kiln timeline: {timeline.cell}")
    path = html.escape(" + ".join(timeline.critical))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        "<style>body{font:14px system-ui,sans-serif;margin:2em}svg text{font:11px system-ui,sans-serif}"
        "td{padding:0 1em 0 0}</style></head><body>"
        f"<h1>{title}</h1><p>critical path: {path}, {timeline.critical_seconds:.1f} s "
        "(bold rows, outlined bars)</p>"
        f"<p>{legend}</p>{''.join(parts)}<h2>Slowest TUs</h2><table><tr><th>TU</th><th>action</th>"
        f"<th>job</th><th>seconds</th></tr>{slowest}</table></body></html>\n"
    )
