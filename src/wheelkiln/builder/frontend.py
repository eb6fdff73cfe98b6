"""How a build job runs the package's PEP 517 backend: kiln calls its ``build_wheel``
hook itself, in one process of the cell's build environment, whichever frontend the
recipe names.

kiln makes the build environment itself and builds without isolation and without
installing dependencies, so all that ``pip wheel --no-build-isolation --no-deps`` adds to
the hook is pip's own start and a ``prepare_metadata_for_build_wheel`` call in a process
of its own (``python -m build --no-isolation``: its start and a
``get_requires_for_build_wheel`` call). Neither changes the wheel: PEP 517 has
``build_wheel`` make the same wheel whether metadata was prepared first or not. In a hot
demo-kernels build on this 2-core machine they cost 2.3 s of 4.7 (pip's start 1.6 s,
the metadata hook 0.7 s), half the hot build. The hook runs through pyproject_hooks'
in-process script, the one pip and build vendor, so a backend sees what it sees under
them (``backend-path``, the hook's fallbacks) and nothing kiln imports.

A build whose environment has not had the backend's dynamic requirements asked yet
(:attr:`wheelkiln.builder.environment.BuildEnvironment.ask_backend`, the first build of a
request) asks them in the same process, before ``build_wheel``
(:mod:`wheelkiln.builder.ask_then_build`): the backend is imported once, not in a process
of its own and again in the build's. Where the backend asks for anything, the process ends
before ``build_wheel`` and :func:`build_wheel` raises :class:`BackendAsks`.

``KILN_FRONTEND=process`` runs the recipe's frontend as a process instead (``pip wheel``
or ``python -m build``), to compare the two.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from wheelkiln import run
from wheelkiln.builder.environment import (
    BuildSystem,
    backend_failure,
    backend_hook_caller,
    checked_dynamic,
)
from wheelkiln.errors import UsageError

FRONTEND_VARIABLE = "KILN_FRONTEND"
"""``hook`` (the default: kiln calls ``build_wheel``) or ``process`` (the recipe's
frontend runs)."""
FRONTEND_MODES = ("hook", "process")


def frontend_mode(environ: Mapping[str, str]) -> str:
    """How the backend is run: :data:`FRONTEND_VARIABLE`, ``hook`` when unset."""
    mode = environ.get(FRONTEND_VARIABLE, "").strip() or "hook"
    if mode not in FRONTEND_MODES:
        raise UsageError(
            f"{FRONTEND_VARIABLE}={mode!r} is neither 'hook' nor 'process'.",
            hint=f"Unset {FRONTEND_VARIABLE} (kiln calls the backend's build_wheel hook "
            "itself), or set it to 'process' to run the recipe's frontend.",
        )
    return mode


def hook_settings(settings: Sequence[tuple[str, str]]) -> dict[str, str | list[str]]:
    """Config settings as a backend receives them: a repeated key becomes a list of its
    values in order, as pip and build pass them."""
    merged: dict[str, list[str]] = {}
    for key, value in settings:
        merged.setdefault(key, []).append(value)
    return {key: values[0] if len(values) == 1 else values for key, values in merged.items()}


class _HookFailed(Exception):
    """The hook's process exited non-zero: its output is in the log, not in a result."""


class BackendAsks(Exception):
    """The backend's ``get_requires_for_build_wheel``, asked in the build's process,
    answered *requirements*; ``build_wheel`` was not called."""

    def __init__(self, requirements: list[str]) -> None:
        super().__init__(requirements)
        self.requirements = requirements


_ASK_THEN_BUILD = Path(__file__).with_name("ask_then_build.py")


def build_wheel(
    python: Path,
    tree: Path,
    system: BuildSystem,
    settings: Sequence[tuple[str, str]],
    dist: Path,
    *,
    log_path: Path,
    env: Mapping[str, str],
    on_line: Callable[[str], None] | None = None,
    ask_first: bool = False,
) -> run.Completed:
    """Call the backend's ``build_wheel`` hook with *python* (the build environment's),
    the wheel into *dist*, its output streamed into *log_path*. Returns the hook's
    process; a non-zero exit code is returned, not raised (the shard gate decides what
    it means). *ask_first*: ask ``get_requires_for_build_wheel`` in the same process
    first, and raise :class:`BackendAsks` where it asks for anything."""
    from pyproject_hooks import BackendUnavailable, HookMissing, UnsupportedOperation

    ran: list[run.Completed] = []
    answered: list[object] = []

    def runner(
        cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
    ) -> None:
        argv = list(cmd)
        if ask_first:  # [python, script, hook, control]: the script runs under the driver
            argv[1:2] = [str(_ASK_THEN_BUILD), argv[1]]
        done = run.run_logged(
            argv,
            log_path=log_path,
            cwd=cwd,
            env={**env, **(extra_environ or {})},
            on_line=on_line,
        )
        ran.append(done)
        if done.returncode != 0:
            raise _HookFailed
        control = Path(argv[-1])
        if ask_first and not (control / "output.json").exists():
            answered.append(_read_answer(control / "asked" / "output.json"))
            raise _HookFailed

    caller = backend_hook_caller(tree, system, python, runner)
    try:
        caller.build_wheel(str(dist), hook_settings(settings))
    except _HookFailed:
        if answered:
            if isinstance(answered[0], list):
                raise BackendAsks(checked_dynamic(answered[0], system.backend)) from None
            # The backend could not be asked (its import failed): build_wheel by itself
            # fails the same way, with the message every build gives.
            return build_wheel(
                python, tree, system, settings, dist, log_path=log_path, env=env, on_line=on_line
            )
    except (BackendUnavailable, HookMissing, UnsupportedOperation) as error:
        # The process ran and exited 0, but the backend could not be imported (or
        # refused the hook): a failed build whose log says why, as pip's would.
        why = backend_failure(system.backend, error)
        with log_path.open("a", encoding="utf-8") as log:
            log.write(why)
        return replace(ran[-1], returncode=1, output=ran[-1].output + why)
    return ran[-1]


def _read_answer(path: Path) -> object:
    """``get_requires_for_build_wheel``'s answer as the driver wrote it; ``None`` where
    there is none (the backend could not be imported)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("return_val") if isinstance(data, dict) and not data.get("no_backend") else None
