"""Remote cache storage against live servers started on 127.0.0.1 (tests/servers.py):
ccache on WebDAV, Valkey and a shared directory; sccache on WebDAV, Valkey and S3.

Each build is a small generated C package (four TUs, one extension module), in its own
directory with a fresh local cache, so whatever it finds it found through the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln
from tests.projects import c_extension
from tests.servers import S3, Redis, WebDAV, dead_url, file_keys
from wheelkiln.cache.backend import CacheConfig, CacheStats, scrub_cache_settings
from wheelkiln.cache.registry import make_backend

pytestmark = pytest.mark.compile

TUS = 4


PROJECT = c_extension("remote-demo", tus=TUS)
"""A setuptools package whose one extension module is built from four C TUs."""


def write_package(root: Path) -> Path:
    return PROJECT.write_tree(root)


def write_recipe(tree: Path, backend: str, remote: str) -> Path:
    return PROJECT.write_recipe(
        tree, cache={"backend": backend, "remote": remote}, sharding={"count": 1}
    )


def build(kiln: Kiln, place: Path, backend: str, remote: str, namespace: str, *extra: str,
          env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """One build in its own directory, with its own fresh local cache: (record, stderr).
    *remote* goes into the recipe; ``--remote`` in *extra* or ``$KILN_REMOTE`` override it."""
    tree = write_package(place)
    result = kiln(
        "build", write_recipe(tree, backend, remote), "--out", place / "out",
        "--workdir", place / "work", "--cache-dir", place / "local-cache",
        "--namespace", namespace, "--no-wheel-cache", "--json", *extra, env=env,
    )
    return json.loads(result.stdout), result.stderr


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


def fresh_namespace() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


def compile_through(backend_name: str, place: Path, remote: str, namespace: str) -> CacheStats:
    """The package's four TUs compiled in *place* through kiln's configuration of the
    backend (its environment, a fresh local cache, base_dir at *place*), with the real
    compiler and no build frontend: the cache's side of a build, at a tenth of its cost."""
    tree = write_package(place)
    backend = make_backend(backend_name, CacheConfig(
        cache_dir=place / "local-cache", base_dir=place, namespace=namespace, remote=remote,
    ))
    assert backend is not None
    env = {**scrub_cache_settings(os.environ), **backend.environment()}
    include = sysconfig.get_paths()["include"]
    backend.start()
    try:
        backend.zero_stats()
        for source in sorted((tree / "src").glob("*.c")):
            subprocess.run(
                [backend.executable(), "gcc", "-I", include, "-c", str(source),
                 "-o", str(source.with_suffix(".o"))],
                env=env, cwd=tree, check=True, capture_output=True,
            )
        return backend.stats()
    finally:
        backend.stop()


def assert_shared_through(keys: Callable[[], set[str]], tmp_path: Path, backend: str,
                          remote: str) -> None:
    """Two compiles in different directories share entries through the server; a fresh
    namespace sees none of them, and the old namespace keeps its entries."""
    namespace = fresh_namespace()
    before = keys()
    first = compile_through(backend, tmp_path / "a", remote, namespace)
    after_first = keys()
    second = compile_through(backend, tmp_path / "b" / "elsewhere", remote, namespace)
    after_second = keys()
    assert (first.hits, first.misses, first.remote_errors) == (0, TUS, 0)
    assert len(after_first) > len(before)
    assert (second.hits, second.misses, second.remote_errors) == (TUS, 0, 0)
    assert after_second == after_first
    other = compile_through(backend, tmp_path / "c", remote, fresh_namespace())
    assert (other.hits, other.misses) == (0, TUS)
    assert keys() > after_second  # every entry of the old namespace is still there


@pytest.mark.parametrize("storage", ["http", "redis", "file"])
def test_ccache_shares_entries_through_remote_storage(
    storage: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if storage == "http":
        webdav: WebDAV = request.getfixturevalue("webdav_server")
        # WsgiDAV refuses a PUT into a collection that does not exist (409): ccache's
        # default 'subdirs' layout needs one per key prefix; 'flat' puts keys at the root.
        remote, keys = f"{webdav.url}|layout=flat", webdav.keys
    elif storage == "redis":
        redis: Redis = request.getfixturevalue("redis_server")
        remote, keys = redis.url, redis.keys
    else:
        shared = tmp_path / "shared-cache"
        shared.mkdir()
        remote, keys = f"file:{shared}", lambda: file_keys(shared)
    assert_shared_through(keys, tmp_path, "ccache", remote)


@pytest.mark.parametrize("storage", ["webdav", "redis", "s3"])
def test_sccache_shares_entries_through_remote_storage(
    storage: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    server: WebDAV | Redis | S3 = request.getfixturevalue(f"{storage}_server")
    assert_shared_through(server.keys, tmp_path, "sccache", server.url)


def test_kiln_builds_share_through_redis_and_a_link_job_without_it_says_why(
    kiln: Kiln, tmp_path: Path, redis_server: Redis
) -> None:
    """The same through whole `kiln build`s (--remote, $KILN_REMOTE, --namespace, the
    build record); then a link job of the namespace whose entries are all on the server,
    with no shard archive, while the server is out: its gate names the server."""
    namespace = fresh_namespace()
    remote = redis_server.url
    dead = dead_url("redis")
    before = redis_server.keys()
    first, first_err = build(kiln, tmp_path / "a", "ccache", dead, namespace, "--remote", remote)
    after_first = redis_server.keys()
    second, second_err = build(kiln, tmp_path / "b" / "elsewhere", "ccache", dead, namespace,
                               env={"KILN_REMOTE": remote})
    after_second = redis_server.keys()
    assert warnings(first_err + second_err) == []
    assert first["cache"]["remote"] == [
        {"url": remote, "reachable": True, "problem": None, "errors": 0}
    ]
    assert (first["cache"]["hits"], first["cache"]["misses"]) == (0, TUS)
    assert len(after_first) > len(before)
    assert (second["cache"]["hits"], second["cache"]["misses"]) == (TUS, 0)
    assert after_second == after_first

    tree = write_package(tmp_path / "c")
    (tmp_path / "no-archives").mkdir()
    result = kiln("link", write_recipe(tree, "ccache", dead), "--archives", tmp_path / "no-archives",
                  "--count", "1", "--out", tmp_path / "dist", "--workdir", tmp_path / "c" / "work",
                  "--namespace", namespace, check=False)
    assert result.returncode == 5, result.stderr
    message = " ".join(result.stderr.split())
    assert (f"- remote cache storage {dead} was unreachable (connection refused): what the "
            "shards stored there was not read") in message
    assert f"- {TUS} cache miss(es)" in message
    assert warnings(result.stderr) == [
        f"warning: remote cache storage {dead} is unreachable (connection refused): this "
        "build uses its local cache only and stores nothing there."
    ]
    assert redis_server.keys() == after_second


def test_server_down_sccache_builds_on_its_local_cache_with_one_warning(
    kiln: Kiln, tmp_path: Path
) -> None:
    # sccache alone would not start its server at all (WebDAV: at once, Redis: after
    # 10 s), so every compile would fail. (ccache with its server down: the link job above.)
    remote = dead_url("http")
    record, stderr = build(kiln, tmp_path, "sccache", remote, fresh_namespace())
    assert warnings(stderr) == [
        f"warning: remote cache storage {remote} is unreachable (connection refused): this "
        "build uses its local cache only and stores nothing there."
    ]
    assert record["cache"]["remote"] == [
        {"url": remote, "reachable": False, "problem": "connection refused", "errors": 0}
    ]
    assert record["exit_code"] == 0 and record["wheel"]["name"].startswith("remote_demo-")
    assert record["cache"]["misses"] == record["cache"]["total"] >= TUS
    assert record["cache"]["errors"] == 0
