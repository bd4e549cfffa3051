"""``mooncake.mooncake_config``: the settings a Mooncake store client is set up with, read from a
JSON file (``MOONCAKE_CONFIG_PATH``) or from ``MOONCAKE_*`` environment variables, as the stock
module reads them, so that deployments' launch scripts and Mooncake's tests carry over.

The environment: ``MOONCAKE_MASTER`` (required unless a file is named), ``MOONCAKE_LOCAL_HOSTNAME``
(``localhost``), ``MOONCAKE_TE_META_DATA_SERVER`` (``P2PHANDSHAKE``),
``MOONCAKE_GLOBAL_SEGMENT_SIZE`` and ``MOONCAKE_LOCAL_BUFFER_SIZE`` (bytes, or with a unit:
``512MB``, ``4gb``, ``1.5G``), ``MOONCAKE_PROTOCOL`` (``tcp``), ``MOONCAKE_DEVICE``,
``MOONCAKE_OFFLOAD_ENABLED``, ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH``, ``MOONCAKE_TENANT_ID``,
``MOONCAKE_ENABLE_CLIENT_HTTP_SERVER`` and ``MOONCAKE_CLIENT_HTTP_PORT``.

The protocol is lower-cased; one Mooncake does not know is passed on with a warning (yuebing's
drop-in itself moves bytes over tcp and shared memory).
"""

import json
import logging
import os
from dataclasses import dataclass
from typing import Optional

logger = logging.getLogger(__name__)

#: Store space a client mounts when the settings name none: 3.125 GiB.
DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200
#: Its local transfer buffer when none is named: 1 GiB.
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824

# Units of a size, the two-letter ones first so that "512mb" is not read as "512m" + "b".
_UNITS = (("kb", 1 << 10), ("mb", 1 << 20), ("gb", 1 << 30), ("tb", 1 << 40),
          ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("t", 1 << 40), ("b", 1))

# The transports and store modes Mooncake's engine and store accept (a hint for a warning, not
# a gate: which of them a build has depends on how it was built).
_KNOWN_PROTOCOLS = frozenset({
    "tcp", "rdma", "efa", "nvmeof", "nvlink", "musa", "nvlink_intra", "hip", "barex", "cxl",
    "ascend", "ub", "ubshmem", "maca", "sunrise_link", "rpc_only",
})

# Settings that must be given and not blank.
_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")

_TRUE = frozenset({"true", "1", "yes", "on", "enable"})
_FALSE = frozenset({"false", "0", "no", "off", "disable"})


def _parse_segment_size(value) -> int:
    """A size in bytes: an int as it is, or text with an optional unit (``"4gb"``,
    ``"1.5 G"``, ``"100"``); ``ValueError`` for text that is not one."""
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return int(value)
    text = value.strip().lower()
    if not text:
        raise ValueError("Invalid segment size: empty string")
    for unit, scale in _UNITS:
        if text.endswith(unit):
            number = text[:-len(unit)].strip()
            if not number:
                raise ValueError(f"Invalid segment size: missing number before '{unit}'")
            return int(float(number) * scale)
    return int(float(text))


def _parse_bool(value) -> bool:
    """A yes/no setting from JSON or the environment: a bool or number as Python reads it,
    ``None`` and blank text as no, and the usual words (true/false, yes/no, on/off, 1/0,
    enable/disable, any case); ``ValueError`` for other text (``bool("false")`` would be
    true)."""
    if isinstance(value, (bool, int, float)):
        return bool(value)
    if value is None:
        return False
    text = str(value).strip().lower()
    if not text or text in _FALSE:
        return False
    if text in _TRUE:
        return True
    raise ValueError(f"Invalid boolean value: {value!r}")


@dataclass
class MooncakeConfig:
    """A store client's settings, in the order ``MooncakeDistributedStore.setup`` takes them:
    ``local_hostname``, ``metadata_server``, ``global_segment_size`` (bytes of store space),
    ``local_buffer_size`` (bytes), ``protocol`` (lower-cased), ``device_name`` (RDMA devices),
    ``master_server_address``; then ``enable_ssd_offload``, ``ssd_offload_path``,
    ``tenant_id``, ``enable_client_http_server`` and ``client_http_port``.

    A JSON file holds the same names::

        {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
         "master_server_address": "localhost:50051", "global_segment_size": "4gb",
         "local_buffer_size": 1073741824, "protocol": "tcp", "device_name": ""}
    """

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = 9300

    def __post_init__(self):
        """Checks the settings however they were made: a protocol (lower-cased here), sizes not
        negative, the required names not blank; ``ValueError`` naming the field otherwise."""
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError(f"Invalid protocol: {self.protocol!r}. Protocol must be a "
                             "non-empty string, e.g. 'tcp' or 'rdma'.")
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in _KNOWN_PROTOCOLS:
            logger.warning("Unrecognised protocol %r; passing it on unchanged (known: %s).",
                           self.protocol, ", ".join(sorted(_KNOWN_PROTOCOLS)))
        for name in ("global_segment_size", "local_buffer_size"):
            size = getattr(self, name)
            if size < 0:
                raise ValueError(f"Invalid {name}: {size}. Size must be non-negative.")
        for name in _REQUIRED:
            text = getattr(self, name)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"Config field {name!r} must be a non-empty string, "
                                 f"got {text!r}.")

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        """The settings in the JSON file ``file_path``; the three required names must be in it,
        the others default as in the class."""
        with open(file_path) as f:
            raw = json.load(f)
        for name in _REQUIRED:
            if name not in raw:
                raise ValueError(f"Missing required config field: {name}")
        path, tenant = raw.get("ssd_offload_path"), raw.get("tenant_id")
        return MooncakeConfig(
            local_hostname=raw.get("local_hostname"),
            metadata_server=raw.get("metadata_server"),
            global_segment_size=_parse_segment_size(
                raw.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                raw.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=raw.get("protocol", "tcp"),
            device_name=raw.get("device_name", ""),
            master_server_address=raw.get("master_server_address"),
            enable_ssd_offload=_parse_bool(raw.get("enable_ssd_offload", False)),
            ssd_offload_path="" if path is None else str(path),
            tenant_id="default" if tenant is None else str(tenant),
            enable_client_http_server=_parse_bool(raw.get("enable_client_http_server", False)),
            client_http_port=int(raw.get("client_http_port", 9300)),
        )

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        """The settings of the file ``MOONCAKE_CONFIG_PATH`` names, else of the ``MOONCAKE_*``
        environment variables (see the module's docs); ``ValueError`` when neither that nor
        ``MOONCAKE_MASTER`` is set."""
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path is not None:
            return MooncakeConfig.from_file(path)
        env = os.environ.get
        if not env("MOONCAKE_MASTER"):
            raise ValueError("Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor "
                             "'MOONCAKE_MASTER' is set.")
        return MooncakeConfig(
            local_hostname=env("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_parse_segment_size(
                env("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                env("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=env("MOONCAKE_PROTOCOL", "tcp"),
            device_name=env("MOONCAKE_DEVICE", ""),
            master_server_address=env("MOONCAKE_MASTER"),
            enable_ssd_offload=_parse_bool(env("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=_parse_bool(
                env("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false")),
            client_http_port=int(env("MOONCAKE_CLIENT_HTTP_PORT", 9300)),
        )
