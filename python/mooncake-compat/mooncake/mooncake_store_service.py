"""``mooncake.mooncake_store_service``: a store client behind a small REST API (aiohttp), as
Mooncake's module of that name serves it: the ``mc_store_rest_server`` command, or
``python -m mooncake.mooncake_store_service --config FILE --port 8080``.

The client's settings are a :class:`~mooncake.mooncake_config.MooncakeConfig`: the JSON file of
``--config``, else the ``MOONCAKE_*`` environment (``MOONCAKE_MASTER`` at least), then any
``-Dname=value`` on the command line. The service retries the client's ``setup`` for up to
``--max-wait-time`` seconds (the master may start later), then serves until SIGINT or SIGTERM.

Routes (JSON bodies in and out; an error is ``{"error": text}``):

- ``PUT /api/put`` ``{"key", "value"}``: stores the value's UTF-8 bytes.
- ``GET /api/get/{key}``: the value (``application/octet-stream``); 404 if missing.
- ``GET /api/exist/{key}``: ``{"exists": bool}``.
- ``DELETE /api/remove/{key}``; ``DELETE /api/remove_all``: ``{"status": "success removed N
  keys"}``.
- ``POST /api/mount`` ``{"size", "protocol"?, "location"?}``: store space the service
  allocates; ``segment_ids`` and ``allocated_size``. ``POST /api/unmount`` ``{"segment_ids",
  "grace_period_seconds"?}`` unmounts and frees it.
- ``POST /api/mount_shm`` ``{"name", "size", "offset"?, "protocol"?, "location"?}``: mounts
  ``/dev/shm/NAME`` as store space; ``segment_ids``. ``POST /api/unmount_shm`` unmounts one id
  at a time; ``failed_segment_ids`` when some fail.
- ``POST /api/reconfigure`` ``{"mode": "decode", "path", "size", ...}``: mounts a file, the new
  one before the old ones go (make before break); ``{"mode": "prefill"}`` unmounts what decode
  mounted.
- ``POST /api/unmount_local_disk`` ``{"grace_period_seconds"?}`` (0 to 3600), for a preStop
  hook: takes the store's SSD tier out of the master before the process exits.

A request the service can tell is wrong (not a JSON object, a missing or ill-typed field) is
400 before the store is touched; a store call that fails is 500. Where this differs from
Mooncake's service (it listens on 127.0.0.1 unless ``--host`` says otherwise, among other
things) is listed in the package's README.
"""

import argparse
import asyncio
import dataclasses
import functools
import json
import logging
import signal
import sys
import time

from aiohttp import web

from mooncake.mooncake_config import MooncakeConfig, _parse_bool, _parse_segment_size
from mooncake.store import MooncakeDistributedStore
from mooncake._codes import INVALID_PARAMS

log = logging.getLogger(__name__)

#: The longest ``/api/unmount_local_disk`` may hold a caller (a preStop hook): one hour, so that
#: milliseconds sent where seconds were meant are refused rather than waited for.
_MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS = 3600

#: Where the REST API listens unless told otherwise (Mooncake's service: every interface).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
#: The largest request body: a put's value travels inside its JSON.
MAX_REQUEST_BYTES = 100 << 20
#: Pause between two attempts to set the store client up.
SETUP_RETRY_SECONDS = 1.0

# The keys of the dict ``MooncakeDistributedStore.setup`` takes, and the MooncakeConfig
# attribute each comes from.
_SETUP_KEYS = (
    ("local_hostname", "local_hostname"),
    ("metadata_server", "metadata_server"),
    ("global_segment_size", "global_segment_size"),
    ("local_buffer_size", "local_buffer_size"),
    ("protocol", "protocol"),
    ("rdma_devices", "device_name"),
    ("master_server_addr", "master_server_address"),
)
# Settings MooncakeConfig gained later, under the same name in both; a config object made
# before them (or a stand-in for one) gets MooncakeConfig's defaults.
_LATER_SETTINGS = ("enable_ssd_offload", "ssd_offload_path", "tenant_id",
                   "enable_client_http_server", "client_http_port")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(MooncakeConfig)
             if f.default is not dataclasses.MISSING}

# How a ``-Dname=value`` text becomes a setting of that kind (others stay text).
_PARSERS = {
    "global_segment_size": _parse_segment_size,
    "local_buffer_size": _parse_segment_size,
    "enable_ssd_offload": _parse_bool,
    "enable_client_http_server": _parse_bool,
    "client_http_port": int,
}

# The REST API: method, path, and the MooncakeStoreService handler that answers it.
_ROUTES = (
    ("POST", "/api/reconfigure", "handle_reconfigure"),
    ("POST", "/api/mount_shm", "handle_mount_shm"),
    ("POST", "/api/unmount_shm", "handle_unmount_shm"),
    ("POST", "/api/mount", "handle_mount"),
    ("POST", "/api/unmount", "handle_unmount"),
    ("POST", "/api/unmount_local_disk", "handle_unmount_local_disk"),
    ("PUT", "/api/put", "handle_put"),
    ("GET", "/api/get/{key}", "handle_get"),
    ("GET", "/api/exist/{key}", "handle_exist"),
    ("DELETE", "/api/remove/{key}", "handle_remove"),
    ("DELETE", "/api/remove_all", "handle_remove_all"),
)


# ---------------------------------------------------------------------- settings


def _store_settings(config):
    """The ``setup`` dict for ``config`` (a MooncakeConfig, or anything with its attributes)."""
    settings = {key: getattr(config, attr) for key, attr in _SETUP_KEYS}
    for name in _LATER_SETTINGS:
        settings[name] = getattr(config, name, _DEFAULTS[name])
    return settings


def _with_overrides(config, overrides):
    """``config`` with the settings of ``overrides`` ({name: value}; text is parsed as the
    setting's kind: ``"4gb"``, ``"false"``, ``"9300"``), checked again as MooncakeConfig checks
    them (``ValueError``). Names MooncakeConfig does not have are ignored with a warning."""
    known = {f.name for f in dataclasses.fields(config)}
    changes = {}
    for name, value in overrides.items():
        if name not in known:
            log.warning("Ignoring unknown setting %r", name)
            continue
        parse = _PARSERS.get(name)
        if parse is not None and isinstance(value, str):
            try:
                value = parse(value)
            except ValueError as e:
                raise ValueError(f"Invalid {name} {value!r}: {e}") from None
        changes[name] = value
    return dataclasses.replace(config, **changes) if changes else config


def _parse_defines(items):
    """``{name: value}`` from ``-Dname=value`` items; an item without ``=`` is ignored with a
    warning."""
    overrides = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            log.warning("Ignoring -D%s: expected name=value", item)
            continue
        overrides[name] = value
    return overrides


def _shm_name_to_path(name):
    """``/dev/shm/NAME`` for a shared-memory object's name (one leading ``/`` allowed), or
    ``None`` when ``name`` is not text, is empty, ``.`` or ``..``, or holds another ``/``."""
    if not isinstance(name, str):
        return None
    bare = name[1:] if name.startswith("/") else name
    if bare in ("", ".", "..") or "/" in bare:
        return None
    return f"/dev/shm/{bare}"


# ---------------------------------------------------------------------- requests and answers


class _BadRequest(Exception):
    """A request refused before the store is touched; answered 400 with this text."""


def _json(status, body):
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _ok(**fields):
    return _json(200, {"status": "success", **fields})


def _failed(message, status=500, **fields):
    return _json(status, {"error": message, **fields})


def _route(name):
    """Makes an ``async (self, request)`` method a handler: a ``_BadRequest`` becomes 400, any
    other exception 500 with its text, and the time taken is logged under ``name``."""
    def wrap(handler):
        @functools.wraps(handler)
        async def answer(self, request):
            start = time.perf_counter()
            try:
                return await handler(self, request)
            except _BadRequest as e:
                return _failed(str(e), status=400)
            except Exception as e:
                log.error("%s error: %s", name, e)
                return _failed(str(e))
            finally:
                log.info("%s operation completed in %.2f ms", name,
                         (time.perf_counter() - start) * 1000)
        return answer
    return wrap


async def _body(request):
    """The request's JSON object."""
    try:
        body = await request.json()
    except Exception:
        raise _BadRequest("Malformed JSON body") from None
    if not isinstance(body, dict):
        raise _BadRequest("Request body must be a JSON object")
    return body


def _count(value, minimum):
    """Whether ``value`` is a JSON integer (not a bool) of at least ``minimum``."""
    return type(value) is int and value >= minimum


def _segment_ids(body):
    """The body's ``segment_ids``: a list of ids, or one id as text."""
    ids = body.get("segment_ids", [])
    if isinstance(ids, str):
        ids = [ids]
    if not ids:
        raise _BadRequest("Missing segment_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _BadRequest("segment_ids must be a string or a list of strings")
    return ids


def _grace_period(body, limit=None):
    """The body's ``grace_period_seconds`` (default 0): an integer from 0 to ``limit``."""
    grace = body.get("grace_period_seconds", 0)
    if not _count(grace, 0) or (limit is not None and grace > limit):
        bound = "" if limit is None else f" no greater than {limit}"
        raise _BadRequest(
            f"Invalid grace_period_seconds, must be a non-negative integer{bound}")
    return grace


def _offset(body):
    offset = body.get("offset", 0)
    if not _count(offset, 0):
        raise _BadRequest("Invalid offset, must be a non-negative integer")
    return offset


# ---------------------------------------------------------------------- the service


class MooncakeStoreService:
    """A ``MooncakeDistributedStore`` and the REST API in front of it.

    Lifecycle: construct (reads the settings), ``await start_store_service()`` (sets the
    client up, retrying), ``await start_http_service(port, host)``, and at the end
    ``await stop()``. :func:`main` does all of it.

    The decode/prefill state of ``/api/reconfigure``: ``current_mode`` (``"prefill"`` or
    ``"decode"``), ``mounted_segment_ids`` (what decode mounted and has not unmounted yet) and
    ``last_mount_info`` (the parameters of the mount that is serving). ``_state_lock`` keeps
    the routes that change them from interleaving.
    """

    # Set by start_http_service; stop() cleans it up.
    _runner = None
    #: The port the REST API listens on, once started.
    port = None

    def __init__(self, config_path: str = None, cli_config: dict = None):
        """Reads the settings: the JSON file ``config_path``, else the ``MOONCAKE_*``
        environment; then ``cli_config`` ({name: value}) over them. Raises ``ValueError`` for
        settings MooncakeConfig refuses."""
        self.store = None
        self.current_mode = "prefill"
        self.mounted_segment_ids = []
        self.last_mount_info = {}
        self._state_lock = asyncio.Lock()
        try:
            if config_path:
                config = MooncakeConfig.from_file(config_path)
            else:
                config = MooncakeConfig.load_from_env()
            self.config = _with_overrides(config, cli_config or {})
        except Exception as e:
            log.error("Configuration load failed: %s", e)
            raise
        log.info("Mooncake configuration loaded")

    # ------------------------------------------------------------------ lifecycle

    async def start_store_service(self, max_wait_time: float = 60, shutdown_event=None):
        """Sets the store client up, trying again every second for up to ``max_wait_time``
        seconds. True once it is up; False when time ran out or ``shutdown_event`` was set
        first (a client set up meanwhile is closed again)."""
        deadline = time.monotonic() + max_wait_time
        attempt = 0

        def shutting_down():
            if shutdown_event is not None and shutdown_event.is_set():
                log.info("Store startup cancelled by shutdown request")
                return True
            return False

        if shutdown_event is not None:
            await asyncio.sleep(0)  # let a signal that came just before be seen
        while not shutting_down():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.error("Store startup failed: exceeded max wait time of %ss after %d "
                          "attempts", max_wait_time, attempt)
                return False
            attempt += 1
            log.info("Attempting to start store service (attempt %d, %.1fs left)",
                     attempt, remaining)
            try:
                self.store = MooncakeDistributedStore()
                ret = self.store.setup(_store_settings(self.config))
            except Exception as e:
                self.store, failure = None, str(e)
            else:
                if shutdown_event is not None:
                    # setup blocked the loop: a signal that came meanwhile is only seen now.
                    await asyncio.sleep(0)
                    if shutting_down():
                        await self.stop()
                        return False
                if ret == 0:
                    log.info("Store service started on %s", self.config.local_hostname)
                    return True
                self.store, failure = None, f"setup returned {ret}"
                if ret == INVALID_PARAMS:
                    # A setting the store refuses: trying again cannot change the answer.
                    log.error("Store startup failed: %s (a setting was refused; see above)",
                              failure)
                    return False
            pause = max(0.0, min(SETUP_RETRY_SECONDS, deadline - time.monotonic()))
            log.warning("Store startup failed (attempt %d): %s; retrying in %.1fs",
                        attempt, failure, pause)
            if shutdown_event is None:
                await asyncio.sleep(pause)
                continue
            try:
                await asyncio.wait_for(shutdown_event.wait(), timeout=pause)
            except asyncio.TimeoutError:
                pass
        return False

    async def start_http_service(self, port: int = DEFAULT_PORT, host: str = DEFAULT_HOST):
        """Serves the REST API on ``host:port`` (port 0: any free one, then in ``self.port``).
        True once listening; ``OSError`` when it cannot listen there."""
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.add_routes([web.route(method, path, getattr(self, handler))
                        for method, path, handler in _ROUTES])
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        log.info("REST API listening on %s:%d", host, self.port)
        return True

    async def stop(self):
        """Stops serving and closes the store client; safe to call more than once."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        store, self.store = self.store, None
        if store is None:
            return
        ret = store.close()
        if ret != 0:
            log.warning("Mooncake store close returned %s", ret)
        else:
            log.info("Mooncake service stopped")

    async def _call(self, method, *args):
        """``method(*args)`` of the store, on a worker thread: store calls block on the
        network, and the other requests go on meanwhile."""
        return await asyncio.to_thread(method, *args)

    # ------------------------------------------------------------------ segments

    def _enter_prefill(self):
        self.current_mode = "prefill"
        self.mounted_segment_ids = []
        self.last_mount_info = {}

    async def _unmount_each(self, segment_ids, grace_period_seconds=0):
        """Unmounts the ids one at a time (a batch reports only its first error, not which ids
        went); those that failed, and the first failure's code."""
        failed, first = [], 0
        for sid in segment_ids:
            ret = await self._call(self.store.unmount_segment, [sid], grace_period_seconds)
            if ret != 0:
                failed.append(sid)
                first = first or ret
        return failed, first

    @_route("RECONFIGURE")
    async def handle_reconfigure(self, request):
        """``POST /api/reconfigure``: switches between decode (a mounted file) and prefill."""
        body = await _body(request)
        mode = body.get("mode", "")
        mode = mode.lower() if isinstance(mode, str) else ""
        if mode == "decode":
            return await self._reconfigure_decode(body)
        if mode == "prefill":
            return await self._reconfigure_prefill()
        raise _BadRequest("Invalid mode. Use 'decode' or 'prefill'")

    async def _reconfigure_decode(self, body):
        """Mounts the file of ``body``, then retires the segments that served before it. A
        failed mount keeps those serving (still decode); with none, the node is prefill."""
        path, size = body.get("path"), body.get("size")
        if not path or size is None:
            raise _BadRequest("Missing path or size for decode mode")
        if not isinstance(path, str):
            raise _BadRequest("Invalid path, must be a string")
        if not _count(size, 1):
            raise _BadRequest("Invalid size, must be a positive integer")
        offset = _offset(body)
        protocol = body.get("protocol", self.config.protocol)
        location = body.get("location", "")
        async with self._state_lock:
            serving = list(self.mounted_segment_ids)
            result = await self._call(self.store.mount_segment, path, size, offset, protocol,
                                      location)
            ret = result["ret"]
            if ret != 0:
                if serving:
                    log.warning("Reconfigure decode: mounting %s failed (ret=%s); the "
                                "previous segments keep serving", path, ret)
                    return _failed(f"Mount failed, ret={ret}; keeping previous decode "
                                   "segments", mode=self.current_mode)
                self._enter_prefill()
                return _failed(f"Mount failed, ret={ret}; rolled back to prefill",
                               mode=self.current_mode)
            left, _ = await self._unmount_each(serving)
            if left:
                log.warning("Reconfigure decode: the new segment serves, but unmounting %s "
                            "failed; they stay tracked for a later unmount", left)
            self.mounted_segment_ids = list(result["segment_ids"]) + left
            self.current_mode = "decode"
            self.last_mount_info = {"path": path, "offset": offset, "size": size,
                                    "protocol": protocol, "location": location}
            return _ok(mode=self.current_mode, segment_ids=self.mounted_segment_ids)

    async def _reconfigure_prefill(self):
        """Unmounts what decode mounted; if some cannot go, they stay tracked (still
        decode)."""
        async with self._state_lock:
            if self.mounted_segment_ids:
                left, ret = await self._unmount_each(self.mounted_segment_ids)
                if left:
                    self.mounted_segment_ids = left
                    return _failed(f"Unmount failed, ret={ret}", failed_segment_ids=left)
            self._enter_prefill()
            return _ok(mode=self.current_mode)

    @_route("MOUNT_SHM")
    async def handle_mount_shm(self, request):
        """``POST /api/mount_shm``: mounts the shared-memory object ``name`` as store space."""
        body = await _body(request)
        path, size = _shm_name_to_path(body.get("name")), body.get("size")
        if not path or not _count(size, 1):
            raise _BadRequest("Missing or invalid name or size")
        offset = _offset(body)
        protocol = body.get("protocol", self.config.protocol)
        location = body.get("location", "")
        result = await self._call(self.store.mount_segment, path, size, offset, protocol,
                                  location)
        if result["ret"] != 0:
            return _failed(f"Mount failed, ret={result['ret']}")
        return _ok(segment_ids=list(result["segment_ids"]))

    @_route("UNMOUNT_SHM")
    async def handle_unmount_shm(self, request):
        """``POST /api/unmount_shm``: unmounts segments one at a time; ids decode tracked are
        forgotten as they go, and with none left the node is prefill."""
        body = await _body(request)
        ids, grace = _segment_ids(body), _grace_period(body)
        async with self._state_lock:
            failed, _ = await self._unmount_each(ids, grace)
            self.mounted_segment_ids = [sid for sid in self.mounted_segment_ids
                                        if sid not in ids or sid in failed]
            if not self.mounted_segment_ids:
                self._enter_prefill()
        if failed:
            return _failed("Unmount failed for one or more segments", failed_segment_ids=failed)
        return _ok()

    @_route("MOUNT")
    async def handle_mount(self, request):
        """``POST /api/mount``: store space the store allocates (rounded up: see
        ``allocated_size``)."""
        body = await _body(request)
        size = body.get("size")
        if not _count(size, 1):
            raise _BadRequest("Invalid size, must be a positive integer")
        protocol = body.get("protocol", self.config.protocol)
        location = body.get("location", "")
        result = await self._call(self.store.allocate_and_mount_segment, size, protocol,
                                  location)
        if result["ret"] != 0:
            return _failed(f"Allocate and mount failed, ret={result['ret']}")
        return _ok(segment_ids=list(result["segment_ids"]),
                   allocated_size=result["allocated_size"])

    @_route("UNMOUNT")
    async def handle_unmount(self, request):
        """``POST /api/unmount``: unmounts segments of ``/api/mount`` and frees their memory."""
        body = await _body(request)
        ids, grace = _segment_ids(body), _grace_period(body)
        ret = await self._call(self.store.unmount_and_free_segment, ids, grace)
        if ret != 0:
            return _failed(f"Unmount and free failed, ret={ret}")
        return _ok()

    @_route("UNMOUNT_LOCAL_DISK")
    async def handle_unmount_local_disk(self, request):
        """``POST /api/unmount_local_disk``, for a preStop hook: the master stops naming this
        store as the owner of the objects it offloaded to disk (readers miss instead of
        waiting on a peer about to go), then the call holds ``grace_period_seconds`` so that
        reads already handed out can finish. A store without an SSD tier succeeds at once."""
        body = await _body(request)
        grace = _grace_period(body, _MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS)
        ret = await self._call(self.store.unmount_local_disk_segment, grace)
        if ret != 0:
            return _failed(f"Unmount local disk failed, ret={ret}")
        return _ok()

    # ------------------------------------------------------------------ objects

    @_route("PUT")
    async def handle_put(self, request):
        """``PUT /api/put``: stores ``value`` (text, as UTF-8) under ``key``."""
        body = await _body(request)
        key, value = body.get("key"), body.get("value")
        if not key or value is None:
            raise _BadRequest("Missing key or value")
        if not isinstance(key, str) or not isinstance(value, str):
            raise _BadRequest("key and value must be strings")
        ret = await self._call(self.store.put, key, value.encode())
        if ret != 0:
            return _failed(f"PUT operation failed, ret={ret}")
        return _ok()

    async def _exists(self, key):
        """None if ``key`` exists, else the answer to give: 404, or 500 when the check
        failed."""
        exists = await self._call(self.store.is_exist, key)
        if exists == 0:
            return _failed("Key not found", status=404)
        if exists < 0:
            return _failed("Exist check failed")
        return None

    @_route("GET")
    async def handle_get(self, request):
        """``GET /api/get/{key}``: the value's bytes."""
        key = request.match_info["key"]
        missing = await self._exists(key)
        if missing is not None:
            return missing
        value = await self._call(self.store.get, key)
        if value is None:
            return _failed("GET operation failed")
        if value == b"":
            # An empty answer is also what a key removed since the check gets.
            missing = await self._exists(key)
            if missing is not None:
                return missing
        return web.Response(status=200, body=value, content_type="application/octet-stream")

    @_route("EXIST")
    async def handle_exist(self, request):
        """``GET /api/exist/{key}``: ``{"exists": bool}``."""
        exists = await self._call(self.store.is_exist, request.match_info["key"])
        if exists < 0:
            return _failed("Exist check failed")
        return _json(200, {"exists": exists > 0})

    @_route("REMOVE")
    async def handle_remove(self, request):
        """``DELETE /api/remove/{key}``."""
        ret = await self._call(self.store.remove, request.match_info["key"])
        if ret != 0:
            return _failed(f"Remove operation failed, ret={ret}")
        return _ok()

    @_route("REMOVE_ALL")
    async def handle_remove_all(self, request):
        """``DELETE /api/remove_all``: how many objects went, in the status text."""
        removed = await self._call(self.store.remove_all)
        if removed < 0:
            return _failed(f"RemoveAll operation failed, ret={removed}")
        return _json(200, {"status": f"success removed {removed} keys"})


# ---------------------------------------------------------------------- the command


def _unblock_shutdown_signals():
    """Unmasks SIGINT and SIGTERM on this thread (a native library's setup may leave them
    masked, and the loop would then never see them)."""
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    except AttributeError:
        pass  # no pthread_sigmask on this platform


def _install_shutdown_signal_handlers(loop, shutdown_event):
    """Makes SIGINT and SIGTERM set ``shutdown_event``: through ``loop`` where it can watch
    signals, else through a plain handler that hands the signal to the loop."""
    def request_shutdown(signum):
        log.info("Received signal %s, shutting down", signum)
        shutdown_event.set()

    def on_signal(signum, _frame):
        loop.call_soon_threadsafe(request_shutdown, signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, request_shutdown, sig)
        except (NotImplementedError, RuntimeError):
            signal.signal(sig, on_signal)


def parse_arguments(argv=None):
    """The command line of ``mc_store_rest_server``."""
    parser = argparse.ArgumentParser(
        description="Mooncake store service with a REST API (yuebing)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--config", help="a Mooncake JSON config file (else the MOONCAKE_* "
                        "environment)")
    parser.add_argument("-D", "--define", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting over the config's, e.g. -Dlocal_hostname=node1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="port of the REST API (0: any free one)")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address the REST API binds")
    parser.add_argument("--max-wait-time", type=float, default=60,
                        help="seconds to keep retrying the store's setup")
    return parser.parse_args(argv)


async def main():
    """Runs the service until SIGINT or SIGTERM; a shutdown asked for during startup ends it
    cleanly too. Raises ``RuntimeError`` when the store cannot be set up in time."""
    args = parse_arguments()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
    service = MooncakeStoreService(args.config, _parse_defines(args.define))
    shutdown = asyncio.Event()
    _install_shutdown_signal_handlers(asyncio.get_running_loop(), shutdown)
    _unblock_shutdown_signals()
    try:
        started = await service.start_store_service(max_wait_time=args.max_wait_time,
                                                    shutdown_event=shutdown)
        if not started:
            if shutdown.is_set():
                return
            raise RuntimeError("Failed to start store service")
        _unblock_shutdown_signals()
        await asyncio.sleep(0)
        if shutdown.is_set():
            return
        # A namespace from an older parse_arguments (or a test's) has no --host.
        host = getattr(args, "host", DEFAULT_HOST)
        await service.start_http_service(args.port, host)
        print(f"mooncake store service ready on http://{host}:{service.port}", flush=True)
        await shutdown.wait()
    finally:
        await service.stop()


def sync_main():
    """The ``mc_store_rest_server`` command: 0 after a clean shutdown, 1 (and one line saying
    why) when the settings are refused, the store cannot be set up or the port is taken."""
    try:
        asyncio.run(main())
    except (RuntimeError, ValueError, OSError) as e:
        print(f"mc_store_rest_server: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(sync_main())
