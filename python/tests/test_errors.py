"""Every bad input raises soma's code and message as a Python exception and leaves the pool as
it was (docs/api-behaviour.md; S1, S2, S5, S10)."""

import pytest

import soma


def test_error_carries_code_name_call_and_message(pool, stream):
    with pytest.raises(soma.OutOfMemoryError) as caught:
        pool.allocate(1 << 30, stream)  # S5: above the pool's max size
    error = caught.value
    assert error.code == 2
    assert error.name == "somaErrorMemoryAllocation"
    assert error.call == "somaMallocFromPoolAsync"
    assert "pool 'pytest'" in error.message and "max size 64.0 MiB" in error.message
    assert isinstance(error, MemoryError) and isinstance(error, soma.SomaError)
    assert pool.statistics()["used_bytes"] == 0


def test_free_of_an_unknown_pointer_is_invalid_value_and_leaves_the_pool(pool, stream):
    kept = pool.allocate(4096, stream)
    before = pool.statistics()
    with pytest.raises(soma.InvalidValueError) as caught:
        soma.free_async(kept.ptr + 4096 * 1024, stream)
    assert caught.value.code == 1 and "not a live allocation" in caught.value.message
    assert isinstance(caught.value, ValueError)
    assert pool.statistics() == before
    kept.free()


def test_double_free_of_a_buffer_is_refused_before_soma_sees_it(pool, stream):
    buffer = pool.allocate(4096, stream)
    buffer.free()
    again = pool.allocate(4096, stream)  # may be the same address (S2: same stream, at once)
    with pytest.raises(soma.InvalidValueError, match="freed already"):
        buffer.free()
    assert soma.pointer_attributes(again.ptr).is_live_allocation
    again.free()


def test_negative_size_is_invalid_value(pool, stream):
    with pytest.raises(soma.InvalidValueError, match="negative"):
        pool.allocate(-1, stream)


def test_attribute_values_outside_their_type_are_refused(pool):
    with pytest.raises(soma.InvalidValueError, match="outside"):
        pool.release_threshold = -1
    with pytest.raises(soma.InvalidValueError, match="outside"):
        pool.reuse_allow_opportunistic = 1 << 40
    with pytest.raises(ValueError, match="unknown pool attribute"):
        pool.get_attribute("threshold")
    with pytest.raises(soma.InvalidValueError):  # soma's own check: read-only statistic
        pool.set_attribute("used_bytes", 5)
    assert pool.release_threshold == 0


def test_a_destroyed_pool_or_stream_is_an_invalid_resource_handle(stream):
    created = soma.Pool()
    created.destroy()
    with pytest.raises(soma.InvalidResourceHandleError, match="not a live pool"):
        created.allocate(16, stream)
    with pytest.raises(soma.InvalidResourceHandleError):
        created.destroy()
    closed = soma.Stream()
    closed.close()
    with pytest.raises(soma.InvalidResourceHandleError, match="not a live stream"):
        closed.synchronize()


def test_the_default_pool_cannot_be_destroyed():
    default = soma.Pool.default()
    with pytest.raises(soma.InvalidValueError, match="default pool"):
        default.destroy()
    assert soma.Pool.default() == default


def test_adopting_the_per_thread_stream_is_refused():
    with pytest.raises(soma.InvalidValueError, match="cudaStreamPerThread"):
        soma.Stream.from_native(2)


def test_unknown_device_attribute_and_bad_device():
    with pytest.raises(ValueError, match="unknown device attribute"):
        soma.device_attribute("colour")
    with pytest.raises(soma.SomaError) as caught:
        soma.device_attribute("total_memory_mib", device=soma.device_count() + 5)
    assert caught.value.name == "somaErrorInvalidDevice"


def test_wrong_argument_types_are_type_errors(pool):
    with pytest.raises(TypeError):
        pool.allocate(16, stream="not a stream")
    with pytest.raises(TypeError):
        soma.free_async("0x10")
