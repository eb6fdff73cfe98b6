"""Build environments are keyed by their resolved lock: one key, one environment.

Real uv and pip, resolving against the package index as every build does; the
requirement sets are small (setuptools, pip) so the wheels come from the local caches.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wheelkiln.builder.environment import (
    BuildEnvironment,
    ensure_environment,
    existing_environment,
    find_uv,
    interpreter_for,
    interpreter_identity,
    lock_key,
)

pytestmark = pytest.mark.network
PYTHON = "3.11"


def tree_requiring(root: Path, *requires: str) -> Path:
    root.mkdir(parents=True)
    quoted = ", ".join(f'"{req}"' for req in requires)
    (root / "pyproject.toml").write_text(
        f'[build-system]\nrequires = [{quoted}]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "x"\nversion = "0"\n'
    )
    return root


def installed(environment: BuildEnvironment) -> str:
    """``name==version`` of every distribution in the environment, sorted."""
    site = next(environment.path.glob("lib/python3*/site-packages"))
    found = []
    for dist_info in site.glob("*.dist-info"):
        metadata = (dist_info / "METADATA").read_text(errors="replace").splitlines()
        fields = dict(line.split(": ", 1) for line in metadata[:5] if ": " in line)
        found.append(f"{fields['Name'].lower()}=={fields['Version']}")
    return "".join(f"{line}\n" for line in sorted(found))


@pytest.mark.skipif(find_uv() is None, reason="uv is not installed")
def test_two_spellings_of_one_resolution_share_one_environment(tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    first = ensure_environment(
        tree_requiring(tmp_path / "a", "setuptools>=61"), PYTHON, ["pip"], envs
    )
    second = ensure_environment(
        tree_requiring(tmp_path / "b", "setuptools", "setuptools>=40.8"), PYTHON, ["pip"], envs
    )
    assert first.path == second.path
    # The environment holds exactly its lock (uv's venv seeds nothing), and its key is the
    # digest of that lock and the interpreter's identity, with no path in it.
    lock = first.frozen()
    assert [line.split("==")[0] for line in lock.splitlines()] == ["pip", "setuptools"]
    assert installed(first) == lock
    identity = interpreter_identity(interpreter_for(PYTHON))
    assert first.path.name == lock_key(identity, lock)
    assert str(tmp_path) not in identity
    # Each request keeps its resolution; both name the one environment.
    memos = sorted((envs / "resolved").glob("*.json"))
    assert len(memos) == 2
    assert {json.loads(m.read_text())["key"] for m in memos} == {first.path.name}
    # The wheel cache's look-up finds the environment without resolving.
    found = existing_environment(tmp_path / "b", PYTHON, ["pip"], envs)
    assert found is not None and found.path == first.path
    assert existing_environment(tmp_path / "b", PYTHON, ["pip", "wheel"], envs) is None


@pytest.mark.slow  # pip resolves through this machine's pip.conf indexes: about a minute
def test_pip_fallback_installs_the_same_lock_under_the_same_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tree_requiring(tmp_path / "a", "setuptools>=61")
    monkeypatch.setenv("KILN_INSTALLER", "pip")
    by_pip = ensure_environment(tree, PYTHON, ["pip"], tmp_path / "pip-envs")
    record = json.loads((by_pip.path / "kiln-env.json").read_text())
    assert record["installer"] == "pip"
    # venv's own pip and (on 3.11) setuptools are not seeded: only the lock is there.
    assert installed(by_pip) == by_pip.frozen()
    assert by_pip.path.name == lock_key(
        interpreter_identity(interpreter_for(PYTHON)), by_pip.frozen()
    )
