"""Kept environments: listing them, and pruning only those unused and held by no process.

The environments here are directories laid out as kiln leaves them (a record written
last, lock files beside); the process that holds one is a real second process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import kiln_in_process
from tests.processes import within
from wheelkiln import holds
from wheelkiln.builder import env_store

DAY = 86400.0
ROOT = Path(__file__).resolve().parents[2]


def make_env(root: Path, key: str, *, age_days: float, payload: int = 1000,
             marked: bool = True) -> Path:  # fmt: skip
    """A complete build environment *key* last used *age_days* ago (by its ``.inuse``
    file, or only by its record when not *marked*, as before uses were marked)."""
    path = root / key
    (path / "lib").mkdir(parents=True)
    (path / "lib" / "blob").write_bytes(b"x" * payload)
    record = path / "kiln-env.json"
    record.write_text(json.dumps({"requires": ["setuptools", "pybind11"]}))
    (root / f"{key}.lock").touch()
    when = time.time() - age_days * DAY
    if marked:
        (root / f"{key}.inuse").touch()
        os.utime(root / f"{key}.inuse", (when, when))
    os.utime(record, (when, when))
    return path


def test_listing_names_complete_environments_with_their_size_and_last_use(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    make_env(root, "a" * 16, age_days=40, payload=5000)
    make_env(root, "b" * 16, age_days=2, marked=False)
    (root / "not-a-key").mkdir()
    (root / "not-a-key" / "kiln-env.json").write_text("{}")
    (root / ("d" * 16)).mkdir()  # no record: a failed attempt, not an environment
    (root / "resolved").mkdir()
    (root / ("e" * 16)).symlink_to(root / ("a" * 16))
    found = env_store.stored(root, "build")
    assert [e.key for e in found] == ["a" * 16, "b" * 16]
    old, recent = found
    assert old.size == 5000 + len(json.dumps({"requires": ["setuptools", "pybind11"]}))
    assert time.time() - old.last_used == pytest.approx(40 * DAY, abs=60)
    # Without a mark, the record's time; listing creates no mark.
    assert time.time() - recent.last_used == pytest.approx(2 * DAY, abs=60)
    assert not (root / f"{'b' * 16}.inuse").exists()
    assert old.requires == ("setuptools", "pybind11")
    assert not old.in_use and not recent.in_use


def test_prune_removes_what_is_unused_for_longer_and_keeps_the_lock_files(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    old = make_env(root, "a" * 16, age_days=40)
    legacy = make_env(root, "b" * 16, age_days=31, marked=False)
    recent = make_env(root, "c" * 16, age_days=3)
    listed = env_store.stored(root, "build")

    dry = {p.environment.key: p.outcome for p in env_store.prune(listed, 30 * DAY, dry_run=True)}
    assert dry == {"a" * 16: "would remove", "b" * 16: "would remove", "c" * 16: "recent"}
    assert old.is_dir() and legacy.is_dir()
    # The dry run's lock made a mark for the legacy environment; it kept its age.
    listed = env_store.stored(root, "build")
    assert time.time() - listed[1].last_used == pytest.approx(31 * DAY, abs=60)

    done = {p.environment.key: p.outcome for p in env_store.prune(listed, 30 * DAY)}
    assert done == {"a" * 16: "removed", "b" * 16: "removed", "c" * 16: "recent"}
    assert not old.exists() and not legacy.exists() and recent.is_dir()
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [f"{k * 16}.{suffix}" for k in "abc" for suffix in ("lock", "inuse")] + ["c" * 16]
    )


HOLDER = """
import sys
from pathlib import Path
from wheelkiln import holds
holds.hold(Path(sys.argv[1]), sys.argv[2])
print("held", flush=True)
sys.stdin.read()
"""


def test_an_environment_a_running_process_holds_is_never_removed(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    path = make_env(root, "a" * 16, age_days=40)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), "a" * 16],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        # Holding marks it used now; make it look old again, as a process running for
        # longer than the age would.
        when = time.time() - 40 * DAY
        os.utime(root / f"{'a' * 16}.inuse", (when, when))
        listed = env_store.stored(root, "build")
        assert listed[0].in_use
        assert [p.outcome for p in env_store.prune(listed, 30 * DAY)] == ["in use"]
        assert path.is_dir()
    finally:
        holder.communicate("")
    assert holder.returncode == 0
    listed = env_store.stored(root, "build")
    assert not listed[0].in_use
    assert [p.outcome for p in env_store.prune(listed, 30 * DAY)] == ["removed"]
    assert not path.exists()


def test_a_use_after_listing_keeps_the_environment(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    path = make_env(root, "a" * 16, age_days=40)
    listed = env_store.stored(root, "build")
    # A build used it and ended between the listing and the prune.
    os.utime(root / f"{'a' * 16}.inuse")
    assert [p.outcome for p in env_store.prune(listed, 30 * DAY)] == ["recent"]
    assert path.is_dir()


def test_this_process_holding_it_counts_as_in_use(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    path = make_env(root, "a" * 16, age_days=40)
    holds.hold(root, "a" * 16)
    assert time.time() - (root / f"{'a' * 16}.inuse").stat().st_mtime < 60
    listed = env_store.stored(root, "build")
    assert listed[0].in_use
    assert [p.outcome for p in env_store.prune(listed, 0)] == ["in use"]
    assert path.is_dir()


def test_a_hold_outlives_its_directory_being_emptied(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    make_env(root, "a" * 16, age_days=40)
    holds.hold(root, "a" * 16)
    shutil.rmtree(root)
    # The environment is made again where it was: this process holds the new one.
    path = make_env(root, "a" * 16, age_days=40, marked=False)
    holds.hold(root, "a" * 16)
    listed = env_store.stored(root, "build")
    assert listed[0].in_use
    assert [p.outcome for p in env_store.prune(listed, 0)] == ["in use"]
    assert path.is_dir()


def test_leftovers_of_killed_runs_are_cleared_unless_their_maker_is_at_work(
    tmp_path: Path,
) -> None:
    root = tmp_path / "envs"
    keep = make_env(root, "a" * 16, age_days=1)
    staging = root / ".staging-0123456789abcdef"
    (staging / "lib").mkdir(parents=True)
    (staging / "lib" / "torch.so").write_bytes(b"x" * 4096)
    (root / "resolved").mkdir()
    unfinished = root / ("b" * 16)
    (unfinished / "bin").mkdir(parents=True)
    dead = root / f".pruned-{'c' * 16}-{2**22 + 12345}"  # above pid_max's default
    dead.mkdir()
    busy_staging = root / ".staging-fedcba9876543210"
    busy_staging.mkdir()
    held = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(root / "resolved" / "fedcba9876543210.lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert held.stdout is not None and held.stdout.readline() == "held\n"
        named = list(env_store.leftovers(root, "build", dry_run=True))
        assert [(x.path.name, x.what) for x in named] == [
            (dead.name, "pruned"), (staging.name, "staging"), (unfinished.name, "unfinished")
        ]
        assert named[1].size == 4096 and staging.is_dir()
        cleared = list(env_store.leftovers(root, "build"))
        assert [x.path for x in cleared] == [x.path for x in named]
        assert not staging.exists() and not dead.exists() and not unfinished.exists()
        # The install still at work keeps its staging venv; complete environments stay.
        assert busy_staging.is_dir() and keep.is_dir()
    finally:
        held.communicate("")


LOCKER = """
import fcntl, sys
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_kept_bytecode_goes_once_no_environment_links_it(tmp_path: Path) -> None:
    store = tmp_path / "bytecode"
    old = time.time() - 40 * DAY
    for name in ("linked-1.0", "unlinked-1.0", "recent-1.0"):
        pyc = store / name / "pkg" / "__pycache__" / "m.cpython-311.pyc"
        pyc.parent.mkdir(parents=True)
        pyc.write_bytes(b"x" * 100)
        if name != "recent-1.0":
            os.utime(pyc, (old, old))
    os.link(store / "linked-1.0" / "pkg" / "__pycache__" / "m.cpython-311.pyc", tmp_path / "in-env.pyc")
    named = list(env_store.unused_bytecode(store, 30 * DAY, dry_run=True))
    assert [(x.path.name, x.what, x.size) for x in named] == [("unlinked-1.0", "bytecode", 100)]
    assert (store / "unlinked-1.0").is_dir()
    assert [x.path for x in env_store.unused_bytecode(store, 30 * DAY)] == [store / "unlinked-1.0"]
    assert sorted(p.name for p in store.iterdir()) == ["linked-1.0", "recent-1.0"]


def test_a_dry_run_names_the_bytecode_only_environments_it_would_remove_link(
    tmp_path: Path,
) -> None:
    store = tmp_path / "bytecode"
    old = time.time() - 40 * DAY
    going, staying = tmp_path / "envs" / "going", tmp_path / "envs" / "staying"
    for name, linked_from in (("only-going-1.0", [going]), ("both-1.0", [going, staying])):
        pyc = store / name / "pkg" / "__pycache__" / "m.cpython-311.pyc"
        pyc.parent.mkdir(parents=True)
        pyc.write_bytes(b"x" * 100)
        os.utime(pyc, (old, old))
        for environment in linked_from:
            (environment / name).mkdir(parents=True)
            os.link(pyc, environment / name / "m.cpython-311.pyc")
    assert list(env_store.unused_bytecode(store, 30 * DAY, dry_run=True)) == []
    named = list(env_store.unused_bytecode(store, 30 * DAY, dry_run=True, leaving=[going]))
    assert [x.path.name for x in named] == ["only-going-1.0"]
    shutil.rmtree(going)  # what the real run does first
    assert [x.path.name for x in env_store.unused_bytecode(store, 30 * DAY)] == ["only-going-1.0"]


def test_holding_where_nothing_can_be_written_goes_on_without_a_mark() -> None:
    # Under /proc nothing can be made, not even by root: environments shared read-only.
    holds.hold(Path("/proc/kiln-no-such-dir/envs"), "a" * 16)


def _kiln(argv: list[str], home: Path, capsys: pytest.CaptureFixture[str],
          monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:  # fmt: skip
    monkeypatch.setenv("KILN_HOME", str(home))
    return kiln_in_process(monkeypatch, capsys, [*argv])


def test_kiln_envs_prune_and_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    make_env(home / "envs", "a" * 16, age_days=40, payload=3 * 2**20)
    make_env(home / "envs", "b" * 16, age_days=1)
    smoke = make_env(home / "smoke-envs", "c" * 16, age_days=50)
    (smoke / "kiln-env.json").rename(smoke / "kiln-smoke-env.json")

    code, out, _ = _kiln(["envs", "list", "--json"], home, capsys, monkeypatch)
    assert code == 0
    assert [(e["kind"], e["key"]) for e in json.loads(out)] == [
        ("build", "a" * 16), ("build", "b" * 16), ("smoke", "c" * 16)
    ]

    kept = home / "bytecode" / "pkg-1.0-0123abcd" / "pkg" / "__pycache__" / "m.cpython-311.pyc"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"x" * 100)
    os.utime(kept, (time.time() - 40 * DAY,) * 2)
    os.link(kept, home / "envs" / ("a" * 16) / "lib" / "m.cpython-311.pyc")
    # A distribution's file as uv installs it: linked from its package cache, which keeps it.
    cached = tmp_path / "uv-cache" / "wheel-file"
    cached.parent.mkdir()
    cached.write_bytes(b"y" * 2**20)
    os.link(cached, home / "envs" / ("a" * 16) / "lib" / "from-uv")
    own = {
        key: sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.stat().st_nlink == 1)
        for key, path in (("a", home / "envs" / ("a" * 16)), ("c", smoke))
    }
    assert own["a"] > 3 * 2**20

    code, out, err = _kiln(["envs", "list"], home, capsys, monkeypatch)
    assert code == 0
    assert "3 environments, 4.0 MiB (3.0 MiB their own: the rest is linked from uv's" in err

    code, out, err = _kiln(["envs", "prune", "--unused-for", "30d", "--dry-run"], home,
                           capsys, monkeypatch)  # fmt: skip
    assert code == 0 and out == ""
    # Only the environment that would go links the kept bytecode: it would go too.
    assert "pkg-1.0-0123abcd (bytecode)" in err
    assert (f"would remove build environment {'a' * 16} (3.0 MiB its own of 4.0 MiB, last "
            "used 40.0 d ago)") in err  # fmt: skip
    assert "would remove 2 of 3 environments (would free 3.0 MiB in all)" in err
    assert (home / "envs" / ("a" * 16)).is_dir()

    (home / "envs" / ".staging-0123456789abcdef" / "bin").mkdir(parents=True)
    code, out, err = _kiln(["envs", "prune", "--unused-for", "720h", "--json"], home,
                           capsys, monkeypatch)  # fmt: skip
    assert code == 0
    result = json.loads(out)
    assert {e["key"]: e["outcome"] for e in result["environments"]} == {
        "a" * 16: "removed", "b" * 16: "recent", "c" * 16: "removed"
    }
    # What the files only they held come to, and the kept bytecode once; not uv's cache.
    assert result["freed_bytes"] == own["a"] + own["c"] + 100
    assert cached.read_bytes() == b"y" * 2**20
    assert "removed 2 of 3 environments" in err and "kept 1 used recently" in err
    assert [x["path"] for x in result["leftovers"]] == [
        str(home / "envs" / ".staging-0123456789abcdef"), str(kept.parents[2])
    ]
    assert ("removed 2 directories that killed kiln runs left, or of bytecode no environment "
            "uses (0.0 MiB): .staging-0123456789abcdef (staging), pkg-1.0-0123abcd (bytecode)"
            ) in err  # fmt: skip
    assert not (home / "envs" / ("a" * 16)).exists() and not smoke.exists()


@pytest.mark.parametrize("age", ["soon", "-3d", "3w", ""])
def test_a_bad_age_is_refused_by_name(
    age: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    make_env(tmp_path / "home" / "envs", "a" * 16, age_days=400)
    code, _, err = _kiln(["envs", "prune", "--unused-for", age], tmp_path / "home", capsys,
                         monkeypatch)  # fmt: skip
    assert code == 2
    assert "--unused-for" in err and "write it as 30d, 12h, 90m, 45s or a number of days" in err
    assert (tmp_path / "home" / "envs" / ("a" * 16)).is_dir()


def _swap(path: Path, kind: str) -> None:
    """Put a fifo or a link to /dev/zero at *path*, changed 40 days ago."""
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    when = time.time() - 40 * DAY
    os.utime(path, (when, when), follow_symlinks=False)


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_mark_or_lock_that_is_no_regular_file_never_blocks_and_keeps_the_environment(
    kind: str, tmp_path: Path
) -> None:
    root = tmp_path / "envs"
    path = make_env(root, "a" * 16, age_days=40)
    _swap(root / f"{'a' * 16}.inuse", kind)
    with within(5):
        listed = env_store.stored(root, "build")
        # No process can lock such a mark, so none could mark its use: kept as in use.
        assert [(e.key, e.in_use) for e in listed] == [("a" * 16, True)]
        assert [p.outcome for p in env_store.prune(listed, 30 * DAY)] == ["in use"]
        holds.hold(root, "a" * 16)  # goes on without a mark
    assert path.is_dir()
    # The make lock alone.
    (root / f"{'a' * 16}.inuse").unlink()
    _swap(root / f"{'a' * 16}.lock", kind)
    with within(5):
        listed = env_store.stored(root, "build")
        assert [p.outcome for p in env_store.prune(listed, 30 * DAY)] == ["being made"]
        # An unfinished environment whose lock is no regular file: its maker may be at work.
        unfinished = root / ("b" * 16)
        unfinished.mkdir()
        _swap(root / f"{'b' * 16}.lock", kind)
        assert list(env_store.leftovers(root, "build")) == []
    assert path.is_dir() and unfinished.is_dir()


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_store_lock_that_is_no_regular_file_keeps_the_thing(kind: str, tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    mark = tmp_path / "kept.inuse"
    _swap(mark, kind)
    with within(5):
        outcome = holds.remove_unused(
            kept, [mark], lambda _path: 0.0, now=time.time(), unused_for=DAY, dry_run=False
        )
    assert outcome == "in use" and kept.is_dir()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"requires": 5}', "its requires is not a list of requirements"),
        ('{"requires": ["setuptools", 5]}', "its requires is not a list of requirements"),
        ("[1]", "its requires is not a list of requirements"),
        ('{"requires": ' + "[" * 100_000, "nested too deep"),
        ('{"requires": [], "n": ' + "9" * 5000 + "}", "Exceeds the limit"),
        ('{"requires": [NaN]}', "NaN is not a number JSON allows"),
    ],
)
def test_an_unreadable_record_lists_the_environment_without_requirements(
    text: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    home = tmp_path / "home"
    path = make_env(home / "envs", "a" * 16, age_days=40)
    make_env(home / "envs", "b" * 16, age_days=1)
    (path / "kiln-env.json").write_text(text)
    code, out, err = _kiln(["envs", "list", "--json"], home, capsys, monkeypatch)
    assert code == 0
    assert [(e["key"], e["requires"]) for e in json.loads(out)] == [
        ("a" * 16, []), ("b" * 16, ["setuptools", "pybind11"])
    ]
    assert (f"warning: {path / 'kiln-env.json'}: not a readable environment record ("
            in err)  # fmt: skip
    assert reason in err and "listed without its requirements" in err
    # Still prunable.
    code, out, err = _kiln(["envs", "prune", "--unused-for", "30d", "--json"], home, capsys,
                           monkeypatch)  # fmt: skip
    assert code == 0
    assert {e["key"]: e["outcome"] for e in json.loads(out)["environments"]} == {
        "a" * 16: "removed", "b" * 16: "recent"
    }
    assert not path.exists()
