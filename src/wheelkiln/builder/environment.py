"""PEP 517 build environments that wheelkiln makes itself, at stable paths.

pip's isolated environments live under a random ``pip-build-env-*`` path. That path
leaks into ``-I`` flags and into preprocessed output, so every build misses the cache
(NVIDIA/cuda-python #2220 measured 0% preprocessor-mode hits). wheelkiln instead keeps
one environment per (interpreter, requirements) under ``$KILN_HOME/envs/<key>`` and
builds without pip's isolation. Deleting that directory is what "frozen" means.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelkiln import run
from wheelkiln.errors import BuildError, RecipeError, ToolNotFoundError

DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"
DEFAULT_REQUIRES = ("setuptools>=40.8.0",)


@dataclass(frozen=True)
class BuildSystem:
    """A source tree's ``[build-system]`` table."""

    requires: tuple[str, ...]
    backend: str
    backend_path: tuple[str, ...]

    @property
    def kind(self) -> str:
        """'cmake', 'meson' or 'setuptools': which launcher variables the build reads."""
        if self.backend.startswith(("scikit_build_core", "py_build_cmake", "cmake_build")):
            return "cmake"
        if self.backend.startswith("mesonpy"):
            return "meson"
        return "setuptools"


def read_build_system(tree: Path) -> BuildSystem:
    pyproject = tree / "pyproject.toml"
    if not pyproject.is_file():
        return BuildSystem(DEFAULT_REQUIRES, DEFAULT_BACKEND, ())
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{pyproject}: not valid TOML: {exc}.", hint="Fix the package.") from None
    table: dict[str, Any] = data.get("build-system", {})
    return BuildSystem(
        tuple(table.get("requires", DEFAULT_REQUIRES)),
        str(table.get("build-backend", DEFAULT_BACKEND)),
        tuple(table.get("backend-path", ())),
    )


@dataclass(frozen=True)
class BuildEnvironment:
    """A ready environment: its interpreter and what was installed into it."""

    path: Path
    requirements: tuple[str, ...]

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    def frozen(self) -> str:
        record = self.path / "kiln-env.json"
        return str(json.loads(record.read_text()).get("freeze", "")) if record.exists() else ""


def interpreter_for(python_version: str) -> str:
    """The real interpreter for a cell's python (never the pyenv shim)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == python_version:
        base = getattr(sys, "_base_executable", sys.executable)
        return os.path.realpath(base)
    found = shutil.which(f"python{python_version}")
    if found is None:
        raise ToolNotFoundError(
            f"No python{python_version} interpreter found on PATH.",
            hint=f"Install Python {python_version}, or pick a cell with --cell python=...",
        )
    return os.path.realpath(found)


def environment_key(interpreter: str, requirements: Sequence[str]) -> str:
    """Key the environment by the interpreter and the sorted requirement set."""
    version = run.run([interpreter, "-c", "import sys;print(sys.version)"]).output.strip()
    blob = json.dumps(
        {"interpreter": interpreter, "version": version, "requires": sorted(set(requirements))}
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _pip_install(python: Path, requirements: Sequence[str], env: Mapping[str, str]) -> None:
    if not requirements:
        return
    run.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", *requirements],
        env=env,
        what="Installing build requirements",
    )


def _hook_requirements(
    env_python: Path,
    tree: Path,
    system: BuildSystem,
    config_settings: Mapping[str, str],
    env: Mapping[str, str],
) -> list[str]:
    """The backend's dynamic requirements (``get_requires_for_build_wheel``)."""
    from pyproject_hooks import BuildBackendHookCaller

    def runner(
        cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
    ) -> None:
        run.run(list(cmd), cwd=cwd, env={**env, **(extra_environ or {})}, what="Build backend")

    caller = BuildBackendHookCaller(
        str(tree),
        system.backend,
        backend_path=list(system.backend_path) or None,
        python_executable=str(env_python),
        runner=runner,
    )
    return list(caller.get_requires_for_build_wheel(dict(config_settings)))


def ensure_environment(
    tree: Path,
    python_version: str,
    extra_requires: Sequence[str],
    envs_root: Path,
    *,
    config_settings: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
) -> BuildEnvironment:
    """Create (once) or reuse the build environment for this tree and interpreter.

    Creation is locked so parallel shard jobs share one environment, and an environment
    counts as made only once its ``kiln-env.json`` record is written.
    """
    system = read_build_system(tree)
    requirements = (*system.requires, *extra_requires)
    interpreter = interpreter_for(python_version)
    key = environment_key(interpreter, requirements)
    envs_root.mkdir(parents=True, exist_ok=True)
    final = envs_root / key
    env = dict(base_env or os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    with (envs_root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "kiln-env.json").exists():
            return BuildEnvironment(final, requirements)
        # A venv's scripts embed its path, so it is made in place; the record written
        # last marks it complete, and a directory without one is a failed attempt.
        shutil.rmtree(final, ignore_errors=True)
        run.run([interpreter, "-m", "venv", str(final)], env=env, what="Creating a build env")
        python = final / "bin" / "python"
        try:
            _pip_install(python, requirements, env)
            dynamic = _hook_requirements(python, tree, system, config_settings or {}, env)
            missing = [req for req in dynamic if req not in requirements]
            _pip_install(python, missing, env)
            freeze = run.run([str(python), "-m", "pip", "freeze"], env=env).output
        except BuildError:
            shutil.rmtree(final, ignore_errors=True)
            raise
        record = {
            "interpreter": interpreter,
            "requires": list(requirements),
            "dynamic": dynamic,
            "freeze": freeze,
        }
        (final / "kiln-env.json").write_text(json.dumps(record, indent=2))
        return BuildEnvironment(final, requirements)
