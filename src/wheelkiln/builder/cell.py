"""Building one cell: a private copy of the tree, a stable build environment, the
cache (or seat wrapper) in front of every compiler, a PEP 517 frontend, and the facts
a build record needs."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.markup import escape

from wheelkiln import run, ui
from wheelkiln.builder import cmake_id, compiler_answers, frontend, meson_sanity, probes
from wheelkiln.builder.backend import backend_settings, frontend_arguments
from wheelkiln.builder.dpkg_arch import dpkg_arch_front
from wheelkiln.builder.environment import (
    BuildEnvironment,
    ensure_environment,
    finish_bytecode,
    frontend_requires,
    interpreter_version,
    read_build_system,
    settle_dynamic,
)
from wheelkiln.builder.job_env import (
    check_nvcc_flags,
    expand_recipe_env,
    inherited_environment,
    jobs_environment,
    resolve_jobs,
)
from wheelkiln.builder.linker import cmake_version, linker_environment, linker_versions
from wheelkiln.builder.meson_version import meson_front
from wheelkiln.builder.requires_python import check_requires_python
from wheelkiln.builder.source import copy_tree, empty_but, fetch_source, source_digest
from wheelkiln.builder.toolchain import (
    DEBUG_PREFIX,
    JOB_DIR,
    Launch,
    Toolchain,
    chosen_compiler_versions,
    cython_fronts,
    front_scripts_dir,
    host_compilers,
    merge_cmake_args,
    probe_toolchain,
    toolchain_environment,
)
from wheelkiln.cache import cython as cython_cache
from wheelkiln.cache.backend import CacheBackend, CacheConfig, CacheStats, TUOutcome
from wheelkiln.cache.registry import make_backend
from wheelkiln.cache.remote import RemotePlan, plan_remote
from wheelkiln.cells import Cell
from wheelkiln.paths import (
    cuda_views,
    default_cache_dir,
    envs_dir,
    envs_view,
    kiln_home,
    resolve_workdir,
    sources_dir,
)
from wheelkiln.recipe.load import LoadedRecipe, check_recipe_env
from wheelkiln.settings import BuildOptions
from wheelkiln.wheels.facts import WheelFacts, inspect_wheel


@dataclass
class BuildOutcome:
    """What happened. ``exit_code`` is not raised here: shard gates decide what it means."""

    cell: Cell
    job_dir: Path
    tree: Path
    log_path: Path
    exit_code: int
    wall_seconds: float
    cpu_seconds: float
    peak_rss_bytes: int
    cache_name: str
    stats: CacheStats | None
    tu_outcomes: list[TUOutcome]
    wheel: WheelFacts | None
    source_digest: str
    environment: BuildEnvironment
    versions: dict[str, str]
    log_text: str
    remote: RemotePlan | None = None
    """The remote stores the build was given, and how each went."""
    cython: dict[str, object] = field(default_factory=dict)
    """The build's Cython transpiles (:func:`wheelkiln.cache.cython.read_log`)."""
    environ: dict[str, str] = field(default_factory=dict)
    """The environment the build ran in (a compile run again in it goes through the
    same fronts and cache settings)."""
    cmake: dict[str, object] | None = None
    """What kiln seeded a CMake build's configure with (:meth:`cmake_id.Kept.as_record`)."""


def job_toolchain(loaded: LoadedRecipe, options: BuildOptions) -> Toolchain:
    """The tool versions a job with *options* builds with, probed once for the job: the
    compilers, cmake, the cache, and the recipe's linker (refused when it is absent)."""
    probes.start_job()
    workdir = resolve_workdir(options.workdir)
    linker = linker_versions(loaded.recipe.build.linker, loaded.path, os.environ)
    return Toolchain(_tool_versions(make_cache(loaded, options, workdir, workdir), loaded, linker))


def _tool_versions(
    cache: CacheBackend | None, loaded: LoadedRecipe, linker: Mapping[str, str]
) -> dict[str, str]:
    """What a job's tool versions are made of, in one place: a link job (its
    :func:`job_toolchain`) and its shards (:func:`build_cell` without one) compare them."""
    chosen = chosen_compiler_versions(_compilers_named(loaded))
    return {**probe_toolchain(cache).as_dict(), **chosen, **linker}


def _compilers_named(loaded: LoadedRecipe) -> dict[str, str]:
    """Where a build's compilers are named (``CC``, ``CXX``, ``KILN_HOST_CC``...): the
    environment kiln runs in and the recipe's ``build.env``."""
    return {**os.environ, **loaded.recipe.build.env}


def job_directory(workdir: Path, cell: Cell, suffix: str) -> Path:
    return workdir / (cell.id + (f"-{suffix}" if suffix else ""))


def configured_remote(loaded: LoadedRecipe, options: BuildOptions) -> str | None:
    """The remote storage a build is given: ``options.remote``, else the recipe's."""
    return options.remote or loaded.recipe.cache.remote


def make_cache(
    loaded: LoadedRecipe,
    options: BuildOptions,
    workdir: Path,
    job_dir: Path,
    *,
    remote: str | None = None,
) -> CacheBackend | None:
    """The build's cache backend. *remote*: the stores it uses (see
    :func:`wheelkiln.cache.remote.plan_remote`); none for a backend that is only asked
    for its executable or version."""
    name = options.cache
    return make_backend(
        name,
        CacheConfig(
            # absolute: the cache runs in the build's own directories (a relative
            # --cache-dir sent ccache's entries into meson's build directory)
            cache_dir=(options.cache_dir or default_cache_dir(name)).absolute(),
            base_dir=workdir,
            namespace=options.namespace or loaded.recipe.cache.namespace,
            recache=options.recache,
            remote=remote,
            stats_log=job_dir / "cache-stats.log",
            job_dir=job_dir,
        ),
    )


def build_cell(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    toolchain: Toolchain | None = None,
    *,
    known_digest: str | None = None,
) -> BuildOutcome:
    """Build *cell*. *toolchain*: the job's tool versions when it probed them already
    (:func:`job_toolchain`); probed here otherwise. *known_digest*: the digest of the
    fetched source this build copies, when the job took it already
    (:func:`wheelkiln.builder.wheel_cache.fetched_source_digest`); a job that changes its
    copy (``prepare_tree``) digests the copy."""
    try:
        return _build_cell(loaded, cell, options, toolchain, known_digest=known_digest)
    except frontend.BackendAsks as grew:
        # Raised out of _build_cell only where the backend, asked in the build's process,
        # wanted what its environment lacks (what the lock holds, the build goes on
        # with): start again in the environment that holds it.
        if not options.job.quiet:
            ui.info(
                "The build backend asked for "
                + escape(", ".join(grew.requirements))
                + ", which its build environment lacked: installed; building again."
            )
        # Its request's memo holds the answer now: the second start asks nothing.
        return _build_cell(loaded, cell, options, toolchain, known_digest=known_digest)


def _build_cell(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    toolchain: Toolchain | None,
    *,
    known_digest: str | None,
) -> BuildOutcome:
    if known_digest is not None and options.job.prepare_tree is not None:
        raise ValueError("a job that changes its tree (prepare_tree) digests its own copy")
    if toolchain is None:
        probes.start_job()
    recipe = loaded.recipe
    workdir = resolve_workdir(options.workdir)
    job_dir = job_directory(workdir, cell, "" if options.job.in_cell_directory else options.job.suffix)
    tree = job_dir / "src"
    title = f"{cell.id} {options.job.suffix}".rstrip()
    check_recipe_env(recipe.build.env, loaded.path)  # before any work
    host_compilers(_compilers_named(loaded))  # a CC that is no command line, too
    mode = frontend.frontend_mode(os.environ)
    # Refused before any work when absent; a job's toolchain has it already.
    linker = (
        {}
        if toolchain is not None
        else linker_versions(recipe.build.linker, loaded.path, os.environ)
    )
    with ui.step(
        f"Preparing {title}",
        quiet=options.job.quiet,
    ):
        pristine = fetch_source(loaded, sources_dir())
        check_requires_python(pristine, interpreter_version(cell.python), cell.id)
        empty_but(job_dir, tree)  # the tree is copied again in place (copy_tree)
        digest = copy_tree(pristine, tree, recipe.source.exclude)
        if options.job.prepare_tree is not None and options.job.prepare_tree(tree):
            digest = source_digest(tree, recipe.source.exclude)  # what it left of the copy
        digest = known_digest or digest
        system = read_build_system(tree)
        extra_requires = [
            *recipe.build.requires,
            *frontend_requires(recipe.build.frontend, mode),
        ]
        environment = ensure_environment(
            tree,
            cell.python,
            extra_requires,
            envs_dir(),
            config_settings=recipe.build.config_settings,
            ask_in_build=mode == "hook",
        )
        # What the build runs and is told about the environment goes through the view,
        # so its path is the same in every home (the record keeps the real one).
        seen = environment.seen_from(envs_view(workdir))
    remote = plan_remote(configured_remote(loaded, options)) if options.cache != "none" else None
    cache = make_cache(loaded, options, workdir, job_dir, remote=remote.usable if remote else None)
    launch = Launch(cache.executable() if cache else None, seat_wrapper=options.job.seat_wrapper)
    env = inherited_environment(os.environ)
    recipe_env = expand_recipe_env(recipe.build.env, seen.path, loaded.path)
    env.update(recipe_env)
    job_tmp: Path | None = None
    if "TMPDIR" not in recipe_env:
        # The job's own temp directory (emptied with the job's): a temp path a build
        # compiles from (psutil's header checks, frozenlist's copy of its tree) is inside
        # the cache's base directory, and named the same in every job (the site hook).
        job_tmp = job_dir / "tmp"
        job_tmp.mkdir(exist_ok=True)
        if env.get("TMPDIR"):
            env["KILN_OUTER_TMPDIR"] = env["TMPDIR"]  # for sockets (the site hook)
        env["TMPDIR"] = str(job_tmp)
    jobs = resolve_jobs(options.jobs, recipe.build.jobs, recipe_env, os.environ, loaded.path)
    env.update(jobs_environment(jobs.jobs))
    backend = backend_settings(
        system.kind,
        job_dir / "build",
        jobs.jobs,
        keep_going=options.job.seat_wrapper,  # shard jobs
        recipe_settings=recipe.build.config_settings,
        environ=env,
    )
    env.update(backend.env)
    env.update(
        {
            "SOURCE_DATE_EPOCH": str(options.source_date_epoch),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    if cell.arch_list and "TORCH_CUDA_ARCH_LIST" not in env:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(cell.arch_list)
    if cache is not None:
        env.update(cache.environment())
    tool_env = toolchain_environment(
        launch,
        system.kind,
        job_dir / "kiln-bin",
        cuda_home_nvcc=recipe.build.cuda_home_nvcc,
        build_env=seen.path,
        cuda_views=cuda_views(workdir),
        environ=env,
    )
    prepend = tool_env.pop("KILN_PATH_PREPEND", None)
    if "CMAKE_ARGS" in tool_env and env.get("CMAKE_ARGS"):  # the user's or recipe's go first
        tool_env["CMAKE_ARGS"] = merge_cmake_args(env["CMAKE_ARGS"], tool_env["CMAKE_ARGS"])
    env.update(tool_env)
    env[JOB_DIR] = str(job_dir)
    if cache is None or cache.name != "sccache":
        # The CC/CXX fronts map it to "." in debug info. ccache hashes only that the
        # option is there; sccache (0.16) hashes its value, the job's own directory, so
        # no other job (a link job, another workdir) would hit: with sccache the debug
        # info keeps the directory instead.
        env[DEBUG_PREFIX] = str(job_dir)
    if recipe.build.linker != "default":
        cmake = cmake_version(seen.path, env) if system.kind == "cmake" else None
        env.update(linker_environment(recipe.build.linker, system.kind, env, cmake=cmake))
    env.update(options.job.extra_env)
    cython_log = job_dir / cython_cache.LOG_NAME
    cython_path: list[str] = []
    behind_fronts = [p for p in (prepend, str(seen.bin_dir), env.get("PATH", "")) if p]
    if cache is not None or options.job.seat_wrapper:
        cython_path, site_hook = cython_fronts()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site_hook, env.get("PYTHONPATH")) if p)
        cython_dir = (
            cython_cache.cache_directory(cache.config.cache_dir, cache.config.namespace)
            if cache is not None
            else None
        )
        env.update(cython_cache.version_environment(cython_dir, os.pathsep.join(behind_fronts)))
        env.update(
            cython_cache.environment(
                cache_dir=cython_dir,
                log_path=str(cython_log),
                package_root=str(tree),
                build_dir=str(backend.build_dir or job_dir / "build"),
                envs_dirs=[str(envs_view(workdir)), str(envs_dir())],
                recache=options.recache,
                job_tmp=str(job_tmp) if job_tmp is not None else None,
            )
        )
    env["PATH"] = os.pathsep.join([*cython_path, *behind_fronts])
    check_nvcc_flags(env)
    dist = job_dir / "dist"
    dist.mkdir()
    sanity_marker = None
    if system.kind == "meson":
        front = meson_front(env, kiln_home() / "meson-version", front_scripts_dir())
        if front is not None:
            env["PATH"] = os.pathsep.join((front, env["PATH"]))
        arch = dpkg_arch_front(env, kiln_home() / "dpkg-architecture", front_scripts_dir())
        if arch is not None:
            env["PATH"] = os.pathsep.join((arch, env["PATH"]))
        if "CC" in tool_env and "CXX" in tool_env:
            fronts = {"cc": Path(tool_env["CC"]), "c++": Path(tool_env["CXX"])}
            env.update(compiler_answers.prepare(fronts, env, kiln_home() / "compiler-answers"))
        sanity_marker = (
            kiln_home()
            / "meson-sanity"
            / meson_sanity.sanity_key(env, environment.path, backend.config_settings)
        )
        skip = meson_sanity.skip_settings(sanity_marker, job_dir / "kiln-meson-native.ini")
        backend = replace(backend, config_settings=(*backend.config_settings, *skip))
    settings = frontend_arguments(recipe.build.frontend, backend.config_settings)
    if recipe.build.frontend == "pip":
        argv = [
            str(seen.python),
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            str(dist),
            *settings,
            str(tree),
        ]
    else:
        argv = [
            str(seen.python),
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(dist),
            *settings,
            str(tree),
        ]
    kept_identification = None
    if system.kind == "cmake":
        kept_identification = cmake_id.prepare(
            job_dir / "build",
            tree,
            env,
            environment.path,
            backend.config_settings,
            kiln_home() / "cmake-id",
            python=seen.python,
            source_digest=digest,
            recache=options.recache,
        )
    if cache is not None:
        cache.start()
        cache.zero_stats()
    versions = (
        toolchain.as_dict()
        if toolchain is not None
        else _tool_versions(cache, loaded, linker)
    )
    log_path = job_dir / "build.log"
    try:
        with ui.step(
            f"Building {title}",
            quiet=options.job.quiet,
        ) as shown:
            started = time.perf_counter()
            if mode == "hook":

                def call_backend(ask_first: bool) -> run.Completed:
                    return frontend.build_wheel(
                        seen.python,
                        tree,
                        system,
                        backend.config_settings,
                        dist,
                        log_path=log_path,
                        env=env,
                        on_line=shown.line,
                        ask_first=ask_first,
                    )

                try:
                    done = call_backend(environment.ask_backend)
                    if environment.ask_backend and done.returncode == 0:
                        # It asked for nothing (anything else ends before build_wheel).
                        environment = settle_dynamic(environment, [], cell.python, envs_dir())
                except frontend.BackendAsks as asked:
                    settled = settle_dynamic(
                        environment, asked.requirements, cell.python, envs_dir()
                    )
                    if settled.path != environment.path:
                        # Everything above that names the environment names the old one.
                        raise
                    environment = settled
                    done = call_backend(False)
            else:
                done = run.run_logged(
                    argv, log_path=log_path, cwd=tree, env=env, on_line=shown.line
                )
            wall = time.perf_counter() - started
        stats = cache.stats() if cache is not None else None
        if remote is not None and stats is not None:
            remote = remote.after_build(stats.remote_errors)
        outcomes = cache.tu_outcomes() if cache is not None else []
    finally:
        if cache is not None:
            cache.stop()
        finish_bytecode()  # compiled beside the build; the build leaves its environment whole
    if kept_identification is not None and done.returncode == 0:
        cmake_id.keep_all(kept_identification, job_dir / "build")
    if sanity_marker is not None and done.returncode == 0:
        meson_sanity.mark(sanity_marker)
    wheels = sorted(dist.glob("*.whl"))
    facts = inspect_wheel(wheels[0]) if done.returncode == 0 and wheels else None
    return BuildOutcome(
        cell=cell,
        job_dir=job_dir,
        tree=tree,
        log_path=log_path,
        exit_code=done.returncode,
        wall_seconds=wall,
        cpu_seconds=done.cpu_seconds,
        peak_rss_bytes=done.peak_rss_bytes,
        cache_name=options.cache,
        stats=stats,
        tu_outcomes=outcomes,
        wheel=facts,
        source_digest=digest,
        environment=environment,
        versions=versions,
        log_text=done.output,
        remote=remote,
        cython=cython_cache.read_log(cython_log),
        environ=env,
        cmake=kept_identification.as_record() if kept_identification is not None else None,
    )
