"""Mooncake's Python face of coro_rpc (``mooncake.engine.RpcInterface``, alias
``CoroRPCInterface``) on yuebing: byte messages sent with ``send_data`` arrive in the receiving
server's ``set_data_receive_callback`` callback, once each, on a callback thread, over
``yuebing.MessageServer`` / ``yuebing.MessageClient`` (yuebing-rpc).

Kept from Mooncake 0.3.13.post1: the signatures and defaults, ``True``/``False`` and 0/-1
results, ``send_data`` taking ``bytes`` only (``TypeError`` otherwise), the callback's argument
(a dict ``{"source": ..., "data": bytes}``), ``start_server`` blocking until ``stop_server``.
Different, where Mooncake's behaviour is a defect:

- ``send_data_async`` returns a future of ``loop`` that works under asyncio (Mooncake's raises a
  GIL error); it resolves to 0, or fails with ``RuntimeError("Send data failed")``.
- ``start_server`` blocks with the GIL released (Mooncake's holds it, so no other thread can
  call ``stop_server``); Ctrl-C interrupts the wait.
- A receive callback sees every message once, whatever its first bytes (Mooncake routes data that
  looks like its tensor header to the tensor callback); ``source`` is the sender's ``ip:port``
  (Mooncake's is ``""``); a callback set before ``initialize`` is used.
- ``create_rpc_server()`` listens on ``127.0.0.1:8080`` (Mooncake: ``0.0.0.0:8080``): yuebing
  listens beyond loopback only where an address says so.
- A stopped server may be started again.
- The tensor methods need torch: they raise ``NotImplementedError``.
"""

import threading

import yuebing

from . import _codes

__all__ = ["RpcInterface", "CoroRPCInterface", "ReceivedData", "ReceivedTensor",
           "create_rpc_client", "create_rpc_server"]

_TENSORS = ("tensors need torch, which yuebing's Mooncake drop-in does not support: send the "
            "tensor's bytes with send_data")


def _no_constructor(cls):
    raise TypeError(f"mooncake.engine.{cls.__name__}: No constructor defined!")


class ReceivedData:
    """Data received by a server: ``source_address``, ``data_size``, ``get_bytes()``,
    ``get_memory_view()``. Not made by users (as in Mooncake)."""

    __slots__ = ("source_address", "data_size", "_data")

    def __init__(self, *args, **kwargs):
        _no_constructor(ReceivedData)

    @classmethod
    def _of(cls, source, data):
        made = object.__new__(cls)
        made.source_address, made.data_size, made._data = source, len(data), bytes(data)
        return made

    def get_bytes(self):
        """The data, as ``bytes``."""
        return self._data

    def get_memory_view(self):
        """A read-only ``memoryview`` of the data."""
        return memoryview(self._data)


class ReceivedTensor:
    """A received tensor in Mooncake; no tensor is ever received here (see ``send_tensor``)."""

    def __init__(self, *args, **kwargs):
        _no_constructor(ReceivedTensor)


class _Receiver:
    """What a server hands each message to: the interface's current callback. It holds no
    reference to the interface, so that dropping the interface drops (and stops) its server."""

    def __init__(self):
        self.callback = None

    def deliver(self, source, data):
        callback = self.callback
        if callback is None:
            return  # Mooncake too takes the message and drops it.
        try:
            callback({"source": source, "data": data})
        except Exception:  # noqa: BLE001 - Mooncake logs a callback's error and answers
            _codes.log.exception("Error in data receive callback")


def _check(value, kind, what):
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise TypeError(f"{what} must be {kind.__name__}, not {type(value).__name__}")


class RpcInterface:
    """Mooncake's RPC communicator: ``initialize`` (``initialize_client`` /
    ``initialize_server``), then ``send_data`` to servers, or ``start_server`` and receive in
    the ``set_data_receive_callback`` callback."""

    def __init__(self):
        self._lock = threading.Lock()
        self._client = None
        self._listen = ""
        self._server = None
        self._receiver = _Receiver()

    def __repr__(self):
        return f"<mooncake.engine.RpcInterface listen={self._listen!r} server={self._server!r}>"

    # ------------------------------------------------------------------ setup

    def initialize(self, listen_address="", thread_count=0, timeout_seconds=30, pool_size=100):
        """Sets the communicator up: a client (sends wait up to ``timeout_seconds``, with up to
        ``pool_size`` connections per target), and a server to listen on ``listen_address``
        (``host:port``) when one is given, started by ``start_server``. ``thread_count`` is
        accepted for Mooncake's sake: callbacks run on yuebing's callback threads. True."""
        _check(listen_address, str, "listen_address")
        for value, what in ((thread_count, "thread_count"), (timeout_seconds, "timeout_seconds"),
                            (pool_size, "pool_size")):
            _check(value, int, what)
            if value < 0:
                raise TypeError(f"{what} must be a non-negative int, not {value}")
        if not 0 < pool_size <= 1024:
            _codes.log.warning("invalid RPC pool_size %d; using 100", pool_size)
            pool_size = 100
        client = yuebing.MessageClient(timeout=float(timeout_seconds or 30),
                                       connections=pool_size)
        self.stop_server()
        with self._lock:
            self._client, self._listen = client, listen_address
        return True

    def initialize_client(self, pool_size=100, timeout_seconds=30):
        """``initialize`` without a server."""
        return self.initialize("", 0, timeout_seconds, pool_size)

    def initialize_server(self, listen_address, thread_count=8, timeout_seconds=30):
        """``initialize`` with a server on ``listen_address``."""
        return self.initialize(listen_address, thread_count, timeout_seconds, 100)

    # ------------------------------------------------------------------ server

    def _start(self):
        """Starts listening: the server, or None (not initialized as a server, already
        started, or the address cannot be bound: logged)."""
        with self._lock:
            if not self._listen or self._server is not None:
                return None
            try:
                self._server = yuebing.MessageServer(self._listen, self._receiver.deliver)
            except (yuebing.YuebingError, ValueError) as e:
                _codes.log.error("Failed to start server on %s: %s", self._listen, e)
                return None
            return self._server

    def start_server(self):
        """Listens and serves until ``stop_server`` (from another thread, or a callback); True
        then. False at once if it cannot start."""
        server = self._start()
        if server is None:
            return False
        server.wait_stopped()
        return True

    def start_server_async(self):
        """Listens and returns; True, or False if it cannot start (or already serves)."""
        return self._start() is not None

    def start_server_impl(self, is_async=True):
        """``start_server_async`` or ``start_server``."""
        return self.start_server_async() if is_async else self.start_server()

    def stop_server(self):
        """Stops the server (messages being handled finish first); harmless if none runs."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.stop()

    def set_data_receive_callback(self, callback, /):
        """``callback({"source": "ip:port", "data": bytes})`` receives each message, once, on a
        callback thread; its sender's ``send_data`` returns once it returned."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, not {type(callback).__name__}")
        self._receiver.callback = callback

    # ------------------------------------------------------------------ client

    def _sender(self, data):
        if not isinstance(data, bytes):
            raise TypeError(f"Object of type '{type(data).__name__}' is not an instance of "
                            f"'bytes'")
        return self._client

    def send_data(self, target_address, data):
        """Sends ``data`` (bytes) to the server at ``target_address`` (``host:port``); 0 once
        its callback took it, -1 on failure (logged)."""
        _check(target_address, str, "target_address")
        client = self._sender(data)
        if client is None:
            return -1
        try:
            client.send(target_address, data)
        except (yuebing.YuebingError, ValueError) as e:
            _codes.log.error("RPC send to %s failed: %s", target_address, e)
            return -1
        return 0

    def send_data_async(self, target_address, data, loop):
        """``send_data`` without waiting: a future of ``loop`` (an asyncio event loop) that
        resolves to 0, or fails with ``RuntimeError``."""
        _check(target_address, str, "target_address")
        client = self._sender(data)
        future = loop.create_future()
        if client is None:
            future.set_exception(RuntimeError("Communicator not initialized"))
            return future

        def settle(error):
            if future.cancelled():
                return
            if error is None:
                future.set_result(0)
            else:
                failed = RuntimeError("Send data failed")
                failed.__cause__ = error
                future.set_exception(failed)

        def done(error):
            if error is not None:
                _codes.log.error("RPC send to %s failed: %s", target_address, error)
            try:
                loop.call_soon_threadsafe(settle, error)
            except RuntimeError:
                pass  # the loop was closed: nobody awaits the future any more

        try:
            client.send_then(target_address, data, done)
        except (yuebing.YuebingError, ValueError) as e:
            settle(e)
        return future

    # ------------------------------------------------------------------ tensors (torch)

    def send_tensor(self, target_address, tensor):
        """Not supported: it needs torch (``NotImplementedError``)."""
        raise NotImplementedError(f"send_tensor: {_TENSORS}")

    def send_tensor_async(self, target_address, tensor, loop):
        """Not supported: it needs torch (``NotImplementedError``)."""
        raise NotImplementedError(f"send_tensor_async: {_TENSORS}")

    def set_tensor_receive_callback(self, callback, /):
        """Not supported: it needs torch (``NotImplementedError``)."""
        raise NotImplementedError(f"set_tensor_receive_callback: {_TENSORS}")


CoroRPCInterface = RpcInterface


def create_rpc_client(local_rank=0, world_size=1):
    """An ``RpcInterface`` set up as a client (Mooncake's defaults: 30 s, 10 connections per
    target)."""
    client = RpcInterface()
    client.initialize("", 0, 30, 10)
    return client


def create_rpc_server(local_rank=0, world_size=1):
    """An ``RpcInterface`` set up to serve on ``127.0.0.1:8080`` once started."""
    server = RpcInterface()
    server.initialize("127.0.0.1:8080", 0, 30, 10)
    return server
