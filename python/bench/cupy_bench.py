"""CuPy workloads under CuPy's MemoryPool, its MemoryAsyncPool and soma (soma.cupy), each
allocator in a process of its own: time per step and peak memory, side by side.

    python3 python/bench/cupy_bench.py --out DIR [--steps 200] [--allocators a,b]

Workloads (one step each; shapes drawn from a fixed seed, so every allocator sees the same
sequence of requests):
  elementwise  arrays of 1 K to 4 M elements: arithmetic, a sort, reductions
  fft          batched complex FFTs of changing batch and length, with their inverse
  linalg       matrix products and a solve of changing size

Peak memory: soma, reserved_high_bytes of its pool; MemoryAsyncPool, the device pool's
cudaMemPoolAttrReservedMemHigh; MemoryPool, total_bytes() at the end (it keeps every block it
ever took until free_all_blocks, so the end is its peak). Live peak: soma's used_high_bytes and
the async pool's cudaMemPoolAttrUsedMemHigh. Writes DIR/cupy-bench.json and cupy-bench.md.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ALLOCATORS = ("cupy_pool", "cupy_async", "soma")
WORKLOADS = ("elementwise", "fft", "linalg")
MIB = 2**20
RESERVED_MEM_HIGH, USED_MEM_HIGH = 6, 8  # cudaMemPoolAttr


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="cupy-bench-out")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--allocators", default=",".join(ALLOCATORS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--child", nargs=2, metavar=("ALLOCATOR", "WORKLOAD"))
    return parser.parse_args()


def make_step(cupy, workload, rng):
    if workload == "elementwise":
        def step():
            n = int(rng.integers(1 << 10, 1 << 22))
            x = cupy.random.random(n, dtype=cupy.float32)
            y = (x * 2.0 + 1.0) / (x + 0.5)
            z = cupy.sort(y)[: n // 2]
            return float(z.sum() + y.max() - cupy.mean(x))
    elif workload == "fft":
        def step():
            batch, length = int(rng.integers(1, 64)), int(2 ** rng.integers(8, 15))
            x = cupy.random.random((batch, length)) + 1j * cupy.random.random((batch, length))
            spectrum = cupy.fft.fft(x, axis=1)
            back = cupy.fft.ifft(spectrum * 0.5, axis=1)
            return float(cupy.abs(back).sum())
    else:
        def step():
            n = int(rng.integers(64, 1536))
            a = cupy.random.random((n, n), dtype=cupy.float32) + n * cupy.eye(n, dtype=cupy.float32)
            b = cupy.random.random((n, 8), dtype=cupy.float32)
            solved = cupy.linalg.solve(a, a @ b)
            return float(cupy.abs(solved - b).max())
    return step


def child(allocator, workload, steps, warmup):
    import cupy
    import numpy
    if allocator == "soma":
        sys.path.insert(0, os.path.dirname(HERE))  # python/: the package of this tree
        import soma
        import soma.cupy
        soma.cupy.enable()
    elif allocator == "cupy_async":
        cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    else:
        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
    cupy.random.seed(1)
    step = make_step(cupy, workload, numpy.random.default_rng(2))
    for _ in range(warmup):
        step()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    checksum = 0.0
    for _ in range(steps):
        checksum += step()
    cupy.cuda.Device().synchronize()
    seconds = (time.perf_counter() - start) / steps
    result = {"allocator": allocator, "workload": workload, "step_ms": seconds * 1e3,
              "checksum": checksum}
    if allocator == "soma":
        figures = soma.Pool.current().statistics()
        result.update(peak_reserved=figures["reserved_high_bytes"],
                      peak_live=figures["used_high_bytes"])
    elif allocator == "cupy_async":
        pool = cupy.cuda.runtime.deviceGetMemPool(cupy.cuda.Device().id)
        result.update(peak_reserved=cupy.cuda.runtime.memPoolGetAttribute(pool, RESERVED_MEM_HIGH),
                      peak_live=cupy.cuda.runtime.memPoolGetAttribute(pool, USED_MEM_HIGH))
    else:
        result.update(peak_reserved=cupy.get_default_memory_pool().total_bytes(), peak_live=None)
    print(json.dumps(result))


def main():
    args = arguments()
    if args.child:
        child(*args.child, args.steps, args.warmup)
        return 0
    os.makedirs(args.out, exist_ok=True)
    results, failures = [], []
    for workload in args.workloads.split(","):
        for allocator in args.allocators.split(","):
            command = [sys.executable, os.path.abspath(__file__), "--child", allocator, workload,
                       "--steps", str(args.steps), "--warmup", str(args.warmup)]
            run = subprocess.run(command, capture_output=True, text=True, check=False)
            with open(os.path.join(args.out, f"cupy-{allocator}-{workload}.log"), "w",
                      encoding="utf-8") as log:
                log.write(run.stdout + run.stderr)
            if run.returncode != 0:
                failures.append(f"{allocator}/{workload}: exit {run.returncode}")
                continue
            results.append(json.loads(run.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    for workload in args.workloads.split(","):  # the same requests must give the same values
        sums = {r["allocator"]: r["checksum"] for r in results if r["workload"] == workload}
        if sums and max(sums.values()) - min(sums.values()) > 1e-6 * max(map(abs, sums.values())):
            failures.append(f"{workload}: checksums differ between allocators: {sums}")
    with open(os.path.join(args.out, "cupy-bench.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    table = table_of(results)
    with open(os.path.join(args.out, "cupy-bench.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)
    for failure in failures:
        print("FAILED", failure)
    return 1 if failures else 0


def table_of(results):
    lines = ["| workload | allocator | step (ms) | vs MemoryPool | peak reserved (MiB) | "
             "peak live (MiB) | reserved / soma's live |",
             "|---|---|---|---|---|---|---|"]
    for workload in WORKLOADS:
        rows = [r for r in results if r["workload"] == workload]
        base = next((r["step_ms"] for r in rows if r["allocator"] == "cupy_pool"), None)
        live = next((r["peak_live"] for r in rows if r["allocator"] == "soma"), None)
        for r in rows:
            ratio = f"{r['step_ms'] / base:.2f}" if base else "-"
            peak_live = f"{r['peak_live'] / MIB:.1f}" if r["peak_live"] else "-"
            over = f"{r['peak_reserved'] / live:.3f}" if live else "-"
            lines.append(f"| {workload} | {r['allocator']} | {r['step_ms']:.3f} | {ratio} | "
                         f"{r['peak_reserved'] / MIB:.1f} | {peak_live} | {over} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
