"""``kiln wheels``: the wheel cache's entries listed and pruned, with real builds that
are served from it before a prune and build again after it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import Kiln, copy_example, pure_package, recipe_for

pytestmark = pytest.mark.compile


def test_a_pruned_wheel_is_built_again_and_a_used_one_is_kept(tmp_path: Path) -> None:
    # A home of its own: pruning the shared one would take other tests' wheels.
    kiln = Kiln(tmp_path / "home", tmp_path / "state")
    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(tree, "demo-cpp", tmp_path)

    def build() -> dict:
        return kiln.json("build", recipe, "--out", tmp_path / "out",
                         "--workdir", tmp_path / "work", "--cache-dir", tmp_path / "ccache")

    assert build()["kind"] == "build"
    served = build()
    assert served["kind"] == "wheel-cache"
    listed = kiln.json("wheels", "list")
    assert [(e["cell"], e["wheel"]) for e in listed] == [
        (served["cell"], Path(served["wheel"]["path"]).name)]
    entry = Path(listed[0]["path"])

    kept = kiln.json("wheels", "prune", "--unused-for", "1d")
    assert [e["outcome"] for e in kept["entries"]] == ["recent"] and entry.is_dir()

    two_days_ago = time.time() - 2 * 86400
    os.utime(entry / "record.json", (two_days_ago, two_days_ago))
    dry = kiln.json("wheels", "prune", "--unused-for", "1d", "--dry-run")
    assert [e["outcome"] for e in dry["entries"]] == ["would remove"] and entry.is_dir()
    assert dry["freed_bytes"] == 0

    pruned = kiln.json("wheels", "prune", "--unused-for", "1d")
    assert [e["outcome"] for e in pruned["entries"]] == ["removed"]
    assert pruned["freed_bytes"] == listed[0]["size_bytes"] > 0
    assert not entry.exists() and kiln.json("wheels", "list") == []

    again = build()
    assert again["kind"] == "build" and again["cache"]["misses"] == 0
    assert [e["digest"] for e in kiln.json("wheels", "list")] == [listed[0]["digest"]]


def test_a_bad_age_names_the_argument(tmp_path: Path) -> None:
    kiln = Kiln(tmp_path / "home", tmp_path / "state")
    done = kiln("wheels", "prune", "--unused-for", "soon", check=False)
    assert done.returncode == 2
    assert "Invalid value for '--unused-for': 'soon' is not an age" in done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(kiln("wheels", "list", "--json").stdout) == []


def test_a_wheel_the_cache_or_state_home_cannot_keep_is_still_built_and_recorded(tmp_path: Path) -> None:
    # A full disk, or a prune that took the entry's staging directory: here the cache's
    # directory is a file, and so is the state home's store of records. The build's
    # wheel and record stay; only the shortcut and the remembered copy are lost.
    kiln = Kiln(tmp_path / "home", tmp_path / "state")
    for store in (tmp_path / "home" / "wheels", tmp_path / "state" / "builds"):
        store.parent.mkdir()
        store.write_text("not a directory")
    recipe = pure_package(tmp_path)
    done = kiln("build", recipe, "--out", tmp_path / "out", "--workdir", tmp_path / "work",
                "--json")
    record = json.loads(done.stdout)
    assert Path(record["wheel"]["path"]).is_file()
    assert (tmp_path / "out" / "purepkg-py3.11-linux-x86_64.build.json").is_file()
    assert "the wheel cache kept no copy of purepkg-0.1-py2.py3-none-any.whl" in done.stderr
    assert "the state home kept no copy of this build's record" in done.stderr
    assert "Traceback" not in done.stderr
