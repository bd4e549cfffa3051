"""The arguments of ``MooncakeDistributedStore.setup``, in its positional/keyword and dict
forms, checked as Mooncake 0.3.13.post1 checks them."""

import re
from dataclasses import dataclass

import yuebing

from . import _codes
from ._sizes import parse_size
from .mooncake_config import _FALSE, _TRUE

MIN_SEGMENT = 16 << 20
_NAMES = ("local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
          "protocol", "rdma_devices", "master_server_addr")
_OPTIONAL = {"engine": None, "enable_ssd_offload": False, "ssd_offload_path": "",
             "tenant_id": "default", "enable_client_http_server": False, "client_http_port": 9300}
# The optional arguments yuebing checks but does not act on (see `optional`), and the kind of
# each (its default's): its type in the positional/keyword form, how its text is read in the
# dict form.
_OPTIONAL_KINDS = {name: type(default) for name, default in _OPTIONAL.items()
                   if default is not None}
_DICT_DEFAULTS = {"global_segment_size": 16 << 20, "local_buffer_size": 16 << 20,
                  "protocol": "tcp", "rdma_devices": "", "master_server_addr": "127.0.0.1:50051"}


# The protocols yuebing's engine speaks: "rdma" between hosts where the package was built with
# it and a NIC can be used (else tcp, with a warning); shared memory between processes of one
# host either way.
PROTOCOLS = ("tcp", "rdma")


def rdma_nics(protocol, devices):
    """``yuebing.Engine``'s ``rdma_nics`` for a Mooncake ``protocol`` and its RDMA device
    list (comma-separated names; empty: every active NIC). A package built without rdma
    runs on tcp whatever is named (``say_if_rdma_is_off`` warns), as it would on a machine
    without the NICs."""
    if protocol != "rdma" or "rdma" not in yuebing.FEATURES:
        return "off"
    return devices.strip() or "auto"


def say_if_rdma_is_off(what, protocol, engine):
    """Warns when ``protocol`` asked for rdma and ``engine`` (a ``yuebing.Engine``) serves
    none, so that a fallback to tcp is never silent."""
    if protocol == "rdma" and "rdma" not in engine.transports:
        _codes.log.warning("%s: protocol 'rdma': no RDMA NIC is in use (a package built without "
                           "the rdma feature, no rdma-core, or no active NIC); peers on other "
                           "hosts are reached over tcp", what)


class SetupError(Exception):
    """A setup argument Mooncake refuses; ``code`` is what ``setup`` returns."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


@dataclass
class SetupArgs:
    """What ``setup`` was given, normalised."""
    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    rdma_devices: str
    master_server_addr: str
    engine: object = None
    # The client HTTP server's port, when enable_client_http_server asked for one.
    http_port: object = None


def from_call(args, kwargs):
    """The arguments of either overload: ``setup(config: dict)`` or the seven required ones
    (positional or by keyword) plus the optional ones. A wrong type raises ``TypeError`` as
    pybind11 does; a refused value raises :class:`SetupError`."""
    if len(args) == 1 and not kwargs and isinstance(args[0], dict):
        return from_dict(args[0])
    if not args and set(kwargs) == {"config"} and isinstance(kwargs["config"], dict):
        return from_dict(kwargs["config"])
    names = _NAMES + tuple(_OPTIONAL)
    if len(args) > len(names):
        raise TypeError(f"setup() takes at most {len(names)} arguments ({len(args)} given)")
    given = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(f"setup() got an unexpected keyword argument '{k}'")
        if k in given:
            raise TypeError(f"setup() got multiple values for argument '{k}'")
        given[k] = v
    missing = [n for n in _NAMES if n not in given]
    if missing:
        raise TypeError(f"setup() missing required arguments: {', '.join(missing)}")
    for n in ("local_hostname", "metadata_server", "protocol", "rdma_devices",
              "master_server_addr"):
        if not isinstance(given[n], str):
            raise TypeError(f"setup(): {n} must be str, not {type(given[n]).__name__}")
    for n in ("global_segment_size", "local_buffer_size"):
        v = given[n]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TypeError(f"setup(): {n} must be a non-negative int, not {v!r}")
    http_port = optional(given)
    out = SetupArgs(*(given[n] for n in _NAMES), engine=given.get("engine"), http_port=http_port)
    return check(out)


def optional(given):
    """Checks the optional arguments (``given``: {name: value}, in either form of ``setup``):
    their types as pybind11 would, and their values. A tenant other than ``default`` (or
    blank, which Mooncake reads as ``default``) is refused (its keys would not be kept apart
    from other tenants'); SSD offload, which yuebing does not have yet, is logged as off
    rather than silently dropped. Returns the client HTTP server's port when
    ``enable_client_http_server`` asks for one (a port outside 1..65535 is refused, as
    Mooncake does), else None."""
    for name, kind in _OPTIONAL_KINDS.items():
        if name in given and not isinstance(given[name], kind):
            raise TypeError(f"setup(): {name} must be {kind.__name__}, "
                            f"not {type(given[name]).__name__}")
    if given.get("tenant_id") not in (None, "", "default"):
        raise SetupError(_codes.INVALID_PARAMS,
                         f"setup: tenant_id {given['tenant_id']!r}: yuebing has no tenants; "
                         "keys of different tenants would not be kept apart")
    if given.get("enable_ssd_offload"):
        _codes.log.warning("setup: enable_ssd_offload: yuebing has no SSD tier yet (issue 31); "
                           "objects stay in memory only")
    if not given.get("enable_client_http_server"):
        return None
    port = given.get("client_http_port", _OPTIONAL["client_http_port"])
    if not 0 < port <= 65535:
        raise SetupError(_codes.INVALID_PARAMS,
                         f"setup: client_http_port {port} is not a port (1..65535)")
    return port


def from_dict(config):
    """The dict overload: every value through ``str()``, sizes as size strings, defaults for
    what is missing; a missing required key or a bad size is ``-600``. The optional settings
    are read from their text (see `dict_optional`) and checked as the other form's are."""
    for n in ("local_hostname", "metadata_server"):
        if n not in config:
            raise SetupError(_codes.INVALID_PARAMS, f"setup: '{n}' is required")
    values = {**_DICT_DEFAULTS, **{k: v for k, v in config.items() if k in _NAMES}}
    sizes = {}
    for n in ("global_segment_size", "local_buffer_size"):
        try:
            sizes[n] = parse_size(str(values[n]))
        except ValueError as e:
            raise SetupError(_codes.INVALID_PARAMS, f"setup: {n}: {e}") from None
    buf = sizes["local_buffer_size"]
    if buf != 0 and not (1 << 10) <= buf <= (1 << 40):
        raise SetupError(_codes.INVALID_PARAMS, "setup: local_buffer_size must be 0 or 1 KiB..1 TiB")
    out = SetupArgs(str(values["local_hostname"]), str(values["metadata_server"]),
                    sizes["global_segment_size"], buf, str(values["protocol"]),
                    str(values["rdma_devices"]), str(values["master_server_addr"]))
    out.http_port = optional({name: dict_optional(name, kind, config[name])
                              for name, kind in _OPTIONAL_KINDS.items() if name in config})
    return check(out)


def dict_optional(name, kind, value):
    """An optional setting of the dict form, read from ``str(value)`` as Mooncake's dict form
    reads it: text as it is; a flag from the usual words (true/false, 1/0, yes/no, on/off,
    enable/disable, any case, blanks around), anything else its default with a warning, as
    Mooncake does; an integer in decimal (an optional ``-``, blanks around, within 32 bits),
    anything else ``-600``."""
    text = str(value)
    if kind is str:
        return text
    word = text.strip(" \t\r\n")
    if kind is bool:
        if word.lower() in _TRUE:
            return True
        if word.lower() in _FALSE:
            return False
        _codes.log.warning("setup: %s %r is not a yes/no word; taken as %s, its default, as "
                           "Mooncake does", name, text, _OPTIONAL[name])
        return _OPTIONAL[name]
    if re.fullmatch(r"-?[0-9]+", word) and -(1 << 31) <= int(word) < (1 << 31):
        return int(word)
    raise SetupError(_codes.INVALID_PARAMS, f"setup: {name} {text!r} is not an integer")


def check(a):
    """The checks both overloads share."""
    if a.global_segment_size != 0 and a.global_segment_size < MIN_SEGMENT:
        raise SetupError(_codes.INVALID_PARAMS,
                         f"setup: global_segment_size must be 0 or at least {MIN_SEGMENT}")
    if a.protocol not in PROTOCOLS:
        # Mooncake returns -1 for an unknown protocol (even "TCP").
        raise SetupError(_codes.INTERNAL_ERROR, f"setup: protocol {a.protocol!r} is not supported "
                         "(only 'tcp' or 'rdma')")
    metadata_kind(a.metadata_server)
    master_addr(a.master_server_addr)
    if not a.local_hostname:
        raise SetupError(_codes.INVALID_PARAMS, "setup: local_hostname is empty")
    return a


def metadata_kind(server):
    """``"p2p"``, ``"http"`` or ``"etcd"`` for a metadata-server string Mooncake accepts.
    yuebing exchanges segment descriptors peer to peer whichever is named, so the server named
    is not contacted. An unknown scheme (which aborts Mooncake's process) is ``-600`` here."""
    if server == "P2PHANDSHAKE":
        return "p2p"
    if "://" in server:
        scheme = server.split("://", 1)[0].lower()
        if scheme in ("http", "https"):
            return "http"
        if scheme == "etcd":
            return "etcd"
        raise SetupError(_codes.INVALID_PARAMS, f"setup: unknown metadata server scheme {scheme!r}")
    host_port(server, "metadata_server")
    return "etcd"


def master_addr(text):
    """Checks ``master_server_addr``: ``host:port``, or ``etcd://host:port[,host:port]/CLUSTER``
    (yuebing's form: the master elected in CLUSTER, found through etcd; ``;`` also separates
    endpoints); ``-600`` if it is neither."""
    if text[:7].lower() != "etcd://":
        host_port(text, "master_server_addr")
        return
    hosts, sep, cluster = text[7:].partition("/")
    if not sep or not cluster or "/" in cluster:
        raise SetupError(_codes.INVALID_PARAMS, f"setup: master_server_addr {text!r} is not "
                         "etcd://host:port[,host:port]/CLUSTER")
    for h in hosts.replace(";", ",").split(","):
        host_port(h.strip(), "master_server_addr endpoint")


def host_port(text, what):
    """``(host, port)`` of a ``host:port`` string; ``-600`` if it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SetupError(_codes.INVALID_PARAMS, f"setup: {what} {text!r} is not host:port")
    return host, int(port)
