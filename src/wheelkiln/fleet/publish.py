"""``kiln fleet publish``: a fleet run onto the docs branch as ``data/perf/<stamp>/``.

The stamped folder is a permalink and never changes once published: run.json,
samples.jsonl, the build records and the run's page (logs and wheels stay on the build
node). What is published is what :func:`~wheelkiln.fleet.folder.read_run` checked, written
anew, and the page is drawn from it: a run folder may come from anywhere, so neither its
files nor its own ``index.html`` (which could hold a script) are copied.
``data/perf/index.html`` opens on the newest published run and offers every run in a
selector, newest first; ``data/perf/runs.json`` lists them for tools. Both are rebuilt
from the folders on the branch at each publish, so publishing the same run again changes
nothing and commits nothing.
"""

from __future__ import annotations

import html
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelkiln.docs_branch import docs_worktree, require_remote
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
    """Write the checked run into ``target``, a fresh folder of the docs worktree."""
    if target.is_dir():
        shutil.rmtree(target)  # an unfinished folder on the branch (no run.json in it)
    (target / fmt.RECORDS_DIR).mkdir(parents=True)
    fmt.write_json(target / fmt.RUN_FILE, run_folder.run)
    (target / fmt.SAMPLES_FILE).write_text(
        "".join(json.dumps(sample, sort_keys=True, allow_nan=False) + "\n"
                for sample in run_folder.samples), encoding="utf-8")
    for build in run_folder.builds:
        record = run_folder.records.get(build["cell"])
        # run.json names the file; only a name of the form records/<file> is written.
        name = fmt.record_name(build.get("record"))
        if record is not None and name is not None:
            fmt.write_json(target / name, record)
    page = render_run_page(run_folder)
    (target / fmt.PAGE_FILE).write_text(with_nav(page, _back_link(base)), encoding="utf-8")


def published_runs(perf: Path) -> list[str]:
    """Stamps of the runs on the branch, newest first."""
    return [p.name for p in reversed(fmt.list_runs(perf))]


def publish_run(
    run_folder: fmt.RunFolder, *, repo: Path, branch: str, base: str, push: bool
) -> PublishResult:
    if push:
        require_remote(repo)
    with docs_worktree(repo, branch) as worktree:
        folder = f"{PERF_DIR}/{run_folder.stamp}"
        target = worktree.inside(f"{folder}/{fmt.RUN_FILE}").parent
        if not fmt.is_run_folder(target):
            _copy_run(run_folder, target, base)
        stamps = published_runs(target.parent)
        # The index is the newest run's page, with the selector in place of its link.
        newest_page = worktree.read_text(f"{PERF_DIR}/{stamps[0]}/{fmt.PAGE_FILE}")
        worktree.write_text(f"{PERF_DIR}/index.html",
                            with_nav(newest_page, selector(base, stamps, stamps[0])))
        worktree.write_text(f"{PERF_DIR}/{RUNS_INDEX}", fmt.json_text({
            "newest": stamps[0],
            "runs": [{"stamp": s, "url": run_url(base, s)} for s in stamps],
        }))
        commit = worktree.commit(f"Publish fleet run {run_folder.stamp}")
        if push:
            worktree.push()
        return PublishResult(branch, run_folder.stamp, f"{folder}/", commit, push, stamps,
                             worktree.created_branch)
