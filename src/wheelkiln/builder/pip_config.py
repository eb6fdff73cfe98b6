"""pip's index settings, carried over to uv.

A build farm points pip at its own indexes, wheel directories and constraints in
``pip.conf`` or ``PIP_*`` variables (an internal mirror, a directory of prebuilt torch
wheels, a cap on torch). pip honours them in its build environments; uv reads none of
them. So when uv makes a build environment, kiln reads pip's configuration the way pip
does and passes the settings that choose distributions to ``uv pip install``: the same
requirements then resolve from the same places, whichever installer runs.

Where pip looks, lowest precedence first (pip's ``configuration.py``):

* global: ``<dir>/pip/pip.conf`` for each of ``$XDG_CONFIG_DIRS`` (``/etc/xdg``), then
  ``/etc/pip.conf``;
* user: ``~/.pip/pip.conf``, then ``$XDG_CONFIG_HOME/pip/pip.conf`` (``~/.config``),
  skipped when ``$PIP_CONFIG_FILE`` names an existing file;
* ``$PIP_CONFIG_FILE``; ``os.devnull`` there means no file at all;
* ``PIP_*`` variables, which win over every file.

Within the files, an ``[install]`` key wins over a ``[global]`` one. A virtualenv's own
``pip.conf`` (pip's "site" file) is not read: kiln's build environments have none.

A setting the caller gave uv itself (``UV_INDEX_URL``, ``UV_FIND_LINKS`` ...) is left to
uv: those are the caller's word for uv.
"""

from __future__ import annotations

import configparser
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wheelkiln.errors import UsageError

SECTIONS = ("global", "install")
"""Sections ``pip install`` reads, lowest precedence first."""


@dataclass(frozen=True)
class PipIndexSettings:
    """What pip would install from, as far as it changes which distributions come."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    constraints: tuple[Path, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    no_index: bool = False
    cert: str | None = None
    origin: Mapping[str, str] | None = None
    """Where each key was read (a file's path or a variable's name), for messages."""


def config_files(env: Mapping[str, str], etc: Path = Path("/etc")) -> list[Path]:
    """pip's configuration files that exist, lowest precedence first. *etc*: where
    ``pip.conf`` and the default ``xdg`` directory are (a test's own)."""
    chosen = env.get("PIP_CONFIG_FILE")
    if chosen == os.devnull:
        return []
    home = Path(env.get("HOME") or Path.home())
    system_dirs = (env.get("XDG_CONFIG_DIRS") or str(etc / "xdg")).split(os.pathsep)
    files = [Path(d) / "pip" / "pip.conf" for d in system_dirs if d]
    files.append(etc / "pip.conf")
    if not (chosen and Path(chosen).exists()):
        user_dir = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
        files += [home / ".pip" / "pip.conf", user_dir / "pip" / "pip.conf"]
    if chosen:
        files.append(Path(chosen))
    return [path for path in files if path.is_file()]


def _normalize(key: str) -> str:
    return key.lower().replace("_", "-")


def _raw_values(env: Mapping[str, str], etc: Path) -> dict[str, tuple[str, str]]:
    """Every key pip would see: ``key -> (value, where it was read)``."""
    by_section: dict[str, dict[str, tuple[str, str]]] = {name: {} for name in SECTIONS}
    for path in config_files(env, etc):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError, OSError) as error:
            raise UsageError(
                f"{path}: pip's configuration cannot be read ({error})",
                hint="Fix or remove that file (kiln reads it to give uv pip's indexes), "
                f"or set PIP_CONFIG_FILE={os.devnull} to ignore pip's files.",
            ) from error
        for section in SECTIONS:
            if parser.has_section(section):
                for key, value in parser.items(section):
                    if value.strip():  # pip drops empty values
                        by_section[section][_normalize(key)] = (value, str(path))
    values: dict[str, tuple[str, str]] = {}
    for section in SECTIONS:
        values.update(by_section[section])
    for name, value in env.items():
        if name.startswith("PIP_") and value.strip():
            values[_normalize(name[4:])] = (value, name)
    return values


def _true(value: str) -> bool:
    return value.strip().lower() in ("1", "y", "yes", "t", "true", "on")


def read_pip_settings(
    env: Mapping[str, str], cwd: Path | None = None, etc: Path = Path("/etc")
) -> PipIndexSettings:
    """pip's index settings under *env*. Relative paths (find-links, constraints) are
    taken from *cwd*, as pip takes them from its working directory."""
    here = cwd or Path.cwd()
    values = _raw_values(env, etc)

    def listed(key: str) -> tuple[str, ...]:
        return tuple(values[key][0].split()) if key in values else ()

    def local(entry: str) -> str:
        if "://" in entry:
            return entry
        return str((here / Path(entry).expanduser()).absolute())

    constraints = []
    for entry in listed("constraint"):
        path = Path(local(entry))
        if not path.is_file():
            raise UsageError(
                f"pip's constraint file {path} (from {values['constraint'][1]}) does not exist",
                hint="Fix the 'constraint' setting there: kiln gives pip's constraints to uv "
                "when it makes build environments.",
            )
        constraints.append(path)
    index = values.get("index-url")
    cert = values.get("cert")
    return PipIndexSettings(
        index_url=index[0].strip() if index else None,
        extra_index_urls=listed("extra-index-url"),
        find_links=tuple(local(entry) for entry in listed("find-links")),
        constraints=tuple(constraints),
        trusted_hosts=listed("trusted-host"),
        no_index=_true(values["no-index"][0]) if "no-index" in values else False,
        cert=cert[0].strip() if cert else None,
        origin={key: where for key, (_, where) in values.items()},
    )


def uv_install_arguments(settings: PipIndexSettings, env: Mapping[str, str]) -> list[str]:
    """``uv pip install`` options for *settings*; a key whose ``UV_*`` variable is set in
    *env* is left to that variable."""
    def unset(*names: str) -> bool:
        return not any(env.get(name) for name in names)

    args: list[str] = []
    if settings.index_url and unset("UV_INDEX_URL", "UV_DEFAULT_INDEX"):
        args += ["--index-url", settings.index_url]
    if unset("UV_EXTRA_INDEX_URL", "UV_INDEX"):
        for url in settings.extra_index_urls:
            args += ["--extra-index-url", url]
    if unset("UV_FIND_LINKS"):
        for entry in settings.find_links:
            args += ["--find-links", entry]
    if unset("UV_CONSTRAINT"):
        for path in settings.constraints:
            args += ["--constraints", str(path)]
    if unset("UV_INSECURE_HOST"):
        for host in settings.trusted_hosts:
            args += ["--allow-insecure-host", host]
    if settings.no_index and unset("UV_NO_INDEX"):
        args.append("--no-index")
    several = settings.extra_index_urls or settings.find_links
    if several and unset("UV_INDEX_STRATEGY"):
        # pip takes the best version from all its sources; uv by default stops at the
        # first index that has the name, which would pick other versions than pip does.
        args += ["--index-strategy", "unsafe-best-match"]
    return args


def uv_environment(settings: PipIndexSettings, env: Mapping[str, str]) -> dict[str, str]:
    """Variables uv needs for *settings*: pip's ``cert`` as ``SSL_CERT_FILE``."""
    if settings.cert and not env.get("SSL_CERT_FILE"):
        return {"SSL_CERT_FILE": settings.cert}
    return {}


def fingerprint(arguments: list[str], settings: PipIndexSettings) -> str:
    """What a resolution depends on: the options, and the constraint files' contents."""
    digest = hashlib.sha256("\0".join(arguments).encode())
    for path in settings.constraints:
        digest.update(b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]
