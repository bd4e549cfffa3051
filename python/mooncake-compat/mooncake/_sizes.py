"""Size strings as Mooncake's dict-form ``setup`` reads them (``try_string_to_byte_size``)."""

import math
import re

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "T": 1 << 40, "TB": 1 << 40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")

#: What ``"infinite"`` stands for: the largest ``size_t``.
INFINITE = (1 << 64) - 1


def parse_size(value):
    """Bytes named by ``value``: an ``int``, or a string of a number (fractional allowed) and an
    optional case-insensitive unit ``B``, ``K``/``KB``, ``M``/``MB``, ``G``/``GB``, ``T``/``TB``
    (powers of 1024), or ``"infinite"``. Anything else raises ``ValueError`` (Mooncake returns
    ``-600`` from ``setup`` for it, as the caller of this does)."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"negative size: {value}")
        return value
    text = str(value)
    if text.strip().lower() == "infinite":
        return INFINITE
    m = _SIZE.match(text)
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"not a size: {value!r} (units: B, K, KB, M, MB, G, GB, T, TB)")
    n = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not math.isfinite(n) or n > INFINITE:
        raise ValueError(f"size out of range: {value!r}")
    return int(n)
