"""Memory pools (S3-S5, S9-S11): default, current and explicit pools of device or host memory,
attributes, trim, statistics and snapshots."""

import ctypes
import dataclasses
import sys
import weakref

from . import _library
from .errors import InvalidValueError, check

#: int attributes (somaMemPoolAttr): the three reuse policies (S11) and soma's own two
INT_ATTRIBUTES = {
    "reuse_follow_event_dependencies": 1,
    "reuse_allow_opportunistic": 2,
    "reuse_allow_internal_dependencies": 3,
    # read only (S5): what the pool was created with
    "allocation_type": 9,
    "export_handle_types": 10,
    "location_id": 11,
    "location_type": 12,
    "compact_before_growth": 1000,
    "remap_free_memory": 1001,
}
#: uint64 attributes; only release_threshold is set freely, the *_high ones only to 0 (reset)
UINT64_ATTRIBUTES = {
    "release_threshold": 4,
    "reserved_bytes": 5,
    "reserved_high_bytes": 6,
    "used_bytes": 7,
    "used_high_bytes": 8,
    "max_pool_size": 13,
    "remap_count": 1002,
    "remapped_bytes": 1003,
    "remap_kept_bytes": 1004,
}
STATISTICS = ("reserved_bytes", "reserved_high_bytes", "used_bytes", "used_high_bytes",
              "remap_count", "remapped_bytes", "remap_kept_bytes")
#: somaMemPoolAttrRemapFreeMemory's values
REMAP_NEVER, REMAP_BEFORE_GROWTH, REMAP_INSTEAD_OF_FAILING = 0, 1, 2
#: somaMemAccessFlags
ACCESS_NONE, ACCESS_READ, ACCESS_READ_WRITE = 0, 1, 3
_PINNED = 1
_BLOCK_STATES = {0: "live", 1: "free", 2: "free_pending"}

_created = weakref.WeakValueDictionary()  # handle -> Pool the package created
_LOCATION_TYPES = {"device": 1, "host": 2, "host_numa": 3}
_LOCATION_NAMES = {number: name for name, number in _LOCATION_TYPES.items()}


@dataclasses.dataclass(frozen=True)
class Location:
    """Where a pool's memory is (S5): Location.device(0), Location.host() (host memory on any
    NUMA node) or Location.host_numa(node). Host memory is the host's at once and a device's
    once Pool.set_access grants it."""
    kind: str
    id: int = 0

    @classmethod
    def device(cls, ordinal):
        return cls("device", int(ordinal))

    @classmethod
    def host(cls):
        return cls("host", 0)

    @classmethod
    def host_numa(cls, node):
        return cls("host_numa", int(node))

    @property
    def is_host(self):
        return self.kind != "device"

    def as_c(self):
        if self.kind not in _LOCATION_TYPES:
            raise ValueError(f"unknown location kind {self.kind!r}; known: "
                             f"{', '.join(_LOCATION_TYPES)}")
        return _library.MemLocation(_LOCATION_TYPES[self.kind], self.id)

    @classmethod
    def from_c(cls, type_number, ordinal):
        return cls(_LOCATION_NAMES.get(type_number, str(type_number)), ordinal)


class Pool:
    """A soma pool. Pool(device, max_size=..., name=..., exportable=..., **attributes) creates
    an explicit pool (somaMemPoolCreate; attributes by the names of INT_ATTRIBUTES and
    release_threshold); Pool.default(device) and Pool.current(device) wrap the device's pools.
    A created pool is destroyed by destroy(), at the end of a with block or when it and every
    Buffer from it are collected; default and current pools are never destroyed here."""

    def __init__(self, device=None, *, location=None, max_size=0, name=None, exportable=False,
                 _handle=None, **attributes):
        if _handle is not None:
            self.handle, self._owned = _handle, False
            return
        props = _library.PoolProps()
        props.allocType = _PINNED
        props.handleTypes = 1 if exportable else 0  # POSIX file descriptor (S7)
        props.location = _location_of(device, location).as_c()
        props.maxSize = int(max_size)
        created = ctypes.c_void_p()
        check(_library.get().somaMemPoolCreate(ctypes.byref(created), ctypes.byref(props)),
              "somaMemPoolCreate")
        self.handle, self._owned = created.value, True
        _created[self.handle] = self
        try:
            if name is not None:
                self.set_name(name)
            for attribute, value in attributes.items():
                self.set_attribute(attribute, value)
        except BaseException:
            self.destroy()
            raise

    @classmethod
    def default(cls, device=None, location=None):
        """The default pool of a device, or of a Location (somaMemGetDefaultMemPool: the host's
        and each NUMA node's are made at the first call)."""
        handle = ctypes.c_void_p()
        where = _location_of(device, location).as_c()
        check(_library.get().somaMemGetDefaultMemPool(ctypes.byref(handle), ctypes.byref(where),
                                                      _PINNED), "somaMemGetDefaultMemPool")
        return wrap(handle.value)

    @classmethod
    def current(cls, device=None, location=None):
        """The current pool of a device (which soma.malloc_async uses) or of a Location
        (somaMemGetMemPool)."""
        handle = ctypes.c_void_p()
        where = _location_of(device, location).as_c()
        check(_library.get().somaMemGetMemPool(ctypes.byref(handle), ctypes.byref(where),
                                               _PINNED), "somaMemGetMemPool")
        return wrap(handle.value)

    def make_current(self, device=None, location=None):
        """Makes this the current pool of a device or Location (somaMemSetMemPool); it must
        be a pool of that location."""
        where = _location_of(device, location).as_c()
        check(_library.get().somaMemSetMemPool(ctypes.byref(where), _PINNED, self.handle),
              "somaMemSetMemPool")

    @property
    def location(self):
        """Where the pool's memory is, as a Location."""
        return Location.from_c(self.get_attribute("location_type"),
                               self.get_attribute("location_id"))

    def allocate(self, nbytes, stream=None):
        """A Buffer of nbytes from this pool, usable at once by later work on stream (S1)."""
        from .memory import Buffer
        return Buffer.allocate(nbytes, stream, self)

    # ---- attributes -------------------------------------------------------------------------
    def get_attribute(self, name):
        number, value = _attribute(name)
        check(_library.get().somaMemPoolGetAttribute(self.handle, number, ctypes.byref(value)),
              "somaMemPoolGetAttribute")
        return bool(value.value) if name.startswith("reuse_") or name == "compact_before_growth" \
            else value.value

    def set_attribute(self, name, value):
        number, holder = _attribute(name)
        value = int(value)
        bits = 8 * ctypes.sizeof(holder)
        low, high = (0, 2**bits - 1) if name in UINT64_ATTRIBUTES else (-2**(bits - 1),
                                                                        2**(bits - 1) - 1)
        if not low <= value <= high:
            raise InvalidValueError(1, "somaMemPoolSetAttribute",
                                    f"{name} = {value} is outside [{low}, {high}]")
        holder.value = value
        check(_library.get().somaMemPoolSetAttribute(self.handle, number, ctypes.byref(holder)),
              "somaMemPoolSetAttribute")

    release_threshold = property(lambda self: self.get_attribute("release_threshold"),
                                 lambda self, v: self.set_attribute("release_threshold", v),
                                 doc="bytes kept at synchronize points (S9)")
    reuse_follow_event_dependencies = property(
        lambda self: self.get_attribute("reuse_follow_event_dependencies"),
        lambda self, v: self.set_attribute("reuse_follow_event_dependencies", v))
    reuse_allow_opportunistic = property(
        lambda self: self.get_attribute("reuse_allow_opportunistic"),
        lambda self, v: self.set_attribute("reuse_allow_opportunistic", v))
    reuse_allow_internal_dependencies = property(
        lambda self: self.get_attribute("reuse_allow_internal_dependencies"),
        lambda self, v: self.set_attribute("reuse_allow_internal_dependencies", v))
    compact_before_growth = property(lambda self: self.get_attribute("compact_before_growth"),
                                     lambda self, v: self.set_attribute("compact_before_growth",
                                                                        v))
    remap_free_memory = property(lambda self: self.get_attribute("remap_free_memory"),
                                 lambda self, v: self.set_attribute("remap_free_memory", v),
                                 doc="0 never, 1 before growth, 2 instead of failing")

    def statistics(self):
        """reserved_bytes, reserved_high_bytes, used_bytes, used_high_bytes (S10), remap_count,
        remapped_bytes and remap_kept_bytes, as a dict."""
        return {name: self.get_attribute(name) for name in STATISTICS}

    def reset_peaks(self):
        """Sets reserved_high_bytes and used_high_bytes back to the current values."""
        self.set_attribute("reserved_high_bytes", 0)
        self.set_attribute("used_high_bytes", 0)

    def trim_to(self, min_bytes_to_keep=0):
        """Gives free memory back until min_bytes_to_keep reserved remain (somaMemPoolTrimTo)."""
        check(_library.get().somaMemPoolTrimTo(self.handle, int(min_bytes_to_keep)),
              "somaMemPoolTrimTo")

    def set_name(self, name):
        """The name soma's messages and snapshots give this pool."""
        check(_library.get().somaMemPoolSetName(self.handle, str(name).encode()),
              "somaMemPoolSetName")

    # ---- access (S6) ------------------------------------------------------------------------
    def set_access(self, device, flags=ACCESS_READ_WRITE):
        """Grants (or with ACCESS_NONE revokes) device's access to the pool's memory."""
        desc = _library.AccessDesc(Location.device(device).as_c(), int(flags))
        check(_library.get().somaMemPoolSetAccess(self.handle, ctypes.byref(desc), 1),
              "somaMemPoolSetAccess")

    def access(self, device):
        """device's access: ACCESS_NONE, ACCESS_READ or ACCESS_READ_WRITE."""
        flags = ctypes.c_int()
        location = Location.device(device).as_c()
        check(_library.get().somaMemPoolGetAccess(ctypes.byref(flags), self.handle,
                                                  ctypes.byref(location)), "somaMemPoolGetAccess")
        return flags.value

    # ---- snapshot ---------------------------------------------------------------------------
    def snapshot(self):
        """The pool's state now (somaMemPoolSnapshotTake) as a dict: device, name, the four
        statistics, reservations and commits as (address, bytes), and blocks in address order
        with address, bytes, requested_bytes and state ("live", "free", "free_pending")."""
        taken = _library.Snapshot()
        lib = _library.get()
        check(lib.somaMemPoolSnapshotTake(self.handle, ctypes.byref(taken)),
              "somaMemPoolSnapshotTake")
        try:
            pool = taken.pools[0]
            return {
                "device": pool.device,
                "name": pool.name.decode(errors="replace"),
                "reserved_bytes": pool.reservedBytes,
                "reserved_high_bytes": pool.reservedHighBytes,
                "used_bytes": pool.usedBytes,
                "used_high_bytes": pool.usedHighBytes,
                "reservations": _ranges(pool.reservations, pool.reservationCount),
                "commits": _ranges(pool.commits, pool.commitCount),
                "blocks": [{"address": b.address or 0, "bytes": b.bytes,
                            "requested_bytes": b.requestedBytes,
                            "state": _BLOCK_STATES.get(b.state, str(b.state))}
                           for b in (pool.blocks[i] for i in range(pool.blockCount))],
            }
        finally:
            lib.somaMemSnapshotFree(ctypes.byref(taken))

    # ---- lifetime ---------------------------------------------------------------------------
    def destroy(self):
        """somaMemPoolDestroy. The object keeps the stale handle: using it afterwards is soma's
        InvalidResourceHandleError, as in C. A default pool cannot be destroyed (soma says so)."""
        check(_library.get().somaMemPoolDestroy(self.handle), "somaMemPoolDestroy")
        self._owned = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    def __del__(self):
        if getattr(self, "_owned", False) and sys is not None and not sys.is_finalizing():
            try:
                self.destroy()  # after its Buffers: each holds its pool
            except Exception:  # noqa: BLE001 - a collector cannot raise
                pass

    def __eq__(self, other):
        return isinstance(other, Pool) and other.handle == self.handle

    def __hash__(self):
        return hash(self.handle)

    def __repr__(self):
        return f"<soma.Pool 0x{self.handle or 0:x}{' (created)' if self._owned else ''}>"


def wrap(handle):
    """The Pool object for a somaMemPool_t: the package's own if it created it."""
    if handle is None:
        return None
    return _created.get(handle) or Pool(_handle=handle)


def _location_of(device, location):
    if location is not None:
        if device is not None:
            raise ValueError("give a device or a location, not both")
        if not isinstance(location, Location):
            raise TypeError(f"location must be a soma.Location, not {type(location).__name__}")
        return location
    return Location.device(_device_or_current(device))


def _device_or_current(device):
    if device is not None:
        return int(device)
    from .devices import get_device
    return get_device()


def _attribute(name):
    if name in INT_ATTRIBUTES:
        return INT_ATTRIBUTES[name], ctypes.c_int()
    if name in UINT64_ATTRIBUTES:
        return UINT64_ATTRIBUTES[name], ctypes.c_uint64()
    raise ValueError(f"unknown pool attribute {name!r}; known: "
                     f"{', '.join(list(INT_ATTRIBUTES) + list(UINT64_ATTRIBUTES))}")


def _ranges(ranges, count):
    return [(ranges[i].address or 0, ranges[i].bytes) for i in range(count)]
