"""The fetched sources' store: a prune removes what no kiln process read for its age,
never a tree a running build holds or a fetch is making, and follows no symlink; a
build that needs a removed tree fetches it again."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.test_source_fetch import git_recipe
from wheelkiln.builder.source_store import SourceStore

DAY = 86400.0

FETCH = """
import sys
from pathlib import Path
from wheelkiln.builder.source import fetch_source
from wheelkiln.recipe.load import load_recipe
tree = fetch_source(load_recipe(Path(sys.argv[1])), Path(sys.argv[2]))
print(tree, flush=True)
sys.stdin.readline()  # holds the tree until told to end
"""


def _fetcher(recipe: Path, store: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process that fetched the recipe's source and holds it until its stdin closes."""
    proc = subprocess.Popen([sys.executable, "-c", FETCH, str(recipe), str(store)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, "the fetch printed no tree"
    return proc, Path(line)


def _end(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    proc.stdout.close()


def _age(path: Path, days: float) -> None:
    then = time.time() - days * DAY
    os.utime(path, (then, then), follow_symlinks=False)


def _outcomes(store: SourceStore, unused_for: float, **kwargs: bool) -> dict[str, str]:
    return {r.entry.name: r.outcome for r in store.prune(unused_for, **kwargs)}


def _upstream(tmp_path: Path) -> Path:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / "setup.py").write_text("# the package\n")
    git_recipe(upstream, tmp_path / "demo.toml")
    return tmp_path / "demo.toml"


def test_a_held_tree_is_kept_and_an_unheld_old_one_removed_then_fetched_again(
    tmp_path: Path,
) -> None:
    recipe = _upstream(tmp_path)
    root = tmp_path / "home" / "sources"
    store = SourceStore(root)
    holder, tree = _fetcher(recipe, root)
    try:
        _age(tree.with_name(f"{tree.name}.inuse"), 3)
        [entry] = store.kept()
        assert (entry.kind, entry.name, entry.origin.split("@")[0]) == (
            "git checkout", tree.name, str(tmp_path / "upstream"))
        assert entry.size >= len("# the package\n")
        # A build started 3 days ago and still running: its tree stays, whatever its age.
        assert _outcomes(store, DAY) == {tree.name: "in use"}
        assert _outcomes(store, DAY, dry_run=True) == {tree.name: "in use"}
        assert (tree / "setup.py").is_file()
    finally:
        _end(holder)
    assert _outcomes(store, DAY, dry_run=True) == {tree.name: "would remove"}
    assert (tree / "setup.py").is_file()
    assert _outcomes(store, DAY) == {tree.name: "removed"}
    assert not tree.exists() and store.kept() == []
    assert not list(root.glob(".pruned-*"))
    # The next build fetches it again, whole.
    again, fetched = _fetcher(recipe, root)
    _end(again)
    assert fetched == tree and (tree / "setup.py").read_text() == "# the package\n"


def test_reading_a_tree_makes_it_recent(tmp_path: Path) -> None:
    recipe = _upstream(tmp_path)
    root = tmp_path / "sources"
    first, tree = _fetcher(recipe, root)
    _end(first)
    _age(tree.with_name(f"{tree.name}.inuse"), 3)
    second, _ = _fetcher(recipe, root)  # a later build reads the same tree
    _end(second)
    assert _outcomes(SourceStore(root), DAY) == {tree.name: "recent"}
    assert tree.is_dir()


def test_leftovers_and_downloads_are_removed_by_age_and_a_fetch_in_progress_is_not(
    tmp_path: Path,
) -> None:
    root = tmp_path / "sources"
    (root / "sdists" / ".download-x").mkdir(parents=True)
    (root / "sdists" / ".download-x" / "part").write_bytes(b"p" * 10)
    sdist = root / "sdists" / "demo-1.0.tar.gz"
    sdist.write_bytes(b"s" * 100)
    fresh = root / "sdists" / "demo-2.0.tar.gz"
    fresh.write_bytes(b"f")
    killed = root / "demo-1.0-0123456789ab.staging"  # a killed extraction
    (killed / "pkg").mkdir(parents=True)
    fetching = root / "git-00000000000000aa"  # a clone under way: no marker yet
    (fetching / "src").mkdir(parents=True)
    unmarked = root / "demo-0.9-aaaaaaaaaaaa"  # fetched before uses were marked
    (unmarked / "pkg").mkdir(parents=True)
    (unmarked / ".kiln-source").write_text("demo==0.9\n")
    for path in (root / "sdists" / ".download-x", sdist, killed, fetching, unmarked / ".kiln-source"):
        _age(path, 5)
    with (root / f"{fetching.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the clone's own lock, as _fetch_git takes it
        kinds = {e.name: e.kind for e in SourceStore(root).kept()}
        assert kinds == {".download-x": "leftover", "demo-1.0.tar.gz": "sdist",
                         "demo-2.0.tar.gz": "sdist", killed.name: "leftover",
                         fetching.name: "leftover", unmarked.name: "sdist tree"}  # fmt: skip
        assert _outcomes(SourceStore(root), DAY) == {
            ".download-x": "removed", "demo-1.0.tar.gz": "removed",
            "demo-2.0.tar.gz": "recent", killed.name: "removed", fetching.name: "in use",
            unmarked.name: "removed",
        }  # fmt: skip
    assert fetching.is_dir() and fresh.is_file() and not sdist.exists() and not killed.exists()
    assert not unmarked.exists() and not list(root.glob(".pruned-*"))
    assert (root / f"{fetching.name}.lock").is_file()  # lock files stay


def test_a_symlink_in_the_store_is_no_entry_and_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    (root / "sdists").mkdir(parents=True)
    outside = tmp_path / "precious"
    (outside / "pkg").mkdir(parents=True)
    (outside / ".kiln-source").write_text("x==1\n")
    (root / "git-1111111111111111").symlink_to(outside, target_is_directory=True)
    (root / "sdists" / "x-1.tar.gz").symlink_to(outside / ".kiln-source")
    for link in (root / "git-1111111111111111", root / "sdists" / "x-1.tar.gz"):
        _age(link, 9)
    _age(outside / ".kiln-source", 9)
    assert SourceStore(root).kept() == []
    assert SourceStore(root).prune(0.0) == []
    assert (outside / "pkg").is_dir() and (outside / ".kiln-source").is_file()


def test_the_commands_list_and_prune_as_json(tmp_path: Path) -> None:
    recipe = _upstream(tmp_path)
    home = tmp_path / "home"
    fetch, tree = _fetcher(recipe, home / "sources")
    _end(fetch)
    _age(tree.with_name(f"{tree.name}.inuse"), 2)
    env = {**os.environ, "KILN_HOME": str(home)}

    def kiln(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wheelkiln", "sources", *args], env=env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)  # fmt: skip

    listed = json.loads(kiln("list", "--json").stdout)
    assert [(e["name"], e["kind"]) for e in listed] == [(tree.name, "git checkout")]
    dry = kiln("prune", "--unused-for", "1d", "--dry-run")
    assert dry.returncode == 0 and tree.is_dir()
    assert "would remove 1 of 1 entries" in " ".join(dry.stderr.split())
    pruned = json.loads(kiln("prune", "--unused-for", "1d", "--json").stdout)
    assert pruned["dry_run"] is False and pruned["freed_bytes"] > 0
    assert [(e["name"], e["outcome"]) for e in pruned["entries"]] == [(tree.name, "removed")]
    assert not tree.exists()
    bad = kiln("prune", "--unused-for", "soon")
    assert bad.returncode == 2 and "--unused-for" in bad.stderr
