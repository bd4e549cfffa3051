"""Mooncake's integer return codes, and how yuebing's error codes become them.

yuebing's store codes (-1 … -1999) already are Mooncake's ``ErrorCode`` numbers. Its rpc codes
(-2xxx) become ``RPC_FAIL``, its engine codes (-3xxx) ``TRANSFER_FAIL`` and its bridge codes
(-4xxx: shut down, forked, cancelled) ``INTERNAL_ERROR``; yuebing's own code is logged.
"""

import logging

log = logging.getLogger("mooncake")

OK = 0
INTERNAL_ERROR = -1
NO_AVAILABLE_HANDLE = -200
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
TRANSFER_FAIL = -800
RPC_FAIL = -900
RPC_TIMEOUT = -901

#: ``health_check`` values.
HC_HEALTHY, HC_NOT_INITIALIZED, HC_MASTER_UNREACHABLE = 0, 1, 2

#: Transfer Engine codes (``mooncake-transfer-engine/include/error.h``).
ERR_INVALID_ARGUMENT = -1
ERR_ADDRESS_NOT_REGISTERED = -3
ERR_ADDRESS_OVERLAPPED = -7


def store_code(code, what=""):
    """The Mooncake store code for yuebing's error ``code`` (logging yuebing's when they
    differ)."""
    if -1999 <= code <= -1:
        return code
    mapped = RPC_FAIL if -2999 <= code <= -2000 else (
        TRANSFER_FAIL if -3999 <= code <= -3000 else INTERNAL_ERROR)
    log.warning("%s: yuebing error %d, reported as %d", what or "call", code, mapped)
    return mapped


def engine_code(code, what=""):
    """The Transfer Engine code for yuebing's engine error ``code``: yuebing's engine codes are
    -3000 minus Mooncake's where Mooncake has one (-3003 is ERR_ADDRESS_NOT_REGISTERED, -3)."""
    if -3099 <= code <= -3001:
        return code + 3000
    log.warning("%s: yuebing error %d, reported as %d", what or "transfer", code,
                ERR_INVALID_ARGUMENT)
    return ERR_INVALID_ARGUMENT
