"""The seat wrapper: stands in for the compiler in shard jobs (stdlib only, per TU).

Run as ``/abs/python -S -E /abs/.../wheelkiln/shard/wrapper.py REAL_COMPILER ARGS...``
(the launcher form: CMake ``CMAKE_<LANG>_COMPILER_LAUNCHER``, setuptools
``CC`` through a one-path launcher script, nvcc ``-ccbin``, the nvcc shim);
:func:`wheelkiln.per_tu.seat_wrapper_argv` gives the faster ``-c`` form.

Per call it decides, in this order:

1. **host-pass**: a host-compiler call that nvcc makes itself (``-ccbin`` is this
   wrapper): a ``tmpxft_`` temp file in the arguments, or nvcc/cicc/cudafe++ as the
   parent process (:func:`wheelkiln.cache.launch.is_nvcc_host_pass`). It is part of
   an in-slice ``.cu`` compile, so it runs the real compiler directly, *without* the
   cache (ccache wraps nvcc, never its ``-ccbin``).
2. **probe**: build-system probes (``CMakeScratch``, ``CompilerId``, ``CMakeTmp``,
   ``cmTC_``, ``meson-private``, ``conftest`` in the source, output or cwd;
   one-source compiles in a temp directory outside the package root, such as
   pybind11's ``has_flag``; compiles from stdin or to ``/dev/null``) always run for
   real: a stubbed probe would silently change the build's configuration. They run
   past the cache, as the link job's compiler fronts run them
   (:func:`wheelkiln.builder.toolchain.probe_bypass_line`): their keys are random.
3. A one-source compile (a **TU**): with ``KILN_SHARD_COUNT`` unset it is a
   **passthrough** (the source partition); in slice it is a **compile** through the
   cache; out of slice it is a **stub**: a copy of ``KILN_STUB_OBJECT`` plus an empty
   depfile where one was asked for. Where ``KILN_AHEAD_DIR`` is set, a stub's slot then
   compiles one of the shard's own TUs early (**ahead**: :mod:`wheelkiln.shard.ahead`),
   and a compile first claims its TU there.
4. A **link**:

   * A shared-library link that consumes an object this shard stubbed, or a library
     this shard deferred, cannot make a whole library here: the link job makes the
     real one. It is **deferred**: the same command links the placeholder object
     (``KILN_PLACEHOLDER_OBJECT``) in place of every object, which gives a real but
     empty shared object with the same name, ``-soname``, rpath and libraries (so
     CMake's install can rewrite its rpath and ``strip`` can read it), in tens of
     milliseconds instead of a full link (an LTO link of a large module takes
     seconds). Its record (**link-deferred**) keeps the real command. Where the
     placeholder link fails (a linker that refuses a version script naming symbols
     it does not see), the real link runs, as below.
   * An executable link may be run by the build (a generator, a probe). One that
     consumes an object this shard stubbed first recompiles it for real
     (**link-probe-rebuild**: the probe that no name list knows, such as
     pycryptodome's ``test1.c``); one that consumes a deferred library first makes
     that library for real, its stubbed objects recompiled and its own deferred
     libraries made the same way (a **link** record each); one that consumes an
     in-tree static library holding stubbed objects (``ar`` packed them like any
     other) first recompiles them and writes them into it (:func:`complete_archive`).
     A shared-library link that consumes such a library is deferred, as above.
   * Every other link runs for real. A shared-library (or nvcc device) link that fails
     with unresolved symbols only is the expected shard failure: its stderr goes
     through, a placeholder output is written, and it exits 0 (**link-unresolved**) so
     setuptools goes on to compile its next extension.
5. Anything else (preprocessing, multi-source calls, ``--version``) is a
   **passthrough** through the cache.

Environment: ``KILN_SHARD_INDEX``, ``KILN_SHARD_COUNT`` (unset/empty: source mode),
``KILN_PACKAGE_ROOT``, ``KILN_BUILD_DIR``, ``KILN_SHARD_LOG``, ``KILN_CACHE``, ``KILN_STUB_OBJECT``,
``KILN_PLACEHOLDER_OBJECT`` (unset: no link is deferred), ``KILN_PARTITION_MAP``,
``KILN_AHEAD_DIR`` (unset: nothing is compiled ahead). Each
call appends one JSON line to ``KILN_SHARD_LOG``:
``{"tu", "action", "seconds", "exit", "output", "argv", "cwd", "pid"}``, and for a
tolerated link the symbols the linker named (``"unresolved"``, ``"unresolved_count"``).

Only ``os``, ``sys`` and ``time`` load on the compile path (and, in a shard that
compiles ahead, ``fcntl`` and ``zlib`` for the claims); ``json`` (which imports ``re``),
``subprocess`` and the diagnostics regexes load only for links and ahead compiles.
"""

# Per-TU hot path: pathlib costs ~8 ms to import (fnmatch, re, urllib), so os.path strings.
# ruff: noqa: PTH100, PTH103, PTH109, PTH113, PTH118, PTH119, PTH120
from __future__ import annotations

import os
import sys
import time

SRC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The ``src`` directory holding the ``wheelkiln`` package. per_tu.py has the same value,
but this one is needed before the package is importable (run by path, below)."""

if __name__ == "__main__":  # run by path: make the package importable, nothing else
    sys.path[0] = SRC_DIR

from wheelkiln import compiler_args  # noqa: E402  (after the sys.path fix above)
from wheelkiln.cache import launch  # noqa: E402
from wheelkiln.shard import partition  # noqa: E402

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

    from wheelkiln.shard.ahead import Owned

AHEAD_CHILD = "KILN_AHEAD_CHILD"
"""In the environment of an ahead compile (:data:`wheelkiln.shard.ahead.CHILD`, named
here too so the compile path imports nothing more)."""
_NOT_A_FILE = frozenset({"-", "/dev/null", "NUL", "nul"})
_TEMP_ROOTS_DEFAULT = ("/tmp", "/var/tmp")
_JOB_TMP = "KILN_JOB_TMP"  # wheelkiln.cache.cython.ENV_JOB_TMP, not imported per call
_SYMBOLS_LOGGED = 8

ACTIONS = (
    "compile",
    "ahead",
    "stub",
    "probe",
    "host-pass",
    "link",
    "link-unresolved",
    "link-probe-rebuild",
    "link-deferred",
    "passthrough",
)


class WrapperConfigError(ValueError):
    """The shard job set the wrapper's environment up wrongly."""


class SeatConfig:
    """The wrapper's configuration, read from ``KILN_*`` environment variables."""

    __slots__ = (
        "ahead_dir",
        "build_dir",
        "cache",
        "log_path",
        "package_root",
        "partition_map_path",
        "placeholder_object",
        "shard_count",
        "shard_index",
        "stub_object",
    )

    def __init__(
        self,
        shard_index: int = 0,
        shard_count: int | None = None,
        package_root: str | None = None,
        log_path: str | None = None,
        cache: str | None = None,
        stub_object: str | None = None,
        partition_map_path: str | None = None,
        build_dir: str | None = None,
        placeholder_object: str | None = None,
        ahead_dir: str | None = None,
    ) -> None:
        self.shard_index = shard_index
        self.shard_count = shard_count
        """None: source mode (pure pass-through, still logged)."""
        self.package_root = package_root
        self.log_path = log_path
        self.cache = cache
        self.stub_object = stub_object
        self.partition_map_path = partition_map_path
        self.build_dir = build_dir
        """The backend's build directory: TUs generated there are keyed relative to it."""
        self.placeholder_object = placeholder_object
        """The object a deferred shared-library link links instead of its own (None: no
        link is deferred)."""
        self.ahead_dir = ahead_dir
        """Where this shard's TUs are claimed for compiling ahead (None: none is;
        :mod:`wheelkiln.shard.ahead`)."""

    @property
    def seat_active(self) -> bool:
        return self.shard_count is not None

    def to_environ(self) -> dict[str, str]:
        """The ``KILN_*`` variables that :meth:`from_environ` reads back as this config,
        and the one place they are written (the shard job puts them in its build's
        environment). Settings left unset are not written, except three that are always
        written, empty when unset, so that a value left in the caller's environment
        never reaches the wrapper: the shard count and index decide whether the seat
        partition acts at all (a stray count would make a source-partitioned shard
        partition a second time), the cache is the one the build was asked for
        (none with ``--cache none``), and only the shard job says where its TUs are
        claimed for compiling ahead."""
        seat = self.shard_count is not None
        environ = {
            "KILN_SHARD_INDEX": str(self.shard_index) if seat else "",
            "KILN_SHARD_COUNT": str(self.shard_count) if seat else "",
            "KILN_CACHE": self.cache or "",
            "KILN_AHEAD_DIR": self.ahead_dir or "",
        }
        optional = {
            "KILN_PACKAGE_ROOT": self.package_root,
            "KILN_BUILD_DIR": self.build_dir,
            "KILN_SHARD_LOG": self.log_path,
            "KILN_STUB_OBJECT": self.stub_object,
            "KILN_PLACEHOLDER_OBJECT": self.placeholder_object,
            "KILN_PARTITION_MAP": self.partition_map_path,
        }
        environ.update({name: value for name, value in optional.items() if value})
        return environ

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> SeatConfig:
        count_text = environ.get("KILN_SHARD_COUNT", "").strip()
        config = cls(
            package_root=environ.get("KILN_PACKAGE_ROOT") or None,
            log_path=environ.get("KILN_SHARD_LOG") or None,
            cache=environ.get("KILN_CACHE") or None,
            stub_object=environ.get("KILN_STUB_OBJECT") or None,
            partition_map_path=environ.get("KILN_PARTITION_MAP") or None,
            build_dir=environ.get("KILN_BUILD_DIR") or None,
            placeholder_object=environ.get("KILN_PLACEHOLDER_OBJECT") or None,
            ahead_dir=environ.get("KILN_AHEAD_DIR") or None,
        )
        if not count_text:
            return config
        index_text = environ.get("KILN_SHARD_INDEX", "").strip()
        try:
            count = int(count_text)
            index = int(index_text)
        except ValueError:
            raise WrapperConfigError(
                f"KILN_SHARD_COUNT={count_text!r} and KILN_SHARD_INDEX={index_text!r} "
                "must both be integers (index 0-based)"
            ) from None
        if count < 1 or not 0 <= index < count:
            raise WrapperConfigError(
                f"KILN_SHARD_INDEX={index} is outside 0..{count - 1} for KILN_SHARD_COUNT={count}"
            )
        if config.package_root is None:
            raise WrapperConfigError(
                "KILN_PACKAGE_ROOT is not set: the TU key is the source path relative "
                "to the package root, so the seat partition needs it"
            )
        config.shard_count = count
        config.shard_index = index
        return config


class Decision:
    """What the wrapper does with one call (``action`` is one of :data:`ACTIONS`)."""

    __slots__ = ("action", "cached", "output", "parsed", "tu")

    def __init__(
        self,
        action: str,
        parsed: compiler_args.CompilerArgs,
        tu: str | None,
        output: str | None,
        *,
        cached: bool = False,
    ) -> None:
        self.action = action
        self.parsed = parsed
        self.tu = tu
        self.output = output
        """Absolute path of the call's output, when it has one."""
        self.cached = cached
        """A probe run through the cache all the same (one in the job's temp directory)."""

    def __repr__(self) -> str:
        return f"Decision({self.action!r}, tu={self.tu!r}, output={self.output!r})"


# --------------------------------------------------------------------------- decide


def _temp_roots(environ: Mapping[str, str]) -> list[str]:
    roots = [environ[name] for name in ("TMPDIR", "TEMP", "TMP") if environ.get(name)]
    roots.extend(_TEMP_ROOTS_DEFAULT)
    return [os.path.normpath(root) for root in roots]


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def decide(
    compiler: str,
    args: Sequence[str],
    cwd: str,
    config: SeatConfig,
    *,
    called_by_nvcc: bool | None = None,
    partition_map: Mapping[str, int] | partition.PartitionMapFile | None = None,
    environ: Mapping[str, str] | None = None,
) -> Decision:
    """Classify one compiler call (pure apart from reading /proc for the parent).

    *called_by_nvcc* overrides the parent-process check (tests, non-Linux hosts); a
    ``tmpxft_`` argument makes a host pass either way.
    """
    parsed = compiler_args.parse_compiler_args(compiler, args)
    raw_output = parsed.object_path() if parsed.stage == "compile" else parsed.output
    output = os.path.normpath(os.path.join(cwd, raw_output)) if raw_output else None

    if called_by_nvcc is None:
        called_by_nvcc = launch.is_nvcc_host_pass(args)
    else:
        called_by_nvcc = called_by_nvcc or compiler_args.has_nvcc_temp_file(args)
    if called_by_nvcc:
        return Decision("host-pass", parsed, None, output)

    tu: str | None = None
    if parsed.is_tu and config.package_root is not None:
        tu = partition.tu_key(parsed.sources[0], config.package_root, cwd, config.build_dir)

    paths = [*parsed.sources, raw_output or "", cwd]
    if any(marker in path for path in paths for marker in compiler_args.PROBE_MARKERS):
        return Decision("probe", parsed, tu, output)
    if parsed.is_tu and (parsed.sources[0] in _NOT_A_FILE or (raw_output or "") in _NOT_A_FILE):
        # `-c x.c -o /dev/null` or source on stdin: a check whose answer is its exit code
        return Decision("probe", parsed, tu, output)

    if parsed.is_tu:
        if not config.seat_active:
            return Decision("passthrough", parsed, tu, output)
        assert tu is not None and config.shard_count is not None
        if tu.startswith("../"):
            source = os.path.normpath(os.path.join(cwd, parsed.sources[0]))
            environ = os.environ if environ is None else environ
            job_tmp = environ.get(_JOB_TMP)
            if job_tmp and _is_under(source, os.path.normpath(job_tmp)):
                # The job's own temp directory (the build's TMPDIR): a probe of
                # psutil's or pybind11's (has_flag), or a backend's copy of the tree
                # (frozenlist's). Every shard compiles it, none stubs it (a stubbed probe
                # would change the build's configuration), and a failure is an answer,
                # not a broken TU. Its names are the same in every job (the site hook),
                # so its key is too: it goes through the cache, and the link job hits.
                return Decision("probe", parsed, tu, output, cached=True)
            roots = _temp_roots(environ)
            if any(_is_under(source, root) for root in roots):
                # A compile in a temp dir outside the tree is a feature probe
                # (pybind11 has_flag, setuptools has_function): its key is random.
                return Decision("probe", parsed, tu, output)
        if partition.is_mine(tu, config.shard_index, config.shard_count, partition_map):
            return Decision("compile", parsed, tu, output)
        return Decision("stub", parsed, tu, output)

    if parsed.stage in ("link", "device-link") and parsed.operands:
        return Decision("link", parsed, None, output)
    return Decision("passthrough", parsed, None, output)


# --------------------------------------------------------------------------- log

_JSON_ESCAPES: dict[int, str] = {code: f"\\u{code:04x}" for code in range(0x20)}
_JSON_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\t"): "\\t"})


def _json_value(value: object) -> str:
    """A minimal JSON encoder for log records: json itself imports re (~5 ms per TU)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.translate(_JSON_ESCAPES) + '"'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(round(value, 6))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_json_value(item) for item in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__} in a wrapper log record")


def encode_record(record: Mapping[str, object]) -> bytes:
    """One JSON line. Undecodable bytes in paths (surrogate escapes) become ``\\udcXX``."""
    body = ", ".join(f'"{key}": {_json_value(value)}' for key, value in record.items())
    return ("{" + body + "}\n").encode("utf-8", "backslashreplace")


def append_record(log_path: str | None, record: Mapping[str, object]) -> None:
    """Append one line with a single O_APPEND write, so parallel TUs never interleave."""
    if not log_path:
        return
    data = encode_record(record)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        while written < len(data):  # only on a full disk or similar: finish the line
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)


def _record(
    decision_tu: str | None,
    action: str,
    seconds: float,
    exit_code: int,
    output: str | None,
    argv: Sequence[str],
    cwd: str,
) -> dict[str, object]:
    return {
        "tu": decision_tu,
        "action": action,
        "seconds": seconds,
        "exit": exit_code,
        "output": output,
        "argv": list(argv),
        "cwd": cwd,
        "pid": os.getpid(),
    }


# --------------------------------------------------------------------------- run


def _wait(pid: int) -> int:
    try:
        _, status = os.waitpid(pid, 0)
    except KeyboardInterrupt:  # Ctrl-C reached the compiler too: let it finish dying
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        return code if code > 0 else 130
    return os.waitstatus_to_exitcode(status)


def spawn_and_wait(command: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run *command* (looked up on PATH) with inherited stdio; its exit code, or
    ``-signal`` when a signal killed it."""
    try:
        pid = os.posix_spawnp(command[0], list(command), os.environ if env is None else env)
    except OSError as error:
        sys.stderr.write(f"kiln wrapper: cannot run {command[0]!r}: {error}\n")
        return 127
    return _wait(pid)


def spawn_capturing_stderr(
    command: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[int, bytes]:
    """Like :func:`spawn_and_wait`, with stderr captured (stdout still inherited)."""
    read_fd, write_fd = os.pipe()
    try:
        pid = os.posix_spawnp(
            command[0],
            list(command),
            os.environ if env is None else env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, write_fd, 2),
                (os.POSIX_SPAWN_CLOSE, read_fd),
            ],
        )
    except OSError as error:
        os.close(read_fd)
        os.close(write_fd)
        return 127, f"kiln wrapper: cannot run {command[0]!r}: {error}\n".encode()
    os.close(write_fd)
    chunks: list[bytes] = []
    with os.fdopen(read_fd, "rb") as stream:
        chunks.extend(iter(lambda: stream.read(65536), b""))
    return _wait(pid), b"".join(chunks)


def spawn_capturing(command: Sequence[str]) -> tuple[int, bytes, bytes]:
    """Like :func:`spawn_and_wait`, with stdout and stderr each captured whole (through
    unnamed temporary files: no pipe to fill while the other is read)."""
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            pid = os.posix_spawnp(
                command[0],
                list(command),
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, err.fileno(), 2),
                ],
            )
        except OSError as error:
            return 127, b"", f"kiln wrapper: cannot run {command[0]!r}: {error}\n".encode()
        code = _wait(pid)
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read()


def _exit_code(code: int) -> int:
    """Turn ``-signal`` into the conventional shell status 128+signal."""
    return 128 - code if code < 0 else code


def write_stub(stub_object: str | None, output: str) -> None:
    """Copy the shard's empty object to *output* (os only: shutil imports ~9 ms)."""
    if not stub_object:
        raise WrapperConfigError(
            "KILN_STUB_OBJECT is not set: the shard job makes it once with "
            "`cc -c -x c /dev/null -o empty.o` and exports its path"
        )
    with open(stub_object, "rb") as handle:
        data = handle.read()
    _write_file(output, data)


def _write_file(path: str, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _escape_make(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "\\ ").replace("#", "\\#")


def write_stub_depfile(parsed: compiler_args.CompilerArgs, cwd: str) -> str | None:
    """Write ``<target>:`` to the depfile the call asked for (ninja needs the file to
    exist and to name the output it expects). Returns the depfile's path."""
    depfile = parsed.depfile_path()
    if depfile is None:
        return None
    targets = parsed.dep_targets or [parsed.object_path() or ""]
    line = " ".join(_escape_make(target) for target in targets) + ":\n"
    path = os.path.join(cwd, depfile)
    _write_file(path, line.encode("utf-8", "surrogateescape"))
    return path


def _partition_map(config: SeatConfig) -> partition.PartitionMapFile | None:
    if not config.partition_map_path:
        return None
    return partition.PartitionMapFile(config.partition_map_path)


_OUTPUT_KEY = '"output": '
_ARGV_KEY = ', "argv": '


def _output_field(line: str) -> str | None:
    """A record line's ``output`` value as written (JSON-encoded), or None. The wrapper
    writes every record's keys in one order (:func:`_record`), and an encoded string holds
    no bare quote, so the value ends where ``, "argv"`` begins."""
    start = line.find(_OUTPUT_KEY)
    if start < 0:
        return None
    start += len(_OUTPUT_KEY)
    end = line.find(_ARGV_KEY, start)
    return line[start:end] if end > 0 else None


def latest_records(
    log_path: str | None, paths: Sequence[str], *, named: Sequence[str] = ()
) -> dict[str, dict[str, object]]:
    """The latest record per output among *paths* (absolute), and per output whose file
    name is one of *named* (an archive names its members by file name alone), from the
    shard's log. One pass over the log with a set lookup per line: a large library's
    link names thousands of objects, and the log holds a line per TU."""
    if not log_path or not (paths or named):
        return {}
    try:
        with open(log_path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return {}
    wanted = {_json_value(path): path for path in paths}
    tails = {_json_value(name)[1:-1] for name in named}
    lines: dict[str, list[str]] = {}
    for line in text.splitlines():
        value = _output_field(line)
        if value is None:
            continue
        if value in wanted or (tails and value[1:-1].rsplit("/", 1)[-1] in tails):
            lines.setdefault(value, []).append(line)
    if not lines:
        return {}
    import json  # here only: json imports re, and links are few

    latest: dict[str, dict[str, object]] = {}
    for value, found in lines.items():
        for line in reversed(found):
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn line: the one before it stands
            output = record.get("output") if isinstance(record, dict) else None
            if isinstance(output, str) and output == wanted.get(value, output):
                latest[output] = record
                break
    return latest


def _is_shared_library(name: str) -> bool:
    base = os.path.basename(name)
    return base.endswith(".so") or ".so." in base


def library_inputs(parsed: compiler_args.CompilerArgs, cwd: str) -> list[str]:
    """Absolute paths of the shared libraries a link names: its ``.so`` operands, and
    each ``-lNAME`` (``-l:FILE``) in each of its ``-L`` directories. Only in-tree
    libraries matter (a shard defers no other), so nothing is looked up in the system's
    directories."""
    found = [
        os.path.normpath(os.path.join(cwd, operand))
        for operand in parsed.operands
        if _is_shared_library(operand)
    ]
    for name in parsed.libraries:
        file_name = name[1:] if name.startswith(":") else f"lib{name}.so"
        found.extend(
            os.path.normpath(os.path.join(cwd, directory, file_name))
            for directory in parsed.library_dirs
        )
    return found


def incomplete_inputs(
    parsed: compiler_args.CompilerArgs, cwd: str, config: SeatConfig
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """(stub records, deferred-link records): the objects this link consumes that this
    shard stubbed, and the shared libraries it consumes that this shard deferred (by
    path, or through a symlink such as ``libfoo.so`` -> ``libfoo.so.1``)."""
    objects = [os.path.normpath(os.path.join(cwd, operand)) for operand in parsed.object_operands()]
    forms = [(library, os.path.realpath(library)) for library in library_inputs(parsed, cwd)]
    latest = latest_records(config.log_path, [*objects, *(form for pair in forms for form in pair)])
    stubbed = [latest[path] for path in objects if latest.get(path, {}).get("action") == "stub"]
    deferred: dict[object, dict[str, object]] = {}  # by output: one library, two names
    for pair in forms:
        for form in pair:
            record = latest.get(form)
            if record is not None and record.get("action") == "link-deferred":
                deferred[record.get("output")] = record
    return stubbed, list(deferred.values())


def static_library_inputs(
    parsed: compiler_args.CompilerArgs, cwd: str, config: SeatConfig
) -> list[str]:
    """Absolute paths of the in-tree static libraries a link names: its ``.a`` operands,
    and each ``-lNAME`` (``-l:FILE``) whose first find in its ``-L`` directories is a
    static library (the linker takes a ``.so`` there first). Only those under the build
    directory or the package root: a shard stubs nothing elsewhere, and a system
    library is not worth reading."""
    roots = tuple(
        os.path.join(os.path.realpath(root), "") for root in (config.build_dir, config.package_root)
        if root
    )  # fmt: skip
    found = [
        os.path.normpath(os.path.join(cwd, operand))
        for operand in parsed.operands
        if operand.endswith(".a")
    ]
    for name in parsed.libraries:
        names = (name[1:],) if name.startswith(":") else (f"lib{name}.so", f"lib{name}.a")
        candidates = (
            os.path.normpath(os.path.join(cwd, directory, file_name))
            for directory in parsed.library_dirs
            for file_name in names
        )
        first = next((path for path in candidates if os.path.isfile(path)), None)
        if first is not None and first.endswith(".a"):
            found.append(first)
    return [
        path for path in dict.fromkeys(found)
        if os.path.isfile(path) and os.path.realpath(path).startswith(roots)
    ]  # fmt: skip


def stubbed_archives(
    parsed: compiler_args.CompilerArgs, cwd: str, config: SeatConfig
) -> list[tuple[str, bool, list[str]]]:
    """(archive, thin, members) for each in-tree static library this link consumes that
    holds objects this shard stubbed (:mod:`wheelkiln.shard.ar_members`)."""
    archives = static_library_inputs(parsed, cwd, config) if config.stub_object else []
    if not archives:
        return []
    from wheelkiln.shard.ar_members import stubbed_members  # links only

    assert config.stub_object is not None
    with open(config.stub_object, "rb") as handle:
        stub = handle.read()
    found = []
    for archive in archives:
        thin, members = stubbed_members(archive, stub)
        if members:
            found.append((archive, thin, members))
    return found


def archive_objects(archive: str, members: Sequence[str], logged: Sequence[str]) -> list[str]:
    """The object file each of *members* (names in the archive) was packed from, among
    the *logged* outputs of the shard. An archive keeps only file names: where two
    objects of the build share one (``a.cpp.o`` of two targets), the one in the
    archive's own object directory is taken (CMake's ``CMakeFiles/<name>.dir/`` for
    ``lib<name>.a``, meson's ``<archive>.p/``); a name still shared, or held by two
    members, is left out rather than guessed, as writing another target's object
    into the archive would build this shard from the wrong code."""
    base = os.path.basename(archive)
    marks = [archive + ".p" + os.sep]
    if base.startswith("lib") and base.endswith(".a"):
        marks.append(os.sep + os.path.join("CMakeFiles", base[3:-2] + ".dir") + os.sep)
    chosen: list[str] = []
    for name in members:
        if members.count(name) > 1:
            continue
        found = [path for path in logged if os.path.basename(path) == name]
        if len(found) > 1:
            found = [path for path in found if any(mark in path for mark in marks)]
        if len(found) == 1:
            chosen.append(found[0])
    return chosen


def complete_archive(archive: str, thin: bool, members: list[str], config: SeatConfig) -> None:
    """Make the stubbed members of *archive* real for a link that needs the whole
    library (an executable the build may run, or a deferred library made for real):
    each stubbed object recompiled from its logged command, then written into the
    archive (``ar rs``: the member of the same name replaced, the symbol index made
    again; for a thin archive only the index), with ``$AR`` where the build sets it.
    Left as it is where no ``ar`` is found or no member's object is known: the link
    then runs as it would have."""
    import shutil
    import subprocess

    if thin:
        records = latest_records(config.log_path, members)
    else:
        logged = latest_records(config.log_path, (), named=members)
        records = {path: logged[path] for path in archive_objects(archive, members, list(logged))}
    rebuilt = [
        path for path, record in records.items()
        if record.get("action") == "stub" and rebuild_stub(record, config) == 0
    ]  # fmt: skip
    # The build's archiver where it names one (llvm-ar indexes clang's LTO bitcode, which
    # GNU ar cannot), else ar.
    named = os.environ.get("AR", "").split()
    ar = (shutil.which(named[0]) if named else None) or shutil.which("ar")
    if not rebuilt or ar is None:
        return
    command = [ar, "s", archive] if thin else [ar, "rs", archive, *rebuilt]
    exit_code = subprocess.call(command)
    sys.stderr.write(
        f"kiln wrapper: {archive} held {len(rebuilt)} object(s) this shard stubbed: compiled "
        f"them for real and {'indexed it again' if thin else 'wrote them into it'} "
        f"(exit {exit_code}), for a link that needs the whole library\n"
    )


def rebuild_stub(record: Mapping[str, object], config: SeatConfig) -> int:
    """Recompile a stubbed object for real from its logged argv and cwd."""
    import subprocess  # here only: it needs a cwd, which posix_spawn cannot set in 3.11

    raw_argv, cwd = record.get("argv"), str(record.get("cwd"))
    if not isinstance(raw_argv, list) or not raw_argv:
        return 1
    argv = [str(item) for item in raw_argv]
    command = launch.compile_command(config.cache, argv[0], argv[1:], cwd=cwd)
    env = launch.compile_environment(config.cache, argv[0])
    started = time.perf_counter()
    exit_code = subprocess.call(command, cwd=cwd, env=env)
    tu = record.get("tu")
    append_record(
        config.log_path,
        _record(
            tu if isinstance(tu, str) else None,
            "link-probe-rebuild",
            time.perf_counter() - started,
            exit_code,
            str(record.get("output")),
            argv,
            cwd,
        ),
    )
    return exit_code


def make_deferred(record: Mapping[str, object], config: SeatConfig, made: set[str]) -> int:
    """Make a deferred library for real (an executable about to link it may be run):
    its stubbed objects recompiled, its own deferred libraries made first, then its
    logged command run in its logged cwd. Each library once per call chain (*made*)."""
    import subprocess  # here only: it needs a cwd, which posix_spawn cannot set in 3.11

    output, raw_argv, cwd = str(record.get("output")), record.get("argv"), str(record.get("cwd"))
    if output in made or not isinstance(raw_argv, list) or not raw_argv:
        return 0
    made.add(output)
    argv = [str(item) for item in raw_argv]
    args = compiler_args.expand_response_files(argv[1:], cwd)
    parsed = compiler_args.parse_compiler_args(argv[0], args)
    stubbed, deferred = incomplete_inputs(parsed, cwd, config)
    for stub in stubbed:
        rebuild_stub(stub, config)
    for library in deferred:
        make_deferred(library, config, made)
    for archive, thin, members in stubbed_archives(parsed, cwd, config):
        complete_archive(archive, thin, members, config)
    started = time.perf_counter()
    command = launch.compile_command(config.cache, argv[0], argv[1:], cwd=cwd)
    exit_code = subprocess.call(command, cwd=cwd)
    append_record(
        config.log_path,
        _record(None, "link", time.perf_counter() - started, exit_code, output, argv, cwd),
    )
    return exit_code


def link_placeholder(
    compiler: str, args: Sequence[str], parsed: compiler_args.CompilerArgs, config: SeatConfig
) -> bool:
    """Link the placeholder object in place of every object of this shared-library link,
    keeping every other argument; True when that made the output."""
    assert config.placeholder_object is not None
    objects = set(parsed.object_operands())
    kept = [arg for arg in compiler_args.expand_response_files(args) if arg not in objects]
    exit_code, _ = spawn_capturing_stderr([compiler, *kept, config.placeholder_object])
    return exit_code == 0


def _deferrable(decision: Decision, config: SeatConfig) -> bool:
    parsed = decision.parsed
    return (
        config.placeholder_object is not None
        and decision.output is not None
        and parsed.stage == "link"
        and parsed.shared
        and not parsed.nvcc  # nvcc's own links also run device links: left as they are
        and not parsed.sources  # a compile and link in one call compiles a TU
    )


def run_link(
    compiler: str, args: Sequence[str], cwd: str, decision: Decision, config: SeatConfig
) -> int:
    parsed = decision.parsed
    started = time.perf_counter()
    argv = [compiler, *args]
    executable = parsed.stage == "link" and not parsed.shared and not parsed.relocatable
    if config.seat_active and (executable or _deferrable(decision, config)):
        stubbed, deferred = incomplete_inputs(parsed, cwd, config)
        # A shared library already deferred for its objects needs no archive read.
        complete = executable or not (stubbed or deferred)
        archived = stubbed_archives(parsed, cwd, config) if complete else []
        if not executable and (stubbed or deferred or archived):
            if link_placeholder(compiler, args, parsed, config):
                seconds = time.perf_counter() - started
                record = _record(None, "link-deferred", seconds, 0, decision.output, argv, cwd)
                append_record(config.log_path, record)
                return 0
        elif executable:
            for record in stubbed:
                rebuild_stub(record, config)
            made: set[str] = set()
            for record in deferred:
                make_deferred(record, config, made)
            for archive, thin, members in archived:
                complete_archive(archive, thin, members, config)

    command = launch.compile_command(config.cache, compiler, args)
    # An executable's failed link keeps its exit code (a build system may be asking
    # whether it links); a shared library's or device link's is the expected shard
    # failure when it is unresolved symbols only. Either way the record says which.
    tolerable = parsed.shared or parsed.stage == "device-link"
    exit_code, stderr = spawn_capturing_stderr(command)
    sys.stderr.buffer.write(stderr)
    sys.stderr.flush()
    action = "link"
    symbols: list[str] = []
    if exit_code > 0:
        from wheelkiln.shard import diagnostics  # here only: its regexes import re

        text = stderr.decode("utf-8", "replace")
        if diagnostics.is_unresolved_only(text):
            symbols = diagnostics.unresolved_symbols(text) or ["?"]
    if symbols and tolerable and decision.output:
        if parsed.stage == "device-link":
            write_stub(config.stub_object, decision.output)  # linked on: must be an object
        else:
            _write_file(decision.output, b"")
        sys.stderr.write(
            f"kiln wrapper: unresolved symbols only, expected in a shard: wrote a "
            f"placeholder {decision.output} and carried on\n"
        )
        action = "link-unresolved"
    record = _record(
        None, action, time.perf_counter() - started, exit_code, decision.output, argv, cwd
    )
    if symbols:
        # why it failed or was tolerated, for the shard gate and summary
        record["unresolved"] = symbols[:_SYMBOLS_LOGGED]
        record["unresolved_count"] = len(symbols)
    append_record(config.log_path, record)
    return 0 if action == "link-unresolved" else _exit_code(exit_code)


def run(compiler: str, args: Sequence[str], config: SeatConfig) -> int:
    """Decide and carry out one call; returns the exit code."""
    cwd = os.getcwd()
    decision = decide(compiler, args, cwd, config, partition_map=_partition_map(config))
    action = decision.action
    argv = [compiler, *args]
    started = time.perf_counter()

    if action == "link":
        return run_link(compiler, args, cwd, decision, config)
    child = os.environ.get(AHEAD_CHILD) == "1"  # started by another call of this shard
    ahead_dir = None if child else _ahead_dir(config)
    held: int | None = None
    waited = 0.0
    if action == "stub":
        assert decision.output is not None
        write_stub(config.stub_object, decision.output)
        write_stub_depfile(decision.parsed, cwd)
        exit_code = 0
    elif action == "host-pass":
        exit_code = spawn_and_wait(argv)
    else:  # compile, passthrough, probe: the real thing
        if action == "compile" and ahead_dir and decision.output:
            held, waited = _before_compile(ahead_dir, decision.output, config)
        # As the link job's fronts do: a probe past the cache, but one in the job's temp
        # directory (the fronts cache it too).
        cache = None if action == "probe" and not decision.cached else config.cache
        command = launch.compile_command(cache, compiler, args)
        exit_code = spawn_and_wait(command, launch.compile_environment(cache, compiler))
        if held is not None:
            os.close(held)
    if action == "compile" and child:
        action = "ahead"  # (shard/ahead.py)
    record = _record(
        decision.tu, action, time.perf_counter() - started, exit_code, decision.output, argv, cwd
    )
    if waited > 0:
        record["waited"] = waited
    append_record(config.log_path, record)
    if action == "stub" and ahead_dir:
        _after_stub(ahead_dir, config)  # this slot's time, after the stub's own record
    return _exit_code(exit_code)


def _before_compile(ahead_dir: str, output: str, config: SeatConfig) -> tuple[int | None, float]:
    """:func:`wheelkiln.shard.ahead.before_compile`; where compiling ahead itself fails
    (its directory unwritable, a damaged queue), the TU is compiled as without it."""
    from wheelkiln.shard import ahead

    try:
        return ahead.before_compile(ahead_dir, output, _owned(config))
    except (OSError, ValueError) as error:
        sys.stderr.write(f"kiln wrapper: compiling ahead is off for this call: {error}\n")
        return None, 0.0


def _after_stub(ahead_dir: str, config: SeatConfig) -> None:
    """:func:`wheelkiln.shard.ahead.after_stub`: an optimisation, so a failure of its own
    never fails the stub."""
    from wheelkiln.shard import ahead

    try:
        ahead.after_stub(ahead_dir, _owned(config))
    except (OSError, ValueError) as error:
        sys.stderr.write(f"kiln wrapper: compiling ahead is off for this call: {error}\n")


def _ahead_dir(config: SeatConfig) -> str | None:
    """Where this shard claims TUs for compiling ahead, or None: compiling ahead needs the
    seat partition and a cache (a call an ahead compile started takes no claim)."""
    if not (config.ahead_dir and config.cache and config.seat_active):
        return None
    return config.ahead_dir


def _owned(config: SeatConfig) -> Owned:
    """The output and TU key of a command line of ninja's when it is one of this shard's
    compiles."""
    from wheelkiln.per_tu import SEAT_SCRIPT

    partition_map = _partition_map(config)

    def owned(words: list[str], cwd: str) -> tuple[str, str | None] | None:
        inner = words[1:] if os.path.basename(words[0]) == SEAT_SCRIPT else words
        if not inner:
            return None
        decision = decide(
            inner[0], inner[1:], cwd, config, called_by_nvcc=False, partition_map=partition_map
        )
        if decision.action != "compile" or decision.output is None:
            return None
        return decision.output, decision.tu

    return owned


def launcher_argv(python: str | None = None) -> list[str]:
    """The command that starts the wrapper fastest: :func:`wheelkiln.per_tu.seat_wrapper_argv`."""
    from wheelkiln import per_tu

    return per_tu.seat_wrapper_argv(python)


def exit_fast(code: int) -> NoReturn:
    """Flush stdio and leave without the interpreter's teardown (~1 ms on every TU)."""
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105  (contextlib would be one more import per TU)
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe: nothing left to say
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        sys.stderr.write("usage: wrapper.py REAL_COMPILER [ARGS...]\n")
        return 2
    try:
        config = SeatConfig.from_environ(os.environ)
        return run(arguments[0], arguments[1:], config)
    except (WrapperConfigError, launch.NvccEnvironmentError) as error:
        sys.stderr.write(f"kiln wrapper: {error}\n")
        return 2


if __name__ == "__main__":
    exit_fast(main())
