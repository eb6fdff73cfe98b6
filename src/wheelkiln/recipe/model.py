"""The recipe: one package's declarative build description.

Every field carries its documentation as the docstring beneath it; the JSON schema in
``recipe.schema.json`` is generated from these models (``kiln recipe schema``) and a test
fails when the checked-in copy is stale.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PYPI_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)$")
PLATFORMS = (
    "linux-x86_64",
    "linux-aarch64",
    "windows-amd64",
    "macos-arm64",
    "macos-x86_64",
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Source(_Model):
    """Where the package's source comes from. Exactly one of path, pypi or git."""

    path: str | None = None
    """A local source tree, relative to the recipe file."""
    pypi: str | None = None
    """An sdist on PyPI, as 'NAME==VERSION'."""
    sha256: str | None = None
    """The sdist's sha256; required with 'pypi' so a changed upload is refused."""
    git: str | None = None
    """A git URL; requires 'rev'."""
    rev: str | None = None
    """The git commit or tag to check out."""
    subdir: str | None = None
    """The package's directory inside the source, when it is not the top."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        given = [k for k in ("path", "pypi", "git") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of source.path, source.pypi or source.git"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.pypi is not None:
            if not PYPI_SPEC.match(self.pypi):
                raise ValueError(f"source.pypi must be 'NAME==VERSION', got {self.pypi!r}")
            if not self.sha256:
                raise ValueError("source.pypi needs source.sha256 (the sdist's sha256 digest)")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise ValueError("source.sha256 must be 64 lowercase hex digits")
        if self.git is not None and not self.rev:
            raise ValueError("source.git needs source.rev (a commit or tag)")
        return self


class Build(_Model):
    """How one cell is built."""

    frontend: Literal["pip", "build"] = "pip"
    """The PEP 517 frontend: 'pip' (pip wheel) or 'build' (python -m build)."""
    requires: tuple[str, ...] = ()
    """Extra build requirements or pins, added to the package's build-system.requires."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment for the build (MAX_JOBS, NVCC_THREADS, TORCH_CUDA_ARCH_LIST, ...)."""
    config_settings: dict[str, str] = Field(default_factory=dict)
    """PEP 517 config settings passed to the backend."""
    jobs: int | None = Field(default=None, ge=1)
    """Parallel compile jobs; default: the machine's core count."""
    cuda_home_nvcc: bool = False
    """The build runs $CUDA_HOME/bin/nvcc itself (torch without ninja): give it a CUDA_HOME
    whose nvcc goes through the cache."""


class CudaLane(_Model):
    """One CUDA line of the matrix."""

    version: str
    """The CUDA version, e.g. '13.0'."""
    arch_list: tuple[str, ...] = ()
    """GPU architectures for this lane, e.g. ['8.0', '9.0'] (TORCH_CUDA_ARCH_LIST style)."""

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.fullmatch(r"\d+\.\d+", value):
            raise ValueError(f"CUDA version must look like '13.0', got {value!r}")
        return value

    @field_validator("arch_list")
    @classmethod
    def _arch(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arch in value:
            if not re.fullmatch(r"\d+\.\d+a?(\+PTX)?", arch):
                raise ValueError(f"arch must look like '8.0' or '9.0a', got {arch!r}")
        return value


class Matrix(_Model):
    """The build matrix: python × cuda lane × torch × platform."""

    python: tuple[str, ...] = ("3.11",)
    """Python versions, e.g. ['3.10', '3.11']."""
    cuda: tuple[CudaLane, ...] = ()
    """CUDA lanes; empty for a package that does not use CUDA."""
    torch: tuple[str, ...] = ()
    """torch versions the package builds against."""
    platforms: tuple[str, ...] = ("linux-x86_64",)
    """Platforms: linux-x86_64, linux-aarch64, windows-amd64, macos-arm64, macos-x86_64."""
    links_torch: bool = False
    """Whether the wheel links torch; false collapses the torch axis."""

    @field_validator("python")
    @classmethod
    def _python(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for version in value:
            if not re.fullmatch(r"3\.\d+", version):
                raise ValueError(f"python versions look like '3.11', got {version!r}")
        if not value:
            raise ValueError("at least one python version is needed")
        return value

    @field_validator("platforms")
    @classmethod
    def _platforms(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for platform in value:
            if platform not in PLATFORMS:
                raise ValueError(f"unknown platform {platform!r}; valid: {', '.join(PLATFORMS)}")
        if not value:
            raise ValueError("at least one platform is needed")
        return value


class Sharding(_Model):
    """How one cell's compile is split across N jobs."""

    count: int = Field(default=1, ge=1, le=256)
    """N, the number of shard jobs per sharded cell (1 = no sharding)."""
    filter: Literal["seat", "source"] = "seat"
    """Partition mechanism: 'seat' (compiler wrapper) or 'source' (delete out-of-slice
    sources before the build). Never both."""
    platforms: tuple[str, ...] = ()
    """Platforms that shard; others build whole. Empty: every matrix platform."""
    source_globs: tuple[str, ...] = ()
    """Globs (relative to the package root) of the generated sources that the source
    partition deletes out of slice. Required with filter = 'source'."""
    partition_map: str | None = None
    """A JSON file (relative to the recipe) mapping TU paths to shard indexes, overriding
    the hash for TUs whose cost is known."""


class Family(_Model):
    """A named group of TUs, e.g. one GPU architecture's kernels."""

    name: str
    """The family's name, e.g. 'sm90'."""
    pattern: str
    """A regular expression searched in the TU path relative to the package root."""

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class Verify(_Model):
    """Checks applied to a built wheel."""

    import_name: str | None = Field(default=None, alias="import")
    """The module to import after installing the wheel."""
    extension_modules: tuple[str, ...] = ()
    """Globs of extension modules the wheel must contain, e.g. 'pkg/*.so'."""
    smoke: str | None = None
    """Python code run after installing the wheel; it must exit 0."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, use_attribute_docstrings=True, populate_by_name=True
    )


class CacheSettings(_Model):
    """Compiler cache settings for this package."""

    backend: Literal["ccache", "sccache", "none"] = "ccache"
    """The compiler cache: ccache (default), sccache, or none."""
    remote: str | None = None
    """Remote storage URL passed to the cache (ccache remote_storage, e.g. redis://...)."""
    namespace: str | None = None
    """A namespace (ccache) or key prefix (sccache) isolating this package's entries."""


class Recipe(_Model):
    """One package's build description."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """The package name, used in cell ids and job names."""
    source: Source
    """Where the source comes from."""
    build: Build = Field(default_factory=Build)
    """How a cell is built."""
    matrix: Matrix = Field(default_factory=Matrix)
    """The cells to build."""
    sharding: Sharding = Field(default_factory=Sharding)
    """Splitting one cell's compile across jobs."""
    families: tuple[Family, ...] = ()
    """Named TU families (regex over TU paths)."""
    verify: Verify = Field(default_factory=Verify)
    """Wheel verification."""
    cache: CacheSettings = Field(default_factory=CacheSettings)
    """Compiler cache settings."""
