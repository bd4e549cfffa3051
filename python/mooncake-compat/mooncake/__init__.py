"""yuebing-mooncake: Mooncake's Python API (``mooncake.store``, ``mooncake.engine``, as in
Mooncake 0.3.13.post1) on yuebing. It owns the import name ``mooncake``, as the stock
``mooncake-transfer-engine`` wheels do, so the two cannot be installed together."""

import importlib.metadata as _metadata
import os as _os

_STOCK = ("mooncake-transfer-engine", "mooncake-transfer-engine-non-cuda",
          "mooncake-transfer-engine-cuda13")


def _stock_installed():
    """The stock Mooncake distribution installed beside this one, if any: by its metadata, or
    by its native modules in this package's directory (a wheel installed over this one)."""
    for dist in _STOCK:
        try:
            return f"{dist} {_metadata.version(dist)}"
        except _metadata.PackageNotFoundError:
            pass
    here = _os.path.dirname(__file__)
    native = [f for f in _os.listdir(here) if f.startswith(("store.", "engine.")) and f.endswith(".so")]
    return f"native modules {native} in {here}" if native else None


_clash = _stock_installed()
if _clash:
    raise ImportError(
        f"yuebing-mooncake and the stock Mooncake ({_clash}) are both installed and both provide "
        "the 'mooncake' package; they are mutually exclusive: pip uninstall one of them "
        "(and reinstall the other)")

__version__ = "0.1.0"

__all__ = ["BufferPool", "RegisteredBufferPool"]


def __getattr__(name):
    # The stock package exports its buffer pool (`from mooncake import BufferPool`). Imported
    # on first use, so that `import mooncake` alone (mooncake.mooncake_config's users) does not
    # load the native module.
    if name in __all__:
        from . import buffer_pool
        return getattr(buffer_pool, name)
    raise AttributeError(f"module 'mooncake' has no attribute {name!r}")
