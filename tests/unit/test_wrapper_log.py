"""The wrapper log's one reader: typed records, a named error for any other line, and
the torn last line of a killed process forgiven."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import get_args

import pytest

from wheelkiln.errors import GateError
from wheelkiln.shard import wrapper
from wheelkiln.shard.wrapper_log import (
    Action,
    parse_wrapper_log,
    read_wrapper_log,
    summarize_wrapper_log,
)

RECORDS: list[dict[str, object]] = [
    {"tu": "csrc/a.cu", "action": "compile", "exit": 0, "output": "/b/a.o"},
    {"tu": "csrc/b.cu", "action": "stub", "exit": 0, "output": "/b/b.o"},
    {"tu": None, "action": "link", "exit": 1, "output": "/b/x.so"},
]


def test_the_reader_knows_every_action_the_wrapper_writes() -> None:
    assert get_args(Action) == wrapper.ACTIONS


def test_records_the_wrapper_writes_read_back_unchanged(tmp_path: Path) -> None:
    record = wrapper._record("src/ü.c", "compile", 1.25, 0, "/b/u.o", ["gcc", "-c", "\udcff.c"], "/b", )
    unresolved = {**wrapper._record(None, "link-unresolved", 2, 1, "/b/x.so", ["g++"], "/b"),
                  "unresolved": ["f()"], "unresolved_count": 1}
    log = tmp_path / "wrapper.jsonl"
    wrapper.append_record(str(log), record)
    wrapper.append_record(str(log), unresolved)
    assert read_wrapper_log(log) == [record, {**unresolved, "seconds": 2.0}]


def test_wrapper_log_tolerates_a_torn_last_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "wrapper.jsonl"
    lines = [json.dumps(record) for record in RECORDS]
    log.write_text("\n".join(lines) + '\n{"tu": "csrc/z.cu", "action": "comp')
    assert read_wrapper_log(log) == RECORDS
    assert f"skipped the torn last line (4) of the wrapper log {log}" in capsys.readouterr().err
    assert summarize_wrapper_log(log) == {"compile": 1, "stub": 1, "link": 1}
    assert read_wrapper_log(tmp_path / "missing.jsonl") == []
    assert summarize_wrapper_log(tmp_path / "missing.jsonl") == {}


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b"not json", "line 2 is not JSON (Expecting value at column 1)"),
        (b'{"action": "compile"', "line 2 is not JSON (Expecting ',' delimiter at column 21)"),
        (b"[1, 2]", "line 2 is not a wrapper record (the record: Input should be a valid dictionary"),
        (b'{"action": "explode"}', "line 2 is not a wrapper record (action: Input should be 'compile'"),
        (b'{"tu": 3, "action": "stub"}', "line 2 is not a wrapper record (tu: Input should be a valid string"),
        (b'{"action": "stub", "seconds": "1"}',
         "line 2 is not a wrapper record (seconds: Input should be a valid number"),
        (b'{"action": "stub", "seconds": -1}',
         "line 2 is not a wrapper record (seconds: Input should be greater than or equal to 0"),
        (b'{"action": "stub", "argv": "gcc -c a.c"}',
         "line 2 is not a wrapper record (argv: Input should be a valid list"),
        (b'{"action": "stub", "exit": true}',
         "line 2 is not a wrapper record (exit: Input should be a valid integer"),
        (b'{"action": "stub", "surprise": 1}',
         "line 2 is not a wrapper record (surprise: Extra inputs are not permitted"),
        (b'{"tu": "\xff", "action": "stub"}', "line 2 is not UTF-8 (byte 0xff at offset 8)"),
        (b"[" * 100_000, "line 2 is JSON nested too deeply"),
        # int() refuses more than 4300 digits with a bare ValueError
        (b'{"action": "compile", "exit": ' + b"1" * 5000 + b"}",
         "line 2 is not JSON kiln reads (a number too long to convert)."),
        # an unknown key is named, escaped: it came from another job
        (b'{"action": "stub", "\\n::error title=x::y\\u001b[2J": 1}',
         "line 2 is not a wrapper record ('\\n::error title=x::y\\x1b[2J': Extra inputs are not "
         "permitted"),
    ],
)
def test_any_other_bad_line_is_named(line: bytes, problem: str) -> None:
    text = json.dumps(RECORDS[0]).encode() + b"\n" + line + b"\n" + json.dumps(RECORDS[1]).encode() + b"\n"
    with pytest.raises(GateError) as caught:
        parse_wrapper_log(io.BytesIO(text), "A.tar.gz, member 'extra/wrapper.jsonl'")
    assert caught.value.message.startswith(f"A.tar.gz, member 'extra/wrapper.jsonl': {problem}")
    assert caught.value.exit_code == 5


def test_a_line_too_long_is_refused_before_it_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from wheelkiln.shard import wrapper_log

    monkeypatch.setattr(wrapper_log, "MAX_LINE_BYTES", 1000)
    with pytest.raises(GateError, match="line 1 is longer than"):
        parse_wrapper_log(io.BytesIO(b"x" * 5000 + b"\n"), "log")
