"""Mooncake's client host names on yuebing.

Mooncake names a client's segment ``local_hostname:PORT``. When ``local_hostname`` names no
port, it picks one in ``MC_STORE_CLIENT_MIN_PORT`` … ``MC_STORE_CLIENT_MAX_PORT`` (12300 …
14300), trying ``MC_STORE_CLIENT_SETUP_RETRIES`` (20) times. The drop-in binds the client's
engine on that port, so the name is also where the engine listens; yuebing names the same node
by its address (``127.0.0.1:PORT``), and :func:`node_name` turns one into the other.
"""

import functools
import os
import random
import socket

from . import _codes

_MIN, _MAX, _RETRIES = 12300, 14300, 20


def split(hostname):
    """``(host, port)`` of ``host[:port]`` or ``[v6]:port``; port ``None`` when none is named
    (a bare IPv6 address such as ``::1`` names none: its last group is not a port); port 0
    is any free one."""
    host, sep, port = hostname.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if sep and host and (":" not in host or bracketed) and port.isascii() and port.isdigit() \
            and int(port) < 65536:
        return host, int(port)
    return hostname, None


def _env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        _codes.log.warning("%s=%r is not an integer; using %d", name, os.environ[name], default)
        return default


def port_range():
    """The ports a client without one picks from, as Mooncake validates them (a range that is
    empty or outside 1 … 65535 falls back to the default)."""
    lo, hi = _env_int("MC_STORE_CLIENT_MIN_PORT", _MIN), _env_int("MC_STORE_CLIENT_MAX_PORT", _MAX)
    if not 0 < lo <= hi < 65536:
        _codes.log.warning("MC_STORE_CLIENT_MIN_PORT/MAX_PORT %d…%d is not a port range; "
                           "using %d…%d", lo, hi, _MIN, _MAX)
        return _MIN, _MAX
    return lo, hi


def candidates(local_hostname):
    """The ``(host, port)`` binds to try for ``local_hostname``, in order: its own port if it
    names one (then any free port, as Mooncake's engine does not need that one free), else
    random ports of :func:`port_range`."""
    host, port = split(local_hostname)
    if port is not None:
        return [(host, port), (host, 0)]
    lo, hi = port_range()
    tries = max(1, _env_int("MC_STORE_CLIENT_SETUP_RETRIES", _RETRIES))
    return [(host, random.randint(lo, hi)) for _ in range(tries)]


@functools.lru_cache(maxsize=1024)
def node_name(name):
    """yuebing's name for the node Mooncake calls ``name`` (``localhost:13001`` →
    ``127.0.0.1:13001``); ``name`` itself where its host does not resolve to IPv4."""
    host, port = split(name)
    if port is None:
        return name
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return name
    return f"{infos[0][4][0]}:{port}" if infos else name


def spelled(node, own):
    """The name Mooncake would show for yuebing node ``node`` (``127.0.0.1:13002``) to the
    client named ``own`` (``localhost:13001``): a node at the address ``own``'s host resolves
    to is spelled with that host (``localhost:13002``), as Mooncake's clients of one host,
    which name themselves alike, see each other; any other node as yuebing names it. Either
    spelling names the same node in every call (see :func:`node_name`)."""
    own_host, own_port = split(own)
    host, port = split(node)
    if own_port is None or port is None or own_host == host:
        return node
    same = node_name(f"{own_host}:{port}") == node
    return f"{own_host}:{port}" if same else node
