"""Type stubs of yuebing._native, the native module (import ``yuebing``, not this).

Arguments are checked where they enter: a wrong type raises ``TypeError``; a value out of its
domain (an empty name or key, a null address, a zero or overflowing length, a range that wraps,
a read-only buffer where the call writes) raises ``yuebing.InvalidArgument`` (a ``ValueError``)
naming the argument, before anything is changed.

Read-only memory (``bytes``, a read-only ``mmap`` or ``memoryview``, a numpy array that is not
writeable) may be registered (``Engine.register`` with ``remote`` None or "r",
``Store.register_buffer``) and used as a source. Nothing writes it: a call whose destination
lies in a read-only registration (``Engine.read``, a "read" of ``Engine.submit``, a write to the
engine's own segment that lands in it, ``Store.get_into``, ``Store.batch_get_into``) raises
``InvalidArgument`` before any byte moves, and ``Engine.register(..., remote="w"|"rw")`` of
read-only memory raises ``InvalidArgument``. An int address is taken as writable memory: its
caller vouches for it.
"""

import os
from typing import Any, Callable, Optional, Sequence, Union

from typing_extensions import Buffer as _BufferProtocol

from .errors import YuebingError

__version__: str
#: The optional parts this package was built with, sorted: "etcd" (etcd:// master addresses),
#: "rdma" (the rdma transport, ``rdma_nics=``).
FEATURES: list[str]

#: Any object with the buffer protocol (bytes, bytearray, memoryview, numpy arrays, ...).
BufferLike = _BufferProtocol
#: Memory for the zero-copy calls: a buffer, or an int address (then a size must be given).
MemoryLike = Union[_BufferProtocol, int]
#: A size in bytes: an int, or text such as "64MiB", "1G".
SizeLike = Union[int, str]

def error_codes() -> list[tuple[int, str]]:
    """Every named error code of yuebing with its name."""

class ObjectInfo:
    """One object of ``Store.list``."""
    @property
    def key(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def replicas(self) -> int: ...

class Replicas:
    """Where an object's replicas are (``Store.replicas``)."""
    @property
    def size(self) -> int: ...
    @property
    def replicas(self) -> list[tuple[str, int, int]]:
        """``(node, addr, len)`` of each replica, in placement order."""
    @property
    def lease_ms(self) -> int: ...
    def __len__(self) -> int: ...

class ReplicaTask:
    """A copy or move task as the master reports it (``Store.query_task``)."""
    @property
    def id(self) -> tuple[int, int]:
        """Mooncake's pair of halves."""
    @property
    def kind(self) -> str:
        """``"REPLICA_COPY"`` or ``"REPLICA_MOVE"``."""
    @property
    def state(self) -> str:
        """``"PENDING"``, ``"PROCESSING"``, ``"SUCCESS"`` or ``"FAILED"``."""
    @property
    def key(self) -> str: ...
    @property
    def created_ms(self) -> int: ...
    @property
    def updated_ms(self) -> int: ...
    @property
    def client(self) -> str:
        """The id of the client that runs it (hex)."""
    @property
    def message(self) -> str:
        """Why it failed; empty otherwise."""

class Location:
    """An object found by ``Store.locate`` (or ``Store.get_or_locate``), not read yet, under the
    read lease the lookup took: read it with ``Store.read_located`` before the lease ends."""
    @property
    def key(self) -> str: ...
    @property
    def size(self) -> int: ...

class Reservation:
    """Space reserved for one object by ``Store.batch_reserve``, not readable yet: write it with
    ``Store.batch_write_reserved``, then ``Store.batch_publish`` or ``Store.batch_revoke`` it."""
    @property
    def key(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def sealed(self) -> bool: ...

class Store:
    """A client of a yuebing store (see ``help(yuebing.Store)``)."""
    def __init__(
        self,
        masters: Union[str, Sequence[str]],
        *,
        token: Optional[str] = None,
        store_size: Optional[SizeLike] = None,
        staging_size: Optional[SizeLike] = None,
        timeout: float = 30.0,
        prefault: bool = True,
        bind: str = "127.0.0.1:0",
        transport: Optional[str] = None,
        rdma_nics: Optional[str] = None,
        replicas: int = 1,
        engine: Optional["Engine"] = None,
        lease_cache: int = 0,
        grant_size: Optional[SizeLike] = None,
    ) -> None: ...
    def put(
        self,
        key: str,
        value: BufferLike,
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> None: ...
    def upsert(
        self,
        key: str,
        value: BufferLike,
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> None: ...
    def put_from(
        self,
        key: str,
        buffer: MemoryLike,
        size: Optional[int] = None,
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> None: ...
    def upsert_from(
        self,
        key: str,
        buffer: MemoryLike,
        size: Optional[int] = None,
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> None: ...
    def put_parts(
        self,
        key: str,
        *parts: BufferLike,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> None: ...
    def upsert_parts(
        self,
        key: str,
        *parts: BufferLike,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> None: ...
    def get(self, key: str, *, timeout: Optional[float] = None, uncached: bool = False) -> bytes: ...
    def get_into(
        self, key: str, buffer: MemoryLike, size: Optional[int] = None, *, timeout: Optional[float] = None,
        uncached: bool = False,
    ) -> int:
        """Reads ``key`` into writable ``buffer``; returns the value's size. A read-only buffer,
        or memory in a read-only registration, raises ``InvalidArgument``."""
    def locate(self, key: str, *, timeout: Optional[float] = None) -> Location:
        """Finds ``key`` and takes its read lease, without reading it."""
    def get_or_locate(
        self, key: str, inline_max: int = 65535, *, timeout: Optional[float] = None
    ) -> Union[bytes, Location]:
        """The value when it has at most ``inline_max`` bytes, else its ``Location`` (not read)."""
    def read_located(
        self,
        location: Location,
        buffer: MemoryLike,
        size: Optional[int] = None,
        *,
        timeout: Optional[float] = None,
    ) -> int:
        """Reads a located object into writable ``buffer``; returns its size."""
    def exist(self, key: str, *, timeout: Optional[float] = None) -> bool: ...
    def get_size(self, key: str, *, timeout: Optional[float] = None) -> int: ...
    def remove(self, key: str, force: bool = False, *, timeout: Optional[float] = None) -> None: ...
    def remove_all(self, force: bool = False, *, timeout: Optional[float] = None) -> int: ...
    def remove_by_regex(self, pattern: str, force: bool = False, *, timeout: Optional[float] = None) -> int: ...
    def batch_remove(
        self, keys: Sequence[str], force: bool = False, *, timeout: Optional[float] = None
    ) -> list[Optional[YuebingError]]: ...
    def replicas(self, key: str, *, timeout: Optional[float] = None) -> Replicas: ...
    def create_copy_task(self, key: str, targets: Sequence[str], *, timeout: Optional[float] = None) -> tuple[int, int]:
        """Adds a replica of ``key`` on each target node in the background; the task's id."""
    def create_move_task(self, key: str, source: str, target: str, *, timeout: Optional[float] = None) -> tuple[int, int]:
        """Moves ``key``'s replica on ``source`` to ``target`` in the background; the task's id."""
    def query_task(self, task_id: tuple[int, int], *, timeout: Optional[float] = None) -> ReplicaTask:
        """Where a copy or move task is; ``TaskNotFound`` for an unknown id."""
    def batch_replicas(self, keys: Sequence[str], *, timeout: Optional[float] = None) -> list[Union[Replicas, YuebingError]]: ...
    def health_check(self, *, timeout: Optional[float] = None) -> int:
        """0 healthy, 1 closed, 2 master unreachable (Mooncake's numbers)."""
    def list(self, prefix: str = "", limit: int = 1000, *, timeout: Optional[float] = None) -> list[ObjectInfo]: ...
    def stats(self, *, timeout: Optional[float] = None) -> dict[str, Union[int, float]]: ...
    def batch_put(
        self,
        keys: Sequence[str],
        values: Sequence[BufferLike],
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> list[Optional[YuebingError]]: ...
    def batch_put_from(
        self,
        keys: Sequence[str],
        buffers: Sequence[MemoryLike],
        sizes: Optional[Sequence[Optional[int]]] = None,
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> list[Optional[YuebingError]]: ...
    def batch_put_from_buffers(
        self,
        keys: Sequence[str],
        buffers: Sequence[Sequence[MemoryLike]],
        sizes: Optional[Sequence[Sequence[Optional[int]]]] = None,
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> list[Optional[YuebingError]]:
        """Stores each key's value gathered from its buffers, ``buffers[i]`` end to end (per-layer
        KV blocks), without a copy."""
    def batch_upsert_from_buffers(
        self,
        keys: Sequence[str],
        buffers: Sequence[Sequence[MemoryLike]],
        sizes: Optional[Sequence[Sequence[Optional[int]]]] = None,
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> list[Optional[YuebingError]]:
        """As ``batch_put_from_buffers``, replacing existing values."""
    def batch_upsert(
        self,
        keys: Sequence[str],
        values: Sequence[BufferLike],
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> list[Optional[YuebingError]]: ...
    def batch_upsert_from(
        self,
        keys: Sequence[str],
        buffers: Sequence[MemoryLike],
        sizes: Optional[Sequence[Optional[int]]] = None,
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
    ) -> list[Optional[YuebingError]]: ...
    def batch_get(
        self, keys: Sequence[str], *, timeout: Optional[float] = None, uncached: bool = False
    ) -> list[Union[bytes, YuebingError]]: ...
    def batch_get_into(
        self,
        keys: Sequence[str],
        buffers: Sequence[MemoryLike],
        sizes: Optional[Sequence[Optional[int]]] = None,
        *,
        timeout: Optional[float] = None,
        uncached: bool = False,
    ) -> list[Union[int, YuebingError]]:
        """Reads each key into its writable buffer. A read-only buffer, or memory in a read-only
        registration, raises ``InvalidArgument`` naming it (``buffers[i]``) and nothing is read."""
    def batch_get_into_buffers(
        self,
        keys: Sequence[str],
        buffers: Sequence[Sequence[MemoryLike]],
        sizes: Optional[Sequence[Sequence[Optional[int]]]] = None,
        *,
        timeout: Optional[float] = None,
        uncached: bool = False,
    ) -> list[Union[int, YuebingError]]:
        """Reads each key into its buffers, filled in order; one entry per key: its size, or
        ``InvalidParams`` when they hold less than the object."""
    def batch_get_ranges(
        self,
        keys: Sequence[str],
        buffers: Sequence[MemoryLike],
        fragments: Sequence[Sequence[tuple[int, int, int]]],
        sizes: Optional[Sequence[Optional[int]]] = None,
        *,
        timeout: Optional[float] = None,
        uncached: bool = False,
    ) -> list[list[Union[int, YuebingError]]]:
        """Reads parts of objects: each ``(at, offset, length)`` of ``fragments[i]`` reads
        ``length`` bytes at ``offset`` of ``keys[i]`` into ``buffers[i]`` at ``at``. One list per
        item, one entry per fragment: its length or why it was not read (a fragment outside its
        buffer or object is ``InvalidParams`` there, the others still read)."""
    def batch_replica_clear(
        self, keys: Sequence[str], node: str = "", *, timeout: Optional[float] = None
    ) -> list[str]:
        """Drops idle objects' replicas on ``node`` (all of them for ""); the keys cleared."""
    def mount_space(self, size: Union[int, str], *, timeout: Optional[float] = None) -> int:
        """Allocates ``size`` bytes and mounts them as more store space; returns its id."""
    def serve_admin(self, bind: str = "127.0.0.1:0") -> str:
        """Serves ``/health``, ``/ready`` and ``/metrics`` on ``bind`` until ``close``; returns
        the address it listens on."""
    def mount_file(
        self,
        path: Union[str, os.PathLike[str]],
        size: Union[int, str],
        offset: int = 0,
        *,
        timeout: Optional[float] = None,
    ) -> int:
        """Maps ``size`` bytes of the file at ``path`` from ``offset`` (page-aligned) and mounts
        them as more store space; returns its id (for ``unmount_space``)."""
    def unmount_space(
        self, space: int, grace: float = 0.0, *, timeout: Optional[float] = None
    ) -> None:
        """Unmounts a range of store space; its objects stay readable for ``grace`` seconds."""
    def spaces(self) -> list[tuple[int, int, int]]:
        """The ranges of store space mounted now: ``(id, address, size)`` each."""
    def batch_locate(
        self, keys: Sequence[str], *, timeout: Optional[float] = None
    ) -> list[Union[Location, YuebingError]]:
        """Finds each key and takes its read lease, without reading it: one master round trip."""
    def batch_read_located(
        self,
        locations: Sequence[Location],
        buffers: Sequence[Sequence[MemoryLike]],
        offsets: Sequence[Sequence[int]],
        sizes: Optional[Sequence[Sequence[Optional[int]]]] = None,
        *,
        timeout: Optional[float] = None,
    ) -> list[Union[int, YuebingError]]:
        """Reads ``buffers[i][j]``'s length from ``offsets[i][j]`` of ``locations[i]``'s object,
        without a master round trip; the bytes read per location."""
    def batch_reserve(
        self,
        keys: Sequence[str],
        sizes: Sequence[int],
        *,
        timeout: Optional[float] = None,
        replicas: Optional[int] = None,
        preferred: Optional[Sequence[str]] = None,
        soft_pin: bool = False,
        hard_pin: bool = False,
        upsert: bool = False,
    ) -> list[Union[Reservation, YuebingError]]:
        """Reserves space for each object without writing it: one master round trip."""
    def batch_write_reserved(
        self,
        reservations: Sequence[Reservation],
        buffers: Sequence[Sequence[MemoryLike]],
        offsets: Sequence[Sequence[int]],
        sizes: Optional[Sequence[Sequence[Optional[int]]]] = None,
        *,
        timeout: Optional[float] = None,
    ) -> list[Union[int, YuebingError]]:
        """Writes ``buffers[i][j]`` to ``offsets[i][j]`` of ``reservations[i]``'s object, without
        a master round trip; the bytes written per reservation."""
    def batch_publish(
        self, reservations: Sequence[Reservation], *, timeout: Optional[float] = None
    ) -> list[Optional[YuebingError]]:
        """Makes each reserved object readable once its writes under way ended."""
    def batch_revoke(
        self, reservations: Sequence[Reservation], *, timeout: Optional[float] = None
    ) -> list[Optional[YuebingError]]:
        """Drops each reserved object once its writes under way ended."""
    def batch_exist(self, keys: Sequence[str], *, timeout: Optional[float] = None) -> list[Union[bool, YuebingError]]: ...
    def register_buffer(self, buffer: MemoryLike, size: Optional[int] = None) -> int:
        """Registers ``buffer`` until ``unregister_buffer``; returns its address. Read-only memory
        is registered as a source only (``get_into`` into it raises ``InvalidArgument``)."""
    def unregister_buffer(self, buffer: MemoryLike) -> None: ...
    @property
    def engine(self) -> "Engine": ...
    @property
    def segment_name(self) -> str: ...
    @property
    def hostname(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self, *, timeout: Optional[float] = None) -> None: ...
    def __enter__(self) -> "Store": ...
    def __exit__(self, *exc: Any) -> None: ...

class Buffer:
    """Memory the engine allocated (``Engine.allocate``).

    ``read`` and ``write`` may run while a transfer (or a peer, for a buffer allocated with
    ``remote`` rights) touches the same bytes; like ``memcpy`` racing another writer on shared
    memory, bytes a transfer writes meanwhile come out old, new or a mix, and bytes both write
    are left from either. Nothing guarantees more than that: wait for your transfers first."""
    @property
    def addr(self) -> int: ...
    @property
    def size(self) -> int: ...
    def __len__(self) -> int: ...
    def write(self, data: BufferLike, offset: int = 0) -> None:
        """Copies ``data`` (any C-contiguous buffer) in at ``offset``; ``InvalidArgument`` if it
        does not fit."""
    def read(self, offset: int = 0, length: Optional[int] = None) -> bytes:
        """Copies ``length`` bytes at ``offset`` (to the end when omitted) out;
        ``InvalidArgument`` if they are not all in the buffer."""
    def free(self) -> None: ...

class BatchStatus:
    """The status of a batch of transfers."""
    @property
    def state(self) -> str: ...
    @property
    def tasks(self) -> int: ...
    @property
    def completed(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def error(self) -> Optional[YuebingError]: ...
    @property
    def notify_error(self) -> Optional[YuebingError]: ...
    @property
    def done(self) -> bool: ...

class TaskStatus:
    """The status of one task of a batch."""
    @property
    def state(self) -> str: ...
    @property
    def bytes(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def error(self) -> Optional[YuebingError]: ...

class MessageServer:
    """A server of byte messages: listens at once; each message is handed to
    ``on_message(source, data)`` (the sender's ``ip:port``, ``bytes``) on a callback thread,
    exactly once, and its sender's ``send`` returns once that call returned. An exception the
    callback raises goes to ``sys.unraisablehook``."""
    def __init__(
        self,
        bind: str = "127.0.0.1:0",
        on_message: Optional[Callable[[str, bytes], Any]] = None,
        *,
        token: Optional[str] = None,
        max_message: Optional[SizeLike] = None,
    ) -> None: ...
    @property
    def address(self) -> str:
        """Where it listens, ``ip:port``."""
    @property
    def running(self) -> bool:
        """Whether it still serves."""
    def stop(self, grace: float = 5.0) -> bool:
        """Stops it, letting messages being handled finish for up to ``grace`` seconds; True,
        or False if it was stopped already."""
    def wait_stopped(self) -> None:
        """Blocks (GIL released, Ctrl-C interrupts) until it is stopped."""

class MessageClient:
    """Sends byte messages to ``MessageServer``s, with pooled connections per target."""
    def __init__(
        self,
        *,
        token: Optional[str] = None,
        timeout: float = 30.0,
        connections: int = 4,
        max_message: Optional[SizeLike] = None,
    ) -> None: ...
    def send(self, target: str, data: BufferLike) -> None:
        """Sends ``data`` (copied) to ``target`` (``host:port``); returns once the server's
        callback took it, raises the error otherwise."""
    def send_then(
        self, target: str, data: BufferLike, done: Callable[[Optional[YuebingError]], Any]
    ) -> None:
        """Starts a send; ``done(None)`` or ``done(error)`` is called once, on a callback
        thread."""

class Engine:
    """A Transfer Engine (see ``help(yuebing.Engine)``)."""
    def __init__(
        self,
        bind: str = "127.0.0.1:0",
        *,
        token: Optional[str] = None,
        transport: Optional[str] = None,
        shm: bool = True,
        timeout: float = 30.0,
        rdma_nics: Optional[str] = None,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def transports(self) -> list[str]:
        """The transports this engine serves, sorted: "rdma" only where the package was built
        with it and an RDMA NIC could be used."""
    def allocate(self, size: int, *, remote: Optional[str] = None, prefault: bool = True) -> Buffer: ...
    def register(self, buffer: MemoryLike, size: Optional[int] = None, *, remote: Optional[str] = None) -> int:
        """Registers ``buffer`` until ``unregister`` (local-only, or ``remote`` "r", "w", "rw");
        returns its address. Read-only memory is a source only, and with "w" or "rw" raises
        ``InvalidArgument``."""
    def unregister(self, buffer: Union[MemoryLike, Buffer]) -> None: ...
    def open_segment(self, name: str) -> int: ...
    def close_segment(self, segment: int) -> None: ...
    def segment_buffers(self, segment: int) -> list[tuple[int, int, str]]: ...
    def write(
        self, local: MemoryLike, segment: int, remote_addr: int, length: Optional[int] = None, *, timeout: Optional[float] = None
    ) -> None:
        """Writes ``local`` to ``remote_addr``; a target in this engine's own segment that lies
        in a read-only registration raises ``InvalidArgument``."""
    def read(
        self, local: MemoryLike, segment: int, remote_addr: int, length: Optional[int] = None, *, timeout: Optional[float] = None
    ) -> None:
        """Reads into writable ``local``; memory in a read-only registration raises
        ``InvalidArgument``."""
    def allocate_batch(self, capacity: int) -> int: ...
    def submit(
        self,
        batch: int,
        requests: Sequence[tuple[str, int, int, int, int]],
        *,
        notify: Optional[bytes] = None,
        timeout: Optional[float] = None,
    ) -> tuple[int, int]:
        """Starts the requests; returns their task indices. A bad request (a null address,
        length 0, a range that wraps, a "read" into a read-only registration, a "write" to this
        engine's own segment that lands in one) raises ``InvalidArgument`` naming it
        (``requests[i]``), and none starts."""
    def wait(self, batch: int) -> BatchStatus: ...
    def status(self, batch: int) -> BatchStatus: ...
    def task_status(self, batch: int, task: int) -> TaskStatus: ...
    def cancel(self, batch: int) -> int:
        """Cancels the batch's unfinished tasks and returns how many; each is final only once
        its transfer stopped. The batch stays usable: tasks submitted after the cancel run
        normally (one racing it may be canceled or not, but always ends); its aggregate status
        keeps counting the canceled ones."""
        ...
    def free_batch(self, batch: int) -> None: ...
    def take_notifications(self) -> list[tuple[str, bytes]]: ...
