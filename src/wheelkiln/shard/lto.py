"""Link-time optimisation: the part of a sharded build that stays in the link job.

A TU compiled with ``-flto`` is a GIMPLE (or LLVM bitcode) object: its machine code is
generated when it is linked. A shard's compile of it is the front end only, and the link
job's link runs the code generation of every LTO TU again, in one process per module,
whatever the cache holds. rapidfuzz 3.14.5 on this 2-core machine: its 10 TUs, all
``-flto``, took 154 and 247 s in the shards, then 172 s in the link job with 10 hits and
0 misses. The numbers are right; without this, they read as a slow link job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wheelkiln.shard.wrapper_log import WrapperRecord


def compiles_with_lto(argv: Sequence[str]) -> bool:
    """Whether a compile command makes an LTO object: its last ``-flto[=...]`` or
    ``-fno-lto`` says (GCC and Clang both take the last)."""
    lto = False
    for arg in argv:
        if arg == "-flto" or arg.startswith("-flto="):
            lto = True
        elif arg == "-fno-lto":
            lto = False
    return lto


def lto_summary(shard_logs: Mapping[int, Iterable[WrapperRecord]]) -> dict[str, Any]:
    """The TUs the shards compiled (``compile`` records, by TU key), and those with LTO."""
    compiled: set[str] = set()
    lto: set[str] = set()
    for records in shard_logs.values():
        for record in records:
            tu, argv = record.get("tu"), record.get("argv")
            if record.get("action") != "compile" or not isinstance(tu, str):
                continue
            compiled.add(tu)
            if isinstance(argv, list) and compiles_with_lto([str(a) for a in argv]):
                lto.add(tu)
    return {"tus": len(compiled), "lto_tus": len(lto)}


def describe_lto(summary: Mapping[str, Any] | None, link_seconds: float | None) -> str | None:
    """A summary line where the shards compiled LTO objects; None where they did not."""
    if not summary or not summary.get("lto_tus"):
        return None
    took = f" (its {link_seconds:.1f} s)" if link_seconds is not None else ""
    return (
        f"LTO: {summary['lto_tus']} of the {summary['tus']} TUs the shards compiled are "
        f"-flto objects, whose machine code the link job generates when it links them"
        f"{took}: no shard and no cache takes that part"
    )
