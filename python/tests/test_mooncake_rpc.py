"""Mooncake's Python coro_rpc (``mooncake.engine.RpcInterface``) through the drop-in, and the
native ``yuebing.MessageServer`` / ``MessageClient`` under it: servers and senders in this
process and in another one, on 127.0.0.1."""

import asyncio
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import yuebing
from mooncake import engine

HERE = pathlib.Path(__file__).resolve().parent


class Inbox:
    """Collects what a receive callback gets, with the thread it ran on."""

    def __init__(self):
        self.items, self.cond = [], threading.Condition()

    def __call__(self, received):
        with self.cond:
            self.items.append((threading.current_thread(), received))
            self.cond.notify_all()

    def wait_for(self, n, timeout=20):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.items) >= n, timeout), self.items
            return list(self.items)


@pytest.fixture
def server():
    """A started RpcInterface server on a free port, with an Inbox as its callback."""
    rpc = engine.RpcInterface()
    inbox = Inbox()
    rpc.set_data_receive_callback(inbox)
    assert rpc.initialize_server("127.0.0.1:0") is True
    assert rpc.start_server_async() is True
    rpc.inbox = inbox
    rpc.address = rpc._server.address
    yield rpc
    rpc.stop_server()


def test_module_has_mooncakes_rpc_names():
    for name in ["RpcInterface", "CoroRPCInterface", "ReceivedData", "ReceivedTensor",
                 "create_rpc_client", "create_rpc_server"]:
        assert hasattr(engine, name) and name in engine.__all__, name
    assert engine.CoroRPCInterface is engine.RpcInterface
    for cls in (engine.ReceivedData, engine.ReceivedTensor):
        with pytest.raises(TypeError, match="No constructor defined"):
            cls()


def test_sent_data_arrives_once_on_a_callback_thread_before_send_returns(server):
    client = engine.create_rpc_client()
    payloads = [b"", b"hello", bytes(range(256)) * 4096,  # 1 MiB, over Mooncake's 1 KiB
                # Mooncake would take this for a tensor header and not give it to the callback.
                b"\x01\x00\x00\x00\x01\x00\x00\x00" + b"\x00" * 40]
    for i, payload in enumerate(payloads):
        assert client.send_data(server.address, payload) == 0
        # The answer comes once the callback returned: it is there already, once.
        items = server.inbox.items
        assert len(items) == i + 1
        thread, received = items[-1]
        assert thread is not threading.main_thread()
        assert set(received) == {"source", "data"}
        assert received["data"] == payload and type(received["data"]) is bytes
        assert received["source"].startswith("127.0.0.1:")


def test_many_threads_deliver_every_message_exactly_once(server):
    client = engine.RpcInterface()
    assert client.initialize_client(pool_size=8) is True
    results = []

    def sender(t):
        results.extend(client.send_data(server.address, f"{t}:{i}".encode()) for i in range(25))

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0] * 200
    got = sorted(r["data"] for _, r in server.inbox.wait_for(200))
    assert got == sorted(f"{t}:{i}".encode() for t in range(8) for i in range(25))


def test_send_data_async_is_awaitable_on_asyncio(server):
    client = engine.create_rpc_client()

    async def main():
        loop = asyncio.get_running_loop()
        futures = [client.send_data_async(server.address, b"async %d" % i, loop)
                   for i in range(20)]
        assert all(isinstance(f, asyncio.Future) for f in futures)
        results = await asyncio.gather(*futures)
        failed = client.send_data_async("127.0.0.1:1", b"nobody", loop)
        with pytest.raises(RuntimeError, match="Send data failed"):
            await failed
        return results

    assert asyncio.run(main()) == [0] * 20
    got = sorted(r["data"] for _, r in server.inbox.wait_for(20))
    assert got == sorted(b"async %d" % i for i in range(20))


def test_send_data_async_without_initialize_fails_the_future():
    async def main():
        future = engine.RpcInterface().send_data_async("127.0.0.1:1", b"x",
                                                       asyncio.get_running_loop())
        with pytest.raises(RuntimeError, match="not initialized"):
            await future

    asyncio.run(main())


def test_mooncakes_results_for_failures_and_wrong_types(server):
    client = engine.create_rpc_client()
    for data in ("text", bytearray(b"x"), memoryview(b"x")):
        with pytest.raises(TypeError, match="is not an instance of 'bytes'"):
            client.send_data(server.address, data)
    assert client.send_data("127.0.0.1:1", b"x") == -1  # nobody listens
    assert client.send_data("nonsense", b"x") == -1
    idle = engine.RpcInterface()
    assert idle.send_data(server.address, b"x") == -1  # not initialized
    assert idle.start_server() is False and idle.start_server_async() is False
    idle.stop_server()
    assert client.start_server_async() is False  # a client has no address to listen on
    assert server.start_server_async() is False  # already serving
    taken = engine.RpcInterface()
    taken.initialize_server(server.address)
    assert taken.start_server_async() is False  # the port is taken
    assert server.inbox.items == []


def test_a_raising_callback_is_logged_and_the_sender_told_delivered(server, caplog):
    def fails(received):
        raise ValueError("boom")

    server.set_data_receive_callback(fails)
    client = engine.create_rpc_client()
    assert client.send_data(server.address, b"x") == 0
    assert "boom" in caplog.text
    with pytest.raises(TypeError):
        server.set_data_receive_callback(42)


def test_stop_server_stops_and_a_stopped_server_starts_again(server):
    client = engine.create_rpc_client()
    assert client.send_data(server.address, b"one") == 0
    server.stop_server()
    server.stop_server()  # harmless
    assert client.send_data(server.address, b"lost") == -1
    # Started again (on a port of its own: it was asked for port 0).
    assert server.start_server_async() is True
    assert client.send_data(server._server.address, b"two") == 0
    assert [r["data"] for _, r in server.inbox.items] == [b"one", b"two"]


def test_start_server_blocks_until_stop_server():
    rpc = engine.RpcInterface()
    rpc.initialize_server("127.0.0.1:0", thread_count=2)
    outcome = []
    serving = threading.Thread(target=lambda: outcome.append(rpc.start_server()))
    serving.start()
    deadline = time.monotonic() + 20
    while rpc._server is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.create_rpc_client().send_data(rpc._server.address, b"x") == 0
    assert serving.is_alive() and outcome == []
    rpc.stop_server()
    serving.join(20)
    assert outcome == [True]


def test_a_callback_may_send_and_make_blocking_calls(server):
    """A callback runs on a thread where blocking calls of the package work: here it forwards
    each message to a second server with send_data."""
    second = engine.RpcInterface()
    inbox = Inbox()
    second.set_data_receive_callback(inbox)
    second.initialize_server("127.0.0.1:0")
    assert second.start_server_async()
    forwarder = engine.create_rpc_client()
    codes = []
    server.set_data_receive_callback(
        lambda r: codes.append(forwarder.send_data(second._server.address, b"fwd " + r["data"])))
    try:
        assert engine.create_rpc_client().send_data(server.address, b"m") == 0
        assert codes == [0] and [r["data"] for _, r in inbox.items] == [b"fwd m"]
    finally:
        second.stop_server()


def test_tensor_methods_need_torch(server):
    for call in (lambda: server.send_tensor(server.address, object()),
                 lambda: server.send_tensor_async(server.address, object(), None),
                 lambda: server.set_tensor_receive_callback(print)):
        with pytest.raises(NotImplementedError, match="torch"):
            call()


def test_mooncakes_signatures_and_defaults():
    import inspect
    sig = lambda f: str(inspect.signature(f))  # noqa: E731
    rpc = engine.RpcInterface
    assert sig(rpc.initialize) == ("(self, listen_address='', thread_count=0, "
                                   "timeout_seconds=30, pool_size=100)")
    assert sig(rpc.initialize_client) == "(self, pool_size=100, timeout_seconds=30)"
    assert sig(rpc.initialize_server) == ("(self, listen_address, thread_count=8, "
                                          "timeout_seconds=30)")
    assert sig(rpc.send_data) == "(self, target_address, data)"
    assert sig(rpc.send_data_async) == "(self, target_address, data, loop)"
    assert sig(engine.create_rpc_client) == "(local_rank=0, world_size=1)"
    assert sig(engine.create_rpc_server) == "(local_rank=0, world_size=1)"


SENDER = textwrap.dedent("""
    import sys
    from mooncake import engine
    client = engine.create_rpc_client()
    codes = [client.send_data(sys.argv[1], b"from another process %d" % i) for i in range(10)]
    print(codes)
""")


def test_messages_from_another_process(server):
    out = subprocess.run([sys.executable, "-c", SENDER, server.address], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([0] * 10)
    assert [r["data"] for _, r in server.inbox.items] == [
        b"from another process %d" % i for i in range(10)]


# ------------------------------------------------------------------ the native classes


def test_native_server_and_client():
    got = []
    native = yuebing.MessageServer(on_message=lambda source, data: got.append((source, data)))
    try:
        assert native.address.startswith("127.0.0.1:") and native.running
        client = yuebing.MessageClient(timeout=10.0)
        client.send(native.address, bytearray(b"buffer"))
        assert got == [(got[0][0], b"buffer")] and got[0][0].startswith("127.0.0.1:")
        done = threading.Event()
        outcome = []
        client.send_then(native.address, b"later", lambda e: (outcome.append(e), done.set()))
        assert done.wait(20) and outcome == [None] and got[-1][1] == b"later"
        with pytest.raises(yuebing.InvalidArgument):
            yuebing.MessageClient(connections=0)
    finally:
        assert native.stop() is True
    assert native.stop() is False and not native.running
    with pytest.raises(yuebing.YuebingError) as failed:
        client.send(native.address, b"x")
    assert failed.value.name == "Connect", failed.value
    done, outcome = threading.Event(), []
    client.send_then(native.address, b"x", lambda e: (outcome.append(e), done.set()))
    assert done.wait(20) and isinstance(outcome[0], yuebing.YuebingError)


def test_native_message_limit_is_typed():
    native = yuebing.MessageServer(max_message="64KiB")
    try:
        with pytest.raises(yuebing.YuebingError) as failed:
            yuebing.MessageClient().send(native.address, b"x" * (1 << 20))
        assert failed.value.name == "FrameTooLarge", failed.value
    finally:
        native.stop()


def test_native_server_in_a_forked_child_is_refused():
    native = yuebing.MessageServer()
    try:
        pid = os.fork()
        if pid == 0:
            try:
                native.stop()
                code = 1
            except yuebing.Forked:
                code = 0
            except BaseException:  # noqa: BLE001
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert native.running
    finally:
        native.stop()
