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
