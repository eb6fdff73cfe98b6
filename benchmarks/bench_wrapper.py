"""The seat wrapper's own cost per TU: a stub (an out-of-slice TU) and a pass-through
compile, timed for this tree and, with --against SRC, for another wheelkiln ``src`` tree
(an older commit's worktree), interleaved so load changes hit both alike.

    .venv/bin/python benchmarks/bench_wrapper.py --against ../before/src [--nvcc]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "src"


def wrapper_argv(src: Path) -> list[str]:
    code = (f"import sys;sys.path[0]={str(src)!r};"
            "from wheelkiln.shard.wrapper import exit_fast,main;exit_fast(main())")
    return [os.path.realpath(sys.executable), "-S", "-E", "-c", code]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="another wheelkiln src tree to compare")
    parser.add_argument("--nvcc", action="store_true", help="time an nvcc TU instead of a gcc one")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = {"this tree": HERE, **({"against": args.against.resolve()} if args.against else {})}
    with tempfile.TemporaryDirectory(prefix="kiln-bench-wrapper-") as tmp:
        root = Path(tmp)
        (root / "pkg" / "src").mkdir(parents=True)
        (root / "empty.o").write_bytes(b"")
        if args.nvcc:
            if shutil.which("nvcc") is None:
                sys.exit("bench_wrapper: --nvcc needs nvcc on PATH")
            (root / "pkg" / "src" / "t.cu").write_text("__global__ void k() {}\n")
            compile_ = ["nvcc", "-c", str(root / "pkg/src/t.cu"), "-o", str(root / "t.o"),
                        "-MD", "-MF", str(root / "t.d")]
        else:
            (root / "pkg" / "src" / "t.c").write_text("int f(void) { return 1; }\n")
            compile_ = ["gcc", "-c", str(root / "pkg/src/t.c"), "-o", str(root / "t.o")]

        def env(index: int, log: str) -> dict[str, str]:
            return {**os.environ, "KILN_SHARD_INDEX": str(index), "KILN_SHARD_COUNT": "2",
                    "KILN_CACHE": "", "KILN_PACKAGE_ROOT": str(root / "pkg"),
                    "KILN_SHARD_LOG": log, "KILN_STUB_OBJECT": str(root / "empty.o")}

        def action(index: int) -> str:
            log = root / f"log-{index}"
            subprocess.run([*wrapper_argv(HERE), *compile_], env=env(index, str(log)), check=True)
            return str(json.loads(log.read_text().splitlines()[-1])["action"])

        stub_index = 0 if action(0) == "stub" else 1
        times: dict[str, dict[str, list[float]]] = {name: {"stub": [], "compile": []} for name in trees}
        for _ in range(args.rounds):
            for name, src in trees.items():
                for kind, index in (("stub", stub_index), ("compile", 1 - stub_index)):
                    start = time.perf_counter()
                    subprocess.run([*wrapper_argv(src), *compile_], env=env(index, os.devnull),
                                   check=True)
                    times[name][kind].append((time.perf_counter() - start) * 1000)
    figures = {name: {kind: statistics.median(values) for kind, values in kinds.items()}
               for name, kinds in times.items()}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    tool = "nvcc" if args.nvcc else "gcc"
    for name, medians in figures.items():
        print(f"{name}: stub {medians['stub']:.1f} ms, wrapper + {tool} compile "
              f"{medians['compile']:.1f} ms (medians of {args.rounds})")


if __name__ == "__main__":
    main()
