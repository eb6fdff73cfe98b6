"""What kiln tells each PEP 517 build backend itself: the build directory, the job count
and, in shard jobs, keep-going. A recipe says what a package *is*; how kiln gets a
backend through a build never goes into the recipe's ``config_settings``.

* **A stable build directory** for every backend that would otherwise pick a random
  one. meson-python builds in ``<tree>/.mesonpy-XXXXXXXX`` unless given ``build-dir``:
  generated TUs (Cython output, dispatch sources) then carry that random name in their
  partition key, so shards disagree on who owns them, and meson-python deletes the
  directory when the build fails, which a shard's build does, taking the objects the
  gate looks for with it. scikit-build-core gets ``SKBUILD_BUILD_DIR``. Both use the
  job's ``build`` directory, where the shard gate finds the objects and the compile
  database.
* **The job count** reaches meson-python as ``compile-args=-jN``: it runs plain
  ``ninja``, which would use cores + 2 jobs (the other backends read the environment,
  :func:`wheelkiln.builder.job_env.jobs_environment`).
* **Keep-going** in shard jobs (ninja ``-k 0``: meson-python's ``compile-args``,
  scikit-build-core's ``build.tool-args`` through ``SKBUILD_BUILD_TOOL_ARGS``), so a
  link the seat wrapper does not recognise costs one target, not the rest of the slice.
  setuptools has no such knob; the wrapper's tolerated links keep it going.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from wheelkiln.errors import RecipeError

KEEP_GOING_NINJA = "-k0"
"""ninja: keep going until every job that can run has run (0 = no failure limit)."""

_MESON_OWN_SETTINGS = ("build-dir", "builddir")
"""meson-python settings kiln sets itself; a recipe giving them is refused."""


@dataclass(frozen=True)
class BackendSettings:
    """Config settings (each key may repeat) and environment for one build."""

    config_settings: tuple[tuple[str, str], ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    build_dir: Path | None = None
    """Where the backend builds (objects, ``compile_commands.json``); None: in the tree."""


def backend_settings(
    kind: str,
    build_dir: Path,
    jobs: int,
    *,
    keep_going: bool,
    recipe_settings: Mapping[str, str],
    environ: Mapping[str, str],
) -> BackendSettings:
    """kiln's settings for a backend of *kind* ('meson', 'cmake' or 'setuptools').

    The recipe's own ``config_settings`` come after kiln's, so a recipe can add meson
    ``compile-args``; a recipe that sets the build directory is refused, because the
    shard gate must find the objects where kiln put them.
    """
    env: dict[str, str] = {}
    settings: list[tuple[str, str]] = []
    directory: Path | None = None
    if kind == "meson":
        for key in _MESON_OWN_SETTINGS:
            if key in recipe_settings:
                raise RecipeError(
                    f"build.config_settings.{key}: kiln gives meson-python a stable build "
                    "directory itself (a random one breaks sharding, and the shard gate "
                    "looks for objects there).",
                    hint=f"Remove build.config_settings.{key} from the recipe.",
                )
        directory = build_dir
        settings.append(("build-dir", str(build_dir)))
        settings.append(("compile-args", f"-j{jobs}"))
        if keep_going:
            settings.append(("compile-args", KEEP_GOING_NINJA))
    elif kind == "cmake":
        directory = build_dir
        env["SKBUILD_BUILD_DIR"] = str(build_dir)
        # CMake's compile database, so the shard gate can prove that every TU of its
        # slice was compiled (CMake reads this variable's default from the environment).
        env["CMAKE_EXPORT_COMPILE_COMMANDS"] = "ON"
        generator = environ.get("CMAKE_GENERATOR", "Ninja")
        if keep_going and "Ninja" in generator and "SKBUILD_BUILD_TOOL_ARGS" not in environ:
            env["SKBUILD_BUILD_TOOL_ARGS"] = KEEP_GOING_NINJA
    settings.extend(recipe_settings.items())
    return BackendSettings(tuple(settings), env, directory)


def frontend_arguments(frontend: str, settings: tuple[tuple[str, str], ...]) -> list[str]:
    """Config settings as the frontend's arguments; a repeated key becomes a list."""
    flag = "--config-settings" if frontend == "pip" else "--config-setting"
    return [f"{flag}={key}={value}" for key, value in settings]
