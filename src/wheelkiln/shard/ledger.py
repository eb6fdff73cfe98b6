"""The compile ledger: every extension module in the linked wheel was compiled somewhere.

The link gate counts cache misses, which proves that the link job found every TU in
the merged caches. It cannot tell *who* put an entry there: a shared or remote cache
can serve a TU that no shard compiled, and a shard index that is off by one can stub
a whole module while the numbers still add up elsewhere. The ledger answers from the
shards' own records instead: for each extension module in the wheel, which TUs went
into it, and which of them a shard compiled for real. A module with TUs and not one
compile record means every shard stubbed all of it; it fails the link gate by name.

Which TUs make a module comes from the links the shards ran through the seat wrapper
(host links and CUDA device links both are logged with their argv and output): a link
whose output has the module's file name contributes its object operands, a device-link
object among them (CMake's ``cmake_device_link.o``) contributes the operands of the
device link that wrote it, and each object maps to its TU through the compile or stub
record that wrote it. An object no wrapper record wrote (a static library made by
``ar``, a prebuilt object) maps to nothing; a module none of whose link inputs map is
reported as not mapped, never failed on a guess.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from wheelkiln.compiler_args import parse_compiler_args
from wheelkiln.shard.wrapper_log import WrapperRecord

COMPILE_ACTIONS = frozenset({"compile", "link-probe-rebuild", "probe", "passthrough"})
"""Records of a TU compiled for real in a shard (``passthrough`` with a TU: the source
partition; ``probe``: compiled for real in every shard)."""
_WRITES_OBJECT = COMPILE_ACTIONS | {"stub"}
_LINK_ACTIONS = frozenset({"link", "link-unresolved", "link-deferred"})
"""Records of a link, each with the command that names its inputs (a deferred link's is
the real command, not the placeholder's)."""


@dataclass(frozen=True)
class ModuleLedger:
    """One extension module of the wheel, as the shards' records account for it."""

    module: str
    """Its path in the wheel."""
    tus: tuple[str, ...]
    """The TUs linked into it (keys relative to the package root), sorted."""
    compiled_by: dict[str, tuple[int, ...]]
    """For each of its TUs that some shard compiled: those shards' indexes."""
    device_links: int = 0
    """CUDA device links feeding it that the shards ran."""
    device_links_tolerated: int = 0
    """Of those, device links that failed on unresolved symbols only (expected)."""

    @property
    def stubbed_everywhere(self) -> tuple[str, ...]:
        return tuple(tu for tu in self.tus if tu not in self.compiled_by)

    def as_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "tus": len(self.tus),
            "compiled": len(self.compiled_by),
            "stubbed_everywhere": list(self.stubbed_everywhere),
            "device_links": self.device_links,
            "device_links_tolerated": self.device_links_tolerated,
        }


@dataclass(frozen=True)
class CompileLedger:
    modules: tuple[ModuleLedger, ...]
    unmapped: tuple[str, ...] = ()
    """Modules of the wheel that no shard's link records account for."""
    problems: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "modules": [module.as_dict() for module in self.modules],
            "unmapped": list(self.unmapped),
            "problems": list(self.problems),
        }


def _path(cwd: str, path: str) -> str:
    return os.path.normpath(PurePath(cwd, path))


def _operands(record: WrapperRecord) -> tuple[str, list[str]]:
    """(stage, absolute object operands) of a logged link."""
    argv = record.get("argv") or []
    if not argv:
        return "", []
    parsed = parse_compiler_args(argv[0], argv[1:])
    cwd = record.get("cwd") or "/"
    return parsed.stage, [_path(cwd, operand) for operand in parsed.object_operands()]


@dataclass
class _ShardLinks:
    """One shard's log, indexed: which TU wrote each object, what each link consumed."""

    tu_of_object: dict[str, str] = field(default_factory=dict)
    compiled: set[str] = field(default_factory=set)
    device_links: dict[str, tuple[list[str], bool]] = field(default_factory=dict)
    """Device-link output -> (its object operands, tolerated)."""
    host_links: list[tuple[str, list[str]]] = field(default_factory=list)
    """(output file name, object operands) of every other link."""

    @classmethod
    def read(cls, records: Iterable[WrapperRecord]) -> _ShardLinks:
        links = cls()
        for record in records:
            action, output, tu = record["action"], record.get("output"), record.get("tu")
            if action in _WRITES_OBJECT and tu and output:
                links.tu_of_object[os.path.normpath(output)] = tu
            if action in COMPILE_ACTIONS and tu and record.get("exit", 0) == 0:
                links.compiled.add(tu)
            if action in _LINK_ACTIONS and output:
                stage, objects = _operands(record)
                if stage == "device-link":
                    tolerated = action == "link-unresolved"
                    links.device_links[os.path.normpath(output)] = (objects, tolerated)
                else:
                    links.host_links.append((PurePath(output).name, objects))
        return links

    def module_inputs(self, file_name: str) -> tuple[set[str], int, int]:
        """(TUs, device links, tolerated device links) of the links named *file_name*."""
        tus: set[str] = set()
        device_links = tolerated = 0
        for output_name, objects in self.host_links:
            if output_name != file_name:
                continue
            for path in objects:
                if path in self.device_links:
                    device_objects, was_tolerated = self.device_links[path]
                    device_links += 1
                    tolerated += was_tolerated
                    tus.update(
                        self.tu_of_object[o] for o in device_objects if o in self.tu_of_object
                    )
                if path in self.tu_of_object:
                    tus.add(self.tu_of_object[path])
        return tus, device_links, tolerated


def compile_ledger(
    wheel_modules: Sequence[str], shard_logs: Mapping[int, Sequence[WrapperRecord]]
) -> CompileLedger:
    """Account for every module in *wheel_modules* (paths in the wheel) from the shards'
    wrapper logs (shard index -> records)."""
    shards = {index: _ShardLinks.read(records) for index, records in sorted(shard_logs.items())}
    modules: list[ModuleLedger] = []
    unmapped: list[str] = []
    problems: list[str] = []
    for module in sorted(wheel_modules):
        file_name = module.rsplit("/", 1)[-1]
        tus: set[str] = set()
        device_links = tolerated = 0
        for links in shards.values():
            found, linked, was_tolerated = links.module_inputs(file_name)
            tus |= found
            device_links += linked
            tolerated += was_tolerated
        if not tus:
            unmapped.append(module)
            continue
        compiled_by = {
            tu: tuple(index for index, links in shards.items() if tu in links.compiled)
            for tu in sorted(tus)
        }
        entry = ModuleLedger(
            module,
            tuple(sorted(tus)),
            {tu: owners for tu, owners in compiled_by.items() if owners},
            device_links,
            tolerated,
        )
        modules.append(entry)
        if not entry.compiled_by:
            sample = ", ".join(entry.tus[:3]) + (", ..." if len(entry.tus) > 3 else "")
            problems.append(
                f"{module}: no shard compiled any of its {len(entry.tus)} TU(s) ({sample}); "
                "every shard stubbed the whole module (a shard index or partition map "
                "that sends its TUs to no shard?)"
            )
    return CompileLedger(tuple(modules), tuple(unmapped), tuple(problems))


def describe_ledger(ledger: Mapping[str, Any] | None) -> str:
    """One line for a summary, from a link record's ``ledger``."""
    if not ledger:
        return "not kept"
    modules = ledger.get("modules") or []
    failing = [m["module"] for m in modules if m.get("compiled") == 0]
    device_links = sum(m.get("device_links", 0) for m in modules)
    tolerated = sum(m.get("device_links_tolerated", 0) for m in modules)
    text = f"{len(modules)} module(s) with shard compile records"
    if failing:
        text = f"{len(failing)} of {len(modules)} module(s) compiled by no shard: " + ", ".join(
            failing
        )
    if ledger.get("unmapped"):
        text += f"; {len(ledger['unmapped'])} not in any shard's links"
    if device_links:
        text += f"; {device_links} device link(s), {tolerated} tolerated"
    return text
