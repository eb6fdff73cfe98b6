"""Run by a build environment's interpreter, by path, in place of pyproject_hooks' in-process
script: ask the backend's ``get_requires_for_build_wheel`` and, where it asks for nothing,
call ``build_wheel`` in the same process.

    python ask_then_build.py IN_PROCESS_SCRIPT build_wheel CONTROL_DIR

The hooks run through pyproject_hooks' own script (``IN_PROCESS_SCRIPT``), imported here,
so the backend sees what it sees under pip and build. The first hook's answer is written
to ``CONTROL_DIR/asked/output.json``. Where it is anything but an empty list (a requirement,
a backend that could not be imported), the process ends without calling ``build_wheel``
and without ``CONTROL_DIR/output.json``: kiln reads the answer, installs what it asks for
(:func:`wheelkiln.builder.environment.settle_dynamic`) and calls ``build_wheel`` by itself.

Standard library only, and nothing of wheelkiln on ``sys.path``: the backend imports from
the build environment alone.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    here = os.path.normcase(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.normcase(Path(p).resolve()) != here]
    script, hook_name, control = sys.argv[1:4]
    sys.path.insert(0, str(Path(script).parent))
    import _in_process  # type: ignore[import-not-found]  # pyproject_hooks' script

    asked = Path(control) / "asked"
    asked.mkdir()
    given = json.loads((Path(control) / "input.json").read_text(encoding="utf-8"))
    settings = given["kwargs"].get("config_settings")
    (asked / "input.json").write_text(
        json.dumps({"kwargs": {"config_settings": settings}}), encoding="utf-8"
    )
    # main() takes its hook and control directory from argv, and takes its own directory
    # off sys.path again.
    sys.argv = [script, "get_requires_for_build_wheel", str(asked)]
    _in_process.main()
    answer = json.loads((asked / "output.json").read_text(encoding="utf-8"))
    if answer.get("return_val") != [] or answer.get("no_backend"):
        return
    sys.argv = [script, hook_name, control]
    _in_process.main()


if __name__ == "__main__":
    main()
