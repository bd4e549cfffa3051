"""Copy and move tasks (Mooncake's create_copy_task, create_move_task and query_task) against a
master and two `yuebing node` processes: the node holding the source replica runs each task,
and the bytes are read back from the new replicas after that node is killed."""

from __future__ import annotations

import os
import time
import uuid

import pytest
import yuebing
from conftest import Cluster

from mooncake.store import (MooncakeDistributedStore, ReplicateConfig, TaskStatus, TaskType)

MIB = 1 << 20


def until_finished(query, limit: float = 30.0):
    """Polls ``query()`` (a task's state) until it is finished; returns the last answer."""
    end = time.monotonic() + limit
    while True:
        got = query()
        if got[0] in ("SUCCESS", "FAILED", TaskStatus.SUCCESS, TaskStatus.FAILED):
            return got
        assert time.monotonic() < end, f"the task did not end within {limit} s: {got}"
        time.sleep(0.05)


def test_yuebing_store_copies_and_moves_and_the_copies_outlive_the_source():
    c = Cluster(nodes=2)
    try:
        s = yuebing.Store(c.address, timeout=30.0)
        a, b = (n.announced for n in c.nodes)
        copied, moved = f"copy/{uuid.uuid4().hex}", f"move/{uuid.uuid4().hex}"
        data, other = os.urandom(3 * MIB + 5), os.urandom(MIB)
        s.put(copied, data, preferred=[a])
        s.put(moved, other, preferred=[a])

        tid = s.create_copy_task(copied, [b])
        assert isinstance(tid, tuple) and len(tid) == 2 and all(isinstance(h, int) for h in tid)
        first = s.query_task(tid)
        assert (first.kind, first.key) == ("REPLICA_COPY", copied)
        assert first.state in ("PENDING", "PROCESSING", "SUCCESS")
        t = until_finished(lambda: (s.query_task(tid).state, s.query_task(tid)))[1]
        assert t.state == "SUCCESS" and t.message == "" and t.id == tid
        assert t.updated_ms >= t.created_ms > 0
        assert sorted(r[0] for r in s.replicas(copied).replicas) == sorted([a, b])

        mid = s.create_move_task(moved, a, b)
        assert mid != tid
        m = until_finished(lambda: (s.query_task(mid).state, s.query_task(mid)))[1]
        assert (m.state, m.kind) == ("SUCCESS", "REPLICA_MOVE")
        assert [r[0] for r in s.replicas(moved).replicas] == [b]

        with pytest.raises(yuebing.ObjectNotFound):
            s.create_copy_task(f"nope/{uuid.uuid4().hex}", [b])
        # b holds a replica already: the copy succeeds without a second one, as in Mooncake.
        again = s.create_copy_task(copied, [b])
        assert until_finished(lambda: (s.query_task(again).state,))[0] == "SUCCESS"
        assert sorted(r[0] for r in s.replicas(copied).replicas) == sorted([a, b])
        with pytest.raises(yuebing.InvalidParams):
            s.create_move_task(moved, b, b)
        with pytest.raises(yuebing.TaskNotFound) as e:
            s.query_task((0, 123456789))
        assert e.value.code == -1400

        # The source node dies: every byte comes from the copies.
        c.nodes[0].kill()
        assert s.get(copied) == data
        assert s.get(moved) == other
        s.close()
    finally:
        c.stop()


def test_mooncake_tasks_answer_as_the_stock_wheel_does():
    c = Cluster(nodes=2)
    try:
        st = MooncakeDistributedStore()
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", c.address) == 0
        a, b = (n.announced for n in c.nodes)
        key, gone = f"mc/{uuid.uuid4().hex}", f"mc/{uuid.uuid4().hex}"
        cfg = ReplicateConfig()
        cfg.preferred_segment = a
        assert st.put(key, b"k" * 4096, cfg) == 0
        assert st.put(gone, b"g" * 4096, cfg) == 0

        tid, rc = st.create_copy_task(key, [b])
        assert rc == 0 and tid != (0, 0)
        resp, rc = st.query_task(tid)
        assert rc == 0 and resp.type == TaskType.REPLICA_COPY and resp.id == tid
        assert resp.status in (TaskStatus.PENDING, TaskStatus.PROCESSING, TaskStatus.SUCCESS)

        def state(task_id):
            r, code = st.query_task(task_id)
            assert code == 0
            return r.status, r

        status, resp = until_finished(lambda: state(tid))
        assert status == TaskStatus.SUCCESS, resp.message
        assert resp.last_updated_at_ms_epoch >= resp.created_at_ms_epoch > 0
        assert isinstance(resp.assigned_client, tuple) and resp.assigned_client != (0, 0)
        assert sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                      for r in st.get_replica_desc(key)) == sorted([a, b])
        assert st.get(key) == b"k" * 4096

        mid, rc = st.create_move_task(gone, a, b)
        assert rc == 0
        status, resp = until_finished(lambda: state(mid))
        assert status == TaskStatus.SUCCESS and resp.type == TaskType.REPLICA_MOVE
        (r,) = st.get_replica_desc(gone)
        assert r.get_memory_descriptor().buffer_descriptor.transport_endpoint == b

        # Refusals: the stock wheel's pair of a zero id and the code.
        assert st.create_copy_task(f"mc/{uuid.uuid4().hex}", [b]) == ((0, 0), -704)
        assert st.create_copy_task(key, []) == ((0, 0), -600)
        assert st.create_move_task(key, a, a) == ((0, 0), -600)
        assert st.query_task((0, 987654321)) == (None, -1400)
        with pytest.raises(TypeError):
            st.query_task("not an id")
        assert st.close() == 0
    finally:
        c.stop()
