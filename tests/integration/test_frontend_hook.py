"""kiln calls the backend's build_wheel hook itself, in one process; pip's sequence
(its own start, then the metadata hook in a process of its own) only when asked for with
``KILN_FRONTEND=process``; a backend that cannot be imported fails the build, saying so.

An in-tree backend (no requirements, no compiler) that records each hook it runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.conftest import Kiln
from tests.wheels import in_tree_backend

BACKEND = textwrap.dedent(
    '''
    import json, os
    from pathlib import Path

    from kiln_test_wheels import pure_wheel

    CALLS = Path({calls!r})


    def _called(hook, config_settings):
        with CALLS.open("a") as calls:
            calls.write(json.dumps([hook, os.getpid(), config_settings]) + "\\n")


    def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
        _called("prepare_metadata_for_build_wheel", config_settings)
        info = Path(metadata_directory) / "hooked-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\\nName: hooked\\nVersion: 0.1\\n")
        return info.name


    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        _called("build_wheel", config_settings)
        files = {{"hooked.py": b"ANSWER = 42\\n"}}
        return pure_wheel(Path(wheel_directory), "hooked", "0.1", files).name
    '''
)


def _package(tmp_path: Path, backend: str) -> tuple[Path, Path]:
    calls = tmp_path / "calls.jsonl"
    in_tree_backend(tmp_path / "pkg", "hooked_backend", backend.format(calls=str(calls)))
    recipe = tmp_path / "hooked.toml"
    recipe.write_text(
        'name = "hooked"\n[source]\npath = "pkg"\n[build]\nfrontend = "pip"\n'
        '[build.config_settings]\nmode = "fast"\n[cache]\nbackend = "none"\n'
    )
    return recipe, calls


def _hooks(calls: Path) -> list[tuple[str, dict[str, str]]]:
    import json

    lines = [json.loads(line) for line in calls.read_text().splitlines()]
    calls.unlink()
    return [(hook, settings) for hook, _pid, settings in lines]


def test_kiln_calls_build_wheel_alone_and_pip_only_when_asked(kiln: Kiln, tmp_path: Path) -> None:
    recipe, calls = _package(tmp_path, BACKEND)
    build = ["build", recipe, "--no-wheel-cache", "--out", tmp_path / "out"]
    record = kiln.json(*build, cwd=tmp_path)
    assert _hooks(calls) == [("build_wheel", {"mode": "fast"})]
    assert Path(record["wheel"]["path"]).name == "hooked-0.1-py3-none-any.whl"
    assert "_in_process.py build_wheel" in Path(record["log"]).read_text().splitlines()[0]

    kiln.json(*build, cwd=tmp_path, env={"KILN_FRONTEND": "process"})
    assert _hooks(calls) == [
        ("prepare_metadata_for_build_wheel", {"mode": "fast"}),
        ("build_wheel", {"mode": "fast"}),
    ], "pip wheel's sequence"

    refused = kiln(*build, cwd=tmp_path, env={"KILN_FRONTEND": "pip"}, check=False)
    assert refused.returncode != 0
    assert "KILN_FRONTEND='pip' is neither 'hook' nor 'process'." in " ".join(
        refused.stderr.split()
    )


def test_a_backend_that_cannot_be_imported_fails_the_build_saying_so(
    kiln: Kiln, tmp_path: Path
) -> None:
    recipe, _ = _package(tmp_path, "import hooked_backend_needs_this_module\n")
    failed = kiln("build", recipe, "--no-wheel-cache", "--out", tmp_path / "out",
                  cwd=tmp_path, check=False)  # fmt: skip
    assert failed.returncode != 0
    shown = " ".join(failed.stderr.split())
    assert "No module named 'hooked_backend_needs_this_module'" in shown, failed.stderr
    assert "kiln: the build backend 'hooked_backend' could not be run (BackendUnavailable)" \
        in shown, failed.stderr
