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
