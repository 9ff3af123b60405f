"""Allocating and freeing in stream order (S1, S2), and pointer attributes (S14)."""

import ctypes
import dataclasses
import sys
import threading

from . import _library
from .errors import InvalidValueError, check
from .pools import Location, wrap
from .streams import Stream, address_of, handle_of

_MEMORY_TYPES = {0: "unregistered", 1: "host", 2: "device", 3: "managed"}


def malloc_async(nbytes, stream=None, pool=None):
    """The address of nbytes from pool (default: the device's current pool), usable at once by
    later work on stream (S1). The raw form: free it with free_async. Buffer frees itself."""
    pointer = ctypes.c_void_p()
    if pool is None:
        check(_library.get().somaMallocAsync(ctypes.byref(pointer), _size(nbytes),
                                             handle_of(stream)), "somaMallocAsync")
    else:
        check(_library.get().somaMallocFromPoolAsync(ctypes.byref(pointer), _size(nbytes),
                                                     pool.handle, handle_of(stream)),
              "somaMallocFromPoolAsync")
    return pointer.value or 0


def free_async(pointer, stream=None):
    """Frees a soma allocation after the work enqueued on stream so far (S2)."""
    check(_library.get().somaFreeAsync(address_of(pointer), handle_of(stream)), "somaFreeAsync")


@dataclasses.dataclass(frozen=True)
class PointerAttributes:
    """somaPointerGetAttributes (S14): memory_type is "device" for a live allocation of a device
    pool, "host" for one of a host pool, "unregistered" otherwise; base and size are those of
    the allocation holding the address; location where its memory is (None if not live)."""
    memory_type: str
    device: int
    device_pointer: int
    host_pointer: int
    pool: object
    base: int
    size: int
    is_live_allocation: bool
    location: object = None


def pointer_attributes(pointer):
    found = _library.PointerAttributes()
    check(_library.get().somaPointerGetAttributes(ctypes.byref(found), address_of(pointer)),
          "somaPointerGetAttributes")
    return PointerAttributes(
        memory_type=_MEMORY_TYPES.get(found.type, str(found.type)),
        device=found.device,
        device_pointer=found.devicePointer or 0,
        host_pointer=found.hostPointer or 0,
        pool=wrap(found.pool),
        base=found.base or 0,
        size=found.size,
        is_live_allocation=bool(found.isLiveAllocation),
        location=Location.from_c(found.location.type, found.location.id)
        if found.isLiveAllocation else None,
    )


class Buffer:
    """nbytes of pool memory with an owner: freed on its stream (S2: after the work enqueued
    there so far) by free(), at the end of a with block, or when collected. free(other) frees
    it on another stream instead. It keeps its pool and stream alive while it lives.

    ptr: the address (int(buffer) too); size; stream; pool. On the cpu backend host_view()
    gives its bytes as a memoryview; on cuda it has __cuda_array_interface__ (bytes, with its
    stream), so CuPy, Numba and PyTorch can wrap it."""

    def __init__(self, ptr, size, stream, pool):
        self.ptr, self.size, self.stream, self.pool = ptr, size, stream, pool
        self._lock = threading.Lock()
        self._freed = False

    @classmethod
    def allocate(cls, nbytes, stream=None, pool=None):
        if pool is None:
            from .pools import Pool
            pool = Pool.current(stream.device if stream is not None else None)
        return cls(malloc_async(nbytes, stream, pool), int(nbytes), stream, pool)

    @property
    def freed(self):
        return self._freed

    def free(self, stream=None):
        """Frees the buffer on stream (default: the stream it was allocated on). A second free
        is an InvalidValueError, raised here: soma may have handed the address out again."""
        with self._lock:
            if self._freed:
                raise InvalidValueError(1, "Buffer.free",
                                        f"buffer 0x{self.ptr:x} ({self.size} bytes) was freed "
                                        "already")
            self._freed = True
        if self.ptr:
            free_async(self.ptr, self.stream if stream is None else stream)

    def host_view(self):
        """The bytes as a writable memoryview, where the host reaches them directly (a host
        pool's memory, and every allocation on the cpu backend). Reading is safe only once the
        work that writes them has completed."""
        attributes = pointer_attributes(self.ptr)
        if not attributes.host_pointer:
            raise InvalidValueError(1, "Buffer.host_view",
                                    f"buffer 0x{self.ptr:x} is {attributes.memory_type} memory "
                                    "the host cannot read directly on this backend; copy it "
                                    "with Stream.memcpy_async")
        return memoryview((ctypes.c_char * self.size).from_address(attributes.host_pointer)) \
            .cast("B")

    @property
    def __cuda_array_interface__(self):
        from .devices import backend
        if backend() != "cuda":
            raise AttributeError("__cuda_array_interface__ exists on the cuda backend only")
        native = self.stream.native if isinstance(self.stream, Stream) else None
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": native or 1}

    def __int__(self):
        return self.ptr

    def __len__(self):
        return self.size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._freed:
            self.free()
        return False

    def __del__(self):
        if not getattr(self, "_freed", True) and sys is not None and not sys.is_finalizing():
            try:
                self.free()
            except Exception:  # noqa: BLE001 - a collector cannot raise
                pass

    def __repr__(self):
        state = " freed" if self._freed else ""
        return f"<soma.Buffer 0x{self.ptr:x} {self.size} bytes{state}>"


def _size(nbytes):
    value = int(nbytes)
    if value < 0:
        raise InvalidValueError(1, "somaMallocAsync", f"size {value} is negative")
    return value
