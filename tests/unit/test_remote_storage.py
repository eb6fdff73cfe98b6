"""Remote storage URLs: where a probe connects, how a URL is shown, sccache's S3 settings.
(The servers themselves: tests/integration/test_remote_cache.py.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from wheelkiln.cache.remote import (
    Endpoint,
    check_remote,
    endpoint,
    plan_remote,
    probe,
    shown,
    url_problem,
)
from wheelkiln.cache.sccache import s3_environment
from wheelkiln.errors import UsageError


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:7000", Endpoint("tcp", "127.0.0.1", 7000)),
        ("redis://cache.farm", Endpoint("tcp", "cache.farm", 6379)),
        ("redis://:pw@cache.farm:7000/3|connect-timeout=50", Endpoint("tcp", "cache.farm", 7000)),
        ("http://dav.farm/kiln|layout=flat", Endpoint("tcp", "dav.farm", 80)),
        ("https://dav.farm", Endpoint("tcp", "dav.farm", 443)),
        ("s3+http://127.0.0.1:8333/kiln", Endpoint("tcp", "127.0.0.1", 8333)),
        ("redis+unix:/run/redis.sock", Endpoint("unix", path="/run/redis.sock")),
        ("file:/mnt/cache|update-mtime=true", Endpoint("directory", path="/mnt/cache")),
        ("file:///mnt/cache", Endpoint("directory", path="/mnt/cache")),
        ("s3://bucket/prefix", None),  # AWS: kiln does not guess the endpoint
        ("gs://bucket", None),  # a storage helper kiln does not know
        ("redis://host:notaport", None),
    ],
)
def test_endpoint(url: str, expected: Endpoint | None) -> None:
    assert endpoint(url) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://:secret@cache:6379/0", "redis://:***@cache:6379/0"),
        ("http://user:pw@dav/x|layout=flat", "http://user:***@dav/x|layout=flat"),
        ("http://dav/x|bearer-token=abc|layout=flat", "http://dav/x|bearer-token=***|layout=flat"),
        ("redis://cache:6379", "redis://cache:6379"),
        ("file:/mnt/cache", "file:/mnt/cache"),
    ],
)
def test_shown_never_prints_a_password(url: str, expected: str) -> None:
    assert shown(url) == expected


def test_a_url_the_parser_refuses_is_named_never_a_traceback() -> None:
    assert url_problem("redis://[oops:6379") == "Invalid IPv6 URL"
    assert url_problem("redis://[::1]:6379|connect-timeout=50") is None
    assert url_problem("redis://host:notaport") is None  # ccache names a bad port
    assert endpoint("redis://[oops:6379") is None
    # where the password ends cannot be told: everything before the host is hidden
    assert shown("redis://u:se@cret@[oops:6379|password=x") == "redis://***@[oops:6379|password=***"
    assert shown("redis://[oops:6379") == "redis://[oops:6379"
    with pytest.raises(UsageError) as caught:
        check_remote("file:/ok http://:pw@[::1", "--remote")
    assert caught.value.message == (
        "--remote: 'http://***@[::1' is not a storage URL (Invalid IPv6 URL)."
    )
    check_remote("redis://[::1]:6379 file:/mnt/cache", "--remote")
    check_remote(None, "--remote")


def test_probe_tells_refused_from_answered_and_missing_directories(tmp_path: Path) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert probe(f"redis://127.0.0.1:{port}") is None
    assert probe(f"redis://127.0.0.1:{port}") == "connection refused"
    assert probe(f"file:{tmp_path}") is None
    assert probe(f"file:{tmp_path / 'gone'}") == f"{tmp_path / 'gone'} is not a directory"


def test_plan_keeps_reachable_stores_and_warns_once_naming_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_remote(f"file:{tmp_path} file:{tmp_path / 'gone'}")
    assert plan is not None
    assert plan.usable == f"file:{tmp_path}"
    assert [s.reachable for s in plan.statuses] == [True, False]
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("warning:") == 1
    assert (f"remote cache storage file:{tmp_path / 'gone'} is unreachable ({tmp_path / 'gone'} "
            "is not a directory): this build uses its local cache only") in err
    assert plan_remote(None) is None and plan_remote("  ") is None


def test_sccache_s3_settings() -> None:
    assert s3_environment("s3+http://127.0.0.1:8333/kiln/farm", "run-1", {}) == {
        "SCCACHE_ENDPOINT": "http://127.0.0.1:8333",
        "SCCACHE_S3_USE_SSL": "false",
        "SCCACHE_BUCKET": "kiln",
        "SCCACHE_REGION": "us-east-1",
        "SCCACHE_S3_KEY_PREFIX": "/farm/run-1/",
        # no credentials in the environment: anonymous, never the instance-metadata address
        "SCCACHE_S3_NO_CREDENTIALS": "true",
    }
    aws = s3_environment("s3://builds", "", {"AWS_ACCESS_KEY_ID": "x", "AWS_REGION": "eu-west-1"})
    assert aws == {"SCCACHE_BUCKET": "builds", "SCCACHE_REGION": "eu-west-1"}
    with pytest.raises(UsageError, match="names no bucket"):
        s3_environment("s3+https://minio.farm", "", {})


@pytest.mark.parametrize("command", [["build", "r.toml"], ["shard", "r.toml", "--index", "0"],
                                     ["link", "r.toml", "--archives", "s"]])
def test_remote_option_wants_urls(command: list[str]) -> None:
    from click.testing import CliRunner

    from wheelkiln.cli import cli

    result = CliRunner().invoke(cli, [*command, "--remote", "cache.farm:6379 nothing"])
    assert result.exit_code == 2
    assert ("Invalid value for '--remote': 'nothing' is not a storage URL: give SCHEME:..., "
            "e.g. redis://HOST:6379") in " ".join(result.output.split())
