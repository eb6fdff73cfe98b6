"""Checking a built wheel: the recipe's content rules and, on request, a smoke test in a
scratch environment."""

from __future__ import annotations

import shutil

from wheelkiln import run, ui
from wheelkiln.build.cell import BuildOutcome
from wheelkiln.build.environment import interpreter_for
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
    venv = outcome.job_dir / "smoke-venv"
    shutil.rmtree(venv, ignore_errors=True)
    with ui.step(f"Smoke-testing {outcome.wheel.path.name}"):
        run.run(
            [interpreter_for(outcome.cell.python), "-m", "venv", str(venv)],
            what="Creating a smoke venv",
        )
        python = str(venv / "bin" / "python")
        run.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--disable-pip-version-check",
                str(outcome.wheel.path),
            ],
            what="Installing the wheel",
        )
        result = run.run([python, "-c", code], cwd=venv, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"The smoke test of {outcome.wheel.path.name} failed:\n{result.output.strip()}",
            hint="The wheel was built but does not work; it was not published.",
        )
