"""``mooncake_master``: Mooncake's master command line, run as ``yuebing master``.

The flags yuebing honours are mapped (``--rpc_port`` → ``--port``, ``--default_kv_lease_ttl``
→ ``--lease-ttl-ms``, ``--enable_ha --etcd_endpoints`` → ``--etcd``, ...); any other is refused
by name. ``--enable_http_metadata_server`` serves ``mooncake.http_metadata_server`` beside the
master, in this process (signals are passed on to the master); otherwise this process becomes
the master (same PID, as the stock command). Unlike Mooncake, the master binds 127.0.0.1 unless
``--rpc_address`` names another address.
"""

import ctypes
import os
import signal
import subprocess
import sys

from . import _flags
from ._flags import FlagError, duration_ms, ignored, refused, same, seconds_to_ms

_PLACEMENT = {"random": "random", "free_ratio_first": "free-ratio-first"}


def _placement(value):
    if value not in _PLACEMENT:
        raise FlagError(f"--allocation_strategy={value}: yuebing places replicas "
                        f"{' or '.join(_PLACEMENT)}")
    return ["--placement", _PLACEMENT[value]]


def _threads(value):
    return [] if int(value) <= 0 else ["--worker-threads", str(int(value))]


def _false_only(name, why):
    def check(value):
        if value:
            raise FlagError(f"--{name}: {why}")
        return []
    return check


_NO_METRICS = ("yuebing's admin HTTP server listens on --rpc_address's host; its metric "
               "reporting is not built yet (issue 28)")

TABLE = {
    "rpc_address": same("--bind"),
    "rpc_port": same("--port"),
    "port": same("--port"),
    "default_kv_lease_ttl": duration_ms("--lease-ttl-ms"),
    "default_kv_soft_pin_ttl": duration_ms("--soft-pin-ttl-ms"),
    "client_ttl": seconds_to_ms("--client-ttl-ms"),
    "eviction_high_watermark_ratio": same("--high-watermark"),
    "eviction_ratio": same("--eviction-ratio"),
    "put_start_discard_timeout_sec": seconds_to_ms("--put-discard-ms"),
    "put_start_release_timeout_sec": seconds_to_ms("--put-release-ms"),
    "max_total_pending_tasks": same("--max-pending-tasks"),
    "max_total_processing_tasks": same("--max-processing-tasks"),
    "max_total_finished_tasks": same("--max-finished-tasks"),
    "pending_task_timeout_sec": seconds_to_ms("--pending-task-timeout-ms"),
    "processing_task_timeout_sec": seconds_to_ms("--processing-task-timeout-ms"),
    "max_retry_attempts": same("--max-task-retries"),
    "allocation_strategy": _placement,
    "rpc_thread_num": _threads,
    "max_threads": _threads,
    "cluster_id": same("--cluster"),
    # Read together in main(): HA needs its endpoints.
    "enable_ha": ignored,
    "etcd_endpoints": ignored,
    "ha_backend_type": ignored,
    "ha_backend_connstring": ignored,
    "enable_http_metadata_server": ignored,
    "http_metadata_server_port": ignored,
    "http_metadata_server_host": ignored,
    "metrics_port": same("--metrics-port"),
    "metrics_host": refused("metrics_host", _NO_METRICS),
    "enable_metric_reporting": _false_only("enable_metric_reporting", _NO_METRICS),
    "enable_offload": _false_only("enable_offload", "yuebing has no SSD tier yet (issue 31)"),
    "config_path": refused("config_path", "give yuebing's TOML with YUEBING_CONFIG instead"),
}
BOOLEANS = {"enable_ha", "enable_http_metadata_server", "enable_metric_reporting",
            "enable_offload"}


def _etcd(flags):
    """``--etcd`` for an HA master, from ``--etcd_endpoints`` (``;``-separated, maybe with
    ``http://``) or ``--ha_backend_connstring``."""
    if not flags.get("enable_ha"):
        return []
    backend = flags.get("ha_backend_type", "etcd")
    if backend != "etcd":
        raise FlagError(f"--ha_backend_type={backend}: yuebing elects masters on etcd only")
    raw = flags.get("ha_backend_connstring") or flags.get("etcd_endpoints")
    if not raw:
        raise FlagError("--enable_ha needs --etcd_endpoints")
    hosts = [e.strip().split("://", 1)[-1] for e in raw.replace(",", ";").split(";")]
    return ["--etcd", ",".join(h for h in hosts if h)]


def command(argv):
    """The ``yuebing master`` command line for ``argv``, and the HTTP metadata server's
    ``(host, port)`` when one is asked for."""
    args, flags = _flags.translate(argv, TABLE, BOOLEANS)
    args += _etcd(flags)
    http = None
    if flags.get("enable_http_metadata_server"):
        http = (flags.get("http_metadata_server_host", "127.0.0.1"),
                int(flags.get("http_metadata_server_port", 8080)))
    return [_flags.yuebing_binary(), "master", *args], http


def _die_with_parent():
    # PR_SET_PDEATHSIG: the master goes when this process does, however it goes.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def main(argv=None):
    """``mooncake_master``."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        cmd, http = command(argv)
    except FlagError as e:
        return _flags.fail("mooncake_master", e)
    if http is None:
        os.execv(cmd[0], cmd)
    from .http_metadata_server import KVBootstrapServer
    server = KVBootstrapServer(port=http[1], host=http[0])
    try:
        server.run()
    except OSError as e:
        return _flags.fail("mooncake_master", f"HTTP metadata server on {http[0]}:{http[1]}: {e}")
    master = subprocess.Popen(cmd, preexec_fn=_die_with_parent)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _f: master.send_signal(s))
    code = master.wait()
    server.close()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
