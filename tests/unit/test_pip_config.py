"""pip's configuration read as pip reads it, and the uv options kiln makes of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wheelkiln.builder.environment import Installer, _request_key, choose_installer
from wheelkiln.builder.pip_config import (
    config_files,
    fingerprint,
    read_pip_settings,
    uv_install_arguments,
)
from wheelkiln.errors import UsageError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, Path]:
    """A machine of its own: /etc, a home, and a working directory."""
    roots = {name: tmp_path / name for name in ("etc", "home", "cwd")}
    for root in roots.values():
        root.mkdir()
    return roots


def env_of(machine: dict[str, Path], **extra: str) -> dict[str, str]:
    return {"HOME": str(machine["home"]), **extra}


def test_files_in_pips_order_and_pip_config_file_replaces_the_users(
    machine: dict[str, Path],
) -> None:
    etc, home = machine["etc"], machine["home"]
    xdg = write(etc / "xdg" / "pip" / "pip.conf", "[global]\n")
    etc_conf = write(etc / "pip.conf", "[global]\n")
    legacy = write(home / ".pip" / "pip.conf", "[global]\n")
    user = write(home / ".config" / "pip" / "pip.conf", "[global]\n")
    chosen = write(machine["cwd"] / "chosen.conf", "[global]\n")
    env = env_of(machine)
    assert config_files(env, etc) == [xdg, etc_conf, legacy, user]
    assert config_files({**env, "PIP_CONFIG_FILE": str(chosen)}, etc) == [xdg, etc_conf, chosen]
    assert config_files({**env, "PIP_CONFIG_FILE": os.devnull}, etc) == []
    # A PIP_CONFIG_FILE that does not exist leaves the user's files read.
    missing = str(machine["cwd"] / "absent.conf")
    assert config_files({**env, "PIP_CONFIG_FILE": missing}, etc) == [xdg, etc_conf, legacy, user]


def test_later_files_install_sections_and_variables_win(machine: dict[str, Path]) -> None:
    etc, home, cwd = machine["etc"], machine["home"], machine["cwd"]
    write(cwd / "caps.txt", "torch<=2.14.1\n")
    write(etc / "pip.conf", "[global]\nindex-url = https://mirror.example/simple\n"
          "find-links = wheels\n    /srv/more\nconstraint = caps.txt\n")  # fmt: skip
    write(home / ".config" / "pip" / "pip.conf",
          "[install]\nindex_url = https://install.example/simple\n"
          "[global]\nextra-index-url = https://a.example/simple https://b.example/simple\n"
          "trusted-host = a.example\n")  # fmt: skip
    settings = read_pip_settings(env_of(machine), cwd=cwd, etc=etc)
    assert settings.index_url == "https://install.example/simple"
    assert settings.extra_index_urls == ("https://a.example/simple", "https://b.example/simple")
    assert settings.find_links == (str(cwd / "wheels"), "/srv/more")
    assert settings.constraints == (cwd / "caps.txt",)
    assert settings.trusted_hosts == ("a.example",)
    assert not settings.no_index

    overridden = read_pip_settings(
        env_of(machine, PIP_INDEX_URL="https://env.example/simple", PIP_NO_INDEX="yes",
               PIP_FIND_LINKS="file:///srv/wheels"),
        cwd=cwd, etc=etc,
    )  # fmt: skip
    assert overridden.index_url == "https://env.example/simple"
    assert overridden.no_index
    assert overridden.find_links == ("file:///srv/wheels",)
    assert overridden.origin is not None and overridden.origin["index-url"] == "PIP_INDEX_URL"


def test_uv_gets_pips_sources_and_pips_best_match_unless_told_otherwise(
    machine: dict[str, Path],
) -> None:
    caps = write(machine["cwd"] / "caps.txt", "torch<=2.14.1\n")
    write(machine["etc"] / "pip.conf", f"[global]\nextra-index-url = file:///opt/simple\n"
          f"find-links = /opt/wheels\nconstraint = {caps}\ntrusted-host = mirror.lan\n")  # fmt: skip
    env = env_of(machine)
    settings = read_pip_settings(env, etc=machine["etc"])
    assert uv_install_arguments(settings, env) == [
        "--extra-index-url", "file:///opt/simple", "--find-links", "/opt/wheels",
        "--constraints", str(caps), "--allow-insecure-host", "mirror.lan",
        "--index-strategy", "unsafe-best-match",
    ]  # fmt: skip
    told = {**env, "UV_FIND_LINKS": "/elsewhere", "UV_INDEX_STRATEGY": "first-index"}
    assert uv_install_arguments(settings, told) == [
        "--extra-index-url", "file:///opt/simple", "--constraints", str(caps),
        "--allow-insecure-host", "mirror.lan",
    ]  # fmt: skip
    nothing = read_pip_settings(env_of(machine, PIP_CONFIG_FILE=os.devnull), etc=machine["etc"])
    assert uv_install_arguments(nothing, env) == []


def test_a_changed_constraint_file_is_another_resolution(
    machine: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    caps = write(machine["cwd"] / "caps.txt", "torch<=2.14.1\n")
    conf = write(machine["cwd"] / "pip.conf", f"[global]\nconstraint = {caps}\n")
    env = env_of(machine, PIP_CONFIG_FILE=str(conf), XDG_CONFIG_DIRS=str(machine["etc"]))
    monkeypatch.setattr("wheelkiln.builder.environment.find_uv", lambda: "/bin/uv")
    tree = write(machine["cwd"] / "t" / "pyproject.toml", "[build-system]\n").parent

    def request() -> str:
        installer = choose_installer(env)
        args = list(installer.index_args)
        assert args[args.index("--constraints") + 1] == str(caps)
        return _request_key("py", ["torch"], tree, {}, installer)

    first = request()
    assert first == request()
    caps.write_text("torch<=2.13.0\n")
    assert request() != first
    assert first != _request_key("py", ["torch"], tree, {}, Installer("uv", "/bin/uv"))
    assert fingerprint([], read_pip_settings({"PIP_CONFIG_FILE": os.devnull})) == fingerprint(
        [], read_pip_settings({"PIP_CONFIG_FILE": os.devnull})
    )


def test_a_missing_constraint_file_and_a_broken_file_are_named(machine: dict[str, Path]) -> None:
    conf = write(machine["cwd"] / "pip.conf", "[global]\nconstraint = /nowhere/caps.txt\n")
    env = env_of(machine, PIP_CONFIG_FILE=str(conf))
    with pytest.raises(UsageError) as missing:
        read_pip_settings(env, etc=machine["etc"])
    assert missing.value.message == (
        f"pip's constraint file /nowhere/caps.txt (from {conf}) does not exist"
    )
    conf.write_text("index-url = https://no.section/simple\n")
    with pytest.raises(UsageError) as broken:
        read_pip_settings(env, etc=machine["etc"])
    assert broken.value.message.startswith(f"{conf}: pip's configuration cannot be read (")
