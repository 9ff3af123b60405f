#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (corpus/<target>/): a few short programs in the
record format of op_decoder.hpp, each reaching a part of the API that random bytes find late.
Deterministic; run it again after changing op_decoder.hpp, whose op_code order OPS mirrors."""
import pathlib
import struct

OPS = """stream_create stream_destroy stream_synchronize stream_query event_create event_record
stream_wait_event event_query event_synchronize event_destroy malloc_async malloc_from_pool
free_same_stream free_other_stream memset copy check_in_stream pool_create pool_destroy
set_reuse_policy set_release_threshold set_compaction trim_to reset_high set_current_pool
set_access device_synchronize synchronize_all pointer_attributes bad_call record_history
scope_push scope_pop export_history""".split()


def size(size_class, value):
    """The two size bytes: class in the top three bits (decode_size), value below."""
    return (size_class << 13) | (value & 0x1FFF)


def op(name, a=0, b=0, c=0, raw=0):
    return struct.pack("<BBBBH", OPS.index(name), a, b, c, raw)


def thread_op(code, a=0, b=0, c=0, raw=0):
    """threads_fuzz takes the code modulo its own 21 operations (thread_worker.cpp)."""
    return struct.pack("<BBBBH", code, a, b, c, raw)


API_OPS = {
    "basic": [op("malloc_async", 0, 0, 0x5A, size(2, 1000)), op("check_in_stream"),
              op("stream_synchronize"), op("pointer_attributes", raw=7),
              op("free_same_stream"), op("synchronize_all")],
    "streams_events": [op("stream_create", 0, 0, 1), op("stream_create", 1, 0),
                       op("event_create"), op("malloc_async", 2, 0, 0x11, size(3, 500)),
                       op("event_record", 0, 2), op("stream_wait_event", 0, 3),
                       op("check_in_stream", 0, 3, 1), op("free_other_stream", 0, 3),
                       op("malloc_async", 3, 0, 0x22, size(3, 500)), op("event_query"),
                       op("stream_destroy", 0), op("event_synchronize"),
                       op("free_same_stream"), op("event_destroy"), op("synchronize_all")],
    "pool_limits": [op("pool_create", 0, 0, 2, 3), op("malloc_from_pool", 0, 2, 1, size(4, 4000)),
                    op("malloc_from_pool", 0, 2, 2, size(7, 100)),
                    op("set_release_threshold", 2, 0, 0, size(5, 3)), op("trim_to", 2, 0, 0, 0),
                    op("set_current_pool", 2, 0), op("malloc_async", 0, 0, 3, size(5, 7)),
                    op("reset_high", 2, 1), op("pool_destroy", 0), op("free_same_stream"),
                    op("synchronize_all"), op("trim_to", 0, 0, 1, 0)],
    "reuse_policies": [op("stream_create", 0), op("stream_create", 1),
                       op("set_reuse_policy", 0, 0, 0), op("set_reuse_policy", 0, 1, 0),
                       op("set_reuse_policy", 0, 2, 1), op("pool_create", 0, 0, 0, 4),
                       op("malloc_from_pool", 2, 2, 0x33, size(5, 20)),
                       op("free_other_stream", 0, 3), op("malloc_from_pool", 2, 2, 0x44, size(5, 20)),
                       op("malloc_from_pool", 3, 2, 0x55, size(5, 40)), op("stream_query", 3),
                       op("set_compaction", 2, 0, 1), op("malloc_from_pool", 2, 2, 1, size(5, 60)),
                       op("device_synchronize"), op("set_reuse_policy", 0, 1, 1)],
    "cross_device": [op("pool_create", 1, 1), op("malloc_from_pool", 0, 2, 0x66, size(4, 100)),
                     op("set_access", 2, 0, 2), op("memset", 0, 0, 0x77, 1 | (5 << 1)),
                     op("malloc_async", 1, 0, 0x88, size(2, 300)), op("copy", 1, 0),
                     op("set_access", 2, 0, 0), op("copy", 0, 1, 1), op("stream_synchronize", 1),
                     op("synchronize_all"), op("pool_destroy", 1)],
    # An exportable pool releases whole commits: one stays over a small threshold (S7, S9).
    "exportable_threshold": [op("pool_create", 0, 0, 3, 3),
                             op("malloc_from_pool", 0, 2, 1, size(4, 4000)),
                             op("set_release_threshold", 2, 0, 0, 3), op("free_same_stream"),
                             op("synchronize_all"), op("trim_to", 2, 0, 1, 0)],
    "bad_calls": [op("malloc_async", 0, 0, 9, size(1, 100)), op("stream_create"),
                  op("stream_destroy"), op("event_create"), op("event_destroy"),
                  op("pool_create", 0, 0, 0, 1), op("pool_destroy"), op("free_same_stream"),
                  op("malloc_async", 0, 0, 8, size(2, 2000))]
                 + [op("bad_call", kind, 0, 1, 3) for kind in range(16)],
    "history": [op("scope_pop"), op("record_history", 1, 0, 0, 40), op("scope_push", 0),
                op("malloc_async", 0, 0, 0x5A, size(2, 1000)), op("free_same_stream"),
                op("malloc_async", 0, 0, 0x5A, size(2, 1000)), op("scope_push", 1),
                op("pool_create", 0, 0, 0, 2), op("malloc_from_pool", 0, 2, 1, size(5, 3)),
                op("export_history"), op("scope_pop"), op("free_same_stream"),
                op("free_same_stream"), op("pool_destroy", 0), op("synchronize_all"),
                op("record_history", 0), op("export_history"), op("scope_pop"), op("scope_pop")],
}

THREADS = {
    "shared_pools": bytes([0x12]) + b"".join(
        thread_op(code, a, b, c, raw) for code, a, b, c, raw in [
            (1, 0, 2, 0x10, size(3, 200)), (1, 1, 3, 0x20, size(4, 300)), (0, 2, 0, 0x30, size(2, 50)),
            (8, 0, 2, 0, 0), (9, 0, 3, 0, 0), (17, 2, 0, 0, 0),
            (14, 0, 1, 0, 0), (15, 3, 1, 0, 0), (12, 3, 0, 1, size(5, 2)),
            (4, 0, 1, 0x40, 3), (5, 0, 0, 0, 0), (6, 2, 0, 0, 0),
            (13, 2, 0, 0, 0), (7, 2, 1, 1, 0), (10, 1, 0, 1, 0),
            (2, 0, 0, 0, 0), (3, 0, 1, 0, 0), (18, 0, 0, 0, 0)]),
    "churn": bytes([0x05]) + b"".join(
        thread_op(code, a, b, c, raw) for code, a, b, c, raw in [
            (0, 2, 0, 1, size(5, 10)), (0, 3, 0, 2, size(5, 12)), (0, 0, 0, 3, size(5, 14)),
            (14, 1, 0, 0, 0), (11, 0, 0, 1, 0), (14, 2, 1, 2, 0),
            (1, 2, 3, 4, size(6, 900)), (1, 3, 4, 5, size(6, 1900)), (1, 1, 2, 6, size(7, 10)),
            (16, 0, 0, 0, 77), (16, 0, 0, 0, 99), (17, 3, 0, 0, 0)]),
    "history": bytes([0x12]) + b"".join(
        thread_op(code, a, b, c, raw) for code, a, b, c, raw in [
            (19, 0, 1, 0, 30), (20, 0, 0, 0, 0), (20, 1, 0, 0, 0),
            (0, 0, 0, 0x10, size(2, 100)), (1, 1, 3, 0x20, size(4, 300)), (0, 2, 0, 0x30, size(2, 50)),
            (2, 0, 0, 0, 0), (14, 0, 1, 0, 0), (19, 0, 2, 0, 0),
            (20, 0, 1, 0, 0), (3, 0, 1, 0, 0), (19, 0, 1, 0, 5),
            (20, 0, 1, 0, 0), (20, 0, 1, 0, 0), (19, 0, 2, 0, 0),
            (1, 0, 2, 1, size(3, 100)), (19, 0, 0, 0, 0), (18, 0, 0, 0, 0)]),
}


def write(target, programs):
    folder = pathlib.Path(__file__).resolve().parent / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    for name, program in programs.items():
        data = program if isinstance(program, bytes) else b"".join(program)
        (folder / f"{name}.bin").write_bytes(data)


write("api_ops_fuzz", API_OPS)
write("threads_fuzz", THREADS)
