"""The wrapper log, read and typed: one JSON object per compiler call in a shard job.

The seat wrapper writes it (:func:`wheelkiln.shard.wrapper.append_record`), stdlib only,
because it starts once per TU. This module is its one reader, for the shard gate, the
link job's miss explanations and the cost-balanced partition map. A log travels inside
a shard archive, so it is hostile input: every line must be a record of the shape below,
or the reader names the log (or archive member), the line and the problem. One line is
forgiven: a last line without its newline, torn by a process killed mid-write, is
skipped with a warning.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Annotated, Literal, Required

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from wheelkiln.errors import GateError

WRAPPER_LOG = "wrapper.jsonl"
"""Its name in a shard's job directory and, under ``extra/``, in a shard archive."""
MAX_LINE_BYTES = 16 * 1024**2
"""A record holds one command line; nvcc's longest are tens of KiB."""

Action = Literal[
    "compile",
    "ahead",
    "stub",
    "probe",
    "host-pass",
    "link",
    "link-unresolved",
    "link-probe-rebuild",
    "link-deferred",
    "passthrough",
]
"""The wrapper's :data:`~wheelkiln.shard.wrapper.ACTIONS` (a unit test keeps them equal)."""


@with_config(ConfigDict(extra="forbid", strict=True))
class WrapperRecord(TypedDict, total=False):
    """One compiler call. A plain mapping, so the gate's pure functions take records
    from a log and from a test alike; the wrapper writes every key."""

    tu: str | None
    """The TU key (path relative to the package root), or None for links."""
    action: Required[Action]
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    exit: int
    output: str | None
    argv: list[str]
    cwd: str
    pid: int
    unresolved: list[str]
    """For a tolerated link (``link-unresolved``): the first symbols the linker named."""
    unresolved_count: int
    waited: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """For a compile: the seconds it waited for its TU's compile ahead to end, its slot
    idle (shard/ahead.py)."""


_RECORD = TypeAdapter(WrapperRecord)


def _problem(line: bytes) -> tuple[WrapperRecord | None, str]:
    import json

    try:
        data = json.loads(line.rstrip(b"\r\n").decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte {line[exc.start]:#04x} at offset {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})"
    except ValueError:  # the only other one json raises: int()'s limit of 4300 digits
        return None, "not JSON kiln reads (a number too long to convert)"
    except RecursionError:
        return None, "JSON nested too deeply"
    try:
        return _RECORD.validate_python(data), ""
    except ValidationError as exc:
        first = exc.errors()[0]
        # an unknown key is named as written: shown escaped, as it came from another job
        where = ".".join(
            str(part) if str(part).isprintable() else repr(part) for part in first["loc"]
        ) or "the record"
        return None, f"not a wrapper record ({where}: {first['msg']})"


def parse_wrapper_log(handle: IO[bytes], source: str) -> list[WrapperRecord]:
    """The records of an open log, in order; ``source`` names it in errors (a path, or
    ``ARCHIVE, member 'extra/wrapper.jsonl'``)."""
    records: list[WrapperRecord] = []
    number = 0
    while line := handle.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(line) > MAX_LINE_BYTES:
            raise GateError(
                f"{source}: line {number} is longer than {MAX_LINE_BYTES // 1024**2} MiB; "
                "this is not a wrapper log.",
                hint=_HINT,
            )
        if not line.strip():
            continue
        record, problem = _problem(line)
        if record is not None:
            records.append(record)
        elif not line.endswith(b"\n"):  # only the last line can lack one
            print(
                f"warning: skipped the torn last line ({number}) of the wrapper log {source}",
                file=sys.stderr,
            )
        else:
            raise GateError(f"{source}: line {number} is {problem}.", hint=_HINT)
    return records


_HINT = (
    "The seat wrapper writes one JSON object per line; re-run the shard job that wrote "
    "this log rather than trusting it."
)


def read_wrapper_log(path: str | os.PathLike[str]) -> list[WrapperRecord]:
    """The records of the wrapper log at ``path``, in order. A missing log has none."""
    try:
        with Path(path).open("rb") as handle:
            return parse_wrapper_log(handle, os.fspath(path))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise GateError(f"{os.fspath(path)}: cannot read the wrapper log ({exc}).") from None


def action_counts(records: Iterable[WrapperRecord]) -> dict[str, int]:
    """Records per action (``{"compile": 12, "stub": 30, ...}``)."""
    return dict(Counter(record["action"] for record in records))


def summarize_wrapper_log(path: str | os.PathLike[str]) -> dict[str, int]:
    return action_counts(read_wrapper_log(path))
