"""Every public entry checks its arguments where they enter: a value out of its domain (an empty
name, a null address, a zero or overflowing length, a range that wraps, an unknown option) raises
InvalidArgument (code -4010, a ValueError) naming the argument, before anything is changed, and
not a later, misleading error (SegmentNotFound for an empty segment name, OutOfBounds for a range
that wraps, a request accepted at address 0). Where a lower layer already answers with its own
invalid-argument error (the store's InvalidParams for an empty key, the engine's
EngineInvalidArgument for a batch of capacity 0), that answer stands."""

from __future__ import annotations

import pytest

import yuebing

END = 2**64 - 2


def invalid(what: str):
    """pytest.raises for InvalidArgument whose message names `what` (a regular expression)."""
    return pytest.raises(yuebing.InvalidArgument, match=what)


@pytest.fixture(scope="module")
def engine():
    return yuebing.Engine()


def test_engine_arguments(engine):
    own = engine.open_segment(engine.name)
    buf = engine.allocate(4096)
    with invalid("name is empty"):
        engine.open_segment("")
    with invalid("name is empty"):
        engine.open_segment("  ")
    with invalid("buffer is the null address"):
        engine.unregister(0)
    with invalid("buffer is the null address"):
        engine.register(0, 16)
    with invalid("buffer: size 0"):
        engine.register(buf.addr, 0)
    with invalid("buffer is empty"):
        engine.register(bytearray())
    with invalid("remote"):
        engine.register(bytearray(16), remote="x")
    with invalid("size 0"):
        engine.allocate(0)
    with invalid("remote"):
        engine.allocate(16, remote="rwx")
    with invalid("transport"):
        yuebing.Engine(transport="carrier-pigeon")
    with invalid("timeout"):
        yuebing.Engine(timeout=0)
    # A transfer's remote range.
    with invalid("remote_addr is the null address"):
        engine.write(buf, own, 0, 4)
    with invalid("remote_addr: .* overflows"):
        engine.read(buf, own, END, 4)
    with invalid("timeout"):
        engine.write(buf, own, buf.addr, 4, timeout=-1)
    # A batch's requests, each named; none starts.
    batch = engine.allocate_batch(4)
    ok = ("write", buf.addr, own, buf.addr + 2048, 16)
    for bad, what in [
        (("write", buf.addr, own, 0, 4), r"requests\[1\]: remote_addr is the null address"),
        (("write", 0, own, buf.addr, 4), r"requests\[1\]: local_addr is the null address"),
        (("read", buf.addr, own, buf.addr + 8, 0), r"requests\[1\]: .*length 0"),
        (("write", buf.addr, own, END, 4), r"requests\[1\]: remote_addr: .* overflows"),
        (("read", END, own, buf.addr, 4), r"requests\[1\]: local_addr: .* overflows"),
        (("copy", buf.addr, own, buf.addr + 8, 4), r"requests\[1\]: opcode"),
    ]:
        with invalid(what):
            engine.submit(batch, [ok, bad])
    with invalid("timeout"):
        engine.submit(batch, [ok], timeout=0)
    assert engine.status(batch).tasks == 0
    # The engine's own answer stands where it is one already.
    with pytest.raises(yuebing.EngineInvalidArgument, match="capacity 0"):
        engine.allocate_batch(0)
    # Buffer.read and write.
    with invalid("do not fit"):
        buf.read(0, 4097)
    with invalid("do not fit"):
        buf.write(b"x", 4096)
    assert issubclass(yuebing.InvalidArgument, ValueError) and yuebing.InvalidArgument.code == -4010


def test_store_arguments(cluster, store, key):
    with invalid("masters: no master address given"):
        yuebing.Store("")
    with invalid("masters: no master address given"):
        yuebing.Store([])
    with invalid("store_size"):
        yuebing.Store(cluster.address, store_size=-1)
    with invalid("store_size"):
        yuebing.Store(cluster.address, store_size="lots")
    # Sizes are parsed as everywhere in yuebing (yuebing_rpc::Size): 2**64 bytes is out of
    # range, a doubled suffix no unit, a fraction no size.
    with invalid("staging_size.*out of range"):
        yuebing.Store(cluster.address, staging_size="16777216T")
    with invalid("staging_size.*unknown unit"):
        yuebing.Store(cluster.address, staging_size="4KBB")
    with invalid("store_size.*is not a size"):
        yuebing.Store(cluster.address, store_size="1.5M")
    with invalid("timeout"):
        yuebing.Store(cluster.address, timeout=0)
    with invalid("replicas"):
        yuebing.Store(cluster.address, replicas=0)
    with invalid("transport"):
        yuebing.Store(cluster.address, transport="carrier-pigeon")
    with invalid("engine's settings"):
        yuebing.Store(cluster.address, engine=yuebing.Engine(), bind="127.0.0.1:1")
    with invalid(r"preferred\[1\] is empty"):
        store.put(key, b"x", preferred=[store.segment_name, ""])
    with invalid("replicas"):
        store.put(key, b"x", replicas=0)
    with invalid("timeout"):
        store.get(key, timeout=float("nan"))
    with invalid("buffer is the null address"):
        store.get_into(key, 0, 16)
    with invalid("buffer: .* overflows"):
        store.put_from(key, END, 16)
    with invalid("size 17 is larger than buffer"):
        store.put_from(key, bytearray(16), 17)
    with invalid("keys but 1 values"):
        store.batch_put([key, f"{key}/2"], [b"x"])
    with invalid(r"buffers\[1\] is empty"):
        store.batch_get_into([key, f"{key}/2"], [bytearray(4), bytearray()])
    with invalid("buffer is the null address"):
        store.unregister_buffer(0)
    assert not store.exist(key)
    # The store's own answer for an empty key stands (Mooncake's INVALID_PARAMS, -600).
    with pytest.raises(yuebing.InvalidParams, match="key"):
        store.put("", b"x")
