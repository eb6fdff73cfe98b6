"""SeatConfig.to_environ: the one writer of the wrapper's KILN_* settings, read back by
from_environ exactly; the shard count always written, so a stray one cannot switch the
seat partition on."""

from __future__ import annotations

from typing import Any

from wheelkiln.shard.wrapper import SeatConfig


class _Reads(dict[str, str]):
    """An environment that remembers which variables were asked for."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.asked.add(key)
        return super().get(key, default)


def _fields(config: SeatConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in SeatConfig.__slots__}


SEAT = SeatConfig(
    shard_index=2,
    shard_count=4,
    package_root="/w/pkg-shard-2/src",
    log_path="/w/pkg-shard-2/wrapper.jsonl",
    cache="/venv/bin/ccache",
    stub_object="/w/pkg-shard-2/empty.o",
    partition_map_path="/w/map.json",
    build_dir="/w/pkg-shard-2/build",
    placeholder_object="/w/pkg-shard-2/placeholder.o",
    ahead_dir="/w/pkg-shard-2/ahead",
)


def test_seat_settings_read_back_as_written() -> None:
    assert _fields(SeatConfig.from_environ(SEAT.to_environ())) == _fields(SEAT)


def test_source_mode_reads_back_as_a_pass_through() -> None:
    source = SeatConfig(package_root="/w/src", log_path="/w/log", stub_object="/w/e.o")
    read = SeatConfig.from_environ(source.to_environ())
    assert not read.seat_active
    assert _fields(read) == _fields(source)


def test_every_variable_the_wrapper_reads_is_written() -> None:
    environ = _Reads(SEAT.to_environ())
    SeatConfig.from_environ(environ)
    assert environ.asked == set(SEAT.to_environ())


def test_a_stray_shard_count_in_the_callers_environment_is_overwritten() -> None:
    """Under the source partition a leftover KILN_SHARD_COUNT would switch the seat
    partition on too: each shard would compile about 1/N² of the build."""
    caller = {"KILN_SHARD_COUNT": "4", "KILN_SHARD_INDEX": "1"}
    source = SeatConfig(package_root="/w/src", log_path="/w/log", stub_object="/w/e.o")
    read = SeatConfig.from_environ({**caller, **source.to_environ()})
    assert not read.seat_active


def test_no_cache_means_none_even_with_one_in_the_callers_environment() -> None:
    uncached = SeatConfig(shard_index=0, shard_count=2, package_root="/w/src")
    read = SeatConfig.from_environ({"KILN_CACHE": "/old/ccache", **uncached.to_environ()})
    assert read.cache is None


def test_only_the_shard_job_says_where_tus_are_claimed_for_compiling_ahead() -> None:
    """A KILN_AHEAD_DIR left in the caller's shell would have a shard without one (the
    source partition) claim TUs in another job's directory."""
    source = SeatConfig(package_root="/w/src", log_path="/w/log", stub_object="/w/e.o")
    read = SeatConfig.from_environ({"KILN_AHEAD_DIR": "/old/ahead", **source.to_environ()})
    assert read.ahead_dir is None
