"""The backend and its devices (S8)."""

import ctypes

from . import _library
from .errors import check

#: somaDeviceAttr values the package names
ATTRIBUTES = {
    "memory_pools_supported": 115,
    "memory_pool_supported_handle_types": 119,
    "host_numa_memory_pools_supported": 142,
    "host_memory_pools_supported": 144,
    "total_memory_mib": 20001,
    "allocation_granularity_kib": 20002,
}


def configure_cpu_backend(devices=0, memory_bytes=0, granularity_bytes=0):
    """The cpu backend's devices, memory per device and granularity; 0 keeps the default (or
    SOMA_CPU_*). Only before anything else starts soma in this process."""
    config = _library.CpuBackendConfig(int(devices), int(memory_bytes), int(granularity_bytes))
    check(_library.get().somaSetCpuBackendConfig(ctypes.byref(config)), "somaSetCpuBackendConfig")


def backend():
    """"cpu" or "cuda": the backend soma runs on in this process (SOMA_BACKEND picks one)."""
    name = ctypes.c_char_p()
    check(_library.get().somaGetBackendName(ctypes.byref(name)), "somaGetBackendName")
    return name.value.decode()


def device_count():
    count = ctypes.c_int()
    check(_library.get().somaGetDeviceCount(ctypes.byref(count)), "somaGetDeviceCount")
    return count.value


def get_device():
    """The calling thread's current device."""
    device = ctypes.c_int()
    check(_library.get().somaGetDevice(ctypes.byref(device)), "somaGetDevice")
    return device.value


def set_device(device):
    check(_library.get().somaSetDevice(int(device)), "somaSetDevice")


def synchronize():
    """Waits for every stream's work on the current device (somaDeviceSynchronize)."""
    check(_library.get().somaDeviceSynchronize(), "somaDeviceSynchronize")


def mem_get_info():
    """(free bytes, total bytes) of the current device."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(_library.get().somaMemGetInfo(ctypes.byref(free), ctypes.byref(total)), "somaMemGetInfo")
    return free.value, total.value


def device_attribute(name, device=None):
    """A device attribute by its name in ATTRIBUTES or its somaDeviceAttr number."""
    attribute = ATTRIBUTES.get(name, name)
    if not isinstance(attribute, int):
        raise ValueError(f"unknown device attribute {name!r}; known: {', '.join(ATTRIBUTES)}")
    value = ctypes.c_int()
    check(_library.get().somaDeviceGetAttribute(
        ctypes.byref(value), attribute, get_device() if device is None else int(device)),
        "somaDeviceGetAttribute")
    return value.value
