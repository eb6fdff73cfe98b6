"""Where wheelkiln keeps things: one home for caches, environments and work trees."""

from __future__ import annotations

import os
from pathlib import Path


def kiln_home() -> Path:
    """``$KILN_HOME``, else ``$XDG_CACHE_HOME/wheelkiln``, else ``~/.cache/wheelkiln``;
    resolved, with a leading ``~`` expanded as the output checks expand it (a quoted
    ``KILN_HOME='~/kiln'`` reaches kiln unexpanded)."""
    if home := os.environ.get("KILN_HOME"):
        return Path(home).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(cache).expanduser() / "wheelkiln").resolve()


def state_home() -> Path:
    """``$KILN_STATE_HOME``, else ``$XDG_STATE_HOME/wheelkiln``: bench results, and the
    builder lock that keeps them honest (its twin under ``kiln_home()`` guards the trees).
    """
    if home := os.environ.get("KILN_STATE_HOME"):
        return Path(home).expanduser().resolve()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return (Path(state).expanduser() / "wheelkiln").resolve()


def envs_dir() -> Path:
    """Build environments. Resolved: an environment's path reaches the compile command
    lines (its include directories), so an envs directory that is a symlink must give
    every job that uses it the same path."""
    return (kiln_home() / "envs").resolve()


ENVS_VIEW = ".envs"


def envs_view(workdir: Path) -> Path:
    """Where builds in *workdir* see the build environments (links to ``envs_dir()``):
    inside the compiler cache's base directory, so an environment's path is written
    relative to the compile and is the same in every home
    (:meth:`wheelkiln.builder.environment.BuildEnvironment.seen_from`). A dot name: no
    job directory (a cell id) is spelled so."""
    return workdir / ENVS_VIEW


CUDA_VIEWS = ".cuda"


def cuda_views(workdir: Path) -> Path:
    """Where builds in *workdir* find the CUDA toolkit views around kiln's nvcc front
    (:func:`wheelkiln.builder.toolchain.cuda_toolkit_view`): inside the compiler cache's
    base directory, as :func:`envs_view` is, for the same reason."""
    return workdir / CUDA_VIEWS


def smoke_envs_dir() -> Path:
    """Smoke-test venvs: the build interpreter plus a wheel's runtime requirements."""
    return kiln_home() / "smoke-envs"


def default_cache_dir(backend: str) -> Path:
    return kiln_home() / backend


def resolve_workdir(chosen: Path | None = None) -> Path:
    """Where job trees are built: *chosen* (``--workdir``), else ``$KILN_HOME/work``;
    resolved, because job directories and the wrapper's settings hold it absolute, and
    with ``~`` expanded, as :func:`wheelkiln.output_paths.check_output_dir` checked it."""
    return (chosen.expanduser() if chosen else kiln_home() / "work").resolve()


def sources_dir() -> Path:
    return kiln_home() / "sources"


def wheel_cache_dir() -> Path:
    return kiln_home() / "wheels"
