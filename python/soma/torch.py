"""soma as PyTorch's CUDA allocator: process-wide (enable()) or for one region (mem_pool()).

    import soma.torch                      # (the old `import soma_torch` still works)
    soma.torch.enable()                    # before the first CUDA tensor
    import torch
    ... train ...
    print(soma.torch.stats())              # soma's figures for this process

`enable()` loads libsoma_torch.so, configures soma's pools (release threshold, reuse
policies), installs the library with torch.cuda.memory.CUDAPluggableAllocator and the hooks
PyTorch lets a pluggable allocator set (empty_cache, record_stream, memory fraction, base
allocation), and returns the statistics. PyTorch's own statistics
(torch.cuda.memory_stats, max_memory_reserved, ...) are not available under a pluggable
allocator: use `stats()`. docs/torch.md tells what the hooks see and what they do not.

`mem_pool()` instead gives a torch.cuda.MemPool whose segments come from soma, for
`with torch.cuda.use_mem_pool(pool):`; the rest of the process keeps PyTorch's allocator.

The library is found from, in order: the `library` argument, $SOMA_TORCH_LIBRARY, lib/ of
this package (installed with pip), the build tree the package was copied into, then
integrations/torch/libsoma_torch.so under $SOMA_BUILD_DIR, build/gpu, build/release,
build/dev and build/python of the repository this package lives in.
"""

import ctypes
import json
import os
import tempfile
import threading

from . import _library

__all__ = [
    "enable",
    "enabled",
    "stats",
    "empty_cache",
    "synchronize",
    "reset_peak",
    "library_path",
    "last_error",
    "KEEP_EVERYTHING",
    "mem_pool",
    "snapshot",
    "record_history",
    "export_trace",
    "scope",
]

#: Release threshold that keeps all freed memory in soma's pools (PyTorch's caching behaviour).
KEEP_EVERYTHING = 2**64 - 1

_LIBRARY_NAME = "libsoma_torch.so"
_COUNTERS = (
    "reserved_bytes",
    "reserved_high_bytes",
    "used_bytes",
    "used_high_bytes",
    "allocations",
    "frees",
    "failed_allocations",
    "failed_frees",
    "cross_stream_frees",
    "streams",
)


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in _COUNTERS]


_lock = threading.Lock()
_state = None  # dict once enabled


_Snapshot = _library.Snapshot  # somaMemSnapshot


def library_path(library=None):
    """The path of libsoma_torch.so that enable() would load (see the module docstring)."""
    if library:
        return os.path.realpath(library)
    from_environment = os.environ.get("SOMA_TORCH_LIBRARY")
    if from_environment:
        return os.path.realpath(from_environment)
    tried = _library.candidates(os.path.join("integrations", "torch"), _LIBRARY_NAME)
    for candidate in tried:
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    raise FileNotFoundError(
        f"{_LIBRARY_NAME} not found; install the package, build the target soma_torch, pass "
        f"library=..., or set SOMA_TORCH_LIBRARY. Looked at: {', '.join(tried)}"
    )


_P, _INT, _SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_SIGNATURES = {
    "soma_torch_configure": [ctypes.c_uint64, _INT, _INT, _INT],
    "soma_torch_get_stats": [_INT, ctypes.POINTER(_Stats)],
    "soma_torch_reset_peak": [_INT],
    "soma_torch_synchronize": [_INT],
    "soma_torch_device_count": [],
    "soma_torch_adopts_native_streams": [],
    "soma_torch_empty_cache": [],
    "soma_torch_record_stream": [_P, _P],
    "soma_torch_last_error": [ctypes.c_char_p, _SIZE],
    "soma_torch_get_pool": [_INT],
    # libsoma's own calls, found through libsoma_torch's dependencies.
    "somaMemPoolSnapshotTake": [_P, ctypes.POINTER(_Snapshot)],
    "somaMemSnapshotFree": [ctypes.POINTER(_Snapshot)],
    "somaMemRecordHistory": [_SIZE],
    "somaMemHistoryExportTrace": [ctypes.c_char_p],
    "somaMemScopePush": [ctypes.c_char_p],
    "somaMemScopePop": [],
    "somaGetLastErrorMessage": [],
}
_RESULTS = {
    "soma_torch_empty_cache": None,
    "soma_torch_record_stream": None,
    "soma_torch_last_error": _SIZE,
    "soma_torch_get_pool": _P,
    "somaGetLastErrorMessage": ctypes.c_char_p,
}


def _load(path):
    return _library.declare(ctypes.CDLL(path), _SIGNATURES, _RESULTS)


def _address(lib, symbol):
    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value


def _message(lib):
    buffer = ctypes.create_string_buffer(1024)
    lib.soma_torch_last_error(buffer, len(buffer))
    return buffer.value.decode(errors="replace")


def _check(lib, status, call):
    if status != 0:
        raise RuntimeError(f"soma_torch: {call} failed (soma error {status}): {_message(lib)}")


def _configure(lib, release_threshold, follow, opportunistic, internal):
    """Sets every device pool of the library; returns the configuration as stats() shows it."""
    threshold = KEEP_EVERYTHING if release_threshold is None else int(release_threshold)
    if not 0 <= threshold <= KEEP_EVERYTHING:
        raise ValueError(f"release_threshold must be in [0, 2**64 - 1], not {release_threshold}")
    status = lib.soma_torch_configure(threshold, int(bool(follow)), int(bool(opportunistic)),
                                      int(bool(internal)))
    _check(lib, status, "soma_torch_configure")
    return {"release_threshold": threshold, "follow_event_dependencies": bool(follow),
            "allow_opportunistic": bool(opportunistic), "allow_internal_dependencies": bool(internal)}


def _open(library, release_threshold, follow, opportunistic, internal):
    """Loads and configures the library for enable() and mem_pool(): (path, lib, config)."""
    path = library_path(library)
    lib = _load(path)
    if lib.soma_torch_device_count() < 0:
        raise RuntimeError(f"soma_torch: {_message(lib)}")
    return path, lib, _configure(lib, release_threshold, follow, opportunistic, internal)


def enable(
    release_threshold=None,
    follow_event_dependencies=True,
    allow_opportunistic=True,
    allow_internal_dependencies=True,
    library=None,
    compact_before_growth=False,
    remap_free_memory=None,
):
    """Makes soma PyTorch's CUDA allocator for this process and returns stats().

    Call it before anything allocates CUDA memory (PyTorch fixes its allocator then): ideally
    before the first torch.cuda call. Arguments set every device's soma pool:

    release_threshold: bytes a pool keeps after frees at soma's synchronize points (S9);
        None keeps everything (KEEP_EVERYTHING), as PyTorch's caching allocator does. soma
        does not see torch.cuda.synchronize(); it releases at synchronize() and
        empty_cache() of this module.
    follow_event_dependencies, allow_opportunistic, allow_internal_dependencies: soma's
        three cross-stream reuse policies (S11), all on by default.
    library: path of libsoma_torch.so (default: see library_path()).
    compact_before_growth: soma's somaMemPoolAttrCompactBeforeGrowth on every pool: where a
        pool would grow while holding fragmented free memory, soma synchronizes the allocating
        stream and gives that memory back first. Peak memory then stays near live memory, at
        the price of such synchronizes (sets SOMA_TORCH_COMPACT=1 for the library; takes
        effect for pools created afterwards, so pass it to the first call).
    remap_free_memory: soma's somaMemPoolAttrRemapFreeMemory on every pool. None or True
        remaps before growth (soma_torch's default): where a pool would grow while free whole
        granules hold at least a quarter of the request, soma maps them again as one range and
        commits only the shortfall, with no synchronize, and below its peak it keeps large
        free blocks for large requests, so peak memory stays near live memory and a training
        loop maps memory again only in its first steps (docs/torch.md). False never remaps.
        Sets SOMA_TORCH_REMAP (1, 0) for the library; pass it to the first call.

    A second call reconfigures the pools (the allocator stays installed).
    """
    global _state
    import torch

    if compact_before_growth:
        os.environ["SOMA_TORCH_COMPACT"] = "1"
    if remap_free_memory is not None:
        os.environ["SOMA_TORCH_REMAP"] = "1" if remap_free_memory else "0"

    with _lock:
        if _state is not None and not _state["process_wide"]:
            raise RuntimeError(
                "soma.torch.enable() after mem_pool(): this process already runs PyTorch's own "
                "allocator; enable soma process-wide before anything touches CUDA, or keep "
                "using mem_pool()")
        if _state is not None:
            _state["config"] = _configure(_state["lib"], release_threshold,
                                          follow_event_dependencies, allow_opportunistic,
                                          allow_internal_dependencies)
            return stats()
        if torch.cuda.is_initialized():
            raise RuntimeError(
                "soma.torch.enable() must run before CUDA is initialized in this process "
                "(PyTorch cannot change an allocator that has been used); call it first"
            )
        path, lib, config = _open(library, release_threshold, follow_event_dependencies,
                                  allow_opportunistic, allow_internal_dependencies)

        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            path, "soma_torch_malloc", "soma_torch_free")
        raw = allocator.allocator()
        hooks = []
        for setter, symbol in (
            ("set_reset_fn", "soma_torch_empty_cache"),
            ("set_record_stream_fn", "soma_torch_record_stream"),
            ("set_memory_fraction_fn", "soma_torch_set_memory_fraction"),
            ("set_base_alloc_fn", "soma_torch_base_allocation"),
        ):
            if hasattr(raw, setter):
                getattr(raw, setter)(_address(lib, symbol))
                hooks.append(setter)
        torch.cuda.memory.change_current_allocator(allocator)

        # Without PyTorch's record_stream hook, Tensor.record_stream is wrapped instead: it
        # covers the Python method, not PyTorch's internal C++ calls (docs/torch.md).
        record_stream = "hook" if "set_record_stream_fn" in hooks else "tensor-method"
        if record_stream == "tensor-method":
            _wrap_record_stream(torch, lib)

        _state = {
            "process_wide": True,
            "lib": lib,
            "path": path,
            "allocator": allocator,  # keeps PyTorch's wrapper (and the library) alive
            "pool_allocators": [],
            "hooks": hooks,
            "record_stream": record_stream,
            "config": config,
        }
    return stats()


def _wrap_record_stream(torch, lib):
    original = torch.Tensor.record_stream

    def record_stream(self, stream):
        original(self, stream)
        if self.is_cuda:
            lib.soma_torch_record_stream(self.untyped_storage().data_ptr(), stream.cuda_stream)

    record_stream.__doc__ = original.__doc__
    torch.Tensor.record_stream = record_stream


def mem_pool(library=None, release_threshold=None, follow_event_dependencies=True,
             allow_opportunistic=True, allow_internal_dependencies=True):
    """A torch.cuda.MemPool whose memory soma serves, for one region of a program:

        pool = soma.torch.mem_pool()
        with torch.cuda.use_mem_pool(pool):
            x = torch.empty(...)           # from soma; outside the block, PyTorch's allocator

    PyTorch's caching allocator stays on top: it asks soma for whole segments on the current
    stream, carves tensors out of them, counts them in torch.cuda.memory_stats(), and gives
    the segments back to soma when empty_cache() finds them unused or the pool is destroyed.
    Works after CUDA started, with PyTorch's allocator process-wide; not combined with
    enable() (there every allocation is soma's already). The other arguments set soma's
    pools as enable() does; the first call fixes them. docs/torch.md tells what PyTorch does
    with these blocks (statistics, empty_cache, record_stream)."""
    global _state
    import torch

    if not hasattr(torch.cuda, "MemPool"):
        raise RuntimeError(f"torch {torch.__version__} has no torch.cuda.MemPool (2.5 or later)")
    with _lock:
        if _state is not None and _state["process_wide"]:
            raise RuntimeError("soma.torch.mem_pool() under enable(): soma serves every "
                               "allocation of this process already")
        if _state is None:
            path, lib, config = _open(library, release_threshold, follow_event_dependencies,
                                      allow_opportunistic, allow_internal_dependencies)
            _state = {
                "process_wide": False, "lib": lib, "path": path, "allocator": None,
                "pool_allocators": [], "hooks": [], "record_stream": "PyTorch's",
                "config": config,
            }
        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            _state["path"], "soma_torch_malloc", "soma_torch_free")
        # PyTorch keeps only a reference to the C++ allocator; the wrapper stays alive here.
        _state["pool_allocators"].append(allocator)
        return torch.cuda.MemPool(allocator.allocator())


def enabled():
    """Whether enable() installed soma as this process's allocator."""
    return _state is not None and _state["process_wide"]


def _lib():
    if _state is None:
        raise RuntimeError("neither soma.torch.enable() nor mem_pool() has been called in this "
                           "process")
    return _state["lib"]


def stats(device=None):
    """soma's statistics for this process.

    With device=None: a dict with, for every counter, the sum over devices (reserved_bytes,
    reserved_high_bytes, used_bytes, used_high_bytes, allocations, frees,
    failed_allocations, failed_frees, cross_stream_frees, streams), plus "devices" (a dict
    of the same per device), "library", "hooks", "record_stream", "adopts_native_streams"
    and "config". With a device index: that device's counters only.

    reserved = physical memory soma's pool holds on the device, used = the sum of the sizes
    of live tensors' allocations; *_high = the peak since the start or reset_peak(). The sum
    of per-device peaks is not a process-wide simultaneous peak when several devices are in use.
    """
    lib = _lib()
    if device is not None:
        return _device_stats(lib, int(device))
    count = lib.soma_torch_device_count()
    if count < 0:
        raise RuntimeError(f"soma_torch: {_message(lib)}")
    devices = {index: _device_stats(lib, index) for index in range(count)}
    result = {name: sum(figures[name] for figures in devices.values()) for name in _COUNTERS}
    result.update(
        devices=devices,
        library=_state["path"],
        hooks=list(_state["hooks"]),
        record_stream=_state["record_stream"],
        adopts_native_streams=lib.soma_torch_adopts_native_streams() == 1,
        config=dict(_state["config"]),
    )
    return result


def _device_stats(lib, device):
    figures = _Stats()
    _check(lib, lib.soma_torch_get_stats(device, ctypes.byref(figures)), "soma_torch_get_stats")
    return {name: getattr(figures, name) for name in _COUNTERS}


def empty_cache():
    """Returns every free granule of soma's pools to the driver (after a device synchronize).
    torch.cuda.empty_cache() does the same where PyTorch has the reset hook."""
    _lib().soma_torch_empty_cache()


def synchronize(device=None):
    """Waits for the devices' work (PyTorch's streams included) and lets soma's pools release
    memory above their release threshold. device=None: every device soma has a pool on."""
    lib = _lib()
    _check(lib, lib.soma_torch_synchronize(-1 if device is None else int(device)),
           "soma_torch_synchronize")


def reset_peak(device=None):
    """Resets reserved_high_bytes and used_high_bytes to the current values."""
    lib = _lib()
    _check(lib, lib.soma_torch_reset_peak(-1 if device is None else int(device)),
           "soma_torch_reset_peak")


def last_error():
    """The library's last failure message ("" if none)."""
    return _message(_lib())


def record_history(max_entries=100_000):
    """Starts recording what soma's pools do (somaMemRecordHistory) into a ring of the last
    max_entries events; 0 stops and keeps what was recorded. While it records, snapshot() has
    device_traces (allocations, frees, segment maps and unmaps, out-of-memory failures) and the
    blocks carry their scope() as a frame; export_trace(path) writes a trace for Perfetto."""
    lib = _lib()
    _check(lib, lib.somaMemRecordHistory(int(max_entries)), "somaMemRecordHistory")


def export_trace(path):
    """Writes the recorded history as Chrome trace-event JSON (ui.perfetto.dev,
    chrome://tracing; `soma report` makes a page of it)."""
    lib = _lib()
    _check(lib, lib.somaMemHistoryExportTrace(os.fsencode(path)), "somaMemHistoryExportTrace")


class scope:
    """Labels this thread's allocations while history records: `with soma.torch.scope("forward"):`.
    Scopes nest; the innermost one labels an allocation."""

    def __init__(self, label):
        self._label = str(label).encode()

    def __enter__(self):
        lib = _lib()
        _check(lib, lib.somaMemScopePush(self._label), "somaMemScopePush")
        return self

    def __exit__(self, *exc):
        lib = _lib()
        _check(lib, lib.somaMemScopePop(), "somaMemScopePop")
        return False


# somaMemBlockState -> the block states of torch.cuda.memory._snapshot()
_TORCH_STATES = {0: "active_allocated", 1: "inactive", 2: "active_pending_free"}


def snapshot():
    """soma's pools in the format of torch.cuda.memory._snapshot(), which
    torch.cuda._memory_viz (segment_plot, trace_plot, segments, memory) reads.

    One segment per run of contiguous physical memory of a device's pool (soma grows a run in
    place, as an expandable segment), with its blocks in address order: active_allocated (a
    live tensor's memory, with the size PyTorch asked for), inactive (free), or
    active_pending_free (freed on a stream whose work is not yet known complete). soma records
    no stack frames: a block's frames hold its scope() label as one frame while history records.
    device_traces hold the recorded history (record_history()), empty when nothing was recorded.
    """
    lib = _lib()
    count = lib.soma_torch_device_count()
    if count < 0:
        raise RuntimeError(f"soma_torch: {_message(lib)}")
    segments = []
    for device in range(count):
        pool = lib.soma_torch_get_pool(device)
        if not pool:
            continue
        taken = _Snapshot()
        if lib.somaMemPoolSnapshotTake(pool, ctypes.byref(taken)) != 0:
            raise RuntimeError(f"somaMemPoolSnapshotTake: {lib.somaGetLastErrorMessage().decode()}")
        try:
            for index in range(taken.poolCount):
                segments.extend(_torch_segments(device, taken.pools[index]))
        finally:
            lib.somaMemSnapshotFree(ctypes.byref(taken))
    return {"segments": segments, "device_traces": _device_traces(lib, count)}


# soma trace events -> torch.cuda.memory._snapshot() trace actions. A free is reusable by its
# stream at once (S2), so it is requested and completed in one step.
_TRACE_ACTIONS = {"allocate": ["alloc"], "free": ["free_requested", "free_completed"],
                  "grow": ["segment_map"], "release": ["segment_unmap"],
                  "out of memory": ["oom"]}


def _device_traces(lib, count):
    traces = [[] for _ in range(count)]
    with tempfile.TemporaryDirectory(prefix="soma_torch_") as directory:
        path = os.path.join(directory, "trace.json")
        _check(lib, lib.somaMemHistoryExportTrace(path.encode()), "somaMemHistoryExportTrace")
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    streams = {}
    for event in trace["traceEvents"]:
        name = event.get("args", {}).get("name", "")
        if event["ph"] == "M" and event["name"] == "thread_name" and name.startswith("stream 0x"):
            streams[(event["pid"], event["tid"])] = int(name[len("stream "):], 16)
    for event in trace["traceEvents"]:
        if event["ph"] != "i" or not 0 <= event["pid"] < count:
            continue
        kind = next((k for k in _TRACE_ACTIONS if event["name"].startswith(k)), None)
        if kind is None:
            continue
        args = event.get("args", {})
        scope = args.get("scope")
        for action in _TRACE_ACTIONS[kind]:
            entry = {
                "action": action,
                "addr": int(args.get("address", "0x0"), 16),
                "size": int(args.get("bytes", args.get("request_bytes", 0))),
                "stream": streams.get((event["pid"], event["tid"]), 0),
                "time_us": int(event["ts"]),
                "frames": [_scope_frame(scope)] if scope else [],
            }
            if kind == "out of memory":
                entry["device_free"] = 0
            traces[event["pid"]].append(entry)
    return traces


def _scope_frame(label):
    """A scope label as a frame of PyTorch's snapshot format, so its viewers show it."""
    return {"name": label, "filename": "soma scope", "line": 0}


def _torch_segments(device, pool):
    runs = []  # [start, end] of contiguous commits
    for index in range(pool.commitCount):
        start = pool.commits[index].address or 0
        end = start + pool.commits[index].bytes
        if runs and runs[-1][1] == start:
            runs[-1][1] = end
        else:
            runs.append([start, end])
    blocks = [pool.blocks[index] for index in range(pool.blockCount)]
    segments = []
    for start, end in runs:
        inside = [b for b in blocks if start <= (b.address or 0) < end]
        torch_blocks = [{
            "address": b.address or 0,
            "size": b.bytes,
            "requested_size": b.requestedBytes if b.state == 0 else b.bytes,
            "state": _TORCH_STATES[b.state],
            "frames": [_scope_frame(b.scope.decode())] if b.scope else [],
        } for b in inside]
        active = [b for b in torch_blocks if b["state"] != "inactive"]
        segments.append({
            "device": device,
            "address": start,
            "total_size": end - start,
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": (0, 0),
            "allocated_size": sum(b["size"] for b in torch_blocks
                                  if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in active),
            "requested_size": sum(b["requested_size"] for b in active),
            "is_expandable": True,
            "frames": [],
            "blocks": torch_blocks,
        })
    return segments

