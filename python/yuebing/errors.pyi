"""Type stubs of yuebing.errors: one class per error code (see errors.py; the classes are
made from the native table of codes, and tests/test_errors.py checks this file against it)."""

from typing import Dict, Type

__all__: list[str]

class YuebingError(Exception):
    """An error yuebing reported: ``.code`` (int, negative) and ``.name`` (str) say which."""
    code: int
    name: str
    def __init__(self, message: str = ..., code: int | None = ..., name: str | None = ...) -> None: ...

ERRORS_BY_CODE: Dict[int, Type[YuebingError]]
ERRORS_BY_NAME: Dict[str, Type[YuebingError]]

class Internal(YuebingError):
    """Code -1."""
class SegmentNotFound(YuebingError):
    """Code -101."""
class SegmentAlreadyExists(YuebingError):
    """Code -102."""
class NoAvailableHandle(YuebingError):
    """Code -200."""
class InvalidVersion(YuebingError):
    """Code -300."""
class InvalidParams(YuebingError, ValueError):
    """Code -600."""
class IllegalClient(YuebingError):
    """Code -601."""
class InvalidWrite(YuebingError):
    """Code -700."""
class ReplicaNotReady(YuebingError):
    """Code -703."""
class ObjectNotFound(YuebingError, KeyError):
    """Code -704."""
class ObjectAlreadyExists(YuebingError):
    """Code -705."""
class ObjectHasLease(YuebingError):
    """Code -706."""
class LeaseExpired(YuebingError):
    """Code -707."""
class ObjectHasReplicationTask(YuebingError):
    """Code -708."""
class WriteInProgress(YuebingError):
    """Code -714."""
class NotLeader(YuebingError):
    """Code -1010."""
class Io(YuebingError):
    """Code -1103."""
class TaskNotFound(YuebingError):
    """Code -1400."""
class TaskPendingLimitExceeded(YuebingError):
    """Code -1401."""
class Corrupt(YuebingError):
    """Code -1500."""
class Timeout(YuebingError, TimeoutError):
    """Code -4004."""
class StoreTimeout(Timeout):
    """Code -1501."""
class DiskTierFull(YuebingError):
    """Code -1502."""
class RpcTimeout(Timeout):
    """Code -2001."""
class FrameTooLarge(YuebingError):
    """Code -2002."""
class RpcOverloaded(YuebingError):
    """Code -2003."""
class Unauthenticated(YuebingError):
    """Code -2004."""
class RpcVersionMismatch(YuebingError):
    """Code -2005."""
class UnknownService(YuebingError):
    """Code -2006."""
class Connect(YuebingError):
    """Code -2007."""
class ConnectionLost(YuebingError):
    """Code -2008."""
class ShuttingDown(YuebingError):
    """Code -2009."""
class Protocol(YuebingError):
    """Code -2010."""
class Server(YuebingError):
    """Code -2011."""
class InvalidEndpoint(YuebingError):
    """Code -2012."""
class Bind(YuebingError):
    """Code -2013."""
class NoEndpoint(YuebingError):
    """Code -2014."""
class InvalidToken(YuebingError):
    """Code -2015."""
class EngineInvalidArgument(YuebingError, ValueError):
    """Code -3001."""
class TooManyRequests(YuebingError):
    """Code -3002."""
class AddressNotRegistered(YuebingError):
    """Code -3003."""
class Busy(YuebingError):
    """Code -3004."""
class AddressOverlapped(YuebingError):
    """Code -3007."""
class EngineSegmentNotFound(YuebingError):
    """Code -3203."""
class StaleSegment(YuebingError):
    """Code -3204."""
class OutOfMemory(YuebingError):
    """Code -3302."""
class TransferTimeout(Timeout):
    """Code -3500."""
class Canceled(YuebingError):
    """Code -4003."""
class TransferCanceled(Canceled):
    """Code -3501."""
class UnknownBatch(YuebingError):
    """Code -3502."""
class EngineOverloaded(YuebingError):
    """Code -3503."""
class OutOfBounds(YuebingError):
    """Code -3504."""
class PeerFailed(YuebingError):
    """Code -3505."""
class NotificationQueueFull(YuebingError):
    """Code -3506."""
class GpuNotBuilt(YuebingError):
    """Code -3507."""
class EngineVersionMismatch(YuebingError):
    """Code -3508."""
class EngineIo(YuebingError):
    """Code -3509."""
class BufferRetired(YuebingError):
    """Code -3510."""
class AccessDenied(YuebingError):
    """Code -3511."""
class NoRdmaDevice(YuebingError):
    """Code -3512."""
class NoCudaDriver(YuebingError):
    """Code -3513."""
class WouldBlockBridge(YuebingError):
    """Code -4001."""
class Shutdown(YuebingError):
    """Code -4002."""
class Forked(YuebingError):
    """Code -4005."""
class CurrentThreadRuntime(YuebingError):
    """Code -4006."""
class Start(YuebingError):
    """Code -4007."""
class Panicked(YuebingError):
    """Code -4008."""
class InvalidHandle(YuebingError):
    """Code -4009."""
class InvalidArgument(YuebingError, ValueError):
    """Code -4010. An argument out of its domain (an empty name, a null address, a zero or
    overflowing length, a range that wraps, read-only memory as a destination), raised where it
    enters; the message names it. Nothing was changed."""
class TooManyHandles(YuebingError):
    """Code -4011."""
class EtcdNotBuilt(YuebingError):
    """Code -4012."""
class EtcdInvalidConfig(YuebingError, ValueError):
    """Code -5001."""
class EtcdUnavailable(YuebingError):
    """Code -5002."""
class EtcdTimeout(Timeout):
    """Code -5003."""
class EtcdUnauthenticated(YuebingError):
    """Code -5004."""
class EtcdRejected(YuebingError):
    """Code -5005."""
class EtcdLeaseNotFound(YuebingError):
    """Code -5006."""
class EtcdCompacted(YuebingError):
    """Code -5007."""
class EtcdWatchCanceled(YuebingError):
    """Code -5008."""
class EtcdBadValue(YuebingError):
    """Code -5009."""
class EtcdClient(YuebingError):
    """Code -5011."""
class EtcdDeposed(YuebingError):
    """Code -5012."""
class EtcdLogConflict(YuebingError):
    """Code -5013."""
class EtcdLogGap(YuebingError):
    """Code -5014."""
class EtcdLogTruncated(YuebingError):
    """Code -5015."""
class EtcdLeaseLost(YuebingError):
    """Code -5016."""
