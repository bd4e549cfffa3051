"""``mooncake.engine`` on yuebing: ``TransferEngine`` with Mooncake 0.3.13.post1's methods and
integer results, over ``yuebing.Engine``.

Segment names are ``host:port`` (the engine's control address), as with Mooncake's
``P2PHANDSHAKE``; descriptors are exchanged peer to peer whatever metadata server is named.
Memory given to ``register_memory`` and ``allocate_managed_buffer`` may be read and written by
peers, as in Mooncake.
"""

import enum
import itertools
import json
import logging
import threading

import yuebing

from . import _codes, _hostname, _setup
from ._codes import ERR_INVALID_ARGUMENT
# Mooncake's Python face of coro_rpc (see _rpc.py).
from ._rpc import (CoroRPCInterface, ReceivedData, ReceivedTensor, RpcInterface,
                   create_rpc_client, create_rpc_server)
from ._segment import SharedSegment

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "InnerTransferEngine", "Read",
           "Write", "SUPPORT_CUDA", "SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_INTRA_NVLINK",
           "SUPPORT_MNNVL", "SUPPORT_MUSA", "RpcInterface", "CoroRPCInterface", "ReceivedData",
           "ReceivedTensor", "create_rpc_client", "create_rpc_server", "SharedSegment"]

SUPPORT_CUDA = SUPPORT_EFA = SUPPORT_HIP = SUPPORT_INTRA_NVLINK = SUPPORT_MNNVL = False
SUPPORT_MUSA = False

#: A failed probe of an unreachable peer (Mooncake's ERR_SOCKET).
ERR_SOCKET = -102


class TransferOpcode(enum.Enum):
    """The direction of a transfer. Like Mooncake's, it is not an ``int`` (``Read == 0`` is
    false), though ``int(op)`` gives its value."""
    Read = 0
    Write = 1

    def __int__(self):
        return self.value


Read, Write = TransferOpcode.Read, TransferOpcode.Write


class TransferNotify:
    """A notification sent with a transfer: ``name`` and ``msg``."""

    def __init__(self, name="", msg=""):
        self.name, self.msg = name, msg

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other):
        return isinstance(other, TransferNotify) and (self.name, self.msg) == (other.name, other.msg)

    def encode(self):
        """The message sent for it."""
        return json.dumps({"name": self.name, "msg": self.msg}).encode()

    @staticmethod
    def decode(sender, message):
        """A received message as a ``TransferNotify`` (one not sent by this package keeps the
        sender's segment name and the message's text)."""
        try:
            d = json.loads(message)
            return TransferNotify(str(d["name"]), str(d["msg"]))
        except (ValueError, KeyError, TypeError):
            return TransferNotify(sender, message.decode(errors="replace"))


class InnerTransferEngine:
    """What ``TransferEngine.get_engine()`` returns, for ``MooncakeDistributedStore.setup(...,
    engine=...)``: the store then runs on that engine."""

    def __init__(self, engine):
        self.engine = engine


def _transfer_code(err, what):
    """-1 (Mooncake's failure of any transfer call), logging yuebing's error."""
    _codes.log.warning("%s: %s (yuebing code %d)", what, err, err.code)
    return ERR_INVALID_ARGUMENT


class TransferEngine:
    """Mooncake's Transfer Engine, on yuebing. ``initialize`` it, register memory, then read
    and write peers' memory by segment name."""

    TransferOpcode = TransferOpcode

    def __init__(self):
        self._engine = None
        self._lock = threading.Lock()
        self._managed = {}
        self._registered = {}
        self._segments = {}
        self._batches = {}
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ lifecycle

    def initialize(self, local_hostname, metadata_server, protocol, device_name, /):
        """Starts the engine on ``local_hostname``'s host; 0, or -1."""
        try:
            _setup.metadata_kind(metadata_server)
        except _setup.SetupError as e:
            _codes.log.error("initialize: %s", e)
            return ERR_INVALID_ARGUMENT
        if protocol not in _setup.PROTOCOLS:
            _codes.log.error("initialize: protocol %r is not supported (only 'tcp' or 'rdma')",
                             protocol)
            return ERR_INVALID_ARGUMENT
        # The name peers use is where the engine listens: a port given in local_hostname is
        # bound (as Mooncake's P2P handshake listens there), else any free one; a named port
        # that is taken falls back to a free one, as Mooncake's does (get_rpc_port says which).
        host, port = _hostname.split(local_hostname)
        engine = None
        nics = _setup.rdma_nics(protocol, device_name or "")
        for bind in dict.fromkeys([port or 0, 0]):
            try:
                engine = yuebing.Engine(f"{host}:{bind}", rdma_nics=nics)
                break
            except yuebing.InvalidArgument as e:
                _codes.log.error("initialize: %s", e)
                return ERR_INVALID_ARGUMENT
            except (yuebing.YuebingError, ValueError) as e:
                _codes.log.log(logging.WARNING if bind else logging.ERROR,
                               "initialize on port %d: %s", bind, e)
        if engine is None:
            return ERR_INVALID_ARGUMENT
        _setup.say_if_rdma_is_off("initialize", protocol, engine)
        with self._lock:
            self._engine = engine
            self._managed, self._registered, self._segments, self._batches = {}, {}, {}, {}
        return 0

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name,
                       metadata_type, /):
        """``initialize`` with the metadata server's type given apart."""
        if "://" not in metadata_server and metadata_server != "P2PHANDSHAKE":
            metadata_server = f"{metadata_type}://{metadata_server}"
        return self.initialize(local_hostname, metadata_server, protocol, device_name)

    def _need(self):
        if self._engine is None:
            raise RuntimeError("the TransferEngine is not initialized (call initialize first)")
        return self._engine

    def get_rpc_port(self):
        """The port of this engine's segment name."""
        return int(self._need().name.rsplit(":", 1)[1])

    def get_engine(self):
        """This engine, for ``MooncakeDistributedStore.setup(..., engine=...)``."""
        return InnerTransferEngine(self._need())

    def get_engine_ptr(self):
        """A non-zero number naming this engine."""
        return id(self._need())

    def get_local_topology(self, device_name=None):
        """The devices the engine uses, as Mooncake's JSON (one CPU location, no NICs)."""
        return json.dumps({"cpu:0": [[], []]}, indent="\t") + "\n"

    # ------------------------------------------------------------------ memory

    def register_memory(self, buffer_addr, capacity, location="*"):
        """Registers memory for peers to read and write; 0, or -7 for an overlap."""
        try:
            self._need().register(buffer_addr, capacity, remote="rw")
        except yuebing.YuebingError as e:
            return _codes.engine_code(e.code, "register_memory")
        with self._lock:
            self._registered[buffer_addr] = capacity
        return 0

    def unregister_memory(self, buffer_addr, /):
        """Ends a registration; 0, or -3 for an address not registered."""
        try:
            self._need().unregister(buffer_addr)
        except yuebing.YuebingError as e:
            return _codes.engine_code(e.code, "unregister_memory")
        with self._lock:
            self._registered.pop(buffer_addr, None)
        return 0

    def batch_register_memory(self, buffer_addresses, capacities, location="*"):
        """``register_memory`` for each; 0, or the first failure's code."""
        if len(buffer_addresses) != len(capacities):
            return ERR_INVALID_ARGUMENT
        for addr, cap in zip(buffer_addresses, capacities):
            rc = self.register_memory(addr, cap, location)
            if rc != 0:
                return rc
        return 0

    def batch_unregister_memory(self, buffer_addresses, /):
        """``unregister_memory`` for each; 0, or the first failure's code."""
        codes = [self.unregister_memory(a) for a in buffer_addresses]
        return next((c for c in codes if c != 0), 0)

    def allocate_managed_buffer(self, length, /):
        """Memory of the engine's, registered for peers; its address, or 0."""
        try:
            buf = self._need().allocate(length, remote="rw")
        except (yuebing.YuebingError, ValueError) as e:
            _codes.log.error("allocate_managed_buffer: %s", e)
            return 0
        with self._lock:
            self._managed[buf.addr] = buf
        return buf.addr

    def free_managed_buffer(self, buffer_addr, length, /):
        """Frees memory of ``allocate_managed_buffer``; 0."""
        with self._lock:
            buf = self._managed.pop(buffer_addr, None)
        if buf is not None:
            buf.free()
        return 0

    def _managed_at(self, addr, length):
        """The managed buffer holding ``[addr, addr + length)`` and the offset there."""
        with self._lock:
            for base, buf in self._managed.items():
                if base <= addr and addr + length <= base + buf.size:
                    return buf, addr - base
        return None, 0

    def write_bytes_to_buffer(self, dest_address, data, length, /):
        """Copies ``length`` bytes of ``data`` (bytes, or str as UTF-8) into a managed buffer;
        0, or -1 outside every managed buffer (Mooncake does not check)."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        buf, off = self._managed_at(dest_address, length)
        if buf is None or length > len(raw):
            return ERR_INVALID_ARGUMENT
        buf.write(raw[:length], off)
        return 0

    def read_bytes_from_buffer(self, source_address, length, /):
        """``length`` bytes of a managed buffer (``b""`` outside every managed buffer)."""
        buf, off = self._managed_at(source_address, length)
        return b"" if buf is None else buf.read(off, length)

    # ------------------------------------------------------------------ segments

    def _segment(self, name):
        """The open handle of segment ``name`` (opened and cached on first use)."""
        with self._lock:
            handle = self._segments.get(name)
        if handle is None:
            handle = self._need().open_segment(name)
            with self._lock:
                self._segments[name] = handle
        return handle

    def get_first_buffer_address(self, segment_name, /):
        """The address of the first memory ``segment_name`` publishes; 0 if none or unknown."""
        try:
            buffers = self._need().segment_buffers(self._segment(segment_name))
        except yuebing.YuebingError:
            return 0
        return buffers[0][0] if buffers else 0

    def send_probe(self, peer_server_name):
        """0 if the peer answers, else -102."""
        try:
            self._segment(peer_server_name)
        except yuebing.YuebingError:
            return ERR_SOCKET
        return 0

    def warmup_efa_segment(self, segment_name):
        """0 (there is no EFA)."""
        return 0

    def get_notifies(self):
        """The notifications received since the last call, oldest first."""
        return [TransferNotify.decode(frm, msg) for frm, msg in self._need().take_notifications()]

    # ------------------------------------------------------------------ transfers

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length,
                            transport_hint=""):
        """Writes ``length`` bytes at ``buffer`` to the peer's ``peer_buffer_address``; 0 or
        -1."""
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length, Write)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length,
                           transport_hint=""):
        """Reads ``length`` bytes at the peer's ``peer_buffer_address`` into ``buffer``; 0 or
        -1."""
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length, Read)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode,
                      notify=None, transport_hint=""):
        """One transfer in ``opcode``'s direction, with an optional notification; 0 or -1.
        Without a notification the local range need not be registered (as over Mooncake's
        tcp)."""
        if not isinstance(opcode, TransferOpcode):
            raise TypeError(f"opcode must be a TransferOpcode, not {type(opcode).__name__}")
        if notify is not None:
            return self.batch_transfer_sync(target_hostname, [buffer], [peer_buffer_address],
                                            [length], opcode, notify)
        if length == 0:
            return 0
        engine = self._need()
        move = engine.write if opcode is Write else engine.read
        try:
            move(buffer, self._segment(target_hostname), peer_buffer_address, length)
        except yuebing.YuebingError as e:
            return _transfer_code(e, f"transfer to {target_hostname}")
        return 0

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                  transport_hint=""):
        """Writes each range; 0, or -1 if any failed."""
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses,
                                        lengths, Write)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                 transport_hint=""):
        """Reads each range; 0, or -1 if any failed."""
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses,
                                        lengths, Read)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                            opcode, notify=None, transport_hint=""):
        """Transfers each range in ``opcode``'s direction and waits; 0, or -1."""
        batch = self._submit(target_hostname, buffers, peer_buffer_addresses, lengths, opcode,
                             notify)
        if batch is None:
            return ERR_INVALID_ARGUMENT
        if batch == 0:
            return 0
        return self.get_batch_transfer_status([batch])

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses,
                                   lengths, transport_hint=""):
        """Starts writes; a batch id for ``get_batch_transfer_status``, or 0."""
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses,
                                         lengths, Write)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses,
                                  lengths, transport_hint=""):
        """Starts reads; a batch id, or 0."""
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses,
                                         lengths, Read)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                             opcode, transport_hint=""):
        """Starts transfers in ``opcode``'s direction; a batch id, or 0."""
        if not buffers:
            return 0
        batch = self._submit(target_hostname, buffers, peer_buffer_addresses, lengths, opcode)
        return batch or 0

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length,
                              transport_hint=""):
        """Starts one write; a batch id for ``transfer_check_status``, or 0."""
        return self.batch_transfer_async(target_hostname, [buffer], [peer_buffer_address],
                                         [length], Write)

    def _submit(self, target, buffers, remotes, lengths, opcode, notify=None):
        """Submits a batch; its id, 0 for an empty one, ``None`` on failure."""
        if not isinstance(opcode, TransferOpcode):
            raise TypeError(f"opcode must be a TransferOpcode, not {type(opcode).__name__}")
        if notify is not None and not isinstance(notify, TransferNotify):
            raise TypeError(f"notify must be a TransferNotify, not {type(notify).__name__}")
        if not len(buffers) == len(remotes) == len(lengths):
            return None
        if not buffers or all(n == 0 for n in lengths) and notify is None:
            return 0
        op = "write" if opcode is Write else "read"
        engine = self._need()
        try:
            seg = self._segment(target)
            native = engine.allocate_batch(len(buffers))
            reqs = [(op, b, seg, r, n) for b, r, n in zip(buffers, remotes, lengths)]
            try:
                engine.submit(native, reqs, notify=notify.encode() if notify else None)
            except BaseException:
                engine.free_batch(native)
                raise
        except yuebing.YuebingError as e:
            _transfer_code(e, f"transfer to {target}")
            return None
        ours = next(self._ids)
        with self._lock:
            self._batches[ours] = native
        return ours

    def _take(self, batch):
        """Forgets batch ``batch`` and returns its native id (``None`` if unknown)."""
        with self._lock:
            return self._batches.pop(batch, None)

    def get_batch_transfer_status(self, batch_ids, /):
        """Waits until every batch ended and frees them; 0 if all completed, else -1. A batch
        whose wait is interrupted (Ctrl-C) stays known, to be waited for again."""
        code = 0
        for batch in batch_ids:
            with self._lock:
                native = self._batches.get(batch)
            if native is None:
                code = ERR_INVALID_ARGUMENT
                continue
            try:
                status = self._engine.wait(native)
            except yuebing.YuebingError as e:
                code = _transfer_code(e, "get_batch_transfer_status")
            else:
                if status.state != "completed":
                    _codes.log.warning("batch %d ended %s: %s", batch, status.state, status.error)
                    code = ERR_INVALID_ARGUMENT
            self._take(batch)
            self._free(native)
        return code

    def transfer_check_status(self, batch_id, /):
        """1 completed, 0 under way, -1 failed, -2 timed out; an ended batch is freed."""
        with self._lock:
            native = self._batches.get(batch_id)
        if native is None:
            return ERR_INVALID_ARGUMENT
        try:
            state = self._engine.status(native).state
        except yuebing.YuebingError as e:
            self._take(batch_id)
            return _transfer_code(e, "transfer_check_status")
        if state in ("waiting", "pending"):
            return 0
        self._take(batch_id)
        self._free(native)
        return {"completed": 1, "timeout": -2}.get(state, -1)

    def _free(self, native):
        try:
            self._engine.free_batch(native)
        except yuebing.YuebingError as e:
            _codes.log.warning("free_batch: %s", e)
