"""soma as CuPy's allocator (docs/cupy.md): the same values as CuPy's own allocator for array
arithmetic, reductions and FFT, soma's used memory back to 0, the scoped form, and frees in the
order of CuPy's current stream (S2). Needs CuPy and the cuda backend; SKIPPED otherwise."""

import gc

import pytest

import soma

from conftest import on_cuda

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.skipif(not on_cuda(), reason="soma runs on the cpu backend here")

import soma.cupy  # noqa: E402  (after the skip: it needs CuPy)


def workload(seed):
    """Array arithmetic, reductions and an FFT; returns the results on the host."""
    generator = cupy.random.default_rng(seed)
    a = generator.standard_normal((512, 1024), dtype=cupy.float32)
    b = generator.standard_normal((1024, 256), dtype=cupy.float32)
    product = a @ b
    scaled = cupy.tanh(product * 0.5) + cupy.sqrt(cupy.abs(product))
    results = {
        "sum": float(scaled.sum()),
        "max": float(scaled.max(axis=1).mean()),
        "std": float(cupy.std(product, axis=0).sum()),
        "argmax": int(cupy.argmax(scaled)),
        "fft": cupy.asnumpy(cupy.abs(cupy.fft.rfft(a, axis=1))[:4, :16]),
        "cumsum": cupy.asnumpy(cupy.cumsum(a[0])),
    }
    cupy.cuda.get_current_stream().synchronize()
    return results


def assert_same(left, right):
    import numpy
    for key in left:
        numpy.testing.assert_allclose(left[key], right[key], rtol=1e-5, atol=1e-5, err_msg=key)


def used_bytes():
    gc.collect()
    soma.synchronize()
    return soma.Pool.current().statistics()["used_bytes"]


def test_enable_gives_the_values_of_cupys_own_allocator_and_frees_everything():
    expected = workload(7)
    before = used_bytes()
    soma.cupy.enable()
    try:
        got = workload(7)
        assert soma.Pool.current().statistics()["used_high_bytes"] > 0
        x = cupy.arange(1 << 20, dtype=cupy.int64)
        attributes = soma.pointer_attributes(x.data.ptr)
        assert attributes.is_live_allocation and attributes.pool == soma.Pool.current()
        del x
    finally:
        soma.cupy.disable()
    assert_same(expected, got)
    assert used_bytes() == before


def test_using_sends_one_region_to_a_chosen_pool():
    with soma.Pool(name="cupy-region") as region:
        with soma.cupy.using(region):
            inside = cupy.ones((1024, 1024), dtype=cupy.float32)
            total = float((inside * 2).sum())
        outside = cupy.ones(1024)
        assert soma.pointer_attributes(inside.data.ptr).pool is region
        assert not soma.pointer_attributes(outside.data.ptr).is_live_allocation
        assert total == 2 * 1024 * 1024
        assert region.statistics()["used_bytes"] >= 4 << 20
        del inside
        gc.collect()
        soma.synchronize()
        assert region.statistics()["used_bytes"] == 0


SPIN = r"""
extern "C" __global__ void spin(long long cycles, int* out) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
  if (out) *out = 1;
}
"""


def test_a_free_waits_for_the_current_stream_of_cupy():
    spin = cupy.RawKernel(SPIN, "spin")
    with soma.Pool(name="cupy-order") as region:
        busy = cupy.cuda.Stream(non_blocking=True)
        with soma.cupy.using(region):
            with busy:
                block = cupy.zeros(1 << 20, dtype=cupy.uint8)
                address = block.data.ptr
                spin((1,), (1,), (cupy.int64(2_000_000_000), cupy.intp(0)))  # about a second
                assert cupy.cuda.runtime.streamQuery(busy.ptr) != 0, "the kernel is not running"
                del block  # freed on `busy`, whose kernel still runs
                gc.collect()
            states = {b["address"]: b["state"] for b in region.snapshot()["blocks"]}
            assert states[address] == "free_pending"
            with busy:
                again = cupy.empty(1 << 20, dtype=cupy.uint8)
                assert again.data.ptr == address  # S2: the freeing stream reuses it at once
            del again
            gc.collect()
        busy.synchronize()
        del busy
        gc.collect()  # CuPy destroys the stream; soma forgets its adopted one
        soma.synchronize()
        assert region.statistics()["used_bytes"] == 0
