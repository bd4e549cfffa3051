"""Real yuebing processes for the tests: a `yuebing master` on an ephemeral port of 127.0.0.1 and
`yuebing node`s that contribute store space, started from the binary that
scripts/python_tests.sh built (YUEBING_BIN), waited for until they announce themselves, and
killed by PID and reaped at the end (also when a test fails)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

import yuebing

REPO = Path(__file__).resolve().parents[2]


def yuebing_bin() -> str:
    given = os.environ.get("YUEBING_BIN")
    if given:
        return given
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return str(target / "debug" / "yuebing")


class Process:
    """A `yuebing` child process that printed `<prefix><announced>` as its first line."""

    def __init__(self, args: list[str], prefix: str, timeout: float = 30.0,
                 program: list[str] | None = None):
        # `program`: another command that runs yuebing (the drop-in's mooncake_master).
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [*(program or [yuebing_bin()]), *args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn"),
                 "YUEBING_BIN": yuebing_bin()},
        )
        self.pid = self.proc.pid
        line = self._first_line(timeout)
        if not line.startswith(prefix):
            self.proc.kill()
            self.proc.wait(timeout=30)
            err = self.stderr()
            self.log.close()
            raise RuntimeError(f"yuebing {args} printed {line!r}, not {prefix!r}…: {err}")
        self.announced = line[len(prefix):].strip()
        # Keep reading stdout so that the child never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _first_line(self, timeout: float) -> str:
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.proc.stdout.readline().decode()))
        reader.daemon = True
        reader.start()
        reader.join(timeout)
        if not got:
            self.kill()
            raise RuntimeError(f"not ready within {timeout} s: {self.stderr()}")
        return got[0]

    def _drain(self) -> None:
        for _ in self.proc.stdout:
            pass

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def signal(self, sig: int) -> None:
        """Sends `sig`; after SIGSTOP, returns once every thread of the process is stopped."""
        os.kill(self.pid, sig)
        if sig == signal.SIGSTOP:
            deadline = time.monotonic() + 10
            while not all_threads_stopped(self.pid):
                assert time.monotonic() < deadline, f"process {self.pid} did not stop"
                time.sleep(0.001)

    def terminate(self, timeout: float = 15.0) -> None:
        """SIGTERM, and SIGKILL if it has not ended within `timeout` (a client that leaves
        this way takes its store space out of the master at once)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.log.close()


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is in state T (stopped), from /proc/PID/task/*/stat."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                stat = f.read()
        except FileNotFoundError:
            continue
        if not stat.rsplit(") ", 1)[1].startswith("T"):
            return False
    return True


class Cluster:
    """A master and its nodes; `address` is the master's `host:port`."""

    def __init__(self, nodes: int = 1, node_size: str = "64M", master_args: tuple[str, ...] = ()):
        self.master = Process(
            ["master", "--bind", "127.0.0.1", "--port", "0", "--metrics-port", "off",
             *master_args],
            "yuebing master ready on ",
        )
        self.address = self.master.announced
        self.nodes: list[Process] = []
        try:
            for _ in range(nodes):
                self.add_node(node_size)
        except BaseException:
            self.stop()
            raise

    def add_node(self, size: str) -> Process:
        node = Process(
            ["node", "--master", self.address, "--store-size", size, "--transport", "tcp",
             "--heartbeat-ms", "100"],
            "yuebing node ready ",
        )
        self.nodes.append(node)
        return node

    def stop(self) -> None:
        for p in [*self.nodes, self.master]:
            try:
                p.kill()
            except Exception:
                pass


@pytest.fixture(scope="session")
def cluster():
    """A master with one node of 64 MiB, shared by the tests of the session."""
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def store(cluster):
    """A pure client (no store space of its own: objects live on the node)."""
    s = yuebing.Store(cluster.address, timeout=30.0)
    yield s
    s.close()


@pytest.fixture
def key():
    """A key no other test uses."""
    return f"py/{uuid.uuid4().hex}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mooncake_real_client(cluster: Cluster, port: int, size: str = "64MB") -> Process:
    """The drop-in's ``mooncake_client --port PORT``: a real client with ``size`` of store
    space that serves dummy clients (``setup_dummy(..., "127.0.0.1:PORT")``)."""
    return Process([f"--master_server_address={cluster.address}", f"--port={port}",
                    f"--global_segment_size={size}", "--host=127.0.0.1"],
                   "mooncake_client ready: ",
                   program=[sys.executable, "-m", "mooncake.cli_client"])
