"""Checking a built wheel: the recipe's content rules, no placeholder module, and on
request a smoke test in an environment of its own.

Every wheel that can be shipped gets the same checks, whichever job made it: an
unsharded build, the link job of a sharded build, or a wheel served from the wheel cache
(the smoke test only; its contents were checked when it was stored).

The smoke test does not run in the build environment. A package's runtime dependencies
are not its build requirements, and adding them there changes the build environment's
key (a new multi-gigabyte environment for torch, and cache misses for the probes inside
it). It runs in a venv made from the build interpreter, keyed by that interpreter and by
what it installs: the wheel's ``Requires-Dist``, the recipe's ``[verify] requires``, and
the cell's torch for a cell on the torch axis.
The venv is made once under ``$KILN_HOME/smoke-envs/<key>`` and reused; the wheel itself
goes into a private directory in front of it, so the venv never holds a build's wheel.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from wheelkiln import holds, run, ui
from wheelkiln.builder.cell import BuildOutcome
from wheelkiln.builder.environment import environment_key, interpreter_for
from wheelkiln.cells import NO_TORCH, Cell
from wheelkiln.errors import BuildError
from wheelkiln.paths import CUDA_VIEWS, ENVS_VIEW, smoke_envs_dir
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.recipe.model import Verify
from wheelkiln.wheels.facts import EMPTY_SHA256, WheelFacts, check_wheel

OBJECT_MAGIC = (
    b"\x7fELF",  # Linux
    b"MZ",  # Windows PE
    b"\xcf\xfa\xed\xfe",  # Mach-O 64-bit
    b"\xce\xfa\xed\xfe",  # Mach-O 32-bit
    b"\xca\xfe\xba\xbe",  # Mach-O universal
)
"""How a real shared object starts. A shard job's placeholder for a link it tolerated is
an empty file, so it starts with none of these."""
PLACEHOLDER_MARK = b"wheelkiln shard placeholder: the link job makes the real library"
"""In every placeholder a shard job links for a shared library whose link it deferred (a
real, empty shared object: the build's install steps read it)."""
_PLACEHOLDER_MAX_BYTES = 1 << 20
"""Placeholders are a few KiB: larger modules are not read again for the mark."""


def verify_wheel(outcome: BuildOutcome, loaded: LoadedRecipe, *, smoke: bool) -> dict[str, Any]:
    """Check *outcome*'s wheel; return what was checked, for the build record.

    Raises :class:`BuildError` naming the wheel and the failed check.
    """
    if outcome.wheel is None:
        raise BuildError(
            f"The build of {outcome.cell.id} produced no wheel.",
            hint=f"See the build log: {outcome.log_path}",
        )
    check_contents(outcome.wheel, loaded.recipe.verify)
    recorded = check_no_work_directory(
        outcome.wheel.path, [outcome.job_dir.parent], own=outcome.job_dir
    )
    result: dict[str, Any] = {
        "contents": "passed",
        "extension_modules": list(loaded.recipe.verify.extension_modules),
        "build_directory_named_in": recorded,
    }
    if recorded:
        ui.info(
            f"note: {', '.join(recorded[:3])} record(s) where the package was built "
            f"({outcome.job_dir}), as the package does under pip: a build in another work "
            "directory writes another path there."
        )
    if smoke:
        result["smoke"] = smoke_test(outcome.wheel.path, loaded, outcome.cell)
    return result


def describe_verify(verify: Mapping[str, Any] | None) -> str:
    """A record's ``verify`` part in words: ``contents passed; smoke passed (3.1 s)``."""
    if not verify:
        return "not checked"
    parts = [f"contents {verify['contents']}"] if "contents" in verify else []
    smoke = verify.get("smoke")
    if smoke is None:
        parts.append("smoke not asked for (--smoke)")
    elif smoke.get("ran"):
        parts.append(f"smoke passed ({smoke['seconds']:.1f} s)")
    else:
        parts.append(f"smoke not run: {smoke['reason']}")
    return "; ".join(parts)


def check_contents(facts: WheelFacts, verify: Verify) -> None:
    """The recipe's extension globs, and no placeholder among the wheel's extension modules
    (whether or not a glob names them)."""
    check_wheel(facts, verify)
    with zipfile.ZipFile(facts.path) as wheel:
        for name, digest in sorted(facts.extensions.items()):
            small = wheel.getinfo(name).file_size <= _PLACEHOLDER_MAX_BYTES
            with wheel.open(name) as member:
                data = member.read(_PLACEHOLDER_MAX_BYTES if small else 4)
            head = data[:4]
            if small and PLACEHOLDER_MARK in data:
                raise BuildError(
                    f"{facts.path.name}: extension module {name} is a shard job's "
                    "placeholder (an empty shared object standing in for a link the shard "
                    "left to the link job).",
                    hint="A placeholder must never ship: build the wheel with `kiln build` "
                    "or take it from the link job.",
                )
            if digest == EMPTY_SHA256 or not head.startswith(OBJECT_MAGIC):
                raise BuildError(
                    f"{facts.path.name}: extension module {name} is not a shared object "
                    f"({'empty' if digest == EMPTY_SHA256 else 'starts with ' + repr(head)}): "
                    "a placeholder, such as a shard job writes for a link it could not make.",
                    hint="A placeholder must never ship. See the build log for the link "
                    "step of this module.",
                )


def requires_dist(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` entries, as written in its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        names = [
            n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        ]
        if len(names) != 1:
            raise BuildError(
                f"{wheel.name}: expected one *.dist-info/METADATA, found {len(names)}.",
                hint="The wheel is malformed; see the build log.",
            )
        text = archive.read(names[0]).decode("utf-8", "replace")
    return [str(value) for value in HeaderParser().parsestr(text).get_all("Requires-Dist", [])]


def cell_requirements(cell: Cell) -> list[str]:
    """What the cell itself pins at run time: a torch extension works only with the torch
    it was built against, which its Requires-Dist rarely names."""
    return [f"torch=={cell.torch}"] if cell.torch != NO_TORCH else []


def smoke_test(wheel: Path, loaded: LoadedRecipe, cell: Cell) -> dict[str, Any]:
    """Install *wheel* in front of its smoke environment and run the recipe's smoke code.

    Returns what ran (for the record); says why when nothing can run. Raises
    :class:`BuildError` when the smoke code fails.
    """
    verify = loaded.recipe.verify
    if not (verify.smoke or verify.import_name):
        reason = f"{loaded.path} has neither [verify] smoke nor [verify] import"
        ui.warn(f"--smoke: nothing to run: {reason}.")
        return {"ran": False, "reason": reason}
    code = verify.smoke or f"import {verify.import_name}"
    requirements = [*requires_dist(wheel), *verify.requires, *cell_requirements(cell)]
    started = time.perf_counter()
    with ui.step(f"Smoke-testing {wheel.name}"):
        python = ensure_smoke_environment(interpreter_for(cell.python), requirements)
        with tempfile.TemporaryDirectory(prefix="kiln-smoke-") as scratch:
            target = Path(scratch) / "site"
            run.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--no-deps",
                    "--disable-pip-version-check",
                    "--target",
                    str(target),
                    str(wheel),
                ],
                what="Installing the wheel for its smoke test",
            )
            env = {**os.environ, "PYTHONPATH": str(target)}
            for name in ("PYTHONHOME", "VIRTUAL_ENV"):
                env.pop(name, None)
            result = run.run([str(python), "-c", code], cwd=target, env=env, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"The smoke test of {wheel.name} failed:\n{result.output.strip()}",
            hint=f"The wheel was built but does not work; it was not published. The smoke "
            f"environment ({python.parent.parent}) holds: {', '.join(requirements) or 'nothing'} "
            "(the wheel's Requires-Dist and [verify] requires).",
        )
    return {
        "ran": True,
        "passed": True,
        "code": code,
        "requires": requirements,
        "environment": str(python.parent.parent),
        "seconds": round(time.perf_counter() - started, 3),
    }


def ensure_smoke_environment(interpreter: str, requirements: list[str]) -> Path:
    """The python of the smoke venv for (*interpreter*, *requirements*), made once.

    Made under a lock, like build environments, and complete only once its record is
    written: a directory without one is a failed attempt and is made again.
    """
    root = smoke_envs_dir()
    key = environment_key(interpreter, requirements)
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    python = final / "bin" / "python"
    record = final / "kiln-smoke-env.json"
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    holds.hold(root, key)
    with (root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.exists():
            return python
        shutil.rmtree(final, ignore_errors=True)
        run.run([interpreter, "-m", "venv", str(final)], env=env, what="Creating a smoke env")
        try:
            if requirements:
                run.run(
                    [
                        str(python),
                        "-m",
                        "pip",
                        "install",
                        "--disable-pip-version-check",
                        *sorted(set(requirements)),
                    ],
                    env=env,
                    what="Installing the smoke test's requirements (the wheel's Requires-Dist "
                    "and [verify] requires)",
                )
        except BuildError:
            shutil.rmtree(final, ignore_errors=True)
            raise
        record.write_text(
            json.dumps({"interpreter": interpreter, "requires": sorted(set(requirements))})
        )
        return python


def _blank_debug_sections(data: bytes) -> bytes:
    """An ELF file with its ``.debug_*`` sections zeroed; anything else unchanged.

    DWARF records the compile's working directory (``DW_AT_comp_dir``) by design, and
    setuptools compiles with ``-g``: that is a property of the debug info, not a path
    the package uses. Everything else (``__config__.py``, RPATHs, strings) is checked.
    """
    import struct

    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # 64-bit little-endian only
        return data
    try:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        names_offset, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
        blanked = bytearray(data)
        for index in range(shnum):
            header = shoff + index * shentsize
            name, = struct.unpack_from("<I", data, header)
            offset, size = struct.unpack_from("<QQ", data, header + 0x18)
            end = data.find(b"\0", names_offset + name)
            section = data[names_offset + name : end]
            if section.startswith((b".debug_", b".zdebug_")):
                blanked[offset : offset + size] = bytes(min(size, max(0, len(data) - offset)))
        return bytes(blanked)
    except struct.error:
        return data  # not a well-formed ELF file: search all of it


def check_no_work_directory(
    wheel: Path, work_dirs: Sequence[Path], own: Path | None = None
) -> list[str]:
    """No file in *wheel* names a kiln work directory (a job's private copy of the tree,
    its build directory, its compiler front scripts), but for a package's own record of
    where it was built; return the files that hold one.

    A wheel that names one ships the build machine's layout: meson's ``__config__.py``
    recorded ``<workdir>/<cell>/kiln-bin/cc``, so the sharded wheel (from the link job's
    directory) differed from the unsharded one. Debug sections are not searched
    (:func:`_blank_debug_sections`). A file that is no compiled object may name the build
    environments as the build sees them (``<workdir>/.envs/<key>``,
    :func:`wheelkiln.paths.envs_view`; numpy's ``__config__.py`` records the build's
    interpreter) and the CUDA toolkit views (``<workdir>/.cuda/<digest>``,
    :func:`wheelkiln.paths.cuda_views`): each is the same path in every job of the
    workdir. A compiled object may not: there it is an RPATH, which loads nothing on
    another machine.

    *own* is the directory of the job that made the wheel, the cell's own (an unsharded
    build and a link job build there). A file that is no compiled object may name it:
    some packages record where they were built by design (contourpy's
    ``_build_config.py``: its build and source directories, its meson options), as their
    wheels from pip record pip's directory; the unsharded and the sharded wheel name the
    same one. A compiled object may not (an RPATH into the build directory loads nothing
    on another machine), nor may any file name another job's directory (a shard's).
    """
    names = {str(path) for path in work_dirs} | {os.path.realpath(path) for path in work_dirs}
    views = b"|".join(re.escape(f"/{view}/".encode()) for view in (ENVS_VIEW, CUDA_VIEWS))
    needles = [
        re.compile(re.escape(name.encode()) + b"(?!" + views + b")") for name in sorted(names)
    ]
    anywhere = [re.compile(re.escape(name.encode())) for name in sorted(names)]
    own_names = {str(own), os.path.realpath(own)} if own is not None else set()
    # The directory itself, or a path below it: not a sibling whose name it begins.
    ours = [re.compile(re.escape(name.encode()) + rb"(?![A-Za-z0-9._-])") for name in own_names]
    found: list[str] = []
    recorded: list[str] = []
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.is_dir():
                continue
            data = _blank_debug_sections(archive.read(member))
            if data.startswith(OBJECT_MAGIC):
                if any(needle.search(data) for needle in anywhere):
                    found.append(member.filename)
                continue
            if not any(needle.search(data) for needle in needles):
                continue
            if ours:
                rest = data
                for pattern in ours:
                    rest = pattern.sub(b"", rest)
                if not any(needle.search(rest) for needle in needles):
                    recorded.append(member.filename)
                    continue
            found.append(member.filename)
    if found:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise BuildError(
            f"{wheel.name}: {len(found)} file(s) name the kiln work directory "
            f"{sorted(str(path) for path in work_dirs)[0]}: {shown}.",
            hint="The wheel would ship this machine's build layout. Find what records the "
            "path (a compiler command, an RPATH, a generated config file) and make it "
            "record a stable one.",
        )
    return recorded
