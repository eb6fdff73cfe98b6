"""The wheel cache: a digest over every input, whole entries or none, and damaged
entries dropped instead of served."""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from wheelkiln.builder import wheel_cache
from wheelkiln.builder.cmake_id import COMPILER_VARIABLES
from wheelkiln.builder.compiler_answers import DRIVER_VARIABLES
from wheelkiln.builder.wheel_cache import WheelCache, build_affecting_env, input_digest
from wheelkiln.cache.launch import NVCC_ENV_FLAGS
from wheelkiln.digest import sha256_file

BASE: dict[str, Any] = {
    "source_digest": "a" * 64,
    "recipe_json": '{"name":"demo"}',
    "cell_id": "demo-py3.11-linux-x86_64",
    "build_env_freeze": "0123abcd\nsetuptools==80.0\npybind11==2.13.6\n",
    "tool_versions": {"gcc": "12.2.0", "ccache": "4.14", "wheelkiln": "0.1.0"},
    "env": {"SOURCE_DATE_EPOCH": "1700000000"},
}


def digest(**changes: Any) -> str:
    return input_digest(**{**BASE, **changes})


def test_digest_is_stable_and_order_independent() -> None:
    assert digest() == digest()
    reordered = dict(reversed(list(BASE["tool_versions"].items())))
    assert digest(tool_versions=reordered) == digest()
    assert len(digest()) == 64


@pytest.mark.parametrize(
    "change",
    [
        {"source_digest": "b" * 64},
        {"recipe_json": '{"name":"demo","build":{"jobs":2}}'},
        {"cell_id": "demo-py3.12-linux-x86_64"},
        {"build_env_freeze": "0123abcd\nsetuptools==80.1\npybind11==2.13.6\n"},
        {"tool_versions": {"gcc": "13.1.0", "ccache": "4.14", "wheelkiln": "0.1.0"}},
        {"env": {"SOURCE_DATE_EPOCH": "1700086400"}},
        {"env": {"SOURCE_DATE_EPOCH": "1700000000", "CFLAGS": "-O3"}},
    ],
)
def test_every_input_changes_the_digest(change: dict[str, Any]) -> None:
    assert digest(**change) != digest()


def test_build_affecting_env_keeps_only_what_changes_the_output() -> None:
    environ = {"CFLAGS": "-O2", "HOME": "/root", "PATH": "/bin", "TORCH_CUDA_ARCH_LIST": "9.0",
               "MAX_JOBS": "8", "SOURCE_DATE_EPOCH": "1"}
    chosen = build_affecting_env(environ, source_date_epoch=1700000000, extra={"X_FLAG": "1"})
    assert chosen == {"CFLAGS": "-O2", "TORCH_CUDA_ARCH_LIST": "9.0",
                      "SOURCE_DATE_EPOCH": "1700000000", "X_FLAG": "1"}


def test_build_affecting_env_keeps_what_compilers_and_backends_read() -> None:
    # The compiler drivers' variables (gcc's and clang's search paths, clang's overrides,
    # the SDK), nvcc's options and every compiler a build system may pick: each one
    # changes the wheel, so each one must change the digest. OBJC_INCLUDE_PATH,
    # GCC_COMPARE_DEBUG, CCC_OVERRIDE_OPTIONS and SDKROOT were missing: a cached wheel was
    # served to a build that set them.
    for name in (*DRIVER_VARIABLES, *NVCC_ENV_FLAGS, *COMPILER_VARIABLES, "CC_LD", "NVCC",
                 "LDSHARED", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH", "SKBUILD_CMAKE_ARGS",
                 "CUDA_HOME", "PYTORCH_NVCC"):
        chosen = build_affecting_env({name: "x"}, source_date_epoch=1)
        assert chosen.get(name) == "x", name
        assert digest(env=chosen) != digest(env={"SOURCE_DATE_EPOCH": "1"}), name


def test_build_affecting_env_leaves_out_how_a_build_runs() -> None:
    # Under the keyed prefixes, but setting only parallelism, the job's directory, a
    # launcher or a GPU: keyed, every fleet job would miss every other's wheels.
    environ = {"CMAKE_BUILD_PARALLEL_LEVEL": "8", "SKBUILD_BUILD_DIR": "/w/job-3/build",
               "CMAKE_CXX_COMPILER_LAUNCHER": "ccache", "CUDA_VISIBLE_DEVICES": "1",
               "CUDA_CACHE_PATH": "/tmp/nv"}
    assert build_affecting_env(environ, source_date_epoch=1) == {"SOURCE_DATE_EPOCH": "1"}


def make_wheel(path: Path, payload: bytes = b"\x7fELF code") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zipped:
        zipped.writestr("demo/_core.so", payload)
    return path


def test_store_then_lookup(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    key = digest()
    assert cache.lookup(key) is None
    wheel = make_wheel(tmp_path / "dist" / "demo-0.1-cp311-cp311-linux_x86_64.whl")
    record = {"target": "demo", "wheel": {"name": "x.whl", "sha256": "old", "path": "/old"},
              "extensions": {"demo/_core.so": "e" * 64}}
    stored = cache.store(key, wheel, record)
    assert stored.wheel == tmp_path / "wheels" / key[:2] / key / wheel.name
    hit = cache.lookup(key)
    assert hit is not None and hit.wheel.read_bytes() == wheel.read_bytes()
    assert hit.record["wheel"] == {"name": wheel.name, "sha256": sha256_file(wheel),
                                   "size": wheel.stat().st_size}
    assert hit.record["input_digest"] == key and hit.record["extensions"] == record["extensions"]
    assert record["wheel"]["sha256"] == "old"  # the caller's record is not changed
    assert not [p for p in (tmp_path / "wheels" / key[:2]).iterdir() if p.name.startswith(".")]


def test_storing_the_same_digest_twice_keeps_one_entry(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    key = digest()
    first = make_wheel(tmp_path / "a" / "demo-0.1-py3-none-any.whl")
    cache.store(key, first, {"target": "demo"})
    again = cache.store(key, make_wheel(tmp_path / "b" / "demo-0.1-py3-none-any.whl"), {})
    assert again.wheel.read_bytes() == first.read_bytes()
    assert len(list((tmp_path / "wheels" / key[:2]).iterdir())) == 1


def test_a_damaged_entry_is_dropped_not_served(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    key = digest()
    stored = cache.store(key, make_wheel(tmp_path / "demo-0.1-py3-none-any.whl"), {})
    stored.wheel.write_bytes(stored.wheel.read_bytes()[:-5])  # truncated copy
    assert cache.lookup(key) is None
    assert not (tmp_path / "wheels" / key[:2] / key).exists()
    stored = cache.store(key, make_wheel(tmp_path / "demo-0.1-py3-none-any.whl"), {})
    (stored.wheel.parent / "record.json").write_text("{not json")
    assert cache.lookup(key) is None
    assert not stored.wheel.parent.exists()


def test_a_damaged_entry_stored_again_while_it_is_dropped_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Build A finds the entry damaged; before A drops it, build B drops it too and
    stores the same digest whole. A's drop must not take B's entry."""
    cache = WheelCache(tmp_path / "wheels")
    key = digest()
    good = make_wheel(tmp_path / "b" / "demo-0.1-py3-none-any.whl")
    damaged = cache.store(key, make_wheel(tmp_path / "a" / "demo-0.1-py3-none-any.whl"), {})
    damaged.wheel.write_bytes(damaged.wheel.read_bytes()[:-5])
    real = wheel_cache.sha256_file
    calls = 0

    def checked_while_b_stores(path: Path) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:  # A is checking the damaged wheel: B runs now
            assert cache.store(key, good, {"by": "B"}).record["by"] == "B"
            return "0" * 64  # what A read: the damaged wheel's bytes
        return real(path)

    monkeypatch.setattr(wheel_cache, "sha256_file", checked_while_b_stores)
    assert cache.lookup(key) is None  # A: a miss, and it drops what it found
    monkeypatch.setattr(wheel_cache, "sha256_file", real)
    kept = cache.lookup(key)
    assert kept is not None and kept.record["by"] == "B"
    assert kept.wheel.read_bytes() == good.read_bytes()
    assert [p.name for p in cache.entry(key).parent.iterdir()] == [key]


def test_dropping_leaves_nothing_aside(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    key = digest()
    entry = cache.entry(key)
    entry.parent.mkdir(parents=True)
    entry.write_text("a file where an entry belongs")
    assert cache.lookup(key) is None
    stored = cache.store(key, make_wheel(tmp_path / "demo-0.1-py3-none-any.whl"), {})
    assert stored.wheel.is_file() and cache.lookup(key) is not None
    assert [p.name for p in entry.parent.iterdir()] == [key]


def test_a_record_naming_a_missing_wheel_is_a_miss(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    key = digest()
    entry = cache.entry(key)
    entry.mkdir(parents=True)
    (entry / "record.json").write_text(json.dumps({"wheel": {"name": "gone.whl", "sha256": "0"}}))
    assert cache.lookup(key) is None


def test_digests_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an input digest"):
        WheelCache(tmp_path).lookup("../../etc")


def test_default_root_is_under_kiln_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    assert WheelCache().root == tmp_path / "home" / "wheels"


def _stored(tmp_path: Path, cache: WheelCache, key: str, used_days_ago: float = 0) -> Path:
    wheel = make_wheel(tmp_path / "dist" / key[:6] / "demo-0.1-cp311-cp311-linux_x86_64.whl")
    entry = cache.store(key, wheel, {"cell": "demo-py3.11-linux-x86_64"}).wheel.parent
    when = time.time() - used_days_ago * 86400
    os.utime(entry / "record.json", (when, when))
    return entry


def test_serving_copies_the_wheel_whole_and_marks_the_entry_used(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    entry = _stored(tmp_path, cache, digest(), used_days_ago=40)
    out = tmp_path / "out"
    served = cache.serve(digest(), out)
    assert served is not None
    assert [p.name for p in out.iterdir()] == [served.wheel.name]  # no partial copy left
    assert (out / served.wheel.name).read_bytes() == served.wheel.read_bytes()
    assert time.time() - (entry / "record.json").stat().st_mtime < 60
    assert [kept.digest for kept in cache.kept()] == [digest()]


def test_serving_a_damaged_or_hostile_entry_drops_it_and_writes_nothing(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    entry = _stored(tmp_path, cache, digest())
    wheel = next(entry.glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes()[:-5])
    out = tmp_path / "out"
    assert cache.serve(digest(), out) is None
    assert not entry.exists() and list(out.iterdir()) == []
    # A record naming a file outside its entry is not followed.
    entry = _stored(tmp_path, cache, digest())
    (tmp_path / "secret.whl").write_bytes(b"x")
    (entry / "record.json").write_text(json.dumps({"wheel": {"name": "../../../secret.whl",
                                                             "sha256": "0"}}))
    assert cache.serve(digest(), out) is None
    assert not entry.exists() and list(out.iterdir()) == []


def test_an_entry_pruned_while_it_is_served_is_served_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = WheelCache(tmp_path / "wheels")
    entry = _stored(tmp_path, cache, digest(), used_days_ago=40)
    expected = next(entry.glob("*.whl")).read_bytes()
    opened = Path.open

    def open_then_prune(self: Path, *args: Any, **kwargs: Any) -> Any:
        handle = opened(self, *args, **kwargs)
        if self.suffix == ".whl" and self.parent == entry:
            # A prune that listed the entry before this build served it takes it now.
            assert [p.outcome for p in cache.prune(30 * 86400)] == ["removed"]
        return handle

    monkeypatch.setattr(Path, "open", open_then_prune)
    out = tmp_path / "out"
    served = cache.serve(digest(), out)
    monkeypatch.undo()
    assert served is not None and not entry.exists()
    assert (out / served.wheel.name).read_bytes() == expected
    # Gone before a build asks: a miss, and the build builds.
    assert cache.serve(digest(), tmp_path / "out2") is None


def test_prune_removes_entries_and_leftovers_unused_for_longer(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    old, recent = "a" * 64, "b" * 64
    old_entry = _stored(tmp_path, cache, old, used_days_ago=31)
    recent_entry = _stored(tmp_path, cache, recent, used_days_ago=29)
    killed = old_entry.parent / ".staging-killed"  # a store killed 40 days ago
    killed.mkdir()
    (killed / "half.whl").write_bytes(b"x" * 1000)
    then = time.time() - 40 * 86400
    os.utime(killed, (then, then))
    working = old_entry.parent / ".staging-now"  # a store at work
    working.mkdir()

    dry = cache.prune(30 * 86400, dry_run=True)
    assert sorted((r.entry.digest, r.outcome, r.leftover) for r in dry) == [
        (".staging-killed", "would remove", True), (old, "would remove", False),
        (recent, "recent", False)]  # fmt: skip
    assert old_entry.exists() and killed.exists()

    done = {r.entry.digest: r for r in cache.prune(30 * 86400)}
    assert done[old].outcome == "removed" and done[old].entry.size > 0
    assert done[".staging-killed"].entry.size == 1000
    assert not old_entry.exists() and not killed.exists()
    assert recent_entry.exists() and working.exists()
    assert not [p for p in old_entry.parent.iterdir() if p.name.startswith(".pruned-")]
    assert [kept.digest for kept in cache.kept()] == [recent]


def test_prune_follows_no_symlink_in_the_cache(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    old_entry = _stored(tmp_path, cache, "a" * 64, used_days_ago=40)
    elsewhere = write_old_tree(tmp_path / "elsewhere")
    (old_entry.parent / ("c" * 64)).symlink_to(elsewhere)  # an entry's place
    (old_entry.parent / ".staging-x").symlink_to(elsewhere)  # a leftover's place
    (tmp_path / "wheels" / "dd").symlink_to(tmp_path / "elsewhere-shard")
    write_old_tree(tmp_path / "elsewhere-shard" / ".staging-y")
    assert [kept.digest for kept in cache.kept()] == ["a" * 64]
    done = cache.prune(30 * 86400)
    assert [(r.entry.digest, r.outcome) for r in done] == [("a" * 64, "removed")]
    assert (elsewhere / "keep.txt").is_file()
    assert (tmp_path / "elsewhere-shard" / ".staging-y" / "keep.txt").is_file()


def write_old_tree(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "keep.txt").write_text("not the cache's")
    then = time.time() - 40 * 86400
    for item in (path / "keep.txt", path):
        os.utime(item, (then, then))
    return path
