"""The backend's dynamic requirements (``get_requires_for_build_wheel``) are asked in the
build's own process, before ``build_wheel``, the first time a request is built; what the
backend asks for is installed, and the answer is kept, so later builds ask nothing.

An in-tree backend that records each hook with its process id, and asks for what the test
gives it. Its requirements come from a wheel directory (pip.conf ``find-links``, no index),
through real uv or pip.
"""

from __future__ import annotations

import ensurepip
import json
import os
import shutil
import textwrap
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import Kiln
from tests.wheels import in_tree_backend, pure_wheel
from wheelkiln.builder.environment import ensure_environment, finish_bytecode, settle_dynamic

BACKEND = textwrap.dedent(
    '''
    import importlib.util, json, os, warnings
    from pathlib import Path

    from kiln_test_wheels import pure_wheel

    CALLS = Path({calls!r})
    ASKS = {asks!r}
    WARNS = {warns!r}


    def _called(hook):
        with CALLS.open("a") as calls:
            calls.write(json.dumps([hook, os.getpid()]) + "\\n")


    def get_requires_for_build_wheel(config_settings=None):
        _called("get_requires_for_build_wheel")
        if WARNS:
            warnings.warn(WARNS)
        return list(ASKS)


    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        _called("build_wheel")
        # What the build's environment holds: the wheel says it.
        found = [name for name in ("kiln_base", "kiln_extra") if importlib.util.find_spec(name)]
        files = {{"asking.py": f"FOUND = {{found!r}}\\n".encode()}}
        return pure_wheel(Path(wheel_directory), "asking", "0.1", files).name
    '''
)


def _package(tmp_path: Path, asks: list[str], warns: str = "") -> tuple[Path, Path]:
    calls = tmp_path / "calls.jsonl"
    source = BACKEND.format(calls=str(calls), asks=asks, warns=warns)
    in_tree_backend(tmp_path / "pkg", "asking_backend", source, requires='"kiln-base"')
    recipe = tmp_path / "asking.toml"
    recipe.write_text('name = "asking"\n[source]\npath = "pkg"\n[cache]\nbackend = "none"\n')
    return recipe, calls


def _index(tmp_path: Path) -> dict[str, str]:
    """A pip.conf that finds kiln-base and kiln-extra in a wheel directory, and nothing
    else; the variables that point pip and uv at it."""
    links = tmp_path / "wheels"
    for name in ("kiln-base", "kiln-extra"):
        pure_wheel(links, name, "1.0", {f"{name.replace('-', '_')}.py": b"VERSION = '1.0'\n"})
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nno-index = true\nfind-links = {links}\n")
    return {"PIP_CONFIG_FILE": str(conf), "XDG_CONFIG_DIRS": str(tmp_path / "no-system-config")}


def _calls(calls: Path) -> list[tuple[str, int]]:
    lines = [json.loads(line) for line in calls.read_text().splitlines()]
    calls.unlink()
    return [(hook, pid) for hook, pid in lines]


def _memo(home: Path) -> dict[str, object]:
    (memo,) = (home / "envs" / "resolved").glob("*.json")
    data: dict[str, object] = json.loads(memo.read_text())
    return data


@pytest.fixture
def index_only(kiln: Kiln, tmp_path: Path) -> dict[str, str]:
    # PIP_FIND_LINKS would win over the file, as in pip.
    kiln.env = {k: v for k, v in kiln.env.items() if not k.startswith(("PIP_", "UV_"))}
    return _index(tmp_path)


def test_a_backend_that_asks_for_nothing_is_asked_in_the_build_process_once(
    kiln: Kiln, tmp_path: Path, index_only: dict[str, str]
) -> None:
    recipe, calls = _package(tmp_path, [])
    build: list[str | Path] = ["build", recipe, "--no-wheel-cache", "--out", tmp_path / "out"]
    env = {**index_only, "KILN_HOME": str(tmp_path / "home")}
    kiln.json(*build, cwd=tmp_path, env=env)
    (asked, ask_pid), (built, build_pid) = _calls(calls)
    assert (asked, built) == ("get_requires_for_build_wheel", "build_wheel")
    assert ask_pid == build_pid, "one process asks and builds"
    assert _memo(tmp_path / "home")["dynamic"] == []

    kiln.json(*build, cwd=tmp_path, env=env)
    assert [hook for hook, _ in _calls(calls)] == ["build_wheel"], "the answer is kept"


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_what_the_backend_asks_for_is_installed_before_build_wheel(
    kiln: Kiln, tmp_path: Path, index_only: dict[str, str], installer: str
) -> None:
    recipe, calls = _package(tmp_path, ["kiln-extra>=1"])
    out = tmp_path / "out"
    build: list[str | Path] = ["build", recipe, "--no-wheel-cache", "--out", out]
    home = tmp_path / "home"
    env = {**index_only, "KILN_HOME": str(home), "KILN_INSTALLER": installer}
    done = kiln(*build, "--json", cwd=tmp_path, env=env)
    record = json.loads(done.stdout)
    (asked, ask_pid), (built, build_pid) = _calls(calls)
    assert (asked, built) == ("get_requires_for_build_wheel", "build_wheel")
    assert ask_pid != build_pid, "build_wheel ran again, in the environment that holds it"
    assert "The build backend asked for kiln-extra>=1, which its build environment lacked: " \
        "installed; building again." in " ".join(done.stderr.split()), done.stderr
    with zipfile.ZipFile(record["wheel"]["path"]) as archive:
        assert archive.read("asking.py") == b"FOUND = ['kiln_base', 'kiln_extra']\n"
    memo = _memo(home)
    assert memo["dynamic"] == ["kiln-extra>=1"]
    assert memo["lock"] == "kiln-base==1.0\nkiln-extra==1.0\n"
    # The first environment stays: it holds exactly its lock.
    locks = sorted(
        json.loads(made.read_text())["freeze"] for made in (home / "envs").glob("*/kiln-env.json")
    )
    assert locks == ["kiln-base==1.0\n", "kiln-base==1.0\nkiln-extra==1.0\n"]

    kiln.json(*build, cwd=tmp_path, env=env)
    assert [hook for hook, _ in _calls(calls)] == ["build_wheel"], "the answer is kept"


def test_a_backend_asking_for_what_the_lock_holds_builds_in_the_same_environment(
    kiln: Kiln, tmp_path: Path, index_only: dict[str, str]
) -> None:
    recipe, calls = _package(tmp_path, ["kiln-base"])
    build: list[str | Path] = ["build", recipe, "--no-wheel-cache", "--out", tmp_path / "out"]
    home = tmp_path / "home"
    kiln.json(*build, cwd=tmp_path, env={**index_only, "KILN_HOME": str(home)})
    assert [hook for hook, _ in _calls(calls)] == ["get_requires_for_build_wheel", "build_wheel"]
    assert _memo(home) == {"key": _memo(home)["key"], "lock": "kiln-base==1.0\n",
                           "dynamic": ["kiln-base"]}  # fmt: skip
    assert len(list((home / "envs").glob("*/kiln-env.json"))) == 1


def test_with_the_process_frontend_the_backend_is_asked_before_the_build(
    kiln: Kiln, tmp_path: Path, index_only: dict[str, str]
) -> None:
    """``KILN_FRONTEND=process`` runs ``pip wheel`` without isolation, which installs
    nothing: kiln asks the backend in a process of its own while it makes the
    environment, and installs what it asks for before pip starts."""
    bundled = Path(ensurepip.__file__).parent / "_bundled"
    pip_wheel = next(bundled.glob("pip-*.whl"), None)
    if pip_wheel is None:
        pytest.skip(f"no pip wheel in {bundled} for the wheel directory")
    shutil.copy(pip_wheel, tmp_path / "wheels")
    recipe, calls = _package(tmp_path, ["kiln-extra"])
    home = tmp_path / "home"
    env = {**index_only, "KILN_HOME": str(home), "KILN_FRONTEND": "process"}
    record = kiln.json("build", recipe, "--no-wheel-cache", "--out", tmp_path / "out",
                       cwd=tmp_path, env=env)  # fmt: skip
    (asked, ask_pid), *rest = _calls(calls)
    assert asked == "get_requires_for_build_wheel"
    assert rest and all(hook != asked and pid != ask_pid for hook, pid in rest), rest
    with zipfile.ZipFile(record["wheel"]["path"]) as archive:
        assert archive.read("asking.py") == b"FOUND = ['kiln_base', 'kiln_extra']\n"
    assert _memo(home)["dynamic"] == ["kiln-extra"]


def test_a_backend_answer_that_is_no_requirement_fails_the_build_saying_so(
    kiln: Kiln, tmp_path: Path, index_only: dict[str, str]
) -> None:
    """The answer becomes a line of the installer's requirements file: an option there
    would change where everything is installed from."""
    recipe, calls = _package(tmp_path, ["--index-url http://127.0.0.1:9/simple"])
    home = tmp_path / "home"
    failed = kiln("build", recipe, "--no-wheel-cache", "--out", tmp_path / "out",
                  cwd=tmp_path, env={**index_only, "KILN_HOME": str(home)}, check=False)  # fmt: skip
    assert failed.returncode == 4
    assert "The build backend 'asking_backend' asked for '--index-url http://127.0.0.1:9/simple' " \
        "(get_requires_for_build_wheel), which is not a requirement (PEP 508)." \
        in " ".join(failed.stderr.split()), failed.stderr
    assert [hook for hook, _ in _calls(calls)] == ["get_requires_for_build_wheel"]
    assert _memo(home)["dynamic"] is None, "nothing recorded: the next build asks again"


def test_jobs_of_one_request_settle_on_one_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shard jobs of one cell each ask the backend in their own build; the first answer
    recorded holds, and every job builds in the environment it names."""
    for name in [name for name in os.environ if name.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(name)
    for name, value in _index(tmp_path).items():
        monkeypatch.setenv(name, value)
    _package(tmp_path, ["kiln-extra"])
    envs = tmp_path / "envs"
    first = ensure_environment(tmp_path / "pkg", "3.11", [], envs, ask_in_build=True)
    second = ensure_environment(tmp_path / "pkg", "3.11", [], envs, ask_in_build=True)
    assert first == second and first.ask_backend, "not asked yet: both jobs ask"

    with ThreadPoolExecutor(4) as pool:
        settled = list(pool.map(lambda _: settle_dynamic(first, ["kiln-extra"], "3.11", envs),
                                range(4)))  # fmt: skip
    finish_bytecode()
    assert len({environment.path for environment in settled}) == 1
    (grown,) = {environment.path for environment in settled}
    assert grown != first.path and not settled[0].ask_backend
    assert settled[0].frozen() == "kiln-base==1.0\nkiln-extra==1.0\n"
    assert len(list(envs.glob("*/kiln-env.json"))) == 2, "one environment made for all four"
    again = ensure_environment(tmp_path / "pkg", "3.11", [], envs, ask_in_build=True)
    assert again.path == grown and not again.ask_backend


def test_a_backend_warning_asked_in_kilns_process_is_shown_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where kiln asks the backend in a process of its own (not in the build's), the
    hook's warnings come back into kiln's process; this suite turns warnings into errors,
    as ``-W error`` does. torch warns at import that numpy is missing: that failed the
    torch extension's environment with a traceback."""
    for name in [name for name in os.environ if name.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(name)
    for name, value in _index(tmp_path).items():
        monkeypatch.setenv(name, value)
    _, calls = _package(tmp_path, ["kiln-extra"], warns="Failed to initialize NumPy")
    environment = ensure_environment(tmp_path / "pkg", "3.11", [], tmp_path / "envs")
    finish_bytecode()
    assert [hook for hook, _ in _calls(calls)] == ["get_requires_for_build_wheel"]
    assert not environment.ask_backend
    assert environment.frozen() == "kiln-base==1.0\nkiln-extra==1.0\n"
    assert "kiln: the build backend 'asking_backend' warned (get_requires_for_build_wheel): " \
        "Failed to initialize NumPy" in capsys.readouterr().err
