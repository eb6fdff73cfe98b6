"""Tool probes (``PROGRAM --version`` and the like), each run once per job.

A job asked the same programs the same question several times: the toolchain
fingerprint (gcc, nvcc, cmake, the cache), the key of CMake's kept compiler
identification (cmake again, then ``cc``, ``c++``, ``gcc`` and ``g++``, which resolve to
two programs, and ``$CUDACXX``, which is nvcc again) and, with ``build.linker`` set on
a CMake package, cmake a third time. A probe is asked once per job and its answer
kept: twelve processes became eight in a demo-kernels link job.

Answers are kept for one job only: :func:`start_job` forgets them, so a long-lived
process (a Dask worker running one job after another) asks again and sees a compiler
that changed between two jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

from wheelkiln import run

_answers: dict[tuple[str, ...], run.Completed] = {}


def start_job() -> None:
    """Forget every answer: the next probe of each program runs it again."""
    _answers.clear()


def probe(argv: Sequence[str], *, check: bool = False) -> run.Completed:
    """*argv* run once for the job (:func:`wheelkiln.run.run`), keyed by the program's
    resolved path and the arguments. *check* raises as ``run.run`` does on a failure,
    which is not kept."""
    key = (run.find_executable(argv[0]), *argv[1:])
    done = _answers.get(key)
    if done is None or (check and done.returncode != 0):
        done = run.run(list(argv), check=check)
        _answers[key] = done
    return done
