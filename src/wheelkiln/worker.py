"""A worker process: call one library function and hand back what it returned or
raised (started by :func:`wheelkiln.run.call_in_child`, never by people).

``python -m wheelkiln.worker CALL ANSWER [LABEL...]``: CALL holds the pickled
``(function, args, kwargs)``, ANSWER receives ``(True, value)`` or ``(False,
exception)``. The exit code is 0 when the function returned, the error's exit code for
a :class:`KilnError`, and 70 for anything else (its traceback is in the output).
"""

from __future__ import annotations

import pickle
import sys
import traceback
from pathlib import Path

from wheelkiln.errors import KilnError

INTERNAL_ERROR = 70


def _answer(path: Path, answer: tuple[bool, object]) -> None:
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_bytes(pickle.dumps(answer))
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        # An exception that cannot travel still ends the call with its words.
        partial.write_bytes(pickle.dumps((False, RuntimeError(f"{answer[1]!r} ({exc})"))))
    partial.replace(path)  # whole or absent: a killed worker leaves no half answer


def main(argv: list[str]) -> int:
    call, answer = Path(argv[1]), Path(argv[2])
    function, args, kwargs = pickle.loads(call.read_bytes())
    try:
        value = function(*args, **kwargs)
    except KilnError as exc:
        print(f"error: {exc.render()}", file=sys.stderr)
        _answer(answer, (False, exc))
        return exc.exit_code
    except Exception as exc:
        traceback.print_exc()
        _answer(answer, (False, exc))
        return INTERNAL_ERROR
    _answer(answer, (True, value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
