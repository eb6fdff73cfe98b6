"""Cache counters as numbers, and per-TU outcomes from ccache's stats log."""

from __future__ import annotations

from wheelkiln.cache.ccache import parse_stats_log, stats_from_counters
from wheelkiln.cache.sccache import stats_from_json


def test_ccache_counters() -> None:
    stats = stats_from_counters(
        {
            "direct_cache_hit": 5,
            "preprocessed_cache_hit": 1,
            "cache_miss": 2,
            "called_for_link": 3,
            "multiple_source_files": 1,
            "remote_storage_error": 4,
        }
    )
    assert (stats.hits, stats.misses, stats.total, stats.uncacheable, stats.errors) == (
        6,
        2,
        8,
        1,
        4,
    )


def test_ccache_stats_log_names_each_tu() -> None:
    text = "# /w/src/a.cu\ncache_miss\ndirect_cache_miss\n# /w/src/b.cu\ndirect_cache_hit\n# a.o\ncalled_for_link\n"
    outcomes = parse_stats_log(text)
    assert [(o.source, o.hit) for o in outcomes] == [("/w/src/a.cu", False), ("/w/src/b.cu", True)]


def test_sccache_json() -> None:
    data = {
        "stats": {
            "compile_requests": 10,
            "cache_hits": {"counts": {"CUDA": 4, "PTX": 4}},
            "cache_misses": {"counts": {"C/C++": 1}},
            "non_cacheable_compilations": 8,
            "not_cached": {"-E": 2},
            "cache_read_errors": 0,
        }
    }
    stats = stats_from_json(data)
    assert (stats.hits, stats.misses, stats.uncacheable) == (8, 1, 10)
