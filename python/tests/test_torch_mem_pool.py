"""soma for one region of a PyTorch program (docs/torch.md, "One region"): soma.torch.mem_pool()
is a torch.cuda.MemPool whose segments soma serves while the rest of the process keeps
PyTorch's allocator. Checks the values, which allocator served what, and what PyTorch does with
the blocks: its statistics, empty_cache, record_stream. Needs PyTorch with a GPU and the cuda
backend; SKIPPED otherwise. With SOMA_TEST_OUT set, what PyTorch did is written there as JSON."""

import gc
import json
import os

import pytest

import soma

from conftest import on_cuda

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not (on_cuda() and torch.cuda.is_available()),
                                reason="needs PyTorch with a GPU and soma's cuda backend")

import soma.torch  # noqa: E402

MiB = 1 << 20


def use_mem_pool(pool):
    use = getattr(torch.cuda, "use_mem_pool", None) or torch.cuda.memory.use_mem_pool
    return use(pool)


def soma_used():
    return soma.torch.stats(0)["used_bytes"]


def test_a_mem_pool_region_is_served_by_soma_and_the_rest_by_pytorch():
    observed = {"torch": torch.__version__}
    # cuBLAS takes its workspace from the allocator current at the first matrix product on a
    # stream: outside the region, so that the pool holds tensors only.
    warm = torch.ones(64, 64, device="cuda")
    (warm @ warm).sum().item()
    pool = soma.torch.mem_pool()
    with use_mem_pool(pool):
        a = torch.randn(1024, 1024, device="cuda")
        b = a @ a
    outside = torch.randn(1024, 1024, device="cuda")
    assert soma.pointer_attributes(a.data_ptr()).is_live_allocation
    assert soma.pointer_attributes(b.data_ptr()).is_live_allocation
    assert not soma.pointer_attributes(outside.data_ptr()).is_live_allocation
    torch.testing.assert_close(b.cpu(), a.cpu() @ a.cpu(), rtol=1e-3, atol=1e-3)
    observed["soma_used_after_two_tensors"] = soma_used()
    assert soma_used() >= 8 * MiB  # PyTorch asked soma for whole segments

    # PyTorch's statistics count the region's segments as its own reserved memory.
    stats = torch.cuda.memory_stats()
    observed["torch_reserved"] = stats["reserved_bytes.all.current"]
    observed["torch_allocated"] = stats["allocated_bytes.all.current"]
    assert stats["reserved_bytes.all.current"] >= soma_used()

    # record_stream: PyTorch delays reusing the block until the other stream's work is done;
    # soma sees nothing of it (the segment stays allocated).
    side = torch.cuda.Stream()
    with use_mem_pool(pool):
        c = torch.ones(4 * MiB, device="cuda")
    with torch.cuda.stream(side):
        total = c.sum()
    c.record_stream(side)
    used_before_del = soma_used()
    del c
    assert soma_used() == used_before_del
    side.synchronize()
    assert float(total) == 4 * MiB

    # empty_cache while the pool lives, then after the pool and its tensors are gone.
    del a, b
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    observed["soma_used_after_empty_cache_pool_alive"] = soma_used()
    del pool
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    observed["soma_used_after_pool_deleted_and_empty_cache"] = soma_used()
    if os.environ.get("SOMA_TEST_OUT"):
        with open(os.path.join(os.environ["SOMA_TEST_OUT"], "torch-mem-pool.json"), "w",
                  encoding="utf-8") as f:
            json.dump(observed, f, indent=1)
    assert soma_used() == 0
    assert soma.torch.stats(0)["failed_frees"] == 0
    del outside


def test_enable_after_mem_pool_is_refused():
    soma.torch.mem_pool()
    with pytest.raises(RuntimeError, match="after mem_pool"):
        soma.torch.enable()
