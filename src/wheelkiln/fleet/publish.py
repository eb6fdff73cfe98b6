"""``kiln fleet publish``: a fleet run onto the docs branch as ``data/perf/<stamp>/``.

The stamped folder is a permalink and never changes once published: run.json,
samples.jsonl, the build records and the run's page (logs and wheels stay on the build
node). ``data/perf/index.html`` opens on the newest published run and offers every run
in a selector, newest first; ``data/perf/runs.json`` lists them for tools. Both are
rebuilt from the folders on the branch at each publish, so publishing the same run again
changes nothing and commits nothing.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelkiln.docs_branch import docs_worktree
from wheelkiln.fleet import folder as fmt
from wheelkiln.fleet.page import render_run_page
from wheelkiln.plots import with_nav

PERF_DIR = "data/perf"
RUNS_INDEX = "runs.json"


@dataclass(frozen=True)
class PublishResult:
    branch: str
    stamp: str
    path: str
    """Where the run is on the branch."""
    commit: str | None
    """None: nothing changed (already published)."""
    pushed: bool
    runs: list[str]
    """Every published run, newest first."""
    created_branch: bool

    def as_json(self) -> dict[str, Any]:
        return {"branch": self.branch, "stamp": self.stamp, "path": self.path,
                "commit": self.commit, "no_op": self.commit is None, "pushed": self.pushed,
                "runs": self.runs, "created_branch": self.created_branch}


def run_url(base: str, stamp: str) -> str:
    return f"{base}/{PERF_DIR}/{stamp}/"


def _back_link(base: str) -> str:
    return f'<nav><a href="{html.escape(base)}/{PERF_DIR}/">every published fleet run</a></nav>'


def selector(base: str, stamps: list[str], current: str) -> str:
    """The runs, newest first, as a select that goes to the run's permalink (and the same
    as plain links for a reader without scripts)."""
    options = "".join(
        f'<option value="{html.escape(run_url(base, s))}"{" selected" if s == current else ""}>'
        f"{html.escape(s)}{' (newest)' if i == 0 else ''}</option>"
        for i, s in enumerate(stamps)
    )
    links = " · ".join(f'<a href="{html.escape(run_url(base, s))}">{html.escape(s)}</a>'
                       for s in stamps)
    return (
        '<nav id="runs"><label for="run-select">Fleet run </label>'
        '<select id="run-select" onchange="window.location.href = this.value">'
        f"{options}</select> <span class=\"note\">{len(stamps)} published; this page shows "
        f"the newest. Permalink: <a href=\"{html.escape(run_url(base, current))}\">"
        f"{html.escape(run_url(base, current))}</a></span>"
        f"<noscript><p>{links}</p></noscript></nav>"
    )


def _copy_run(run_folder: fmt.RunFolder, target: Path, base: str) -> None:
    target.mkdir(parents=True)
    for name in (fmt.RUN_FILE, fmt.SAMPLES_FILE):
        source = run_folder.path / name
        if source.is_file():
            (target / name).write_bytes(source.read_bytes())
    (target / fmt.RECORDS_DIR).mkdir()
    inside = (target / fmt.RECORDS_DIR).resolve()
    for build in run_folder.builds:
        record = run_folder.records.get(build["cell"])
        record_name = build.get("record")
        if record is None or not isinstance(record_name, str):
            continue
        destination = (target / record_name).resolve()
        # run.json names the file; a name that leads out of records/ is not followed.
        if destination.parent == inside:
            fmt.write_json(destination, record)
    drawn = run_folder.path / fmt.PAGE_FILE
    page = (drawn.read_text(encoding="utf-8") if drawn.is_file()
            else render_run_page(run_folder))
    (target / fmt.PAGE_FILE).write_text(with_nav(page, _back_link(base)), encoding="utf-8")


def published_runs(perf: Path) -> list[str]:
    """Stamps of the runs on the branch, newest first."""
    return [p.name for p in reversed(fmt.list_runs(perf))]


def publish_run(
    run_folder: fmt.RunFolder, *, repo: Path, branch: str, base: str, push: bool
) -> PublishResult:
    with docs_worktree(repo, branch) as worktree:
        perf = worktree.path / PERF_DIR
        target = perf / run_folder.stamp
        if not (target / fmt.RUN_FILE).is_file():
            _copy_run(run_folder, target, base)
        stamps = published_runs(perf)
        # The index is the newest run's page, with the selector in place of its link.
        newest_page = (perf / stamps[0] / fmt.PAGE_FILE).read_text(encoding="utf-8")
        (perf / "index.html").write_text(with_nav(newest_page, selector(base, stamps, stamps[0])),
                                         encoding="utf-8")
        fmt.write_json(perf / RUNS_INDEX, {
            "newest": stamps[0],
            "runs": [{"stamp": s, "url": run_url(base, s)} for s in stamps],
        })
        commit = worktree.commit(f"Publish fleet run {run_folder.stamp}")
        if push:
            worktree.push()
        return PublishResult(branch, run_folder.stamp, f"{PERF_DIR}/{run_folder.stamp}/",
                             commit, push, stamps, worktree.created_branch)

