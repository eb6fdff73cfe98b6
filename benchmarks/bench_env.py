"""Build environment creation: venv + pip against uv, and kiln's own against plain uv.

    .venv/bin/python benchmarks/bench_env.py [--set NAME ...] [--torch] [--rounds K] [--json]
    .venv/bin/python benchmarks/bench_env.py --first-build RECIPE [--rounds K] [--json]

Each requirement set is installed three ways, each first with an empty package cache
(cold: a private ``PIP_CACHE_DIR`` / ``UV_CACHE_DIR``) and then again into a new
environment with that cache filled (warm; with ``--rounds K``, K times, the three ways
taking turns, and the median of each, every run's seconds in the JSON):

* pip: ``python -m venv`` plus ``pip install`` (how kiln made environments before uv);
* uv: ``uv venv`` plus ``uv pip install``;
* kiln: ``ensure_environment`` from an empty environments directory, as a build calls it
  (its warm run with the bytecode the cold run kept beside it, as uv's with the package
  cache the cold run filled): one uv install into a relocatable venv, the lock and its
  key, the move to ``envs/<key>`` (goal: within 1.2x of plain uv). The backend's
  ``get_requires_for_build_wheel`` is asked in the build's own process, before
  ``build_wheel``, where the backend is imported for the build anyway; what that call
  adds is measured apart (``ask s``: the call alone, in a process that imported the
  backend) and shown with kiln's time (``(+ask)``). The bytecode compile, which goes on
  beside the build, is waited for after and shown apart (``+bc s``: what was left of it
  when ``ensure_environment`` returned; plain uv compiles none).

``--first-build RECIPE`` measures what a build pays instead: a recipe's whole ``kiln build``
(this checkout's kiln) after its environments were deleted, K times (``--rounds``), with a
warm package cache and every compile a cache hit (a warm-up build first), in a private
``KILN_HOME``: the median seconds, whole job and build step. Run from two checkouts, it
compares their environment handling on a real build.

Sets: ``cmake`` is the issue's (scikit-build-core, pybind11, cmake, ninja, setuptools,
wheel), ``setuptools`` a small one (setuptools, pybind11). ``--torch`` adds the CUDA torch
build requirement (torch and setuptools: about 5.4 GB, many minutes; opt-in). All of it
asks the package index, so the figures include the network as a build sees it.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from wheelkiln.builder.environment import (
    choose_installer,
    ensure_environment,
    find_uv,
    finish_bytecode,
    interpreter_for,
    interpreter_identity,
)

SETS: dict[str, tuple[str, list[str]]] = {
    "cmake": (
        "scikit_build_core.build",
        ["scikit-build-core", "pybind11", "cmake", "ninja", "setuptools", "wheel"],
    ),
    "setuptools": ("setuptools.build_meta", ["setuptools", "pybind11"]),
    "torch": ("setuptools.build_meta", ["torch", "setuptools"]),
}
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def call(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def with_pip(requirements: list[str], target: Path, env: dict[str, str]) -> None:
    interpreter = interpreter_for(PYTHON)
    call([interpreter, "-m", "venv", str(target)], env)
    call([str(target / "bin" / "python"), "-m", "pip", "install", "--quiet",
          "--disable-pip-version-check", *requirements], env)  # fmt: skip


def with_uv(uv: str, requirements: list[str], target: Path, env: dict[str, str]) -> None:
    # The indexes, links and constraints pip reads (pip.conf), as kiln hands them to uv,
    # so that plain uv resolves from the same places as pip and kiln.
    indexes = choose_installer(env).index_args
    call([uv, "venv", "--quiet", "--python", interpreter_for(PYTHON), str(target)], env)
    call([uv, "pip", "install", "--quiet", "--python", str(target / "bin" / "python"),
          *indexes, *requirements], env)  # fmt: skip


_ASK = """\
import importlib, json, sys, time
backend = importlib.import_module(sys.argv[1])
started = time.perf_counter()
backend.get_requires_for_build_wheel({})
print(json.dumps(time.perf_counter() - started))
"""
"""The backend's get_requires_for_build_wheel alone, timed in a process that imported the
backend already, as the build's process has (wheelkiln.builder.ask_then_build)."""


def with_kiln(
    backend: str, requirements: list[str], scratch: Path, envs: Path, env: dict[str, str]
) -> tuple[float, float, float]:
    """Seconds until the environment is usable, then until its bytecode is compiled, and
    what asking the backend's dynamic requirements adds to the build's process. *envs* is
    new and empty; beside it is kiln's kept bytecode (``bytecode/``), which the cold run
    fills for the warm one as it fills uv's package cache."""
    tree = scratch / "tree"
    tree.mkdir(parents=True, exist_ok=True)
    quoted = ", ".join(json.dumps(req) for req in requirements)
    (tree / "pyproject.toml").write_text(
        f"[build-system]\nrequires = [{quoted}]\nbuild-backend = {json.dumps(backend)}\n"
        '[project]\nname = "bench-env"\nversion = "0"\n'
    )
    interpreter_identity.cache_clear()  # a build probes the interpreter once too
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        started = time.perf_counter()
        made = ensure_environment(tree, PYTHON, [], envs, base_env=env, ask_in_build=True)
        usable = time.perf_counter()
        finish_bytecode()
        compiled = time.perf_counter()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert made.ask_backend, "a new request's backend is asked in the build"
    asked = subprocess.run(
        [str(made.python), "-c", _ASK, backend.split(":")[0]],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return usable - started, compiled - usable, float(asked.stdout.splitlines()[-1])


ROOT = Path(__file__).resolve().parents[1]


def first_builds(recipe: str, rounds: int, scratch: Path) -> dict[str, Any]:
    """*rounds* whole ``kiln build`` runs of *recipe*, each after ``envs/`` was deleted,
    after one warm-up build that fills the package and compiler caches."""
    home = scratch / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "KILN_BUILDER_LOCK")}
    env.update(
        KILN_HOME=str(home),
        KILN_STATE_HOME=str(scratch / "state"),
        UV_CACHE_DIR=str(scratch / "uv-cache"),
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p),
    )
    argv = [sys.executable, "-m", "wheelkiln", "build", recipe, "--json", "--no-wheel-cache",
            "--out", str(scratch / "out"), "--workdir", str(scratch / "work"),
            "--cache-dir", str(scratch / "ccache")]  # fmt: skip
    runs: list[dict[str, float]] = []
    for round_ in range(rounds + 1):
        shutil.rmtree(home / "envs", ignore_errors=True)
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
        whole = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"kiln build {recipe} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        if round_:  # the first one is the warm-up
            build = float(json.loads(done.stdout)["wall_seconds"])
            runs.append({"seconds": round(whole, 3), "build_seconds": build})
    return {
        "recipe": recipe,
        "rounds": rounds,
        "runs": runs,
        "median_seconds": round(statistics.median(r["seconds"] for r in runs), 3),
        "median_build_seconds": round(statistics.median(r["build_seconds"] for r in runs), 3),
        "load_average": os.getloadavg(),
    }


METHODS = ("pip", "uv", "kiln")


def measure(name: str, uv: str, root: Path, rounds: int = 1) -> dict[str, Any]:
    """Each method cold once, then warm *rounds* times, the methods taking turns in each
    round (so a drift in the machine's speed reaches all three); warm figures are the
    medians, with every run's seconds beside them."""
    backend, requirements = SETS[name]
    base = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    base["KILN_INSTALLER"] = "uv"

    def caches_of(method: str) -> Path:
        return root / f"{name}-{method}-cache"

    def one(method: str, condition: str, round_: int) -> dict[str, float]:
        caches = caches_of(method)
        env = {**base, "PIP_CACHE_DIR": str(caches / "pip"), "UV_CACHE_DIR": str(caches / "uv")}
        target = root / f"{name}-{method}-{condition}-{round_}"
        run: dict[str, float] = {}
        started = time.perf_counter()
        if method == "pip":
            with_pip(requirements, target, env)
        elif method == "uv":
            with_uv(uv, requirements, target, env)
        else:
            envs = caches / f"envs-{condition}-{round_}"
            usable, compiling, ask = with_kiln(backend, requirements, target, envs, env)
            shutil.rmtree(envs, ignore_errors=True)  # its bytecode stays kept beside it
            run["ask"] = ask
            run["bytecode_after"] = compiling
        # kiln: ensure_environment's call, its imports included
        run["seconds"] = usable if method == "kiln" else time.perf_counter() - started
        shutil.rmtree(target, ignore_errors=True)
        return run

    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    for method in METHODS:
        runs[(method, "cold")] = [one(method, "cold", 0)]
    for round_ in range(rounds):
        for method in METHODS:
            runs.setdefault((method, "warm"), []).append(one(method, "warm", round_))
    for method in METHODS:
        shutil.rmtree(caches_of(method), ignore_errors=True)

    figures: dict[str, Any] = {"warm_rounds": rounds}
    for (method, condition), done in runs.items():
        def median(key: str, done: list[dict[str, float]] = done) -> float:
            return round(statistics.median(run[key] for run in done), 3)

        figures[f"{method}_{condition}"] = median("seconds")
        if len(done) > 1:
            figures[f"{method}_{condition}_runs"] = [round(run["seconds"], 3) for run in done]
        if method == "kiln":
            figures[f"kiln_ask_{condition}"] = median("ask")
            figures[f"kiln_bytecode_after_{condition}"] = median("bytecode_after")
    for condition in ("cold", "warm"):
        uv_seconds = figures[f"uv_{condition}"]
        figures[f"uv_over_pip_{condition}"] = round(uv_seconds / figures[f"pip_{condition}"], 3)
        figures[f"kiln_over_uv_{condition}"] = round(figures[f"kiln_{condition}"] / uv_seconds, 3)
        with_ask = figures[f"kiln_{condition}"] + figures[f"kiln_ask_{condition}"]
        figures[f"kiln_with_ask_over_uv_{condition}"] = round(with_ask / uv_seconds, 3)
        with_bytecode = figures[f"kiln_{condition}"] + figures[f"kiln_bytecode_after_{condition}"]
        figures[f"kiln_with_bytecode_over_uv_{condition}"] = round(with_bytecode / uv_seconds, 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", dest="sets", action="append", choices=["cmake", "setuptools"],
                        help="a requirement set (default: both)")  # fmt: skip
    parser.add_argument("--torch", action="store_true",
                        help="add the CUDA torch build requirement (about 5.4 GB; slow)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, metavar="K",
                        help="warm runs of each method, taking turns; medians (default 1)")  # fmt: skip
    parser.add_argument("--first-build", metavar="RECIPE",
                        help="time whole builds of RECIPE after deleting its environments")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if not 1 <= args.rounds <= 50:
        parser.error(f"--rounds {args.rounds}: give 1 to 50 warm rounds")
    if args.first_build:
        compileall.compile_dir(ROOT / "src", quiet=1)  # as installing kiln compiles it
        with tempfile.TemporaryDirectory(prefix="kiln-bench-first-") as tmp:
            print(f"measuring first builds of {args.first_build}", file=sys.stderr)
            figures = first_builds(args.first_build, args.rounds, Path(tmp))
        if args.json:
            print(json.dumps(figures, indent=2))
        else:
            runs = ", ".join(f"{run['seconds']:.2f}" for run in figures["runs"])
            print(
                f"{args.first_build}: a whole kiln build after deleting its environments, "
                f"median of {args.rounds}: {figures['median_seconds']:.2f} s (runs {runs}; "
                f"build step {figures['median_build_seconds']:.2f} s)"
            )
        return
    uv = find_uv()
    if uv is None:
        sys.exit("uv is not installed: `pip install uv` (wheelkiln depends on it).")
    names = list(args.sets or ["cmake", "setuptools"]) + (["torch"] if args.torch else [])
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kiln-bench-env-") as tmp:
        for name in names:
            print(f"measuring {name}: {' '.join(SETS[name][1])}", file=sys.stderr)
            results[name] = measure(name, uv, Path(tmp), args.rounds)
    if args.json:
        print(
            json.dumps(
                {
                    "python": PYTHON,
                    "sets": results,
                    "goal": "kiln/uv <= 1.2",
                    "load_average": os.getloadavg(),
                },
                indent=2,
            )
        )
        return
    print(
        f"{'set':<11} {'cache':<5} {'pip s':>7} {'uv s':>7} {'kiln s':>7} {'ask s':>7} "
        f"{'+bc s':>7} {'uv/pip':>7} {'kiln/uv':>8} {'(+ask)':>7} {'(+bc)':>6}"
    )
    for name, figures in results.items():
        for condition in ("cold", "warm"):
            print(
                f"{name:<11} {condition:<5} {figures[f'pip_{condition}']:>7.2f} "
                f"{figures[f'uv_{condition}']:>7.2f} {figures[f'kiln_{condition}']:>7.2f} "
                f"{figures[f'kiln_ask_{condition}']:>7.2f} "
                f"{figures[f'kiln_bytecode_after_{condition}']:>7.2f} "
                f"{figures[f'uv_over_pip_{condition}']:>7.3f} "
                f"{figures[f'kiln_over_uv_{condition}']:>8.2f} "
                f"{figures[f'kiln_with_ask_over_uv_{condition}']:>7.2f} "
                f"{figures[f'kiln_with_bytecode_over_uv_{condition}']:>6.2f}"
            )
    load = " / ".join(f"{figure:.1f}" for figure in os.getloadavg())
    print(
        "goal: kiln/uv <= 1.2. kiln s: until the environment is usable, as a build makes it. "
        "ask s: what asking the backend's get_requires_for_build_wheel adds to the\n"
        "build's process (the call alone; the backend is imported for build_wheel anyway); "
        "(+ask): kiln with it. +bc s: the rest of its bytecode compile, still running\n"
        "then (it goes on beside the build), waited for after; plain uv compiles none; "
        f"(+bc): kiln with it. Warm: medians of {args.rounds} round(s). load average: {load}"
    )


if __name__ == "__main__":
    main()
