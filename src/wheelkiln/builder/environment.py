"""PEP 517 build environments that wheelkiln makes itself, at stable paths.

pip's isolated environments live under a random ``pip-build-env-*`` path. That path
leaks into ``-I`` flags and into preprocessed output, so every build misses the cache
(NVIDIA/cuda-python #2220 measured 0% preprocessor-mode hits). wheelkiln instead keeps
one environment per resolution under ``$KILN_HOME/envs/<key>`` and builds without
pip's isolation. Deleting that directory is what "frozen" means.

**One key, one environment.** The key is a digest of the interpreter (implementation,
``sys.version``, machine) and of the *resolved lock*: every distribution the
environment holds, ``name==version``, the backend's dynamic requirements
(``get_requires_for_build_wheel``) resolved in. An environment's distributions never
change after it is made (only bytecode is added, below), and nothing but its lock is in
it (no seeded pip or setuptools), so two environments with one key hold the same
distributions. The key holds no path, so it is
the same across machines and runs wherever the resolution is.

**uv where available** (PyPI ``uv``, a dependency of wheelkiln): one ``uv pip install``
resolves and installs into a *relocatable* venv beside the environments, its lock is
read from the installed metadata as ``uv pip freeze`` writes it (:func:`installed_lock`,
freeze itself where the metadata cannot say), and the venv moves to its key (or is dropped when that
environment is made already). That costs what plain uv costs (``benchmarks/bench_env.py``).
Without uv, or with ``KILN_INSTALLER=pip``: pip resolves first (``--dry-run --report``),
since its venvs cannot move, and installs the lock with ``--no-deps`` into a venv made
without pip at its key (``pip --python`` from a venv of its own).

**The backend's dynamic requirements, asked once.** The first build of a request asks
the backend's ``get_requires_for_build_wheel`` in its own process, just before
``build_wheel`` (:mod:`wheelkiln.builder.ask_then_build`), where the backend is imported
for the build anyway: asked in a process of its own, it cost 0.2-0.4 s of an
environment's 0.3-0.8 s, mostly that import. Where the backend asks for something the
lock lacks, the build stops before ``build_wheel``, the whole set is installed again
into a new venv, which moves to the key of its own lock (:func:`settle_dynamic`), and the
build starts again there. The first environment stays: it holds exactly its lock, so its
key still means it. The answer is kept with the request's resolution, so no later build
asks. Where the build runs the recipe's frontend as a process (``KILN_FRONTEND=process``),
pip or build asks nothing without isolation, so the backend is asked in a process of its
own while the environment is made, as before.

**Bytecode, compiled beside the build.** Every process a build starts in the environment
(the frontend, the backend, meson, Cython, each custom command) imports its modules from
there. Without ``__pycache__`` (uv installs none by default, and under
``PYTHONDONTWRITEBYTECODE`` none is ever written) each start compiles them all again:
0.9 s of a 1.6 s ``pip wheel`` start and about half of meson's setup, measured in a hot
demo-kernels and demo-cython build. Compiling all of an environment took longer than
installing it (the cmake set: 1.0 s to install, 1.1 s more to compile, warm uv cache), so
it is not all on the way to a usable environment: once an environment is at its key, the
backend's own top-level package is compiled on every core (:func:`compile_backend`: the
hook imports it, and would compile it in memory otherwise), and a thread of the process
that needs the environment compiles the rest after the hook, in one process at a lower
priority, while the build runs (:func:`compile_later`); :func:`finish_bytecode` waits
for it at the end of the build. Both first link in what an earlier environment
compiled of the same distributions (:mod:`wheelkiln.builder.bytecode_store`), and the
full compile keeps what it made there. ``py_compile`` writes each
``.pyc`` to a temporary name and renames it, so a process importing from the environment
meanwhile finds either no ``.pyc`` (and compiles that module in memory, as it would
without) or a whole one; Python checks each ``.pyc`` against its source's size and mtime
(``timestamp`` pycs, whatever ``SOURCE_DATE_EPOCH`` says), and the sources never change.
:data:`BYTECODE_MARKER` is written when every module was compiled; an environment without
it (its compile was killed) is compiled again by the next process that uses it. One
process at a time compiles an environment (a lock beside it); the others go on without
waiting. Nothing but ``.pyc`` files and the marker is added to an environment once it is
at its key.

**Resolving once.** Resolving asks the index, too much for every hot build, so which
environment a request (the interpreter, the requested requirements, the tree's build
configuration, the installer) resolved to is kept beside the environments in
``resolved/``. A request is resolved again when that directory is emptied: deleting
``$KILN_HOME/envs`` (the frozen scenario) resolves and installs anew.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import stat
import sys
import threading
import tomllib
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

from wheelkiln import holds, run
from wheelkiln.builder import bytecode_store
from wheelkiln.builder.pip_config import (
    fingerprint as index_fingerprint,
)
from wheelkiln.builder.pip_config import (
    read_pip_settings,
    uv_environment,
    uv_install_arguments,
)
from wheelkiln.builder.requires_python import MOST_BYTES, small_file
from wheelkiln.errors import (
    BuildError,
    KilnError,
    RecipeError,
    ToolNotFoundError,
    UsageError,
)

if TYPE_CHECKING:
    from pyproject_hooks import BuildBackendHookCaller

DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"
DEFAULT_REQUIRES = ("setuptools>=40.8.0",)
INSTALLER_VARIABLE = "KILN_INSTALLER"
"""``uv`` (the default where uv is found) or ``pip``: which tool makes environments."""
BUILD_CONFIG_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
"""What a backend's dynamic requirements are read from, as far as kiln can tell."""
ENV_LAYOUT = 2
"""What an environment holds besides its lock, in its key: 2 = every module compiled to
bytecode (1, before: none). Since the compile moved beside the build, an environment holds
the same once :data:`BYTECODE_MARKER` is in it, so the layout stayed 2."""
BYTECODE_MARKER = "kiln-bytecode"
"""The file in an environment that says every module in it was compiled."""
LAUNCHERS_MARKER = "kiln-launchers"
"""The file in an environment that says its scripts start the interpreter beside them
as they are called (:func:`launch_where_called`)."""
_SH = b"#!/bin/sh\n"
_RESOLVING_LAUNCHER = b"'''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")\"/'python' \"$0\" \"$@\"\n"
_CALLED_LAUNCHER = b"'''exec' \"$(dirname -- \"$0\")\"/'python' \"$0\" \"$@\"\n"
_END_OF_LAUNCHER = b"' '''\n"


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
    """The ``[build-system]`` table of the package in *tree* (PEP 518 and 517), the
    defaults pip uses where there is no ``pyproject.toml`` or no table in it.

    The package is untrusted and this runs before anything is built: the file is read
    only where it is a regular file of at most
    :data:`~wheelkiln.builder.requires_python.MOST_BYTES`, and every way it can be
    wrong (not UTF-8, not TOML as Python reads it, a key of the wrong type) is a
    :class:`RecipeError` naming the file and the key. A ``requires`` string is refused
    rather than read as a list of one-letter requirements.
    """
    pyproject = tree / "pyproject.toml"
    if not os.path.lexists(pyproject):
        return BuildSystem(DEFAULT_REQUIRES, DEFAULT_BACKEND, ())
    data = small_file(pyproject)
    if data is None:
        raise RecipeError(
            f"{pyproject}: not read: it is no regular file of at most "
            f"{MOST_BYTES // 2**20} MiB.",
            hint="Fix the package: a pyproject.toml is a page of TOML.",
        )
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RecipeError(
            f"{pyproject}: not UTF-8 text (byte {exc.start}).", hint="Fix the package."
        ) from None
    except RecursionError:
        raise RecipeError(
            f"{pyproject}: not valid TOML: nested too deeply to read.", hint="Fix the package."
        ) from None
    except ValueError as exc:  # TOMLDecodeError, and an integer too long to convert
        reason = str(exc).split(";")[0]  # not Python's advice to raise its own limit
        raise RecipeError(
            f"{pyproject}: not valid TOML: {reason}.", hint="Fix the package."
        ) from None
    table = document.get("build-system", {})
    if not isinstance(table, dict):
        _wrong_key(pyproject, "[build-system]", "a table", table)
    requires = table.get("requires", list(DEFAULT_REQUIRES))
    backend = table.get("build-backend", DEFAULT_BACKEND)
    backend_path = table.get("backend-path", [])
    if not _strings(requires):
        _wrong_key(pyproject, "[build-system] requires", "a list of strings", requires)
    if not isinstance(backend, str):
        _wrong_key(pyproject, "[build-system] build-backend", "a string", backend)
    if not _strings(backend_path):
        _wrong_key(pyproject, "[build-system] backend-path", "a list of strings", backend_path)
    return BuildSystem(tuple(requires), backend, tuple(backend_path))


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


_TOML_KINDS = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
               list: "an array", dict: "a table"}  # fmt: skip


_EXAMPLES = {
    "[build-system]": 'a [build-system] line with requires = ["setuptools>=64"] under it',
    "[build-system] requires": 'requires = ["setuptools>=64"]',
    "[build-system] build-backend": 'build-backend = "setuptools.build_meta"',
    "[build-system] backend-path": 'backend-path = ["."]',
}


def _wrong_key(pyproject: Path, key: str, wanted: str, value: object) -> NoReturn:
    """Refuse *key* of *pyproject*, which holds *value* where it must hold *wanted*."""
    if isinstance(value, list) and wanted == "a list of strings":
        kinds = {_TOML_KINDS.get(type(item), "a date or time") for item in value}
        found = "an array holding " + " and ".join(sorted(kinds - {"a string"}))
    else:
        found = _TOML_KINDS.get(type(value), "a date or time")
    raise RecipeError(
        f"{pyproject}: {key} must be {wanted}, not {found}.",
        hint=f"Fix the package's pyproject.toml, e.g. {_EXAMPLES[key]}.",
    )


def frontend_requires(frontend: str, mode: str) -> tuple[str, ...]:
    """What the frontend itself needs in the environment. Where kiln calls the backend's
    hooks itself (*mode* ``hook``, :func:`wheelkiln.builder.frontend.frontend_mode`),
    nothing, as in pip's own isolated environments; where it runs the recipe's frontend
    in the environment (``process``), ``pip wheel`` needs pip and ``python -m build``
    needs build (uv's venvs hold nothing of their own). pip alone was 441 modules to
    install and compile into every environment."""
    if mode == "hook":
        return ()
    return ("build",) if frontend == "build" else ("pip",)


@dataclass(frozen=True)
class BuildEnvironment:
    """A ready environment: its interpreter and what was installed into it."""

    path: Path
    requirements: tuple[str, ...]
    request: str = ""
    """The request's key (``envs/resolved/<request>.json``)."""
    ask_backend: bool = False
    """The backend's dynamic requirements are not asked yet: the build asks them in its
    own process (:func:`wheelkiln.builder.frontend.build_wheel`, *ask_first*) and hands
    the answer to :func:`settle_dynamic`."""

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    def frozen(self) -> str:
        """The lock the environment was installed from (``name==version`` lines)."""
        record = self.path / "kiln-env.json"
        if not record.exists():
            return ""
        try:
            document = holds.read_json(record, MOST_BYTES)
            freeze = document.get("freeze", "") if isinstance(document, dict) else None
        except (OSError, ValueError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise BuildError(
                f"{record}: the build environment's record cannot be read ({detail}), so "
                "what it holds is unknown.",
                hint=f"Remove {self.path} and build again: kiln makes the environment anew.",
            ) from None
        if not isinstance(freeze, str):
            raise BuildError(
                f"{record}: no freeze text in it, so what the environment holds is unknown.",
                hint=f"Remove {self.path} and build again: kiln makes the environment anew.",
            )
        return freeze

    def seen_from(self, views: Path) -> BuildEnvironment:
        """This environment as a build sees it: ``views/<key>``, a symlink to it.

        The environment's path reaches the compile command lines (``-I`` to its headers,
        pybind11's and torch's include directories, setuptools' ``<env>/include``) and the
        dependency files the compiler cache keeps. Under ``$KILN_HOME/envs`` that path
        names the home, so builders whose homes differ missed each other's entries.
        *views* lies inside the cache's base directory (the workdir), so the cache writes
        these paths relative to the compile's directory, ``../../.envs/<key>/...`` from
        any job tree, in every home and every workdir. The key stays in the path: two
        environments with different locks are two different include paths.

        Python keeps the path it was started by (a venv's ``sys.prefix`` is its
        unresolved directory), so what the build asks its interpreter for (``sysconfig``,
        ``pybind11.get_include()``, ``torch.utils.cpp_extension.include_paths()``)
        answers under the view. The link is made anew when it points elsewhere (another
        home's environment of the same key holds the same lock), by an atomic rename, as
        parallel shard jobs share the workdir.
        """
        view = views / self.path.name
        try:
            if view.readlink() == self.path:
                return replace(self, path=view)
        except OSError:
            pass  # absent, or not a link: (re)made below
        views.mkdir(parents=True, exist_ok=True)
        staged = views / f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.link"
        staged.unlink(missing_ok=True)
        staged.symlink_to(self.path, target_is_directory=True)
        staged.replace(view)
        return replace(self, path=view)


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


@functools.cache
def interpreter_identity(interpreter: str) -> str:
    """What an environment's content depends on in its interpreter, without its path:
    implementation, ``sys.version`` (release, build date, compiler) and machine."""
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    if interpreter == base:  # this interpreter: no process to start on every build
        return " ".join(f"{sys.implementation.name} {sys.version} {platform.machine()}".split())
    code = "import platform,sys;print(sys.implementation.name,sys.version,platform.machine())"
    return " ".join(run.run([interpreter, "-c", code]).output.split())


def interpreter_version(python_version: str) -> str:
    """The full version of a cell's interpreter (``3.11.7``), as its ``sys.version`` opens."""
    return interpreter_identity(interpreter_for(python_version)).split()[1]


def environment_key(interpreter: str, requirements: Sequence[str]) -> str:
    """Key a venv by the interpreter and the sorted *requested* set (smoke-test venvs)."""
    version = run.run([interpreter, "-c", "import sys;print(sys.version)"]).output.strip()
    blob = json.dumps(
        {"interpreter": interpreter, "version": version, "requires": sorted(set(requirements))}
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# -- installers ---------------------------------------------------------------------------


def find_uv() -> str | None:
    """uv's binary: the ``uv`` package's, next to this interpreter, or on PATH."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    beside = Path(sys.executable).parent / "uv"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


@dataclass(frozen=True)
class Installer:
    """The tool that resolves, makes venvs and installs: uv, or venv plus pip."""

    name: Literal["uv", "pip"]
    uv: str | None = None
    index_args: tuple[str, ...] = ()
    """uv's options for pip's indexes, links and constraints (:mod:`.pip_config`)."""
    index_env: tuple[tuple[str, str], ...] = ()
    index_key: str = ""
    """What those options resolve with: the options and the constraints' contents."""

    def describe(self) -> str:
        return "pip" if self.uv is None else _uv_version(self.uv)


@functools.cache
def _uv_version(uv: str) -> str:
    """``uv --version``, asked once per process (a job) for the environments' records."""
    return run.run([uv, "--version"]).output.strip()


def choose_installer(environ: Mapping[str, str] | None = None) -> Installer:
    """uv where it is found, unless ``KILN_INSTALLER=pip``; ``KILN_INSTALLER=uv`` without
    uv is an error rather than a silent fallback."""
    wanted = (environ if environ is not None else os.environ).get(INSTALLER_VARIABLE, "")
    if wanted not in ("", "uv", "pip"):
        raise UsageError(
            f"{INSTALLER_VARIABLE}={wanted!r} is not an installer.",
            hint=f"Set {INSTALLER_VARIABLE} to 'uv' or 'pip', or unset it (uv where found).",
        )
    if wanted == "pip":
        return Installer("pip")
    uv = find_uv()
    if uv is None:
        if wanted == "uv":
            raise ToolNotFoundError(
                f"{INSTALLER_VARIABLE}=uv, but no uv was found (the uv package, next to "
                f"{sys.executable}, or on PATH).",
                hint="Install wheelkiln with pip (it depends on uv), or unset KILN_INSTALLER.",
            )
        return Installer("pip")
    env = environ if environ is not None else os.environ
    settings = read_pip_settings(env)
    args = uv_install_arguments(settings, env)
    return Installer(
        "uv",
        uv,
        index_args=tuple(args),
        index_env=tuple(sorted(uv_environment(settings, env).items())),
        index_key=index_fingerprint(args, settings) if args else "",
    )


def normalize_lock(lines: Sequence[str]) -> str:
    """One requirement per line, sorted, comments and options dropped: the same
    resolution reads the same whichever tool wrote it."""
    from packaging.utils import canonicalize_name

    kept: set[str] = set()
    for raw in lines:
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        name, sep, rest = line.partition("==")
        kept.add(f"{canonicalize_name(name)}=={rest.strip()}" if sep else line)
    return "".join(f"{line}\n" for line in sorted(kept))


def installed_lock(environment: Path) -> str | None:
    """The lock *environment* holds, read from its distributions' metadata as ``uv pip
    freeze`` reads it (each ``.dist-info``'s name and version), without starting uv.
    ``None`` where that is not all there is to say: a distribution installed from a URL or
    a path (``direct_url.json``; freeze writes ``name @ url``), or metadata without a
    name or a standard version."""
    from email.parser import HeaderParser

    from packaging.version import InvalidVersion, Version

    lines = []
    for info in environment.glob("lib/python*/site-packages/*.dist-info"):
        if (info / "direct_url.json").exists():
            return None
        with (info / "METADATA").open(encoding="utf-8", errors="replace") as metadata:
            headers = HeaderParser().parse(metadata)
        name, version = headers.get("Name"), headers.get("Version")
        if not name or not version:
            return None
        try:
            lines.append(f"{name.strip()}=={Version(version.strip())}")
        except InvalidVersion:
            return None
    return normalize_lock(lines)


def _uv_env(env: Mapping[str, str], installer: Installer) -> dict[str, str]:
    # uv reads VIRTUAL_ENV/CONDA_PREFIX to pick a target: every call names --python instead.
    clean = {k: v for k, v in env.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    clean.update(installer.index_env)
    clean.setdefault("UV_NO_PROGRESS", "1")
    # pip trusts the platform's certificate store (truststore); uv by default only its
    # bundled roots, so behind a TLS-inspecting proxy pip installs and uv cannot. Same
    # trust as pip, unless the caller chose otherwise.
    clean.setdefault("UV_SYSTEM_CERTS", "1")
    clean.setdefault("UV_NATIVE_TLS", "1")  # its name before uv 0.9
    return clean


def _pip_tool(interpreter: str, envs_root: Path, env: Mapping[str, str]) -> Path:
    """A pip to resolve and install with (pip's fallback): a venv of *interpreter*,
    made once, whose pip installs into other environments with ``--python``."""
    tool = envs_root / f".pip-{hashlib.sha256(interpreter.encode()).hexdigest()[:12]}"
    python = tool / "bin" / "python"
    with (envs_root / f"{tool.name}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (tool / "kiln-tool").is_file():
            shutil.rmtree(tool, ignore_errors=True)
            run.run([interpreter, "-m", "venv", str(tool)], env=env, what="Creating pip's venv")
            (tool / "kiln-tool").write_text("pip\n")
    return python


def _resolve_with_pip(
    interpreter: str,
    requirements: Sequence[str],
    scratch: Path,
    env: Mapping[str, str],
    *,
    envs_root: Path,
) -> str:
    """The normalized lock of *requirements* for *interpreter*, by pip's resolver
    (``install --dry-run --report``; asks the index)."""
    scratch.mkdir(parents=True, exist_ok=True)
    wanted = scratch / "requested.txt"
    wanted.write_text("".join(f"{req}\n" for req in requirements))
    report = scratch / "report.json"
    pip = _pip_tool(interpreter, envs_root, env)
    run.run(
        [str(pip), "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
         "--report", str(report), "-r", str(wanted)],
        env=env, what="Resolving build requirements (pip)",
    )  # fmt: skip
    chosen = json.loads(report.read_text())["install"]
    return normalize_lock(
        [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in chosen]
    )


def _install(
    installer: Installer, interpreter: str, final: Path, lock: str, env: Mapping[str, str]
) -> None:
    """Make the venv at *final* and install exactly *lock* into it."""
    lock_file = final / "kiln-lock.txt"
    python = final / "bin" / "python"
    if installer.uv is not None:
        uv_env = _uv_env(env, installer)
        run.run(
            [installer.uv, "venv", "--quiet", "--python", interpreter, str(final)],
            cwd=final.parent, env=uv_env, what="Creating a build env (uv)",
        )  # fmt: skip
        lock_file.write_text(lock)
        if lock:
            run.run(
                [installer.uv, "pip", "install", "--quiet", "--python", str(python),
                 *installer.index_args, "--no-deps", "-r", str(lock_file)],
                cwd=final.parent, env=uv_env, what="Installing build requirements (uv)",
            )  # fmt: skip
        return
    run.run(
        [interpreter, "-m", "venv", "--without-pip", str(final)],
        env=env,
        what="Creating a build env",
    )
    lock_file.write_text(lock)
    if lock:
        pip = _pip_tool(interpreter, final.parent, env)
        run.run(
            [str(pip), "-m", "pip", "--python", str(python), "install", "--quiet",
             "--disable-pip-version-check", "--no-compile", "--no-deps", "-r",
             str(lock_file)],
            env=env, what="Installing build requirements (pip)",
        )  # fmt: skip


def _hook_requirements(
    env_python: Path,
    tree: Path,
    system: BuildSystem,
    config_settings: Mapping[str, str],
    env: Mapping[str, str],
) -> list[str]:
    """The backend's dynamic requirements (``get_requires_for_build_wheel``)."""
    from pyproject_hooks import BackendUnavailable

    def runner(
        cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
    ) -> None:
        run.run(list(cmd), cwd=cwd, env={**env, **(extra_environ or {})}, what="Build backend")

    caller = backend_hook_caller(tree, system, env_python, runner)
    # pyproject_hooks re-raises the backend's warnings in this process (torch warns at
    # import that numpy is missing): under an "error" filter (-W error, PYTHONWARNINGS,
    # a test suite's) that failed the build with a traceback. They are the backend's
    # words, shown as such.
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            answer = caller.get_requires_for_build_wheel(dict(config_settings))
        except BackendUnavailable as error:
            raise BuildError(backend_failure(system.backend, error).rstrip()) from None
    for warning in warned:
        print(
            f"kiln: the build backend {system.backend!r} warned "
            f"(get_requires_for_build_wheel): {warning.message}",
            file=sys.stderr,
        )
    return checked_dynamic(answer, system.backend)


def checked_dynamic(answer: object, backend: str) -> list[str]:
    """The backend's ``get_requires_for_build_wheel`` answer, each a PEP 508 requirement:
    it becomes a line of the file the installer reads, where an option (``--index-url``)
    or a second line would change what is installed from where."""
    from packaging.requirements import InvalidRequirement, Requirement

    if not isinstance(answer, list):
        raise BuildError(
            f"The build backend {backend!r} answered get_requires_for_build_wheel with "
            f"{answer!r}, not a list of requirements.",
            hint="Fix the backend, or pin its version in build-system.requires.",
        )
    for requirement in answer:
        try:
            if not isinstance(requirement, str) or "\n" in requirement:
                raise InvalidRequirement
            Requirement(requirement)
        except InvalidRequirement:
            raise BuildError(
                f"The build backend {backend!r} asked for {requirement!r} "
                "(get_requires_for_build_wheel), which is not a requirement (PEP 508).",
                hint="Fix the backend, or pin its version in build-system.requires.",
            ) from None
    return list(answer)


def backend_hook_caller(
    tree: Path, system: BuildSystem, python: Path, runner: Callable[..., None]
) -> BuildBackendHookCaller:
    """The caller of *system*'s backend hooks for *tree*, run by *python* through
    *runner* (which runs the hook's process)."""
    from pyproject_hooks import BuildBackendHookCaller

    return BuildBackendHookCaller(
        str(tree),
        system.backend,
        backend_path=list(system.backend_path) or None,
        python_executable=str(python),
        runner=runner,
    )


def backend_failure(backend: str, error: Exception) -> str:
    """What a build says when its backend could not be run: the backend process's
    traceback (the import that failed) and what to check."""
    trace = str(getattr(error, "traceback", "") or "")
    return (
        f"{trace.rstrip()}\nkiln: the build backend {backend!r} could not be run "
        f"({type(error).__name__}): check build-system.build-backend and "
        "backend-path in pyproject.toml, and the build requirements.\n"
    ).lstrip()


def _satisfied(requirement: str, lock: str) -> bool:
    """Whether *lock* already pins a version *requirement* accepts (markers aside: a
    requirement with one is resolved again, and the same lock gives the same key)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        parsed = Requirement(requirement)
    except InvalidRequirement:
        return False
    if parsed.marker is not None or parsed.url:
        return False
    name = canonicalize_name(parsed.name)
    for line in lock.splitlines():
        pinned, sep, version = line.partition("==")
        if sep and pinned == name:
            return parsed.specifier.contains(version, prereleases=True)
    return False


def lock_key(identity: str, lock: str) -> str:
    """The environment key: the interpreter's identity, the lock and the layout, no path."""
    blob = json.dumps({"python": identity, "lock": lock, "layout": ENV_LAYOUT}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _request_key(
    identity: str,
    requested: Sequence[str],
    tree: Path,
    config_settings: Mapping[str, str],
    installer: Installer,
) -> str:
    """What a lock is resolved from: the interpreter, the requested set (sorted, so its
    order does not matter), the files the backend's hook reads, the installer (uv and
    pip can resolve differently) and pip's indexes and constraints as uv is given them."""
    config = hashlib.sha256()
    for name in BUILD_CONFIG_FILES:
        path = tree / name
        config.update(f"{name}\0".encode())
        config.update(path.read_bytes() if path.is_file() else b"\0absent")
    blob = json.dumps(
        {
            "python": identity,
            "requested": sorted(set(requested)),
            "config": config.hexdigest(),
            "config_settings": dict(sorted(config_settings.items())),
            "installer": installer.name,
            "indexes": installer.index_key,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Resolution:
    """A request's lock, kept in ``envs/resolved/<request>.json``."""

    key: str
    lock: str
    dynamic: tuple[str, ...] | None
    """The backend's dynamic requirements; ``None`` until a build has asked them."""


def _read_resolution(path: Path) -> Resolution | None:
    try:
        data = json.loads(path.read_text())
        dynamic = None if data["dynamic"] is None else tuple(str(r) for r in data["dynamic"])
        return Resolution(str(data["key"]), str(data["lock"]), dynamic)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or damaged: resolved again


def _write_resolution(path: Path, resolution: Resolution) -> None:
    staged = path.with_suffix(".tmp")
    dynamic = None if resolution.dynamic is None else list(resolution.dynamic)
    staged.write_text(
        json.dumps({"key": resolution.key, "lock": resolution.lock, "dynamic": dynamic}, indent=2)
    )
    staged.replace(path)


def launch_where_called(environment: Path) -> None:
    """Make each script in *environment*'s ``bin`` start the interpreter beside the
    script's path as it was called, not beside the file that path resolves to.

    Builds see an environment through a link inside the job's directory
    (:func:`wheelkiln.paths.envs_view`), so the paths a build gets from it are inside
    ccache's base directory, made relative, and the same on every builder. uv's
    relocatable scripts start ``$(realpath $0)``'s interpreter, and pip's name the
    environment's own path: either way a script run through the view (``meson``,
    ``pybind11-config``, ``numpy-config``) ran Python from ``$KILN_HOME/envs/<key>``, and
    what it printed (pybind11's include directory) reached the compile line with that
    home in it. Measured: contourpy (meson, ``dependency('pybind11')``), each job with
    its own ``KILN_HOME``, missed 14 of 14 TUs in the link job.

    Each script is replaced whole (written beside it, then renamed), so a process
    running it meanwhile reads the old one or the new one; :data:`LAUNCHERS_MARKER` is
    written last. Links and anything else in ``bin`` are left as they are."""
    marker = environment / LAUNCHERS_MARKER
    if marker.exists():
        return
    bin_dir = environment / "bin"
    names = ["python", "python3", *(p.name for p in bin_dir.glob("python3.*"))]
    own_pythons = {f"#!{bin_dir / name}".encode() for name in names}
    for script in sorted(bin_dir.iterdir()):
        try:
            with os.fdopen(holds.open_regular(script), "rb") as handle:
                head = handle.read(4096)
                first = head.partition(b"\n")[0]
                if head.startswith(_SH + _RESOLVING_LAUNCHER):
                    start, skip = _SH + _CALLED_LAUNCHER, len(_SH + _RESOLVING_LAUNCHER)
                elif first in own_pythons:
                    start, skip = _SH + _CALLED_LAUNCHER + _END_OF_LAUNCHER, len(first) + 1
                else:
                    continue
                handle.seek(skip)
                body = handle.read()
                mode = os.fstat(handle.fileno()).st_mode
        except OSError:
            continue  # a link, a fifo, gone: not a script kiln rewrites
        staged = script.with_name(f".{script.name}.kiln")
        staged.write_bytes(start + body)
        staged.chmod(stat.S_IMODE(mode))
        staged.replace(script)
    marker.write_text("scripts start the interpreter beside the path they are called by\n")


def _is_complete(final: Path) -> bool:
    # The record is written last; the interpreter a venv links to may have gone.
    return (final / "kiln-env.json").is_file() and (final / "bin" / "python").exists()


def _write_record(
    final: Path, installer: Installer, interpreter: str, identity: str, lock: str,
    requested: Sequence[str],
) -> None:  # fmt: skip
    record = {
        "interpreter": interpreter,
        "python": identity,
        "installer": installer.describe(),
        "requires": list(requested),
        "freeze": lock,
    }
    (final / "kiln-env.json").write_text(json.dumps(record, indent=2))


def _make_environment(
    installer: Installer,
    interpreter: str,
    identity: str,
    lock: str,
    envs_root: Path,
    env: Mapping[str, str],
    requested: Sequence[str],
) -> Path:
    """The environment of *lock*, made once under its key's lock."""
    key = lock_key(identity, lock)
    final = envs_root / key
    holds.hold(envs_root, key)
    with (envs_root / f"{key}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if _is_complete(final):
            launch_where_called(final)  # made before kiln did this
            return final
        # A venv's scripts embed its path, so it is made in place; the record written
        # last marks it complete, and a directory without one is a failed attempt.
        shutil.rmtree(final, ignore_errors=True)
        try:
            _install(installer, interpreter, final, lock, env)
        except BuildError:
            shutil.rmtree(final, ignore_errors=True)
            raise
        launch_where_called(final)
        _write_record(final, installer, interpreter, identity, lock, requested)
        return final


def _adopt(
    staging: Path, installer: Installer, interpreter: str, identity: str, lock: str,
    envs_root: Path, requested: Sequence[str],
) -> Path:  # fmt: skip
    """Move a staged relocatable environment to its key, unless that one is made."""
    key = lock_key(identity, lock)
    final = envs_root / key
    holds.hold(envs_root, key)
    with (envs_root / f"{key}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if _is_complete(final):
            shutil.rmtree(staging, ignore_errors=True)
            launch_where_called(final)  # made before kiln did this
            return final
        shutil.rmtree(final, ignore_errors=True)
        (staging / "kiln-lock.txt").write_text(lock)
        launch_where_called(staging)
        staging.rename(final)
        _write_record(final, installer, interpreter, identity, lock, requested)
        return final


def _install_staged(
    installer: Installer,
    interpreter: str,
    requirements: Sequence[str],
    staging: Path,
    env: Mapping[str, str],
) -> str:
    """Resolve and install *requirements* in one uv pass into a new relocatable venv at
    *staging*, and return the lock it holds.

    uv's relocatable venvs start their scripts relative to themselves, so the venv can
    move to its key, which is known only once it is installed. This costs what plain
    ``uv venv`` plus ``uv pip install`` cost, where resolving first and installing the
    lock after asked the index twice.
    """
    assert installer.uv is not None
    uv = installer.uv
    uv_env = _uv_env(env, installer)
    python = staging / "bin" / "python"
    shutil.rmtree(staging, ignore_errors=True)
    run.run(
        [uv, "venv", "--quiet", "--relocatable", "--python", interpreter, str(staging)],
        cwd=staging.parent, env=uv_env, what="Creating a build env (uv)",
    )  # fmt: skip
    if requirements:
        wanted = staging / "kiln-requested.txt"
        wanted.write_text("".join(f"{req}\n" for req in requirements))
        run.run(
            [uv, "pip", "install", "--quiet", "--python", str(python),
             *installer.index_args, "-r", str(wanted)],
            cwd=staging.parent, env=uv_env, what="Installing build requirements (uv)",
        )  # fmt: skip
        wanted.unlink()
    lock = installed_lock(staging)
    if lock is not None:
        return lock
    frozen = run.run([uv, "pip", "freeze", "--quiet", "--python", str(python)],
                     cwd=staging.parent, env=uv_env).output  # fmt: skip
    return normalize_lock(frozen.splitlines())


@dataclass(frozen=True)
class _Request:
    """What one request resolves with, and where its memo and lock are."""

    key: str
    requested: tuple[str, ...]
    interpreter: str
    identity: str
    installer: Installer
    envs_root: Path
    env: Mapping[str, str]

    @property
    def memo(self) -> Path:
        return self.envs_root / "resolved" / f"{self.key}.json"

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """The request's lock: parallel jobs share one resolution and one environment."""
        return _flocked(self.envs_root / "resolved" / f"{self.key}.lock")

    def environment_of(self, lock: str) -> Path:
        """The environment of *lock*, at its key (made once)."""
        return _make_environment(
            self.installer, self.interpreter, self.identity, lock, self.envs_root, self.env,
            self.requested,
        )  # fmt: skip

    def make(self, requirements: Sequence[str]) -> tuple[str, Path]:
        """The lock *requirements* resolve to, and its environment at its key."""
        if self.installer.uv is None:
            # pip's venvs cannot move: resolve first (--dry-run --report), then make the
            # environment of that lock at its key.
            scratch = self.envs_root / "resolved" / f"{self.key}.work"
            shutil.rmtree(scratch, ignore_errors=True)
            try:
                lock = _resolve_with_pip(
                    self.interpreter, requirements, scratch, self.env, envs_root=self.envs_root
                )
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            return lock, self.environment_of(lock)
        staging = self.envs_root / f".staging-{self.key}"
        try:
            lock = _install_staged(
                self.installer, self.interpreter, requirements, staging, self.env
            )
            final = _adopt(
                staging, self.installer, self.interpreter, self.identity, lock, self.envs_root,
                self.requested,
            )  # fmt: skip
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return lock, final

    def settle(self, lock: str, final: Path, dynamic: Sequence[str]) -> tuple[str, Path]:
        """Record the backend's *dynamic* requirements, asked in *final* (of *lock*);
        where the lock lacks one, the whole set is installed again, so the resolver sees
        every requirement at once, into the environment of its own lock. *final* stays:
        it holds exactly its lock, so its key still means it."""
        if not all(_satisfied(req, lock) for req in dynamic):
            lock, final = self.make([*self.requested, *dynamic])
            compile_later(final, self.envs_root, self.env)
        _write_resolution(self.memo, Resolution(final.name, lock, tuple(dynamic)))
        return lock, final


@contextlib.contextmanager
def _flocked(path: Path) -> Iterator[None]:
    with path.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


# -- bytecode ------------------------------------------------------------------------------

_COMPILE_SCRIPT = """\
import compileall, os, py_compile, sys
index, count, niceness = map(int, sys.argv[1:4])
os.nice(niceness)
modules = sorted(
    os.path.join(folder, name)
    for top in sys.argv[4:]
    for folder, _, names in os.walk(top)
    for name in names
    if name.endswith(".py")
)
for module in modules[index::count]:
    compileall.compile_file(
        module, quiet=2, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP
    )
"""
"""Compiles slice *index* of *count* of the modules under the directories given, run by
the environment's own interpreter (``-I -S``: no site, no ``PYTHON*`` variables, so no
``PYTHONPYCACHEPREFIX`` either). ``compile_file`` skips a module whose ``.pyc`` is
current, and leaves a module that does not compile (a template named ``.py``) to fail at
import as it would without bytecode; only a killed or crashed run exits non-zero."""


def _compile(
    environment: Path,
    tops: Sequence[Path],
    env: Mapping[str, str],
    *,
    processes: int,
    niceness: int,
) -> bool:
    """Compile the modules under *tops* with *processes* processes at once; True when
    every process ran to its end."""
    argv = [str(environment / "bin" / "python"), "-I", "-S", "-c", _COMPILE_SCRIPT]
    tops_args = [str(top) for top in tops]
    codes: list[int] = []

    def one(index: int) -> None:
        done = run.run([*argv, str(index), str(processes), str(niceness), *tops_args],
                       env=env, check=False)  # fmt: skip
        codes.append(done.returncode)

    # Each thread starts its process and waits for it (run.py: the kernel ends a child
    # whose starting thread ends).
    threads = [threading.Thread(target=one, args=(index,)) for index in range(1, processes)]
    for thread in threads:
        thread.start()
    one(0)
    for thread in threads:
        thread.join()
    return len(codes) == processes and not any(codes)


def compile_backend(environment: Path, system: BuildSystem, env: Mapping[str, str]) -> None:
    """Compile the backend's top-level package in *environment* now, on every core: the
    hook and the build import it first (setuptools/ is most of what setuptools'
    ``get_requires_for_build_wheel`` imports). An in-tree backend (``backend-path``) is
    in the tree, not here; an environment marked compiled is left alone."""
    if (environment / BYTECODE_MARKER).is_file():
        return
    top = system.backend.split(":")[0].split(".")[0]
    packages = [
        site / top
        for site in environment.glob("lib/python*/site-packages")
        if (site / top).is_dir() and not system.backend_path
    ]
    if not packages:
        return
    store = bytecode_store.store_for(environment.parent)
    bytecode_store.seed(environment, store, [top])
    if not bytecode_store.compiled_already(environment, packages):
        _compile(environment, packages, env, processes=_cores(), niceness=0)


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_compiling: dict[Path, threading.Thread] = {}
_compiling_guard = threading.Lock()


def compile_bytecode(environment: Path, envs_root: Path, env: Mapping[str, str]) -> bool:
    """Compile every module in *environment* (at its key under *envs_root*) to bytecode
    and mark it, unless it is marked already or another process holds its compile lock.
    True when the environment is compiled."""
    marker = environment / BYTECODE_MARKER
    if marker.is_file():
        return True
    with (envs_root / f"{environment.name}.bytecode.lock").open("w") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another process compiles it; its marker says when it is done
        if marker.is_file():
            return True
        sites = sorted(environment.glob("lib/python*/site-packages"))
        store = bytecode_store.store_for(envs_root)
        bytecode_store.seed(environment, store)
        # One process, at a lower priority: it runs beside the build.
        if not _compile(environment, sites, env, processes=1, niceness=10):
            return False
        marker.write_text("every module compiled\n")
        bytecode_store.keep(environment, store)
        return True


def _compile_quietly(environment: Path, envs_root: Path, env: Mapping[str, str]) -> None:
    try:
        compile_bytecode(environment, envs_root, env)
    except (OSError, KilnError) as error:
        # The environment went (a frozen bench emptied envs/) or cannot run: the build
        # is not worse off than without bytecode, and the next process to use a
        # surviving environment compiles it.
        if run.VERBOSE:
            print(f"kiln: bytecode of {environment} not compiled: {error}", file=sys.stderr)


def compile_later(environment: Path, envs_root: Path, env: Mapping[str, str]) -> None:
    """Compile *environment*'s bytecode in a thread of this process, unless it is marked
    compiled or this process compiles it already (see the module's doc). The thread is
    not a daemon: a process that ends first waits for it."""
    if (environment / BYTECODE_MARKER).is_file():
        return
    with _compiling_guard:
        running = _compiling.get(environment)
        if running is not None and running.is_alive():
            return
        thread = threading.Thread(
            target=_compile_quietly,
            args=(environment, envs_root, dict(env)),
            name=f"kiln-bytecode-{environment.name}",
        )
        _compiling[environment] = thread
        thread.start()


def finish_bytecode() -> None:
    """Wait for the compiles this process started: at the end of a build, so it leaves
    its environment whole, and before environments are deleted."""
    with _compiling_guard:
        threads = list(_compiling.values())
        _compiling.clear()
    for thread in threads:
        thread.join()


def _clean_env(base_env: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(base_env if base_env is not None else os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def existing_environment(
    tree: Path,
    python_version: str,
    extra_requires: Sequence[str],
    envs_root: Path,
    *,
    config_settings: Mapping[str, str] | None = None,
) -> BuildEnvironment | None:
    """The environment :func:`ensure_environment` would return, if it is made and its
    request resolved; ``None`` otherwise. Resolves nothing and runs no hook."""
    system = read_build_system(tree)
    requested = (*system.requires, *extra_requires)
    interpreter = interpreter_for(python_version)
    identity = interpreter_identity(interpreter)
    request = _request_key(identity, requested, tree, config_settings or {}, choose_installer())
    resolution = _read_resolution(envs_root / "resolved" / f"{request}.json")
    if resolution is None:
        return None
    holds.hold(envs_root, resolution.key)
    if not _is_complete(envs_root / resolution.key):
        return None
    return BuildEnvironment(envs_root / resolution.key, requested)


def _request(
    python_version: str,
    requested: Sequence[str],
    envs_root: Path,
    base_env: Mapping[str, str] | None,
    key: Callable[[str, Installer], str],
) -> _Request:
    interpreter = interpreter_for(python_version)
    identity = interpreter_identity(interpreter)
    env = _clean_env(base_env)
    installer = choose_installer(env)
    (envs_root / "resolved").mkdir(parents=True, exist_ok=True)
    return _Request(
        key(identity, installer), tuple(requested), interpreter, identity, installer, envs_root,
        env,
    )  # fmt: skip


def ensure_environment(
    tree: Path,
    python_version: str,
    extra_requires: Sequence[str],
    envs_root: Path,
    *,
    config_settings: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    ask_in_build: bool = False,
) -> BuildEnvironment:
    """Create (once) or reuse the build environment for this tree and interpreter.

    Resolving and creating are locked, so parallel shard jobs share one resolution and
    one environment. A request resolved before reuses its lock (see the module's doc).
    The backend's dynamic requirements are asked here, in a process of their own, unless
    *ask_in_build*: then an environment whose request has not had them asked yet comes
    back with :attr:`BuildEnvironment.ask_backend`, and the build asks them in its own
    process and hands the answer to :func:`settle_dynamic`.
    """
    system = read_build_system(tree)
    settings = dict(config_settings or {})
    requested = (*system.requires, *extra_requires)
    request = _request(
        python_version,
        requested,
        envs_root,
        base_env,
        lambda identity, installer: _request_key(identity, requested, tree, settings, installer),
    )
    env = request.env
    with request.locked():
        resolution = _read_resolution(request.memo)
        if resolution is None:
            lock, final = request.make(request.requested)
            _write_resolution(request.memo, Resolution(final.name, lock, None))
        else:
            lock = resolution.lock
            final = request.environment_of(lock)
        asked = resolution is not None and resolution.dynamic is not None
        if ask_in_build or asked:
            compile_later(final, envs_root, env)
            return BuildEnvironment(final, request.requested, request.key, ask_backend=not asked)
        # In the environment at its key: it holds exactly its lock whatever the hook says,
        # so it is published already. Beside the hook, the rest of its bytecode compile
        # took the hook 0.43 -> 0.76 s on 2 cores at load 3: it compiles after.
        compile_backend(final, system, env)
        dynamic = _hook_requirements(final / "bin" / "python", tree, system, settings, env)
        compile_later(final, envs_root, env)
        lock, final = request.settle(lock, final, dynamic)
        return BuildEnvironment(final, request.requested, request.key)


def settle_dynamic(
    environment: BuildEnvironment,
    dynamic: Sequence[str],
    python_version: str,
    envs_root: Path,
    *,
    base_env: Mapping[str, str] | None = None,
) -> BuildEnvironment:
    """The environment of *environment*'s request once its backend asked for *dynamic*
    (in a build's process): *environment* itself where its lock holds them all, else the
    environment of the whole set. Recorded in the request's memo, so later builds ask
    nothing; where another job of the request recorded an answer first, that one holds."""
    request = _request(
        python_version, environment.requirements, envs_root, base_env, lambda *_: environment.request
    )
    with request.locked():
        resolution = _read_resolution(request.memo)
        if resolution is not None and resolution.dynamic is not None:
            final = request.environment_of(resolution.lock)
        else:
            real = environment.path.resolve()
            _, final = request.settle(environment.frozen(), real, dynamic)
        return BuildEnvironment(final, request.requested, request.key)
