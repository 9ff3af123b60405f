#!/usr/bin/env python3
"""soma as PyTorch's allocator, on a GPU: values after training, record_stream, memory back to 0.

    python3 integrations/torch/tests/test_soma_torch.py [--library PATH]

A plain script (no pytest needed): exits 0 when every check passed, 1 when one failed, 77 when
PyTorch or a CUDA device is missing (CTest reports that as SKIPPED: SKIP_RETURN_CODE 77).
Registered in CTest as torch.python, label gpu. Every check runs in this one process, with soma
enabled before the first CUDA allocation; each prints PASS or FAIL, and the last line counts them.

Checks:
  enabled            soma is PyTorch's allocator: a tensor's bytes show in soma's statistics,
                     PyTorch's default stream is adopted.
  values             tensors of many sizes, some freed and replaced, hold what was written
                     (no two live tensors share memory).
  training_mlp       5 SGD steps of an MLP (batch size changing each step) give the same
                     parameters on the GPU through soma as on the CPU.
  training_transformer  3 SGD steps of a torch.nn.TransformerEncoderLayer model (sequence
                     length changing each step), GPU through soma against the CPU.
  record_stream      a tensor freed while a side stream still reads it (declared with
                     Tensor.record_stream) is not reused before that read.
  threads            threads, each on its own stream, allocate, compute and check values.
  snapshot           soma_torch.snapshot() has every live tensor in an active_allocated block,
                     its figures match soma's statistics, and torch.cuda._memory_viz's
                     segment_plot, trace_plot (offline), segments and memory read it.
  history            record_history() fills snapshot()'s device_traces, scope() labels blocks,
                     and trace_plot reads the trace.
  memory_returns     with every tensor gone and PyTorch's cuBLAS workspaces cleared, soma's
                     used memory is 0; empty_cache returns soma's reserve to 0.
"""

import argparse
import copy
import gc
import os
import sys
import threading
import time
import traceback

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # integrations/torch: soma_torch.py


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--library", help="path of libsoma_torch.so (default: soma_torch's search)")
    args = parser.parse_args()

    try:
        import torch
    except ImportError as error:
        print(f"SKIPPED: PyTorch is not installed here ({error})")
        return SKIP
    if not torch.cuda.is_available():
        print("SKIPPED: PyTorch sees no CUDA device here")
        return SKIP

    import soma_torch

    stats = soma_torch.enable(library=args.library)
    print(f"soma_torch: library {stats['library']}")
    print(f"soma_torch: PyTorch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"{torch.cuda.get_device_name(0)}")
    print(f"soma_torch: hooks installed: {', '.join(stats['hooks']) or 'none'}; "
          f"record_stream through the {stats['record_stream']}")

    context = Context(torch, soma_torch)
    checks = [
        ("enabled", check_enabled),
        ("values", check_values),
        ("training_mlp", check_training_mlp),
        ("training_transformer", check_training_transformer),
        ("record_stream", check_record_stream),
        ("threads", check_threads),
        ("snapshot", check_snapshot),
        ("history", check_history),
        ("memory_returns", check_memory_returns),
    ]
    passed = failed = 0
    for name, check in checks:
        started = time.perf_counter()
        try:
            note = check(context)
            passed += 1
            detail = f": {note}" if note else ""
            print(f"PASS {name} ({time.perf_counter() - started:.2f} s){detail}")
        except Exception:  # a failed check must not stop the others
            failed += 1
            print(f"FAIL {name}:")
            traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


class Context:
    """What the checks share: torch, soma_torch, and soma's used bytes before they ran."""

    def __init__(self, torch, soma_torch):
        self.torch = torch
        self.soma = soma_torch
        self.device = torch.device("cuda", 0)
        try:
            torch.set_float32_matmul_precision("highest")  # no TF32: comparable with the CPU
        except (AttributeError, RuntimeError):
            pass
        # cuBLAS keeps a workspace per (handle, stream) for good: create the main thread's and
        # the autograd thread's now, so that the used bytes before and after the checks compare.
        warm_up = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True,
                                                   device=self.device)
        warm_up(torch.randn(2, 8, 64, device=self.device)).sum().backward()
        del warm_up
        gc.collect()
        torch.cuda.synchronize()
        self.used_before_checks = soma_torch.stats(0)["used_bytes"]


def require(condition, message):
    if not condition:
        raise AssertionError(message)


def mib(value):
    return f"{value / 2**20:.1f} MiB"


# ---- checks -------------------------------------------------------------------------------------

def check_enabled(ctx):
    torch, soma = ctx.torch, ctx.soma
    stats = soma.stats()
    require(stats["adopts_native_streams"], "soma runs on its cpu backend: set SOMA_BACKEND=cuda")
    before = soma.stats(0)
    tensor = torch.empty(64 * 2**20, dtype=torch.uint8, device=ctx.device)
    during = soma.stats(0)
    require(during["used_bytes"] >= before["used_bytes"] + 64 * 2**20,
            f"a 64 MiB tensor did not show in soma's used bytes ({before} -> {during})")
    require(during["allocations"] > before["allocations"], "no allocation was counted")
    require(during["streams"] >= 1, "PyTorch's stream was not adopted")
    del tensor
    after = soma.stats(0)
    require(after["used_bytes"] == before["used_bytes"],
            f"freeing the tensor left {after['used_bytes'] - before['used_bytes']} bytes used")
    require(after["failed_allocations"] == 0 and after["failed_frees"] == 0,
            f"failures counted: {after}")
    return f"{during['streams']} stream(s) adopted"


def check_values(ctx):
    torch = ctx.torch
    generator = torch.Generator().manual_seed(7)
    sizes = [int(s) for s in torch.randint(1, 3 * 2**20, (64,), generator=generator)]
    tensors = {}
    for index, size in enumerate(sizes):
        tensors[index] = torch.full((size,), index, dtype=torch.int32, device=ctx.device)
    for index in range(0, len(sizes), 2):  # free every other one, allocate others in between
        del tensors[index]
    for index in range(len(sizes), len(sizes) + 32):
        size = int(torch.randint(1, 3 * 2**20, (1,), generator=generator))
        tensors[index] = torch.full((size,), index, dtype=torch.int32, device=ctx.device)
    torch.cuda.synchronize()
    for index, tensor in tensors.items():
        host = tensor.cpu()
        require(bool((host == index).all()),
                f"tensor {index} ({tensor.numel()} elements) no longer holds {index}: "
                f"another tensor shares its memory")
    live = sum(t.numel() * 4 for t in tensors.values())
    used = ctx.soma.stats(0)["used_bytes"]
    require(used >= live, f"soma counts {used} bytes used, the live tensors take {live}")
    return f"{len(tensors)} tensors, {mib(live)} checked"


def train_both(ctx, model, optimizer_type, optimizer_args, batches, loss_of):
    """Trains a copy of model on the CPU and one on the GPU with the same batches; returns the
    two trained models."""
    torch = ctx.torch
    cpu_model = model
    gpu_model = copy.deepcopy(model).to(ctx.device)
    cpu_optimizer = optimizer_type(cpu_model.parameters(), **optimizer_args)
    gpu_optimizer = optimizer_type(gpu_model.parameters(), **optimizer_args)
    for batch in batches:
        for current, optimizer, device in ((cpu_model, cpu_optimizer, "cpu"),
                                           (gpu_model, gpu_optimizer, ctx.device)):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_of(current, *(part.to(device) for part in batch))
            loss.backward()
            optimizer.step()
    torch.cuda.synchronize()
    return cpu_model, gpu_model


def compare_parameters(ctx, cpu_model, gpu_model, rtol, atol):
    worst = 0.0
    for (name, expected), (_, actual) in zip(cpu_model.named_parameters(),
                                             gpu_model.named_parameters()):
        actual = actual.detach().cpu()
        ctx.torch.testing.assert_close(actual, expected.detach(), rtol=rtol, atol=atol,
                                       msg=lambda m, name=name: f"parameter {name}: {m}")
        worst = max(worst, float((actual - expected.detach()).abs().max()))
    return worst


def check_training_mlp(ctx):
    torch = ctx.torch
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 256),
                          nn.ReLU(), nn.Linear(256, 10))
    generator = torch.Generator().manual_seed(1)
    batches = []
    for step in range(5):
        rows = 16 + 24 * step  # the shapes change every step
        batches.append((torch.randn(rows, 64, generator=generator),
                        torch.randint(0, 10, (rows,), generator=generator)))
    cpu_model, gpu_model = train_both(
        ctx, model, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}, batches,
        lambda m, x, y: nn.functional.cross_entropy(m(x), y))
    worst = compare_parameters(ctx, cpu_model, gpu_model, rtol=1e-4, atol=1e-5)
    del cpu_model, gpu_model
    return f"largest difference from the CPU {worst:.2e}"


def check_training_transformer(ctx):
    torch = ctx.torch
    nn = torch.nn
    torch.manual_seed(0)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 64)
            self.layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
            self.head = nn.Linear(64, 100)

        def forward(self, tokens):
            return self.head(self.layer(self.embed(tokens)))

    generator = torch.Generator().manual_seed(2)
    batches = []
    for length in (12, 40, 24):  # the sequence length changes every step
        tokens = torch.randint(0, 100, (4, length), generator=generator)
        batches.append((tokens, torch.roll(tokens, 1, dims=1)))
    # SGD, not Adam: Adam's first steps divide each gradient by its own size, so a component
    # that is zero up to rounding (a key bias, for one) moves by +-lr in a direction the
    # rounding decides, differently on the CPU and the GPU.
    cpu_model, gpu_model = train_both(
        ctx, Model(), torch.optim.SGD, {"lr": 0.01, "momentum": 0.9}, batches,
        lambda m, x, y: nn.functional.cross_entropy(m(x).flatten(0, 1), y.flatten()))
    worst = compare_parameters(ctx, cpu_model, gpu_model, rtol=1e-3, atol=1e-4)
    del cpu_model, gpu_model
    return f"largest difference from the CPU {worst:.2e}"


def check_record_stream(ctx):
    torch, soma = ctx.torch, ctx.soma
    elements = 4 * 2**20  # 16 MiB of float32
    before = soma.stats(0)["cross_stream_frees"]
    side = torch.cuda.Stream()
    source = torch.full((elements,), 3.0, device=ctx.device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # tens of milliseconds of GPU time before the read
        doubled = source * 2
    source.record_stream(side)
    del source  # freed on the default stream, which must not reuse it before the read
    overwrite = [torch.full((elements,), 7.0, device=ctx.device) for _ in range(4)]
    torch.cuda.synchronize()
    require(bool((doubled == 6.0).all()),
            "the side stream read memory that was handed out again before its read")
    require(all(bool((t == 7.0).all()) for t in overwrite), "a later tensor lost its value")
    after = soma.stats(0)["cross_stream_frees"]
    require(after == before + 1, f"cross_stream_frees went {before} -> {after}, expected +1")
    del doubled, overwrite
    torch.cuda.synchronize()
    return "the free waited for the side stream"


def check_threads(ctx):
    torch = ctx.torch
    errors = []

    def work(index):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for step in range(40):
                    rows = 64 + 16 * ((index + step) % 8)
                    # Element-wise work and reductions only: a matrix product would make cuBLAS
                    # keep a workspace for this thread and stream, which memory_returns counts.
                    a = torch.full((rows, 128), float(index + 1), device=ctx.device)
                    b = torch.ones(128, device=ctx.device)
                    c = (a * b).sum(dim=1)  # every element: 128 * (index + 1)
                    if not bool((c == 128.0 * (index + 1)).all()):
                        errors.append(f"thread {index}, step {step}: wrong sum")
                        return
            stream.synchronize()
        except Exception as error:  # reported by the main thread
            errors.append(f"thread {index}: {error!r}")

    threads = [threading.Thread(target=work, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    torch.cuda.synchronize()
    require(not errors, "; ".join(errors))
    return f"{len(threads)} threads, {ctx.soma.stats(0)['streams']} streams adopted so far"


def check_snapshot(ctx):
    torch, soma = ctx.torch, ctx.soma
    tensors = [torch.full((n,), 7, dtype=torch.uint8, device=ctx.device)
               for n in (1000, 70000, 3 * 2**20)]
    dropped = torch.empty(5000, dtype=torch.uint8, device=ctx.device)
    del dropped
    torch.cuda.synchronize()
    snap = soma.snapshot()
    blocks = [b for seg in snap["segments"] for b in seg["blocks"]]
    for tensor in tensors:
        address = tensor.data_ptr()
        require(any(b["state"] == "active_allocated" and b["address"] <= address <
                    b["address"] + b["size"] for b in blocks),
                f"the tensor at {address:#x} is in no active_allocated block")
    live = sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated")
    figures = soma.stats(0)
    require(live == figures["used_bytes"],
            f"active blocks request {live} B, soma says {figures['used_bytes']} B used")
    total = sum(seg["total_size"] for seg in snap["segments"] if seg["device"] == 0)
    require(total == figures["reserved_bytes"],
            f"segments hold {total} B, soma says {figures['reserved_bytes']} B reserved")
    from torch.cuda import _memory_viz
    # PyTorch's text readers walk every segment and block; an identity formatter keeps them
    # off the network (the default fetches flamegraph.pl).
    for name in ("segments", "memory"):
        lines = getattr(_memory_viz, name)(snap, format_flamegraph=lambda text: text)
        require(isinstance(lines, str), f"_memory_viz.{name} gave {type(lines)}")
    # The page makers fetch the viewer's script from the network, which a GPU machine may not
    # reach: serve them an empty script, and check the page they make around the snapshot.
    for name in ("segment_plot", "trace_plot"):
        with _offline_viewer_script(_memory_viz):
            page = getattr(_memory_viz, name)(snap)
        require(isinstance(page, str) and "snapshot.pickle" in page, f"{name} made no page")
    del tensors
    return f"{len(snap['segments'])} segments, {len(blocks)} blocks, viz read it"


def check_history(ctx):
    torch, soma = ctx.torch, ctx.soma
    soma.record_history(100_000)
    try:
        with soma.scope("forward"):
            kept = torch.ones(2**20, device=ctx.device)
            passing = torch.ones(3 * 2**20, device=ctx.device)
        del passing
        torch.cuda.synchronize()
        snap = soma.snapshot()
    finally:
        soma.record_history(0)
    trace = snap["device_traces"][0]
    actions = {entry["action"] for entry in trace}
    require({"alloc", "free_requested", "free_completed"} <= actions,
            f"the trace has {sorted(actions)}")
    scoped = [e for e in trace if e["action"] == "alloc" and e["frames"]
              and e["frames"][0]["name"] == "forward"]
    require(len(scoped) >= 2, f"{len(scoped)} allocations carry the scope 'forward'")
    blocks = [b for seg in snap["segments"] for b in seg["blocks"]]
    address = kept.data_ptr()
    holder = [b for b in blocks if b["address"] <= address < b["address"] + b["size"]]
    require(holder and holder[0]["frames"] and holder[0]["frames"][0]["name"] == "forward",
            "the live tensor's block does not carry its scope")
    from torch.cuda import _memory_viz
    with _offline_viewer_script(_memory_viz):
        page = _memory_viz.trace_plot(snap)
    require(isinstance(page, str) and "snapshot.pickle" in page, "trace_plot made no page")
    del kept
    return f"{len(trace)} trace entries ({', '.join(sorted(actions))}), trace_plot read them"


class _offline_viewer_script:
    """Within the block, urlopen (as urllib.request and _memory_viz see it) serves an empty
    script instead of reaching the network."""

    class _Response:
        def read(self, *args):
            return b"// offline: the viewer's script is not fetched here\n"

        def __enter__(self):
            return self

        def __exit__(self, *args):
            return False

    def __init__(self, viz):
        import urllib.request
        self.modules = [urllib.request] + ([viz] if hasattr(viz, "urlopen") else [])
        self.saved = []

    def __enter__(self):
        for module in self.modules:
            self.saved.append(module.urlopen)
            module.urlopen = lambda *args, **kwargs: self._Response()
        return self

    def __exit__(self, *args):
        for module, saved in zip(self.modules, self.saved):
            module.urlopen = saved
        return False


def check_memory_returns(ctx):
    torch, soma = ctx.torch, ctx.soma
    gc.collect()
    torch.cuda.synchronize()
    # What PyTorch itself keeps (cuBLAS workspaces) goes only when it is cleared below: before
    # that, used is reported against the figure before the checks, not asserted.
    used_before_clearing = soma.stats(0)["used_bytes"]
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
        torch.cuda.synchronize()
    stats = soma.stats(0)
    require(stats["used_bytes"] == 0,
            f"{stats['used_bytes']} bytes still used after PyTorch's cuBLAS workspaces were "
            f"cleared ({'cleared' if clear else 'no _cuda_clearCublasWorkspaces here'}): "
            f"something still holds soma memory (used {used_before_clearing} before clearing, "
            f"{ctx.used_before_checks} before the checks)")
    require(stats["reserved_bytes"] > 0, "soma should still hold its reserve before empty_cache")
    if "set_reset_fn" in soma.stats()["hooks"]:
        torch.cuda.empty_cache()  # through PyTorch's hook
    else:
        soma.empty_cache()
    after = soma.stats(0)
    require(after["reserved_bytes"] == 0,
            f"empty_cache left {after['reserved_bytes']} bytes reserved with nothing used")
    require(after["failed_allocations"] == 0 and after["failed_frees"] == 0,
            f"failures counted during the checks: {after}; last: {soma.last_error()}")
    return (f"used {mib(used_before_clearing)} with PyTorch's workspaces "
            f"({mib(ctx.used_before_checks)} before the checks), 0 without; "
            f"reserve {mib(stats['reserved_bytes'])} -> 0 "
            f"(peak used {mib(after['used_high_bytes'])}, "
            f"peak reserved {mib(after['reserved_high_bytes'])})")


if __name__ == "__main__":
    sys.exit(main())
