"""``meson --version`` answered without starting meson.

meson-python checks meson's version before every build (``meson --version``): a Python
start that imports mesonbuild, 0.3 s on this machine (1 s under load) of a hot
demo-cython build whose whole setup takes under 1 s. In a meson build kiln puts a
``meson`` script first on PATH that prints the real meson's answer for exactly
``meson --version`` and hands every other call to the real meson (``exec``), which then
records itself, not the script, for regenerating the build.

The answer is asked of the real meson once and kept under ``$KILN_HOME/meson-version``,
keyed by the real script's resolved path, inode, size and modification time: installing
another meson writes another script, so the key changes with the answer. Where the
answer cannot be kept, there is no front and meson runs as it is. The script holds the
answer and the real path; it is content-addressed like the compiler fronts
(:func:`wheelkiln.builder.toolchain.install_script`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

from wheelkiln import holds, run
from wheelkiln.builder.compiler_answers import file_identity
from wheelkiln.builder.toolchain import install_script

VERSION = re.compile(r"\d+(\.\d+)+\S*\n?")
"""What ``meson --version`` prints: the version alone, on one line."""


def version_key(real: str) -> str:
    """The key of *real*'s answer: its resolved path and the file's identity."""
    return hashlib.sha256(file_identity(real).encode()).hexdigest()[:20]


def meson_front(environ: Mapping[str, str], store: Path, scripts_dir: Path) -> str | None:
    """The directory of a ``meson`` front for the build's PATH, or None when no meson is
    on that PATH or it does not answer ``--version`` (then meson runs as it is)."""
    real = shutil.which("meson", path=environ.get("PATH", os.defpath))
    if real is None:
        return None
    return answering_front(
        "meson", real, "--version", store / version_key(real), VERSION, environ, scripts_dir
    )


def answering_front(
    name: str,
    real: str,
    question: str,
    kept: Path,
    answer: re.Pattern[str],
    environ: Mapping[str, str],
    scripts_dir: Path,
) -> str | None:
    """The directory of a *name* front that prints the answer kept in *kept* for exactly
    ``name QUESTION`` and ``exec``s *real* for every other call; the answer is asked of
    *real* once when nothing is kept. None where the answer (with its stderr) is not
    what *answer* matches, or cannot be kept: then the real program runs as it is."""
    try:
        said = kept.read_text(encoding="utf-8")
    except OSError:
        done = run.run([real, question], env=environ, check=False)
        if done.returncode != 0 or not answer.fullmatch(done.output):
            return None
        said = done.output
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            staged = kept.with_name(f".{kept.name}.{os.getpid()}")
            staged.write_text(said, encoding="utf-8")
            staged.replace(kept)
        except OSError:
            return None
    # Its use, for `kiln answers prune`: the answer is in the front from here on.
    holds.hold(kept.parent, kept.name)
    body = (
        f'if [ "$#" -eq 1 ] && [ "$1" = {shlex.quote(question)} ]; then\n'
        f"  printf '%s' {shlex.quote(said)}\n"
        "  exit 0\n"
        "fi\n"
        f'exec {shlex.quote(real)} "$@"'
    )
    return str(install_script(scripts_dir, name, body).parent)
