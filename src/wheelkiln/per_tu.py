"""The commands that start kiln's per-TU programs: the cache launcher, the seat wrapper
and the Cython front (stdlib only, a leaf).

Build systems start them once per TU, through the compiler front scripts the builder
writes (:mod:`wheelkiln.builder.toolchain`). Those scripts need the commands, not the
programs: naming the programs here by module lets the builder write them without
importing the shard package, which imports the builder.

``python -S -E -c CODE`` imports a program from its cached bytecode. Running its file by
path also works, but Python compiles a script run by path from source on every start
(~3.5 ms per TU for the wrapper). The code contains ``;``, so it belongs in a shell
script (shell-quoted), not in a CMake list.
"""

# ruff: noqa: PTH100, PTH120
from __future__ import annotations

import os
import sys

SRC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The ``src`` directory holding the ``wheelkiln`` package."""


SEAT_SCRIPT = "kiln-seat"
"""The name of the script that starts the seat wrapper (the CMake launcher; the CC/CXX
fronts exec it in shards): shard/ahead.py finds ninja's compiles by it."""

CYTHON_FRONT_MARK = "wheelkiln Cython front"
"""In every Cython front script, so :func:`wheelkiln.cache.cython.find_real` skips them."""


def _python_c(code: str, python: str | None) -> list[str]:
    return [python or os.path.realpath(sys.executable), "-S", "-E", "-c", code]


def launcher_argv(python: str | None = None) -> list[str]:
    """Starts :mod:`wheelkiln.cache.launch`; append ``CACHE_OR_EMPTY REAL_NVCC ARGS...``."""
    code = f"import sys;sys.path[0]={SRC_DIR!r};from wheelkiln.cache.launch import main;main()"
    return _python_c(code, python)


def seat_wrapper_argv(python: str | None = None) -> list[str]:
    """Starts :mod:`wheelkiln.shard.wrapper`; append ``REAL_COMPILER ARGS...``."""
    code = (
        f"import sys;sys.path[0]={SRC_DIR!r};"
        "from wheelkiln.shard.wrapper import exit_fast,main;exit_fast(main())"
    )
    return _python_c(code, python)


def cython_front_argv(python: str | None = None) -> list[str]:
    """Starts :mod:`wheelkiln.cython_front`; append ``FRONT_PATH CYTHON_ARGS...``."""
    code = (
        f"import sys;sys.path[0]={SRC_DIR!r};"
        "from wheelkiln.cython_front import main;sys.exit(main())"
    )
    return _python_c(code, python)
