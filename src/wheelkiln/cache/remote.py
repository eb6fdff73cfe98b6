"""Remote cache storage: where each URL points, whether its server answers, and how a
URL is shown (a password in it never is).

A build names its remote storage with one URL (the recipe's ``cache.remote``; ccache
takes several, separated by spaces). ccache reads ``file:DIR``, ``http://HOST/PATH``
and ``redis://`` / ``redis+unix:``, each with ``|key=value`` attributes; sccache reads
redis, WebDAV (``http``/``https``), memcached and S3 (:mod:`wheelkiln.cache.sccache`).

Each server is probed once before the build (a TCP connect, or the directory of a
``file:`` store). The reason is what the backends do without it, measured here:

* sccache with an unreachable remote never starts its server (WebDAV: at once, Redis:
  after a 10 s timeout), so every compile of the build would fail;
* ccache goes on, counting a ``remote_storage_error`` per compile, but against a host
  that drops packets each compile waits for its timeout.

An unreachable store is left out of the build, which runs on its local cache, and one
warning names the URL. A server that answers the probe but fails during the build (a
WebDAV server refusing ccache's default ``subdirs`` layout answers each PUT with 409) is
named after the build, from the backend's error counters. A link job that missed
because its remote was out says so in its gate (:mod:`wheelkiln.shard.link`).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from wheelkiln import ui
from wheelkiln.errors import KilnError, UsageError

PROBE_TIMEOUT = 2.0
"""Seconds a probe waits for a connection: one slow answer costs this once per build,
never once per compile."""

DEFAULT_PORTS = {
    "redis": 6379,
    "rediss": 6379,
    "http": 80,
    "https": 443,
    "memcached": 11211,
    "tcp": 11211,
    "s3+http": 80,
    "s3+https": 443,
}


def split_remote(value: str) -> list[str]:
    """The storage URLs of one remote setting (ccache: separated by white space)."""
    return value.split()


def _url_part(url: str) -> str:
    """The URL without ccache's ``|key=value`` attributes."""
    return url.split("|", 1)[0]


def url_problem(url: str) -> str | None:
    """Why *url* is not a storage URL kiln can read (``Invalid IPv6 URL`` for
    ``redis://[oops:6379``), or None. Only what the URL parser refuses: a port that is
    no number is left to ccache or sccache to name."""
    try:
        urlsplit(_url_part(url))
    except ValueError as exc:
        return str(exc)
    return None


def check_remote(
    setting: str | None, source: str, error: type[KilnError] = UsageError
) -> None:
    """Refuse a remote setting with a URL kiln cannot read, naming *source* (the option,
    or the recipe file and key), before the build, which would stop on it half-way."""
    for url in split_remote(setting or ""):
        problem = url_problem(url)
        if problem is not None:
            raise error(
                f"{source}: {shown(url)!r} is not a storage URL ({problem}).",
                hint="Give a URL as ccache's remote_storage takes it, e.g. redis://HOST:PORT "
                "(an IPv6 address in brackets: redis://[::1]:6379) or file:/mnt/cache.",
            )


def shown(url: str) -> str:
    """*url* as printed: a password in it (``redis://:secret@host``) becomes ``***``."""
    base, bar, attributes = url.partition("|")
    try:
        parts = urlsplit(base)
    except ValueError:  # the parser cannot tell user from password: both are hidden
        scheme, separator, rest = base.partition("://")
        _, at, host = rest.rpartition("@")
        if at:
            base = f"{scheme}{separator}***@{host}"
    else:
        if parts.password is not None:
            user = parts.username or ""
            host = parts.netloc.rpartition("@")[2]
            base = parts._replace(netloc=f"{user}:***@{host}").geturl()
    kept = [
        a if not a.split("=", 1)[0].lower().endswith(("password", "token", "secret")) else
        f"{a.split('=', 1)[0]}=***"
        for a in attributes.split("|")
    ] if bar else []
    return "|".join([base, *kept])


@dataclass(frozen=True)
class Endpoint:
    """What a probe connects to: a TCP address, a Unix socket, or a directory."""

    kind: str
    """'tcp', 'unix' or 'directory'."""
    host: str = ""
    port: int = 0
    path: str = ""


def endpoint(url: str) -> Endpoint | None:
    """Where *url*'s server listens; None where kiln cannot tell (``s3://BUCKET`` on
    AWS, a scheme served by a storage helper kiln does not know), so it is not probed."""
    base = _url_part(url)
    try:
        parts = urlsplit(base)
    except ValueError:
        return None  # refused before any build (check_remote); the backend would name it
    scheme = parts.scheme.lower()
    if scheme == "file":
        # file:DIR, file:/abs/dir and file:///abs/dir all name a directory
        return Endpoint("directory", path=unquote(parts.path or base.removeprefix("file:")))
    if scheme == "redis+unix":
        return Endpoint("unix", path=unquote(parts.path))
    if scheme in DEFAULT_PORTS and parts.hostname:
        try:
            port = parts.port or DEFAULT_PORTS[scheme]
        except ValueError:
            return None  # ccache or sccache will say what is wrong with the port
        return Endpoint("tcp", host=parts.hostname, port=port)
    return None


def probe(url: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why *url* cannot be used now (``connection refused``), or None when its server
    answers or kiln cannot tell."""
    where = endpoint(url)
    if where is None:
        return None
    if where.kind == "directory":
        path = Path(where.path)
        return None if path.is_dir() else f"{path} is not a directory"
    try:
        if where.kind == "tcp":
            with socket.create_connection((where.host, where.port), timeout=timeout):
                return None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(where.path)
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()


@dataclass(frozen=True)
class RemoteStatus:
    """One remote store of one build: whether the build used it, and how it went."""

    url: str
    """The URL as shown (:func:`shown`)."""
    reachable: bool
    problem: str | None = None
    """Why it was left out, when it was."""
    errors: int = 0
    """Errors the backend counted reading or writing it during the build."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "reachable": self.reachable,
            "problem": self.problem,
            "errors": self.errors,
        }

    def trouble(self) -> str | None:
        """What went wrong with this store, in words; None when nothing did."""
        if not self.reachable:
            return f"remote cache storage {self.url} was unreachable ({self.problem})"
        if self.errors:
            return f"remote cache storage {self.url} failed {self.errors} time(s) during the build"
        return None


@dataclass(frozen=True)
class RemotePlan:
    """The stores a build uses, after probing the ones it was given."""

    usable: str | None
    """The setting to pass to the backend (reachable stores only), or None."""
    statuses: tuple[RemoteStatus, ...]

    def after_build(self, errors: int) -> RemotePlan:
        """The plan with the backend's remote error count of the build, warned about
        once, naming the stores that were used."""
        used = [s for s in self.statuses if s.reachable]
        if not errors or not used:
            return self
        names = ", ".join(s.url for s in used)
        webdav = any(s.url.startswith(("http:", "https:")) for s in used)
        ui.warn(
            f"remote cache storage {names}: {errors} error(s) reading or writing it during "
            "the build; what failed there came from, or went only to, the local cache. "
            "Check the server and the URL"
            + (" (a WebDAV server that does not create directories needs ccache's "
               "'|layout=flat')." if webdav else ".")
        )
        statuses = tuple(
            RemoteStatus(s.url, s.reachable, s.problem, errors if s.reachable else 0)
            for s in self.statuses
        )
        return RemotePlan(self.usable, statuses)


def plan_remote(setting: str | None) -> RemotePlan | None:
    """Probe each store of *setting*; leave out the unreachable ones with one warning
    that names them."""
    if not setting or not setting.strip():
        return None
    statuses: list[RemoteStatus] = []
    usable: list[str] = []
    for url in split_remote(setting):
        problem = probe(url)
        statuses.append(RemoteStatus(shown(url), problem is None, problem))
        if problem is None:
            usable.append(url)
    down = [s for s in statuses if not s.reachable]
    if down:
        ui.warn(
            "; ".join(f"remote cache storage {s.url} is unreachable ({s.problem})" for s in down)
            + ": this build uses its local cache only and stores nothing there."
        )
    return RemotePlan(" ".join(usable) or None, tuple(statuses))
