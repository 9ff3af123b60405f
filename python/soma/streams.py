"""Streams and events (S1, S2, S12): soma's own, or adopted from a framework by native handle."""

import ctypes
import sys
import threading
import traceback

from . import _library
from .errors import NOT_READY, SUCCESS, InvalidValueError, check

# CUDA's special stream handles: 0 in most frameworks means the legacy default stream.
LEGACY_STREAM = 0x1
PER_THREAD_STREAM = 0x2


def handle_of(stream):
    """The somaStream_t of a Stream or None (the current device's default stream)."""
    if stream is None:
        return None
    if isinstance(stream, Stream):
        return stream.handle
    raise TypeError(f"expected a soma.Stream or None, not {type(stream).__name__}")


def address_of(target):
    """An address from an int, an object with .ptr (soma.Buffer, cupy.cuda.MemoryPointer) or a
    writable Python buffer (bytearray, ctypes array)."""
    if isinstance(target, int):
        return target
    pointer = getattr(target, "ptr", None)
    if isinstance(pointer, int):
        return pointer
    if isinstance(target, ctypes.Array):
        return ctypes.addressof(target)
    try:
        view = memoryview(target)
    except TypeError:
        raise TypeError(f"expected an address, a soma.Buffer or a writable buffer, not "
                        f"{type(target).__name__}") from None
    if view.readonly:
        raise TypeError("a read-only buffer cannot be a target")
    return ctypes.addressof((ctypes.c_char * view.nbytes).from_buffer(view))


class Stream:
    """A soma stream. Stream() creates one (non_blocking: not ordered after the default stream);
    Stream.from_native(handle) adopts a framework's stream; Stream.default() is the current
    device's default stream. A stream the package created is destroyed by close(), at the end
    of a with block, or when it is collected; adopted and default streams are never destroyed
    here (adopted ones: close() destroys soma's side only, never the native stream)."""

    def __init__(self, non_blocking=False, *, _handle=None, _owned=True, _native=None):
        self._owned = _owned
        self._native = _native
        if _handle is not None or not _owned:
            self.handle = _handle
            return
        created = ctypes.c_void_p()
        flags = 1 if non_blocking else 0
        check(_library.get().somaStreamCreateWithFlags(ctypes.byref(created), flags),
              "somaStreamCreateWithFlags")
        self.handle = created.value

    @classmethod
    def default(cls):
        """The current device's default stream (NULL in the C API)."""
        return cls(_handle=None, _owned=False)

    @classmethod
    def from_native(cls, native, device=None, *, may_end_first=False):
        """Adopts a native stream (cuda: a CUstream such as torch.cuda.current_stream().cuda_stream
        or cupy.cuda.get_current_stream().ptr) of device (default: the current device). 0 means
        the legacy default stream. The caller keeps the native stream alive while soma uses it,
        unless may_end_first (somaNativeStreamMayEndFirst): then its owner may destroy it before
        close(), and soma records a marker after each free on it so it never needs it again.
        cpu backend: NotSupportedError (there are no native streams)."""
        value = int(native)
        if value == PER_THREAD_STREAM:
            raise InvalidValueError(1, "Stream.from_native",
                                    "cudaStreamPerThread (0x2) names another stream on every "
                                    "host thread and cannot be adopted; use a stream of its own")
        if value == 0:
            value = LEGACY_STREAM
        if device is None:
            from .devices import get_device
            device = get_device()
        adopted = ctypes.c_void_p()
        flags = 1 if may_end_first else 0
        check(_library.get().somaStreamCreateFromNativeWithFlags(ctypes.byref(adopted), value,
                                                                 int(device), flags),
              "somaStreamCreateFromNativeWithFlags")
        return cls(_handle=adopted.value, _owned=True, _native=value)

    @property
    def native(self):
        """The native stream behind this one (cuda: its CUstream as an int; cpu: None)."""
        value = ctypes.c_void_p()
        check(_library.get().somaStreamGetNative(self.handle, ctypes.byref(value)),
              "somaStreamGetNative")
        return value.value

    @property
    def device(self):
        value = ctypes.c_int()
        check(_library.get().somaStreamGetDevice(self.handle, ctypes.byref(value)),
              "somaStreamGetDevice")
        return value.value

    def synchronize(self):
        """Waits for the stream's work; soma's pools release above their threshold (S9)."""
        check(_library.get().somaStreamSynchronize(self.handle), "somaStreamSynchronize")

    def query(self):
        """True when all of the stream's work has completed."""
        status = _library.get().somaStreamQuery(self.handle)
        if status == NOT_READY:
            return False
        check(status, "somaStreamQuery")
        return True

    def wait_event(self, event):
        """Later work on this stream waits for event's recorded work (S11's event dependency)."""
        check(_library.get().somaStreamWaitEvent(self.handle, event.handle, 0),
              "somaStreamWaitEvent")

    def record_event(self, disable_timing=False):
        """A new event recorded on this stream now."""
        event = Event(disable_timing=disable_timing)
        event.record(self)
        return event

    def launch(self, function):
        """Runs function() on the host once the stream's earlier work has completed (as
        somaLaunchHostFunc; it must not call soma). An exception is printed to stderr."""
        key = _host_functions.keep(function)
        status = _library.get().somaLaunchHostFunc(self.handle, _HOST_TRAMPOLINE, key)
        if status != SUCCESS:
            _host_functions.take(key)
        check(status, "somaLaunchHostFunc")

    def memset_async(self, target, value, count):
        """Sets count bytes at target to value, in stream order."""
        check(_library.get().somaMemsetAsync(address_of(target), int(value), int(count),
                                             self.handle), "somaMemsetAsync")

    def memcpy_async(self, destination, source, count):
        """Copies count bytes, in stream order (somaMemcpyDefault: the direction from the
        addresses). A Python buffer must stay alive until the copy has run."""
        check(_library.get().somaMemcpyAsync(address_of(destination), address_of(source),
                                             int(count), 4, self.handle), "somaMemcpyAsync")

    def close(self):
        """somaStreamDestroy (its queued work still runs; an adopted native stream lives on).
        The object keeps the stale handle: later use is soma's InvalidResourceHandleError."""
        check(_library.get().somaStreamDestroy(self.handle), "somaStreamDestroy")
        self._owned = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_owned", False) and sys is not None and not sys.is_finalizing():
            try:
                self.close()
            except Exception:  # noqa: BLE001 - a collector cannot raise
                pass

    def __eq__(self, other):
        return isinstance(other, Stream) and other.handle == self.handle

    def __hash__(self):
        return hash(self.handle)

    def __repr__(self):
        if self.handle is None:
            return "<soma.Stream default>"
        adopted = f" native=0x{self._native:x}" if self._native else ""
        return f"<soma.Stream 0x{self.handle:x}{adopted}>"


class Event:
    """A soma event: record() on a stream, then synchronize(), query() or Stream.wait_event()."""

    def __init__(self, disable_timing=False):
        created = ctypes.c_void_p()
        check(_library.get().somaEventCreateWithFlags(ctypes.byref(created),
                                                      2 if disable_timing else 0),
              "somaEventCreateWithFlags")
        self.handle, self._owned = created.value, True

    def record(self, stream=None):
        check(_library.get().somaEventRecord(self.handle, handle_of(stream)), "somaEventRecord")

    def synchronize(self):
        check(_library.get().somaEventSynchronize(self.handle), "somaEventSynchronize")

    def query(self):
        """True when the recorded work has completed."""
        status = _library.get().somaEventQuery(self.handle)
        if status == NOT_READY:
            return False
        check(status, "somaEventQuery")
        return True

    def close(self):
        check(_library.get().somaEventDestroy(self.handle), "somaEventDestroy")
        self._owned = False

    def __del__(self):
        if getattr(self, "_owned", False) and sys is not None and not sys.is_finalizing():
            try:
                self.close()
            except Exception:  # noqa: BLE001
                pass


class _HostFunctions:
    """Host functions in flight, kept alive until soma's stream thread has called them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._next = 1
        self._functions = {}

    def keep(self, function):
        with self._lock:
            key = self._next
            self._next += 1
            self._functions[key] = function
        return key

    def take(self, key):
        with self._lock:
            return self._functions.pop(key, None)


_host_functions = _HostFunctions()


def _run_host_function(key):
    function = _host_functions.take(key)
    if function is None:
        return
    try:
        function()
    except BaseException:  # noqa: BLE001 - a C callback cannot raise: report it
        traceback.print_exc()


_HOST_TRAMPOLINE = _library.HOST_FN(_run_host_function)
