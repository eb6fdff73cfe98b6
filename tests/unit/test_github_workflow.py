"""The emitted GitHub Actions workflow: GitHub's schema, zizmor, and its structure
(always() on link, the needs graph, artifact names, pins, no template injection)."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.unit.farm import write_farm
from wheelkiln.cli.matrix import ci_group
from wheelkiln.errors import UsageError
from wheelkiln.matrix.github import ACTIONS, CUDA_IMAGES, RUNNERS, container_for, render_workflow
from wheelkiln.matrix.jobs import expand_matrix
from wheelkiln.matrix.render import matrix_document
from wheelkiln.recipe.load import load_recipe


def tool(name: str) -> str | None:
    """A dev tool from this interpreter's venv, else from PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


@pytest.fixture(scope="module")
def farm_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("farm")
    write_farm(root)
    return root


@pytest.fixture(scope="module")
def workflow_file(farm_root: Path) -> Path:
    path = farm_root / ".github" / "workflows" / "kiln.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_workflow(["recipes/flash-attn.toml", "recipes/natten.toml"]))
    return path


@pytest.fixture(scope="module")
def workflow(workflow_file: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(workflow_file.read_text())
    return data


@pytest.fixture(scope="module")
def farm_document(farm_root: Path) -> dict[str, Any]:
    recipes = [load_recipe(p) for p in sorted((farm_root / "recipes").glob("*.toml"))]
    return matrix_document(expand_matrix(recipes, root=farm_root, cap=None))


def steps(workflow: dict[str, Any], job: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = workflow["jobs"][job]["steps"]
    return result


# --- external validators ----------------------------------------------------------------


def test_validates_against_githubs_workflow_schema(workflow_file: Path) -> None:
    checker = tool("check-jsonschema")
    if checker is None:
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    result = subprocess.run(
        [checker, "--builtin-schema", "vendor.github-workflows", str(workflow_file)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_nothing_above_low(workflow_file: Path) -> None:
    zizmor = tool("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed (pip install -e '.[dev]')")
    result = subprocess.run(
        [zizmor, "--offline", "--format", "json", str(workflow_file)],
        capture_output=True, text=True, check=False,
    )
    findings = json.loads(result.stdout)
    serious = [
        f"{finding['ident']} ({finding['determinations']['severity']}): {finding['desc']}"
        for finding in findings
        if finding["determinations"]["severity"] not in ("Informational", "Low")
    ]
    assert serious == []


# --- structure --------------------------------------------------------------------------


def test_jobs_and_needs_graph(workflow: dict[str, Any]) -> None:
    jobs = workflow["jobs"]
    assert list(jobs) == ["generate-matrix", "compile-shard", "link", "build"]
    assert "needs" not in jobs["generate-matrix"]
    assert jobs["compile-shard"]["needs"] == "generate-matrix"
    assert jobs["link"]["needs"] == ["generate-matrix", "compile-shard"]
    assert jobs["build"]["needs"] == "generate-matrix"
    for name in ("compile-shard", "link", "build"):
        kind = {"compile-shard": "shard"}.get(name, name)
        assert jobs[name]["strategy"] == {
            "fail-fast": False,
            "matrix": f"${{{{ fromJSON(needs.generate-matrix.outputs.{kind}) }}}}",
        }
        assert jobs[name]["runs-on"] == "${{ matrix.runs_on }}"
        assert jobs[name]["name"] == "${{ matrix.name }}"


def test_link_runs_always_after_a_successful_matrix(workflow: dict[str, Any]) -> None:
    jobs = workflow["jobs"]
    assert jobs["link"]["if"] == (
        "always() && needs.generate-matrix.result == 'success' "
        "&& needs.generate-matrix.outputs.link_count != '0'"
    )
    assert jobs["compile-shard"]["if"] == "needs.generate-matrix.outputs.shard_count != '0'"
    assert jobs["build"]["if"] == "needs.generate-matrix.outputs.build_count != '0'"


def test_generate_matrix_exposes_every_list_and_count(workflow: dict[str, Any]) -> None:
    outputs = workflow["jobs"]["generate-matrix"]["outputs"]
    assert outputs == {
        key: f"${{{{ steps.matrix.outputs.{key} }}}}"
        for kind in ("shard", "link", "build") for key in (kind, f"{kind}_count")
    }
    expand = steps(workflow, "generate-matrix")[-1]
    assert expand["id"] == "matrix"
    assert "kiln matrix recipes/flash-attn.toml recipes/natten.toml" in expand["run"]
    assert "--json" in expand["run"]
    assert expand["env"] == {"DISPATCH_LANE": "${{ inputs.lane }}",
                             "DISPATCH_FILTERS": "${{ inputs.filters }}"}


def test_shard_artifacts_are_uploaded_by_name_for_one_day(workflow: dict[str, Any]) -> None:
    upload = steps(workflow, "compile-shard")[-1]
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"] == {
        "name": "${{ matrix.artifact }}",
        "path": "kiln-out/${{ matrix.archive }}",
        "if-no-files-found": "error",
        "retention-days": 1,
    }
    compile_step = next(s for s in steps(workflow, "compile-shard") if s["name"] == "Compile shard")
    assert compile_step["run"].startswith('kiln shard "$MATRIX_RECIPE" --cell "$MATRIX_CELL" '
                                          '--index "$MATRIX_SHARD_INDEX" --count '
                                          '"$MATRIX_SHARD_COUNT" --partition '
                                          '"$MATRIX_SHARD_PARTITION" --cache "$MATRIX_CACHE" '
                                          "--out kiln-out")
    # the partition the matrix planned, not whatever the recipe says when the job runs
    assert compile_step["env"]["MATRIX_SHARD_PARTITION"] == "${{ matrix.shard_partition }}"


def test_link_downloads_its_cells_shards_merged(workflow: dict[str, Any]) -> None:
    download = next(s for s in steps(workflow, "link")
                    if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"] == {
        "pattern": "${{ matrix.artifact_pattern }}",
        "path": "kiln-shards",
        "merge-multiple": True,
    }
    link = next(s for s in steps(workflow, "link") if s["name"] == "Link")
    assert ('kiln link "$MATRIX_RECIPE" --cell "$MATRIX_CELL" --archives kiln-shards '
            '--count "$MATRIX_SHARD_COUNT" --cache "$MATRIX_CACHE" --out kiln-dist') in link["run"]
    upload = steps(workflow, "link")[-1]
    assert upload["with"]["name"] == "${{ matrix.wheel_artifact }}"


def test_artifact_names_connect_shards_to_their_link(farm_document: dict[str, Any]) -> None:
    shards = farm_document["shard"]["include"]
    names = [entry["artifact"] for entry in shards]
    assert len(set(names)) == len(names) == 554
    for entry in shards:
        cell, index, count = entry["cell"], entry["shard_index"], entry["shard_count"]
        assert entry["artifact"] == f"shard-{cell}-{index}-of-{count}"
        assert entry["archive"] == f"{cell}-shard-{index}-of-{count}.tar.gz"
    for link in farm_document["link"]["include"]:
        matched = fnmatch.filter(names, link["artifact_pattern"])
        expected = [f"shard-{link['cell']}-{i}-of-{link['shard_count']}"
                    for i in range(link["shard_count"])]
        assert sorted(matched) == sorted(expected), link["cell"]


def test_every_matrix_key_the_workflow_reads_exists(workflow: dict[str, Any],
                                                    farm_document: dict[str, Any]) -> None:
    for job, kind in (("compile-shard", "shard"), ("link", "link"), ("build", "build")):
        used = set(re.findall(r"(?<![-\w])matrix\.(\w+)", json.dumps(workflow["jobs"][job])))
        for entry in farm_document[kind]["include"]:
            assert used <= set(entry), (job, used - set(entry))


def test_actions_are_pinned_to_full_shas_with_a_version_comment(workflow_file: Path) -> None:
    text = workflow_file.read_text()
    uses = re.findall(r"uses: (\S+)(.*)", text)
    assert uses
    for ref, comment in uses:
        assert re.fullmatch(r"actions/[a-z-]+@[0-9a-f]{40}", ref), ref
        repository, sha = ref.split("@")
        versions = [v for r, s, v in ACTIONS.values() if (r, s) == (repository, sha)]
        assert comment == f" # {versions[0]}"
    assert {ref.split("@")[0] for ref, _ in uses} == {
        "actions/checkout", "actions/setup-python", "actions/upload-artifact",
        "actions/download-artifact",
    }


def test_permissions_and_credentials(workflow: dict[str, Any]) -> None:
    assert workflow["permissions"] == {"contents": "read"}
    for name, job in workflow["jobs"].items():
        checkouts = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")]
        assert [s["with"] for s in checkouts] == [{"persist-credentials": False}], name


def test_no_expression_inside_run_scripts(workflow: dict[str, Any]) -> None:
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            assert "${{" not in step.get("run", "")


def test_no_step_sets_the_wrappers_kiln_variables(workflow: dict[str, Any]) -> None:
    # KILN_SHARD_COUNT in a step's env would turn the seat partition on under a
    # source-partitioned shard
    envs = [workflow.get("env", {})]
    for job in workflow["jobs"].values():
        envs.append(job.get("env", {}))
        envs.extend(step.get("env", {}) for step in job["steps"])
    assert not [key for env in envs for key in env if key.startswith("KILN_")]


def test_windows_lanes_use_sccache_and_a_local_tar_path(workflow: dict[str, Any],
                                                        farm_document: dict[str, Any]) -> None:
    assert workflow["defaults"] == {"run": {"shell": "bash"}}
    listing = next(s for s in steps(workflow, "compile-shard")
                   if s["name"] == "List the shard archive")
    windows, _, other = listing["run"].partition("else")
    assert 'tar --force-local -tzvf "$(cygpath -u "$archive")"' in windows
    tar_calls = [line for line in windows.splitlines() if line.strip().startswith("tar ")]
    assert tar_calls and all("--force-local" in line and "cygpath -u" in line
                             for line in tar_calls)
    assert 'tar -tzvf "$archive"' in other
    for kind in ("shard", "link", "build"):
        for entry in farm_document[kind]["include"]:
            windows_lane = entry["platform"] == "windows-amd64"
            assert (entry["cache"] == "sccache") is windows_lane
            assert entry["runs_on"] == RUNNERS[entry["platform"]]
    for job in ("compile-shard", "link", "build"):
        assert any('--cache "$MATRIX_CACHE"' in s.get("run", "") for s in steps(workflow, job))


def test_runners_per_platform() -> None:
    assert RUNNERS == {
        "linux-x86_64": "ubuntu-24.04",
        "linux-aarch64": "ubuntu-24.04-arm",
        "windows-amd64": "windows-2022",
        "macos-arm64": "macos-14",
        "macos-x86_64": "macos-13",
    }


def test_cells_python_is_installed_beside_kilns(workflow: dict[str, Any]) -> None:
    setup = next(s for s in steps(workflow, "build") if s["name"] == "Set up Python")
    assert setup["with"]["python-version"] == "${{ matrix.python }}\n3.12\n"


# --- the command ------------------------------------------------------------------------


def test_ci_github_writes_the_workflow_and_summarises(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    write_farm(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(ci_group, ["github", "--out", "ci/kiln.yml"])
    assert result.exit_code == 0, result.output
    written = tmp_path / "ci" / "kiln.yml"
    assert written.read_text() == render_workflow([])
    summary = " ".join(result.stderr.split())
    assert ("Wrote ci/kiln.yml: 44 recipes, 268 cells; a dispatch without inputs runs 554 "
            "shard, 120 link and 148 build jobs (822 in all).") in summary
    assert "a dispatch without inputs would be refused" in summary
    assert "--lane 12.8 → 239 jobs" in summary


def test_ci_github_embeds_named_recipes_relative(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write_farm(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(ci_group, ["github", "natten", str(tmp_path / "recipes" /
                                                                   "cumm.toml")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / ".github" / "workflows" / "kiln.yml").read_text()
    assert "kiln matrix recipes/natten.toml recipes/cumm.toml " in text
    assert "refused" not in result.stderr


# --- the CUDA toolkit -------------------------------------------------------------------


def test_cuda_lanes_run_in_a_toolkit_image_pinned_by_digest(workflow: dict[str, Any],
                                                            farm_document: dict[str, Any]) -> None:
    for name in ("compile-shard", "link", "build"):
        assert workflow["jobs"][name]["container"] == "${{ matrix.container }}"
    assert "container" not in workflow["jobs"]["generate-matrix"]
    seen = set()
    for kind in ("shard", "link", "build"):
        for entry in farm_document[kind]["include"]:
            image = entry["container"]
            if entry["cuda"] == "none" or not entry["platform"].startswith("linux-"):
                assert image == "", entry["id"]
                continue
            repository, tag, digest = CUDA_IMAGES[entry["cuda"]]
            assert image == f"{repository}:{tag}@{digest}"
            assert re.fullmatch(r"nvidia/cuda:[0-9.]+-devel-ubuntu[0-9.]+@sha256:[0-9a-f]{64}", image)
            assert tag.startswith(entry["cuda"] + ".")
            seen.add(entry["cuda"])
    assert seen == {"12.8", "13.0"}


def test_each_lanes_image_is_a_devel_image_of_that_cuda_release_pinned_by_digest() -> None:
    # Format only: the digests are not pulled here (the network reaches no registry), so
    # nothing checks that a digest is the tag's; the tag is what a person re-pins from.
    assert sorted(CUDA_IMAGES) == ["12.8", "13.0"]
    for lane, (repository, tag, digest) in CUDA_IMAGES.items():
        assert repository == "nvidia/cuda", lane
        assert re.fullmatch(rf"{re.escape(lane)}\.[0-9]+-devel-ubuntu[0-9]+\.[0-9]+", tag), lane
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), lane
    assert len({digest for _, _, digest in CUDA_IMAGES.values()}) == len(CUDA_IMAGES)


def test_every_bundled_recipes_cuda_lane_has_an_image() -> None:
    root = Path(__file__).resolve().parents[2]
    lanes = {cuda.version for path in (root / "recipes").glob("*.toml")
             for cuda in load_recipe(path).recipe.matrix.cuda}
    assert lanes and lanes <= set(CUDA_IMAGES)


def test_the_zizmor_exception_is_only_for_the_matrix_container(workflow_file: Path) -> None:
    ignored = [line for line in workflow_file.read_text().splitlines() if "zizmor: ignore" in line]
    assert len(ignored) == 3
    assert all(line.strip().startswith("container: ${{ matrix.container }} # zizmor: "
                                       "ignore[unpinned-images]") for line in ignored)


def test_a_lane_without_a_pinned_image_is_refused() -> None:
    with pytest.raises(UsageError) as refused:
        container_for("linux-x86_64", "11.8")
    assert refused.value.message == (
        "CUDA lane 11.8 has no pinned toolkit image for GitHub runners (known lanes: 12.8, "
        "13.0); its jobs would run without nvcc."
    )
    assert container_for("windows-amd64", "11.8") == ""
    assert container_for("linux-aarch64", "none") == ""
