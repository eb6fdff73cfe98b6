"""A record describes the run that printed it: ``kiln build`` served from the wheel cache
prints a ``wheel-cache`` record with its own wall time and no compiles, and keeps the
record of the build that made the wheel under ``served_from``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from wheelkiln import cli
from wheelkiln.builder.record import served_record
from wheelkiln.builder.wheel_cache import WheelCache

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "ab" * 32
EARLIER: dict[str, Any] = {
    "schema": 1, "kind": "build", "timestamp": "2026-01-01T00:00:00+00:00", "target": "demo-cpp",
    "cell": "demo-cpp-py3.11-linux-x86_64", "axes": {"python": "3.11"}, "arch_list": [],
    "builder": "farm-7", "arch": "x86_64", "exit_code": 0, "wall_seconds": 1234.5,
    "cpu_seconds": 4321.0, "peak_rss_bytes": 2**30,
    "cache": {"backend": "ccache", "hits": 0, "misses": 24, "total": 24, "uncacheable": 3,
              "errors": 0, "missed_tus": ["src/a.cpp"]},
    "wheel": {"name": "demo_cpp-0.1.0-cp311-cp311-linux_x86_64.whl", "sha256": "", "size": 0},
    "extensions": {"demo_cpp/_core.so": "f" * 64}, "source_digest": "s" * 64,
    "build_env": "/envs/x", "tool_versions": {"gcc": "12"}, "log": "/work/build.log",
    "recache": True,
}


def test_served_record_describes_this_run() -> None:
    record = served_record(EARLIER, wheel_path=Path("/out/w.whl"), input_digest=DIGEST,
                           wall_seconds=0.0421, cpu_seconds=0.03, backend="ccache")
    assert record["kind"] == "wheel-cache"
    assert record["wall_seconds"] == 0.042 and record["cpu_seconds"] == 0.03
    assert record["cache"] == {"backend": "ccache", "hits": 0, "misses": 0, "total": 0,
                               "uncacheable": 0, "errors": 0, "missed_tus": []}
    assert record["log"] is None and record["peak_rss_bytes"] == 0
    assert record["wheel"]["path"] == "/out/w.whl"
    assert record["extensions"] == EARLIER["extensions"]
    assert record["served_from"] == EARLIER
    assert record["input_digest"] == DIGEST
    assert record["timestamp"] != EARLIER["timestamp"]
    assert "recache" not in record  # the earlier build's options are not this run's


def test_kiln_build_served_from_the_wheel_cache_prints_its_own_record(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    wheel = tmp_path / EARLIER["wheel"]["name"]
    wheel.write_bytes(b"the wheel bytes")
    stored = WheelCache().store(DIGEST, wheel, EARLIER)
    # Planning the real digest needs a build environment made by an earlier build; the
    # lookup, the copy and the record are what is under test.
    from wheelkiln.builder import job

    monkeypatch.setattr(job, "plan_input_digest", lambda *args, **kwargs: DIGEST)
    out = tmp_path / "dist"
    monkeypatch.setattr(sys, "argv", ["kiln", "build", str(ROOT / "recipes" / "demo-cpp.toml"),
                                      "--out", str(out), "--json"])
    cli.main()
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert record["kind"] == "wheel-cache"
    assert record["wall_seconds"] < 60 and record["wall_seconds"] != EARLIER["wall_seconds"]
    assert record["cache"]["misses"] == 0 and record["cache"]["total"] == 0
    assert record["cache"]["missed_tus"] == []
    assert record["served_from"] == stored.record
    assert record["served_from"]["wall_seconds"] == 1234.5
    assert record["served_from"]["cache"]["misses"] == 24
    assert record["wheel"]["path"] == str(out / wheel.name)
    assert (out / wheel.name).read_bytes() == b"the wheel bytes"
    assert "served from" in captured.err
    assert not (tmp_path / "home" / "work").exists()  # nothing was built

