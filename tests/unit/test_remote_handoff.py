"""The remote handoff file (and the same content as a Dask shard task's result) is read
as hostile input: the shape, the manifest, the wrapper log and the size are each checked
and named; the link job refuses a handoff it cannot read from its own storage."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.archives import valid_manifest
from wheelkiln.errors import GateError
from wheelkiln.shard.handoff import check_handoff, read_handoff, write_handoff
from wheelkiln.shard.link import remote_refusal

WHERE = "the handoff shard 1/2's task returned"
LOG_LINE = json.dumps({"tu": "src/a.c", "action": "compile", "seconds": 0.5, "exit": 0})


def handoff(**manifest_changes: Any) -> dict[str, Any]:
    manifest = {
        **valid_manifest("cell", 0, 2),
        "remote": {"storage": "redis://cache:6379", "namespace": "kiln-run1"},
        **manifest_changes,
    }
    return {"manifest": manifest, "wrapper_log": LOG_LINE + "\n"}


def refused(data: Any, max_bytes: int = 1024**2) -> str:
    with pytest.raises(GateError) as caught:
        check_handoff(data, WHERE, max_bytes)
    assert "shard job" in (caught.value.hint or "")
    return caught.value.message


def test_a_written_handoff_reads_back_with_its_manifest_and_log(tmp_path: Path) -> None:
    log = tmp_path / "wrapper.jsonl"
    log.write_text(LOG_LINE + "\n")
    data = handoff()
    path = write_handoff(tmp_path / "out" / "x.handoff.json", data["manifest"], log)
    read = read_handoff(path)
    assert read.where == str(path)
    assert (read.manifest.cell, read.manifest.index, read.manifest.count) == ("cell", 0, 2)
    assert read.manifest.remote is not None
    assert (read.manifest.remote.storage, read.manifest.remote.namespace) == (
        "redis://cache:6379", "kiln-run1")
    assert read.records == [json.loads(LOG_LINE)]
    assert not list((tmp_path / "out").glob("*.partial"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], f"{WHERE} is not a shard handoff: it must hold exactly the keys 'manifest' "
                 "and 'wrapper_log', not list."),
        ({"manifest": {}, "wrapper_log": "", "archive": "/etc/passwd"},
         f"{WHERE} is not a shard handoff: it must hold exactly the keys 'manifest' and "
         "'wrapper_log', not ['archive', 'manifest', 'wrapper_log']."),
        ({**handoff(), "wrapper_log": ["line"]},
         f"{WHERE}: wrapper_log is list, not the log's text."),
        (handoff(count="2"),
         f"{WHERE}: manifest is not a shard manifest: count: Input should be a valid integer."),
        (handoff(remote=None),
         f"{WHERE}: manifest.remote is missing: a handoff without an archive must name the "
         "remote storage that holds the shard's entries."),
        ({**handoff(), "wrapper_log": '{"action": "rm -rf"}\n'},
         f"{WHERE}, wrapper_log: line 1 is not a wrapper record (action: Input should be "),
    ],
)
def test_a_hostile_handoff_is_refused_naming_what_is_wrong(data: Any, message: str) -> None:
    assert refused(data).startswith(message)


def test_a_handoff_larger_than_allowed_is_not_read(tmp_path: Path) -> None:
    big = {**handoff(), "wrapper_log": (LOG_LINE + "\n") * 100}
    assert refused(big, max_bytes=1000) == (
        f"{WHERE}: wrapper_log is 6.4 KiB, more than a shard handoff may be (1000 B)."
    )
    path = tmp_path / "big.handoff.json"
    path.write_text(json.dumps(big))
    with pytest.raises(GateError) as caught:
        read_handoff(path, max_bytes=1000)
    assert caught.value.message.startswith(f"{path} is ")
    assert caught.value.message.endswith("more than a shard handoff may be (1000 B); it was not read.")


def test_only_a_regular_file_is_read_as_a_handoff(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.handoff.json"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer for ever
    zero = tmp_path / "zero.handoff.json"
    zero.symlink_to("/dev/zero")  # its size says 0; reading it would never end
    directory = tmp_path / "dir.handoff.json"
    directory.mkdir()
    for path in (fifo, zero, directory):
        with pytest.raises(GateError) as caught:
            read_handoff(path)
        assert caught.value.message == (
            f"{path}: not a regular file, so not a shard handoff; nothing was read."
        )
    with pytest.raises(GateError, match=r"gone.handoff.json: cannot open it \(No such file"):
        read_handoff(tmp_path / "gone.handoff.json")


@pytest.mark.parametrize(
    ("blob", "problem"),
    [
        (b"[" * 100_000, "JSON nested too deeply"),
        (b'{"manifest": ' + b"1" * 5000 + b"}", "not JSON kiln reads (a number too long to convert)"),
        (b'{"manifest": "\xff"}', "not UTF-8 (byte 0xff at offset 14)"),
        (b'{"manifest": ', "not JSON (Expecting value at line 1, column 14)"),
    ],
)
def test_a_handoff_file_that_is_not_json_is_named(tmp_path: Path, blob: bytes, problem: str) -> None:
    path = tmp_path / "x.handoff.json"
    path.write_bytes(blob)
    with pytest.raises(GateError) as caught:
        read_handoff(path)
    assert caught.value.message == f"{path}: {problem}."


def test_a_log_that_is_not_text_is_refused() -> None:
    # json reads the escape as a lone surrogate, which UTF-8 cannot encode
    data = json.loads('{"manifest": {}, "wrapper_log": "ok\\ud800"}')
    assert refused(data) == (
        f"{WHERE}: wrapper_log is not text (a lone surrogate, '\\ud800', at character 2)."
    )


def test_keys_and_values_from_a_handoff_are_printed_escaped() -> None:
    many = {f"k{i}": 0 for i in range(8)}
    assert refused(many).endswith("not ['k0', 'k1', 'k2', 'k3', 'k4', and 3 more].")
    label = "1/2\n::error title=pwned::x\x1b[2J"
    message = refused(handoff(toolchain={"compilers": {}, "cache": {}, "arch_list": [],
                                         "build_env": {}, label: 1}))
    assert message == (
        f"{WHERE}: manifest is not a shard manifest: toolchain.1/2\\n::error title=pwned::"
        "x\\x1b[2J: Extra inputs are not permitted."
    )
    read = check_handoff(handoff(label=label, remote={"storage": label, "namespace": None}), WHERE)
    refusal = remote_refusal(read, "shard 1/2", None, None)
    assert refusal is not None and "\n" not in refusal and "\x1b" not in refusal
    assert refusal.startswith(
        "shard 1/2 stored its entries on remote storage ('1/2\\n::error title=pwned::x\\x1b[2J')"
    )


def test_the_link_job_names_a_handoff_it_cannot_read_from_its_storage() -> None:
    read = check_handoff(handoff(), WHERE)
    assert remote_refusal(read, "shard 1/2", "redis://cache:6379", "kiln-run1") is None
    assert remote_refusal(read, "shard 1/2", None, "kiln-run1") == (
        "shard 1/2 stored its entries on remote storage ('redis://cache:6379'), and this link "
        f"job has none; not merged ({WHERE})"
    )
    assert remote_refusal(read, "shard 1/2", "redis://cache:6379", "other") == (
        "shard 1/2 stored its entries under namespace 'kiln-run1', and this link job reads "
        f"namespace 'other'; not merged ({WHERE})"
    )


def test_a_shard_whose_entries_did_not_reach_the_remote_fails_its_gate_saying_why() -> None:
    from wheelkiln.cache.remote import RemotePlan, RemoteStatus
    from wheelkiln.shard.job import remote_handoff_problems

    url = "redis://cache:6379"
    assert remote_handoff_problems(RemotePlan(url, (RemoteStatus(url, True),))) == []
    down = RemotePlan(None, (RemoteStatus(url, False, "connection refused"),))
    assert remote_handoff_problems(down) == [
        f"remote cache storage {url} was unreachable (connection refused): this shard's "
        "entries are not on it"
    ]
    failing = RemotePlan(url, (RemoteStatus(url, True, errors=2),))
    assert remote_handoff_problems(failing) == [
        f"remote cache storage {url} failed 2 time(s) during the build: some of this shard's "
        "entries may not be on it"
    ]
    assert remote_handoff_problems(None) == [
        "no remote cache storage was used, so this shard's entries are nowhere"
    ]


def test_kiln_shard_handoff_remote_without_a_remote_is_refused_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from wheelkiln.cli import cli
    from wheelkiln.errors import UsageError

    (tmp_path / "pkg").mkdir()
    recipe = tmp_path / "pkg.toml"
    recipe.write_text('name = "pkg"\n[source]\npath = "pkg"\n[matrix]\npython = ["3.11"]\n')
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(
        cli, ["shard", str(recipe), "--index", "0", "--count", "2", "--handoff", "remote",
              "--out", str(tmp_path / "out")], env={"KILN_REMOTE": None})
    assert isinstance(result.exception, UsageError)
    assert result.exception.message == "--handoff remote needs remote cache storage, and none is set."
    assert not (tmp_path / "home" / "work").exists()


def test_a_read_only_remote_cannot_take_a_shards_entries() -> None:
    from wheelkiln.errors import UsageError
    from wheelkiln.shard.job import check_remote_handoff

    check_remote_handoff("redis://cache:6379")
    with pytest.raises(UsageError) as caught:
        check_remote_handoff("file:/mnt/a redis://:pw@cache:6379|read-only")
    assert caught.value.message == (
        "--handoff remote: the remote cache storage redis://:***@cache:6379|read-only is "
        "read-only, so this shard could not store its entries there."
    )
