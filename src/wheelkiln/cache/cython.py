"""The Cython transpile cache: its store, its keys, its log (stdlib only, per transpile).

Cython's own cache (``cythonize(cache=...)``) keys an entry by the *absolute* path of the
``.pyx``, so a shard tree, the link job's tree and a second checkout never share one,
and it covers only setuptools' in-process ``cythonize()``. This cache serves both
fronts of :mod:`wheelkiln.cython_front` (the ``cython`` command line that meson and
scripts run, and ``cythonize()`` in-process) and keys every path relative to the
package root or the build directory.

Lookup is in two steps, as ccache's direct mode does, because the files a ``.pyx``
cimports and includes are known only after Cython has read it:

1. the **module key**: the Cython version, the source's content and its path relative
   to the package root (it decides the module name), the output's path, the working
   directory, and the options and directives with every absolute path of the tree
   written as a token (:class:`PathKeys`);
2. its **manifest** lists earlier transpiles of that key, each with the dependencies
   Cython's own scan found (the ``.pxd``/``.pxi`` files, by path key and content digest)
   and the digests of the files it wrote. The first entry whose dependencies all still
   have their recorded content is a hit; its files are written back byte for byte.

Dependencies inside the Cython package itself (``libc/*.pxd``) are covered by the
version and not hashed. The cache lives in ``<compiler cache dir>/kiln-cython/<namespace>``,
so a shard's archive carries it to the link job with the compiler cache.

Each transpile appends one JSON line to the job's log (``KILN_CYTHON_LOG``):
``{"source", "output", "outcome", "seconds", "front"}`` with outcome ``hit``, ``miss``,
``stub`` (a shard's transpile of a TU another shard owns) or ``uncached`` (a call this
cache does not handle, such as ``--annotate``); :func:`read_log` counts them.
"""

# Per-transpile path: pathlib costs ~8 ms to import, so os.path strings.
# ruff: noqa: PTH100, PTH103, PTH105, PTH113, PTH116, PTH117, PTH118, PTH119, PTH120, PTH208
from __future__ import annotations

import os

from wheelkiln.per_tu import CYTHON_FRONT_MARK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

SCHEMA = "kiln-cython-1"
"""Part of every module key: a change in how keys are made retires every entry."""

CACHE_SUBDIR = "kiln-cython"
"""The cache's directory inside the compiler cache's directory."""

ENV_CACHE = "KILN_CYTHON_CACHE"
ENV_LOG = "KILN_CYTHON_LOG"
ENV_RECACHE = "KILN_CYTHON_RECACHE"
ENV_ROOT = "KILN_CYTHON_ROOT"
ENV_BUILD_DIR = "KILN_CYTHON_BUILD_DIR"
ENV_ENVS = "KILN_CYTHON_ENVS"
ENV_JOB_TMP = "KILN_JOB_TMP"
"""The job's own temp directory, which kiln makes the build's ``TMPDIR``: the Cython
fronts key a path in it as ``<tmp>/...``, the seat wrapper and the shard's Cython front
leave the TUs in it to every shard, and the site hook names Python's temp files in it
deterministically (:data:`SITE_HOOK`)."""

OUTCOMES = ("hit", "miss", "stub", "uncached")
_MANIFEST_ENTRIES_KEPT = 8


def cache_directory(compiler_cache_dir: str | os.PathLike[str], namespace: str | None) -> str:
    """Where a build's Cython entries live, beside the compiler cache's own."""
    return os.path.join(os.fspath(compiler_cache_dir), CACHE_SUBDIR, namespace or "default")


def environment(
    *,
    cache_dir: str | None,
    log_path: str,
    package_root: str,
    build_dir: str,
    envs_dirs: Sequence[str],
    recache: bool,
    job_tmp: str | None = None,
) -> dict[str, str]:
    """The variables both fronts read: the one place they are written. No *cache_dir*
    (an uncached build) leaves the cache out and the fronts only log and stub.
    *envs_dirs*: where the build sees its environments (:func:`wheelkiln.paths.envs_view`)
    first, then where they are: a script of the environment's (``cython`` from a uv
    venv) starts its interpreter by the resolved path, so Cython finds a ``.pxd`` on
    ``sys.path`` there."""
    env = {
        ENV_LOG: log_path,
        ENV_ROOT: package_root,
        ENV_BUILD_DIR: build_dir,
        ENV_ENVS: os.pathsep.join(envs_dirs),
        ENV_RECACHE: "1" if recache else "",
    }
    if cache_dir:
        env[ENV_CACHE] = cache_dir
    if job_tmp:
        env[ENV_JOB_TMP] = job_tmp
    return env


# --------------------------------------------------------------------------- paths


def under(path: str, root: str) -> bool:
    """*path* lies below the directory *root* (both absolute and normalised)."""
    return path.startswith(root.rstrip("/") + "/")


class PathKeys:
    """Writes absolute paths as keys that hold in every copy of the tree, and back.

    ``<build>/x`` below the build directory (checked first: it may lie inside the
    tree), ``<root>/x`` below the package root, ``<tmp>/x`` below the job's temp
    directory (*job_tmp*: a backend that builds a copy of the tree in a temporary
    directory, as frozenlist's does), ``<cython>/x`` inside the Cython package,
    ``<envs>/KEY/x`` inside a build environment (a ``.pxd`` of numpy's, an include
    directory) by any of *envs_dirs*, so the key is the same in every home and workdir
    (a token reads back as the first of them); anything else stays absolute.
    """

    __slots__ = ("tokens",)

    def __init__(
        self,
        root: str | None,
        build_dir: str | None,
        cython_dir: str | None,
        envs_dirs: Sequence[str] = (),
        job_tmp: str | None = None,
    ) -> None:
        pairs = [("<build>", build_dir), ("<root>", root), ("<tmp>", job_tmp),
                 ("<cython>", cython_dir), *(("<envs>", envs) for envs in envs_dirs)]  # fmt: skip
        self.tokens = [(token, os.path.normpath(path)) for token, path in pairs if path]

    def key(self, path: str, cwd: str) -> str:
        absolute = os.path.normpath(os.path.join(cwd, path))
        for token, base in self.tokens:
            if absolute == base:
                return token
            if under(absolute, base):
                return f"{token}/{os.path.relpath(absolute, base)}"
        return absolute

    def path(self, key: str) -> str:
        for token, base in self.tokens:
            if key == token:
                return base
            if key.startswith(token + "/"):
                return os.path.join(base, key[len(token) + 1 :])
        return key

    def tokenize(self, text: str) -> str:
        """*text* with every absolute path of the tree written as its token."""
        for token, base in sorted(self.tokens, key=lambda pair: -len(pair[1])):
            text = text.replace(base, token)
        return text

    def detokenize(self, text: str) -> str:
        for token, base in self.tokens:
            text = text.replace(token, base)
        return text


def sha256_bytes(data: bytes) -> str:
    # The interpreter's own sha256 where it has one: hashlib loads OpenSSL (~6 ms per
    # start, paid by every transpile, hit or not); the digest is the same.
    try:
        from _sha256 import sha256  # type: ignore[import-not-found, unused-ignore]  # 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found, unused-ignore]  # 3.12+
        except ImportError:
            from hashlib import sha256
    return str(sha256(data).hexdigest())


def file_digest(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return sha256_bytes(handle.read())
    except OSError:
        return None


# --------------------------------------------------------------------------- JSON
# The per-transpile path reads a manifest and appends a log line. ``import json`` costs
# ~20 ms a start (it imports re, enum and functools), more than the rest of a hit;
# CPython's C scanner and string encoder (``_json``, which json itself uses) do the same
# work without them. Writes of manifests (after a real transpile) still use json.


class _ScanContext:
    """What ``_json.make_scanner`` reads from a decoder: json.loads' defaults, with
    NaN and Infinity refused."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> object:
        raise ValueError(f"{name} is not JSON")


def loads(text: str) -> object:
    """``json.loads(text)`` (a ValueError on anything that is not one JSON value)."""
    try:
        from _json import make_scanner
    except ImportError:  # no C accelerator (PyPy): the real thing
        import json

        return json.loads(text)
    stripped = text.strip(" \t\n\r")
    try:
        value, end = make_scanner(_ScanContext)(stripped, 0)  # type: ignore[arg-type]
    except StopIteration as exc:
        raise ValueError("no JSON value") from exc
    if end != len(stripped):
        raise ValueError(f"extra data at {end}")
    return value


def dumps_line(record: Mapping[str, object]) -> str:
    """``json.dumps(record, sort_keys=True)`` for a flat record of strings, finite
    numbers, booleans and None; anything else goes through json."""
    quote: Callable[[str], str] | None
    try:
        from _json import encode_basestring_ascii as quote
    except ImportError:
        quote = None
    items: list[str] = []
    for key in sorted(record):
        value = record[key]
        if quote is None:
            break
        if isinstance(value, str):
            text = quote(value)
        elif value is None:
            text = "null"
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int) or (isinstance(value, float) and abs(value) < float("inf")):
            text = repr(value)  # json writes numbers as repr does
        else:  # NaN, infinities, containers
            break
        items.append(f"{quote(key)}: {text}")
    else:
        return "{" + ", ".join(items) + "}"
    import json

    return json.dumps(dict(record), sort_keys=True)


def module_key(parts: Sequence[str]) -> str:
    return sha256_bytes("\0".join([SCHEMA, *parts]).encode("utf-8", "surrogateescape"))


# --------------------------------------------------------------------------- versions


def find_real(name: str, front_dir: str | None, environ: Mapping[str, str]) -> str | None:
    """The first *name* on PATH that is not a kiln front (in *front_dir*, or any other
    script that carries the front's mark)."""
    front = os.path.realpath(front_dir) if front_dir else None
    for entry in environ.get("PATH", "").split(os.pathsep):
        if not entry or (front and os.path.realpath(entry) == front):
            continue
        candidate = os.path.join(entry, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            with open(candidate, "rb") as handle:
                if CYTHON_FRONT_MARK.encode() in handle.read(512):
                    continue
            return candidate
    return None


def cython_package(real: str) -> tuple[str, str] | None:
    """(version, package directory) of the Cython that the script *real* runs: the
    ``site-packages/Cython`` of the environment the script sits in (``<env>/bin/cython``;
    pip's and uv's console scripts alike), else of its ``#!`` interpreter.
    ``Shadow.py`` holds the version."""
    prefixes = [os.path.dirname(os.path.dirname(os.path.abspath(real)))]
    try:
        with open(real, "rb") as handle:
            first = handle.readline().decode("utf-8", "replace")
    except OSError:
        return None
    interpreter = first[2:].strip().split(" ")[0] if first.startswith("#!") else ""
    if os.path.isabs(interpreter):
        prefixes.append(os.path.dirname(os.path.dirname(interpreter)))
    for prefix in prefixes:
        lib = os.path.join(prefix, "lib")
        try:
            pythons = sorted(name for name in os.listdir(lib) if name.startswith("python"))
        except OSError:
            continue
        for python in pythons:
            package = os.path.join(lib, python, "site-packages", "Cython")
            version = _shadow_version(os.path.join(package, "Shadow.py"))
            if version:
                return version, package
    return None


def _shadow_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("'\"")
    except OSError:
        return None
    return None


def version_path(cache_dir: str, real: str, args: Sequence[str]) -> str | None:
    """Where the answer of the Cython script *real* to *args* (``-V``) is kept: under a
    key of the script (path, inode, size, mtime) and the Cython package it runs
    (directory and ``Shadow.py`` version). Reinstalling Cython rewrites its script, so
    the key changes with the answer. None when the script or its package cannot be read."""
    package = cython_package(real)
    try:
        script = os.stat(real)
    except OSError:
        return None
    if package is None:
        return None
    key = module_key(
        ["version", os.path.abspath(real),
         f"{script.st_ino}:{script.st_size}:{script.st_mtime_ns}", *package, *args]
    )  # fmt: skip
    return os.path.join(cache_dir, "versions", key[:2], key + ".json")


def read_version(path: str) -> tuple[int, str, str] | None:
    """A kept answer: (exit code, stdout, stderr), or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            kept = loads(handle.read())
        if isinstance(kept, dict):
            return int(kept["code"]), str(kept["stdout"]), str(kept["stderr"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


ENV_VERSION_STDOUT = "KILN_CYTHON_VERSION_STDOUT"
ENV_VERSION_STDERR = "KILN_CYTHON_VERSION_STDERR"
VERSION_QUESTION = ("-V",)
"""What meson asks ``cython`` for every machine it configures: each a Python start and
Cython's import, 0.04 s apiece on a quiet machine (0.3 s under load)."""


def version_environment(cache_dir: str | None, search_path: str) -> dict[str, str]:
    """The variables with which the ``cython`` front script answers ``cython -V`` by
    itself, without starting Python: the kept answer of the real ``cython`` first on
    *search_path* (the build's PATH behind the fronts), when one is kept and was a
    success. Nothing otherwise: the Python front then asks Cython and keeps its answer
    (:func:`wheelkiln.cython_front.version_answer`) for the next build."""
    real = find_real("cython", None, {"PATH": search_path})
    path = version_path(cache_dir, real, VERSION_QUESTION) if cache_dir and real else None
    kept = read_version(path) if path else None
    if kept is None or kept[0] != 0:
        return {}
    return {ENV_VERSION_STDOUT: kept[1], ENV_VERSION_STDERR: kept[2]}


# --------------------------------------------------------------------------- depfiles


def depfile_paths(text: str) -> list[str]:
    """The prerequisites of a make-style depfile as Cython writes it (spaces escaped)."""
    _, _, rest = text.partition(": ")
    paths: list[str] = []
    for line in rest.replace("\\\n", "\n").splitlines():
        current = ""
        for word in line.strip().split(" "):
            if current.endswith("\\"):
                current = current[:-1] + " " + word
                continue
            if current:
                paths.append(current)
            current = word
        if current and current != "\\":
            paths.append(current)
    return [path for path in paths if path]


# --------------------------------------------------------------------------- store


class Entry:
    """One cached transpile: its dependencies and the files it wrote."""

    __slots__ = ("dependencies", "depfile", "outputs")

    def __init__(
        self,
        dependencies: list[list[str | None]],
        outputs: dict[str, str],
        depfile: str | None = None,
    ) -> None:
        self.dependencies = dependencies
        """``[path key, digest or None]``: None for files covered by the Cython version."""
        self.outputs = outputs
        """File name (the main output is ``""``, others beside it) → content digest."""
        self.depfile = depfile
        """The depfile Cython wrote, tokenized (:meth:`PathKeys.tokenize`), if any."""

    def as_json(self) -> dict[str, object]:
        return {"deps": self.dependencies, "outputs": self.outputs, "depfile": self.depfile}


class TranspileCache:
    """A directory of manifests (by module key) and results (by content digest)."""

    __slots__ = ("directory",)

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _manifest(self, key: str) -> str:
        return os.path.join(self.directory, "manifests", key[:2], key + ".json")

    def _result(self, digest: str) -> str:
        return os.path.join(self.directory, "results", digest[:2], digest)

    def _entries(self, key: str) -> list[dict[str, object]]:
        try:
            with open(self._manifest(key), encoding="utf-8") as handle:
                data = loads(handle.read())
        except (OSError, ValueError):
            return []
        return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []

    def lookup(self, key: str, paths: PathKeys) -> Entry | None:
        """The newest entry of *key* whose dependencies all have their recorded content
        now and whose results are all present."""
        for item in self._entries(key):
            deps, outputs = item.get("deps"), item.get("outputs")
            if not isinstance(deps, list) or not isinstance(outputs, dict):
                continue
            if all(
                isinstance(dep, list)
                and len(dep) == 2
                and (dep[1] is None or file_digest(paths.path(str(dep[0]))) == dep[1])
                for dep in deps
            ) and all(os.path.isfile(self._result(str(digest))) for digest in outputs.values()):
                depfile = item.get("depfile")
                return Entry(
                    [list(dep) for dep in deps],
                    {str(name): str(digest) for name, digest in outputs.items()},
                    depfile if isinstance(depfile, str) else None,
                )
        return None

    def read_result(self, digest: str) -> bytes:
        with open(self._result(digest), "rb") as handle:
            return handle.read()

    def store(self, key: str, entry: Entry, contents: Mapping[str, bytes]) -> None:
        """Add *entry* (its files' *contents* by digest) in front of *key*'s manifest."""
        import json

        for digest, data in contents.items():
            path = self._result(digest)
            if not os.path.isfile(path):
                write_atomic(path, data)
        entries = [entry.as_json(), *self._entries(key)][:_MANIFEST_ENTRIES_KEPT]
        text = json.dumps(entries, indent=1, sort_keys=True)
        write_atomic(self._manifest(key), text.encode("utf-8", "surrogateescape"))


def write_atomic(path: str, data: bytes) -> None:
    """Write *path* whole or not at all (parallel transpiles may write the same entry)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


# --------------------------------------------------------------------------- log

LOG_NAME = "cython.jsonl"
"""The job directory's Cython log."""


def append_log(log_path: str | None, record: Mapping[str, object]) -> None:
    """One JSON line, written with a single O_APPEND write so parallel calls never tear."""
    if not log_path:
        return
    data = (dumps_line(record) + "\n").encode("utf-8", "backslashreplace")
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_log(log_path: str | os.PathLike[str]) -> dict[str, object]:
    """A build's Cython counters: ``hits``, ``misses`` (``uncached`` calls count as
    misses: the job paid for them), ``stubs``, ``total`` (hits + misses) and the
    ``missed`` sources. Torn or foreign lines are skipped."""
    import json

    counts = dict.fromkeys(OUTCOMES, 0)
    missed: list[str] = []
    try:
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        outcome = record.get("outcome") if isinstance(record, dict) else None
        if outcome not in counts:
            continue
        counts[outcome] += 1
        if outcome in ("miss", "uncached"):
            missed.append(str(record.get("source")))
    misses = counts["miss"] + counts["uncached"]
    return {
        "hits": counts["hit"],
        "misses": misses,
        "uncached": counts["uncached"],
        "stubs": counts["stub"],
        "total": counts["hit"] + misses,
        "missed": sorted(set(missed)),
    }


# --------------------------------------------------------------------------- in-process hook

SITE_HOOK = '''\
"""Written by wheelkiln: routes Cython's in-process cythonize() and its shared utility
module through kiln's Cython cache (wheelkiln.cython_front.install) once
Cython.Build.Dependencies, Cython.Build.SharedModule or
Cython.Distutils.old_build_ext is imported; names Python's temp files in the job's
own temp directory the same way in every job once tempfile is imported; then runs the
sitecustomize this one shadows, if any."""
import sys


def _job_tmp_is_tmpdir():
    import os

    # kiln made the job's temp directory the build's TMPDIR, and the build kept it.
    job_tmp = os.environ.get("KILN_JOB_TMP")
    return bool(job_tmp) and os.environ.get("TMPDIR") == job_tmp


def _kiln_names(tempfile):
    if not _job_tmp_is_tmpdir():
        return
    import random

    characters = "abcdefghijklmnopqrstuvwxyz0123456789_"

    def candidates():
        # The job's temp directory is its own and starts empty. Every call tries the
        # same names in the same order and takes the first free one, so a temp path
        # (frozenlist's backend builds a copy of its tree in a TemporaryDirectory) is
        # the same in every job, whatever other temp files a job made before it.
        # Past the first hundred taken, random names, as tempfile's own.
        fixed = random.Random(0)
        for _ in range(100):
            yield "".join(fixed.choices(characters, k=8))
        free = random.Random()
        while True:
            yield "".join(free.choices(characters, k=8))

    random_names, make_name = tempfile._get_candidate_names, tempfile.mktemp

    def mktemp(*args, **kwargs):
        # mktemp creates nothing: two calls before either name is used would get the
        # same first free name. It keeps tempfile's random names.
        tempfile._get_candidate_names = random_names
        try:
            return make_name(*args, **kwargs)
        finally:
            tempfile._get_candidate_names = candidates

    tempfile._get_candidate_names = candidates
    tempfile.mktemp = mktemp


def _kiln_sockets(util):
    if not _job_tmp_is_tmpdir():
        return
    import os

    make = util.get_temp_dir

    def get_temp_dir():
        # multiprocessing puts its sockets there (a Manager's listener, the forkserver):
        # "pymp-XXXXXXXX/listener-XXXXXXXX" below a deep job directory is longer than
        # an AF_UNIX path may be (108 bytes), so they go where they went without kiln.
        import tempfile

        if len(tempfile.gettempdir()) <= 64:
            return make()
        saved = tempfile.tempdir
        tempfile.tempdir = os.environ.get("KILN_OUTER_TMPDIR") or "/tmp"
        try:
            return make()
        finally:
            tempfile.tempdir = saved

    util.get_temp_dir = get_temp_dir


class _KilnCythonHook:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in (
            "Cython.Build.Dependencies",
            "Cython.Build.SharedModule",
            "Cython.Distutils.old_build_ext",
            "tempfile",
            "multiprocessing.util",
        ):
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            if name == "tempfile":
                _kiln_names(module)
                return
            if name == "multiprocessing.util":
                _kiln_sockets(module)
                return
            if {src!r} not in sys.path:
                sys.path.append({src!r})
            from wheelkiln.cython_front import install

            install(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _KilnCythonHook)
if "tempfile" in sys.modules:
    _kiln_names(sys.modules["tempfile"])
if "multiprocessing.util" in sys.modules:
    _kiln_sockets(sys.modules["multiprocessing.util"])


def _chain():
    import os  # loaded by site already; importlib.util is not (~10 ms a start), so
    # it is imported only where there is a shadowed sitecustomize to run.

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if entry and os.path.abspath(entry) != here:
            candidate = os.path.join(entry, "sitecustomize.py")
            if os.path.isfile(candidate):
                import importlib.util

                spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", candidate)
                if spec is not None and spec.loader is not None:
                    spec.loader.exec_module(importlib.util.module_from_spec(spec))
                return


_chain()
'''


def write_site_hook(scripts_dir: str, src_dir: str) -> str:
    """Write the ``sitecustomize.py`` that puts the in-process hook in place, in a
    directory named by its content (one path for the same bytes in every job); returns
    the directory, for ``PYTHONPATH``."""
    text = SITE_HOOK.format(src=src_dir)
    directory = os.path.join(scripts_dir, "cython-" + sha256_bytes(text.encode())[:20])
    path = os.path.join(directory, "sitecustomize.py")
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return directory
    except OSError:
        pass
    write_atomic(path, text.encode())
    # Its bytecode beside it, for build environments of this interpreter's version:
    # every Python start of the build imports it, and where bytecode is not written
    # (PYTHONDONTWRITEBYTECODE) each start would compile it again.
    import contextlib
    import importlib.util
    import py_compile

    with contextlib.suppress(OSError, py_compile.PyCompileError):  # else Python compiles it
        py_compile.compile(path, cfile=importlib.util.cache_from_source(path), doraise=True)
    return directory
