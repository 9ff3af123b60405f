"""Streams, events, host functions and Buffers from Python: stream order (S1, S2, S12),
events across streams, pointer attributes (S14), adopting native streams."""

import gc
import os
import threading
import time

import pytest

import soma

from conftest import on_cuda, run_python

MiB = 1 << 20


def read_back(buffer, stream):
    """The buffer's bytes once stream's work so far has run (works on both backends)."""
    copy = bytearray(buffer.size)
    stream.memcpy_async(copy, buffer, buffer.size)
    stream.synchronize()
    return bytes(copy)


def test_work_on_a_stream_runs_in_order(pool, stream):  # S1, S12
    buffer = pool.allocate(4096, stream)
    stream.memset_async(buffer, 1, 4096)
    source = bytearray(b"soma" * 1024)
    stream.memcpy_async(buffer, source, 4096)
    assert read_back(buffer, stream) == bytes(source)
    buffer.free()


def test_a_freed_buffer_is_reused_by_its_stream_at_once(pool, stream):  # S2
    first = pool.allocate(MiB, stream)
    address = first.ptr
    first.free()
    second = pool.allocate(MiB, stream)
    assert second.ptr == address
    assert pool.statistics()["reserved_bytes"] == pool.snapshot()["reserved_bytes"]
    second.free()


def test_host_functions_run_after_the_streams_earlier_work(stream):
    gate = threading.Event()
    order = []
    stream.launch(lambda: (gate.wait(5), order.append("first")))
    stream.launch(lambda: order.append("second"))
    time.sleep(0.05)
    assert order == [] and not stream.query()
    gate.set()
    stream.synchronize()
    assert order == ["first", "second"] and stream.query()


def test_an_event_orders_another_stream(stream):
    gate = threading.Event()
    seen = []
    stream.launch(lambda: (gate.wait(5), seen.append("producer")))
    ready = stream.record_event()
    assert not ready.query()
    with soma.Stream(non_blocking=True) as consumer:
        consumer.wait_event(ready)
        consumer.launch(lambda: seen.append("consumer"))
        gate.set()
        consumer.synchronize()
    assert seen == ["producer", "consumer"] and ready.query()
    ready.close()


def test_a_buffer_frees_itself_when_collected_and_at_the_end_of_a_with_block(pool, stream):
    with pool.allocate(MiB, stream) as buffer:
        assert pool.statistics()["used_bytes"] == MiB
    assert buffer.freed and pool.statistics()["used_bytes"] == 0
    buffer = pool.allocate(MiB, stream)
    del buffer
    gc.collect()
    assert pool.statistics()["used_bytes"] == 0


def test_a_buffer_can_be_freed_on_another_stream(pool, stream):
    buffer = pool.allocate(MiB, stream)
    with soma.Stream() as other:
        buffer.free(other)
        other.synchronize()
    assert pool.statistics()["used_bytes"] == 0


def test_pointer_attributes_name_the_allocation(pool, stream):  # S14
    buffer = pool.allocate(3 * 4096, stream)
    inside = soma.pointer_attributes(buffer.ptr + 5000)
    assert inside.memory_type == "device" and inside.is_live_allocation
    assert inside.base == buffer.ptr and inside.size == 3 * 4096
    assert inside.pool is pool and inside.device == soma.get_device()
    outside = soma.pointer_attributes(bytearray(16))
    assert outside.memory_type == "unregistered" and not outside.is_live_allocation
    assert outside.pool is None
    buffer.free()
    assert not soma.pointer_attributes(buffer.ptr).is_live_allocation


def test_a_zero_byte_allocation_is_null_and_frees(pool, stream):
    empty = pool.allocate(0, stream)
    assert empty.ptr == 0
    empty.free()


def test_host_view_on_the_cpu_backend_and_cuda_array_interface_on_cuda(pool, stream):
    buffer = pool.allocate(4096, stream)
    stream.memset_async(buffer, 7, 4096)
    stream.synchronize()
    if on_cuda():
        interface = buffer.__cuda_array_interface__
        assert interface["data"] == (buffer.ptr, False) and interface["shape"] == (4096,)
        with pytest.raises(soma.InvalidValueError, match="copy it"):
            buffer.host_view()
    else:
        view = buffer.host_view()
        assert view[0] == 7 and view[4095] == 7 and len(view) == 4096
        assert not hasattr(buffer, "__cuda_array_interface__")
    buffer.free()


def test_native_streams(stream):
    if on_cuda():
        native = stream.native
        assert native
        with soma.Stream.from_native(native) as adopted:
            assert adopted.native == native
            assert adopted != stream
        with soma.Stream.from_native(native, may_end_first=True) as adopted:
            soma.Buffer.allocate(4096, stream=adopted).free()
            assert adopted.native == native
    else:
        assert stream.native is None
        with pytest.raises(soma.NotSupportedError, match="no native streams"):
            soma.Stream.from_native(0x1234)
        with pytest.raises(soma.NotSupportedError, match="no native streams"):
            soma.Stream.from_native(0x1234, may_end_first=True)


def test_the_cpu_backend_is_configured_before_it_starts():
    result = run_python(
        "import soma\n"
        "soma.configure_cpu_backend(devices=3, memory_bytes=256 << 20)\n"
        "print(soma.backend(), soma.device_count(), soma.mem_get_info()[1])\n"
        "try:\n"
        "    soma.configure_cpu_backend(devices=1)\n"
        "except soma.SomaError as error:\n"
        "    print(error.name)\n",
        env={"SOMA_BACKEND": "cpu"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cpu", "3", str(256 << 20), "somaErrorNotPermitted"]


def test_the_old_soma_torch_import_is_soma_torch():
    here = os.path.dirname(os.path.abspath(__file__))
    integration = os.path.join(os.path.dirname(os.path.dirname(here)), "integrations", "torch")
    result = run_python(
        f"import sys; sys.path.insert(0, {integration!r})\n"
        "import soma_torch, soma.torch\n"
        "print(soma_torch is soma.torch, sorted(set(soma.torch.__all__) - set(dir(soma_torch))))\n"
        "print(soma.torch.library_path().endswith('libsoma_torch.so'))\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["True []", "True"]
