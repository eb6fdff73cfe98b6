"""LTO objects in a sharded build: counted, and said to be the link job's work."""

from __future__ import annotations

from wheelkiln.shard.lto import compiles_with_lto, describe_lto, lto_summary


def test_lto_objects_are_counted_from_the_shards_compile_records() -> None:
    assert compiles_with_lto(["gcc", "-O2", "-flto", "-c", "a.c"])
    assert compiles_with_lto(["g++", "-flto=auto", "-c", "a.cpp"])
    assert not compiles_with_lto(["gcc", "-flto", "-fno-lto", "-c", "a.c"])  # the last says
    assert not compiles_with_lto(["gcc", "-flto-partition=one", "-c", "a.c"])
    logs = {
        0: [
            {"action": "compile", "tu": "src/a.cpp", "argv": ["g++", "-flto", "-c", "a.cpp"]},
            {"action": "stub", "tu": "src/b.cpp", "argv": ["g++", "-flto", "-c", "b.cpp"]},
            {"action": "probe", "argv": ["g++", "-flto", "-c", "t.cpp"]},
        ],
        1: [{"action": "compile", "tu": "src/b.cpp", "argv": ["g++", "-c", "b.cpp"]}],
    }
    summary = lto_summary(logs)
    assert summary == {"tus": 2, "lto_tus": 1}
    assert describe_lto(summary, 172.25) == (
        "LTO: 1 of the 2 TUs the shards compiled are -flto objects, whose machine code the "
        "link job generates when it links them (its 172.2 s): no shard and no cache takes "
        "that part"
    )
    assert describe_lto(summary, None) == (
        "LTO: 1 of the 2 TUs the shards compiled are -flto objects, whose machine code the "
        "link job generates when it links them: no shard and no cache takes that part"
    )
    assert describe_lto({"tus": 2, "lto_tus": 0}, 1.0) is None
    assert describe_lto(None, 1.0) is None
