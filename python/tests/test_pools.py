"""Pools from Python: default, current and explicit pools (S3-S5), attributes and statistics
(S10, S11), the release threshold at synchronize points (S9), trim, snapshots and access (S6)."""

import pytest

import soma

MiB = 1 << 20


def test_default_and_current_pools_are_the_devices(stream):
    default = soma.Pool.default()
    assert soma.Pool.current() == default  # S3: the current pool starts as the default one
    buffer = soma.Buffer.allocate(MiB, stream)
    assert soma.pointer_attributes(buffer.ptr).pool == default
    buffer.free()


def test_an_explicit_pool_can_be_made_current(pool, stream):
    pool.make_current()
    try:
        pointer = soma.malloc_async(MiB, stream)  # S4: from the device's current pool
        assert soma.pointer_attributes(pointer).pool is pool
        soma.free_async(pointer, stream)
    finally:
        soma.Pool.default().make_current()


def test_attributes_round_trip():
    with soma.Pool(release_threshold=8 * MiB, reuse_allow_opportunistic=False,
                   remap_free_memory=soma.REMAP_BEFORE_GROWTH) as created:
        assert created.release_threshold == 8 * MiB
        assert created.reuse_allow_opportunistic is False
        assert created.reuse_follow_event_dependencies is True
        assert created.reuse_allow_internal_dependencies is True
        assert created.remap_free_memory == soma.REMAP_BEFORE_GROWTH
        created.compact_before_growth = True
        assert created.compact_before_growth is True
        created.release_threshold = soma.KEEP_EVERYTHING
        assert created.release_threshold == soma.KEEP_EVERYTHING


def test_statistics_count_used_and_reserved_memory(pool, stream):
    first = pool.allocate(3 * MiB, stream)
    second = pool.allocate(MiB, stream)
    figures = pool.statistics()
    assert figures["used_bytes"] >= 4 * MiB
    assert figures["reserved_bytes"] >= figures["used_bytes"]
    assert figures["used_high_bytes"] == figures["used_bytes"]
    first.free()
    second.free()
    assert pool.statistics()["used_bytes"] == 0
    assert pool.statistics()["used_high_bytes"] >= 4 * MiB
    pool.reset_peaks()
    assert pool.statistics()["used_high_bytes"] == 0


def test_release_threshold_decides_what_synchronize_gives_back(pool, stream):  # S9
    pool.release_threshold = soma.KEEP_EVERYTHING
    pool.allocate(8 * MiB, stream).free()
    stream.synchronize()
    assert pool.statistics()["reserved_bytes"] >= 8 * MiB
    pool.release_threshold = 0
    stream.synchronize()
    assert pool.statistics()["reserved_bytes"] == 0


def test_trim_gives_back_free_memory(pool, stream):
    pool.release_threshold = soma.KEEP_EVERYTHING
    pool.allocate(8 * MiB, stream).free()
    stream.synchronize()
    assert pool.statistics()["reserved_bytes"] >= 8 * MiB
    kept = pool.allocate(2 * MiB, stream)
    pool.trim_to(0)  # what a live allocation holds stays (cuda: its whole 32 MiB commit)
    assert pool.statistics()["used_bytes"] == 2 * MiB
    assert pool.statistics()["reserved_bytes"] >= 2 * MiB
    kept.free()
    stream.synchronize()
    pool.trim_to(0)
    assert pool.statistics()["reserved_bytes"] == 0


def test_snapshot_blocks_add_up_to_used_memory(pool, stream):
    buffers = [pool.allocate(size, stream) for size in (MiB, 3 * MiB, 4096)]
    buffers[1].free()
    taken = pool.snapshot()
    live = [block for block in taken["blocks"] if block["state"] == "live"]
    assert sum(block["bytes"] for block in live) == taken["used_bytes"]
    assert {block["address"] for block in live} == {buffers[0].ptr, buffers[2].ptr}
    assert taken["name"] == "pytest"
    reserved = sum(size for _, size in taken["reservations"])
    assert sum(block["bytes"] for block in taken["blocks"]) <= reserved
    for buffer in (buffers[0], buffers[2]):
        buffer.free()


def test_a_pool_grants_its_own_device_access(pool):  # S6
    assert pool.access(soma.get_device()) == soma.ACCESS_READ_WRITE
    with pytest.raises(soma.SomaError):
        pool.set_access(soma.device_count() + 3)
