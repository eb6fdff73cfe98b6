"""First-build balance: the census plan (no history) against the hash, on skewed TU costs.

    nice -n 19 .venv/bin/python benchmarks/bench_plan.py [--count 4] [--json]

Writes a skewed package (demo-kernels' shape: 24 kernel TUs in families of 12, 8 and
4, of which 4 are heavy: each instantiates a template kernel many times, as generated
CUTLASS-style TUs do), then compiles every TU once for real with nvcc (one arch, one at
a time) to learn what each really costs. Then, with those costs as the truth:

- hash: the slowest shard over the mean under the path hash (what a shard does with no map);
- census (source size): the census plan from the cost model over source sizes, no history;
- census (preprocessed size): the same model fed the size of ``nvcc -E`` output instead;
- history: the census plan from the measured costs themselves (families still spread);
- history, longest first: ``kiln shard-plan``'s map from the measured costs (no family rule).

It also prints how well each predictor ranks the TUs (Spearman's rho against the
measured seconds). Goal: census ≤ 1.15 without history, ≤ 1.05 with it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from wheelkiln.plan.census import CostModel, census_from_scan  # noqa: E402
from wheelkiln.plan.planner import census_plan, hash_plan, imbalance, shard_loads  # noqa: E402
from wheelkiln.recipe.model import Family  # noqa: E402
from wheelkiln.shard.balance import balance  # noqa: E402

FAMILIES = (("sm80", 12), ("sm89", 8), ("sm90", 4))
HEAVY = {"sm80_k03", "sm80_k09", "sm89_k05", "sm90_k02"}
INSTANCES = 48

LIGHT_TU = """\
__global__ void {name}(float* out, const float* in, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * {scale}.0f;
}}
"""
HEAVY_HEAD = """\
template <int M, int N>
__global__ void {name}_t(float* out, const float* in, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < M; ++k) acc += in[(i + k * N) % n] * (k + 1);
  if (i < n) out[i] = acc;
}}
"""
HEAVY_INSTANCE = "template __global__ void {name}_t<{m}, {n}>(float*, const float*, int);\n"


def write_package(root: Path) -> list[str]:
    keys = []
    for family, count in FAMILIES:
        for index in range(count):
            name = f"{family}_k{index:02d}"
            path = root / "csrc" / "generated" / family / f"{name}.cu"
            path.parent.mkdir(parents=True, exist_ok=True)
            if name in HEAVY:
                text = HEAVY_HEAD.format(name=name) + "".join(
                    HEAVY_INSTANCE.format(name=name, m=8 + 4 * (j % 12), n=1 + j)
                    for j in range(INSTANCES)
                )
            else:
                text = LIGHT_TU.format(name=name, scale=index + 1)
            path.write_text(text)
            keys.append(path.relative_to(root).as_posix())
    return keys


def compile_seconds(nvcc: str, source: Path, scratch: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [nvcc, "-c", "-arch=sm_80", "-O2", str(source), "-o", str(scratch / "tu.o")],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def preprocessed_bytes(nvcc: str, source: Path) -> int:
    done = subprocess.run([nvcc, "-E", "-arch=sm_80", str(source)], check=True, capture_output=True)
    return len(done.stdout)


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        for rank, index in enumerate(order):
            out[index] = float(rank)
        return out

    rx, ry = ranks(xs), ranks(ys)
    mean = (len(xs) - 1) / 2
    cov = sum((a - mean) * (b - mean) for a, b in zip(rx, ry, strict=True))
    var = sum((a - mean) ** 2 for a in rx)
    return cov / var if var else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=4, help="N shards (default 4)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        sys.exit("nvcc is not on PATH: this benchmark compiles CUDA TUs.")
    families = tuple(Family(name=name, pattern=f"/{name}/") for name, _ in FAMILIES)
    with tempfile.TemporaryDirectory(prefix="kiln-bench-plan-") as tmp:
        root = Path(tmp) / "pkg"
        keys = write_package(root)
        truth = {}
        pre = {}
        for number, key in enumerate(keys, 1):
            truth[key] = compile_seconds(nvcc, root / key, Path(tmp))
            pre[key] = preprocessed_bytes(nvcc, root / key)
            print(f"  {number}/{len(keys)} {key}: {truth[key]:.2f} s", file=sys.stderr)
        census = census_from_scan(root, families, archs=1)
    member = {tu.key: tu.family for tu in census.tus}
    by_size = census.costs()
    model = CostModel()
    by_pre = {key: model.estimate("cuda", pre[key], 1) for key in keys}
    n = args.count

    def ratio(mapping: dict[str, int]) -> float:
        return round(imbalance(shard_loads(truth, mapping, n)), 3)

    figures = {
        "count": n,
        "tus": len(keys),
        "heavy_tus": len(HEAVY),
        "measured_seconds_total": round(sum(truth.values()), 2),
        "slowest_over_mean": {
            "hash": ratio(hash_plan(keys, n)),
            "census (source size)": ratio(census_plan(by_size, member, n)),
            "census (preprocessed size)": ratio(census_plan(by_pre, member, n)),
            "history": ratio(census_plan(truth, member, n)),
            "history, longest first": ratio(balance(truth, n).mapping),
        },
        "spearman_rho_vs_measured": {
            "source size": round(spearman(list(by_size.values()), [truth[k] for k in by_size]), 3),
            "preprocessed size": round(
                spearman([by_pre[k] for k in keys], [truth[k] for k in keys]), 3
            ),
        },
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"{len(keys)} TUs ({len(HEAVY)} heavy), {figures['measured_seconds_total']} s of compiles, N={n}"
    )
    for name, value in figures["slowest_over_mean"].items():  # type: ignore[attr-defined]
        print(f"  slowest shard / mean, {name}: {value}")
    for name, value in figures["spearman_rho_vs_measured"].items():  # type: ignore[attr-defined]
        print(f"  rank correlation with the measured seconds, {name}: {value}")


if __name__ == "__main__":
    main()
