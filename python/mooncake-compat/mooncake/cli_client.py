"""``mooncake_client``: Mooncake's standalone real client, a drop-in client in this process. It
mounts ``--global_segment_size`` of its memory as store space and serves it, and serves dummy
clients (``setup_dummy(..., "host:PORT")``, see ``mooncake._dummy``) on ``--port`` (50052 by
default, as Mooncake's).

Not yet: the client HTTP server; that flag, and any other yuebing cannot honour, is refused by
name.
"""

import signal
import sys
import threading

from . import _flags
from ._flags import FlagError, ignored, refused


def _protocol(value):
    from ._setup import PROTOCOLS
    if value not in PROTOCOLS:
        raise FlagError(f"--protocol={value}: yuebing moves bytes over tcp or rdma (and shared "
                        "memory on one host)")
    return []


def _size(value):
    """A size flag, checked here rather than when the client starts."""
    from .mooncake_config import _parse_segment_size
    try:
        _parse_segment_size(value)
    except ValueError:
        raise FlagError(f"{value!r} is not a size") from None
    return []


def _none(name, why, allowed=("",)):
    def check(value):
        if str(value) not in allowed:
            raise FlagError(f"--{name}={value}: {why}")
        return []
    return check


def _int(value):
    int(value)
    return []


# The flags, each checked (the values are read in `serve`).
TABLE = {
    "host": ignored,
    "master_server_address": ignored,
    # Segment descriptors travel peer to peer: the metadata server is not needed.
    "metadata_server": ignored,
    "global_segment_size": _size,
    "local_buffer_size": _size,
    "protocol": _protocol,
    # The RDMA NICs (comma-separated; empty: every active one) of --protocol=rdma.
    "device_names": ignored,
    # Its calls run on yuebing's runtime, whose threads are its own.
    "threads": _int,
    "port": ignored,
    "enable_http_server": _none("enable_http_server", "the client HTTP server is not built yet "
                                "(issue 28)", ("False", "false")),
    "http_port": refused("http_port", "the client HTTP server is not built yet (issue 28)"),
    "enable_offload": _none("enable_offload", "yuebing has no SSD tier yet (issue 31)",
                            ("False", "false")),
    "tenant_id": _none("tenant_id", "yuebing has no tenants", ("default",)),
}
BOOLEANS = {"enable_http_server", "enable_offload"}


def _port(flags):
    """The ``--port`` of the dummy clients' service, checked (Mooncake's default 50052)."""
    try:
        port = int(flags.get("port", 50052))
    except ValueError:
        raise FlagError(f"--port={flags['port']}: not a port") from None
    if not 0 < port < 65536:
        raise FlagError(f"--port={port}: not a port")
    return port


def serve(flags, port):
    """Runs the real client in this process, serving dummy clients on ``port`` until SIGINT or
    SIGTERM; the exit status."""
    from . import _dummy
    from .mooncake_config import _parse_segment_size
    from .store import MooncakeDistributedStore

    host = flags.get("host", "127.0.0.1")
    store = MooncakeDistributedStore()
    rc = store.setup(host, flags.get("metadata_server", "P2PHANDSHAKE"),
                     _parse_segment_size(flags.get("global_segment_size", "4GB")),
                     _parse_segment_size(flags.get("local_buffer_size", "0")),
                     flags.get("protocol", "tcp"), flags.get("device_names", ""),
                     flags["master_server_address"])
    if rc != 0:
        print(f"mooncake_client: setup failed with {rc}", file=sys.stderr)
        return 1
    try:
        dummies = _dummy.DummyHost(store, f"{host}:{port}")
    except (OSError, ValueError) as e:
        store.close()
        print(f"mooncake_client: cannot serve dummy clients: {e}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=dummies.serve_forever, daemon=True).start()
    print(f"mooncake_client ready: {store.get_hostname()} serves dummy clients at "
          f"{dummies.path}", flush=True)
    stop.wait()
    dummies.close()
    store.close()
    return 0


def main(argv=None):
    """``mooncake_client``."""
    try:
        _, flags = _flags.translate(sys.argv[1:] if argv is None else argv, TABLE, BOOLEANS)
        if "master_server_address" not in flags:
            raise FlagError("--master_server_address is required")
        port = _port(flags)
    except FlagError as e:
        return _flags.fail("mooncake_client", e)
    return serve(flags, port)


if __name__ == "__main__":
    sys.exit(main())
