"""The recipe: one package's declarative build description.

Every field carries its documentation as the docstring beneath it; the JSON schema in
``recipe.schema.json`` is generated from these models (``kiln recipe schema``) and a test
fails when the checked-in copy is stale.

A recipe can arrive in a pull request, so the model is strict and bounded.

- Strict: a value of the wrong TOML type is refused, never coerced (``count = "4"``,
  ``count = true`` and ``count = 4.0`` are errors). Arrays are the one conversion: TOML
  arrays become tuples, and their items are strict again.
- Bounded: numbers have a range, every string a maximum length, and no string holds a
  NUL, because each ends up in a file name, an argv or the environment, none of which
  can carry one.
- Shaped: strings that become file names (``name``, family names, the cache namespace),
  environment names, or command-line arguments have a character set, so none can climb
  out of a directory or be read as an option (``-...``).
- Confined: paths inside the package (``source.subdir``, ``source.exclude``,
  ``sharding.source_globs``) must be relative and free of ``..``. Paths that depend on
  where the recipe file lives (``source.path``, ``sharding.partition_map``) are
  resolved and confined when the file is loaded, by :mod:`wheelkiln.recipe.load`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

PYPI_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)$")
Platform = Literal[
    "linux-x86_64",
    "linux-aarch64",
    "windows-amd64",
    "macos-arm64",
    "macos-x86_64",
]
PLATFORMS: tuple[str, ...] = get_args(Platform)
NAME_MAX = 64
"""Names become parts of cell ids, which become directory names (255 bytes at most)."""
SHORT_MAX = 256
TEXT_MAX = 4096
SMOKE_MAX = 65536
ENV_VALUE_MAX = 32768
"""Linux refuses one argv or environment string longer than 128 KiB (MAX_ARG_STRLEN);
these bounds stay well below it."""
MAX_JOBS = 1024
BUILD_OUTPUTS = ("build", "dist", "_skbuild", ".eggs")
"""What frontends and backends leave at the package root: never source, there."""
MAX_SHARDS = 256


@dataclass(frozen=True)
class _Match:
    """A regular expression a string must match in full, with a message that says what
    the value should look like; the pattern is also written into the JSON schema."""

    pattern: str
    expected: str

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        compiled = re.compile(self.pattern)
        expected = self.expected

        def check(value: str) -> str:
            if not compiled.fullmatch(value):
                raise ValueError(expected)
            return value

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        result = handler(schema)
        result["pattern"] = self.pattern
        return result


def _refuse(test: Callable[[str], bool], reason: str) -> AfterValidator:
    def check(value: str) -> str:
        if test(value):
            raise ValueError(reason)
        return value

    return AfterValidator(check)


_NO_NUL = _refuse(
    lambda value: "\0" in value,
    "contains a NUL character, which no file name, argument or environment variable can hold",
)
_ONE_LINE = _refuse(
    lambda value: any(ord(ch) < 32 or ord(ch) == 127 for ch in value),
    "contains a control character (a newline, tab, NUL, ...); give it on one line",
)
_NOT_AN_OPTION = _refuse(
    lambda value: value.startswith("-"),
    "must not start with '-': it is passed on a command line, where it would be read as an option",
)


def inside_path_problem(value: str) -> str | None:
    """Why *value* is not a path (or glob) that stays inside the directory it is read
    against, or None when it is one.

    It must be non-empty and relative, and no component may be ``..``. A drive
    (``C:``) or a leading backslash counts as absolute on every host, because the same
    recipe is built on Windows lanes too.
    """
    if not value.strip():
        return "must not be empty"
    if value.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", value):
        return "must be relative to the package root, not absolute"
    if ".." in re.split(r"[/\\]", value):
        return "must not contain '..': it has to stay inside the package"
    return None


def _inside(value: str) -> str:
    problem = inside_path_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Text = Annotated[str, StringConstraints(max_length=TEXT_MAX), _NO_NUL]
"""Free text, possibly several lines."""
Line = Annotated[str, StringConstraints(max_length=TEXT_MAX), _ONE_LINE]
"""One line of text, e.g. a URL or a glob over wheel contents."""
Filled = Annotated[str, StringConstraints(min_length=1, max_length=TEXT_MAX), _ONE_LINE]
"""One line of text that must not be empty."""
Argument = Annotated[
    str, StringConstraints(min_length=1, max_length=TEXT_MAX), _ONE_LINE, _NOT_AN_OPTION
]
"""A value passed as one command-line argument (a requirement, a git URL or rev)."""
Name = Annotated[
    str,
    StringConstraints(max_length=NAME_MAX),
    _Match(
        r"[A-Za-z0-9][A-Za-z0-9._-]*",
        "must be letters, digits, '.', '_' or '-', starting with a letter or digit "
        "(it becomes part of file names)",
    ),
]
InsidePath = Annotated[
    str, StringConstraints(max_length=TEXT_MAX), _ONE_LINE, AfterValidator(_inside)
]
"""A relative path or glob that stays inside the package."""
EnvName = Annotated[
    str,
    StringConstraints(max_length=SHORT_MAX),
    _Match(
        r"[A-Za-z_][A-Za-z0-9_]*",
        "an environment variable name is letters, digits and '_', not starting with a digit",
    ),
]
EnvValue = Annotated[str, StringConstraints(max_length=ENV_VALUE_MAX), _NO_NUL]
"""An environment value: anything but NUL; ``{...}`` placeholders are kept as written."""
SettingName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=SHORT_MAX),
    _ONE_LINE,
    _refuse(lambda value: "=" in value, "must not contain '=' (it is passed as KEY=VALUE)"),
]
TorchVersion = Annotated[
    str,
    StringConstraints(max_length=NAME_MAX),
    _Match(r"[0-9][0-9A-Za-z.+_-]*", "a torch version looks like '2.9' or '2.9.0+cu130'"),
]
ImportName = Annotated[
    str,
    StringConstraints(max_length=SHORT_MAX),
    _Match(
        r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*",
        "an importable module name looks like 'pkg' or 'pkg.sub'",
    ),
]


class _Model(BaseModel):
    # No use_attribute_docstrings: it reads each class's source at every kiln start;
    # the schema gives the fields their docstrings (recipe.load._document_models).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _array(default: tuple[Any, ...] = ()) -> Any:
    """A field read from a TOML array: the array becomes a tuple, its items stay strict."""
    return Field(default=default, strict=False, max_length=1024)


class Source(_Model):
    """Where the package's source comes from. Exactly one of path, pypi or git."""

    path: Filled | None = None
    """A local source tree, relative to the recipe file. It must lie inside the recipe's
    project (see ``wheelkiln.recipe.load.project_root``)."""
    pypi: Filled | None = None
    """An sdist on PyPI, as 'NAME==VERSION'."""
    sha256: Filled | None = None
    """The sdist's sha256; required with 'pypi' so a changed upload is refused."""
    git: Argument | None = None
    """A git URL; requires 'rev'."""
    rev: Argument | None = None
    """The git commit or tag to check out."""
    subdir: InsidePath | None = None
    """The package's directory inside the source, when it is not the top (relative, inside
    the source)."""
    exclude: tuple[InsidePath, ...] = _array(BUILD_OUTPUTS)
    """Globs, relative to the package root ('**' for any depth), of build outputs left out
    of the build's private copy and of the source digest. Default: the build directories
    at the root only, so a subpackage named build or dist is kept. *.egg-info, .git and
    __pycache__ are always left out."""

    @field_validator("pypi")
    @classmethod
    def _pypi_spec(cls, value: str) -> str:
        if not PYPI_SPEC.match(value):
            raise ValueError("must be 'NAME==VERSION', e.g. 'pycryptodome==3.20.0'")
        return value

    @field_validator("sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", value):
            raise ValueError("must be 64 lowercase hex digits")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        given = [k for k in ("path", "pypi", "git") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'source.path', 'source.pypi' or 'source.git'"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.pypi is not None and self.sha256 is None:
            raise ValueError("'source.pypi' needs 'source.sha256' (the sdist's sha256 digest)")
        if self.git is not None and self.rev is None:
            raise ValueError("'source.git' needs 'source.rev' (a commit or tag)")
        return self


class Build(_Model):
    """How one cell is built."""

    frontend: Literal["pip", "build"] = "pip"
    """The PEP 517 frontend, 'pip' (pip wheel) or 'build' (python -m build), run when
    KILN_FRONTEND=process. By default kiln calls the backend's build_wheel hook itself,
    as either would without isolation, minus their own start."""
    requires: tuple[Argument, ...] = _array()
    """Extra build requirements or pins, added to the package's build-system.requires."""
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=1024)
    """Environment for the build (MAX_JOBS, NVCC_THREADS, TORCH_CUDA_ARCH_LIST, ...)."""
    config_settings: dict[SettingName, Text] = Field(default_factory=dict, max_length=1024)
    """PEP 517 config settings passed to the backend."""
    jobs: int | None = Field(default=None, ge=1, le=MAX_JOBS)
    """Parallel compile jobs (1 to 1024); default: the machine's core count."""
    cuda_home_nvcc: bool = False
    """The build runs $CUDA_HOME/bin/nvcc itself (torch without ninja): give it a CUDA_HOME
    whose nvcc goes through the cache."""
    linker: Literal["default", "mold", "lld"] = "default"
    """The host linker: 'default' (the compiler's own), 'mold' or 'lld' (-fuse-ld= for
    setuptools and meson, CMAKE_LINKER_TYPE or the linker flags for CMake). It must be
    installed. CUDA device links stay nvcc's (nvlink)."""


class CudaLane(_Model):
    """One CUDA line of the matrix."""

    version: Annotated[str, _Match(r"\d{1,3}\.\d{1,3}", "a CUDA version looks like '13.0'")]
    """The CUDA version, e.g. '13.0'."""
    arch_list: tuple[
        Annotated[str, _Match(r"\d{1,3}\.\d{1,3}a?(\+PTX)?", "an arch looks like '8.0' or '9.0a'")],
        ...,
    ] = _array()
    """GPU architectures for this lane, e.g. ['8.0', '9.0'] (TORCH_CUDA_ARCH_LIST style)."""


class Matrix(_Model):
    """The build matrix: python × cuda lane × torch × platform."""

    python: tuple[
        Annotated[str, _Match(r"3\.\d{1,3}", "a python version looks like '3.11'")], ...
    ] = _array(("3.11",))
    """Python versions, e.g. ['3.10', '3.11']."""
    cuda: tuple[CudaLane, ...] = _array()
    """CUDA lanes; empty for a package that does not use CUDA."""
    torch: tuple[TorchVersion, ...] = _array()
    """torch versions the package builds against."""
    platforms: tuple[Platform, ...] = _array(("linux-x86_64",))
    """Platforms: linux-x86_64, linux-aarch64, windows-amd64, macos-arm64, macos-x86_64."""
    links_torch: bool = False
    """Whether the wheel links torch; false collapses the torch axis."""

    @field_validator("python", "platforms")
    @classmethod
    def _not_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one value is needed")
        return value


class Sharding(_Model):
    """How one cell's compile is split across N jobs."""

    count: int = Field(default=1, ge=1, le=MAX_SHARDS)
    """N, the number of shard jobs per sharded cell (1 = no sharding, at most 256)."""
    partition: Literal["seat", "source"] = Field(
        default="seat", validation_alias=AliasChoices("partition", "filter")
    )
    """How a shard drops the TUs that are not its own: 'seat' (the compiler wrapper
    stubs them) or 'source' (out-of-slice sources are deleted before the build). Never
    both. Formerly 'filter', still read with a deprecation warning."""
    platforms: tuple[Platform, ...] = _array()
    """Platforms that shard; others build whole. Empty: every matrix platform."""
    source_globs: tuple[InsidePath, ...] = _array()
    """Globs (relative to the package root, without '..') of the generated sources that
    the source partition deletes out of slice. Required with partition = 'source'."""
    partition_map: Line | None = None
    """A JSON file (relative to the recipe) mapping TU paths to shard indexes, overriding
    the hash for TUs whose cost is known. It must lie inside the recipe's project."""


class Family(_Model):
    """A named group of TUs, e.g. one GPU architecture's kernels."""

    name: Name
    """The family's name, e.g. 'sm90'."""
    pattern: Line
    """A regular expression searched in the TU path relative to the package root."""

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except (re.error, RecursionError, OverflowError) as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class Verify(_Model):
    """Checks applied to a built wheel."""

    import_name: ImportName | None = Field(default=None, alias="import")
    """The module to import after installing the wheel."""
    extension_modules: tuple[Line, ...] = _array()
    """Globs of extension modules the wheel must contain, e.g. 'pkg/*.so'."""
    smoke: Annotated[str, StringConstraints(max_length=SMOKE_MAX), _NO_NUL] | None = None
    """Python code run after installing the wheel; it must exit 0."""
    requires: tuple[Argument, ...] = _array()
    """Test-only requirements of the smoke test (PEP 508), installed into the smoke
    environment beside the wheel's own Requires-Dist; never into the build environment."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        strict=True,
    )


class CacheSettings(_Model):
    """Compiler cache settings for this package."""

    backend: Literal["ccache", "sccache", "none"] = "ccache"
    """The compiler cache: ccache (default), sccache, or none."""
    remote: Line | None = None
    """Remote storage URL passed to the cache (ccache remote_storage, e.g. redis://...)."""
    namespace: Name | None = None
    """A namespace (ccache) or key prefix (sccache) isolating this package's entries."""


SchedulerAddress = Annotated[
    str,
    StringConstraints(max_length=SHORT_MAX),
    _Match(
        r"(tcp|tls)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):[0-9]{1,5}",
        "a Dask scheduler address looks like 'tcp://HOST:8786', as `dask scheduler` prints it",
    ),
]
MAX_WORKER_MEMORY_GB = 1 << 20


class ExecutorConfig(_Model):
    """The engine that runs a sharded build's shard and link jobs (``kiln build --shards
    N``), and where its fleet is. Each key gives way to its option and its variable:
    --executor / $KILN_EXECUTOR, --scheduler / $KILN_SCHEDULER, --handoff / $KILN_HANDOFF,
    --worker-memory / $KILN_WORKER_MEMORY."""

    engine: Literal["local", "dask"] | None = None
    """'local' (shards as processes on this machine, the default) or 'dask' (tasks on a
    Dask cluster)."""
    scheduler: SchedulerAddress | None = None
    """dask: the scheduler's address, 'tcp://HOST:PORT'."""
    handoff: Filled | None = None
    """dask: a directory every worker sees at the same path (absolute, or relative to the
    recipe file) for the shard archives, the source bundle and the wheel. Without it the
    shards hand over through the remote cache storage (cache.remote or --remote)."""
    worker_memory: int | None = Field(default=None, ge=1, le=MAX_WORKER_MEMORY_GB)
    """dask: GB of the workers' MEM_GB resource each task asks for."""

    @model_validator(mode="after")
    def _dask_keys_need_dask(self) -> ExecutorConfig:
        given = [k for k in ("scheduler", "handoff", "worker_memory") if getattr(self, k) is not None]
        if self.engine == "local" and given:
            raise ValueError(
                f"'executor.{given[0]}' applies only with executor.engine = 'dask', and "
                "this recipe says 'local'"
            )
        return self


class Recipe(_Model):
    """One package's build description."""

    name: Name
    """The package name, used in cell ids and job names."""
    source: Source
    """Where the source comes from."""
    build: Build = Field(default_factory=Build)
    """How a cell is built."""
    matrix: Matrix = Field(default_factory=Matrix)
    """The cells to build."""
    sharding: Sharding = Field(default_factory=Sharding)
    """Splitting one cell's compile across jobs."""
    families: tuple[Family, ...] = _array()
    """Named TU families (regex over TU paths)."""
    verify: Verify = Field(default_factory=Verify)
    """Wheel verification."""
    cache: CacheSettings = Field(default_factory=CacheSettings)
    """Compiler cache settings."""
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    """The engine of sharded builds, and its fleet."""
