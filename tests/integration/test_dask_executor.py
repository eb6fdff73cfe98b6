"""``kiln build --shards N --executor dask`` on a real Dask cluster on 127.0.0.1.

The cluster is a ``distributed.LocalCluster`` with two worker processes (nannies), each
with its own ``KILN_HOME`` and ``KILN_STATE_HOME``: its own trees, caches, sources,
builder lock, unpacked bundles and build environments, at paths that differ as two
machines' homes would. The link job still sees zero misses: a build sees its
environment through its workdir, so the environment's path is the same in every home's
cache keys (tests/integration/test_cross_home.py). The caches are handed over through a
live Valkey (tests/servers.py), or through a handoff directory: a plain directory, as an
NFS mount would be.

The kill tests look at the scheduler's view (which worker is processing a shard's
task) and SIGKILL that worker's process, as a lost machine would end it; its nanny
starts a fresh worker, as a supervisor on a real builder would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln, expected_checksum
from tests.integration.test_link_verify import tiny_package, tiny_recipe
from tests.processes import alive, wait_until
from tests.servers import Redis

pytestmark = pytest.mark.compile

TINY_CELL = "kiln-tiny-py3.11-linux-x86_64"


class Fleet:
    """A LocalCluster with per-worker homes, and a client to watch and kill its workers."""

    def __init__(self, root: Path) -> None:
        from distributed import Client, LocalCluster, Nanny

        self.cluster = LocalCluster(
            host="127.0.0.1", n_workers=0, processes=True, dashboard_address=":0"
        )
        self.homes = []
        for index in range(2):
            home = root / f"worker{index}"
            (home / "home").mkdir(parents=True)
            self.homes.append(home)
            self.cluster.worker_spec[f"builder-{index}"] = {
                "cls": Nanny,
                "options": {
                    "host": "127.0.0.1",
                    "nthreads": 1,
                    "memory_limit": 0,
                    "resources": {"builder": 1, "cuda": 1},
                    "env": {
                        "KILN_HOME": str(home / "home"),
                        "KILN_STATE_HOME": str(home / "state"),
                    },
                },
            }
        self.cluster.scale(2)
        self.address: str = self.cluster.scheduler_address
        self.client = Client(self.address, set_as_default=False)
        self.client.wait_for_workers(2, timeout=60)

    def ready(self) -> None:
        """Both workers up (a killed one comes back under its nanny)."""
        self.client.wait_for_workers(2, timeout=60)

    def worker_running(self, job: str) -> str | None:
        """The worker executing the task for *job* (``shard-0``, ``link``) now. The
        scheduler's ``processing`` also lists tasks a worker holds waiting for its
        builder, so each worker is asked what it executes."""
        try:
            executing = self.client.run(_executing)
        except Exception:  # a worker went away while being asked
            return None
        for worker, keys in executing.items():
            if any(str(key).endswith(f"-{job}") for key in keys):
                return str(worker)
        return None

    def kill(self, worker: str) -> None:
        pid = self.client.run(os.getpid, workers=[worker])[worker]
        os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


def _executing(dask_worker: Any) -> list[str]:
    return [str(task.key) for task in dask_worker.state.executing]


@pytest.fixture
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A fleet per test: a test that kills workers leaves nothing behind for the next."""
    running = Fleet(tmp_path_factory.mktemp("fleet"))
    yield running
    running.close()


@pytest.fixture(scope="module")
def one_worker() -> Iterator[tuple[str, str]]:
    """A scheduler with one in-process worker offering builder=1: (scheduler, worker).
    Shared by the module's tests, none of which changes it."""
    from distributed import LocalCluster

    with LocalCluster(host="127.0.0.1", protocol="tcp", n_workers=1, threads_per_worker=1,
                      processes=False,
                      dashboard_address=":0", resources={"builder": 1}) as cluster:
        yield cluster.scheduler_address, next(iter(cluster.scheduler_info["workers"]))


def test_a_scattered_bundle_whose_every_copy_was_lost_is_sent_again(
    one_worker: tuple[str, str],
) -> None:
    from distributed import Client

    from wheelkiln.executors.dask import ScatteredBundle

    with Client(one_worker[0], set_as_default=False) as client:
        sent = ScatteredBundle(client, b"the bundle")
        first = sent.ref()
        assert sent.ref() is first and first.result() == b"the bundle"
        client.cancel([first])  # as the scheduler marks data whose last holder died
        wait_until(lambda: first.status != "finished", "the copy is gone", 10)
        again = sent.ref()
        assert again is not first and again.result() == b"the bundle"


def kill_during(fleet: Fleet, job: str, times: int, after: float) -> threading.Thread:
    """Kill the worker running *job*, *after* seconds into each of its first *times* tries."""
    killed: list[str] = []

    def watch() -> None:
        deadline = time.monotonic() + 600
        while len(killed) < times and time.monotonic() < deadline:
            worker = fleet.worker_running(job)
            if worker is None or worker in killed:
                time.sleep(0.05)
                continue
            time.sleep(after)
            if fleet.worker_running(job) == worker:
                fleet.kill(worker)
                killed.append(worker)

    thread = threading.Thread(target=watch, daemon=True)
    thread.killed = killed  # type: ignore[attr-defined]
    thread.start()
    return thread


def answer_of(wheel: Path, where: Path) -> str:
    """kiln_tiny.answer() from the wheel, unpacked (the cell's Python is this one)."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(where)
    return subprocess.run(
        [sys.executable, "-c", "import kiln_tiny; print(kiln_tiny.answer())"],
        capture_output=True, text=True, check=True, cwd=where,
    ).stdout.strip()


def test_tiny_package_hands_over_through_redis_with_no_shared_directory(
    kiln: Kiln, fleet: Fleet, redis_server: Redis, tmp_path: Path
) -> None:
    """The remote handoff: no --handoff directory at all. The shards store their entries
    on a live Valkey under the run's own namespace, their manifests come back as task
    results, the link job on a worker reads every entry from the server, and the wheel
    comes back to --out."""
    fleet.ready()
    tree = tiny_package(tmp_path)
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    before = redis_server.keys()
    result = kiln("build", recipe, "--shards", "2", "--executor", "dask", "--scheduler",
                  fleet.address, "--remote", redis_server.url, "--out", tmp_path / "dist",
                  "--json")
    report = json.loads(result.stdout)
    assert report["gate"] == {"passed": True, "problems": []}
    link = report["link"]
    # Three TUs, each compiled by one shard and stored on the server; the link job, whose
    # local cache held nothing, found all three there and stored nothing locally.
    assert (link["cache"]["hits"], link["cache"]["misses"], link["cache"]["total"]) == (3, 0, 3)
    assert link["link"]["remote_hits"] == 3
    assert link["link"]["shards_through_remote"] == [0, 1]
    handoffs = [shard["handoff"] for shard in report["shards"]]
    namespace = handoffs[0]["namespace"]
    assert namespace.startswith("kiln-") and len(namespace) > len("kiln-")
    for index, handoff in enumerate(handoffs):
        assert handoff["via"] == "remote" and "given" not in handoff
        assert (handoff["storage"], handoff["namespace"]) == (redis_server.url, namespace)
        manifest = handoff["manifest"]
        assert (manifest["index"], manifest["count"], manifest["cell"]) == (index, 2, TINY_CELL)
    tus = sorted(tu for handoff in handoffs for tu in handoff["manifest"]["tus"])
    assert tus == ["csrc/b.c", "csrc/c.c", "csrc/module.c"]
    assert sum(s["cache"]["stores"] for s in report["shards"]) == 3
    assert len(redis_server.keys() - before) >= 3  # at least one entry per TU
    assert f"handoff through {redis_server.url} under namespace {namespace}" in result.stderr
    # The wheel came back with the link task's result; nothing was left on the workers
    # but their work trees and the unpacked bundle.
    wheel = Path(link["wheel"]["path"])
    assert wheel.parent == tmp_path / "dist"
    assert answer_of(wheel, tmp_path / "unpacked") == "42"
    for home in fleet.homes:
        assert not list((home / "home" / "fleet").glob("runs/*"))
        assert not list((home / "home" / "fleet").glob("link-inputs/*"))


@pytest.mark.cuda
@pytest.mark.slow  # opt-in: about 135 s of 2 cores each, over what the 15-minute CI holds
@pytest.mark.parametrize("handoff", ["remote", "directory"])
def test_demo_kernels_on_two_workers_links_with_zero_misses_after_a_lost_worker(
    kiln: Kiln, fleet: Fleet, kernels_cold: dict[str, Any], tmp_path: Path, installed,
    request: pytest.FixtureRequest, handoff: str,
) -> None:
    """N=4 on two workers, each with its own home; the worker of shard 1/4 is killed
    mid-shard. The caches go through a live Valkey under the run's namespace (no shared
    directory at all), or as archives on a shared handoff directory."""
    fleet.ready()
    if handoff == "remote":
        redis: Redis = request.getfixturevalue("redis_server")
        before = redis.keys()
        how: tuple[str | Path, ...] = ("--remote", redis.url)
    else:
        (tmp_path / "handoff").mkdir()
        how = ("--handoff", tmp_path / "handoff")
    killer = kill_during(fleet, "shard-0", times=1, after=3.0)
    result = kiln("build", kernels_cold["recipe"], "--shards", "4", "--executor", "dask",
                  "--scheduler", fleet.address, *how, "--out", tmp_path / "dist", "--json")
    killer.join(timeout=5)
    report = json.loads(result.stdout)
    assert len(killer.killed) == 1  # type: ignore[attr-defined]
    lost = killer.killed[0]  # type: ignore[attr-defined]
    # Shard 1/4 lost its worker mid-shard and ran again elsewhere; the others once.
    first = report["shards"][0]["fleet"]
    assert first["tries"] == 2 and first["workers"][0] == lost and first["workers"][1] != lost
    assert [s["fleet"]["tries"] for s in report["shards"][1:]] == [1, 1, 1]
    assert len({w for s in report["shards"] for w in s["fleet"]["workers"]}) >= 2
    assert "shard 1/4: retried on tcp://" in result.stderr
    # Only manifests came back through the scheduler: each names its shard and toolchain;
    # the entries are on the server, or the archive on the shared handoff directory.
    for index, shard in enumerate(report["shards"]):
        manifest = shard["handoff"]["manifest"]
        assert (manifest["index"], manifest["count"], manifest["cell"]) == (
            index, 4, kernels_cold["record"]["cell"])
        if handoff == "remote":
            assert shard["handoff"]["via"] == "remote"
            assert manifest["remote"]["storage"] == redis.url
        else:
            assert Path(shard["handoff"]["archive"]).is_relative_to(tmp_path / "handoff")
    # Every TU (24 kernels, dispatcher, module) compiled in exactly one shard.
    tus = [tu for s in report["shards"] for tu in s["handoff"]["manifest"]["tus"]]
    assert len(tus) == len(set(tus)) == 26
    link = report["link"]
    assert report["gate"] == {"passed": True, "problems": []}
    assert link["cache"]["misses"] == 0
    assert link["cache"]["hits"] == link["cache"]["total"] == kernels_cold["record"]["cache"]["total"]
    if handoff == "remote":
        # The link job's local cache started empty and stayed so: every hit was read
        # from the server, under the one namespace of this run.
        assert link["link"]["remote_hits"] == link["cache"]["hits"]
        assert link["link"]["shards_through_remote"] == [0, 1, 2, 3]
        assert len({s["handoff"]["namespace"] for s in report["shards"]}) == 1
        assert len(redis.keys() - before) >= 26
    else:
        assert not any((tmp_path / "handoff").iterdir())  # a passed run's archives have served
    # Both workers built, each in its own home, from its own copy of the checked bundle.
    for home in fleet.homes:
        assert list((home / "home" / "fleet" / "bundles").glob("*/source/CMakeLists.txt"))
        assert list((home / "home" / "work").glob(f"{report['cell']}-*"))
    wheel = link["wheel"]["path"]
    assert Path(wheel).parent == tmp_path / "dist"
    answer = installed(wheel, "import demo_kernels; print(demo_kernels.checksum())")
    assert int(answer) == expected_checksum(kernels_cold["tree"])
    verdict = json.loads(kiln("verify", wheel, kernels_cold["record"]["wheel"]["path"],
                              "--json").stdout)
    assert verdict["equivalent"], verdict


@pytest.mark.slow  # opt-in: about 40 s each; CI has the demo-kernels test's lost worker
@pytest.mark.parametrize("handoff", ["remote", "directory"])
def test_shard_whose_worker_is_lost_twice_is_named_by_the_link_gate(
    kiln: Kiln, fleet: Fleet, tmp_path: Path, request: pytest.FixtureRequest, handoff: str
) -> None:
    fleet.ready()
    tree = tiny_package(tmp_path)
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    if handoff == "remote":
        redis: Redis = request.getfixturevalue("redis_server")
        how: tuple[str | Path, ...] = ("--remote", redis.url)
        missing = f"{TINY_CELL}-shard-1-of-2.handoff.json"
    else:
        (tmp_path / "handoff").mkdir()
        how = ("--handoff", tmp_path / "handoff")
        missing = f"{TINY_CELL}-shard-1-of-2.tar.gz"
    killer = kill_during(fleet, "shard-1", times=2, after=0.2)  # a tiny shard's retry can end in 1 s
    result = kiln("build", recipe, "--shards", "2", "--executor", "dask", "--scheduler",
                  fleet.address, *how, "--out", tmp_path / "dist", "--json", check=False)
    killer.join(timeout=5)
    assert result.returncode == 5, result.stderr
    lost = killer.killed  # type: ignore[attr-defined]
    assert len(lost) == 2
    report = json.loads(result.stdout)
    assert report["shards"][1]["fleet"]["workers"][:2] == lost
    assert report["gate"]["problems"][0] == (
        f"shard 2/2: its worker was lost twice ({lost[0]}, {lost[1]}); not retried again"
    )
    assert any(p.startswith(f"shard 2/2 is missing: no {missing} in ")
               for p in report["gate"]["problems"])
    # The link job still ran on what it had, and kept its wheel.
    assert report["link"]["wheel"]["path"].startswith(str(tmp_path / "dist"))
    if handoff == "directory":  # the failed run's files stay
        assert Path(report["shards"][0]["handoff"]["archive"]).is_file()
    else:  # only shard 1/2's handoff reached the link job (shard 2/2's entries may
        # still be on the server: a killed worker's compile can outlive it)
        assert report["link"]["link"]["shards_through_remote"] == [0]
    message = " ".join(result.stderr.split())
    assert f"The sharded build of {TINY_CELL} did not pass:" in message
    assert "Traceback" not in result.stderr


def test_task_no_worker_can_run_is_an_error_naming_the_resource(
    kiln: Kiln, one_worker: tuple[str, str], tmp_path: Path
) -> None:
    scheduler, worker = one_worker
    (tmp_path / "handoff").mkdir()
    recipe = tiny_recipe(tiny_package(tmp_path), tmp_path, verify='extension_modules = ["x"]')
    result = kiln("build", recipe, "--shards", "2", "--executor", "dask", "--handoff",
                  tmp_path / "handoff", "--out", tmp_path / "dist", check=False,
                  env={"KILN_SCHEDULER": scheduler, "KILN_WORKER_MEMORY": "64"})
    assert result.returncode == 3, result.stderr
    assert result.stderr.splitlines()[:2] == [
        f"error: No worker of the Dask scheduler at {scheduler} can run the tasks of "
        f"{TINY_CELL}, which ask for MEM_GB=64 builder=1: no worker offers MEM_GB=64 "
        f"({worker} offers builder=1); nothing was submitted.",
        f'Start a worker that offers them: dask worker {scheduler} --nthreads 1 --resources '
        '"MEM_GB=64 builder=1".',
    ]
    assert not any((tmp_path / "handoff").iterdir())


def test_no_link_task_is_submitted_when_no_shard_passed(
    kiln: Kiln, one_worker: tuple[str, str], tmp_path: Path
) -> None:
    # Every shard task fails the same way (the package's own build breaks): the link task
    # would build the whole package again on a worker and fail its gate all the same.
    scheduler, _ = one_worker
    (tmp_path / "handoff").mkdir()
    tree = tiny_package(tmp_path)
    (tree / "setup.py").write_text("raise SystemExit('kiln-tiny is broken on purpose')\n")
    recipe = tiny_recipe(tree, tmp_path, verify='extension_modules = ["kiln_tiny/_native*.so"]')
    result = kiln("build", recipe, "--shards", "2", "--executor", "dask", "--scheduler",
                  scheduler, "--handoff", tmp_path / "handoff", "--out", tmp_path / "dist",
                  "--json", check=False)
    message = " ".join(result.stderr.split())
    assert result.returncode == 4, result.stderr  # the package's own build failed
    assert f"No shard of {TINY_CELL} passed, so its link job did not run" in message
    for label in ("1/2", "2/2"):  # each in one line, as a local shard's failure is
        assert (f"- shard {label}: its build failed: the build failed (exit 1) before it "
                "compiled any of its TUs; its last lines: kiln-tiny is broken on purpose "
                "(build log on tcp://127.0.0.1:") in message
    assert "│" not in result.stderr.split("passed, so its link job did not run")[1]
    assert "kiln link" not in result.stderr and not (tmp_path / "dist").exists()
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["link"] is None and report["gate"]["passed"] is False
    assert [s["process"]["status"] for s in report["shards"]] == ["exit 4", "exit 4"]


def test_unreachable_scheduler_is_an_error_naming_it_with_nothing_started(
    kiln: Kiln, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "handoff").mkdir()
    recipe = tiny_recipe(tiny_package(tmp_path), tmp_path, verify='extension_modules = ["x"]')
    address = f"tcp://127.0.0.1:{port}"
    result = kiln("build", recipe, "--shards", "2", "--executor", "dask", "--scheduler", address,
                  "--handoff", tmp_path / "handoff", "--out", tmp_path / "dist", check=False)
    assert result.returncode == 3, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"error: Cannot reach the Dask scheduler at {address}: connection refused; nothing "
        "was started."
    )
    assert "Traceback" not in result.stderr
    assert not any((tmp_path / "handoff").iterdir())
    assert not (tmp_path / "dist").exists()


SLEEPER_BACKEND = textwrap.dedent(
    '''
    import os, subprocess
    from pathlib import Path

    STATE = Path({state!r})


    def get_requires_for_build_wheel(config_settings=None):
        return []


    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        compile_ = subprocess.Popen(["sleep", "300"])  # a compile that outlasts the test
        mine = STATE / f"{{os.getpid()}}"
        mine.with_suffix(".tmp").write_text(f"{{os.getpid()}} {{compile_.pid}}")
        mine.with_suffix(".tmp").rename(mine.with_suffix(".pids"))
        compile_.wait()
        raise SystemExit(1)
    '''
)


@pytest.mark.slow  # opt-in: about 40 s; run.run's stop is tested in tests/unit
def test_ctrl_c_cancels_the_tasks_and_leaves_no_compile_running(
    kiln: Kiln, fleet: Fleet, tmp_path: Path
) -> None:
    state = tmp_path / "state-of-backend"
    state.mkdir()
    package = tmp_path / "pkg"
    (package / "backend").mkdir(parents=True)
    (package / "backend" / "sleeper_backend.py").write_text(SLEEPER_BACKEND.format(state=str(state)))
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "sleeper_backend"\n'
        'backend-path = ["backend"]\n'
    )
    recipe = tmp_path / "sleeper.toml"
    recipe.write_text('name = "sleeper"\n[source]\npath = "pkg"\n')
    (tmp_path / "handoff").mkdir()
    client = subprocess.Popen(
        [sys.executable, "-m", "wheelkiln", "build", str(recipe), "--shards", "2", "--executor",
         "dask", "--scheduler", fleet.address, "--handoff", str(tmp_path / "handoff"),
         "--out", str(tmp_path / "dist")],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=kiln.env, cwd=tmp_path,
    )
    try:
        wait_until(lambda: len(list(state.glob("*.pids"))) == 2 or client.poll() is not None,
                   "both shards started their compile", 300)
        assert client.poll() is None, client.communicate()
        pids = [int(pid) for path in state.glob("*.pids") for pid in path.read_text().split()]
        assert all(alive(pid) for pid in pids)
        client.send_signal(signal.SIGINT)
        _, err = client.communicate(timeout=180)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 130, err
    assert "Interrupted: cancelling the fleet's tasks" in err
    assert "No word within" not in err  # every running task said its job ended
    # The backends and their compiles on both workers are gone, and the workers are idle.
    assert [pid for pid in pids if alive(pid)] == []
    wait_until(lambda: not any(fleet.client.run(_executing).values()), "the workers are idle", 10)
