"""The Dask executor's decisions, without a cluster: scheduler addresses, the resources a
cell's tasks ask for and why no worker can run them, and the source bundle (packed on
the client, checked and unpacked on a worker by the rules every shard archive gets)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.archives import file_member, special_member, write_members
from wheelkiln.builder.source import source_digest
from wheelkiln.cells import Cell
from wheelkiln.digest import sha256_file
from wheelkiln.errors import FleetError, GateError, UsageError
from wheelkiln.executors.dask import (
    BUNDLE_LAYOUT,
    DaskExecutor,
    check_address,
    materialize,
    missing_resources,
    needed_resources,
    pack_bundle,
)
from wheelkiln.recipe.load import load_recipe

CUDA_CELL = Cell("demo", "3.11", "13.0", "none", "linux-x86_64", ("8.0",))
CPU_CELL = Cell("demo", "3.11", "none", "none", "linux-x86_64")


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "tcp://build-1.farm:8786",
                                     "tls://[::1]:8786"])
def test_scheduler_addresses_as_dask_prints_them(address: str) -> None:
    assert check_address(address) == address


@pytest.mark.parametrize("address", ["127.0.0.1:8786", "tcp://host", "tcp://host:0",
                                     "tcp://host:99999", "http://host:8786", "tcp://-x:1"])
def test_other_spellings_are_usage_errors_showing_the_form(address: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_address(address)
    assert caught.value.message == f"--scheduler {address!r} is not a Dask scheduler address."
    assert "tcp://HOST:PORT" in (caught.value.hint or "")


def test_tasks_ask_for_a_builder_cuda_for_cuda_cells_and_memory_when_asked() -> None:
    assert needed_resources(CPU_CELL, None) == {"builder": 1}
    assert needed_resources(CUDA_CELL, None) == {"builder": 1, "cuda": 1}
    assert needed_resources(CUDA_CELL, 16) == {"builder": 1, "cuda": 1, "MEM_GB": 16}


def test_a_resource_no_worker_offers_is_named_with_every_workers_offer() -> None:
    workers = {"tcp://b:1": {"builder": 1.0}, "tcp://a:1": {"builder": 1.0, "MEM_GB": 8.0}}
    assert missing_resources(workers, {"builder": 1}) is None
    assert missing_resources(workers, {"builder": 1, "cuda": 1, "MEM_GB": 16}) == (
        "no worker offers cuda=1 or MEM_GB=16 (tcp://a:1 offers MEM_GB=8 builder=1; "
        "tcp://b:1 offers builder=1)"
    )
    # Every resource is offered somewhere, but never all on one worker: still never runs.
    split = {"tcp://a:1": {"builder": 1.0}, "tcp://b:1": {"cuda": 1.0}}
    assert missing_resources(split, {"builder": 1, "cuda": 1}) == (
        "no single worker offers all of builder=1 cuda=1 (tcp://a:1 offers builder=1; "
        "tcp://b:1 offers cuda=1)"
    )
    assert missing_resources({}, {"builder": 1}) == "the scheduler has no workers"


def test_settings_name_what_is_missing_or_wrong() -> None:
    with pytest.raises(UsageError) as caught:
        DaskExecutor.from_settings({"handoff": "/shared"})
    assert caught.value.message == "--executor dask needs --scheduler (tcp://HOST:PORT)."
    with pytest.raises(UsageError) as caught:
        DaskExecutor.from_settings({"scheduler": "tcp://h:1", "handoff": "/s", "worker_memory": "1.5"})
    assert caught.value.message == "--worker-memory '1.5' is not a whole number of GB."
    fleet = DaskExecutor.from_settings(
        {"scheduler": "tcp://h:8786", "handoff": "/shared", "worker_memory": "16"}
    ).fleet
    assert (fleet.scheduler, fleet.handoff, fleet.memory_gb) == ("tcp://h:8786", Path("/shared"), 16)


def _project(root: Path) -> Path:
    """A recipe beside a local source tree, with a build output and a partition map."""
    tree = root / "examples" / "pkg"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "a.c").write_text("int a(void) { return 1; }\n")
    (tree / "build").mkdir()
    (tree / "build" / "left.o").write_text("a leftover the copy leaves out\n")
    script = tree / "tools" / "gen.sh"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho generated\n")
    script.chmod(0o755)
    (tree / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "1"\n')
    recipes = root / "recipes"
    recipes.mkdir()
    (recipes / "map.json").write_text('{"csrc/a.c": 0}\n')
    recipe = recipes / "pkg.toml"
    recipe.write_text(
        'name = "pkg"\n[source]\npath = "../examples/pkg"\n[matrix]\npython = ["3.11"]\n'
        'platforms = ["linux-x86_64"]\nlinks_torch = false\n[sharding]\ncount = 2\n'
        'partition_map = "map.json"\n'
    )
    return recipe


def test_bundle_carries_the_recipe_and_source_as_kiln_copies_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = _project(tmp_path / "client")
    loaded = load_recipe(recipe)
    bundle = pack_bundle(loaded, tmp_path / "handoff")
    assert bundle.path.name == f"bundle-{bundle.sha256}.tar.gz"
    assert sha256_file(bundle.path) == bundle.sha256
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "worker"))
    unpacked = materialize(bundle.path, bundle.sha256)
    assert unpacked.is_relative_to(tmp_path / "worker" / "fleet" / "bundles")
    shipped = load_recipe(unpacked)
    assert shipped.recipe.model_dump(exclude={"source", "sharding"}) == loaded.recipe.model_dump(
        exclude={"source", "sharding"}
    )
    tree = shipped.resolve(shipped.recipe.source.path or "")
    assert tree == unpacked.parent / "source"
    assert source_digest(tree) == source_digest(loaded.resolve("../examples/pkg"))
    assert not (tree / "build").exists()
    assert (tree / "tools" / "gen.sh").stat().st_mode & 0o111
    assert shipped.resolve(shipped.recipe.sharding.partition_map or "").read_text() == (
        '{"csrc/a.c": 0}\n'
    )
    # A second task on the same worker finds it unpacked.
    assert materialize(bundle.path, bundle.sha256) == unpacked


def test_bundle_changed_on_the_shared_storage_is_refused_by_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = pack_bundle(load_recipe(_project(tmp_path / "client")), tmp_path / "handoff")
    written = bundle.sha256
    with tarfile.open(bundle.path, "w:gz") as tar:  # rewritten after the client hashed it
        tar.add(tmp_path / "client" / "recipes" / "pkg.toml", arcname="recipe.toml")
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "worker"))
    with pytest.raises(FleetError) as caught:
        materialize(bundle.path, written)
    assert caught.value.message.startswith(f"The source bundle {bundle.path} has sha256 ")
    assert caught.value.message.endswith(f", not {written} as written; it was not unpacked.")
    assert [p.name for p in (tmp_path / "worker" / "fleet" / "bundles").iterdir()] == [
        f"{written[:32]}.lock"
    ]


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        (file_member("source/../../escape.py", b"x"), "is a path with a '..' component"),
        (special_member("source/link", tarfile.SYMTYPE, "/etc/passwd"),
         "is a symbolic link (to '/etc/passwd')"),
        (file_member("setup.py", b"x"), "is outside recipe.toml, partition-map.json and source/"),
    ],
)
def test_bundle_with_a_hostile_member_is_refused_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, member: tuple[tarfile.TarInfo, bytes],
    problem: str,
) -> None:
    # Its digest matches: whoever wrote it also wrote the digest (or the client packed a
    # hostile tree); the shard archives' rules still apply.
    bundle = write_members(
        tmp_path / "bundle.tar.gz", [file_member("recipe.toml", b'name = "x"\n'), member]
    )
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "worker"))
    with pytest.raises(GateError) as caught:
        materialize(bundle, sha256_file(bundle))
    name = member[0].name
    assert caught.value.message == (
        f"{bundle}, member {name!r} {problem}; the archive was rejected and nothing was "
        "extracted from it."
    )
    assert caught.value.hint == BUNDLE_LAYOUT.hint
    assert not (tmp_path / "escape.py").exists()
    assert [p.name for p in (tmp_path / "worker" / "fleet" / "bundles").iterdir()] == [
        f"{sha256_file(bundle)[:32]}.lock"
    ]


def test_a_stopped_command_ends_with_its_whole_group(tmp_path: Path) -> None:
    # What a cancelled task does to its job: the job's shell and the "compile" it started.
    import threading
    import time

    from wheelkiln import run

    pid_file = tmp_path / "compile.pid"
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    done = run.run(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], check=False, stop=stop)
    assert time.monotonic() - started < 10
    assert done.returncode == -15  # SIGTERM, as on Ctrl-C
    compile_pid = int(pid_file.read_text())
    assert not Path(f"/proc/{compile_pid}").exists() or Path(
        f"/proc/{compile_pid}/stat"
    ).read_text().rpartition(")")[2].split()[0] in ("Z", "X")


def test_without_a_handoff_directory_the_settings_leave_it_to_the_remote() -> None:
    fleet = DaskExecutor.from_settings({"scheduler": "tcp://h:8786"}).fleet
    assert (fleet.scheduler, fleet.handoff) == ("tcp://h:8786", None)


def test_neither_handoff_nor_remote_is_an_error_naming_both_before_connecting(
    tmp_path: Path,
) -> None:
    from wheelkiln.executors.base import ShardedJob
    from wheelkiln.settings import resolve_build_settings

    loaded = load_recipe(_project(tmp_path))
    job = ShardedJob(loaded, CPU_CELL, resolve_build_settings(loaded), 2, tmp_path / "dist",
                     tmp_path / "shards")
    # Nothing listens on port 1: an attempt to connect would be a FleetError instead.
    executor = DaskExecutor.from_settings({"scheduler": "tcp://127.0.0.1:1"})
    with pytest.raises(UsageError) as caught:
        executor.run(job)
    assert caught.value.message == (
        "--executor dask needs a way to hand the shards' caches to the link job: --remote URL "
        "(remote cache storage every worker reaches; also $KILN_REMOTE or the recipe's "
        "cache.remote) or --handoff DIR (a directory every worker sees at the same path; also "
        "$KILN_HANDOFF or the recipe's executor.handoff)."
    )


def test_a_run_namespace_keeps_the_builds_and_fits_the_namespace_rule() -> None:
    from wheelkiln.cli.options import check_namespace
    from wheelkiln.executors.dask import run_namespace

    run_id = "20261201T180000-0123abcd"
    assert run_namespace(None, run_id) == f"kiln-{run_id}"
    assert run_namespace("nightly", run_id) == f"nightly-{run_id}"
    long = run_namespace("n" * 100, run_id)
    assert len(long) == 100 and long.endswith(run_id)
    assert check_namespace(long) == long


def test_a_bundle_sent_by_dask_is_checked_by_digest_before_unpacking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = pack_bundle(load_recipe(_project(tmp_path / "client")), tmp_path / "scratch")
    blob = bundle.path.read_bytes()
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "worker"))
    with pytest.raises(FleetError) as caught:
        materialize(blob[:-1] + bytes([blob[-1] ^ 1]), bundle.sha256)
    assert caught.value.message.startswith(
        f"The source bundle bundle {bundle.sha256[:16]}… (sent by Dask) has sha256 ")
    unpacked = materialize(blob, bundle.sha256)
    assert load_recipe(unpacked).recipe.name == "pkg"


def test_fleet_settings_come_from_the_recipe_under_the_environment_under_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each key of the recipe's [executor] gives way to its variable, which gives way to
    its option; the scheduler each run tried to reach says which one won."""
    from click.testing import CliRunner

    from tests.servers import free_port
    from wheelkiln.cli import cli

    recipe = _project(tmp_path)
    recipe_port, env_port, option_port = free_port(), free_port(), free_port()
    with recipe.open("a") as text:
        text.write(f'[executor]\nengine = "dask"\nscheduler = "tcp://127.0.0.1:{recipe_port}"\n'
                   'handoff = "handoff"\n')
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    unset = {name: None for name in ("KILN_EXECUTOR", "KILN_SCHEDULER", "KILN_HANDOFF",
                                     "KILN_WORKER_MEMORY", "KILN_REMOTE")}

    def build(*options: str, **env: str) -> BaseException | None:
        return CliRunner().invoke(
            cli, ["build", str(recipe), "--shards", "2", "--out", str(tmp_path / "dist"), *options],
            env={**unset, **env},
        ).exception

    def unreachable(port: int) -> str:
        return (f"Cannot reach the Dask scheduler at tcp://127.0.0.1:{port}: connection "
                "refused; nothing was started.")

    from_recipe = build()
    assert isinstance(from_recipe, FleetError) and from_recipe.message == unreachable(recipe_port)
    # (and its handoff directory: without one, or a remote, nothing would connect)
    from_env = build(KILN_SCHEDULER=f"tcp://127.0.0.1:{env_port}")
    assert isinstance(from_env, FleetError) and from_env.message == unreachable(env_port)
    from_option = build("--scheduler", f"tcp://127.0.0.1:{option_port}",
                        KILN_SCHEDULER=f"tcp://127.0.0.1:{env_port}")
    assert isinstance(from_option, FleetError) and from_option.message == unreachable(option_port)
    # --executor local overrides the recipe's engine: a fleet option is then refused.
    local = build("--executor", "local", "--worker-memory", "4")
    assert isinstance(local, UsageError)
    assert local.message == "--worker-memory applies only with the dask executor."
