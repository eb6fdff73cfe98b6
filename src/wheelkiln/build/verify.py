"""Checking a built wheel: the recipe's content rules and, on request, a smoke test run
by the build environment's interpreter with the wheel installed in front of it."""

from __future__ import annotations

import os
import shutil

from wheelkiln import run, ui
from wheelkiln.build.cell import BuildOutcome
from wheelkiln.build.wheel import check_wheel
from wheelkiln.errors import BuildError
from wheelkiln.recipe.load import LoadedRecipe


def check_built_wheel(outcome: BuildOutcome, loaded: LoadedRecipe, *, smoke: bool) -> None:
    if outcome.wheel is None:
        raise BuildError(
            f"The build of {outcome.cell.id} produced no wheel.",
            hint=f"See the build log: {outcome.log_path}",
        )
    check_wheel(outcome.wheel, loaded.recipe.verify)
    verify = loaded.recipe.verify
    if not smoke or not (verify.smoke or verify.import_name):
        return
    code = verify.smoke or f"import {verify.import_name}"
    # The wheel goes into a private directory in front of the build environment: its
    # runtime dependencies (torch, numpy, ...) are usually build requirements too, and
    # a scratch environment would have to download them.
    target = outcome.job_dir / "smoke-site"
    shutil.rmtree(target, ignore_errors=True)
    python = str(outcome.environment.python)
    with ui.step(f"Smoke-testing {outcome.wheel.path.name}"):
        run.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--disable-pip-version-check",
                "--target",
                str(target),
                str(outcome.wheel.path),
            ],
            what="Installing the wheel",
        )
        env = {**os.environ, "PYTHONPATH": str(target)}
        env.pop("PYTHONHOME", None)
        result = run.run([python, "-c", code], cwd=target, env=env, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"The smoke test of {outcome.wheel.path.name} failed:\n{result.output.strip()}",
            hint="The wheel was built but does not work; it was not published.",
        )
