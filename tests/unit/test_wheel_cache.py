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

from tests.conftest import kiln_in_process
from tests.processes import within
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
    real = wheel_cache._wheel_matches
    calls = 0

    def checked_while_b_stores(entry: Path, read: Any) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:  # A is checking the damaged wheel: B runs now
            assert cache.store(key, good, {"by": "B"}).record["by"] == "B"
            return False  # what A read: the damaged wheel
        return real(entry, read)

    monkeypatch.setattr(wheel_cache, "_wheel_matches", checked_while_b_stores)
    assert cache.lookup(key) is None  # A: a miss, and it drops what it found
    monkeypatch.setattr(wheel_cache, "_wheel_matches", real)
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
    assert not entry.exists() and not out.exists()
    # A record naming a file outside its entry is not followed.
    entry = _stored(tmp_path, cache, digest())
    (tmp_path / "secret.whl").write_bytes(b"x")
    (entry / "record.json").write_text(json.dumps({"wheel": {"name": "../../../secret.whl",
                                                             "sha256": "0"}}))
    assert cache.serve(digest(), out) is None
    assert not entry.exists() and not out.exists()


def test_an_entry_pruned_while_it_is_served_is_served_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = WheelCache(tmp_path / "wheels")
    entry = _stored(tmp_path, cache, digest(), used_days_ago=40)
    expected = next(entry.glob("*.whl")).read_bytes()
    opened = wheel_cache.open_regular

    def open_then_prune(path: Path, *args: Any) -> int:
        fd = opened(path, *args)
        if path.suffix == ".whl" and path.parent == entry:
            # A prune that listed the entry before this build served it takes it now.
            assert [p.outcome for p in cache.prune(30 * 86400)] == ["removed"]
        return fd

    monkeypatch.setattr(wheel_cache, "open_regular", open_then_prune)
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


def _hostile_wheel(entry: Path, kind: str) -> Path:
    wheel = next(entry.glob("*.whl"))
    wheel.unlink()
    if kind == "zero":
        wheel.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(wheel)
    elif kind == "link":  # the same bytes, but through a link: not the cache's file
        copy = entry.parent.parent / "elsewhere.whl"
        copy.write_bytes(make_wheel(entry.parent.parent / "src" / wheel.name).read_bytes())
        wheel.symlink_to(copy)
    else:  # longer than its record says
        wheel.write_bytes(make_wheel(entry.parent.parent / "src" / wheel.name).read_bytes() + b"x")
    return wheel


@pytest.mark.parametrize("kind", ["zero", "fifo", "link", "longer"])
def test_a_wheel_that_is_not_the_regular_file_stored_is_dropped_not_served(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = WheelCache(tmp_path / "wheels")
    for check in ("serve", "lookup"):
        entry = _stored(tmp_path, cache, digest())
        wheel = _hostile_wheel(entry, kind)
        out = tmp_path / "out"
        with within(5):
            got = cache.serve(digest(), out) if check == "serve" else cache.lookup(digest())
        assert got is None
        assert not entry.exists() and not out.exists()  # dropped; no .part copy anywhere
        err = capsys.readouterr().err
        assert f"warning: dropped a damaged wheel cache entry: {wheel}: " in err
        reason = {"zero": "a symbolic link, not a regular file", "fifo": "not a regular file",
                  "link": "a symbolic link, not a regular file",
                  "longer": "134 bytes, its record says 133"}[kind]  # fmt: skip
        assert err.endswith(f"{reason}.\n")
    # The build goes on as a miss, stores its wheel, and the next build is served it.
    _stored(tmp_path, cache, digest())
    assert cache.serve(digest(), tmp_path / "out") is not None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 100_000, "nested too deep"),
        ('{"wheel": {"name": "demo-0.1-py3-none-any.whl", "sha256": "' + "0" * 64
         + '", "size": ' + "9" * 5000 + "}}", "Exceeds the limit"),
        ('{"wheel": {"name": "demo-0.1-py3-none-any.whl", "sha256": "' + "0" * 64
         + '", "size": Infinity}}', "Infinity is not a number JSON allows"),
        ('{"wheel": ["demo-0.1-py3-none-any.whl"]}', "no wheel in it"),
        ('{"wheel": {"name": "demo-0.1-py3-none-any.whl", "sha256": ["x"]}}',
         "wheel.sha256 is not a sha256"),
        ('{"wheel": {"name": "demo-0.1-py3-none-any.whl", "sha256": "' + "0" * 64
         + '", "size": -1}}', "wheel.size is not a number of bytes"),
    ],
)  # fmt: skip
def test_an_unreadable_record_is_a_miss_with_a_warning_naming_it(
    text: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = WheelCache(tmp_path / "wheels")
    entry = _stored(tmp_path, cache, digest())
    (entry / "record.json").write_text(text)
    listed = cache.kept()
    assert [(kept.digest, kept.wheel) for kept in listed] == [(digest(), "")]  # damaged
    err = capsys.readouterr().err
    assert f"warning: {entry / 'record.json'}: not a readable record (" in err
    assert reason in err and "the entry is listed as damaged" in err
    assert cache.lookup(digest()) is None and not entry.exists()
    assert f"dropped a damaged wheel cache entry: {entry / 'record.json'}" in capsys.readouterr().err
    entry = _stored(tmp_path, cache, digest())
    (entry / "record.json").write_text(text)
    assert cache.serve(digest(), tmp_path / "out") is None and not entry.exists()


def test_a_record_that_is_a_fifo_or_a_link_to_dev_zero_is_never_read(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / "wheels")
    for hostile in (os.mkfifo, lambda path: Path(path).symlink_to("/dev/zero")):
        entry = _stored(tmp_path, cache, digest())
        (entry / "record.json").unlink()
        hostile(entry / "record.json")
        with within(5):
            assert [kept.wheel for kept in cache.kept()] == [""]
            assert cache.serve(digest(), tmp_path / "out") is None
        assert not entry.exists()


def test_kiln_wheels_list_shows_a_damaged_entry_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    cache = WheelCache()
    good = _stored(tmp_path, cache, "a" * 64, used_days_ago=2)
    bad = _stored(tmp_path, cache, "b" * 64, used_days_ago=1)
    (bad / "record.json").write_text("[" * 100_000)
    code, out, err = kiln_in_process(monkeypatch, capsys, ["wheels", "list", "--json"])
    assert code == 0
    # The damaged entry by its directory's time (now): no record says when it was used.
    listed = json.loads(out)
    assert [(e["digest"], e["wheel"]) for e in listed] == [
        ("a" * 64, next(good.glob("*.whl")).name), ("b" * 64, "")
    ]
    assert f"warning: {bad / 'record.json'}: not a readable record (nested too deep)" in err
