"""The manifest of a shard's handoff archive: which cell, which shard, which toolchain.

A manifest crosses a job boundary (a shard job writes it, the link job trusts it), so it
is read into a strict, frozen model: a JSON list where an object belongs, a string where
the toolchain table belongs, or a count given as ``"3"`` is refused with the key that is
wrong, never met later as an ``AttributeError``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

MANIFEST_SCHEMA = 1


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )


class ToolchainFingerprint(_Model):
    """A manifest's record of the toolchain (:class:`wheelkiln.builder.toolchain.Toolchain`):
    what must be equal between shards and their link job for cache entries to match."""

    compilers: dict[str, str]
    """Compiler versions by name (``gcc``, ``nvcc``)."""
    cache: dict[str, str]
    """The compiler cache's version by backend name."""
    arch_list: list[str]
    """The CUDA architectures of the cell's lane."""
    build_env: dict[str, str]
    """The recipe's build environment."""


class ShardGate(_Model):
    passed: bool
    reasons: list[str]


class RemoteStore(_Model):
    """Where a shard that handed over through remote storage put its entries."""

    storage: str
    """The storage URL as shown (a password in it never is)."""
    namespace: str | None
    """The cache namespace of its entries; the link job must read the same one."""


class ShardManifest(_Model):
    """``manifest.json`` at the top of a shard archive."""

    schema_: Literal[1] = Field(alias="schema")
    """The manifest format's version."""
    recipe: str
    cell: str
    """The cell id; the link job merges only its own cell's shards."""
    index: int = Field(ge=0)
    """0-based shard index."""
    count: int = Field(ge=1)
    """N, the number of shards of this build."""
    label: str
    partition: Literal["seat", "source"] = Field(
        validation_alias=AliasChoices("partition", "mechanism")
    )
    """How the shard dropped other shards' TUs; 'mechanism' in archives of earlier kiln."""
    toolchain: ToolchainFingerprint
    stats: dict[str, int]
    """The shard's cache counters (before the link job zeroes them)."""
    tus: list[str]
    """TU keys this shard compiled."""
    created: str
    gate: ShardGate
    remote: RemoteStore | None = None
    """Set when the shard handed its entries over through remote storage instead of an
    archive (``kiln shard --handoff remote``); absent from archives."""


def validate_manifest(data: Any) -> ShardManifest:
    """``data`` (parsed JSON) as a manifest; raises :class:`ManifestError` naming each key."""
    try:
        return ShardManifest.model_validate(data)
    except ValidationError as exc:
        raise ManifestError(describe_errors(exc)) from None


class ManifestError(ValueError):
    """A manifest that does not match :class:`ShardManifest`; the text names the keys."""


def describe_errors(exc: ValidationError, limit: int = 5) -> str:
    """Pydantic's errors as ``key.path: problem`` phrases, at most ``limit`` of them."""
    phrases = []
    for error in exc.errors()[:limit]:
        where = ".".join(str(part) for part in error["loc"]) or "the top level"
        phrases.append(f"{where}: {error['msg']}")
    more = exc.error_count() - limit
    if more > 0:
        phrases.append(f"and {more} more")
    return "; ".join(phrases)
