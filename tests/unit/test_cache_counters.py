"""ccache's counter files never travel between jobs: a shard's empty cache gets none
from zeroing, its archive carries none, and a link job merges none from an older
archive that has them (their counts are the manifest's; the link job counts from zero).
Real ccache and gcc."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.archives import file_member, read_members, valid_manifest, write_members
from wheelkiln.cache.archive import extract, inspect_archive, pack
from wheelkiln.cache.backend import CacheConfig
from wheelkiln.cache.ccache import Ccache
from wheelkiln.run import run


def _counters(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("stats"))


def test_a_shard_cache_packs_its_entries_without_counters(tmp_path: Path) -> None:
    cache = Ccache(CacheConfig(cache_dir=tmp_path / "cache", base_dir=tmp_path))
    cache.zero_stats()
    assert _counters(tmp_path / "cache") == [], "nothing to zero in an empty cache"
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    env = {**os.environ, **cache.environment()}
    run([cache.executable(), "gcc", "-c", "a.c", "-o", "a.o"], cwd=tmp_path, env=env)
    assert (cache.stats().misses, cache.stats().hits) == (1, 0)
    assert _counters(tmp_path / "cache"), "the compile counted itself"
    cache.zero_stats()  # now there are counters: zeroed as before
    assert cache.stats().misses == 0

    archive = pack(tmp_path / "cache", valid_manifest(), tmp_path / "c-shard-0-of-1.tar.gz")
    names = [info.name for info, _ in read_members(archive)]
    assert not [name for name in names if name.endswith("/stats")]
    entries = sorted(
        p.relative_to(tmp_path / "cache").as_posix()
        for p in (tmp_path / "cache").rglob("*")
        if p.is_file() and p.name != "stats"
    )
    assert sorted(n.removeprefix("cache/") for n in names if n.startswith("cache/")) == entries

    # The link job's merge: the entry hits; zeroing finds nothing to zero.
    merged = tmp_path / "merged"
    extract(archive, merged)
    linked = Ccache(CacheConfig(cache_dir=merged, base_dir=tmp_path))
    linked.zero_stats()
    assert _counters(merged) == []
    run([linked.executable(), "gcc", "-c", "a.c", "-o", "a.o"], cwd=tmp_path,
        env={**os.environ, **linked.environment()})
    assert (linked.stats().hits, linked.stats().misses) == (1, 0)


def test_an_older_archive_s_counters_are_checked_but_not_merged(tmp_path: Path) -> None:
    archive = write_members(
        tmp_path / "c-shard-0-of-1.tar.gz",
        [
            file_member("manifest.json", json.dumps(valid_manifest()).encode()),
            file_member("cache/a/stats", b"0 0 0\n"),
            file_member("cache/a/b/stats", b"0 0 0\n"),
            file_member("cache/a/b/entry", b"object"),
        ],
    )
    assert inspect_archive(archive).members == 4
    written = extract(archive, tmp_path / "merged")
    assert written == ["cache/a/b/entry"]
    assert _counters(tmp_path / "merged") == []
    assert (tmp_path / "merged" / "a" / "b" / "entry").read_bytes() == b"object"
