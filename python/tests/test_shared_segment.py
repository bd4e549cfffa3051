"""``mooncake.engine.SharedSegment``: one rank allocates, every rank of the group maps the same
bytes after the two phases (create, exchange of blobs, complete), in processes of their own."""

from __future__ import annotations

import ctypes
import multiprocessing as mp

import pytest

from mooncake.engine import SharedSegment

MIB = 1 << 20


def rank_main(rank, world, blobs_in, blobs_out, done):
    seg, blob = SharedSegment.create("test_kv", 2 * MIB, world, rank, 1)
    blobs_out.put((rank, blob))
    blobs = blobs_in.get()
    seg.complete(blobs)
    assert seg.ready() and seg.size() == 2 * MIB and seg.device_addr() == 0
    # Each rank writes its own page; the owner (rank 1) checks every page after all wrote.
    ctypes.memmove(seg.base_addr() + rank * 4096, bytes([rank + 1]) * 4096, 4096)
    done.put(rank)
    if rank == 1:
        blobs_in.get()  # every rank has written
        pages = [ctypes.string_at(seg.base_addr() + r * 4096, 4096) for r in range(world)]
        done.put(pages == [bytes([r + 1]) * 4096 for r in range(world)])
    else:
        blobs_in.get()  # the owner has checked: the memory may go


def test_every_rank_maps_the_owners_bytes():
    ctx = mp.get_context("spawn")
    world = 3
    ins = [ctx.Queue() for _ in range(world)]
    out, done = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, world, ins[r], out, done)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        blobs = dict(out.get(timeout=60) for _ in range(world))
        for q in ins:
            q.put([blobs[r] for r in range(world)])
        assert sorted(done.get(timeout=60) for _ in range(world)) == [0, 1, 2]
        ins[1].put("checked")
        assert done.get(timeout=60) is True
        for r in (0, 2):
            ins[r].put("go")
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
    finally:
        for p in procs:
            p.kill()


def test_bad_arguments_and_blobs_are_refused():
    assert SharedSegment.supported() and not SharedSegment.supported(mmap=False)
    assert not SharedSegment.supported(host_register=True)
    with pytest.raises(TypeError):
        SharedSegment()
    with pytest.raises(RuntimeError):
        SharedSegment.create("x", MIB, 1, 0, mmap=False)
    with pytest.raises(ValueError):
        SharedSegment.create("x", MIB, 2, 2)
    owner, blob = SharedSegment.create("x", MIB, 2, 0)
    other, blob1 = SharedSegment.create("x", MIB, 2, 1)
    with pytest.raises(ValueError):
        other.complete([blob])  # one blob for two ranks
    with pytest.raises(ValueError):
        other.complete([blob1, blob])  # out of rank order
    with pytest.raises(ValueError):
        other.complete([b"junk", blob1])
    wrong, wrong_blob = SharedSegment.create("y", 2 * MIB, 2, 0)
    with pytest.raises(ValueError):
        other.complete([wrong_blob, blob1])  # another segment's owner
    assert not other.ready()
    other.complete([blob, blob1])
    owner.complete([blob, blob1])
    ctypes.memmove(owner.base_addr(), b"shared", 6)
    assert ctypes.string_at(other.base_addr(), 6) == b"shared"
    assert owner.base_addr() != other.base_addr()
