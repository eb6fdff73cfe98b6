"""The emitted GitHub workflow, run: its jobs' steps in order on this machine.

generate-matrix, then each compile-shard entry of its output, then the link job: every
``run:`` step as GitHub would run it (bash, the job's and step's ``env:`` with their
expressions evaluated, ``$GITHUB_OUTPUT`` read back into the job's outputs), in a fresh
checkout per job. ``uses:`` steps are played by stand-ins that keep the action's
contract: checkout copies the repository, setup-python puts this interpreter's
environment first on PATH, and upload-/download-artifact keep artifacts by name in a
directory, with the workflow's own names, paths and patterns (an upload that finds no
file fails, as ``if-no-files-found: error`` does; a download pattern that matches no
artifact downloads nothing). So a wrong artifact pattern, a step that reads a variable
no ``env:`` sets (the scripts run under ``set -u``), or a step that assumes a file no
earlier job uploaded fails here, before a runner is paid for. The tests mutate the
emitted workflow in each of those ways and assert the failure.

The package is demo-kernels, from its bundled recipe, sharded 2 ways: every shard
compiles its slice cold (nothing seeds the shards' caches), and the link job must see
zero misses and give a wheel equivalent to the unsharded cold build (``kernels_cold``).
That test is ``test_sharding``'s N=2 case of
``test_demo_kernels_sharded_links_with_zero_misses``, reached through the workflow's own
steps. This machine stands in for the lane's container (NVIDIA's devel image, which
cannot be pulled here): its nvcc is checked to be the lane's release. The mutations that
fail before any build run on the demo-kernels run's jobs; those that fail only after a
build run on a two-TU C package, where that build costs seconds.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Kiln, copy_example, expected_checksum
from tests.projects import c_extension
from wheelkiln.builder.toolchain import find_nvcc
from wheelkiln.cells import shard_archive, shard_record
from wheelkiln.matrix.github import CUDA_IMAGES, render_workflow

pytestmark = pytest.mark.compile

ROOT = Path(__file__).resolve().parents[2]
SHARDS = 2
"""demo-kernels' shard count here (its recipe says 4): each more shard adds a job (a
CMake configure, a pip install of kiln, a kiln start) to the test's time."""

SMALL = c_extension("steps-demo", tus=2)
SMALL_RECIPE = """\
name = "steps-demo"

[source]
path = "../steps-demo"

[matrix]
python = ["3.11"]
platforms = ["linux-x86_64"]

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
        self.skipped_steps: frozenset[str] = frozenset()
        """Steps (by name) not run: the failure tests skip "Install kiln", which the
        demo-kernels run ran and which only finds kiln already installed here."""
        self.workspaces: list[Path] = []

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
        self.workspaces.append(workspace)
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
            if step.get("name") in self.skipped_steps or (
                    "if" in step and not self.evaluate(step["if"], context)):
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


def runner_environment(kiln_env: dict[str, str], state: Path) -> dict[str, str]:
    """The test's own environment (package index settings, KILN_HOME) with nothing a
    workflow sets, and without this interpreter's bin on PATH (setup-python puts it
    there): a step that reads a variable no env: gives it fails under set -u."""
    bin_dir = str(Path(sys.executable).parent)
    environ = {k: v for k, v in kiln_env.items()
               if not k.startswith(("MATRIX_", "DISPATCH_", "WHEELKILN_", "GITHUB_", "RUNNER_"))}
    environ["PATH"] = os.pathsep.join(p for p in environ["PATH"].split(os.pathsep) if p != bin_dir)
    environ["KILN_STATE_HOME"] = str(state)
    return environ


def step(workflow: dict[str, Any], job: str, name: str) -> dict[str, Any]:
    """The step called *name* (or using the action *name*) of *job*."""
    (found,) = [s for s in workflow["jobs"][job]["steps"]
                if s.get("name") == name or s.get("uses", "").startswith(f"actions/{name}@")]
    return found


def matrix_ready(runner: LocalRunner) -> dict[str, str]:
    outputs = runner.run_job("generate-matrix")
    runner.needs["generate-matrix"] = {"outputs": outputs, "result": "success"}
    return outputs


@dataclass
class WorkflowRun:
    """One run of the emitted workflow: generate-matrix, every shard, the link job."""

    runner: LocalRunner
    repository: Path
    matrix_outputs: dict[str, str]
    shards: list[dict[str, Any]]
    link: dict[str, Any]


def run_demo_kernels_workflow(kiln: Kiln, root: Path) -> WorkflowRun:
    repository = root / "repository"
    (repository / "examples").mkdir(parents=True)
    copy_example("demo-kernels", repository / "examples")
    (repository / "recipes").mkdir()
    recipe = (ROOT / "recipes" / "demo-kernels.toml").read_text()
    assert "\ncount = 4\n" in recipe
    (repository / "recipes" / "demo-kernels.toml").write_text(
        recipe.replace("\ncount = 4\n", f"\ncount = {SHARDS}\n"))
    workflow = yaml.safe_load(render_workflow(["recipes/demo-kernels.toml"]))
    environ = runner_environment(kiln.env, root / "state")
    runner = LocalRunner(workflow, repository, root / "runner", environ)

    outputs = matrix_ready(runner)
    shards = runner.matrix("compile-shard") if runner.condition("compile-shard") else []
    for entry in shards:
        runner.run_job("compile-shard", entry)
    runner.needs["compile-shard"] = {"outputs": {}, "result": "success"}
    (link,) = runner.matrix("link")
    runner.run_job("link", link)
    return WorkflowRun(runner, repository, outputs, shards, link)


@pytest.mark.cuda
def test_the_workflows_steps_build_demo_kernels_sharded(
    kernels_cold: dict[str, Any], kiln: Kiln, installed: Callable[[str | Path, str], str],
    tmp_path: Path,
) -> None:
    nvcc = find_nvcc()
    assert nvcc is not None
    release = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True)
    assert "release 13.0," in release.stdout  # this machine stands in for the 13.0 image
    run = run_demo_kernels_workflow(kiln, tmp_path)
    runner = run.runner
    assert (run.matrix_outputs["shard_count"], run.matrix_outputs["link_count"],
            run.matrix_outputs["build_count"]) == (str(SHARDS), "1", "0")
    assert not runner.condition("build")
    assert [entry["shard_index"] for entry in run.shards] == list(range(SHARDS))

    # Every compile-shard job and the link job ran in the lane's pinned image.
    repository_image, tag, digest = CUDA_IMAGES["13.0"]
    assert runner.containers == [f"{repository_image}:{tag}@{digest}"] * (SHARDS + 1)
    cell = run.link["cell"]
    assert cell == kernels_cold["record"]["cell"]
    assert sorted(p.name for p in runner.artifacts.iterdir()) == sorted(
        [f"shard-{cell}-{i}-of-{SHARDS}" for i in range(SHARDS)] + [f"wheel-{cell}"])

    # Each shard compiled its own slice for real: the 24 kernels, the dispatcher and the
    # module each in exactly one shard, and each shard's gate passed. CMake's probes are
    # never stubbed (every stub is another shard's TU); a shard runs them where the cell's
    # identification and check results were not kept yet (configure succeeded; empty
    # families were skipped).
    compiled = stubs = 0
    probes = []
    for index, workspace in enumerate(runner.workspaces[1:1 + SHARDS]):
        record = json.loads((workspace / "kiln-out" / shard_record(cell, index, SHARDS)).read_text())
        assert record["shard"]["gate"]["passed"], record["shard"]["gate"]
        assert record["cache"]["misses"] == record["shard"]["actions"]["compile"] > 0
        compiled += record["shard"]["actions"]["compile"]
        stubs += record["shard"]["actions"]["stub"]
        probes.append(record["shard"]["actions"].get("probe", 0))
        uploaded = runner.artifacts / f"shard-{cell}-{index}-of-{SHARDS}"
        assert [p.name for p in uploaded.iterdir()] == [shard_archive(cell, index, SHARDS)]
    assert compiled == 26
    assert stubs == 26 * (SHARDS - 1)
    assert all(probe == 0 or probe >= 4 for probe in probes), probes

    # The link job merged both uploads and saw every TU as a hit.
    wheel_artifact = runner.artifacts / f"wheel-{cell}"
    record = json.loads((wheel_artifact / f"{cell}.link.json").read_text())
    assert record["link"]["gate"] == {"passed": True, "problems": [], "missed": []}
    assert record["link"]["shards_merged"] == list(range(SHARDS))
    assert record["cache"]["misses"] == 0
    assert record["cache"]["hits"] == record["cache"]["total"] == kernels_cold["record"]["cache"]["total"]

    # The wheel: its modules, the right answer from the host side, and equivalent to
    # the unsharded cold build's.
    (wheel,) = wheel_artifact.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert [n for n in archive.namelist() if n.startswith("demo_kernels/_core")]
    answer = installed(wheel, "import demo_kernels as d; print(d.checksum(), d.kernel_count(), "
                              "sorted(d.families().items()))")
    assert answer == (f"{expected_checksum(run.repository / 'examples' / 'demo-kernels')} 24 "
                      "[('sm80', 12), ('sm89', 8), ('sm90', 4)]")
    verdict = json.loads(kiln("verify", wheel, kernels_cold["record"]["wheel"]["path"],
                              "--json").stdout)
    assert verdict["equivalent"], verdict
    assert not verdict["symbol_differences"]

    # The same run's jobs again, each with one defect (they fail before any build).
    fails_reading_a_variable_no_env_sets(run, tmp_path / "no-env")
    fails_reading_a_file_never_uploaded(run, tmp_path / "never-uploaded")


# --- what must fail: the emitted workflow, mutated ---------------------------------------


def rerun(run: WorkflowRun, mutate: Callable[[dict[str, Any]], None], tmp_path: Path) -> LocalRunner:
    """A runner over a mutated copy of the run's workflow, with its generate-matrix
    outputs and a copy of its artifacts."""
    workflow = copy.deepcopy(run.runner.workflow)
    mutate(workflow)
    runner = LocalRunner(workflow, run.repository, tmp_path / "runner", run.runner.environ)
    shutil.rmtree(runner.artifacts)
    shutil.copytree(run.runner.artifacts, runner.artifacts)
    runner.needs = copy.deepcopy(run.runner.needs)
    runner.skipped_steps = frozenset({"Install kiln"})
    return runner


def fails_reading_a_variable_no_env_sets(run: WorkflowRun, tmp_path: Path) -> None:
    def forget_the_cell(workflow: dict[str, Any]) -> None:
        del step(workflow, "compile-shard", "Compile shard")["env"]["MATRIX_CELL"]

    runner = rerun(run, forget_the_cell, tmp_path)
    with pytest.raises(StepFailed) as failed:
        runner.run_job("compile-shard", run.shards[0])
    assert str(failed.value).startswith("compile-shard step 4 (Compile shard) exited 1:")
    assert "MATRIX_CELL: unbound variable" in str(failed.value)


def fails_reading_a_file_never_uploaded(run: WorkflowRun, tmp_path: Path) -> None:
    # The shard job writes its record beside its archive but uploads only the archive.
    def read_the_shard_records(workflow: dict[str, Any]) -> None:
        link = step(workflow, "link", "Link")
        link["run"] = "cat kiln-shards/*.shard.json\n" + link["run"]

    runner = rerun(run, read_the_shard_records, tmp_path)
    with pytest.raises(StepFailed) as failed:
        runner.run_job("link", run.link)
    assert str(failed.value).startswith("link step 5 (Link) exited 1:")
    assert "cat: 'kiln-shards/*.shard.json': No such file or directory" in str(failed.value)


@pytest.fixture
def small_runner(kiln: Kiln, tmp_path: Path) -> LocalRunner:
    """A runner over the emitted workflow for the two-TU package (tests mutate it); it
    skips "Install kiln", as the reruns of the demo-kernels jobs do."""
    repository = tmp_path / "repository"
    SMALL.write_tree(repository)
    (repository / "recipes").mkdir()
    (repository / "recipes" / "steps-demo.toml").write_text(SMALL_RECIPE)
    workflow = yaml.safe_load(render_workflow(["recipes/steps-demo.toml"]))
    runner = LocalRunner(workflow, repository, tmp_path / "runner",
                         runner_environment(kiln.env, tmp_path / "state"))
    runner.skipped_steps = frozenset({"Install kiln"})
    return runner


def test_wrong_artifact_globs_fail_the_upload_and_the_link_gate(small_runner: LocalRunner) -> None:
    # Both mix up the shard archive's file name (<cell>-shard-<i>-of-<N>.tar.gz) with its
    # artifact's name (shard-<cell>-<i>-of-<N>). Shard 0 uploads by the wrong one and
    # fails at its upload; shard 1 uploads as emitted; the link job downloads by the
    # wrong pattern, gets nothing, heals itself and fails its gate naming both shards.
    runner = small_runner
    upload = step(runner.workflow, "compile-shard", "upload-artifact")["with"]
    emitted_path = upload["path"]
    upload["path"] = "kiln-out/${{ matrix.artifact }}.tar.gz"
    step(runner.workflow, "link", "download-artifact")["with"]["pattern"] = "${{ matrix.cell }}-shard-*"
    matrix_ready(runner)
    first, second = runner.matrix("compile-shard")
    cell = first["cell"]
    with pytest.raises(StepFailed) as failed:
        runner.run_job("compile-shard", first)
    assert str(failed.value) == (
        "compile-shard step 6 (Upload): no files were found with the provided path: "
        f"kiln-out/shard-{cell}-0-of-2.tar.gz")
    assert (runner.workspaces[-1] / "kiln-out" / shard_archive(cell, 0, 2)).is_file()

    upload["path"] = emitted_path
    runner.run_job("compile-shard", second)
    assert [p.name for p in runner.artifacts.iterdir()] == [f"shard-{cell}-1-of-2"]
    runner.needs["compile-shard"] = {"outputs": {}, "result": "failure"}
    (link,) = runner.matrix("link")
    assert runner.condition("link")  # always(): a failed shard does not skip the link job
    with pytest.raises(StepFailed) as failed:
        runner.run_job("link", link)
    message = str(failed.value)
    assert message.startswith("link step 5 (Link) exited 5:")
    for index in range(2):
        assert f"shard {index + 1}/2 is missing: no {shard_archive(cell, index, 2)}" in message
