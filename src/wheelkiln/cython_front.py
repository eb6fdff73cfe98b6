"""kiln's two Cython fronts: every transpile of a build goes through the Cython cache
(:mod:`wheelkiln.cache.cython`), and in a shard only the owner of its C TU pays for it.

* **The command line** (stdlib only, once per transpile): a ``cython`` (and ``cython3``)
  script first on the build's PATH runs :func:`main`, which finds the real one further
  down PATH. meson's ``cython`` program and scripts that run ``cython`` go this way.
* **In process**: setuptools builds call ``Cython.Build.cythonize()`` inside
  ``setup.py`` (and the ``cythonize`` command runs the same function), where no PATH
  reaches. A ``sitecustomize.py`` on the build's ``PYTHONPATH``
  (:data:`wheelkiln.cache.cython.SITE_HOOK`) calls :func:`install` when
  ``Cython.Build.Dependencies`` is imported, which wraps its ``cythonize_one``: every
  module cythonize() decides to transpile goes through the same cache, whatever
  ``cache=`` the setup.py passes. ``CYTHON_CACHE_DIR`` alone would not do: Cython's own
  cache is off unless setup.py asks for it, and it keys by absolute path.

Paths in the C that Cython writes: the meson form (``cython SOURCE -o OUT`` run in the
build directory) writes only paths relative to the package (``demo_cython/_m1.pyx``), so
an entry serves every copy of the tree byte for byte. ``cythonize()`` also writes the
absolute ``.pyx`` path into its ``Cython Metadata`` comment at the top; the key holds
that path as ``<root>/...``, so another copy of the tree hits and gets the bytes of the
build that stored the entry, comment included (no compiler reads a comment, and the
object ccache then makes matches the one it already holds).

**Cython's shared utility module** (Cython 3.1: ``cython --generate-shared=OUT.c`` on
the command line, which meson projects such as scikit-learn run, and
``cythonize(shared_utility_qualified_name=...)`` in process) is a transpile with no
source: Cython writes an empty ``.pyx`` into a fresh temporary directory and compiles
the utility code into OUT.c, whose comments name that directory's random name. Run
again it writes other bytes, so its C TU (a megabyte of C) missed the compiler cache
in every build, and sharded, the link job's copy never matched the owning shard's. It
goes through the cache like any transpile: keyed by the Cython version, the output's
and the working directory's path keys and the options, with no dependencies (its input
is Cython's own utility code, which the version covers); a hit writes the bytes of the
transpile that stored it, and in a shard only the owner of OUT.c runs it.

In a shard job (``KILN_SHARD_COUNT`` set, :class:`wheelkiln.shard.wrapper.SeatConfig`),
a transpile whose C output is a TU another shard owns (the same partition key the
seat wrapper computes for that ``.c``) writes a placeholder and its depfile instead:
the wrapper then stubs the TU's compile, as it would any other.
"""

# Per-transpile path: pathlib costs ~8 ms to import, so os.path strings.
# ruff: noqa: PTH100, PTH108, PTH109, PTH113, PTH116, PTH118, PTH119, PTH120, PTH122, SIM105
from __future__ import annotations

import os
import sys
import time

from wheelkiln.cache import cython as store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from types import ModuleType

_VALUE_OPTIONS = frozenset(
    {"-o", "--output-file", "-I", "--include-dir", "-w", "--working", "-X", "--directive",
     "-E", "--compile-time-env", "--module-name", "--shared", "-j", "--parallel"}
)  # fmt: skip
_UNCACHED_OPTIONS = frozenset(
    {"-a", "--annotate", "--annotate-fullc", "--annotate-coverage", "-V", "--version",
     "-h", "--help", "-k", "--keep-going"}
)  # fmt: skip
_SOURCE_EXTENSIONS = (".pyx", ".py")
SHARED_OPTION = "--generate-shared"
"""Cython's option that writes the shared utility module (module doc)."""


def _now() -> float:
    return time.perf_counter()


class Settings:
    """What the build told the fronts (:func:`wheelkiln.cache.cython.environment`)."""

    __slots__ = ("build_dir", "cache", "envs_dirs", "job_tmp", "log", "recache", "root")

    def __init__(self, environ: Mapping[str, str]) -> None:
        directory = environ.get(store.ENV_CACHE) or None
        self.cache = store.TranspileCache(directory) if directory else None
        self.log = environ.get(store.ENV_LOG) or None
        self.recache = bool(environ.get(store.ENV_RECACHE))
        self.root = environ.get(store.ENV_ROOT) or None
        self.build_dir = environ.get(store.ENV_BUILD_DIR) or None
        self.envs_dirs = [d for d in environ.get(store.ENV_ENVS, "").split(os.pathsep) if d]
        self.job_tmp = environ.get(store.ENV_JOB_TMP) or None

    def paths(self, cython_dir: str | None) -> store.PathKeys:
        return store.PathKeys(self.root, self.build_dir, cython_dir, self.envs_dirs, self.job_tmp)


def owned_elsewhere(output: str, cwd: str, environ: Mapping[str, str]) -> bool:
    """True in a seat-partitioned shard when another shard owns the C TU *output*. A TU
    in the job's temp directory is every shard's, as the seat wrapper has it."""
    if not environ.get("KILN_SHARD_COUNT", "").strip():
        return False
    job_tmp = environ.get(store.ENV_JOB_TMP)
    if job_tmp and store.under(os.path.normpath(os.path.join(cwd, output)), job_tmp):
        return False
    from wheelkiln.shard import partition
    from wheelkiln.shard.wrapper import SeatConfig

    config = SeatConfig.from_environ(environ)
    if config.shard_count is None or config.package_root is None:
        return False
    tu = partition.tu_key(output, config.package_root, cwd, config.build_dir)
    partition_map = (
        partition.PartitionMapFile(config.partition_map_path) if config.partition_map_path else None
    )
    return not partition.is_mine(tu, config.shard_index, config.shard_count, partition_map)


def is_probe(source: str, output: str, cwd: str) -> bool:
    """A build system's check that Cython works (meson's ``meson-private``
    ``sanity_check_for_cython.pyx``): it runs for real and uncounted, in every job,
    as the seat wrapper runs compiler probes (:data:`wheelkiln.compiler_args.PROBE_MARKERS`)."""
    from wheelkiln.compiler_args import PROBE_MARKERS

    return any(marker in path for path in (source, output, cwd) for marker in PROBE_MARKERS)


def write_placeholder(output: str, depfile: bool, cwd: str) -> None:
    """What a shard writes for a transpile another shard owns: a C file whose compile
    the seat wrapper stubs, and the depfile a build system waits for."""
    text = "/* wheelkiln: transpiled by the shard that owns this TU */\n"
    store.write_atomic(output, text.encode())
    if depfile:
        store.write_atomic(output + ".dep", f"{os.path.relpath(output, cwd)}:\n".encode())


def _log(settings: Settings, paths: store.PathKeys, source: str, output: str, cwd: str,
         outcome: str, started: float, front: str) -> None:  # fmt: skip
    store.append_log(
        settings.log,
        {
            "source": paths.key(source, cwd),
            "output": paths.key(output, cwd),
            "outcome": outcome,
            "seconds": round(_now() - started, 6),
            "front": front,
        },
    )


def _restore(cache: store.TranspileCache, entry: store.Entry, output: str) -> None:
    directory = os.path.dirname(output)
    for name, digest in entry.outputs.items():
        store.write_atomic(
            os.path.join(directory, name) if name else output, cache.read_result(digest)
        )


def _collect(output: str, started_wall: float) -> tuple[dict[str, str], dict[str, bytes]]:
    """The files a transpile wrote: its output, and the headers Cython writes beside it
    for ``public`` and ``api`` declarations (``<output stem>.h``, ``<output stem>_api.h``)
    when this transpile wrote them."""
    outputs: dict[str, str] = {}
    contents: dict[str, bytes] = {}
    stem = os.path.splitext(output)[0]
    names = [""]
    for header in (stem + ".h", stem + "_api.h"):
        try:
            if os.stat(header).st_mtime >= started_wall - 1:
                names.append(os.path.basename(header))
        except OSError:
            pass
    directory = os.path.dirname(output)
    for name in names:
        path = os.path.join(directory, name) if name else output
        with open(path, "rb") as handle:
            data = handle.read()
        digest = store.sha256_bytes(data)
        outputs[name] = digest
        contents[digest] = data
    return outputs, contents


def _dependencies(paths: store.PathKeys, files: Sequence[str], cwd: str) -> list[list[str | None]]:
    deps: list[list[str | None]] = []
    for file in files:
        key = paths.key(file, cwd)
        deps.append(
            [key, None if key.startswith("<cython>") else store.file_digest(paths.path(key))]
        )
    return deps


# --------------------------------------------------------------------------- command line


class CythonCall:
    """One ``cython`` command line, as far as the cache needs it."""

    __slots__ = ("args", "cacheable", "cplus", "depfile", "output", "shared", "sources")

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.sources: list[str] = []
        self.output: str | None = None
        self.shared: str | None = None
        """The C file of ``--generate-shared=OUT.c`` (the shared utility module)."""
        self.depfile = False
        self.cplus = False
        self.cacheable = True
        index = 0
        while index < len(args):
            arg = args[index]
            name, equals, value = arg.partition("=")
            if name == SHARED_OPTION:
                if equals:
                    self.shared = value
                elif index + 1 < len(args):
                    self.shared = args[index + 1]
                    index += 1
            elif arg in ("-M", "--depfile"):
                self.depfile = True
            elif arg in ("-+", "--cplus"):
                self.cplus = True
            elif name in _UNCACHED_OPTIONS or arg in _UNCACHED_OPTIONS:
                self.cacheable = False
            elif arg in _VALUE_OPTIONS and not equals:
                if arg in ("-o", "--output-file") and index + 1 < len(args):
                    self.output = args[index + 1]
                index += 1
            elif equals and name in ("--output-file",):
                self.output = value
            elif arg.startswith("-o") and len(arg) > 2:
                self.output = arg[2:]
            elif not arg.startswith("-") and arg.endswith(_SOURCE_EXTENSIONS):
                self.sources.append(arg)
            index += 1
        if self.shared is not None:
            self.cacheable = self.cacheable and not self.sources  # Cython refuses a source
        elif len(self.sources) != 1:
            self.cacheable = False
        elif self.output is None:
            stem = os.path.splitext(self.sources[0])[0]
            self.output = stem + (".cpp" if self.cplus else ".c")

    def key_arguments(self, paths: store.PathKeys) -> list[str]:
        """The options that decide the output: the arguments without the source, the
        output and depfile flags, absolute paths of the tree as tokens."""
        kept: list[str] = []
        skip_next = False
        for arg in self.args:
            if skip_next:
                skip_next = False
                continue
            if arg in ("-o", "--output-file", SHARED_OPTION):
                skip_next = True
                continue
            if (
                arg in ("-M", "--depfile")
                or arg in self.sources
                or arg.startswith(("-o", "--output-file=", SHARED_OPTION + "="))
            ):
                continue
            kept.append(paths.tokenize(arg))
        return kept


VERSION_ARGUMENTS = (("-V",), ("--version",))
"""Asked by meson for every machine it configures (``cython -V``), each time a Python
start and Cython's import: 0.3 s apiece on this machine."""


def version_answer(
    real: str, args: Sequence[str], cache: store.TranspileCache
) -> tuple[int, str, str] | None:
    """The real Cython's answer to *args* (``-V``): exit code, stdout and stderr as it
    wrote them, from the cache (:func:`wheelkiln.cache.cython.version_path`) or asked
    of it and kept when its exit code is 0. None when the script or its package cannot
    be read: nothing is kept then and Cython answers for itself."""
    path = store.version_path(cache.directory, real, args)
    if path is None:
        return None
    kept = store.read_version(path)
    if kept is not None:
        return kept
    import json

    from wheelkiln.shard.wrapper import spawn_capturing

    code, out_bytes, err_bytes = spawn_capturing([real, *args])
    out = out_bytes.decode("utf-8", "surrogateescape")
    err = err_bytes.decode("utf-8", "surrogateescape")
    if code == 0:
        blob = {"code": code, "stdout": out, "stderr": err}
        store.write_atomic(path, json.dumps(blob).encode("utf-8", "surrogateescape"))
    return code, out, err


def answer_version(real: str, args: Sequence[str], cache: store.TranspileCache) -> int:
    """``cython -V`` on the command line: :func:`version_answer` written out."""
    answer = version_answer(real, args, cache)
    if answer is None:
        return _spawn([real, *args])
    code, out, err = answer
    os.write(1, out.encode("utf-8", "surrogateescape"))
    os.write(2, err.encode("utf-8", "surrogateescape"))
    return code


def _spawn(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run the real Cython with inherited stdio: its exit code (128+signal if killed)."""
    from wheelkiln.shard.wrapper import spawn_and_wait  # the per-call way to start one

    code = spawn_and_wait(argv, env)
    return 128 - code if code < 0 else code


FRONT_RUNS_IT = "KILN_CYTHON_FRONT_RUNS_IT"
"""Set for a real Cython the command-line front runs for a shared utility module, whose
``generate_shared_module`` the in-process hook then leaves alone: the front has already
looked it up and stores what it writes (one transpile, one log line)."""


def transpile(front: str, args: Sequence[str], environ: Mapping[str, str]) -> int:
    """Run one ``cython`` command line through the cache; its exit code."""
    started, started_wall = _now(), time.time()
    name = os.path.basename(front)
    real = store.find_real(name, os.path.dirname(os.path.abspath(front)), environ)
    if real is None:
        sys.stderr.write(f"kiln cython front: no {name!r} on PATH after {front}\n")
        return 127
    call = CythonCall(args)
    cwd = os.getcwd()
    settings = Settings(environ)
    if call.shared is not None and not call.sources and call.cacheable:
        package = store.cython_package(real)
        paths = settings.paths(package[1] if package else None)
        key = None
        if package is not None:
            key = shared_module_key(package[0], paths, call.shared, cwd, "cli",
                                    call.key_arguments(paths))  # fmt: skip
        inner = {**environ, FRONT_RUNS_IT: "1"}
        return shared_module(
            settings, paths, key, call.shared, cwd, lambda: _spawn([real, *args], inner), "cli",
            started,
        )  # fmt: skip
    if not call.sources:  # --version, --help
        if tuple(args) in VERSION_ARGUMENTS and settings.cache is not None:
            return answer_version(real, args, settings.cache)
        return _spawn([real, *args])
    source, output = call.sources[0], call.output or call.sources[0] + ".c"
    if is_probe(source, output, cwd):
        return _spawn([real, *args])
    if call.cacheable and owned_elsewhere(output, cwd, environ):
        write_placeholder(output, call.depfile, cwd)
        _log(settings, settings.paths(None), source, output, cwd, "stub", started, "cli")
        return 0
    package = store.cython_package(real) if call.cacheable else None
    paths = settings.paths(package[1] if package else None)
    if settings.cache is None or package is None:
        code = _spawn([real, *args])
        outcome = "uncached" if settings.cache is not None else "miss"
        _log(settings, paths, source, output, cwd, outcome, started, "cli")
        return code
    source_digest = store.file_digest(os.path.join(cwd, source))
    key = store.module_key(
        [
            package[0],
            paths.key(source, cwd),
            source_digest or "",
            paths.key(output, cwd),
            paths.key(cwd, cwd),
            "cli",
            *call.key_arguments(paths),
        ]
    )
    cache = settings.cache
    entry = None if settings.recache else cache.lookup(key, paths)
    if entry is not None:
        _restore(cache, entry, os.path.join(cwd, output))
        if call.depfile and entry.depfile is not None:
            store.write_atomic(
                os.path.join(cwd, output + ".dep"), paths.detokenize(entry.depfile).encode()
            )
        _log(settings, paths, source, output, cwd, "hit", started, "cli")
        return 0
    code = _spawn([real, *([] if call.depfile else ["-M"]), *args])
    depfile_path = os.path.join(cwd, output + ".dep")
    if code == 0:
        try:
            with open(depfile_path, encoding="utf-8", errors="surrogateescape") as handle:
                depfile = handle.read()
        except OSError:
            depfile = None
        if depfile is not None:
            files = store.depfile_paths(depfile) or [source]
            outputs, contents = _collect(os.path.join(cwd, output), started_wall)
            entry = store.Entry(_dependencies(paths, files, cwd), outputs, paths.tokenize(depfile))
            cache.store(key, entry, contents)
        if not call.depfile:
            try:
                os.unlink(depfile_path)
            except OSError:
                pass
    _log(settings, paths, source, output, cwd, "miss", started, "cli")
    return code


def shared_module_key(
    version: str, paths: store.PathKeys, output: str, cwd: str, front: str, options: Sequence[str]
) -> str:
    """The module key of a shared utility module's transpile (module doc)."""
    return store.module_key(
        [version, SHARED_OPTION, paths.key(output, cwd), paths.key(cwd, cwd), front, *options]
    )


def shared_module(
    settings: Settings,
    paths: store.PathKeys,
    key: str | None,
    output: str,
    cwd: str,
    run: Callable[[], int],
    front: str,
    started: float,
) -> int:
    """Cython's shared utility module written to *output* through the cache (module
    doc): its exit code. *run* transpiles it for real; *key* None (a Cython whose
    version cannot be read) runs it uncached."""
    started_wall = time.time()
    if owned_elsewhere(output, cwd, os.environ):
        write_placeholder(output, False, cwd)
        _log(settings, paths, output, output, cwd, "stub", started, front)
        return 0
    cache = settings.cache
    if cache is None or key is None:
        code = run()
        _log(settings, paths, output, output, cwd, "miss" if cache is None else "uncached",
             started, front)  # fmt: skip
        return code
    entry = None if settings.recache else cache.lookup(key, paths)
    if entry is not None:
        _restore(cache, entry, os.path.join(cwd, output))
        _log(settings, paths, output, output, cwd, "hit", started, front)
        return 0
    code = run()
    written = os.path.join(cwd, output)
    if code == 0 and os.path.isfile(written):
        outputs, contents = _collect(written, started_wall)
        cache.store(key, store.Entry([], outputs), contents)
    _log(settings, paths, output, output, cwd, "miss", started, front)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """``cython_front FRONT_PATH ARGS...``: FRONT_PATH is the script's own ``$0``."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        sys.stderr.write("usage: cython_front FRONT_PATH [CYTHON ARGS...]\n")
        return 2
    return transpile(arguments[0], arguments[1:], os.environ)


# --------------------------------------------------------------------------- in process


def install(module: ModuleType) -> None:
    """Wrap ``Cython.Build.Dependencies.cythonize_one``,
    ``Cython.Build.SharedModule.generate_shared_module`` or, for
    ``Cython.Distutils.old_build_ext``, ``Cython.Compiler.Main.compile`` (whichever
    *module* is or calls) with the cache (once)."""
    if module.__name__ == "Cython.Build.SharedModule":
        _install_shared(module)
        return
    if module.__name__ == "Cython.Distutils.old_build_ext":
        _install_compile()
        return
    dependencies = module
    original = getattr(dependencies, "cythonize_one", None)
    if original is None or getattr(original, "_kiln_cached", False):
        return
    import inspect

    signature = inspect.signature(original)

    def cythonize_one(*args: object, **kwargs: object) -> object:
        bound = signature.bind(*args, **kwargs)
        return cached_cythonize_one(original, dependencies, bound.arguments, args, kwargs)

    cythonize_one._kiln_cached = True  # type: ignore[attr-defined]
    dependencies.cythonize_one = cythonize_one  # type: ignore[attr-defined]


def _install_shared(shared: ModuleType) -> None:
    original = getattr(shared, "generate_shared_module", None)
    if original is None or getattr(original, "_kiln_cached", False):
        return

    def generate_shared_module(options: object) -> object:
        return cached_shared_module(original, options)

    generate_shared_module._kiln_cached = True  # type: ignore[attr-defined]
    shared.generate_shared_module = generate_shared_module  # type: ignore[attr-defined]


def cached_shared_module(original: Callable[[object], object], options: object) -> object:
    """``cythonize()``'s shared utility module through the cache (module doc). Its
    callers ignore what it returns but for errors, which a hit has none of."""
    started = _now()
    settings = Settings(os.environ)
    cwd = os.getcwd()
    output = getattr(options, "shared_c_file_path", None)
    if not isinstance(output, str) or not output or os.environ.get(FRONT_RUNS_IT):
        return original(options)
    import Cython  # type: ignore[import-not-found]  # the build environment's own

    paths = settings.paths(os.path.dirname(os.path.abspath(Cython.__file__)))
    key = shared_module_key(
        str(getattr(Cython, "__version__", "")), paths, output, cwd, "cythonize",
        [paths.tokenize(_options_fingerprint(options))],
    )  # fmt: skip
    result: list[object] = [(None, None)]

    def run() -> int:
        result[0] = original(options)
        err = result[0][0] if isinstance(result[0], tuple) and result[0] else None
        return 1 if err is not None else 0

    shared_module(settings, paths, key, output, cwd, run, "cythonize", started)
    return result[0]


def _options_fingerprint(options: object) -> str:
    get = getattr(options, "get_fingerprint", None)
    if callable(get):
        return str(get())
    return repr(sorted(vars(options).items())) if options is not None else ""


def cached_cythonize_one(
    original: Callable[..., object],
    dependencies: ModuleType,
    arguments: Mapping[str, object],
    args: tuple[object, ...],
    kwargs: Mapping[str, object],
) -> object:
    """One module of ``cythonize()`` through :func:`_cached_module`."""
    import json

    metadata = json.dumps(arguments.get("embedded_metadata"), sort_keys=True, default=str)
    return _cached_module(
        "cythonize",
        os.fspath(str(arguments["pyx_file"])),
        os.fspath(str(arguments["c_file"])),
        str(arguments.get("full_module_name")),
        arguments.get("options"),
        metadata,
        lambda: original(*args, **kwargs),
        lambda source: dependencies.create_dependency_tree().all_dependencies(source),
        quiet=bool(arguments.get("quiet")),
        skipped=None,
    )


def _cached_module(
    front: str,
    source: str,
    output: str,
    module_name: str,
    options: object,
    metadata: str,
    run: Callable[[], object],
    dependencies_of: Callable[[str], Iterable[str]],
    *,
    quiet: bool,
    skipped: object,
) -> object:
    """One module's transpile: a hit writes the cached files, a stub in a shard writes a
    placeholder, a miss runs Cython (*run*) and stores what it wrote with the files
    *dependencies_of* its source. A hit or a stub returns *skipped*."""
    started, started_wall = _now(), time.time()
    environ = os.environ
    settings = Settings(environ)
    cwd = os.getcwd()
    if owned_elsewhere(output, cwd, environ):
        write_placeholder(output, False, cwd)
        _log(settings, settings.paths(None), source, output, cwd, "stub", started, front)
        return skipped
    import Cython  # the build environment's own

    cython_dir = os.path.dirname(os.path.abspath(Cython.__file__))
    paths = settings.paths(cython_dir)
    cacheable = settings.cache is not None and not getattr(options, "annotate", False)
    if not cacheable or settings.cache is None:
        result = run()
        outcome = "uncached" if settings.cache is not None else "miss"
        _log(settings, paths, source, output, cwd, outcome, started, front)
        return result
    key = store.module_key(
        [
            str(getattr(Cython, "__version__", "")),
            paths.key(source, cwd),
            store.file_digest(os.path.join(cwd, source)) or "",
            paths.key(output, cwd),
            paths.key(cwd, cwd),
            front,
            module_name,
            paths.tokenize(_options_fingerprint(options)),
            paths.tokenize(metadata),
        ]
    )
    cache = settings.cache
    entry = None if settings.recache else cache.lookup(key, paths)
    if entry is not None:
        _restore(cache, entry, os.path.join(cwd, output))
        if not quiet:
            print(f"kiln: {source} from the Cython cache")
        _log(settings, paths, source, output, cwd, "hit", started, front)
        return skipped
    result = run()
    if os.path.isfile(os.path.join(cwd, output)):
        files = [source, *sorted(set(dependencies_of(source)) - {source})]
        outputs, contents = _collect(os.path.join(cwd, output), started_wall)
        cache.store(key, store.Entry(_dependencies(paths, files, cwd), outputs), contents)
    _log(settings, paths, source, output, cwd, "miss", started, front)
    return result


class _Transpiled:
    """What ``Cython.Compiler.Main.compile`` returns for a module a hit or a stub wrote:
    a result without errors (``old_build_ext`` does not read it; other callers read
    ``num_errors``)."""

    num_errors = 0

    def __init__(self, c_file: str) -> None:
        self.c_file = c_file


def _install_compile() -> None:
    """Wrap ``Cython.Compiler.Main.compile``, which ``Cython.Distutils.old_build_ext``
    (PyYAML's setup.py, and older ones) calls once per ``.pyx`` instead of
    ``cythonize()`` (once)."""
    from Cython.Compiler import Main  # type: ignore[import-not-found]

    original = Main.compile
    if getattr(original, "_kiln_cached", False):
        return

    def compile(  # Cython's name: callers look it up on Main
        source: object, options: object = None, full_module_name: object = None, **kwds: object
    ) -> object:
        return cached_compile(original, Main, source, options, full_module_name, kwds)

    compile._kiln_cached = True  # type: ignore[attr-defined]
    Main.compile = compile


def cached_compile(
    original: Callable[..., object],
    main: ModuleType,
    source: object,
    options: object,
    full_module_name: object,
    kwds: Mapping[str, object],
) -> object:
    """One ``Main.compile(source, options)`` through :func:`_cached_module` where it
    transpiles one file to a named output, as ``old_build_ext`` calls it; any other
    call (several sources, timestamps, recursion, Cython's own cache) runs as written."""

    def run() -> object:
        return original(source, options, full_module_name, **kwds)

    merged = main.CompilationOptions(defaults=options, **kwds)
    output = getattr(merged, "output_file", None)
    if (
        not isinstance(source, str) or not isinstance(output, str) or not output
        or getattr(merged, "timestamps", False) or getattr(merged, "recursive", False)
        or getattr(merged, "cache", False) or os.environ.get(FRONT_RUNS_IT)
    ):  # fmt: skip
        return run()

    def dependencies_of(path: str) -> Iterable[str]:
        from Cython.Build.Dependencies import DependencyTree  # type: ignore[import-not-found]

        context = main.Context.from_options(merged)
        return DependencyTree(context, quiet=True).all_dependencies(path)  # type: ignore[no-any-return]

    return _cached_module(
        "compile",
        source,
        output,
        str(full_module_name),
        merged,
        "",
        run,
        dependencies_of,
        quiet=False,
        skipped=_Transpiled(output),
    )
