"""How a build environment's key is made from its lock, and which installer makes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelkiln.builder.environment import (
    BuildEnvironment,
    Installer,
    _request_key,
    _satisfied,
    checked_dynamic,
    choose_installer,
    frontend_requires,
    installed_lock,
    lock_key,
    normalize_lock,
)
from wheelkiln.errors import BuildError, ToolNotFoundError, UsageError

UV_OUTPUT = ["pybind11==3.1.0", "Scikit_Build_Core==1.1.2", "packaging==26.4  # via x", ""]
PIP_REPORT = ["scikit-build-core==1.1.2", "pybind11==3.1.0", "packaging==26.4"]


def test_one_resolution_reads_the_same_from_uv_and_pip() -> None:
    lock = normalize_lock(UV_OUTPUT)
    assert lock == "packaging==26.4\npybind11==3.1.0\nscikit-build-core==1.1.2\n"
    assert normalize_lock(PIP_REPORT) == lock
    assert normalize_lock(["# header", "--index-url https://x", *UV_OUTPUT]) == lock


def test_the_key_is_the_lock_and_the_interpreter_only() -> None:
    identity = "cpython 3.11.7 (main) [GCC 12.2.0] x86_64"
    lock = normalize_lock(PIP_REPORT)
    assert lock_key(identity, lock) == lock_key(identity, normalize_lock(UV_OUTPUT))
    assert lock_key(identity, lock) != lock_key(identity, lock.replace("26.4", "26.3"))
    assert lock_key(identity, lock) != lock_key(identity.replace("3.11.7", "3.11.8"), lock)
    assert len(lock_key(identity, lock)) == 16


def test_a_request_is_the_same_in_any_order_and_another_with_other_build_files(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "pyproject.toml").write_text("[build-system]\nrequires = ['setuptools']\n")
    uv = Installer("uv", "/bin/uv")
    one = _request_key("py", ["a", "b"], tree, {}, uv)
    assert one == _request_key("py", ["b", "a", "a"], tree, {}, uv)
    assert one != _request_key("py", ["a", "b"], tree, {}, Installer("pip"))
    assert one != _request_key("py", ["a", "b"], tree, {"k": "v"}, uv)
    (tree / "setup.py").write_text("from setuptools import setup\nsetup(setup_requires=['x'])\n")
    assert one != _request_key("py", ["a", "b"], tree, {}, uv)


def test_the_frontend_is_in_the_environment_only_where_it_runs_there() -> None:
    # kiln calls the backend's hooks itself: neither pip nor build is needed, as in
    # pip's isolated environments; KILN_FRONTEND=process runs the recipe's frontend there.
    assert frontend_requires("pip", "hook") == ()
    assert frontend_requires("build", "hook") == ()
    assert frontend_requires("pip", "process") == ("pip",)
    assert frontend_requires("build", "process") == ("build",)


def test_dynamic_requirements_already_pinned_need_no_second_resolution() -> None:
    lock = "cmake==3.31.1\nsetuptools==80.0.0\n"
    assert _satisfied("cmake>=3.24", lock)
    assert _satisfied("Setuptools", lock)
    assert not _satisfied("cmake>=4", lock)
    assert not _satisfied("ninja", lock)
    assert not _satisfied("cmake; python_version < '3.12'", lock)  # resolved again instead


def test_installer_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_installer({"KILN_INSTALLER": "pip"}) == Installer("pip")
    monkeypatch.setattr("wheelkiln.builder.environment.find_uv", lambda: None)
    assert choose_installer({}) == Installer("pip")
    with pytest.raises(UsageError) as bad:
        choose_installer({"KILN_INSTALLER": "conda"})
    assert bad.value.message == "KILN_INSTALLER='conda' is not an installer."
    with pytest.raises(ToolNotFoundError) as missing:
        choose_installer({"KILN_INSTALLER": "uv"})
    assert missing.value.message.startswith("KILN_INSTALLER=uv, but no uv was found")


def _made(envs: Path, key: str) -> BuildEnvironment:
    (envs / key / "bin").mkdir(parents=True)
    (envs / key / "bin" / "python").write_text("")
    return BuildEnvironment(envs / key, ("pybind11",))


def test_a_build_sees_its_environment_through_the_workdir_at_its_key(tmp_path: Path) -> None:
    environment = _made(tmp_path / "home" / "envs", "0d1b2e00dbb51309")
    views = tmp_path / "work" / ".envs"
    seen = environment.seen_from(views)
    assert seen == BuildEnvironment(views / "0d1b2e00dbb51309", ("pybind11",))
    assert seen.python == views / "0d1b2e00dbb51309" / "bin" / "python"
    assert (views / "0d1b2e00dbb51309").readlink() == environment.path
    assert seen.python.is_file()
    assert environment.seen_from(views) == seen  # again: the link is kept
    assert sorted(p.name for p in views.iterdir()) == ["0d1b2e00dbb51309"]


def test_a_view_left_by_another_home_is_pointed_at_this_one(tmp_path: Path) -> None:
    views = tmp_path / "work" / ".envs"
    _made(tmp_path / "a" / "envs", "k").seen_from(views)
    mine = _made(tmp_path / "b" / "envs", "k")
    mine.seen_from(views)
    assert (views / "k").readlink() == mine.path
    assert sorted(p.name for p in views.iterdir()) == ["k"]  # no staged link left


def test_views_made_at_once_from_threads_leave_one_link(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    environment = _made(tmp_path / "home" / "envs", "k")
    views = tmp_path / "work" / ".envs"
    with ThreadPoolExecutor(8) as pool:
        seen = set(pool.map(lambda _: environment.seen_from(views), range(64)))
    assert seen == {BuildEnvironment(views / "k", ("pybind11",))}
    assert [p.name for p in views.iterdir()] == ["k"]
    assert (views / "k").readlink() == environment.path


def dist_info(site: Path, directory: str, metadata: str) -> Path:
    info = site / directory
    info.mkdir(parents=True)
    (info / "METADATA").write_text(metadata)
    return info


def test_the_lock_is_read_from_the_environments_metadata_as_uv_freezes_it(
    tmp_path: Path,
) -> None:
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    dist_info(site, "Foo_Bar-1.0.0.post1.dist-info",
              "Metadata-Version: 2.1\nName: Foo_Bar\nVersion: 1.0.0-1\n\nName: not a header\n")  # fmt: skip
    dist_info(site, "pybind11-3.1.0.dist-info", "Metadata-Version: 2.1\nName: pybind11\nVersion: 3.1.0\n")  # fmt: skip
    # names canonical, versions as PEP 440 writes them (uv pip freeze: foo-bar==1.0.0.post1)
    assert installed_lock(tmp_path / "env") == "foo-bar==1.0.0.post1\npybind11==3.1.0\n"
    # What metadata cannot say alone is left to uv pip freeze.
    odd = dist_info(site, "odd-1.dist-info", "Metadata-Version: 2.1\nName: odd\nVersion: not.a-version!\n")  # fmt: skip
    assert installed_lock(tmp_path / "env") is None
    (odd / "METADATA").write_text("Metadata-Version: 2.1\nName: odd\nVersion: 1\n")
    assert installed_lock(tmp_path / "env") is not None
    (odd / "direct_url.json").write_text('{"url": "file:///src/odd", "dir_info": {}}')
    assert installed_lock(tmp_path / "env") is None


def test_a_backend_answer_must_be_a_list_of_requirements() -> None:
    assert checked_dynamic(["cmake>=3.24", "ninja; sys_platform != 'win32'"], "b") == [
        "cmake>=3.24",
        "ninja; sys_platform != 'win32'",
    ]
    for answer, shown in (
        (["ninja", "--extra-index-url http://x"], "asked for '--extra-index-url http://x'"),
        (["ninja\n-e ."], "asked for 'ninja\\n-e .'"),
        ([3], "asked for 3"),
        ("ninja", "answered get_requires_for_build_wheel with 'ninja', not a list"),
    ):
        with pytest.raises(BuildError) as raised:
            checked_dynamic(answer, "b")
        assert shown in str(raised.value)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("[" * 100_000, "nested too deep"),
        ('{"freeze": 1' + "0" * 5000 + "}", "Exceeds the limit"),
        ('{"freeze": 7}', "no freeze text in it"),
        ("[1, 2]", "no freeze text in it"),
        (None, "not a regular file"),  # a fifo: never waited on
    ],
)
def test_an_environment_record_that_cannot_be_read_is_named_with_what_to_do(
    tmp_path: Path, content: str | None, said: str
) -> None:
    import os

    from wheelkiln.builder.environment import BuildEnvironment
    from wheelkiln.errors import BuildError

    env = tmp_path / "0123456789abcdef"
    env.mkdir()
    record = env / "kiln-env.json"
    if content is None:
        os.mkfifo(record)
    else:
        record.write_text(content)
    with pytest.raises(BuildError) as refused:
        BuildEnvironment(env, ()).frozen()
    assert refused.value.message.startswith(f"{record}: ")
    assert said in refused.value.message
    assert refused.value.hint == f"Remove {env} and build again: kiln makes the environment anew."


def test_an_environment_record_gives_its_freeze(tmp_path: Path) -> None:
    from wheelkiln.builder.environment import BuildEnvironment

    (tmp_path / "kiln-env.json").write_text('{"freeze": "ninja==1.13.0\\n"}')
    assert BuildEnvironment(tmp_path, ()).frozen() == "ninja==1.13.0\n"
    (tmp_path / "kiln-env.json").write_text('{"requires": []}')  # a record of an older kiln
    assert BuildEnvironment(tmp_path, ()).frozen() == ""
