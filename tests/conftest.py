"""Shared fixtures: an isolated kiln home, the kiln CLI as a subprocess, example copies."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import redis_server, s3_server, webdav_server  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
RECIPES = ROOT / "recipes"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Real builds first, CUDA ones before the rest, so that under pytest-xdist the long
    tests start early and the short ones fill the gaps at the end (no test depends on the
    order: the suite is also run in file order without xdist). CUDA tests need nvcc (no
    GPU): without one they are skipped, and say why."""
    from wheelkiln.builder.toolchain import find_nvcc

    items.sort(key=lambda item: ("cuda" not in item.keywords, "compile" not in item.keywords))
    if find_nvcc() is not None:
        return
    skip = pytest.mark.skip(reason="no nvcc found ($CUDA_HOME, /usr/local/cuda or PATH)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kiln_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One KILN_HOME per test session: build environments are made once and reused.

    Caches and work trees are per test (``--cache-dir``, ``--workdir``).
    """
    chosen = os.environ.get("KILN_TEST_HOME")
    if not chosen:
        yield tmp_path_factory.mktemp("kiln-home")
        return
    # Under pytest-xdist every worker builds at once, and a build holds the builder
    # lock of its KILN_HOME: each worker gets its own home below the chosen one.
    home = Path(chosen) / os.environ.get("PYTEST_XDIST_WORKER", "main")
    home.mkdir(parents=True, exist_ok=True)
    yield home


class Kiln:
    """Runs ``kiln`` as a user would, in a subprocess, with an isolated home."""

    def __init__(self, home: Path, state: Path) -> None:
        self.env = {**os.environ, "KILN_HOME": str(home), "KILN_STATE_HOME": str(state)}
        self.env.pop("KILN_VERBOSE", None)

    def __call__(
        self,
        *args: str | Path,
        check: bool = True,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "wheelkiln", *map(str, args)]
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            cwd=cwd or ROOT,
            stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kiln {' '.join(map(str, args))} exited {result.returncode}\n"
                f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-6000:]}"
            )
        return result

    def json(self, *args: str | Path, **kwargs: Any) -> dict[str, Any]:
        result = self(*args, "--json", **kwargs)
        data: dict[str, Any] = json.loads(result.stdout)
        return data


@pytest.fixture
def kiln(kiln_home: Path, tmp_path: Path) -> Kiln:
    return Kiln(kiln_home, tmp_path / "state")


def kiln_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str | Path]
) -> tuple[int, str, str]:
    """``kiln ARGV`` in this process, as the script runs it: (exit code, stdout, stderr).
    Faster than :class:`Kiln` where a command ends before any build."""
    from wheelkiln import cli

    monkeypatch.setattr(sys, "argv", ["kiln", *map(str, argv)])
    code: object = 0
    try:
        cli.main()
    except SystemExit as exited:
        code = 0 if exited.code is None else exited.code
    captured = capsys.readouterr()
    return code if isinstance(code, int) else 1, captured.out, captured.err


@pytest.fixture(scope="session")
def kernels_cold(tmp_path_factory: pytest.TempPathFactory, kiln_home: Path) -> dict[str, Any]:
    """demo-kernels built once per test run, unsharded and cold: the wheel every sharded
    build must match, and the filled cache a rebuild starts from. Nobody may change its
    tree or cache: copy them (``copytree``) before editing or building into them.

    Under pytest-xdist the first worker to ask builds it under a lock in the run's shared
    temporary directory; the others wait and read its record.
    """
    return shared_cold_build(tmp_path_factory, kiln_home, "demo-kernels")


@pytest.fixture(scope="session")
def cython_cold(tmp_path_factory: pytest.TempPathFactory, kiln_home: Path) -> dict[str, Any]:
    """demo-cython built once per test run, unsharded and cold (as :func:`kernels_cold`):
    read-only, copy its tree or cache before changing them."""
    return shared_cold_build(tmp_path_factory, kiln_home, "demo-cython")


def shared_cold_build(
    tmp_path_factory: pytest.TempPathFactory, kiln_home: Path, example: str
) -> dict[str, Any]:
    """One cold build of *example* per test run, shared by every xdist worker."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # popen-gwN/.. is shared by every worker of this run
    tmp = root / f"{example}-cold"
    done = tmp / "record.json"
    with open(root / f"{example}-cold.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            tree = copy_example(example, tmp)
            recipe_for(tree, example, tmp)
            record = Kiln(kiln_home, tmp / "state").json(
                "build", tmp / f"{example}.toml", "--out", tmp / "out", "--workdir",
                tmp / "work", "--cache-dir", tmp / "ccache", "--no-wheel-cache")
            (tmp / "kiln-home").write_text(str(kiln_home))  # where its environment is
            done.write_text(json.dumps(record))
    return {"tree": tmp / example, "recipe": tmp / f"{example}.toml",
            "record": json.loads(done.read_text()), "cache": tmp / "ccache",
            "work": tmp / "work", "home": Path((tmp / "kiln-home").read_text())}


def copy_example(name: str, destination: Path) -> Path:
    target = destination / name
    shutil.copytree(
        EXAMPLES / name,
        target,
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
    )
    return target


def pure_package(root: Path) -> Path:
    """A pure-Python package (flit_core, nothing to compile) under *root*, and its
    recipe's path."""
    package = root / "purepkg"
    (package / "purepkg").mkdir(parents=True)
    (package / "purepkg" / "__init__.py").write_text('"""Pure."""\n')
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["flit_core>=3.4"]\nbuild-backend = "flit_core.buildapi"\n'
        '[project]\nname = "purepkg"\nversion = "0.1"\ndescription = "pure"\n'
    )
    recipe = root / "purepkg.toml"
    recipe.write_text(
        'name = "purepkg"\n[source]\npath = "purepkg"\n'
        '[matrix]\npython = ["3.11"]\nplatforms = ["linux-x86_64"]\n'
    )
    return recipe


def recipe_for(tree: Path, recipe_name: str, destination: Path, **replace: str) -> Path:
    """A copy of a bundled recipe whose source.path points at ``tree``."""
    text = (RECIPES / f"{recipe_name}.toml").read_text()
    lines = []
    for line in text.splitlines():
        if line.strip().startswith("path =") and "examples" in line:
            line = f'path = "{tree}"'
        lines.append(line)
    text = "\n".join(lines) + "\n"
    for old, new in replace.items():
        text = text.replace(old, new)
    path = destination / f"{recipe_name}.toml"
    path.write_text(text)
    return path


@pytest.fixture
def installed(tmp_path: Path) -> Callable[[str | Path, str], str]:
    """Install a wheel into a private directory and run Python code against it."""

    def run_with(wheel: str | Path, code: str) -> str:
        target = tmp_path / f"site-{Path(wheel).stem}"
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--disable-pip-version-check",
                "--target",
                str(target),
                str(wheel),
            ],
            check=True,
        )
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(target)},
            cwd=tmp_path,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    return run_with


def expected_checksum(tree: Path) -> int:
    """The answer the example's extension must give, computed from its sources."""
    spec = importlib.util.spec_from_file_location(
        f"expected_{tree.name}", tree / "tools" / "expected.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    value: int = module.expected_checksum(tree)
    return value
