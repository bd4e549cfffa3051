"""``mooncake.http_metadata_server``: the HTTP metadata server Mooncake deployments start
(``mooncake_http_metadata_server --port 8080``), an in-memory key-value store on ``/metadata``:

- ``GET /metadata?key=K``: the value (200), or 404;
- ``PUT /metadata?key=K`` with the value as body: 200 (a key containing ``rpc_meta`` that
  exists already: 400, as Mooncake refuses to let a second engine take a name);
- ``DELETE /metadata?key=K``: 200, or 404;
- ``GET /health``: 200 ``OK`` (as the server embedded in Mooncake's master answers).

Keys are stripped of surrounding blanks; a missing or blank key is 400. yuebing's engines
exchange segment descriptors peer to peer and do not need it; it is here so that launch
scripts and other Mooncake components that use it keep working. Unlike Mooncake it binds
``127.0.0.1`` unless told otherwise (``--host``), and ``run`` returns once it listens (or
raises why it cannot).
"""

import argparse
import asyncio
import enum
import logging
import signal
import sys
import threading

from aiohttp import web

log = logging.getLogger("mooncake.http_metadata_server")


class KVPoll(enum.Enum):
    """The server's state, as ``poll`` reports it."""
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


def _answer(text, status):
    return web.Response(text=text, status=status, content_type="application/json")


class KVBootstrapServer:
    """The metadata server: ``store`` holds the values; ``run`` serves it on a thread of its
    own, ``close`` stops it. ``port`` 0 picks a free port (``port`` holds it once running)."""

    def __init__(self, port, host="127.0.0.1"):
        self.port, self.host = int(port), host
        self.store = {}
        self.lock = asyncio.Lock()
        self.app = web.Application()
        self.app.router.add_route("*", "/metadata", self._handle_metadata)
        # As the metadata server embedded in Mooncake's master (`mooncake_master
        # --enable_http_metadata_server`, which this one serves in the drop-in).
        self.app.router.add_get("/health", self._handle_health)
        self.thread = None
        self._loop = None
        self._stopped = None

    async def _handle_health(self, request):
        return web.Response(text="OK", status=200)

    async def _handle_metadata(self, request):
        key = request.query.get("key", "").strip()
        if not key:
            return _answer("metadata key is required", 400)
        if request.method == "GET":
            async with self.lock:
                value = self.store.get(key)
            if value is None:
                return _answer("metadata not found", 404)
            return web.Response(body=value, status=200, content_type="application/json")
        if request.method == "PUT":
            data = await request.read()
            async with self.lock:
                if "rpc_meta" in key and key in self.store:
                    return _answer("Duplicate rpc_meta key not allowed", 400)
                self.store[key] = data
            return _answer("metadata updated", 200)
        if request.method == "DELETE":
            async with self.lock:
                if self.store.pop(key, None) is None:
                    return _answer("metadata not found", 404)
            return _answer("metadata deleted", 200)
        return _answer("Method not allowed", 405)

    def run(self):
        """Starts serving on a daemon thread; returns it once the server listens. Raises
        ``OSError`` when it cannot listen (the port is taken, the host is not local)."""
        started = threading.Event()
        failure = []

        def serve():
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            runner = web.AppRunner(self.app)
            try:
                loop.run_until_complete(runner.setup())
                site = web.TCPSite(runner, host=self.host, port=self.port)
                loop.run_until_complete(site.start())
                self.port = runner.addresses[0][1]
                self._loop, self._stopped = loop, asyncio.Event()
            except BaseException as e:  # reported by run(), on the caller's thread
                failure.append(e)
                started.set()
                loop.run_until_complete(runner.cleanup())
                loop.close()
                return
            started.set()
            try:
                loop.run_until_complete(self._stopped.wait())
            finally:
                loop.run_until_complete(runner.cleanup())
                loop.close()

        self.thread = threading.Thread(target=serve, name="mooncake-metadata", daemon=True)
        self.thread.start()
        started.wait()
        if failure:
            self.thread.join()
            raise failure[0]
        log.info("HTTP metadata server listening on %s:%d", self.host, self.port)
        return self.thread

    def close(self):
        """Stops serving (waits up to 2 s for the thread)."""
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:
                pass  # the loop closed meanwhile
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(timeout=2)

    def poll(self):
        """``KVPoll.Success`` while serving, else ``KVPoll.Failed``."""
        alive = self.thread is not None and self.thread.is_alive()
        return KVPoll.Success if alive else KVPoll.Failed


def parse_args(argv=None):
    """The command line of ``mooncake_http_metadata_server``."""
    p = argparse.ArgumentParser(description="HTTP metadata server for Mooncake (yuebing)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--port", type=int, default=8080, help="port to listen on (0: any free)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"])
    return p.parse_args(argv)


def main(argv=None):
    """``mooncake_http_metadata_server``: serves until SIGINT or SIGTERM."""
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
    server = KVBootstrapServer(port=args.port, host=args.host)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        server.run()
    except OSError as e:
        log.error("cannot listen on %s:%d: %s", args.host, args.port, e)
        return 1
    print(f"mooncake http metadata server ready on {args.host}:{server.port}", flush=True)
    while not done.wait(0.5):
        if server.poll() is not KVPoll.Success:
            log.error("the server stopped")
            return 1
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
