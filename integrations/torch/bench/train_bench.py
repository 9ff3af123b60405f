#!/usr/bin/env python3
"""A transformer training loop under four CUDA allocators: step time and peak memory.

    python3 integrations/torch/bench/train_bench.py [--library PATH] [--library-b PATH]
                                                    [--out DIR] [--quick]

The workload of shared/targets.md: a transformer of torch.nn layers (8 x
nn.TransformerEncoderLayer, d_model 1024, 16 heads, feed-forward 4096, causal attention,
embedding and output layer over a 32000-token vocabulary), parameters in bf16, AdamW, loss in
fp32. Four workloads:

  fixed      every step batch 8 x 2048 tokens
  variable   batch 8, sequence length drawn each step uniformly from [128, 2048] (seeded, so
             every allocator runs the same sequence of shapes)
  inference  the same transformer, forward only (torch.inference_mode), as a server would run
             it: each call's batch drawn from [1, 2 x batch] and its sequence length from
             [128, 2048]; a step is one call
  conv       a convolutional network (torchvision's ResNet-50, or a small residual network of
             torch.nn layers where torchvision is missing) trained with SGD on 224 x 224 images,
             the batch drawn each step from [batch, 8 x batch]

Allocators, each in a process of its own (PyTorch fixes its allocator at the first CUDA
allocation); --allocators picks (default: all but soma_compact):

  native             PyTorch's caching allocator (PYTORCH_CUDA_ALLOC_CONF unset)
  expandable         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  cuda_malloc_async  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (the driver's pool)
  soma               soma_torch.enable() (libsoma_torch.so, release threshold UINT64_MAX)
  soma_remap         the same with remap_free_memory=True (remapping before growth: soma_torch's
                     default, so the same as soma)
  soma_noremap       the same with remap_free_memory=False (no remapping: what remapping costs
                     in step time and saves in memory)
  soma_compact       the same with compact_before_growth=True (and no remapping)
  soma_history       soma's defaults with memory history recorded from the start
                     (SOMA_HISTORY=1048576 events): its mean step against soma's in the same
                     run is what recording costs (goal: at most 1.05x)
  <soma's>@b         any of soma's above with the library of --library-b (e.g. soma@b): two
                     builds of soma side by side in one run, their rounds interleaved

Each run: warm-up steps (not timed), then --steps timed steps; a step is the data (token
ids drawn on the GPU, causal mask), forward, loss, backward, AdamW step, zero_grad, timed
between two torch.cuda.synchronize() with time.perf_counter(). The warm-up runs every shape the
timed steps will run, once, in the order they first come (at least --warmup steps, cycling):
a shape's first step pays for work no allocator causes (cuDNN choosing and building its
engines for a new batch, kernels loaded), which made the medians of the shape-changing
workloads swing by 30 % from run to run. --cold-shapes gives the old warm-up (--warmup steps of
their own draws, the timed shapes new). Reported: mean step time (the timed steps' total over
their number: the figure the step-time goal reads, against the fastest of PyTorch's three
allocators), median, p10 and p90, and peak reserved over peak allocated for the whole run
(warm-up included, as the memory a job must have). --rounds N runs every allocator N times,
interleaved (round 1 of each, then round 2, ...); an allocator's step time is its best round's,
its reserved over allocated its worst round's. Memory is read as
torch.cuda.max_memory_reserved / max_memory_allocated for the three PyTorch configurations
(under cudaMallocAsync these are the driver pool's reserved and used high watermarks), and as
soma's reserved and used high watermarks (soma_torch.stats) for soma, whose statistics PyTorch
cannot read through its pluggable-allocator hook.

Writes DIR/torch-bench.json (every figure, every step time), DIR/torch-bench.md (the table)
and DIR/bench-<allocator>-<workload>[-roundN].log (each run's output). Exit status 0 when every run
finished, 1 otherwise (missing a goal is reported, not an error).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_INTEGRATION = os.path.dirname(HERE)  # integrations/torch: soma_torch.py

ALLOCATORS = {
    "native": None,
    "expandable": "expandable_segments:True",
    "cuda_malloc_async": "backend:cudaMallocAsync",
    "soma": None,
    "soma_compact": None,
    "soma_remap": None,
    "soma_noremap": None,
    "soma_history": None,
}
SOMA_ALLOCATORS = ("soma", "soma_compact", "soma_remap", "soma_noremap", "soma_history")
# A soma allocator's name with this suffix runs the library of --library-b: an A/B of two builds.
SECOND_BUILD = "@b"
# soma_history: soma's defaults with memory history recording (SOMA_HISTORY) from the start, for
# what recording costs a step (issue goal: at most 5 % over soma's own step time).
HISTORY_EVENTS = 1 << 20
HISTORY_OVERHEAD_GOAL = 1.05
# What a run compares unless --allocators says otherwise (soma_compact on request: it costs a
# synchronize per fragmenting step, docs/benchmarks.md).
# soma_remap is soma_torch's default now (remapping before growth), so soma runs it.
DEFAULT_ALLOCATORS = ("native", "expandable", "cuda_malloc_async", "soma")
PYTORCH_ALLOCATORS = ("native", "expandable", "cuda_malloc_async")
WORKLOADS = ("fixed", "variable", "inference", "conv")
# shared/targets.md: reserved/allocated goals for soma, and its mean step time against the
# fastest of PyTorch's three allocators in the same run.
RATIO_GOALS = {"fixed": 1.01, "variable": 1.01, "inference": 1.01, "conv": 1.01}
STEP_TIME_GOAL = 1.01
GIB = 2**30


def kind_of(allocator):
    """The allocator a name stands for, without the second build's suffix."""
    return allocator[:-len(SECOND_BUILD)] if allocator.endswith(SECOND_BUILD) else allocator


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--library", help="libsoma_torch.so (default: soma_torch's search)")
    parser.add_argument("--library-b", help="a second libsoma_torch.so, for allocators named "
                                            "<soma's>@b (an A/B of two builds)")
    parser.add_argument("--out", default="torch-bench-out", help="directory for the results")
    parser.add_argument("--allocators", default=",".join(DEFAULT_ALLOCATORS),
                        help="comma-separated subset of " + ", ".join(ALLOCATORS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--steps", type=int, default=100, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=10,
                        help="untimed steps first, at least (every timed shape runs once)")
    parser.add_argument("--cold-shapes", action="store_true",
                        help="warm up on --warmup draws of their own: timed shapes may be new")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs per allocator and workload, interleaved; the best step time "
                             "and the worst memory ratio count")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-seq", type=int, default=2048)
    parser.add_argument("--min-seq", type=int, default=128)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--ffn", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per run")
    parser.add_argument("--quick", action="store_true", help="20 timed steps, 5 warm-up")
    parser.add_argument("--child", nargs=2, metavar=("ALLOCATOR", "WORKLOAD"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup = 20, 5
    return args


def drawn_shapes(args, workload, count):
    """(batch, sequence length) of count steps, seeded: the same in every process. The conv
    workload's length is its image side."""
    if workload == "fixed":
        return [(args.batch, args.max_seq)] * count
    rng = random.Random(args.seed)
    if workload == "variable":
        return [(args.batch, rng.randint(args.min_seq, args.max_seq)) for _ in range(count)]
    if workload == "inference":
        return [(rng.randint(1, 2 * args.batch), rng.randint(args.min_seq, args.max_seq))
                for _ in range(count)]
    return [(rng.randint(args.batch, 8 * args.batch), 224) for _ in range(count)]


def step_shapes(args, workload):
    """(warm-up shapes, timed shapes). Unless --cold-shapes, the warm-up runs every timed shape
    once, in the order they first come, cycling to at least --warmup steps."""
    if args.cold_shapes:
        drawn = drawn_shapes(args, workload, args.warmup + args.steps)
        return drawn[:args.warmup], drawn[args.warmup:]
    timed = drawn_shapes(args, workload, args.steps)
    distinct = list(dict.fromkeys(timed))
    warm = [distinct[i % len(distinct)] for i in range(max(args.warmup, len(distinct)))]
    return warm, timed


def residual_network(nn):
    """torchvision's ResNet-50 where torchvision is installed, else a small residual network."""
    try:
        import torchvision
        return torchvision.models.resnet50(num_classes=1000)
    except ImportError:
        pass

    class Block(nn.Module):
        def __init__(self, channels, stride):
            super().__init__()
            out = channels * stride
            self.body = nn.Sequential(
                nn.Conv2d(channels, out, 3, stride, 1, bias=False), nn.BatchNorm2d(out),
                nn.ReLU(inplace=True), nn.Conv2d(out, out, 3, 1, 1, bias=False),
                nn.BatchNorm2d(out))
            self.skip = nn.Conv2d(channels, out, 1, stride, bias=False) if stride > 1 else None

        def forward(self, x):
            skip = x if self.skip is None else self.skip(x)
            return nn.functional.relu(self.body(x) + skip)

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    channels = 64
    for stride in (1, 2, 2, 2):
        layers += [Block(channels, stride), Block(channels * stride, 1)]
        channels *= stride
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 1000)]
    return nn.Sequential(*layers)


# ---- one run (child process) --------------------------------------------------------------------

def soma_remap_counts(soma_torch):
    """A function that reads device 0's soma_torch pool's remap count and bytes mapped again
    (somaMemPoolAttrRemapCount, RemappedBytes), called between steps, outside their time; None
    (and a note on stderr) where the pool cannot be read: the run goes on without them."""
    try:
        from soma import pools  # the package soma_torch put on sys.path, of the same tree

        pool = pools.wrap(soma_torch._lib().soma_torch_get_pool(0))

        def counts():
            return pool.get_attribute("remap_count"), pool.get_attribute("remapped_bytes")

        counts()
        return counts
    except Exception as error:  # noqa: BLE001 (a figure more, never the run's failure)
        print(f"train_bench: no per-step remap counts: {error}", file=sys.stderr)
        return None


def remap_step_means(step_ms, step_remaps):
    """The mean time of the timed steps that remapped and of those that did not: does a step
    that maps memory again take longer?"""
    remapped = [ms for ms, (count, _) in zip(step_ms, step_remaps) if count]
    other = [ms for ms, (count, _) in zip(step_ms, step_remaps) if not count]
    return {"remap_steps": len(remapped),
            "remap_steps_mean_ms": statistics.fmean(remapped) if remapped else None,
            "other_steps_mean_ms": statistics.fmean(other) if other else None}


def run_child(args):
    allocator, workload = args.child
    kind = kind_of(allocator)
    soma_torch = None
    if kind in SOMA_ALLOCATORS:
        sys.path.insert(0, TORCH_INTEGRATION)
        import soma_torch  # noqa: E402 (enabled before torch touches CUDA)

        # soma: the defaults; soma_compact: compaction before growth (and no remapping);
        # soma_remap: remapping before growth; soma_noremap: neither.
        soma_torch.enable(library=args.library,
                          compact_before_growth=kind == "soma_compact",
                          remap_free_memory={"soma": None, "soma_compact": False,
                                             "soma_remap": True,
                                             "soma_noremap": False,
                                             "soma_history": None}[kind])
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to PyTorch")
    device = torch.device("cuda", 0)
    torch.manual_seed(args.seed)

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(args.vocab, args.d_model)
            self.layers = nn.ModuleList([
                nn.TransformerEncoderLayer(args.d_model, args.heads, args.ffn, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
                for _ in range(args.layers)
            ])
            self.norm = nn.LayerNorm(args.d_model)
            self.head = nn.Linear(args.d_model, args.vocab, bias=False)

        def forward(self, tokens, mask):
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x, src_mask=mask, is_causal=True)
            return self.head(self.norm(x))

    with torch.device(device):
        model = (residual_network(nn) if workload == "conv" else Transformer()).to(torch.bfloat16)
    parameters = sum(p.numel() for p in model.parameters())
    if workload == "conv":
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)

    def conv_step(batch, side):
        images = torch.randn(batch, 3, side, side, device=device, generator=generator,
                             dtype=torch.bfloat16)
        labels = torch.randint(0, 1000, (batch,), device=device, generator=generator)
        loss = F.cross_entropy(model(images).float(), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def inference_step(batch, length):
        with torch.inference_mode():
            tokens = torch.randint(0, args.vocab, (batch, length), device=device,
                                   generator=generator)
            mask = nn.Transformer.generate_square_subsequent_mask(length, device=device,
                                                                  dtype=torch.bfloat16)
            logits = model(tokens, mask)
            return logits[:, -1].float().logsumexp(-1).mean()

    def train_step(batch, length):
        if workload == "conv":
            return conv_step(batch, length)
        if workload == "inference":
            return inference_step(batch, length)
        tokens = torch.randint(0, args.vocab, (batch, length + 1), device=device,
                               generator=generator)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=device,
                                                              dtype=torch.bfloat16)
        logits = model(inputs, mask)
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    if workload == "inference":
        model.eval()
    warm_shapes, timed_shapes = step_shapes(args, workload)
    shapes = warm_shapes + timed_shapes
    remap_counts = soma_remap_counts(soma_torch) if soma_torch is not None else None
    step_ms = []
    step_remaps = []  # soma's: remaps and bytes mapped again in each timed step
    losses = []
    started = time.perf_counter()
    for index, (batch, length) in enumerate(shapes):
        torch.cuda.synchronize()
        before = remap_counts() if remap_counts is not None else None
        begin = time.perf_counter()
        loss = train_step(batch, length)
        torch.cuda.synchronize()
        elapsed_ms = (time.perf_counter() - begin) * 1e3
        losses.append(float(loss))
        if index >= len(warm_shapes):
            step_ms.append(elapsed_ms)
            if before is not None:
                after = remap_counts()
                step_remaps.append([after[0] - before[0], after[1] - before[1]])
    wall_s = time.perf_counter() - started

    if kind in SOMA_ALLOCATORS:
        stats = soma_torch.stats()
        peak_reserved = stats["reserved_high_bytes"]
        peak_allocated = stats["used_high_bytes"]
        extra = {
            "soma": {key: stats[key] for key in (
                "allocations", "frees", "failed_allocations", "failed_frees",
                "cross_stream_frees", "streams", "reserved_bytes", "used_bytes")},
            "soma_hooks": stats["hooks"],
            "soma_config": stats["config"],
        }
        if step_remaps:
            extra["step_remaps"] = step_remaps
            extra.update(remap_step_means(step_ms, step_remaps))
        if stats["failed_allocations"] or stats["failed_frees"]:
            raise SystemExit(f"soma counted failures: {stats}; last: {soma_torch.last_error()}")
    else:
        peak_reserved = torch.cuda.max_memory_reserved(device)
        peak_allocated = torch.cuda.max_memory_allocated(device)
        extra = {"backend": torch.cuda.memory.get_allocator_backend(),
                 "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    free_bytes, total_bytes = torch.cuda.mem_get_info(device)
    ordered = sorted(step_ms)

    def percentile(fraction):
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    result = {
        "allocator": allocator,
        "workload": workload,
        "median_ms": statistics.median(step_ms),
        "mean_ms": statistics.fmean(step_ms),
        "p10_ms": percentile(0.10),
        "p90_ms": percentile(0.90),
        "peak_reserved_bytes": peak_reserved,
        "peak_allocated_bytes": peak_allocated,
        "ratio": peak_reserved / peak_allocated if peak_allocated else None,
        "device_used_at_end_bytes": total_bytes - free_bytes,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "steps": args.steps,
        "warmup": len(warm_shapes),
        "batch": args.batch,
        "shapes": shapes,
        "parameters": parameters,
        "wall_s": wall_s,
        "step_ms": step_ms,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(device),
        **extra,
    }
    print("RESULT " + json.dumps(result), flush=True)


# ---- the whole benchmark (parent process) -------------------------------------------------------

def child_environment(allocator):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    kind = kind_of(allocator)
    if ALLOCATORS[kind] is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = ALLOCATORS[kind]
    if kind in SOMA_ALLOCATORS:
        env.setdefault("SOMA_BACKEND", "cuda")
    env.pop("SOMA_HISTORY", None)
    if kind == "soma_history":
        env["SOMA_HISTORY"] = str(HISTORY_EVENTS)
    return env


def child_command(args, allocator, workload):
    command = [sys.executable, os.path.abspath(__file__), "--child", allocator, workload]
    for name in ("steps", "warmup", "batch", "max_seq", "min_seq", "layers", "d_model", "heads",
                 "ffn", "vocab", "seed"):
        command += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.cold_shapes:
        command.append("--cold-shapes")
    library = args.library_b if allocator.endswith(SECOND_BUILD) else args.library
    if library:
        command += ["--library", library]
    return command


def run_one(args, allocator, workload, round_index=0):
    suffix = f"-round{round_index + 1}" if args.rounds > 1 else ""
    log_path = os.path.join(args.out,
                            f"bench-{allocator.replace('@', '-')}-{workload}{suffix}.log")
    started = time.perf_counter()
    try:
        completed = subprocess.run(child_command(args, allocator, workload),
                                   env=child_environment(allocator), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, timeout=args.timeout)
        output, status = completed.stdout, completed.returncode
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout or ""
        if isinstance(output, bytes):
            output = output.decode(errors="replace")
        status = f"timeout after {args.timeout} s"
    with open(log_path, "w") as log:
        log.write(output)
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    seconds = time.perf_counter() - started
    if status != 0 or not lines:
        last = (output.strip().splitlines() or ["no output"])[-1].strip()
        print(f"bench: {allocator:>17} {workload:>8}: FAILED ({status}) in {seconds:.0f} s: {last}",
              flush=True)
        return {"allocator": allocator, "workload": workload, "error": f"exit {status}: {last}",
                "log": log_path}
    result = json.loads(lines[-1][len("RESULT "):])
    print(f"bench: {allocator:>17} {workload:>8}: mean {result['mean_ms']:.2f} ms, median "
          f"{result['median_ms']:.2f} ms, "
          f"peak reserved {result['peak_reserved_bytes'] / GIB:.2f} GiB / allocated "
          f"{result['peak_allocated_bytes'] / GIB:.2f} GiB = {result['ratio']:.3f} "
          f"({seconds:.0f} s)", flush=True)
    if result.get("remap_steps"):
        print(f"bench: {allocator:>17} {workload:>8}: {result['remap_steps']} of "
              f"{len(result['step_ms'])} steps remapped, mean {result['remap_steps_mean_ms']:.2f} "
              f"ms; the others {result['other_steps_mean_ms'] or 0:.2f} ms", flush=True)
    return result


def merge_rounds(rounds):
    """One result per allocator and workload from its rounds: the round of the lowest mean step
    time, with the highest reserved over allocated of all rounds (memory is what a job must
    have in its worst run)."""
    merged = {}
    for result in (r for one_round in rounds for r in one_round):
        key = (result["allocator"], result["workload"])
        merged.setdefault(key, []).append(result)
    results = []
    for key, runs in merged.items():
        good = [r for r in runs if "error" not in r]
        if len(good) != len(runs):
            results.append(next(r for r in runs if "error" in r))
            continue
        best = dict(min(good, key=lambda r: r["mean_ms"]))
        worst = max(good, key=lambda r: r["ratio"] or 0)
        for name in ("peak_reserved_bytes", "peak_allocated_bytes", "ratio"):
            best[name] = worst[name]
        best["rounds_mean_ms"] = [r["mean_ms"] for r in runs]
        best["rounds_ratio"] = [r["ratio"] for r in runs]
        results.append(best)
    return results


def summarize(results):
    """Adds each run's mean step time relative to native and to the fastest of PyTorch's
    allocators (soma_history's also relative to soma), and the goal verdicts of soma's runs."""
    good = [r for r in results if "error" not in r]
    native = {r["workload"]: r for r in good if r["allocator"] == "native"}
    # soma's step without recording, of the same build as each soma_history run
    soma = {(r["workload"], r["allocator"]): r for r in good if kind_of(r["allocator"]) == "soma"}
    fastest = {}
    for r in good:
        if r["allocator"] in PYTORCH_ALLOCATORS:
            known = fastest.get(r["workload"])
            if known is None or r["mean_ms"] < known["mean_ms"]:
                fastest[r["workload"]] = r
    for result in good:
        base = native.get(result["workload"])
        result["vs_native"] = result["mean_ms"] / base["mean_ms"] if base else None
        best = fastest.get(result["workload"])
        result["vs_fastest"] = result["mean_ms"] / best["mean_ms"] if best else None
        result["fastest"] = best["allocator"] if best else None
        if kind_of(result["allocator"]) == "soma_history":
            same_build = result["allocator"].replace("soma_history", "soma", 1)
            without_history = soma.get((result["workload"], same_build))
            if without_history is not None:
                result["vs_soma"] = result["mean_ms"] / without_history["mean_ms"]
        if kind_of(result["allocator"]) in SOMA_ALLOCATORS:
            goal = RATIO_GOALS[result["workload"]]
            result["ratio_goal"] = goal
            result["ratio_goal_met"] = result["ratio"] is not None and result["ratio"] <= goal
            if result["vs_fastest"] is not None:
                result["step_time_goal_met"] = result["vs_fastest"] <= STEP_TIME_GOAL


def table(results):
    rows = ["| allocator | workload | mean step (ms) | vs fastest | median (ms) | p10-p90 (ms) | "
            "peak reserved (GiB) | peak allocated (GiB) | reserved/allocated |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['allocator']} | {r['workload']} | failed: {r['error'][:100]} "
                        "| | | | | | |")
            continue
        vs_fastest = f"{r['vs_fastest']:.3f}" if r.get("vs_fastest") else "-"
        rows.append(
            f"| {r['allocator']} | {r['workload']} | {r['mean_ms']:.2f} | {vs_fastest} | "
            f"{r['median_ms']:.2f} | "
            f"{r['p10_ms']:.1f}-{r['p90_ms']:.1f} | {r['peak_reserved_bytes'] / GIB:.3f} | "
            f"{r['peak_allocated_bytes'] / GIB:.3f} | {r['ratio']:.3f} |")
    verdicts = []
    for r in results:
        if kind_of(r.get("allocator", "")) in SOMA_ALLOCATORS and "error" not in r:
            ratio = "met" if r["ratio_goal_met"] else "MISSED"
            line = (f"- {r['allocator']}, {r['workload']}: reserved/allocated {r['ratio']:.3f} "
                    f"(goal <= {r['ratio_goal']}: {ratio})")
            if "step_time_goal_met" in r:
                line += (f"; mean step {r['vs_fastest']:.3f} x the fastest of PyTorch's "
                         f"({r['fastest']}; goal <= {STEP_TIME_GOAL}: "
                         f"{'met' if r['step_time_goal_met'] else 'MISSED'})")
            if "vs_soma" in r:
                met = r["vs_soma"] <= HISTORY_OVERHEAD_GOAL
                line += (f"; mean step {r['vs_soma']:.3f} x soma's without recording (goal <= "
                         f"{HISTORY_OVERHEAD_GOAL}: {'met' if met else 'MISSED'})")
            verdicts.append(line)
    return "\n".join(rows + [""] + verdicts) + "\n"


def run_parent(args):
    os.makedirs(args.out, exist_ok=True)
    allocators = [a for a in args.allocators.split(",") if a]
    workloads = [w for w in args.workloads.split(",") if w]
    for name in allocators:
        if kind_of(name) not in ALLOCATORS:
            raise SystemExit(f"unknown allocator {name!r}; known: {', '.join(ALLOCATORS)}")
        if name.endswith(SECOND_BUILD) and (kind_of(name) not in SOMA_ALLOCATORS or
                                            not args.library_b):
            raise SystemExit(f"{name!r}: the suffix {SECOND_BUILD} names a soma allocator run "
                             "with --library-b, which must be given")
    for name in workloads:
        if name not in WORKLOADS:
            raise SystemExit(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    warm = "--warmup" if args.cold_shapes else "every timed shape, at least --warmup"
    print(f"bench: {len(allocators) * len(workloads) * args.rounds} runs, each warm-up ({warm}, "
          f"{args.warmup}) + {args.steps} timed steps, batch {args.batch}, sequence length "
          f"{args.max_seq} (fixed) or [{args.min_seq}, {args.max_seq}] (variable, seed "
          f"{args.seed}), {args.rounds} round(s)", flush=True)
    started = time.perf_counter()
    rounds = [[run_one(args, allocator, workload, index)
               for workload in workloads for allocator in allocators]
              for index in range(args.rounds)]
    results = merge_rounds(rounds)
    summarize(results)
    text = table(results)
    print()
    print(text, end="")
    first = next((r for r in results if "error" not in r), {})
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "gpu": first.get("gpu"),
        "torch": first.get("torch"),
        "cuda": first.get("cuda"),
        "parameters": first.get("parameters"),
        "settings": {key: getattr(args, key) for key in (
            "steps", "warmup", "batch", "max_seq", "min_seq", "layers", "d_model", "heads", "ffn",
            "vocab", "seed", "cold_shapes", "rounds")},
        "total_seconds": time.perf_counter() - started,
        "results": results,
    }
    with open(os.path.join(args.out, "torch-bench.json"), "w") as out:
        json.dump(report, out, indent=1)
    with open(os.path.join(args.out, "torch-bench.md"), "w") as out:
        out.write(f"{report['gpu']}, PyTorch {report['torch']} (CUDA {report['cuda']}), "
                  f"{report['date']}; {report['parameters']} parameters, batch {args.batch}, "
                  f"warm-up ({warm}, {args.warmup}) + {args.steps} timed steps, "
                  f"{args.rounds} round(s)\n\n")
        out.write(text)
    print(f"bench: {report['total_seconds']:.0f} s in all; results in {args.out}")
    return 0 if all("error" not in r for r in results) else 1


def main():
    args = parse_arguments()
    if args.child:
        run_child(args)
        return 0
    return run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
