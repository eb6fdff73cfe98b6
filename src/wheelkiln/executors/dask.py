"""The Dask executor: a sharded build's N shard jobs and its link job as tasks on a Dask
distributed cluster (``dask scheduler`` plus ``dask worker --resources "builder=1 ..."``
on each build node). Dask places and retries the tasks; kiln writes no scheduler.

Each task runs the job CI runs, ``kiln shard`` or ``kiln link``, as a subprocess on its
worker (``sys.executable -m wheelkiln``), in the worker's own ``$KILN_HOME``: a private
tree, a private cache directory, the worker's builder lock.

What crosses between the machines, and how:

- **The recipe and its source, by digest.** A *bundle* (a gzip'd tar: the recipe, its
  partition map, and a local ``source.path`` tree) goes to the workers under its sha256:
  written to the shared handoff directory when there is one, else scattered to the
  workers by Dask (client to worker, never through the scheduler). A worker checks the
  digest of its own copy and unpacks it with the rules every shard archive gets
  (:func:`wheelkiln.cache.archive.extract_tree`). A PyPI sdist or a git revision travels
  as the recipe's pin: the worker's ``kiln shard`` fetches it and checks the sha256, as
  it does anywhere.
- **The caches, one of two ways; never through the scheduler.**

  - *Remote storage* (no ``--handoff``, a remote cache configured: ``--remote``,
    ``$KILN_REMOTE`` or the recipe's ``cache.remote``). Every task of the run uses a
    namespace of its own (:func:`run_namespace`). Each shard job
    (``kiln shard --handoff remote``) stores its entries on the storage as it compiles
    and fails its gate if they did not all get there; its task returns its handoff (the
    manifest: toolchain fingerprint, TUs, stats, storage and namespace; and the wrapper
    log) and record. The client checks each handoff as the link job would read it
    (:func:`wheelkiln.shard.handoff.check_handoff`) and gives the link task exactly the
    ones that passed; the link job reads every entry from the storage (ccache's
    ``remote_only``, with its local cache empty) and returns its wheel with its record.
  - *Archives on a shared directory* (``--handoff DIR``). Each shard attempt writes its
    archive into a directory of its own under the run's handoff directory; its task
    returns the validated manifest, the record and the archive's sha256. The link task
    merges exactly the archives those results name, after checking each digest, so a
    stray or late attempt's archive is never merged, and writes its wheel there.

  Either way the link job applies the gates ``kiln link`` applies: toolchain match,
  misses == 0, total > 0, missing shards named, the compile ledger, wheel verification.
- **Resources.** Every task asks for ``builder=1``, so one build per builder holds on
  every worker, fleet-wide; a CUDA cell's tasks also ask for ``cuda=1``, and
  ``MEM_GB=n`` when asked. Dask resources are logical: a task waits until a worker offers
  them, forever if none does, so the resources of the scheduler's workers are checked
  before anything is submitted, and a missing one is an error that names it.

Faults: a worker killed mid-shard is noticed by the scheduler, which runs the shard again
on another worker; a shard that starts a third time is cancelled, so a shard is retried
once, and the link job runs without it and its gate names it. An unreachable scheduler
is an error naming its address before anything is written. Ctrl-C cancels every task:
each task watches a cancel event and ends its job's process group, so no compile is left.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import socket
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
from rich.live import Live
from rich.table import Table

from wheelkiln import run, ui
from wheelkiln.builder.cell import configured_remote
from wheelkiln.builder.source import is_ignored
from wheelkiln.cache.archive import (
    ArchiveLimits,
    Layout,
    extract_tree,
    format_size,
    inspect_archive,
)
from wheelkiln.cache.remote import shown
from wheelkiln.cells import (
    NO_CUDA,
    Cell,
    shard_archive,
    shard_handoff,
    shard_label,
    shard_record,
)
from wheelkiln.digest import sha256_file
from wheelkiln.errors import (
    BuildError,
    FleetError,
    GateError,
    KilnError,
    SourceError,
    UsageError,
)
from wheelkiln.executors.base import (
    ExecutorSettings,
    LinkRun,
    ShardedJob,
    ShardedRun,
    ShardRun,
    gate_failure,
    nothing_to_link,
)
from wheelkiln.output_paths import check_output_dir
from wheelkiln.paths import kiln_home
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.recipe.model import BUILD_OUTPUTS
from wheelkiln.shard.gate import LinkGateResult
from wheelkiln.shard.handoff import check_handoff, read_handoff

Client = Any
"""A ``distributed.Client``. Dask's API is only partly typed; kiln reaches it through
:func:`_dask`, so mypy's strict mode checks kiln's side and trusts Dask's."""
Future = Any

BUILDER = "builder"
"""The resource every task asks one of: a worker started with ``builder=1`` runs one
build at a time, whatever its thread count."""
CUDA = "cuda"
"""The resource a CUDA cell's tasks ask for: workers with nvcc offer ``cuda=1``."""
MEMORY = "MEM_GB"
"""The resource ``--worker-memory`` asks for, in GB, as ``dask worker --resources`` names it."""
CONNECT_TIMEOUT = 5.0
"""Seconds to reach the scheduler: long enough for a slow network, short enough that a
wrong address is an error while the user still watches."""
MAX_STARTS = 2
"""A shard runs at most this often: the first try and one retry after a lost worker."""
WORKER_WAIT_SECONDS = 120.0
"""How long a run waits for a worker when every worker it had was lost (a supervisor
restarts them) before it gives up."""
CANCEL_POLL_SECONDS = 1.0
"""How often a running task asks whether it was cancelled."""

MAX_SCATTERED_BUNDLE = 256 * 1024**2
"""The largest source bundle sent to the workers through Dask; a larger tree goes
through a shared ``--handoff`` directory."""
WHEEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+!-]*\.whl$")
"""A wheel's file name as a link task reports it: one plain name, never a path."""

BUNDLE_RECIPE = "recipe.toml"
BUNDLE_MAP = "partition-map.json"
BUNDLE_SOURCE = "source"
BUNDLE_LAYOUT = Layout(
    (BUNDLE_RECIPE, BUNDLE_MAP),
    (BUNDLE_SOURCE,),
    "Bundles are written by `kiln build --executor dask` into the handoff directory; run "
    "the build again rather than trusting this file.",
)
"""A source bundle: the recipe, its partition map, and a local source tree."""

_ADDRESS = re.compile(r"^(tcp|tls)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})$")


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class FleetSettings:
    """Where the fleet is and what its tasks ask of a worker."""

    scheduler: str
    """The Dask scheduler's address, ``tcp://HOST:PORT``."""
    handoff: Path | None = None
    """A directory every worker and this machine see at the same path (NFS, a shared
    disk): source bundles, shard archives and the link job's wheel go there. None: the
    shards hand over through the remote cache storage, and the rest travels by Dask."""
    memory_gb: int | None = None
    """Each task asks for this many ``MEM_GB`` of a worker; None asks for none."""
    connect_timeout: float = CONNECT_TIMEOUT

    def __post_init__(self) -> None:
        check_address(self.scheduler)


def check_address(address: str) -> str:
    """A scheduler address as Dask writes it, or a UsageError that shows the form."""
    match = _ADDRESS.match(address)
    if match is None or not 0 < int(match[3]) < 65536:
        raise UsageError(
            f"--scheduler {address!r} is not a Dask scheduler address.",
            hint="Write it as `dask scheduler` prints it: tcp://HOST:PORT (port 8786 by default).",
        )
    return address


def run_namespace(namespace: str | None, run_id: str) -> str:
    """The cache namespace of one run's remote handoff: the build's own namespace (or
    ``kiln``) and the run's id, so the link job counts only what this run's shards stored
    and a run never reads another's entries. Within the 100 characters a namespace may
    have."""
    return f"{(namespace or 'kiln')[:100 - len(run_id) - 1]}-{run_id}"


def needed_resources(cell: Cell, memory_gb: int | None) -> dict[str, float]:
    """What each of a cell's tasks asks of a worker."""
    need: dict[str, float] = {BUILDER: 1}
    if cell.cuda != NO_CUDA:
        need[CUDA] = 1
    if memory_gb:
        need[MEMORY] = memory_gb
    return need


def missing_resources(
    workers: Mapping[str, Mapping[str, float]], need: Mapping[str, float]
) -> str | None:
    """Why no worker can ever run a task that asks for *need*, or None when one can.

    *workers* maps each worker's address to the resources it offers.
    """
    if not workers:
        return "the scheduler has no workers"
    if any(all(offer.get(k, 0) >= v for k, v in need.items()) for offer in workers.values()):
        return None
    lacking = [
        f"{name}={amount:g}"
        for name, amount in need.items()
        if not any(offer.get(name, 0) >= amount for offer in workers.values())
    ]
    offered = "; ".join(
        f"{address} offers {_describe_offer(offer)}" for address, offer in sorted(workers.items())
    )
    what = (
        f"no worker offers {' or '.join(lacking)}"
        if lacking
        else "no single worker offers all of " + " ".join(f"{k}={v:g}" for k, v in need.items())
    )
    return f"{what} ({offered})"


def _describe_offer(offer: Mapping[str, float]) -> str:
    return " ".join(f"{k}={v:g}" for k, v in sorted(offer.items())) or "no resources"


# --------------------------------------------------------------------------- the bundle


@dataclass(frozen=True)
class Bundle:
    path: Path
    sha256: str


def pack_bundle(loaded: LoadedRecipe, directory: Path) -> Bundle:
    """Write the bundle of *loaded* into *directory*, named by its sha256.

    The recipe goes in as parsed (never re-validated here: the worker's ``kiln shard``
    reads it as any recipe), with ``source.path`` and ``sharding.partition_map`` pointing
    at the bundle's own copies. A local tree goes in as ``kiln build`` copies it (build
    outputs and ``source.exclude`` left out); a symlink to a file goes in as the file, and
    a symlink to a directory is refused, since a bundle holds only files and directories.
    """
    recipe = loaded.recipe
    data = tomllib.loads(loaded.path.read_text(encoding="utf-8"))
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".bundle-{uuid.uuid4().hex}.partial"
    try:
        with tarfile.open(partial, "w:gz", compresslevel=3) as tar:
            if recipe.source.path is not None:
                data["source"]["path"] = BUNDLE_SOURCE
                tree = loaded.resolve(recipe.source.path)
                _add_tree(tar, tree, recipe.source.exclude or BUILD_OUTPUTS)
            if recipe.sharding.partition_map is not None:
                data["sharding"]["partition_map"] = BUNDLE_MAP
                mapped = loaded.resolve(recipe.sharding.partition_map)
                if mapped.is_file():
                    tar.add(mapped, arcname=BUNDLE_MAP, recursive=False, filter=_plain)
            blob = tomli_w.dumps(data).encode()
            info = tarfile.TarInfo(BUNDLE_RECIPE)
            info.size, info.mode = len(blob), 0o644
            tar.addfile(info, _bytes(blob))
        digest = sha256_file(partial)
        bundle = directory / f"bundle-{digest}.tar.gz"
        partial.replace(bundle)
    finally:
        partial.unlink(missing_ok=True)
    return Bundle(bundle, digest)


def _bytes(blob: bytes) -> Any:
    import io

    return io.BytesIO(blob)


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """No owner names or ids: the bundle says nothing about who packed it."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add_tree(tar: tarfile.TarFile, tree: Path, exclude: tuple[str, ...] | list[str]) -> None:
    tar.add(tree, arcname=BUNDLE_SOURCE, recursive=False, filter=_plain)
    for directory, subdirectories, files in os.walk(tree):
        relative = Path(directory).relative_to(tree).parts
        subdirectories[:] = sorted(
            d for d in subdirectories if not is_ignored((*relative, d), exclude)
        )
        for name in [*subdirectories, *sorted(files)]:
            if is_ignored((*relative, name), exclude):
                continue
            path = Path(directory, name)
            arcname = "/".join((BUNDLE_SOURCE, *relative, name))
            if path.is_symlink() and path.is_dir():
                raise SourceError(
                    f"{path} is a symbolic link to a directory; a source bundle for the Dask "
                    "executor holds files and directories only.",
                    hint="Replace the link with the directory, or build with the local executor.",
                )
            if path.is_dir() or path.is_file():  # a symlink to a file goes in as the file
                info = tar.gettarinfo(str(path.resolve()), arcname=arcname)
                if info.isfile() or info.isdir():
                    if info.isfile():
                        with path.open("rb") as handle:
                            tar.addfile(_plain(info), handle)
                    else:
                        tar.addfile(_plain(info))
            # fifos, sockets and devices are never source (copy_tree leaves them out too)


def fleet_root() -> Path:
    """Where a worker keeps what the fleet sends it: unpacked bundles, link inputs."""
    return kiln_home() / "fleet"


def materialize(bundle: Path | bytes, sha256: str) -> Path:
    """The recipe of *bundle* (its path on the shared storage, or its bytes as Dask
    delivered them), unpacked once per worker under its digest.

    The bundle is copied to this worker first, and the copy is what is checked and
    unpacked, so it cannot change between the check and the unpacking.
    """
    where = str(bundle) if isinstance(bundle, Path) else f"bundle {sha256[:16]}… (sent by Dask)"
    root = fleet_root() / "bundles" / sha256[:32]
    recipe = root / BUNDLE_RECIPE
    if recipe.is_file():
        return recipe  # unpacked by an earlier task: the directory appears whole or not at all
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{root.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if recipe.is_file():
            return recipe
        copy = root.parent / f".{root.name}.{uuid.uuid4().hex}.tar.gz"
        try:
            try:
                if isinstance(bundle, Path):
                    shutil.copyfile(bundle, copy)
                else:
                    copy.write_bytes(bundle)
            except OSError as exc:
                raise FleetError(
                    f"The source bundle {where} cannot be read on {socket.gethostname()} "
                    f"({exc.strerror or exc}).",
                    hint="The handoff directory must be shared: every worker sees it at the "
                    "same path as the machine that runs `kiln build`.",
                ) from None
            actual = sha256_file(copy)
            if actual != sha256:
                raise FleetError(
                    f"The source bundle {where} has sha256 {actual} on "
                    f"{socket.gethostname()}, not {sha256} as written; it was not unpacked.",
                    hint="Something changed it on the shared storage. Run the build again.",
                )
            try:
                extract_tree(copy, root, BUNDLE_LAYOUT, ArchiveLimits.resolve())
            except GateError as exc:  # named as the bundle, not as this worker's copy of it
                raise GateError(exc.message.replace(str(copy), where), hint=exc.hint) from None
        finally:
            copy.unlink(missing_ok=True)
    return recipe


# --------------------------------------------------------------------------- tasks (workers)


@dataclass(frozen=True)
class Plan:
    """What every task of one run needs to know; pickled to the workers."""

    run_id: str
    cell_id: str
    count: int
    bundle_sha256: str
    run_dir: Path | None
    """The run's directory on the shared handoff directory; None for a remote handoff."""
    cache: str
    namespace: str | None
    jobs: int | None
    partition: str | None
    smoke: bool
    remote: str | None = None
    """The remote cache storage given to the build (--remote or $KILN_REMOTE on the
    submitting machine); None leaves each worker's own setting or the recipe's."""

    @property
    def through_remote(self) -> bool:
        """Whether the shards hand over through the remote storage (no shared directory)."""
        return self.run_dir is None
    @property
    def topic(self) -> str:
        """The Dask event topic on which tasks say when they start and end."""
        return f"kiln-{self.run_id}"

    def cancel_event(self, job: str) -> str:
        return f"kiln-{self.run_id}-cancel-{job}"


def _job_argv(plan: Plan, recipe: Path, command: str) -> list[str]:
    argv = [sys.executable, "-m", "wheelkiln", command, str(recipe), "--cell", plan.cell_id]
    argv += ["--cache", plan.cache]
    if plan.namespace:
        argv += ["--namespace", plan.namespace]
    if plan.remote:
        argv += ["--remote", plan.remote]
    if plan.jobs:
        argv += ["--jobs", str(plan.jobs)]
    return argv


def _dask() -> Any:
    """The ``distributed`` module, imported when a fleet is used (it costs about a second)."""
    import distributed

    return distributed


def _tell(plan: Plan, job: str, state: str, **fields: Any) -> None:
    worker = _dask().get_worker()
    worker.log_event(
        plan.topic,
        {"job": job, "state": state, "worker": worker.address, "at": time.time(), **fields},
    )


def _wanted(key: str) -> bool:
    """Whether this worker still holds the task *key* as wanted: a task whose client
    went away (or cancelled it) is ``cancelled`` in the worker's state machine."""
    try:
        task = _dask().get_worker().state.tasks.get(key)
    except (ValueError, AttributeError):
        return True
    return task is None or task.state not in ("cancelled", "released", "forgotten")


def _run_job(plan: Plan, job: str, argv: list[str]) -> run.Completed:
    """Run one job's command; end its process group when the task is no longer wanted:
    the client cancelled it (its cancel event, or the worker's own state of the task) or
    went away."""
    dask = _dask()
    key = str(dask.get_worker().get_current_task())
    # An Event made in a task without its client cannot be asked from another thread.
    cancelled = dask.Event(plan.cancel_event(job), client=dask.get_client())
    stop = threading.Event()
    finished = threading.Event()

    def asked_to_stop() -> bool:
        if not _wanted(key):
            return True
        try:
            return bool(cancelled.is_set())
        except Exception:  # the scheduler is unreachable for a moment: keep building
            return False

    def watch() -> None:
        while not finished.is_set():
            if asked_to_stop():
                stop.set()
                return
            finished.wait(CANCEL_POLL_SECONDS)

    watcher = threading.Thread(target=watch, daemon=True, name=f"kiln-watch-{job}")
    watcher.start()
    try:
        return run.run(argv, check=False, stop=stop)
    finally:
        finished.set()
        watcher.join()


def _tail(output: str, lines: int = 12) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])


def _local_run_dir(plan: Plan) -> Path:
    """Where this worker keeps a remote-handoff run's job outputs (there is no shared
    directory): its own ``$KILN_HOME``."""
    return fleet_root() / "runs" / plan.run_id


def shard_task(plan: Plan, bundle: Path | bytes, index: int) -> dict[str, Any]:
    """One shard job on this worker; returns its small result, never its cache."""
    job = f"shard-{index}"
    began = time.time()
    _tell(plan, job, "running", pid=os.getpid())
    recipe = materialize(bundle, plan.bundle_sha256)
    attempt_name = f"{index}-{uuid.uuid4().hex[:12]}"
    attempt = (
        _local_run_dir(plan) / "shards" / attempt_name
        if plan.run_dir is None
        else plan.run_dir / "shards" / attempt_name
    )
    argv = _job_argv(plan, recipe, "shard")
    argv += ["--index", str(index), "--count", str(plan.count), "--out", str(attempt)]
    if plan.through_remote:
        argv += ["--handoff", "remote"]
    if plan.partition:
        argv += ["--partition", plan.partition]
    done = _run_job(plan, job, argv)
    result: dict[str, Any] = {
        "index": index,
        "host": socket.gethostname(),
        "exit_code": done.returncode,
        "began": began,
        "wall_seconds": round(time.time() - began, 3),
        "jobs": plan.jobs or os.cpu_count() or 1,
        "tail": _tail(done.output),
        "record": None,
        "manifest": None,
        "archive": None,
        "sha256": None,
        "handoff": None,
    }
    record = attempt / shard_record(plan.cell_id, index, plan.count)
    if done.returncode >= 0 and record.is_file():
        result["record"] = json.loads(record.read_text())
    archive = attempt / shard_archive(plan.cell_id, index, plan.count)
    handoff = attempt / shard_handoff(plan.cell_id, index, plan.count)
    if done.returncode == 0 and plan.through_remote and handoff.is_file():
        # Read back as the link job will read it: a shard hands over what the link accepts.
        result["handoff"] = json.loads(handoff.read_text(encoding="utf-8"))
        read_handoff(handoff)
    elif done.returncode == 0 and archive.is_file():
        result["manifest"] = inspect_archive(archive).manifest.model_dump(by_alias=True)
        result["archive"] = str(archive)
        result["sha256"] = sha256_file(archive)
    if plan.through_remote:  # what it wrote is in the result
        shutil.rmtree(attempt, ignore_errors=True)
        for emptied in (attempt.parent, attempt.parent.parent):
            with contextlib.suppress(OSError):  # another task of the run may still use it
                emptied.rmdir()
    _tell(plan, job, "done" if done.returncode == 0 else "failed", exit_code=done.returncode)
    return result


def link_task(
    plan: Plan, bundle: Path | bytes, inputs_given: dict[int, Any]
) -> dict[str, Any]:
    """The link job on this worker, over exactly the shard inputs the client accepted:
    index -> (archive path, sha256) on a shared directory, where an archive whose digest
    changed is not merged, and named; or index -> the shard's checked handoff, written
    here under the name the link job looks for (made from the plan, never from the
    handoff's content)."""
    job = "link"
    began = time.time()
    _tell(plan, job, "running", pid=os.getpid())
    recipe = materialize(bundle, plan.bundle_sha256)
    inputs = fleet_root() / "link-inputs" / plan.run_id
    shutil.rmtree(inputs, ignore_errors=True)
    inputs.mkdir(parents=True)
    problems: list[str] = []
    for index, given in sorted(inputs_given.items()):
        if plan.through_remote:
            name = shard_handoff(plan.cell_id, int(index), plan.count)
            (inputs / name).write_text(json.dumps(given, sort_keys=True), encoding="utf-8")
            continue
        path, sha256 = given
        archive = Path(path)
        actual = sha256_file(archive) if archive.is_file() else None
        if actual != sha256:
            problems.append(
                f"{shard_label(index, plan.count)}: its archive {archive} is not the one its "
                f"shard task wrote (sha256 {actual or 'missing'}, expected {sha256}); not merged"
            )
            continue
        (inputs / archive.name).symlink_to(archive)
    out = _local_run_dir(plan) / "link" if plan.run_dir is None else plan.run_dir / "link"
    shutil.rmtree(out, ignore_errors=True)
    argv = _job_argv(plan, recipe, "link")
    argv += ["--archives", str(inputs), "--count", str(plan.count), "--out", str(out)]
    if plan.smoke:
        argv.append("--smoke")
    done = _run_job(plan, job, argv)
    record_path = out / f"{plan.cell_id}.link.json"
    record = (
        json.loads(record_path.read_text()) if done.returncode >= 0 and record_path.is_file() else None
    )
    wheel_bytes = None
    if plan.through_remote and record is not None and (record.get("wheel") or {}).get("path"):
        # No shared directory: the wheel comes back with the result, straight from this
        # worker to the client (the client gathers from workers directly).
        wheel = Path(record["wheel"]["path"])
        if wheel.is_file():
            wheel_bytes = wheel.read_bytes()
    result: dict[str, Any] = {
        "host": socket.gethostname(),
        "exit_code": done.returncode,
        "began": began,
        "wall_seconds": round(time.time() - began, 3),
        "tail": _tail(done.output, 30),
        "problems": problems,
        "record": record,
        "wheel_bytes": wheel_bytes,
    }
    shutil.rmtree(inputs, ignore_errors=True)
    if plan.through_remote:
        shutil.rmtree(_local_run_dir(plan), ignore_errors=True)
    _tell(plan, job, "done" if done.returncode == 0 else "failed", exit_code=done.returncode)
    return result


# --------------------------------------------------------------------------- the client


@dataclass
class TaskView:
    """One task as the client sees it: what the live table shows."""

    label: str
    state: str = "queued"
    """queued, running, retried (running again after a lost worker), done, failed,
    cancelled."""
    workers: list[str] = field(default_factory=list)
    """Every worker that started it, in order."""
    submitted: float = 0.0
    began: float | None = None
    ended: float | None = None
    start_latency: float | None = None
    """Seconds from the moment a worker could take it to its start (its submission, or
    the end of the task before it on that worker): the fleet's own overhead."""

    @property
    def worker(self) -> str:
        return self.workers[-1] if self.workers else "-"

    def placement(self) -> dict[str, Any]:
        """The task's placement, for the report's ``fleet`` key."""
        return {
            "workers": list(self.workers),
            "tries": len(self.workers),
            "state": self.state,
            "start_latency_seconds": (
                round(self.start_latency, 3) if self.start_latency is not None else None
            ),
        }


def connect(address: str, timeout: float = CONNECT_TIMEOUT) -> Client:
    """A client of the scheduler at *address*, or a FleetError naming it.

    A plain TCP connection is tried first: a refused or unroutable address is then known
    at once, where Dask's client would retry it until its timeout."""
    match = _ADDRESS.match(check_address(address))
    assert match is not None
    host, port = match[2].strip("[]"), int(match[3])

    def unreachable(reason: str) -> FleetError:
        return FleetError(
            f"Cannot reach the Dask scheduler at {address}: {reason}; nothing was started.",
            hint="Start one with `dask scheduler` (it prints its address) and workers with "
            '`dask worker ADDRESS --nthreads 1 --resources "builder=1"`, or pass the '
            "--scheduler of a running one.",
        )

    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except TimeoutError:
        raise unreachable(f"no answer within {timeout:g} s") from None
    except OSError as exc:
        raise unreachable((exc.strerror or str(exc)).lower()) from None
    try:
        # Dask logs its own retries at ERROR; the FleetError says it once.
        with _quiet_dask():
            # Results (the link job's wheel) and the scattered bundle go between this
            # machine and the workers directly, never through the scheduler.
            client: Client = _dask().Client(
                address, timeout=timeout, set_as_default=False, direct_to_workers=True
            )
            return client
    except (OSError, TimeoutError) as exc:
        raise unreachable(str(exc).split("\n")[0] or type(exc).__name__) from None


@contextlib.contextmanager
def _quiet_dask() -> Iterator[None]:
    import logging

    loggers = [logging.getLogger(name) for name in ("distributed", "distributed.client")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def worker_resources(client: Client) -> dict[str, dict[str, float]]:
    """Each worker's address and the resources it offers."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return {address: dict(info.get("resources") or {}) for address, info in workers.items()}


class _Progress:
    """The live per-task table on a terminal; one line per change in a log."""

    def __init__(self, title: str, views: list[TaskView]) -> None:
        self.title = title
        self.views = views
        self.live: Live | None = None

    def __enter__(self) -> _Progress:
        if ui.console.is_terminal:
            self.live = Live(self.table(), console=ui.console, refresh_per_second=4)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self.table())
            self.live.__exit__(None, None, None)

    def changed(self, view: TaskView) -> None:
        if self.live is not None:
            self.live.update(self.table())
            return
        where = f" on {view.worker}" if view.workers else ""
        seconds = (
            f" after {view.ended - view.began:.1f} s"
            if view.ended is not None and view.began is not None
            else ""
        )
        ui.info(f"  {view.label}: {view.state}{where}{seconds}")

    def tick(self) -> None:
        if self.live is not None:
            self.live.update(self.table())

    def table(self) -> Table:
        table = Table(title=self.title, title_justify="left")
        for column in ("job", "state", "worker", "tries", "seconds"):
            table.add_column(column, justify="right" if column in ("tries", "seconds") else "left")
        now = time.time()
        for view in self.views:
            seconds = ""
            if view.began is not None:
                seconds = f"{(view.ended or now) - view.began:.1f}"
            table.add_row(view.label, view.state, view.worker, str(len(view.workers)), seconds)
        return table


class _Events:
    """The tasks' start and end events, from Dask's event stream into this thread."""

    def __init__(self, client: Client, topic: str) -> None:
        self.client = client
        self.topic = topic
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue()
        client.subscribe_topic(topic, lambda event: self.queue.put(event[1]))

    def drain(self) -> Iterator[dict[str, Any]]:
        while True:
            try:
                yield self.queue.get_nowait()
            except queue.Empty:
                return

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.unsubscribe_topic(self.topic)


def _apply(
    event: Mapping[str, Any], views: Mapping[str, TaskView], free_at: dict[str, float]
) -> TaskView | None:
    view = views.get(str(event.get("job")))
    if view is None or view.state in ("done", "failed", "cancelled"):
        return None
    worker, at = str(event.get("worker", "?")), float(event.get("at", time.time()))
    if event.get("state") == "running":
        view.workers.append(worker)
        view.began, view.ended = at, None
        view.state = "running" if len(view.workers) == 1 else "retried"
        if len(view.workers) == 1:
            view.start_latency = max(0.0, at - max(view.submitted, free_at.get(worker, 0.0)))
    elif event.get("state") in ("done", "failed"):
        view.ended = at
        free_at[worker] = at
        view.state = str(event["state"])
    return view


@dataclass(frozen=True)
class DaskExecutor:
    """Shard and link jobs as tasks on a Dask distributed cluster (see the module's
    docstring). *on_views* sees the task views after every change: a test kills the
    worker of a running shard with it."""

    fleet: FleetSettings
    on_views: Callable[[list[TaskView]], None] | None = None
    name: str = "dask"

    @classmethod
    def from_settings(cls, settings: ExecutorSettings) -> DaskExecutor:
        """From ``scheduler`` (required), ``handoff`` (optional: without it the shards
        hand over through the remote cache storage) and ``worker_memory`` (GB, optional),
        as the command line and the config name them."""
        unknown = sorted(set(settings) - {"scheduler", "handoff", "worker_memory"})
        if unknown:
            raise UsageError(
                f"The dask executor does not know the setting(s) {', '.join(unknown)}.",
                hint="It takes scheduler, handoff and worker_memory.",
            )
        if not settings.get("scheduler"):
            raise UsageError(
                "--executor dask needs --scheduler (tcp://HOST:PORT).",
                hint="--scheduler is the address `dask scheduler` prints (also "
                "$KILN_SCHEDULER, or the recipe's executor.scheduler).",
            )
        memory = settings.get("worker_memory")
        if memory is not None and not (memory.isascii() and memory.isdigit() and int(memory) > 0):
            raise UsageError(
                f"--worker-memory {memory!r} is not a whole number of GB.",
                hint="Give the GB each task needs, as the workers' MEM_GB resource counts them.",
            )
        return cls(
            FleetSettings(
                scheduler=settings["scheduler"],
                handoff=Path(settings["handoff"]) if settings.get("handoff") else None,
                memory_gb=int(memory) if memory else None,
            )
        )

    def run(self, job: ShardedJob) -> ShardedRun:
        started = time.perf_counter()
        fleet, cell = self.fleet, job.cell
        remote = configured_remote(job.loaded, job.options)
        if fleet.handoff is not None:
            check_output_dir(fleet.handoff, "--handoff")
        elif remote is None:
            raise UsageError(
                "--executor dask needs a way to hand the shards' caches to the link job: "
                "--remote URL (remote cache storage every worker reaches; also $KILN_REMOTE "
                "or the recipe's cache.remote) or --handoff DIR (a directory every worker "
                "sees at the same path; also $KILN_HANDOFF or the recipe's executor.handoff).",
                hint="Start a cache server the workers reach (e.g. valkey-server or redis-server) "
                "and pass --remote redis://HOST:6379, or mount a shared directory and pass "
                "--handoff.",
            )
        need = needed_resources(cell, fleet.memory_gb)
        client = connect(fleet.scheduler, fleet.connect_timeout)
        try:
            workers = worker_resources(client)
            missing = missing_resources(workers, need)
            if missing is not None:
                raise FleetError(
                    f"No worker of the Dask scheduler at {fleet.scheduler} can run the tasks of "
                    f"{cell.id}, which ask for {_describe_offer(need)}: {missing}; nothing was "
                    "submitted.",
                    hint=f"Start a worker that offers them: dask worker {fleet.scheduler} "
                    f'--nthreads 1 --resources "{_describe_offer(need)}".',
                )
            run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
            namespace = job.options.namespace or job.loaded.recipe.cache.namespace
            if fleet.handoff is not None:
                run_dir: Path | None = fleet.handoff.resolve() / run_id
                assert run_dir is not None
                bundle = pack_bundle(job.loaded, run_dir)
                sent: Callable[[], Any] = SharedBundle(bundle.path).ref
                where = f"handoff in {run_dir}"
            else:
                run_dir = None
                namespace = run_namespace(namespace, run_id)
                bundle, scattered = _scatter_bundle(client, job.loaded)
                sent = scattered.ref
                where = f"handoff through {shown(remote or '')} under namespace {namespace}"
            plan = Plan(
                run_id=run_id,
                cell_id=cell.id,
                count=job.count,
                bundle_sha256=bundle.sha256,
                run_dir=run_dir,
                cache=job.options.cache,
                namespace=namespace,
                jobs=job.options.jobs,
                partition=job.partition,
                smoke=job.smoke,
                remote=remote,
            )
            capable = [
                a for a, offer in workers.items() if missing_resources({a: offer}, need) is None
            ]
            ui.info(
                f"Sharding {cell.id} {job.count} ways on the Dask scheduler at "
                f"{fleet.scheduler}: {len(capable)} of {len(workers)} worker(s) offer "
                f"{_describe_offer(need)}; {where}"
            )
            shards, link, link_error, shards_wall = _run(
                client, plan, sent, need, job.out_dir, started, self.on_views
            )
            passed = link is not None and link.gate.passed and all(s.exit_code == 0 for s in shards)
            if run_dir is not None and passed:
                # The wheel and its record are in --out, the shards' records in the
                # report: the run's archives on the shared storage have served. A failed
                # run keeps them, for `kiln link` by hand or a look inside.
                shutil.rmtree(run_dir, ignore_errors=True)
        finally:
            with _quiet_dask():
                client.close(timeout=10)
        return ShardedRun(
            job=job,
            shards=tuple(shards),
            link=link,
            link_error=link_error,
            parallel=min(job.count, len(capable)),
            cpus=os.cpu_count() or 1,
            shards_wall_seconds=shards_wall,
            wall_seconds=time.perf_counter() - started,
            workers=workers,
        )


@dataclass(frozen=True)
class SharedBundle:
    """A source bundle on the shared handoff directory: each task gets its path."""

    path: Path

    def ref(self) -> Path:
        return self.path


@dataclass
class ScatteredBundle:
    """A source bundle sent to the workers by Dask (there is no shared directory).

    A copy goes to each worker, straight from the client: scattered data cannot be made
    again, so a lost worker must not take the only copy. Dask keeps at least one copy
    per worker that waits for it, and may drop the others while no task waits (between
    the shards and the link task); a bundle whose every copy was lost is sent again."""

    client: Client
    blob: bytes
    future: Future = None

    def ref(self) -> Future:
        if self.future is None or self.future.status != "finished":
            try:
                # Lost workers come back under their nannies or supervisors: wait a while.
                self.client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
                self.future = self.client.scatter(self.blob, hash=False, broadcast=True)
            except TimeoutError:  # no worker came (scatter: "No valid workers found")
                raise FleetError(
                    f"No worker of the Dask scheduler at {self.client.scheduler.address} "
                    f"came back within {WORKER_WAIT_SECONDS:g} s to take the source bundle; "
                    "the tasks still to run were not submitted.",
                    hint="Start the workers again, then run the build again.",
                ) from None
        return self.future


def _scatter_bundle(client: Client, loaded: LoadedRecipe) -> tuple[Bundle, ScatteredBundle]:
    """The source bundle, packed and checked for size, to be sent by Dask."""
    with tempfile.TemporaryDirectory(prefix="kiln-bundle-") as scratch:
        bundle = pack_bundle(loaded, Path(scratch))
        size = bundle.path.stat().st_size
        if size > MAX_SCATTERED_BUNDLE:
            raise UsageError(
                f"The source bundle of {loaded.path} is {format_size(size)}, more than the "
                f"{format_size(MAX_SCATTERED_BUNDLE)} kiln sends through Dask.",
                hint="Pass --handoff DIR (a directory every worker sees at the same path), or "
                "leave build outputs out of the tree with the recipe's source.exclude.",
            )
        blob = bundle.path.read_bytes()
    return bundle, ScatteredBundle(client, blob)


def _run(
    client: Client,
    plan: Plan,
    bundle: Callable[[], Any],
    need: dict[str, float],
    out_dir: Path,
    started: float,
    on_views: Callable[[list[TaskView]], None] | None,
) -> tuple[list[ShardRun], LinkRun | None, KilnError | None, float]:
    """Submit the shard tasks, wait with a live table, then the link task. *bundle*
    gives what each task gets as its source bundle (its path, or Dask's future of it)."""
    count = plan.count
    views = {f"shard-{i}": TaskView(shard_label(i, count)) for i in range(count)}
    views["link"] = TaskView("link")
    ordered = list(views.values())
    free_at: dict[str, float] = {}
    events = _Events(client, plan.topic)
    futures: dict[str, Future] = {}
    ended: dict[str, _Ended] = {}
    given_up: set[str] = set()

    calls: dict[str, tuple[Callable[..., dict[str, Any]], tuple[Any, ...]]] = {}
    resent: set[str] = set()

    def submit(job: str, function: Callable[..., dict[str, Any]], *args: Any) -> None:
        views[job].submitted = views[job].submitted or time.time()
        calls[job] = (function, args)
        futures[job] = client.submit(
            function,
            plan,
            bundle(),
            *args,
            key=f"kiln-{plan.run_id}-{job}" + ("-again" if job in resent else ""),
            resources=need,
            retries=1,
            pure=False,
        )

    def lost_its_bundle(job: str) -> bool:
        """A task the scheduler cancelled, not this client: the scattered source bundle it
        needs was lost with the last worker that held a copy. It is submitted again
        (once) with the bundle sent again; its start counts as a try, as Dask's own
        rerun after a lost worker does."""
        if not plan.through_remote or job in given_up or job in resent:
            return False
        if futures[job].status != "cancelled":
            return False
        resent.add(job)
        futures[job].release()
        submit(job, calls[job][0], *calls[job][1])
        return True

    def wait(jobs: list[str], progress: _Progress) -> None:
        pending = set(jobs)
        while pending:
            for event in events.drain():
                view = _apply(event, views, free_at)
                if view is None:
                    continue
                if len(view.workers) > MAX_STARTS:
                    # Its worker was lost a second time: the link job runs without it.
                    job = str(event["job"])
                    _dask().Event(plan.cancel_event(job), client=client).set()
                    client.cancel([futures[job]])
                    given_up.add(job)
                    view.state = "failed"
                progress.changed(view)
                if on_views is not None:
                    on_views(ordered)
            for job in sorted(pending):
                # A task's own "failed" event comes just before its result: wait for that.
                if futures[job].done() and lost_its_bundle(job):
                    continue
                if futures[job].done() or job in given_up:
                    pending.discard(job)
                    ended[job] = _collect(futures[job])
                    if views[job].state in ("queued", "running", "retried"):
                        views[job].state = "done" if ended[job].result is not None else "failed"
                        progress.changed(views[job])
            progress.tick()
            time.sleep(0.05)

    title = f"kiln build --shards {count} --executor dask: {plan.cell_id}"
    try:
        with _Progress(title, ordered) as progress:
            for index in range(count):
                submit(f"shard-{index}", shard_task, index)
            wait([f"shard-{i}" for i in range(count)], progress)
            shards = [
                _shard_run(plan, i, ended[f"shard-{i}"], views[f"shard-{i}"])
                for i in range(count)
            ]
            shards_wall = time.perf_counter() - started
            accepted = {
                shard.index: given
                for shard in shards
                if (given := _accepted_input(shard)) is not None
            }
            if (nothing := nothing_to_link(plan.cell_id, shards, len(accepted))) is not None:
                views["link"].state = "cancelled"
                progress.changed(views["link"])
                return shards, None, nothing, shards_wall
            submit("link", link_task, accepted)
            wait(["link"], progress)
    except KeyboardInterrupt:
        _cancel_everything(client, plan, futures, views, events)
        raise
    finally:
        events.close()
    link, link_error = _link_run(plan, ended["link"], views["link"], out_dir)
    return shards, link, link_error, shards_wall


def _cancel_everything(
    client: Client,
    plan: Plan,
    futures: Mapping[str, Future],
    views: Mapping[str, TaskView],
    events: _Events,
    grace: float = 10.0,
) -> None:
    """Ctrl-C: cancel every task, and wait (a while) for the running ones to say that
    their jobs ended, so that no compile outlives the build."""
    ui.warn("Interrupted: cancelling the fleet's tasks")
    for job in futures:
        with contextlib.suppress(Exception):
            _dask().Event(plan.cancel_event(job), client=client).set()
    with contextlib.suppress(Exception):
        client.cancel(list(futures.values()))
    running = {job for job, view in views.items() if view.state in ("running", "retried")}
    deadline = time.monotonic() + grace
    while running and time.monotonic() < deadline:
        for event in events.drain():
            if event.get("state") in ("done", "failed"):
                running.discard(str(event.get("job")))
        time.sleep(0.1)
    if running:
        ui.warn(
            "No word within "
            f"{grace:g} s from: {', '.join(sorted(views[job].label for job in running))}; "
            "their workers end the jobs when they next look (every "
            f"{CANCEL_POLL_SECONDS:g} s)."
        )


def _failure_of(future: Future) -> str:
    if future.status == "cancelled":
        return "cancelled"
    try:
        exc = future.exception(timeout=5)
    except Exception as error:  # the future itself cannot say
        return f"{type(error).__name__}: {error}"
    if exc is None:
        return "no result"
    if type(exc).__name__ == "KilledWorker":
        return "its worker died while running it, more often than the scheduler retries"
    return str(exc) if isinstance(exc, KilnError) else f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class _Ended:
    """How a task ended, as collected the moment it did: its result, or why there is none."""

    result: dict[str, Any] | None
    failure: str | None = None


def _collect(future: Future) -> _Ended:
    """A task's result, fetched to this machine as soon as the task ends, and the task
    released. A result stays in its worker's memory until fetched: were that worker lost
    later (while it builds another shard), Dask would run the finished task again and the
    result would be gone for now."""
    try:
        if future.status == "finished":
            try:
                return _Ended(future.result())
            except Exception:  # lost between finishing and the fetch
                return _Ended(None, _failure_of(future))
        return _Ended(None, _failure_of(future))
    finally:
        future.release()


def _shard_run(plan: Plan, index: int, ended: _Ended, view: TaskView) -> ShardRun:
    """How one shard task ended. Its result holds the validated manifest and the archive's
    path and digest (kept in the record under ``handoff``); never the archive."""
    label = shard_label(index, plan.count)
    placement = view.placement()
    if len(view.workers) > MAX_STARTS:
        return ShardRun(
            index,
            plan.count,
            1,
            0.0,
            plan.jobs or 0,
            None,
            f"its worker was lost twice ({', '.join(view.workers[:MAX_STARTS])}); not "
            "retried again",
            placement,
        )
    result = ended.result
    if result is None:
        return ShardRun(
            index, plan.count, 1, 0.0, plan.jobs or 0, None, ended.failure, placement
        )
    exit_code = int(result["exit_code"])
    problem = None
    if exit_code != 0:
        problem = _shard_problem(result, exit_code, view.worker)
        ui.warn(f"{label} failed on {view.worker}")
    record = result["record"]
    if exit_code == 0 and plan.through_remote:
        # A task's result crossed from a worker: read it as the link job will.
        try:
            handoff = check_handoff(
                result["handoff"], f"the handoff {label}'s task returned from {view.worker}"
            )
        except GateError as exc:
            exit_code, problem = GateError.exit_code, exc.message
            ui.warn(f"{label}: {exc.message}")
        else:
            if record is not None:
                store = handoff.manifest.remote
                assert store is not None
                record["handoff"] = {
                    "via": "remote",
                    "storage": store.storage,
                    "namespace": store.namespace,
                    "manifest": handoff.manifest.model_dump(by_alias=True),
                    "given": result["handoff"],
                }
    elif record is not None and result["archive"]:
        record["handoff"] = {
            "via": "archive",
            "archive": result["archive"],
            "sha256": result["sha256"],
            "manifest": result["manifest"],
        }
    return ShardRun(
        index,
        plan.count,
        exit_code,
        float(result["wall_seconds"]),
        int(result["jobs"]),
        record,
        problem,
        placement,
    )


TABLE_RULES = tuple("│┃┏┡┗└┌├╭╰━─")
"""The first characters of a summary table's rows, as rich draws them."""


def _shard_problem(result: dict[str, Any], exit_code: int, worker: str | None) -> str:
    """Why a shard task's job failed, in the words a local shard's failure has: its
    gate's reasons where its record names them, else the end of its output without the
    summary table's rows (the job's error is the last of it)."""
    if exit_code < 0:
        return run.exit_description(exit_code)
    record = result.get("record")
    shard = record.get("shard") if isinstance(record, dict) else None
    gate = shard.get("gate") if isinstance(shard, dict) else None
    reasons = gate.get("reasons") if isinstance(gate, dict) else None
    if (
        isinstance(gate, dict) and gate.get("passed") is False and isinstance(reasons, list)
        and reasons and all(isinstance(reason, str) for reason in reasons)
    ):  # fmt: skip
        log = record.get("log") if isinstance(record, dict) else None
        where = f" (build log on {worker}: {log})" if isinstance(log, str) else ""
        return gate_failure(reasons, gate.get("build_failed") is True) + where
    return _untabled(str(result.get("tail", "")))


def _untabled(output: str) -> str:
    """A job's output without its summary table's rows: what is left ends with its error."""
    lines = output.splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith(TABLE_RULES))


def _accepted_input(shard: ShardRun) -> Any:
    """What the link task gets of a shard that passed: its checked handoff, or its
    archive's path and sha256; None for a shard that did not pass."""
    handoff = (shard.record or {}).get("handoff")
    if shard.exit_code != 0 or not handoff:
        return None
    if handoff["via"] == "remote":
        return handoff.pop("given")  # to the link task; the report keeps the manifest
    return str(handoff["archive"]), str(handoff["sha256"])


def _receive_wheel(
    wheel: Mapping[str, Any], blob: bytes | None, out_dir: Path, view: TaskView
) -> Path:
    """The link task's wheel, sent back with its result, written to *out_dir* once its
    name is one plain wheel name and its bytes have the sha256 its record gives."""
    name = wheel.get("name")
    if not isinstance(name, str) or not WHEEL_NAME.match(name) or not isinstance(blob, bytes):
        raise FleetError(
            f"The link task on {view.worker} returned no usable wheel (name {name!r}).",
            hint="Run the build again; if it repeats, look at that worker's link job.",
        )
    actual = hashlib.sha256(blob).hexdigest()
    if actual != wheel.get("sha256"):
        raise FleetError(
            f"The wheel {name} the link task on {view.worker} returned has sha256 {actual}, "
            f"not {wheel.get('sha256')} as its record says; it was not written.",
            hint="Run the build again.",
        )
    target = out_dir / name
    partial = target.with_name(f".{name}.{uuid.uuid4().hex}.partial")
    partial.write_bytes(blob)
    partial.replace(target)
    return target


def _link_run(
    plan: Plan, ended: _Ended, view: TaskView, out_dir: Path
) -> tuple[LinkRun | None, KilnError | None]:
    """The link task's record and gate, its wheel and record copied to *out_dir*; or the
    error that ended it (a failed full build, a wheel that fails its checks, a lost task)."""
    files = (
        f"Its files are in {plan.run_dir / 'link'}."
        if plan.run_dir is not None
        else f"Its files are on {view.worker}, under that worker's $KILN_HOME "
        f"(fleet/runs/{plan.run_id}/link and work/{plan.cell_id}-link)."
    )
    result = ended.result
    if result is None:
        return None, BuildError(
            f"The link task of {plan.cell_id} did not finish: {ended.failure}.",
            hint=files,
        )
    record = result["record"]
    exit_code = int(result["exit_code"])
    if record is None or exit_code not in (0, GateError.exit_code):
        return None, BuildError(
            f"The link job of {plan.cell_id} on {view.worker} ended with "
            f"{run.exit_description(exit_code)}:\n{_untabled(str(result['tail']))}",
            hint=files,
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = record.get("wheel")
    if wheel and wheel.get("path"):
        if plan.run_dir is None:
            wheel["path"] = str(_receive_wheel(wheel, result["wheel_bytes"], out_dir, view))
        else:
            target = out_dir / Path(wheel["path"]).name
            shutil.copy2(wheel["path"], target)
            wheel["path"] = str(target)
    record["fleet"] = view.placement()
    (out_dir / f"{plan.cell_id}.link.json").write_text(
        json.dumps(record, indent=2, sort_keys=True) + "\n"
    )
    gate = record["link"]["gate"]
    cache = record.get("cache", {})
    problems = [*result["problems"], *gate.get("problems", [])]
    link_gate = LinkGateResult(
        passed=bool(gate.get("passed")) and not result["problems"],
        hits=int(cache.get("hits", 0)),
        misses=int(cache.get("misses", 0)),
        total=int(cache.get("total", 0)),
        problems=problems,
        missed=list(gate.get("missed", [])),
    )
    return LinkRun(record, link_gate, float(result["wall_seconds"])), None
