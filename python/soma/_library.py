"""Finding and loading libsoma, and the ctypes signatures of the C API calls the package uses.

One libsoma per process: soma.torch's libsoma_torch.so links libsoma.so.0 by its soname, so
whichever of the two loads first decides which copy both use. The search order (first hit wins):

1. $SOMA_LIBRARY, a path to libsoma.so;
2. a libsoma.so.0 already loaded in this process (by soma.torch, say);
3. lib/ inside this package (an installed package: `pip install .`);
4. the build tree this package was copied into (CMake copies python/ to <build>/python);
5. the repository's build trees: $SOMA_BUILD_DIR, build/gpu, build/release, build/dev,
   build/python.
"""

import ctypes
import os
import threading

SONAME = "libsoma.so.0"
BUILD_DIRS = ("build/gpu", "build/release", "build/dev", "build/python")

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_loaded = None  # (CDLL, path)


class _Range(ctypes.Structure):  # somaMemRange
    _fields_ = [("address", ctypes.c_void_p), ("bytes", ctypes.c_size_t)]


class _Block(ctypes.Structure):  # somaMemBlockInfo
    _fields_ = [("address", ctypes.c_void_p), ("bytes", ctypes.c_size_t),
                ("requestedBytes", ctypes.c_size_t), ("state", ctypes.c_int),
                ("streamKnown", ctypes.c_int), ("stream", ctypes.c_void_p),
                ("position", ctypes.c_ulonglong), ("scope", ctypes.c_char_p)]


class PoolSnapshot(ctypes.Structure):  # somaMemPoolSnapshot
    _fields_ = [("pool", ctypes.c_void_p), ("device", ctypes.c_int), ("name", ctypes.c_char * 64),
                ("reservedBytes", ctypes.c_ulonglong), ("reservedHighBytes", ctypes.c_ulonglong),
                ("usedBytes", ctypes.c_ulonglong), ("usedHighBytes", ctypes.c_ulonglong),
                ("reservationCount", ctypes.c_size_t), ("reservations", ctypes.POINTER(_Range)),
                ("commitCount", ctypes.c_size_t), ("commits", ctypes.POINTER(_Range)),
                ("blockCount", ctypes.c_size_t), ("blocks", ctypes.POINTER(_Block))]


class Snapshot(ctypes.Structure):  # somaMemSnapshot
    _fields_ = [("poolCount", ctypes.c_size_t), ("pools", ctypes.POINTER(PoolSnapshot)),
                ("storage", ctypes.c_void_p)]


class MemLocation(ctypes.Structure):  # somaMemLocation
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class PoolProps(ctypes.Structure):  # somaMemPoolProps (the layout of cudaMemPoolProps)
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int),
                ("location", MemLocation), ("win32SecurityAttributes", ctypes.c_void_p),
                ("maxSize", ctypes.c_size_t), ("usage", ctypes.c_ushort),
                ("reserved", ctypes.c_ubyte * 54)]


class AccessDesc(ctypes.Structure):  # somaMemAccessDesc
    _fields_ = [("location", MemLocation), ("flags", ctypes.c_int)]


class PointerAttributes(ctypes.Structure):  # somaPointerAttributes
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p),
                ("pool", ctypes.c_void_p), ("base", ctypes.c_void_p), ("size", ctypes.c_size_t),
                ("isLiveAllocation", ctypes.c_int), ("location", MemLocation)]


class CpuBackendConfig(ctypes.Structure):  # somaCpuBackendConfig
    _fields_ = [("deviceCount", ctypes.c_int), ("deviceMemoryBytes", ctypes.c_size_t),
                ("granularityBytes", ctypes.c_size_t)]


HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_INT = ctypes.c_int
_SIZE = ctypes.c_size_t
_SIGNATURES = {
    # name: (argument types); every call returns somaError_t unless listed in _RESULTS
    "somaGetErrorName": [_INT],
    "somaGetErrorString": [_INT],
    "somaGetLastErrorMessage": [],
    "somaSetCpuBackendConfig": [ctypes.POINTER(CpuBackendConfig)],
    "somaGetBackendName": [ctypes.POINTER(ctypes.c_char_p)],
    "somaGetDeviceCount": [ctypes.POINTER(_INT)],
    "somaSetDevice": [_INT],
    "somaGetDevice": [ctypes.POINTER(_INT)],
    "somaDeviceGetAttribute": [ctypes.POINTER(_INT), _INT, _INT],
    "somaMemGetInfo": [ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE)],
    "somaDeviceSynchronize": [],
    "somaStreamCreateWithFlags": [_PP, ctypes.c_uint],
    "somaStreamDestroy": [_P],
    "somaStreamSynchronize": [_P],
    "somaStreamQuery": [_P],
    "somaStreamWaitEvent": [_P, _P, ctypes.c_uint],
    "somaStreamGetDevice": [_P, ctypes.POINTER(_INT)],
    "somaStreamCreateFromNative": [_PP, _P, _INT],
    "somaStreamCreateFromNativeWithFlags": [_PP, _P, _INT, ctypes.c_uint],
    "somaStreamGetNative": [_P, _PP],
    "somaEventCreateWithFlags": [_PP, ctypes.c_uint],
    "somaEventDestroy": [_P],
    "somaEventRecord": [_P, _P],
    "somaEventQuery": [_P],
    "somaEventSynchronize": [_P],
    "somaLaunchHostFunc": [_P, HOST_FN, _P],
    "somaMemsetAsync": [_P, _INT, _SIZE, _P],
    "somaMemcpyAsync": [_P, _P, _SIZE, _INT, _P],
    "somaMallocAsync": [_PP, _SIZE, _P],
    "somaMallocFromPoolAsync": [_PP, _SIZE, _P, _P],
    "somaFreeAsync": [_P, _P],
    "somaMemPoolCreate": [_PP, ctypes.POINTER(PoolProps)],
    "somaMemPoolDestroy": [_P],
    "somaDeviceGetDefaultMemPool": [_PP, _INT],
    "somaDeviceSetMemPool": [_INT, _P],
    "somaDeviceGetMemPool": [_PP, _INT],
    "somaMemGetDefaultMemPool": [_PP, ctypes.POINTER(MemLocation), _INT],
    "somaMemGetMemPool": [_PP, ctypes.POINTER(MemLocation), _INT],
    "somaMemSetMemPool": [ctypes.POINTER(MemLocation), _INT, _P],
    "somaMemPoolSetAttribute": [_P, _INT, _P],
    "somaMemPoolGetAttribute": [_P, _INT, _P],
    "somaMemPoolTrimTo": [_P, _SIZE],
    "somaMemPoolSetAccess": [_P, ctypes.POINTER(AccessDesc), _SIZE],
    "somaMemPoolGetAccess": [ctypes.POINTER(_INT), _P, ctypes.POINTER(MemLocation)],
    "somaMemPoolSetName": [_P, ctypes.c_char_p],
    "somaPointerGetAttributes": [ctypes.POINTER(PointerAttributes), _P],
    "somaMemPoolSnapshotTake": [_P, ctypes.POINTER(Snapshot)],
    "somaMemSnapshotFree": [ctypes.POINTER(Snapshot)],
}
_RESULTS = {
    "somaGetErrorName": ctypes.c_char_p,
    "somaGetErrorString": ctypes.c_char_p,
    "somaGetLastErrorMessage": ctypes.c_char_p,
}


def candidates(build_subdir=os.path.join("src", "capi"), name=SONAME):
    """Where the search looks for a library of the package: lib/ inside the package, then
    build_subdir of the build tree holding this copy of the package, then of the repository's
    build trees."""
    found = [os.path.join(_PACKAGE_DIR, "lib", name)]
    root = os.path.dirname(os.path.dirname(_PACKAGE_DIR))  # <root>/python/soma -> <root>
    if os.path.exists(os.path.join(root, "CMakeCache.txt")):
        found.append(os.path.join(root, build_subdir, name))
    build_dirs = list(BUILD_DIRS)
    if os.environ.get("SOMA_BUILD_DIR"):
        build_dirs.insert(0, os.environ["SOMA_BUILD_DIR"])
    for build_dir in build_dirs:
        found.append(os.path.join(root, build_dir, build_subdir, name))
    return found


def _open():
    explicit = os.environ.get("SOMA_LIBRARY")
    if explicit:
        return ctypes.CDLL(os.path.realpath(explicit)), os.path.realpath(explicit)
    try:  # loaded already (soma.torch's library brought it in): use that copy
        lib = ctypes.CDLL(SONAME, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
        return lib, _path_of(lib)
    except OSError:
        pass
    tried = candidates()
    for path in tried:
        if os.path.exists(path):
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), os.path.realpath(path)
    raise ImportError(
        f"soma: {SONAME} not found; install the package (pip install --no-build-isolation .), "
        f"build the target soma, or set SOMA_LIBRARY. Looked at: {', '.join(tried)}")


def _path_of(lib):
    """The file a loaded library came from, from /proc/self/maps (for library_path())."""
    address = ctypes.cast(lib.somaGetErrorName, ctypes.c_void_p).value
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(value, 16) for value in fields[0].split("-"))
            if start <= address < end and len(fields) >= 6:
                return fields[5]
    return SONAME


def declare(lib, signatures, results=None):
    """Sets argtypes from signatures (name: argument types) and restype from results (name:
    type; every other call returns an int status). Returns lib."""
    for name, arguments in signatures.items():
        function = getattr(lib, name)
        function.argtypes = arguments
        function.restype = (results or {}).get(name, ctypes.c_int)
    return lib


def get():
    """libsoma, loaded and declared once per process."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                lib, path = _open()
                _loaded = (declare(lib, _SIGNATURES, _RESULTS), path)
    return _loaded[0]


def path():
    """The path of the libsoma this process uses."""
    get()
    return _loaded[1]
