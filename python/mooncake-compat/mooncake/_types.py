"""The value classes and enums of ``mooncake.store`` 0.3.13.post1, in pure Python."""

import enum


class ObjectDataType(enum.IntEnum):
    """What an object holds (kept for compatibility; yuebing does not use it)."""
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class SoftPinAction(enum.IntEnum):
    """Whether a put soft-pins its object: ``ENABLE`` does; ``PRESERVE`` and ``DISABLE`` do not
    (yuebing keeps no soft pin from an earlier put of the key)."""
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ReplicaStatus(enum.IntEnum):
    """A replica's state; yuebing reports only readable (``COMPLETE``) replicas."""
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class TaskType(enum.IntEnum):
    """Kinds of copy/move tasks (``QueryTaskResponse.type``)."""
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    """States of copy/move tasks (``QueryTaskResponse.status``)."""
    PENDING = 0
    PROCESSING = 1
    FAILED = 2
    SUCCESS = 3


class ReplicateConfig:
    """How a put stores its object. yuebing uses ``replica_num``, ``with_hard_pin``,
    ``soft_pin_action`` (``ENABLE`` soft-pins), ``preferred_segments`` and ``preferred_segment``;
    ``prefer_alloc_in_same_node`` makes a put fail with ``-600``, as in Mooncake; the other fields
    are accepted and ignored."""

    def __init__(self):
        self.replica_num = 1
        self.with_hard_pin = False
        self.soft_pin_action = SoftPinAction.PRESERVE
        self.soft_pin_ttl_ms = None
        self.preferred_segment = ""
        self.preferred_segments = []
        self.prefer_alloc_in_same_node = False
        self.data_type = ObjectDataType.UNKNOWN
        self.dfs_replica_num = 0
        self.nof_replica_num = 0
        self.preferred_nof_segments = []
        self.group_ids = None

    def preferred(self):
        """The nodes to place on first: ``preferred_segments``, else ``preferred_segment``."""
        if self.preferred_segments:
            return [str(s) for s in self.preferred_segments]
        return [self.preferred_segment] if self.preferred_segment else []

    def __str__(self):
        ttl = "default" if self.soft_pin_ttl_ms is None else str(self.soft_pin_ttl_ms)
        return (f"ReplicateConfig: {{ replica_num: {self.replica_num}, nof_replica_num: "
                f"{self.nof_replica_num}, dfs_replica_num: {self.dfs_replica_num}, soft_pin_action: "
                f"{SoftPinAction(self.soft_pin_action).name}, soft_pin_ttl_ms: {ttl}, with_hard_pin: "
                f"{int(bool(self.with_hard_pin))}, preferred_segments: {list(self.preferred_segments)}, "
                f"preferred_nof_segments: {list(self.preferred_nof_segments)}, "
                f"prefer_alloc_in_same_node: {int(bool(self.prefer_alloc_in_same_node))}, "
                f"data_type: {ObjectDataType(self.data_type).name} }}")

    __repr__ = __str__

    @property
    def soft_pin_ttl_ms(self):
        """The soft pin's TTL in milliseconds, or ``None`` for the master's default."""
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, value):
        # Mooncake's field is an optional uint64: anything else is a TypeError there.
        if value is not None and (not isinstance(value, int) or not 0 <= value < 1 << 64):
            raise TypeError(f"soft_pin_ttl_ms: expected None or an int in 0 … 2**64-1, "
                            f"not {value!r}")
        self._soft_pin_ttl_ms = value

    def __reduce__(self):
        raise TypeError("cannot pickle 'ReplicateConfig' object")


class Descriptor:
    """Where a memory replica's bytes are: ``buffer_address`` inside the node
    ``transport_endpoint``, ``size`` bytes."""

    def __init__(self):
        self.buffer_address = 0
        self.size = 0
        self.transport_endpoint = ""

    def __repr__(self):
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint}>")


class MemoryDescriptor:
    """A memory replica: its ``buffer_descriptor``."""

    def __init__(self, descriptor):
        self.buffer_descriptor = descriptor


class ReplicaDescriptor:
    """One replica of an object (always a complete memory replica in yuebing)."""

    def __init__(self, node, addr, size):
        d = Descriptor()
        d.buffer_address, d.size, d.transport_endpoint = addr, size, node
        self._memory = MemoryDescriptor(d)
        self.status = ReplicaStatus.COMPLETE

    def is_memory_replica(self):
        return True

    def is_disk_replica(self):
        return False

    def is_local_disk_replica(self):
        return False

    def get_memory_descriptor(self):
        return self._memory

    def get_disk_descriptor(self):
        raise RuntimeError("Expected DiskDescriptor")


class DiskDescriptor:
    """Where a disk replica is (yuebing keeps none yet: replicas are memory replicas)."""

    def __init__(self):
        self.file_path = ""
        self.object_size = 0


class QueryTaskResponse:
    """What ``query_task`` reports of a copy or move task."""

    def __init__(self):
        self.id = None
        self.type = TaskType.REPLICA_COPY
        self.status = TaskStatus.PENDING
        self.created_at_ms_epoch = 0
        self.last_updated_at_ms_epoch = 0
        self.assigned_client = None
        self.message = ""

    def __repr__(self):
        return (f"<QueryTaskResponse id={self.id} type={self.type.name} "
                f"status={self.status.name} message={self.message!r}>")


class ParallelAxis:
    """One axis of a tensor's parallel layout (for the tensor methods, which need torch)."""

    def __init__(self):
        self.kind = ""
        self.rank = 0
        self.size = 1
        self.split_dim = 0
        self.expert_id = None
        self.stage_id = None


class TensorParallelism:
    """A tensor's parallel layout: its ``axes``."""

    def __init__(self, axes=None):
        self.axes = list(axes or [])


class ReadTarget:
    """How a tensor read lays out what it reads: ``mode`` and ``parallelism``."""

    def __init__(self):
        self.mode = ""
        self.parallelism = TensorParallelism()


def _needs(name, what):
    """A class of the stock wheel that yuebing-mooncake does not provide: making one raises
    ``NotImplementedError`` saying why."""
    def refuse(self, *args, **kwargs):
        raise NotImplementedError(f"mooncake.store.{name}: {what}")
    return type(name, (), {"__init__": refuse, "__doc__": f"Not provided: {what}."})


MooncakeDistributedNoFRegister = _needs(
    "MooncakeDistributedNoFRegister",
    "NVMe-over-Fabrics SSD registration is not in yuebing (its SSD tier is planned, issue 31)")
