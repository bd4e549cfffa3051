"""``mooncake_client``: Mooncake's standalone real client, run as a ``yuebing node`` (a process
that mounts ``--global_segment_size`` of its memory as store space and serves it).

Not yet: serving dummy clients (``--port``, the real client's service port) and the client HTTP
server; those flags, and any other yuebing cannot honour, are refused by name.
"""

import os
import sys

from . import _flags
from ._flags import FlagError, ignored, refused

_NO_DUMMIES = "yuebing's node does not serve dummy clients yet (issue 27)"


def _protocol(value):
    if value != "tcp":
        raise FlagError(f"--protocol={value}: yuebing moves bytes over tcp (and shared memory "
                        "on one host)")
    return []


def _size(value):
    return ["--store-size", str(value).replace(" ", "")]


def _none(name, why, allowed=("",)):
    def check(value):
        if str(value) not in allowed:
            raise FlagError(f"--{name}={value}: {why}")
        return []
    return check


def _threads(value):
    return [] if int(value) <= 0 else ["--worker-threads", str(int(value))]


TABLE = {
    "host": lambda v: ["--bind", v],
    "master_server_address": lambda v: ["--master", v],
    # Segment descriptors travel peer to peer: the metadata server is not needed.
    "metadata_server": ignored,
    "global_segment_size": _size,
    # The staging buffer of the client's own puts; a node makes none.
    "local_buffer_size": ignored,
    "protocol": _protocol,
    "device_names": _none("device_names", "yuebing has no RDMA transport yet (issue 29)"),
    "threads": _threads,
    "port": refused("port", _NO_DUMMIES),
    "enable_http_server": _none("enable_http_server", "the client HTTP server is not built yet "
                                "(issue 28)", ("False", "false")),
    "http_port": refused("http_port", "the client HTTP server is not built yet (issue 28)"),
    "enable_offload": _none("enable_offload", "yuebing has no SSD tier yet (issue 31)",
                            ("False", "false")),
    "tenant_id": _none("tenant_id", "yuebing has no tenants", ("default",)),
}
BOOLEANS = {"enable_http_server", "enable_offload"}


def command(argv):
    """The ``yuebing node`` command line for ``argv``."""
    args, flags = _flags.translate(argv, TABLE, BOOLEANS)
    if "master_server_address" not in flags:
        raise FlagError("--master_server_address is required")
    if "global_segment_size" not in flags:
        args += _size("4GB")  # Mooncake's default
    if "host" in flags and ":" not in flags["host"]:
        i = args.index("--bind")
        args[i + 1] = f"{flags['host']}:0"
    return [_flags.yuebing_binary(), "node", *args]


def main(argv=None):
    """``mooncake_client``."""
    try:
        cmd = command(sys.argv[1:] if argv is None else argv)
    except FlagError as e:
        return _flags.fail("mooncake_client", e)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    sys.exit(main())
