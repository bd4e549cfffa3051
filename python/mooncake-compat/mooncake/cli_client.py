"""``mooncake_client``: Mooncake's standalone real client. It mounts ``--global_segment_size``
of its memory as store space and serves it; with ``--port`` it also serves dummy clients
(``setup_dummy(..., "host:PORT")``, see ``mooncake._dummy``) and runs as a drop-in real client
in this process, else it runs as a ``yuebing node``.

Not yet: the client HTTP server; that flag, and any other yuebing cannot honour, is refused by
name.
"""

import os
import signal
import sys
import threading

from . import _flags
from ._flags import FlagError, ignored, refused


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
    # The dummy clients' service (run here, not by a yuebing node: see `main`).
    "port": ignored,
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


def _port(flags):
    """The ``--port`` of the dummy clients' service, checked, or ``None``."""
    if "port" not in flags:
        return None
    try:
        port = int(flags["port"])
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
                     _parse_segment_size(flags.get("local_buffer_size", "0")), "tcp", "",
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
        cmd = command(sys.argv[1:] if argv is None else argv)
        _, flags = _flags.translate(sys.argv[1:] if argv is None else argv, TABLE, BOOLEANS)
        port = _port(flags)
    except FlagError as e:
        return _flags.fail("mooncake_client", e)
    if port is not None:
        return serve(flags, port)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    sys.exit(main())
