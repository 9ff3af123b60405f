"""soma as CuPy's allocator (cupy.cuda.set_allocator), process-wide or for one region.

    import cupy, soma.cupy
    soma.cupy.enable()                        # every CuPy array from now on comes from soma
    x = cupy.arange(1 << 20) ** 2

    pool = soma.Pool(max_size=8 << 30)
    with soma.cupy.using(pool):               # this region allocates from `pool`
        y = cupy.fft.fft(cupy.ones(4096))

Each allocation is somaMallocFromPoolAsync on CuPy's current stream, and each free is
somaFreeAsync on the stream current when CuPy lets the memory go (as MemoryAsyncPool does): the
block is reused after that stream's earlier work (S2), and by other streams per the pool's reuse
policies (S11). CuPy streams are adopted as soma streams by their handle the first time they
are seen, until CuPy collects the stream (soma never destroys a CuPy stream). Python may
destroy a CuPy stream before soma hears of it, so they are adopted with may_end_first: each
free on one also records a marker there, and soma never needs the stream afterwards. CuPy's
per-thread default stream cannot be adopted (it names another stream on every thread). Needs
the cuda backend. docs/cupy.md.
"""

import threading
import weakref

from .memory import free_async, malloc_async
from .streams import Stream

__all__ = ["enable", "disable", "using", "allocator", "Allocator"]


class _Streams:
    """CuPy stream -> the soma stream that adopts it, one per (device, handle). A CuPy stream
    of its own (not the null stream) is forgotten, and its soma stream destroyed, when CuPy
    collects it. CuPy may destroy the CUstream before that (its __del__ runs before weakref
    callbacks), and a new CuPy stream may get the same handle meanwhile: an entry names the
    CuPy stream that made it (weakly), a stream that finds another's entry under its handle
    adopts anew, and an entry is removed only by the finalizer of the stream that made it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._adopted = {}  # (device, handle) -> (soma stream, weakref to the CuPy stream)

    def get(self, device, cupy_stream):
        native = cupy_stream.ptr
        key = (device, native)
        entry = self._adopted.get(key)
        if not _names(entry, cupy_stream):
            with self._lock:
                entry = self._adopted.get(key)
                if not _names(entry, cupy_stream):
                    entry = self._adopt(key, cupy_stream)
        return entry[0]

    def _adopt(self, key, cupy_stream):
        device, native = key
        # The null and legacy streams live as long as the process.
        may_end = native not in (0, 1)
        stream = Stream.from_native(native, device, may_end_first=may_end)
        entry = (stream, weakref.ref(cupy_stream) if may_end else None)
        self._adopted[key] = entry
        if may_end:
            weakref.finalize(cupy_stream, self._forget, key, stream)
        return entry

    def _forget(self, key, stream):
        with self._lock:
            entry = self._adopted.get(key)
            if entry is not None and entry[0] is stream:
                del self._adopted[key]
        if stream is not None:
            try:
                stream.close()  # soma's side only; its queued work still completes
            except Exception:  # noqa: BLE001 - a finalizer cannot raise
                pass


def _names(entry, cupy_stream):
    """Whether entry serves cupy_stream: the entry of a CuPy stream of its own names it; the
    null and legacy streams' entries serve whichever object CuPy hands out for them."""
    return entry is not None and (entry[1] is None or entry[1]() is cupy_stream)


_streams = _Streams()


class _Allocation:
    """The owner CuPy keeps with the memory: frees it on the then current stream when dropped."""

    __slots__ = ("ptr", "device")

    def __init__(self, ptr, device):
        self.ptr, self.device = ptr, device

    def __del__(self):
        import cupy
        try:
            with cupy.cuda.Device(self.device):
                free_async(self.ptr, _streams.get(self.device, cupy.cuda.get_current_stream()))
        except Exception:  # noqa: BLE001 - a collector cannot raise; soma logs the failure
            pass


class Allocator:
    """The callable cupy.cuda.set_allocator takes: size -> cupy.cuda.MemoryPointer from pool
    (None: each device's current soma pool)."""

    def __init__(self, pool=None):
        self.pool = pool

    def __call__(self, size):
        import cupy
        device = cupy.cuda.runtime.getDevice()
        if size == 0:
            return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(0, 0, None, device), 0)
        stream = _streams.get(device, cupy.cuda.get_current_stream())
        try:  # pool None: somaMallocAsync, from the current pool of the stream's device
            ptr = malloc_async(size, stream, self.pool)
        except MemoryError as error:
            raise cupy.cuda.memory.OutOfMemoryError(size, 0, 0) from error
        owner = _Allocation(ptr, device)
        memory = cupy.cuda.UnownedMemory(ptr, size, owner, device)
        return cupy.cuda.MemoryPointer(memory, 0)


def allocator(pool=None):
    """An Allocator for cupy.cuda.set_allocator or cupy.cuda.using_allocator."""
    return Allocator(pool)


def enable(pool=None):
    """Makes soma CuPy's allocator for this process (every thread without an allocator of its
    own). Arrays allocated before keep the memory they have."""
    import cupy
    cupy.cuda.set_allocator(Allocator(pool))


def disable():
    """Gives CuPy its default memory pool back."""
    import cupy
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)


def using(pool=None):
    """A context manager: inside it this thread's CuPy allocations come from pool (a
    soma.Pool; None: the device's current soma pool). Built on cupy.cuda.using_allocator."""
    import cupy
    return cupy.cuda.using_allocator(Allocator(pool))
