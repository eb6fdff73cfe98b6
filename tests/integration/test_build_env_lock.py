"""Build environments are keyed by their resolved lock: one key, one environment.

Real uv and pip, resolving against the package index as every build does; the
requirement sets are small (setuptools, pip) so the wheels come from the local caches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.wheels import pure_wheel
from wheelkiln.builder import env_store
from wheelkiln.builder.environment import (
    BYTECODE_MARKER,
    BuildEnvironment,
    ensure_environment,
    existing_environment,
    find_uv,
    finish_bytecode,
    interpreter_for,
    interpreter_identity,
    lock_key,
    normalize_lock,
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
    # Read from the metadata, as uv pip freeze says it.
    uv_says = subprocess.run(
        [str(find_uv()), "pip", "freeze", "--python", str(first.python)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert normalize_lock(uv_says.splitlines()) == lock
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
    # Bytecode is compiled beside the build once the environment is at its key; the
    # build waits for it at its end. It is used, and its code names the files where they
    # are.
    finish_bytecode()
    assert (first.path / BYTECODE_MARKER).is_file()
    site = next(first.path.glob("lib/python3*/site-packages"))
    assert list((site / "pip" / "__pycache__").glob("__init__.cpython-*.pyc"))
    code = "import pip._internal.cli.main as m; print(m.__cached__, m.main.__code__.co_filename)"
    cached, filename = subprocess.run(
        [str(first.python), "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    ).stdout.split()  # fmt: skip
    assert Path(cached).is_file()
    assert filename == str(site / "pip" / "_internal" / "cli" / "main.py")


MAKE_ONE = """
import sys
from pathlib import Path
from wheelkiln.builder.environment import ensure_environment, finish_bytecode
made = ensure_environment(Path(sys.argv[1]), sys.argv[2], [], Path(sys.argv[3]))
finish_bytecode()
print(made.path)
"""


@pytest.mark.skipif(find_uv() is None, reason="uv is not installed")
def test_a_pruned_environment_is_made_again_from_its_kept_lock(tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    tree = tree_requiring(tmp_path / "a", "setuptools>=61")
    # Made by a build that has ended: nothing holds it.
    made = subprocess.run(
        [sys.executable, "-c", MAKE_ONE, str(tree), PYTHON, str(envs)],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
    ).stdout.strip()  # fmt: skip
    path = Path(made)
    lock = (path / "kiln-lock.txt").read_text()
    memos = {memo: memo.read_text() for memo in (envs / "resolved").glob("*.json")}
    listed = env_store.stored(envs, "build")
    assert [e.path for e in listed] == [path] and not listed[0].in_use
    assert [p.outcome for p in env_store.prune(listed, 0)] == ["removed"]
    assert not path.exists()

    again = ensure_environment(tree, PYTHON, [], envs)
    assert again.path == path and again.frozen() == lock
    assert installed(again) == lock
    # The request's resolution was read, not made again.
    assert {memo: memo.read_text() for memo in (envs / "resolved").glob("*.json")} == memos
    # This process uses it now: a prune keeps it.
    listed = env_store.stored(envs, "build")
    assert [p.outcome for p in env_store.prune(listed, 0)] == ["in use"]
    assert path.is_dir()


@pytest.mark.skipif(find_uv() is None, reason="uv is not installed")
def test_a_new_environment_starts_with_the_bytecode_an_earlier_one_compiled(
    tmp_path: Path,
) -> None:
    envs = tmp_path / "envs"
    first = ensure_environment(tree_requiring(tmp_path / "a", "setuptools>=61"), PYTHON, [], envs)
    finish_bytecode()  # compiled beside the build, then kept by distribution
    second = ensure_environment(
        tree_requiring(tmp_path / "b", "setuptools>=61", "pip"), PYTHON, [], envs
    )
    assert first.path != second.path
    tag = "cpython-" + PYTHON.replace(".", "")
    relative = Path("setuptools") / "__pycache__" / f"__init__.{tag}.pyc"
    one, two = (next(e.path.glob("lib/python3*/site-packages")) / relative for e in (first, second))
    # Linked before the hook ran: the same file, which Python takes as it is.
    assert two.samefile(one)
    code = "import setuptools, sys; print(setuptools.__cached__, setuptools.__file__)"
    cached, filename = subprocess.run(
        [str(second.python), "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    ).stdout.split()  # fmt: skip
    assert Path(cached).samefile(one) and filename.startswith(str(second.path))
    finish_bytecode()


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


def wheel_of(directory: Path, name: str, version: str) -> Path:
    """A pure wheel of *name* *version* whose module says its version."""
    module = name.replace("-", "_")
    source = f"VERSION = {version!r}\n".encode()
    return pure_wheel(directory, name, version, {f"{module}.py": source})


@pytest.mark.skipif(find_uv() is None, reason="uv is not installed")
def test_uv_environments_come_from_pips_links_under_pips_constraints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A farm's pip.conf (a wheel directory, no index, a cap) reaches uv's environments:
    the package exists only in that directory, and the cap chooses its version."""
    links = tmp_path / "wheels"
    for version in ("1.0", "2.0"):
        wheel_of(links, "kiln-pinned", version)
    caps = tmp_path / "caps.txt"
    caps.write_text("kiln-pinned<2\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nno-index = true\nfind-links = {links}\nconstraint = {caps}\n")
    # The backend is in the tree, so nothing but the wheel directory is needed.
    tree = tmp_path / "tree"
    (tree / "backend").mkdir(parents=True)
    (tree / "backend" / "inert.py").write_text(
        "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
    )
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["kiln-pinned"]\nbuild-backend = "inert"\n'
        'backend-path = ["backend"]\n'
    )
    for name in [name for name in os.environ if name.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(name)  # PIP_FIND_LINKS would win over the file, as in pip
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "no-system-config"))
    envs = tmp_path / "envs"
    capped = ensure_environment(tree, PYTHON, [], envs)
    assert capped.frozen() == "kiln-pinned==1.0\n"
    assert installed(capped) == "kiln-pinned==1.0\n"

    caps.write_text("kiln-pinned<3\n")  # another cap: resolved again, not the memo's lock
    assert ensure_environment(tree, PYTHON, [], envs).frozen() == "kiln-pinned==2.0\n"
