"""The emitted GitHub workflow, run: its jobs' steps in order on this machine.

generate-matrix, then each compile-shard entry of its output, then the link job: every
``run:`` step as GitHub would run it (bash, the job's and step's ``env:`` with their
expressions evaluated, ``$GITHUB_OUTPUT`` read back into the job's outputs), in a fresh
checkout per job. ``uses:`` steps are played by stand-ins that keep the action's
contract: checkout copies the repository, setup-python puts this interpreter's
environment first on PATH, and upload-/download-artifact keep artifacts by name in a
directory, with the workflow's own names, paths and patterns (an upload that finds no
file fails, as ``if-no-files-found: error`` does). So a wrong artifact pattern, a step
that reads a variable no ``env:`` sets (the scripts run under ``set -u``), or a step that
assumes a file no earlier job uploaded fails here, before a runner is paid for.

The package is the small generated C package on the 13.0 lane, sharded 2 ways, not
demo-kernels: two demo-kernels shards and a link job cost about a minute on this
machine, over this test's budget. This machine stands in for the lane's container
(NVIDIA's devel image): its nvcc is checked to be the lane's release.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Kiln
from tests.projects import c_extension
from wheelkiln.builder.toolchain import find_nvcc
from wheelkiln.matrix.github import CUDA_IMAGES, render_workflow

pytestmark = [pytest.mark.compile, pytest.mark.cuda]

TUS = 4
PROJECT = c_extension("remote-demo", tus=TUS)

RECIPE = """\
name = "remote-demo"

[source]
path = "../remote-demo"

[matrix]
python = ["3.11"]
platforms = ["linux-x86_64"]

[[matrix.cuda]]
version = "13.0"
arch_list = ["8.0"]

[sharding]
count = 2
partition = "seat"
platforms = ["linux-x86_64"]
"""

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class StepFailed(AssertionError):
    pass


class LocalRunner:
    """Runs jobs of one workflow on this machine; see the module docstring."""

    def __init__(self, workflow: dict[str, Any], repository: Path, root: Path,
                 environ: dict[str, str]) -> None:
        self.workflow = workflow
        self.repository = repository
        self.root = root
        self.artifacts = root / "artifacts"
        self.artifacts.mkdir(parents=True)
        self.environ = environ
        self.needs: dict[str, dict[str, Any]] = {}
        self.inputs = {"lane": "", "filters": ""}
        self.runs = 0
        self.containers: list[str] = []

    # --- expressions ------------------------------------------------------------------

    def evaluate(self, expression: str, context: dict[str, Any]) -> Any:
        expression = expression.strip()
        if expression == "always()":
            return True
        if "&&" in expression:
            return all(self.evaluate(part, context) for part in expression.split("&&"))
        call = re.fullmatch(r"fromJSON\((.*)\)", expression)
        if call:
            return json.loads(str(self.evaluate(call.group(1), context)))
        comparison = re.fullmatch(r"(.+?)\s*(==|!=)\s*'([^']*)'", expression)
        if comparison:
            value = str(self.evaluate(comparison.group(1), context))
            return (value == comparison.group(3)) == (comparison.group(2) == "==")
        if re.fullmatch(r"[A-Za-z_][\w-]*(\.[\w-]+)+", expression):
            value: Any = context
            for key in expression.split("."):
                if not isinstance(value, dict) or key not in value:
                    # GitHub would give '' and go on; a stand-in that did would hide a typo
                    raise StepFailed(f"the workflow reads {expression}, which is not set")
                value = value[key]
            return value
        raise StepFailed(f"an expression the stand-in runner does not know: {expression}")

    def substitute(self, text: Any, context: dict[str, Any]) -> Any:
        if not isinstance(text, str):
            return text
        whole = EXPRESSION.fullmatch(text.strip())
        if whole:
            return self.evaluate(whole.group(1), context)
        return EXPRESSION.sub(lambda m: str(self.evaluate(m.group(1), context)), text)

    # --- jobs -------------------------------------------------------------------------

    def condition(self, job: str) -> bool:
        spec = self.workflow["jobs"][job]
        context = {"needs": self.needs, "inputs": self.inputs}
        return "if" not in spec or bool(self.evaluate(spec["if"], context))

    def matrix(self, job: str) -> list[dict[str, Any]]:
        spec = self.workflow["jobs"][job]["strategy"]["matrix"]
        matrix = self.substitute(spec, {"needs": self.needs, "inputs": self.inputs})
        entries: list[dict[str, Any]] = matrix["include"]
        return entries

    def run_job(self, job: str, entry: dict[str, Any] | None = None) -> dict[str, Any]:
        spec = self.workflow["jobs"][job]
        self.runs += 1
        workspace = self.root / f"{self.runs:02d}-{job}"
        steps: dict[str, Any] = {}
        context = {"matrix": entry or {}, "needs": self.needs, "inputs": self.inputs,
                   "steps": steps}
        if "container" in spec:
            self.containers.append(str(self.substitute(spec["container"], context)))
        env = {**self.environ, "GITHUB_WORKSPACE": str(workspace), "RUNNER_OS": "Linux",
               "CI": "true"}
        for scope in (self.workflow.get("env", {}), spec.get("env", {})):
            env.update({k: str(self.substitute(v, context)) for k, v in scope.items()})
        for number, step in enumerate(spec["steps"]):
            if "if" in step and not self.evaluate(step["if"], context):
                continue
            where = f"{job} step {number + 1} ({step.get('name', step.get('uses'))})"
            step_env = {**env, **{k: str(self.substitute(v, context))
                                  for k, v in step.get("env", {}).items()}}
            if "uses" in step:
                env["PATH"] = self.use(step, context, workspace, env["PATH"], where)
                continue
            outputs = self.run_script(step["run"], workspace, step_env, where)
            if "id" in step:
                steps[step["id"]] = {"outputs": outputs}
        return {k: self.substitute(v, context) for k, v in spec.get("outputs", {}).items()}

    def run_script(self, script: str, workspace: Path, env: dict[str, str],
                   where: str) -> dict[str, str]:
        output_file = workspace.parent / f"{workspace.name}.github_output"
        output_file.write_text("")
        # GitHub runs `bash --noprofile --norc -eo pipefail`; -u on top: a variable that
        # no env: sets is an error here, not an empty string
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-euo", "pipefail", "-c", script],
            cwd=workspace, env={**env, "GITHUB_OUTPUT": str(output_file)},
            capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False,
        )
        if done.returncode != 0:
            raise StepFailed(f"{where} exited {done.returncode}:\n--- script\n{script}\n"
                             f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-5000:]}")
        outputs = {}
        for line in output_file.read_text().splitlines():
            key, _, value = line.partition("=")
            outputs[key] = value
        return outputs

    # --- the actions' stand-ins ---------------------------------------------------------

    def use(self, step: dict[str, Any], context: dict[str, Any], workspace: Path,
            path: str, where: str) -> str:
        action = step["uses"].split("@")[0]
        options = {k: self.substitute(v, context) for k, v in step.get("with", {}).items()}
        if action == "actions/checkout":
            shutil.copytree(self.repository, workspace)
        elif action == "actions/setup-python":
            # kiln runs on this interpreter (GitHub: the last version listed); the cell's
            # pythonX.Y is found on PATH as there
            assert options["python-version"], where
            return f"{Path(sys.executable).parent}{os.pathsep}{path}"
        elif action == "actions/upload-artifact":
            self.upload(options, workspace, where)
        elif action == "actions/download-artifact":
            self.download(options, workspace)
        else:
            raise StepFailed(f"{where}: no stand-in for {action}")
        return path

    def upload(self, options: dict[str, Any], workspace: Path, where: str) -> None:
        name, pattern = str(options["name"]), str(options["path"])
        target = workspace / pattern
        if target.is_dir():
            base, files = target, [p for p in target.rglob("*") if p.is_file()]
        else:
            files = [Path(p) for p in sorted(map(str, workspace.glob(pattern))) if Path(p).is_file()]
            base = Path(os.path.commonpath([p.parent for p in files])) if files else workspace
        if not files:
            assert options.get("if-no-files-found") == "error", where
            raise StepFailed(f"{where}: no files were found with the provided path: {pattern}")
        stored = self.artifacts / name
        if stored.exists():
            raise StepFailed(f"{where}: an artifact named {name} was already uploaded")
        for file in files:
            destination = stored / file.relative_to(base)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, destination)

    def download(self, options: dict[str, Any], workspace: Path) -> None:
        target = workspace / str(options.get("path", "."))
        for stored in sorted(self.artifacts.iterdir()):
            if not fnmatch.fnmatchcase(stored.name, str(options["pattern"])):
                continue
            into = target if options.get("merge-multiple") else target / stored.name
            shutil.copytree(stored, into, dirs_exist_ok=True)


def test_the_workflows_steps_build_a_sharded_cuda_lane_cell(kiln: Kiln, tmp_path: Path) -> None:
    nvcc = find_nvcc()
    assert nvcc is not None
    release = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True)
    assert "release 13.0," in release.stdout  # this machine stands in for the 13.0 image

    repository = tmp_path / "repository"
    PROJECT.write_tree(repository)
    (repository / "recipes").mkdir()
    (repository / "recipes" / "remote-demo.toml").write_text(RECIPE)
    text = render_workflow(["recipes/remote-demo.toml"])
    workflow = yaml.safe_load(text)
    # The test's own environment (package index settings, KILN_HOME) with nothing a
    # workflow sets: a step that reads a variable no env: gives it fails under set -u.
    bin_dir = str(Path(sys.executable).parent)
    environ = {k: v for k, v in kiln.env.items()
               if not k.startswith(("MATRIX_", "DISPATCH_", "WHEELKILN_", "GITHUB_", "RUNNER_"))}
    environ["PATH"] = os.pathsep.join(p for p in environ["PATH"].split(os.pathsep) if p != bin_dir)
    environ["KILN_STATE_HOME"] = str(tmp_path / "state")
    runner = LocalRunner(workflow, repository, tmp_path / "runner", environ)

    matrix_outputs = runner.run_job("generate-matrix")
    runner.needs["generate-matrix"] = {"outputs": matrix_outputs, "result": "success"}
    assert (matrix_outputs["shard_count"], matrix_outputs["link_count"],
            matrix_outputs["build_count"]) == ("2", "1", "0")
    assert runner.condition("compile-shard") and runner.condition("link")
    assert not runner.condition("build")

    shards = runner.matrix("compile-shard")
    assert [entry["shard_index"] for entry in shards] == [0, 1]
    for entry in shards:
        runner.run_job("compile-shard", entry)
    runner.needs["compile-shard"] = {"outputs": {}, "result": "success"}
    (link,) = runner.matrix("link")
    runner.run_job("link", link)

    repository_image, tag, digest = CUDA_IMAGES["13.0"]
    assert runner.containers == [f"{repository_image}:{tag}@{digest}"] * 3
    cell = link["cell"]
    assert sorted(p.name for p in runner.artifacts.iterdir()) == [
        f"shard-{cell}-0-of-2", f"shard-{cell}-1-of-2", f"wheel-{cell}"]
    wheel_artifact = runner.artifacts / f"wheel-{cell}"
    record = json.loads((wheel_artifact / f"{cell}.link.json").read_text())
    gate = record["link"]["gate"]
    assert gate == {"passed": True, "problems": [], "missed": []}
    assert record["link"]["shards_merged"] == [0, 1]
    assert (record["cache"]["hits"], record["cache"]["misses"]) == (TUS, 0)
    (wheel,) = wheel_artifact.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert [n for n in archive.namelist() if n.startswith("remote_demo/_core")]
