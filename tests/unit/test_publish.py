"""Publishing to a docs branch in a temporary repository: two fleet runs give two
permalinked folders under an index that lists both, newest first; a second publish of
the same run commits nothing; the bench goes to a valid bench.json; and the current
branch, its index and its work tree are never touched."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import kiln_in_process
from wheelkiln.bench import store
from wheelkiln.cli.bench import bench_group
from wheelkiln.cli.fleet import fleet_group

BASE = "https://example.github.io/proj"
STAMPS = ("20261201T100000Z", "20261201T110000Z")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def write_run(runs: Path, stamp: str, cells: tuple[str, ...]) -> None:
    folder = runs / stamp
    (folder / "records").mkdir(parents=True)
    start = 1_796_000_000.0 + 3600 * STAMPS.index(stamp)
    builds = []
    for index, cell in enumerate(cells):
        record = {"cell": cell, "target": cell, "cache": {"hits": 0, "misses": 3},
                  "cpu_seconds": 4.0, "peak_rss_bytes": 2**27}
        (folder / "records" / f"{cell}.json").write_text(json.dumps(record))
        builds.append({"cell": cell, "builder": "node1", "start": start + index,
                       "end": start + 5 + index, "seconds": 5.0, "exit_code": index,
                       "outcome": "ok" if index == 0 else "failed",
                       "record": f"records/{cell}.json", "log": f"logs/{cell}.log"})
    run = {"schema": 1, "kind": "fleet-run", "stamp": stamp, "started": "2026-12-01",
           "started_epoch": start, "note": "Throughput under contention.",
           "executor": "local", "builders": [{"name": "node1", "cpus": 2,
                                              "memory_bytes": 2**34}],
           "builds": builds, "wall_seconds": 7.0, "tool_versions": {"gcc": "12"}}
    (folder / "run.json").write_text(json.dumps(run))
    samples = [{"t": start + i, "builder": "node1", "interval": 1.0,
                "cpu": {"user": 80.0, "system": 5.0, "iowait": 0.0, "busy": 85.0},
                "memory": {"used_bytes": 2**30}, "disk": {"read_bytes_per_s": 0,
                                                          "write_bytes_per_s": 2**20},
                "net": {"rx_bytes_per_s": 0, "tx_bytes_per_s": 0},
                "cache": {"hits": 0, "misses": i, "stores": i}} for i in range(8)]
    (folder / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path / "state"))
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "dev")
    (repo / "README.md").write_text("committed\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "start")
    git(repo, "remote", "add", "origin", str(origin))
    # Work in progress that publishing must leave alone: a modified, a staged and an
    # untracked file.
    (repo / "README.md").write_text("edited, not committed\n")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "untracked.txt").write_text("untracked\n")
    return repo


def invoke(group: Any, *args: str | Path) -> dict[str, Any]:
    result = CliRunner().invoke(group, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_two_runs_published_twice_and_the_bench(repo: Path, tmp_path: Path) -> None:
    before = (git(repo, "rev-parse", "HEAD"), git(repo, "symbolic-ref", "HEAD"),
              git(repo, "status", "--porcelain"), git(repo, "diff"),
              git(repo, "diff", "--cached"), git(repo, "worktree", "list", "--porcelain"))
    runs = tmp_path / "runs"
    write_run(runs, STAMPS[0], ("pkg-a", "pkg-b"))
    write_run(runs, STAMPS[1], ("pkg-a", "pkg-b", "pkg-c"))
    common = ("--runs-dir", runs, "--repo", repo, "--branch", "gh-pages", "--base-url", BASE,
              "--json")
    first = invoke(fleet_group, "publish", "--run", STAMPS[0], *common)
    assert first["created_branch"] and first["commit"] and first["runs"] == [STAMPS[0]]
    second = invoke(fleet_group, "publish", *common)  # the newest run
    assert second["stamp"] == STAMPS[1] and second["commit"] and not second["created_branch"]
    assert second["runs"] == [STAMPS[1], STAMPS[0]]
    again = invoke(fleet_group, "publish", "--run", STAMPS[1], *common)
    assert again["no_op"] and again["commit"] is None
    assert git(repo, "rev-parse", "gh-pages") == second["commit"]

    files = set(git(repo, "ls-tree", "-r", "--name-only", "gh-pages").splitlines())
    for stamp in STAMPS:
        assert {f"data/perf/{stamp}/run.json", f"data/perf/{stamp}/samples.jsonl",
                f"data/perf/{stamp}/index.html",
                f"data/perf/{stamp}/records/pkg-a.json"} <= files
    assert not any("/logs/" in name for name in files)
    index = git(repo, "show", "gh-pages:data/perf/index.html")
    options = [line.split('"')[1] for line in index.split("<option value=")[1:]]
    assert options == [f"{BASE}/data/perf/{STAMPS[1]}/", f"{BASE}/data/perf/{STAMPS[0]}/"]
    assert f"kiln fleet run {STAMPS[1]}" in index and "pkg-c" in index  # opens on the newest
    assert f'href="{BASE}/data/perf/"' in git(repo, "show",
                                              f"gh-pages:data/perf/{STAMPS[0]}/index.html")
    runs_json = json.loads(git(repo, "show", "gh-pages:data/perf/runs.json"))
    assert runs_json["newest"] == STAMPS[1]

    results = tmp_path / "results.jsonl"
    for scenario, wall in (("cold", 100.0), ("cold", 110.0), ("hot", 5.0), ("frozen*", 300.0)):
        store.append({"target": "pkg", "cell": "pkg-py3.11", "builder": "node1", "arch": "x86_64",
                      "jobs": 2, "shards": 1, "scenario": scenario, "status": "ok",
                      "step_wall_seconds": wall, "cache": {"hits": 0, "misses": 3}}, results)
    bench = invoke(bench_group, "publish", "--store", results, "--repo", repo, "--json")
    assert bench["commit"] and bench["records"] == 4
    assert invoke(bench_group, "publish", "--store", results, "--repo", repo, "--json")["no_op"]
    data = json.loads(git(repo, "show", "gh-pages:data/bench/bench.json"))
    groups = {g["scenario"]: g for g in data["groups"]}
    assert groups["cold"]["n"] == 2 and groups["cold"]["median_wall_seconds"] == 105.0
    assert groups["cold"]["walls"] == [100.0, 110.0]
    assert not groups["frozen*"]["in_ratios"]
    assert [r["ratio"] for r in data["ratios"]] == ["cold/hot"]
    assert "frozen*" in git(repo, "show", "gh-pages:data/bench/index.html")

    # Without --push nothing left the machine.
    assert git(repo, "ls-remote", "origin") == ""
    after = (git(repo, "rev-parse", "HEAD"), git(repo, "symbolic-ref", "HEAD"),
             git(repo, "status", "--porcelain"), git(repo, "diff"),
             git(repo, "diff", "--cached"), git(repo, "worktree", "list", "--porcelain"))
    assert after == before
    assert (repo / "README.md").read_text() == "edited, not committed\n"
    assert not (repo / "data").exists()

    pushed = invoke(fleet_group, "publish", *common[:-1], "--push", "--json")
    assert pushed["pushed"] and pushed["no_op"]
    assert git(repo, "ls-remote", "origin", "gh-pages").split()[0] == git(repo, "rev-parse",
                                                                           "gh-pages")


def test_publishing_onto_the_checked_out_branch_is_refused(repo: Path, tmp_path: Path) -> None:
    write_run(tmp_path / "runs", STAMPS[0], ("pkg-a",))
    result = CliRunner().invoke(fleet_group, ["publish", "--runs-dir", str(tmp_path / "runs"),
                                              "--repo", str(repo), "--branch", "main"])
    assert result.exit_code != 0
    assert "main is the branch checked out" in str(result.exception)
    assert git(repo, "log", "--oneline", "main").count("\n") == 0


def kiln(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         *argv: str | Path) -> tuple[int, str, str]:
    """``kiln ARGV`` in this process, as the script runs it: (exit code, stdout, stderr
    with its line breaks undone)."""
    code, out, err = kiln_in_process(monkeypatch, capsys, [*argv])
    assert "Traceback" not in err and "internal error" not in err, err
    return code, out, " ".join(err.split())


def bench_store(tmp_path: Path) -> Path:
    results = tmp_path / "results.jsonl"
    for wall in (100.0, 110.0):
        store.append({"target": "pkg", "scenario": "cold", "status": "ok",
                      "step_wall_seconds": wall}, results)
    return results


def pages_branch(repo: Path, tmp_path: Path, links: dict[str, str],
                 files: dict[str, str] | None = None) -> str:
    """A gh-pages branch in ``repo`` holding these symbolic links (and files), as anyone
    with push access could commit them; its commit."""
    other = tmp_path / "pages"
    subprocess.run(["git", "init", "-q", "-b", "gh-pages", str(other)], check=True)
    for name, text in (files or {}).items():
        (other / name).parent.mkdir(parents=True, exist_ok=True)
        (other / name).write_text(text)
    for name, target in links.items():
        (other / name).parent.mkdir(parents=True, exist_ok=True)
        (other / name).symlink_to(target)
    git(other, "add", "-A")
    git(other, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "x")
    git(repo, "fetch", "-q", str(other), "gh-pages:gh-pages")
    return git(repo, "rev-parse", "gh-pages")


@pytest.mark.parametrize("link", ["data", "data/bench", "data/bench/index.html",
                                  "data/bench/bench.json"])
def test_bench_publish_never_writes_through_a_link_on_the_branch(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], link: str,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "x.html" if link.endswith((".html", ".json")) else outside
    before = pages_branch(repo, tmp_path, {link: str(target)})
    code, _, err = kiln(monkeypatch, capsys, "bench", "publish", "--store",
                        bench_store(tmp_path), "--repo", repo)
    assert code == 2, err
    assert f"gh-pages:{link} is a symbolic link (to {target})" in err
    assert f"Remove the link from gh-pages (git rm {link}" in err
    assert list(outside.iterdir()) == []
    assert git(repo, "rev-parse", "gh-pages") == before


@pytest.mark.parametrize("link", ["data/perf", f"data/perf/{STAMPS[0]}",
                                  f"data/perf/{STAMPS[0]}/run.json", "data/perf/runs.json"])
def test_fleet_publish_never_writes_through_a_link_on_the_branch(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], link: str,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "x.json" if link.endswith(".json") else outside
    before = pages_branch(repo, tmp_path, {link: str(target)})
    write_run(tmp_path / "runs", STAMPS[0], ("pkg-a",))
    code, _, err = kiln(monkeypatch, capsys, "fleet", "publish", "--runs-dir",
                        tmp_path / "runs", "--repo", repo, "--base-url", BASE)
    assert code == 2, err
    assert f"gh-pages:{link} is a symbolic link (to {target})" in err
    assert list(outside.iterdir()) == []
    assert git(repo, "rev-parse", "gh-pages") == before


def test_fleet_publish_reads_no_published_page_through_a_link(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    newest = f"data/perf/{STAMPS[1]}"
    before = pages_branch(repo, tmp_path, {f"{newest}/index.html": str(secret)},
                          {f"{newest}/run.json": "{}"})
    write_run(tmp_path / "runs", STAMPS[0], ("pkg-a",))
    code, _, err = kiln(monkeypatch, capsys, "fleet", "publish", "--runs-dir",
                        tmp_path / "runs", "--repo", repo, "--base-url", BASE)
    assert code == 2, err
    assert f"gh-pages:{newest}/index.html is a symbolic link (to {secret})" in err
    assert git(repo, "rev-parse", "gh-pages") == before


def test_a_run_folders_links_and_page_never_reach_the_branch(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text('{"t": 1, "token": "hunter2"}\n')
    runs = tmp_path / "runs"
    write_run(runs, STAMPS[0], ("pkg-a", "pkg-b"))
    folder = runs / STAMPS[0]
    (folder / "samples.jsonl").unlink()
    (folder / "samples.jsonl").symlink_to(secret)
    (folder / "records" / "pkg-b.json").unlink()
    (folder / "records" / "pkg-b.json").symlink_to(secret)
    (folder / "index.html").write_text("<html><body><script>alert(1)</script></body></html>")
    code, _, err = kiln(monkeypatch, capsys, "fleet", "publish", "--runs-dir", runs,
                        "--repo", repo, "--base-url", BASE)
    assert code == 0, err
    assert f"warning: {folder / 'samples.jsonl'}: a symbolic link, not followed" in err
    assert f"warning: {folder / 'records' / 'pkg-b.json'}: a symbolic link" in err
    files = git(repo, "ls-tree", "-r", "--name-only", "gh-pages").splitlines()
    assert f"data/perf/{STAMPS[0]}/records/pkg-a.json" in files
    assert f"data/perf/{STAMPS[0]}/records/pkg-b.json" not in files
    for name in files:
        text = git(repo, "show", f"gh-pages:{name}")
        assert "hunter2" not in text and "<script" not in text and "alert(" not in text, name
    assert f"kiln fleet run {STAMPS[0]}" in git(repo, "show", "gh-pages:data/perf/index.html")


@pytest.mark.parametrize("base", ["javascript:alert(1)//", "//evil.example/x", "ftp://x/y",
                                  "https://", "proj", "https://x/ y", "http://[::1"])
def test_fleet_publish_refuses_a_base_url_that_is_no_web_address(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], base: str,
) -> None:
    write_run(tmp_path / "runs", STAMPS[0], ("pkg-a",))
    code, _, err = kiln(monkeypatch, capsys, "fleet", "publish", "--runs-dir",
                        tmp_path / "runs", "--repo", repo, "--base-url", base)
    assert code == 2, err
    assert f"--base-url {base!r} is not an http(s) address or a path from the site root" in err
    assert git(repo, "branch", "--list", "gh-pages") == ""


@pytest.mark.parametrize("base", ["https://example.github.io/proj/", "/proj", ""])
def test_site_url_takes_web_addresses_and_site_paths(repo: Path, base: str) -> None:
    from wheelkiln.docs_branch import site_url

    assert site_url(repo, base) == base.rstrip("/")


def test_push_without_a_remote_is_refused_before_any_commit(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    git(repo, "remote", "remove", "origin")
    write_run(tmp_path / "runs", STAMPS[0], ("pkg-a",))
    for argv in (("fleet", "publish", "--runs-dir", tmp_path / "runs", "--base-url", BASE),
                 ("bench", "publish", "--store", bench_store(tmp_path))):
        code, _, err = kiln(monkeypatch, capsys, *argv, "--repo", repo, "--push")
        assert code == 2, err
        assert f"--push: the repository {repo} has no remote 'origin'" in err
        assert git(repo, "branch", "--list", "gh-pages") == ""


def test_bench_publish_refuses_a_missing_store_and_names_only_the_store(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = bench_store(tmp_path)
    code, _, err = kiln(monkeypatch, capsys, "bench", "publish", "--store",
                        tmp_path / "typo.jsonl", "--repo", repo)
    assert code == 2, err
    assert f"No results store at {tmp_path / 'typo.jsonl'}: nothing to publish" in err
    assert "Give --store the results store" in err
    assert git(repo, "branch", "--list", "gh-pages") == ""

    with results.open("a") as handle:
        handle.write("not json\n")
    code, _, err = kiln(monkeypatch, capsys, "bench", "publish", "--store", results,
                        "--repo", repo)
    assert code == 0, err
    data = json.loads(git(repo, "show", "gh-pages:data/bench/bench.json"))
    assert data["store"] == "results.jsonl"
    assert data["warnings"] == ["results.jsonl: line 3: not JSON ('not json'), skipped"]
    assert str(tmp_path) not in git(repo, "show", "gh-pages:data/bench/bench.json")
