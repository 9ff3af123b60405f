"""soma: a stream-ordered memory allocator with memory pools, from Python.

    import soma
    stream = soma.Stream()
    pool = soma.Pool(max_size=1 << 30, release_threshold=64 << 20)
    buffer = pool.allocate(1 << 20, stream)     # usable at once by later work on stream (S1)
    stream.memset_async(buffer, 0, buffer.size)
    buffer.free()                               # after the stream's earlier work (S2)
    stream.synchronize()                        # the pool keeps 64 MiB, gives back the rest (S9)
    print(pool.statistics())

Every failure raises soma.SomaError (code, name, call, message). soma.torch makes soma
PyTorch's allocator; soma.cupy makes it CuPy's. docs/python.md tells the whole of it.
"""

from .devices import (backend, configure_cpu_backend, device_attribute, device_count,
                      get_device, mem_get_info, set_device, synchronize)
from .errors import (InvalidResourceHandleError, InvalidValueError, NotSupportedError,
                     OutOfMemoryError, SomaError)
from .memory import Buffer, PointerAttributes, free_async, malloc_async, pointer_attributes
from .pools import (ACCESS_NONE, ACCESS_READ, ACCESS_READ_WRITE, REMAP_BEFORE_GROWTH,
                    REMAP_INSTEAD_OF_FAILING, REMAP_NEVER, Location, Pool)
from .streams import Event, Stream

__version__ = "0.1.0"

#: A release threshold that keeps all freed memory in the pool (never releases at synchronize).
KEEP_EVERYTHING = 2**64 - 1


def library_path():
    """The libsoma this process uses (soma._library tells the search order)."""
    from . import _library
    return _library.path()


__all__ = [
    "ACCESS_NONE", "ACCESS_READ", "ACCESS_READ_WRITE", "Buffer", "Event", "InvalidResourceHandleError",
    "InvalidValueError", "KEEP_EVERYTHING", "Location", "NotSupportedError", "OutOfMemoryError",
    "PointerAttributes", "Pool", "REMAP_BEFORE_GROWTH", "REMAP_INSTEAD_OF_FAILING", "REMAP_NEVER",
    "SomaError", "Stream", "backend", "configure_cpu_backend", "device_attribute",
    "device_count", "free_async", "get_device", "library_path", "malloc_async", "mem_get_info",
    "pointer_attributes", "set_device", "synchronize",
]
