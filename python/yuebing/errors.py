"""yuebing's exceptions.

Every error yuebing reports has a stable numeric code (the same in Rust, on the wire, in the C
ABI and here) and a name. ``YuebingError`` is the base class and carries both as ``.code`` and
``.name``; each named code has a subclass of its own (``ObjectNotFound`` for -704,
``ObjectAlreadyExists`` for -705, ``ObjectHasLease`` for -706, ...). The subclasses are made
from the native module's table of codes (``yuebing._native.error_codes()``), so they cannot
drift from the codes the Rust side reports.

Some classes also derive from the built-in exception that means the same, so that code which
knows nothing of yuebing still catches them: ``ObjectNotFound`` is a ``KeyError``, the invalid
argument ones are ``ValueError`` s, and ``Timeout`` (the parent of ``StoreTimeout``,
``RpcTimeout``, ``TransferTimeout`` and ``EtcdTimeout``) is a ``TimeoutError``.
``TransferCanceled`` is a ``Canceled``.

Codes: store -1 ... -1999 (Mooncake's numbers where the meaning matches), rpc -2000 ... -2999,
engine -3000 ... -3999, bridge -4000 ... -4999, etcd -5000 ... -5999.
"""

from __future__ import annotations

from typing import Dict, Tuple, Type

from . import _native

__all__ = ["YuebingError", "ERRORS_BY_CODE", "ERRORS_BY_NAME"]


class YuebingError(Exception):
    """An error yuebing reported: ``.code`` (int, negative) and ``.name`` (str) say which."""

    #: The error's numeric code (a subclass's own code; 0 for the base class).
    code: int = 0
    #: The error's name ("ObjectNotFound", ...).
    name: str = "YuebingError"

    def __init__(self, message: str = "", code: int | None = None, name: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        if name is not None:
            self.name = name

    def __str__(self) -> str:
        # The message as it is (KeyError, a base of ObjectNotFound, would quote it).
        return BaseException.__str__(self)

    def __reduce__(self):
        return (type(self), (BaseException.__str__(self), self.code, self.name))


# Built-in exceptions that a class also derives from.
_ALSO: Dict[str, Tuple[type, ...]] = {
    "ObjectNotFound": (KeyError,),
    "InvalidParams": (ValueError,),
    "InvalidArgument": (ValueError,),
    "EngineInvalidArgument": (ValueError,),
    "EtcdInvalidConfig": (ValueError,),
    "Timeout": (TimeoutError,),
}

# Classes that derive from another code's class rather than from YuebingError directly.
_PARENT: Dict[str, str] = {
    "StoreTimeout": "Timeout",
    "RpcTimeout": "Timeout",
    "TransferTimeout": "Timeout",
    "EtcdTimeout": "Timeout",
    "TransferCanceled": "Canceled",
}

# What a class means and what to do, where its name alone does not say.
_DOCS: Dict[str, str] = {
    "ObjectNotFound": "No object has that key (never stored, removed, or evicted).",
    "ObjectAlreadyExists": "The key is taken; its value is unchanged. Use upsert, or remove it first.",
    "ObjectHasLease": "A reader holds a lease on the object (every get takes one): retry after "
    "the lease ends, or remove with force=True.",
    "InvalidParams": "A store call's argument is out of its domain (an empty key, a buffer "
    "smaller than the value, ...). Nothing was changed.",
    "InvalidArgument": "An argument is out of its domain (an empty name, a null address, a zero "
    "or overflowing length, a range that wraps, read-only memory as a destination); the message "
    "names it. Nothing was changed.",
    "NoAvailableHandle": "No node has room for the value, even after eviction.",
    "ObjectHasReplicationTask": "A copy or move task is copying the object: wait for it to "
    "end (query_task), or remove with force=True (the task then fails).",
    "TaskNotFound": "No copy or move task has that id (or it finished so long ago that the "
    "master forgot it: it keeps the newest max_finished_tasks).",
    "TaskPendingLimitExceeded": "The master has as many copy/move tasks waiting as it takes; "
    "nothing was created. Retry later.",
    "Timeout": "A call did not finish in time; it was cancelled and its work has stopped.",
    "Canceled": "The call was cancelled; nothing of it touches the caller's memory any more.",
    "Forked": "This Store, Engine or Buffer was made before os.fork(): its calls cannot run "
    "in the child. Make a new yuebing.Store (or Engine) in the child.",
    "AddressOverlapped": "The memory overlaps a range registered with the engine "
    "(register_buffer, Engine.register or engine memory) without lying in it.",
    "AddressNotRegistered": "No registered range starts at (or holds) that address.",
    "Shutdown": "The bridge that runs yuebing's calls is shut down.",
    "EtcdNotBuilt": "An etcd:// master address was given to a yuebing built without etcd "
    "support: build the package with `maturin develop --features etcd` (needs protoc), or give "
    "the masters' own addresses.",
    "EtcdInvalidConfig": "An etcd:// master address (or another etcd setting) is malformed: "
    "expected etcd://host:port[,host:port]/CLUSTER.",
}

#: Every exception class by its code.
ERRORS_BY_CODE: Dict[int, Type[YuebingError]] = {}
#: Every exception class by its name.
ERRORS_BY_NAME: Dict[str, Type[YuebingError]] = {}


def _make_classes() -> None:
    table = dict((name, code) for code, name in _native.error_codes())

    def make(name: str) -> Type[YuebingError]:
        if name in ERRORS_BY_NAME:
            return ERRORS_BY_NAME[name]
        code = table[name]
        parent = make(_PARENT[name]) if name in _PARENT else YuebingError
        doc = _DOCS.get(name, f"yuebing error {name} (code {code}).")
        cls = type(
            name,
            (parent,) + _ALSO.get(name, ()),
            {"__doc__": f"{doc}\n\nCode {code}.", "code": code, "name": name, "__module__": "yuebing"},
        )
        ERRORS_BY_NAME[name] = cls
        ERRORS_BY_CODE[code] = cls
        return cls

    for name in table:
        make(name)


_make_classes()
globals().update(ERRORS_BY_NAME)
__all__ += sorted(ERRORS_BY_NAME)


def _exception(code: int, name: str, message: str) -> YuebingError:
    """The exception for ``code`` (called by the native module)."""
    cls = ERRORS_BY_CODE.get(code, YuebingError)
    if cls.name == "Forked":
        message = f"{message}: make a new yuebing.Store (or Engine) in the child"
    return cls(message, code, name)
