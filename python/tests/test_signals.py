"""The GIL is released while a call waits, and Ctrl-C cancels a waiting call: a node that holds
the object is stopped (SIGSTOP) so that a `get` from it waits, deterministically."""

from __future__ import annotations

import _thread
import signal
import threading
import time

import numpy as np
import pytest

import yuebing
from conftest import Cluster

VALUE = np.random.default_rng(11).integers(0, 256, 4 << 20, dtype=np.uint8).tobytes()


@pytest.fixture(autouse=True)
def python_handles_sigint():
    """Ctrl-C as Python's default handler raises it, whatever this process inherited: a shell
    that starts a job in the background without job control sets SIGINT to SIG_IGN, and Python
    then installs no handler (so `_thread.interrupt_main` would do nothing)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def stopped_node():
    """A cluster whose one node holds `obj` and is then stopped; a tcp client of it. The node
    is continued (SIGCONT) and everything stopped at the end."""
    c = Cluster()
    node = c.nodes[0]
    try:
        # tcp: with shm a reader copies from the stopped node's memory without it.
        store = yuebing.Store(c.address, transport="tcp", timeout=60.0)
        store.put("obj", VALUE)
        node.signal(signal.SIGSTOP)
        yield store, node
    finally:
        try:
            node.signal(signal.SIGCONT)
        finally:
            c.stop()


def test_seven_threads_finish_while_one_get_waits_on_a_stopped_node(stopped_node):
    store, node = stopped_node
    got: list = []
    getter = threading.Thread(target=lambda: got.append(store.get("obj")), daemon=True)
    getter.start()
    time.sleep(0.3)  # the get is now waiting for the stopped node
    assert getter.is_alive()

    done: list = []

    def master_calls(i: int) -> None:
        for _ in range(5):
            assert store.exist("obj")
            assert store.get_size("obj") == len(VALUE)
            assert not store.exist(f"nope/{i}")
        done.append(i)

    others = [threading.Thread(target=master_calls, args=(i,), daemon=True) for i in range(7)]
    start = time.monotonic()
    for t in others:
        t.start()
    for t in others:
        t.join(timeout=20)
    assert sorted(done) == list(range(7)), "the other threads did not finish: the GIL is held"
    assert time.monotonic() - start < 20
    assert getter.is_alive(), "the get should still wait for the stopped node"

    node.signal(signal.SIGCONT)
    getter.join(timeout=60)
    assert got == [VALUE]


def interrupt_main_after(seconds: float) -> threading.Timer:
    """Ctrl-C as Python sees it: the SIGINT handler runs in the main thread."""
    t = threading.Timer(seconds, _thread.interrupt_main)
    t.start()
    return t


def test_ctrl_c_cancels_a_waiting_get(stopped_node):
    store, node = stopped_node
    timer = interrupt_main_after(0.5)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        store.get("obj")
    elapsed = time.monotonic() - start
    timer.join()
    assert 0.4 < elapsed < 5.0, elapsed
    # The store goes on working once the node does.
    node.signal(signal.SIGCONT)
    assert store.get("obj") == VALUE


def test_ctrl_c_during_get_into_leaves_the_buffer_untouched(stopped_node):
    store, node = stopped_node
    dst = bytearray(len(VALUE))
    timer = interrupt_main_after(0.5)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        store.get_into("obj", dst)
    assert time.monotonic() - start < 5.0
    timer.join()
    # The call was cancelled and its work stopped before the exception: once the node runs
    # again nothing of the cancelled read lands in the buffer.
    node.signal(signal.SIGCONT)
    time.sleep(0.5)
    assert dst == bytearray(len(VALUE))
    # The buffer's export was released: it can be resized again.
    dst.extend(b"x")
    assert store.get_into("obj", dst) == len(VALUE)
    assert dst[: len(VALUE)] == VALUE


def test_a_large_mutable_value_is_copied_before_its_put_waits(stopped_node):
    """A put copies a mutable value (a bytearray), so writing to it while the put waits for the
    stopped node changes nothing stored (only immutable bytes are sent from their own memory:
    replicas written from memory another thread changes could differ)."""
    store, node = stopped_node
    value = bytearray(VALUE)
    done: list = []
    putter = threading.Thread(target=lambda: done.append(store.put("big", value)), daemon=True)
    putter.start()
    time.sleep(0.3)  # the put now writes to the stopped node
    assert putter.is_alive()
    value[:4] = b"XXXX"  # no export is held: writing and resizing are allowed
    value.extend(b"x")
    node.signal(signal.SIGCONT)
    putter.join(timeout=60)
    assert done == [None]
    assert store.get("big") == VALUE


def test_a_large_bytes_value_is_put_from_its_own_memory(stopped_node):
    """bytes are immutable: sent without a copy, and still stored exactly."""
    store, node = stopped_node
    node.signal(signal.SIGCONT)
    big = bytes(VALUE)
    store.put("bytes", big)
    store.put("view", memoryview(big)[1:])
    assert store.get("bytes") == VALUE and store.get("view") == VALUE[1:]


def test_a_signal_handler_that_does_not_raise_lets_the_call_go_on(stopped_node):
    store, node = stopped_node
    seen = []
    old = signal.signal(signal.SIGUSR1, lambda *_: seen.append(1))
    try:
        threading.Timer(0.3, lambda: signal.raise_signal(signal.SIGUSR1)).start()
        threading.Timer(0.8, lambda: node.signal(signal.SIGCONT)).start()
        assert store.get("obj") == VALUE
        assert seen == [1]
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_a_call_past_its_timeout_raises_a_timeout_error(stopped_node):
    store, node = stopped_node
    start = time.monotonic()
    with pytest.raises(yuebing.Timeout) as e:
        store.get("obj", timeout=0.5)
    assert isinstance(e.value, TimeoutError) and e.value.code < 0
    assert time.monotonic() - start < 5.0


def test_ctrl_c_ends_a_wait_for_an_overlapping_registration(stopped_node):
    store, node = stopped_node
    mem = np.zeros(8 << 20, dtype=np.uint8)
    # Another thread's get_into waits on the stopped node, its range registered meanwhile.
    getter = threading.Thread(
        target=lambda: store.get_into("obj", memoryview(mem)[: 4 << 20]), daemon=True)
    getter.start()
    time.sleep(0.3)
    assert getter.is_alive()
    # A range that partly overlaps it waits for that registration to end; Ctrl-C ends the wait.
    timer = interrupt_main_after(0.5)
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            store.put_from("overlapping", memoryview(mem)[1 << 20: 6 << 20])
    finally:
        timer.cancel()  # the interrupt must not reach a later test if the call ended first
    assert 0.4 < time.monotonic() - start < 5.0
    node.signal(signal.SIGCONT)
    getter.join(timeout=60)
    assert mem[: 4 << 20].tobytes() == VALUE
    # Once the getter's registration ended, the same range goes through at once.
    store.put_from("overlapping", memoryview(mem)[1 << 20: 6 << 20])
    assert store.get("overlapping") == mem[1 << 20: 6 << 20].tobytes()


def test_a_signal_handler_never_waits_for_its_own_threads_registration(stopped_node):
    store, node = stopped_node
    mem = np.zeros(8 << 20, dtype=np.uint8)
    seen: list = []

    def handler(*_):
        # The interrupted get_into holds [0, 4 MiB) until it returns, which it cannot do while
        # this handler runs: a call that would have to wait for it is refused instead.
        try:
            store.put_from("from-handler", memoryview(mem)[3 << 20: 5 << 20])
            seen.append("ran")
        except yuebing.AddressOverlapped:
            seen.append("refused")

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        threading.Timer(0.3, lambda: signal.raise_signal(signal.SIGUSR1)).start()
        threading.Timer(0.8, lambda: node.signal(signal.SIGCONT)).start()
        assert store.get_into("obj", memoryview(mem)[: 4 << 20]) == len(VALUE)
        assert seen == ["refused"]
    finally:
        signal.signal(signal.SIGUSR1, old)
