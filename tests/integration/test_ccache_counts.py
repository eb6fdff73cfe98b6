"""A build job's ccache counters come from its own stats log: they must be the counters
ccache keeps itself, for every kind of call a build makes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from wheelkiln.builder.job_env import inherited_environment
from wheelkiln.cache.backend import CacheConfig
from wheelkiln.cache.ccache import Ccache

pytestmark = pytest.mark.compile

NOT_PER_CALL = {
    "cache_size_kibibyte", "files_in_cache", "max_cache_size_kibibyte", "max_files_in_cache",
    "stats_updated_timestamp", "stats_zeroed_timestamp",
}  # fmt: skip
"""What --print-stats says about the cache as a whole, which no call moves by itself."""


def test_the_stats_log_adds_up_to_ccaches_own_counters(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    logged = Ccache(CacheConfig(cache_dir=cache, base_dir=tmp_path, stats_log=tmp_path / "stats.log"))
    kept = Ccache(CacheConfig(cache_dir=cache, base_dir=tmp_path))  # the same cache, no log
    logged.start()
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    (tmp_path / "b.c").write_text("int b(void) { return 2; }\n")
    env = {**inherited_environment(os.environ), **logged.environment()}
    calls = [
        ["gcc", "-c", "a.c", "-o", "a.o"],  # miss
        ["gcc", "-c", "a.c", "-o", "a.o"],  # hit
        ["gcc", "-c", "b.c", "-o", "b.o"],  # miss
        ["gcc", "-shared", "a.o", "b.o", "-o", "ab.so"],  # a link
        ["gcc", "-E", "a.c"],  # preprocessing
        ["gcc", "-c", "a.c", "b.c"],  # two sources
        ["gcc", "--version"],  # no input file
    ]

    def run_all() -> None:
        for argv in calls:
            subprocess.run([logged.executable(), *argv], cwd=tmp_path, env=env, capture_output=True,
                           check=False)  # fmt: skip

    kept.zero_stats()
    logged.zero_stats()
    run_all()
    from_log, from_ccache = logged.stats(), kept.stats()
    assert from_log.raw == {k: v for k, v in from_ccache.raw.items() if v and k not in NOT_PER_CALL}
    assert (from_log.hits, from_log.misses, from_log.uncacheable) == (1, 2, 2)

    # a new job starts its own count and leaves the cache's counters alone
    logged.zero_stats()
    assert logged.stats().raw == {}
    assert kept.stats().raw == from_ccache.raw
    run_all()  # now all three compiles hit
    assert (logged.stats().hits, logged.stats().misses) == (3, 0)
