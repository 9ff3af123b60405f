#!/usr/bin/env python3
"""What one tensor's allocation and free cost the host under each of PyTorch's allocators and soma.

    python3 integrations/torch/bench/pair_bench.py [--library PATH] [--allocators LIST]

A host-bound training step (small batches of a convolutional network) makes hundreds of
allocations and frees between kernel launches, so their host cost is part of the step. Each
allocator runs in its own process, on PyTorch's current stream, and times:

- pair: `torch.empty(n)` then its free, n = 256 B, 4 KiB, 1 MiB (a cache hit in every allocator);
- 64 live: 64 tensors made, then all freed, per pair;
- launch: `x.zero_()` on a tensor made once (a kernel launch, the anchor: what a step's
  kernels cost the host each);
- pair + launch: the pair with one launch on the tensor between (a step's usual pattern).

Medians of 5 trials of about 20 ms each, in ns; the last columns are each figure over the fastest
of PyTorch's own allocators in the same run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train_bench import ALLOCATORS, SOMA_ALLOCATORS, TORCH_INTEGRATION, child_environment  # noqa

PYTORCH_ALLOCATORS = ("native", "expandable", "cuda_malloc_async")
SIZES = (256, 4096, 1 << 20)


def timed(operation, count):
    """ns per call of operation, median of 5 trials of count calls."""
    import torch
    trials = []
    for _ in range(5):
        torch.cuda.synchronize()
        begin = time.perf_counter_ns()
        operation(count)
        end = time.perf_counter_ns()
        torch.cuda.synchronize()
        trials.append((end - begin) / count)
    return statistics.median(trials)


def run_child(allocator, library):
    if allocator in SOMA_ALLOCATORS:
        sys.path.insert(0, TORCH_INTEGRATION)
        import soma_torch  # noqa: E402 (enabled before torch touches CUDA)
        soma_torch.enable(library=library,
                          remap_free_memory={"soma": None, "soma_noremap": False}.get(allocator))
    import torch
    torch.cuda.init()
    figures = {}

    def pairs(n):
        def run(count):
            for _ in range(count):
                x = torch.empty(n, dtype=torch.uint8, device="cuda")
                del x
        return run

    def live64(n):
        def run(count):
            for _ in range(count // 64):
                held = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(64)]
                del held
        return run

    def pairs_with_launch(n):
        def run(count):
            for _ in range(count):
                x = torch.empty(n, dtype=torch.uint8, device="cuda")
                x.zero_()
                del x
        return run

    anchor = torch.empty(4096, dtype=torch.uint8, device="cuda")

    def launch(count):
        for _ in range(count):
            anchor.zero_()

    count = 20000
    for operation in (pairs(4096), launch):  # warm: caches, the driver's launch path
        operation(count)
    for n in SIZES:
        figures[f"pair, {n} B"] = timed(pairs(n), count)
    figures["64 live then 64 frees, 4096 B, per pair"] = timed(live64(4096), count)
    figures["launch (x.zero_())"] = timed(launch, count)
    figures["pair + launch, 4096 B"] = timed(pairs_with_launch(4096), count)
    print("RESULT " + json.dumps({"allocator": allocator, "figures": figures}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--library", help="libsoma_torch.so (default: soma_torch's search)")
    parser.add_argument("--allocators", default="native,expandable,cuda_malloc_async,soma")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child, args.library)
        return 0
    results = {}
    for allocator in args.allocators.split(","):
        if allocator not in ALLOCATORS:
            print(f"pair_bench: unknown allocator {allocator}", file=sys.stderr)
            return 2
        command = [sys.executable, os.path.abspath(__file__), "--child", allocator]
        if args.library:
            command += ["--library", args.library]
        done = subprocess.run(command, env=child_environment(allocator), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            print(f"pair_bench: {allocator} failed:\n{done.stdout[-2000:]}", file=sys.stderr)
            continue
        results[allocator] = json.loads(lines[-1][len("RESULT "):])["figures"]
    if not results:
        return 1
    measures = list(next(iter(results.values())).keys())
    names = list(results.keys())
    print("host ns per operation (median of 5 trials); x: over the fastest of PyTorch's own")
    print(f"{'measure':42}" + "".join(f"{name:>20}" for name in names))
    for measure in measures:
        own = [results[n][measure] for n in names if n in PYTORCH_ALLOCATORS]
        best = min(own) if own else None
        cells = []
        for name in names:
            value = results[name][measure]
            ratio = f" ({value / best:.2f}x)" if best else ""
            cells.append(f"{value:>10.0f}{ratio:>10}")
        print(f"{measure:42}" + "".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
