"""Pools of host memory from Python (S5): created at Location.host() or host_numa(node), the
host's at once, a device's once granted, stream-ordered and released as device pools are;
location-keyed default and current pools; the read-only attributes."""

import pytest

import soma

MiB = 1 << 20

pytestmark = pytest.mark.skipif(not soma.device_attribute("host_memory_pools_supported"),
                                reason="the driver has no host memory pools here")


def test_host_pool_memory_is_the_hosts_at_once(stream):
    with soma.Pool(location=soma.Location.host(), name="host") as pool:
        assert pool.location == soma.Location.host()
        buffer = pool.allocate(MiB, stream)
        stream.synchronize()
        view = buffer.host_view()  # no copy, on every backend
        view[0], view[-1] = 7, 9
        attributes = soma.pointer_attributes(buffer.ptr + 10)
        assert attributes.memory_type == "host" and attributes.device == -1
        assert attributes.pool is pool and attributes.location == soma.Location.host()
        buffer.free()
        stream.synchronize()
        assert pool.statistics()["used_bytes"] == 0


def test_a_device_reaches_it_only_once_granted(stream):
    with soma.Pool(location=soma.Location.host_numa(0)) as pool:
        buffer = pool.allocate(4096, stream)
        assert pool.access(0) == soma.ACCESS_NONE
        with pytest.raises(soma.SomaError) as caught:
            stream.memset_async(buffer, 1, 4096)
        assert caught.value.name == "somaErrorNotPermitted"
        pool.set_access(0, soma.ACCESS_READ_WRITE)
        stream.memset_async(buffer, 0x42, 4096)
        stream.synchronize()
        assert bytes(buffer.host_view()[:4]) == b"\x42" * 4
        assert soma.pointer_attributes(buffer.ptr).location == soma.Location.host_numa(0)
        buffer.free()
        stream.synchronize()


def test_released_at_the_threshold(stream):
    with soma.Pool(location=soma.Location.host()) as pool:
        pool.allocate(4 * MiB, stream).free()
        stream.synchronize()
        assert pool.statistics()["reserved_bytes"] == 0  # threshold 0 (S9)
        pool.release_threshold = soma.KEEP_EVERYTHING
        pool.allocate(4 * MiB, stream).free()
        stream.synchronize()
        assert pool.statistics()["reserved_bytes"] >= 4 * MiB


def test_location_keyed_default_and_current_pools():
    host = soma.Location.host()
    default = soma.Pool.default(location=host)
    assert soma.Pool.default(location=host) == default
    assert soma.Pool.current(location=host) == default
    with soma.Pool(location=host) as mine:
        mine.make_current(location=host)
        assert soma.Pool.current(location=host) == mine
        with pytest.raises(soma.InvalidValueError, match="is not a pool of"):
            mine.make_current(device=0)
    assert soma.Pool.current(location=host) == default  # destroying it restored the default
    assert soma.Pool.default(location=soma.Location.device(0)) == soma.Pool.default(0)


def test_bad_locations_are_refused():
    with pytest.raises(soma.InvalidValueError, match="NUMA node"):
        soma.Pool(location=soma.Location.host_numa(4096))
    with pytest.raises(soma.InvalidValueError, match="exportable"):
        soma.Pool(location=soma.Location.host(), exportable=True)
    with pytest.raises(ValueError, match="unknown location kind"):
        soma.Pool(location=soma.Location("moon"))
    with pytest.raises(ValueError, match="not both"):
        soma.Pool(0, location=soma.Location.host())


def test_read_only_attributes_say_what_the_pool_was_created_with():
    with soma.Pool(max_size=64 * MiB) as pool:
        assert pool.get_attribute("allocation_type") == 1
        assert pool.get_attribute("export_handle_types") == 0
        assert pool.location == soma.Location.device(soma.get_device())
        assert pool.get_attribute("max_pool_size") >= 64 * MiB
        with pytest.raises(soma.InvalidValueError, match="read-only"):
            pool.set_attribute("location_type", 2)
