"""Dummy clients (Mooncake's ``setup_dummy``): a process that owns no store space and no
engine of its own asks a *real* client on the same host to do its store calls.

The real client (``mooncake_client --port PORT``, or any process that calls
:func:`serve_dummy_clients`) listens on a Unix socket named after its port, in a directory only
its user can enter; a dummy client connects there (``setup_dummy(..., "host:PORT")``) and must
run as the same user (checked with ``SO_PEERCRED``). The dummy's host memory comes from
``MooncakeHostMemAllocator``: sealed memfds. When it registers a buffer, the memfd holding it
goes over the socket once (``SCM_RIGHTS``); the real client maps it, registers the mapping with
its own engine, and from then on the dummy's zero-copy calls name addresses in its own memory,
which the real client translates (an address outside what was shared is ``-600``, nothing
else happens). Values of the bytes API travel inline.

Lifetimes: the real client unregisters and unmaps a dummy's memory when the dummy disconnects
(also when it was killed: the socket closes), after the call under way, if any, returned; the
dummy's memory stays the dummy's. A dead real client makes every call of its dummies return
the call's error answer (``RPC_FAIL``, -900) at once, never hang: each call is also bounded by
``MOONCAKE_DUMMY_TIMEOUT`` seconds (default 60).

One connection per dummy client; its calls take turns on it.

Wire: each message is ``u32 header length | u32 payload length`` (little endian), a JSON header,
then the payload bytes; file descriptors ride on the first bytes of a ``share`` message.
"""

import errno
import functools
import inspect
import json
import operator
import os
import socket
import stat
import struct
import threading
import time

from . import _codes, _hostname, _memory, _shared

VERSION = 1
_PRE = struct.Struct("<II")
_MAX_HEADER = 16 << 20
_MAX_PAYLOAD = 1 << 30


class LinkError(Exception):
    """The real client is gone, or broke the protocol."""


def socket_path(server_address):
    """Where the real client named ``host:PORT`` listens for its dummy clients: a socket named
    after the port in ``$YUEBING_DUMMY_DIR`` (default ``/tmp/yuebing-dummy-UID``)."""
    _, port = _hostname.split(str(server_address))
    if not port:
        raise ValueError(f"{server_address!r} names no port: expected host:PORT, the real "
                         "client's --port")
    return os.path.join(_directory(), f"mooncake-client-{port}.sock")


def _directory():
    return os.environ.get("YUEBING_DUMMY_DIR") or f"/tmp/yuebing-dummy-{os.getuid()}"


def _private_directory(path):
    """Makes ``path`` (mode 0700) or checks that it is this user's directory and closed to
    others: no one else may place or replace the socket."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{path} must be a directory of this user that others cannot "
                              "enter (mode 0700)")


def _plain(value):
    """JSON for an integer of another type (numpy's), as the drop-in takes them."""
    return operator.index(value)


def peer_uid(sock):
    """The user of the process at the other end of ``sock``."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
    return struct.unpack("iII", creds)[1]


def _send(sock, header, payload=b"", fds=()):
    head = json.dumps(header, default=_plain).encode()
    first = _PRE.pack(len(head), len(payload)) + head
    if fds:
        sent = socket.send_fds(sock, [first], list(fds))
        first = first[sent:]
    sock.sendall(first)
    if payload:
        sock.sendall(payload)


def _recv_exact(sock, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise LinkError("the peer closed the connection")
        got += k
    return buf


def _recv(sock, max_fds=0):
    """One message: ``(header, payload, fds)``. File descriptors that arrive with it are the
    caller's to close; on any failure (more than ``max_fds``, a truncated message, a broken
    connection, a bad header) they are closed here before the error is raised."""
    fds = []
    try:
        return _recv_into(sock, max_fds, fds)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _recv_into(sock, max_fds, fds):
    got = b""
    space = socket.CMSG_SPACE(max(max_fds, 1) * 4)
    while len(got) < _PRE.size:
        data, anc, flags, _ = sock.recvmsg(_PRE.size - len(got), space if not got else 0)
        for level, kind, body in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(body) // 4}i", body[:len(body) // 4 * 4]))
        if flags & socket.MSG_CTRUNC or len(fds) > max_fds:
            raise LinkError("file descriptors the protocol does not expect")
        if not data:
            raise LinkError("the peer closed the connection")
        got += data
    head_len, payload_len = _PRE.unpack(got)
    if head_len > _MAX_HEADER or payload_len > _MAX_PAYLOAD:
        raise LinkError(f"a message of {head_len} + {payload_len} bytes is over the limits")
    try:
        header = json.loads(_recv_exact(sock, head_len))
    except (ValueError, RecursionError) as e:
        raise LinkError(f"an unreadable header: {e}") from None
    if not isinstance(header, dict):
        raise LinkError("a header that is not an object")
    payload = bytes(_recv_exact(sock, payload_len)) if payload_len else b""
    return header, payload, fds


# --------------------------------------------------------------------------- the calls
#
# Each forwarded call: its name, and how its arguments hold addresses. "one" is (addr, size)
# at argument positions (1, 2); "each" a list of addresses and a list of sizes there; "multi"
# a list of lists of each. "bytes" sends argument 1 (a value) as the payload; "get" returns
# the payload; "ranges" is get_into_ranges, whose argument 0 lists addresses (the store bounds
# each range by the registration it lies in, as for any client). Config arguments
# (ReplicateConfig) travel as their fields.

CALLS = {
    "put": "bytes", "upsert": "bytes", "get": "get",
    "is_exist": None, "batch_is_exist": None, "get_size": None, "remove": None,
    "batch_remove": None, "remove_all": None, "remove_by_regex": None,
    "put_from": "one", "upsert_from": "one", "get_into": "one",
    "batch_put_from": "each", "batch_upsert_from": "each", "batch_get_into": "each",
    "batch_put_from_multi_buffers": "multi",
    "batch_get_into_multi_buffers": "multi",
    "get_into_ranges": "ranges", "health_check": None, "get_hostname": None,
}
# The answer of a call whose addresses are bad (per item for the batch forms).
_LIST_ANSWERS = {"batch_is_exist", "batch_remove", "batch_put_from", "batch_upsert_from",
                 "batch_get_into", "batch_put_from_multi_buffers",
                 "batch_get_into_multi_buffers"}


def _failed(method, args, code):
    """What ``method`` answers when it cannot run: ``code`` (per key for the batch forms),
    ``b""`` for ``get``, ``""`` for ``get_hostname``."""
    if method == "get":
        return b""
    if method == "get_hostname":
        return ""
    if method in _LIST_ANSWERS:
        keys = args[0] if args else []
        return [code] * (len(keys) if isinstance(keys, list) else 0)
    return code


def _config_fields(config):
    from ._types import ReplicateConfig
    if config is None or not isinstance(config, ReplicateConfig):
        return config
    fields = {k: v for k, v in vars(config).items() if not k.startswith("_")}
    fields["soft_pin_ttl_ms"] = config.soft_pin_ttl_ms
    fields["soft_pin_action"] = int(config.soft_pin_action)
    fields["data_type"] = int(config.data_type)
    return {"__replicate_config__": fields}


def _config_of(value):
    from ._types import ObjectDataType, ReplicateConfig, SoftPinAction
    if not (isinstance(value, dict) and "__replicate_config__" in value):
        return value
    config = ReplicateConfig()
    enums = {"soft_pin_action": SoftPinAction, "data_type": ObjectDataType}
    for k, v in value["__replicate_config__"].items():
        if k in enums and v in enums[k].__members__.values():
            v = enums[k](v)  # (a number outside the enum stays a number, as the dummy set it)
        if hasattr(config, k):
            setattr(config, k, v)
    return config


# --------------------------------------------------------------------------- real side

class _Region:
    __slots__ = ("base", "size", "real")

    def __init__(self, base, size, real):
        self.base, self.size, self.real = base, size, real


# How long the real client waits for a dummy to take an answer before it gives up on it.
_SEND_TIMEOUT = 60.0


class _Session:
    """One dummy client's connection, served on a thread of its own."""

    def __init__(self, store, sock):
        self.store, self.sock = store, sock
        self.regions = []
        # The dummy's register_buffer ranges, registered with the store here: {dummy address:
        # (real address, size)}.
        self.registrations = {}

    def run(self):
        try:
            if peer_uid(self.sock) != os.getuid():
                raise LinkError(f"a dummy client of user {peer_uid(self.sock)} is refused")
            while True:
                header, payload, fds = _recv(self.sock, max_fds=1)
                try:
                    reply, out = self._handle(header, payload, fds)
                finally:
                    for fd in fds:
                        os.close(fd)
                # A dummy that takes no answer must not hold this thread (and its memory).
                self.sock.settimeout(_SEND_TIMEOUT)
                _send(self.sock, reply, out)
                self.sock.settimeout(None)
        except (LinkError, OSError) as e:
            _codes.log.info("a dummy client left: %s", e)
        finally:
            self._release_all()
            self.sock.close()

    def stop(self):
        """Ends the session from another thread (its ``run`` then releases the memory)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _handle(self, header, payload, fds):
        """The answer to one request. A request the protocol does not know ends the session; a
        call whose arguments the store refuses is answered with the exception it raised."""
        op = header.get("op")
        try:
            if op == "hello":
                if header.get("version") != VERSION:
                    return {"error": f"protocol version {header.get('version')}, "
                                     f"not {VERSION}"}, b""
                return {"ok": {"hostname": self.store.get_hostname()}}, b""
            if op == "share":
                return {"ok": self._share(header, fds)}, b""
            if op == "unshare":
                self._unshare(operator.index(header["base"]))
                return {"ok": 0}, b""
            if op == "register":
                return {"ok": self._register(header["addr"], header["size"])}, b""
            if op == "unregister":
                return {"ok": self._unregister(operator.index(header["addr"]))}, b""
            if op == "call":
                return self._call(str(header["method"]), list(header.get("args", [])), payload)
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            return {"raise": [type(e).__name__, str(e)]}, b""
        raise LinkError(f"unknown request {op!r}")

    def _share(self, header, fds):
        base, size = operator.index(header["base"]), operator.index(header["size"])
        if len(fds) != 1 or size <= 0 or base <= 0 or base + size >= 1 << 64:
            return _codes.INVALID_PARAMS
        if any(r.base < base + size and base < r.base + r.size for r in self.regions):
            return _codes.INVALID_PARAMS
        try:
            real = _shared.map_peer(fds[0], size)
        except (ValueError, OSError) as e:
            _codes.log.error("a dummy client's memory cannot be mapped: %s", e)
            return _codes.INVALID_PARAMS
        self.regions.append(_Region(base, size, real))
        return 0

    def _register(self, addr, size):
        """The dummy's ``register_buffer``: its range, inside what it shared, registered with
        the store as a normal client's (so the store's own checks, overlaps and ranged reads'
        bounds among them, apply to it as they would)."""
        addr = operator.index(addr)
        try:
            real = self._translate(addr, size)
        except (ValueError, TypeError, OverflowError):
            return _codes.INVALID_PARAMS
        if addr in self.registrations:
            return _codes.INVALID_PARAMS
        code = self.store.register_buffer(real, operator.index(size))
        if code == 0:
            self.registrations[addr] = (real, operator.index(size))
        return code

    def _unregister(self, addr):
        found = self.registrations.pop(addr, None)
        if found is None:
            return _codes.INVALID_PARAMS
        # Unregistering waits for the transfers that use the range.
        return self.store.unregister_buffer(found[0])

    def _unshare(self, base):
        for region in [r for r in self.regions if r.base == base]:
            inside = [a for a in self.registrations if base <= a < base + region.size]
            for addr in inside:
                self._unregister(addr)
            self.regions.remove(region)
            _shared.unmap(region.real, region.size)

    def _release_all(self):
        # The registrations end first (each waits for its transfers), then the mappings go;
        # one that could not be unregistered keeps its region mapped.
        kept = set()
        for addr in list(self.registrations):
            real, size = self.registrations[addr]
            if self._unregister(addr) != 0:
                _codes.log.warning("a dummy client's memory at %#x stays mapped: it could not "
                                   "be unregistered", real)
                kept.update(r.base for r in self.regions if r.real <= real < r.real + r.size)
        regions, self.regions = self.regions, []
        for region in regions:
            if region.base not in kept:
                _shared.unmap(region.real, region.size)

    def _translate(self, addr, size):
        """The real client's address of ``size`` bytes at the dummy's ``addr``."""
        addr, size = operator.index(addr), operator.index(size)
        if addr < 0 or size < 0:
            raise ValueError(f"{addr:#x}+{size}")
        for r in self.regions:
            if r.base <= addr and addr + size <= r.base + r.size:
                return r.real + (addr - r.base)
        raise ValueError(f"{addr:#x}+{size} lies outside the memory this dummy client shared")

    def _translate_items(self, kind, addrs, sizes):
        """Each item's real addresses, or ``None`` for an item with one outside what the dummy
        shared; an item of 0 bytes is left as it is (the store answers it as for any client)."""
        def one(a, n):
            return a if operator.index(n) == 0 else self._translate(a, n)

        out = []
        for a, n in zip(addrs, sizes, strict=True):
            try:
                if kind == "each":
                    out.append(one(a, n))
                else:
                    out.append([one(x, m) for x, m in zip(a, n, strict=True)])
            except (ValueError, TypeError, OverflowError) as e:
                _codes.log.error("a dummy client's address: %s", e)
                out.append(None)
        return out

    def _call(self, method, args, payload):
        kind = CALLS.get(method, "unknown")
        if kind == "unknown":
            raise LinkError(f"{method} is not served to dummy clients")
        args = [_config_of(a) for a in args]
        if kind == "bytes":
            config = args[1] if len(args) > 1 else None
            result = self.store._put(method, args[0], payload, config, method == "upsert",
                                     staged=False)
            return {"ok": result}, b""
        if kind == "one":
            try:
                args[1] = self._translate(args[1], args[2]) if args[2] else args[1]
            except (ValueError, TypeError, OverflowError) as e:
                _codes.log.error("a dummy client's %s: %s", method, e)
                return {"ok": _codes.INVALID_PARAMS}, b""
        if kind in ("each", "multi"):
            return {"ok": self._call_items(method, kind, args)}, b""
        if kind == "ranges":
            try:
                args[0] = [self._translate(a, 0) for a in args[0]]
            except (ValueError, TypeError, OverflowError) as e:
                _codes.log.error("a dummy client's %s: %s", method, e)
                from .store import _ranged_shape
                return {"ok": _ranged_shape(len(args[0]), args[1], args[2])}, b""
        result = getattr(self.store, method)(*args)
        if kind == "get":
            return {"ok": None}, bytes(result)
        return {"ok": result}, b""

    def _call_items(self, method, kind, args):
        """A batch call: its items with bad addresses answer -600, the others go to the store
        together; the answers in the items' order."""
        keys, addrs, sizes, rest = args[0], args[1], args[2], args[3:]
        if not len(keys) == len(addrs) == len(sizes):
            return getattr(self.store, method)(keys, addrs, sizes, *rest)
        real = self._translate_items(kind, addrs, sizes)
        good = [i for i, r in enumerate(real) if r is not None]
        answers = [_codes.INVALID_PARAMS] * len(keys)
        if good:
            done = getattr(self.store, method)([keys[i] for i in good],
                                               [real[i] for i in good],
                                               [sizes[i] for i in good], *rest)
            for i, answer in zip(good, done):
                answers[i] = answer
        return answers


def _claim(path):
    """Takes ``path`` for a new listener: a socket left by a dead real client is removed; one
    a live real client serves is not (``OSError`` EADDRINUSE)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)  # no one listens: a dead real client's
        return
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"a real client serves dummy clients at {path} already")


class DummyHost:
    """A real client's service for dummy clients: ``store`` (a set-up
    ``MooncakeDistributedStore``) does their calls. ``serve_forever`` accepts until ``close``,
    which also ends the sessions (their memory released) before it returns."""

    def __init__(self, store, server_address):
        self.store = store
        self.path = socket_path(server_address)
        _private_directory(os.path.dirname(self.path))
        _claim(self.path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o600)
        self.inode = os.lstat(self.path).st_ino
        self.sock.listen(64)
        self._closed = threading.Event()
        self._sessions = {}
        self._lock = threading.Lock()

    def serve_forever(self):
        while not self._closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError as e:
                if self._closed.is_set():
                    return
                # Out of descriptors or memory for a moment: the service goes on.
                _codes.log.warning("accepting a dummy client: %s", e)
                time.sleep(0.1)
                continue
            session = _Session(self.store, conn)
            thread = threading.Thread(target=self._run, args=(session,), daemon=True,
                                      name="mooncake-dummy")
            with self._lock:
                self._sessions[session] = thread
            thread.start()

    def _run(self, session):
        try:
            session.run()
        finally:
            with self._lock:
                self._sessions.pop(session, None)

    def close(self):
        self._closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            if os.lstat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        with self._lock:
            sessions = list(self._sessions.items())
        for session, thread in sessions:
            session.stop()
            thread.join(timeout=_SEND_TIMEOUT)


def serve_dummy_clients(store, server_address):
    """Serves dummy clients of ``store`` on a thread of its own; returns the ``DummyHost``
    (``close()`` it to stop)."""
    host = DummyHost(store, server_address)
    threading.Thread(target=host.serve_forever, daemon=True, name="mooncake-dummies").start()
    return host


# --------------------------------------------------------------------------- dummy side

class Link:
    """A dummy client's connection to its real client."""

    def __init__(self, server_address):
        timeout = float(os.environ.get("MOONCAKE_DUMMY_TIMEOUT", "60"))
        path = socket_path(server_address)
        # The dummy hands its memory over: only to a real client of its own user, found in a
        # directory no one else can place a socket in.
        _private_directory(os.path.dirname(path))
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
            if peer_uid(self.sock) != os.getuid():
                raise LinkError(f"the server at {path} runs as user {peer_uid(self.sock)}, "
                                "not as this one")
            _send(self.sock, {"op": "hello", "version": VERSION})
            header, _, _ = _recv(self.sock)
        except (OSError, LinkError, ValueError):
            self.sock.close()
            raise
        if "ok" not in header:
            self.sock.close()
            raise LinkError(header.get("error", "the real client refused"))
        self.hostname = header["ok"]["hostname"]
        self.shared = set()
        # alloc_from_mem_pool's memory: its allocator, and the bytes it may hand out.
        self.pool = _memory.MooncakeHostMemAllocator()
        self.pool_sizes = {}
        self.pool_limit = 0
        self.lock = threading.Lock()
        self.broken = False

    def _exchange(self, header, payload=b"", fds=()):
        # (An argument JSON cannot carry fails in `_send` before a byte is sent: a TypeError,
        # the link intact.)
        with self.lock:
            if self.broken:
                raise LinkError("the connection to the real client is broken")
            try:
                _send(self.sock, header, payload, fds)
                reply, out, _ = _recv(self.sock)
            except (OSError, LinkError, ValueError) as e:
                # Whatever the real client did, this connection's framing is lost: it is
                # closed, so that the real client lets go of this client's memory (a call cut
                # off here may still be running there until then).
                self._break()
                raise LinkError(str(e)) from e
        if "raise" in reply:
            kind, message = reply["raise"]
            raise {"TypeError": TypeError, "ValueError": ValueError}.get(kind, ValueError)(
                message)
        if "ok" not in reply:
            raise LinkError(reply.get("error", "the real client refused the call"))
        return reply["ok"], out

    def _break(self):
        self.broken = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def share(self, base, size, fd):
        """Hands the memfd of host memory at ``base`` to the real client (once)."""
        if base in self.shared:
            return 0
        code, _ = self._exchange({"op": "share", "base": base, "size": size}, fds=(fd,))
        if code == 0:
            self.shared.add(base)
        return code

    def unshare(self, base):
        if base in self.shared:
            self.shared.discard(base)
            self._exchange({"op": "unshare", "base": base})

    def register(self, addr, size):
        """Registers ``size`` bytes at ``addr`` (inside shared memory) with the real client's
        store: 0, or its code."""
        return self._exchange({"op": "register", "addr": addr, "size": size})[0]

    def unregister(self, addr):
        return self._exchange({"op": "unregister", "addr": addr})[0]

    def call(self, method, args, payload=b""):
        args = [_config_fields(a) for a in args]
        result, out = self._exchange({"op": "call", "method": method, "args": args}, payload)
        return out if CALLS.get(method) == "get" else result

    def close(self):
        """Ends the link once the call under way, if any, returned: from then on the real
        client no longer touches this client's memory."""
        with self.lock:
            self._break()


def _forwarded(method, original):
    """``MooncakeDistributedStore.method`` that a dummy client sends to its real client (its
    arguments bound as the original takes them, defaults included); a broken link answers
    the call's error (``RPC_FAIL``)."""
    kind, signature = CALLS[method], inspect.signature(original)

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        link = self._dummy
        if link is None:
            return original(self, *args, **kwargs)
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{method}(): {e}") from None
        bound.apply_defaults()
        args = list(bound.args[1:])
        payload = b""
        if kind == "bytes":
            from ._values import byte_value
            payload = bytes(byte_value(args.pop(1)))
            if not payload or len(payload) > self._local_buffer:
                return _codes.INVALID_PARAMS
        try:
            return link.call(method, args, payload)
        except LinkError as e:
            _codes.log.error("%s: the real client: %s", method, e)
            if method == "health_check":
                return _codes.HC_MASTER_UNREACHABLE
            return _failed(method, args, _codes.RPC_FAIL)

    return call


def install(cls):
    """Gives ``cls`` (``MooncakeDistributedStore``) its dummy forms: every method of
    :data:`CALLS` goes to the real client while ``self._dummy`` is set."""
    for method in CALLS:
        setattr(cls, method, _forwarded(method, getattr(cls, method)))


def register(link, ptr, size):
    """A dummy client's ``register_buffer`` over ``link``: the host memory holding the buffer
    is shared with the real client (once); it must come from ``MooncakeHostMemAllocator``."""
    ptr, size = operator.index(ptr), operator.index(size)
    region = _memory.shared_region(ptr, size)
    if region is None:
        _codes.log.error("register_buffer: a dummy client registers only memory of "
                         "MooncakeHostMemAllocator, which its real client can map")
        return _codes.INVALID_PARAMS
    base, length, fd = region
    try:
        code = link.share(base, length, fd)
        return code if code != 0 else link.register(ptr, size)
    except LinkError as e:
        _codes.log.error("register_buffer: the real client: %s", e)
        return _codes.RPC_FAIL


def alloc_pool(store, size):
    """A dummy client's ``alloc_from_mem_pool``: ``size`` bytes of shared host memory, within
    ``setup_dummy``'s ``mem_pool_size`` in all; 0 when that is spent (or on a bad size)."""
    link = store._dummy
    try:
        size = operator.index(size)
    except TypeError:
        _codes.log.error("alloc_from_mem_pool: size %r is not an int", size)
        return 0
    with link.lock:
        if size <= 0 or sum(link.pool_sizes.values()) + size > link.pool_limit:
            _codes.log.error("alloc_from_mem_pool: %d bytes do not fit the memory pool of %d",
                             size, link.pool_limit)
            return 0
        addr = link.pool.alloc(size)
        if addr:
            link.pool_sizes[addr] = size
    return addr


def free_pool(link):
    """Frees what ``alloc_pool`` handed out over ``link`` (closed: the real client lets go)."""
    for addr in list(link.pool_sizes):
        if link.pool.free(addr) == 0:
            del link.pool_sizes[addr]
