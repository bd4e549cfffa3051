"""A forked child cannot use the parent's Store (Forked, code -4005) but can make its own."""

from __future__ import annotations

import os

import yuebing


def test_a_forked_child_gets_forked_and_can_make_a_new_store(cluster, store, key):
    store.put(key, b"from the parent")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        status = 1
        try:
            os.close(read)
            try:
                store.get(key)
                outcome = "inherited store worked"
            except yuebing.Forked as e:
                outcome = f"forked {e.code} {'new yuebing.Store' in str(e)}"
            mine = yuebing.Store(cluster.address)
            outcome += f" | {mine.get(key).decode()}"
            mine.close()
            os.write(write, outcome.encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as r:
        outcome = r.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, outcome
    assert outcome == "forked -4005 True | from the parent"
    # The parent's store is unaffected.
    assert store.get(key) == b"from the parent"


CHILD_EXITS_NORMALLY = """
import os, sys, yuebing
store = yuebing.Store(sys.argv[1])
engine = yuebing.Engine()
buf = engine.allocate(4096, remote="rw")
store.put(sys.argv[2], b"x")
pid = os.fork()
if pid == 0:
    # The child ends through the interpreter's normal shutdown, dropping the inherited Store,
    # Engine and Buffer: they must be left alone there, not reach into the parent's runtime.
    try:
        store.exist(sys.argv[2])
    except yuebing.Forked:
        sys.exit(0)
    sys.exit(3)
_, status = os.waitpid(pid, 0)
assert store.exist(sys.argv[2])
print(os.waitstatus_to_exitcode(status))
"""


def test_a_child_that_exits_normally_leaves_the_inherited_objects_alone(cluster, key):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", CHILD_EXITS_NORMALLY, cluster.address, key],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


def test_a_forked_child_cannot_touch_inherited_buffers_engines_or_stores(store, key):
    engine = yuebing.Engine()
    buf = engine.allocate(1 << 16, remote="rw")     # memfd-backed: its pages are the parent's too
    pattern = bytes(i % 251 for i in range(1 << 16))
    buf.write(pattern)
    peer = yuebing.Engine()
    seg = peer.open_segment(engine.name)
    out = bytearray(1 << 16)
    peer.read(out, seg, buf.addr)
    assert out == pattern
    batch = engine.allocate_batch(1)
    store.put(key, b"value")
    mine = bytearray(64)
    calls = {
        "buf.write": lambda: buf.write(b"child"),
        "buf.read": lambda: buf.read(0, 5),
        "buf.free": buf.free,
        "engine.status": lambda: engine.status(batch),
        "engine.task_status": lambda: engine.task_status(batch, 0),
        "engine.cancel": lambda: engine.cancel(batch),
        "engine.free_batch": lambda: engine.free_batch(batch),
        "engine.allocate_batch": lambda: engine.allocate_batch(1),
        "engine.submit": lambda: engine.submit(batch, [("read", buf.addr, seg, buf.addr, 8)]),
        "engine.take_notifications": engine.take_notifications,
        "engine.segment_buffers": lambda: peer.segment_buffers(seg),
        "engine.close_segment": lambda: peer.close_segment(seg),
        "engine.allocate": lambda: engine.allocate(4096),
        "engine.register": lambda: engine.register(mine),
        "engine.unregister": lambda: engine.unregister(buf),
        "engine.read": lambda: peer.read(mine, seg, buf.addr),
        "store.get_into": lambda: store.get_into(key, mine),
        "store.get_into(buf)": lambda: store.get_into(key, buf),
        "store.put_from": lambda: store.put_from(f"{key}/child", mine),
        "store.register_buffer": lambda: store.register_buffer(mine),
        "store.unregister_buffer": lambda: store.unregister_buffer(mine),
        "store.engine.status": lambda: store.engine.status(batch),
        "store.health_check": store.health_check,
    }
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        status = 1
        try:
            os.close(read)
            outcomes = []
            for name, call in calls.items():
                try:
                    call()
                    outcomes.append(f"{name}: ran")
                except yuebing.Forked:
                    outcomes.append(f"{name}: Forked")
                except BaseException as e:  # noqa: BLE001  (reported to the parent)
                    outcomes.append(f"{name}: {type(e).__name__} {e}")
            # Names and sizes are the child's to read.
            outcomes.append(f"{buf.addr == buf.addr and buf.size} {bool(engine.name)}")
            os.write(write, "\n".join(outcomes).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as r:
        outcome = r.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, outcome
    assert outcome.splitlines() == [f"{name}: Forked" for name in calls] + ["65536 True"]
    # The parent's buffer is untouched and still registered, for its own engine and peers.
    assert buf.read() == pattern
    peer.read(out, seg, buf.addr)
    assert out == pattern
    peer.write(b"parent", seg, buf.addr)
    assert buf.read(0, 6) == b"parent"
    assert store.get_into(key, buf) == 5 and buf.read(0, 5) == b"value"
    assert engine.status(batch).tasks == 0
    engine.free_batch(batch)
    peer.close_segment(seg)
    buf.free()
