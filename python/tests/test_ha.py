"""A Store given ``etcd://host:port/CLUSTER`` finds the elected master through etcd and follows
it: etcd and two ``yuebing master --etcd`` on 127.0.0.1, objects put through the first leader,
the leader SIGKILLed, a put and gets that reach the new leader; the Mooncake drop-in's
``master_server_addr`` takes the same address. Skipped, saying why, where the package was built
without its ``etcd`` feature, etcd is not installed, or the ``yuebing`` binary lacks etcd."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

import yuebing
from conftest import Process, yuebing_bin

TTL_MS = 2000


def package_has_etcd() -> bool:
    try:
        yuebing.Store("etcd://127.0.0.1:1/a/b")
    except yuebing.EtcdNotBuilt:
        return False
    except yuebing.EtcdInvalidConfig:
        return True
    raise AssertionError("a malformed etcd:// address was accepted")


def etcd_binary() -> str | None:
    given = os.environ.get("YUEBING_ETCD_BIN")
    if given:
        return given
    return "/usr/bin/etcd" if os.path.isfile("/usr/bin/etcd") else shutil.which("etcd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """One etcd member on 127.0.0.1 with a temp data dir, killed by PID at the end."""

    def __init__(self, binary: str):
        self.dir = tempfile.TemporaryDirectory(prefix="yuebing-etcd-")
        client, peer = free_port(), free_port()
        self.endpoint = f"127.0.0.1:{client}"
        self.log = open(os.path.join(self.dir.name, "etcd.log"), "w+b")
        c, p = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self.proc = subprocess.Popen(
            [binary, "--name", "m0", "--data-dir", os.path.join(self.dir.name, "data"),
             "--listen-client-urls", c, "--advertise-client-urls", c,
             "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
             "--initial-cluster", f"m0={p}"],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while b"ready to serve client requests" not in self.read_log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"etcd did not start: {self.read_log()[-2000:]!r}")
            time.sleep(0.05)

    def read_log(self) -> bytes:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.log.close()
        self.dir.cleanup()


def leader_of(address: str) -> str:
    """The leader that `yuebing store stats --master ADDRESS` names."""
    out = subprocess.run([yuebing_bin(), "store", "stats", "--master", address],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [l.split("\t") for l in out.stdout.splitlines() if l.startswith("master\t")]
    leaders = [l[1] for l in lines if len(l) > 2 and l[2] == "leader"]
    assert len(leaders) == 1, out.stdout
    return leaders[0]


def test_a_store_given_an_etcd_address_follows_the_elected_master():
    if not package_has_etcd():
        pytest.skip("the package was built without its etcd feature "
                    "(maturin develop --features etcd, which needs protoc)")
    binary = etcd_binary()
    if binary is None:
        pytest.skip("etcd is not installed (scripts/test.sh installs Debian's etcd-server)")
    etcd = Etcd(binary)
    procs: list[Process] = []
    store = compat = None
    try:
        for _ in range(2):
            try:
                procs.append(Process(
                    ["master", "--bind", "127.0.0.1", "--port", "0", "--metrics-port", "off",
                     "--etcd", etcd.endpoint,
                     "--cluster", "py", "--election-ttl-ms", str(TTL_MS)],
                    "yuebing master ready on "))
            except RuntimeError as e:
                if "without etcd support" in str(e):
                    pytest.skip(f"{yuebing_bin()} was built without the etcd feature")
                raise
        address = f"etcd://{etcd.endpoint}/py"
        # Store space on a node that pings every 100 ms, so that it remounts with a new leader
        # soon after one is elected (until then a put finds no space: NoAvailableHandle).
        node = Process(["node", "--master", address, "--store-size", "32M", "--transport",
                        "tcp", "--heartbeat-ms", "100"], "yuebing node ready ")
        procs.append(node)
        store = yuebing.Store(address, timeout=20.0)
        before, after = f"ha/{uuid.uuid4().hex}", f"ha/{uuid.uuid4().hex}"
        store.put(before, b"put through the first leader")

        leader = leader_of(address)
        dead = [p for p in procs if p.announced == leader]
        assert len(dead) == 1, (leader, [p.announced for p in procs])
        dead[0].kill()

        # The next calls wait for the new leader (within their timeout) and reach it. Until
        # the node has remounted there, its replicas are not readable yet (ReplicaNotReady,
        # retryable): try again, within a ceiling.
        started = time.monotonic()
        while True:
            try:
                got = store.get(before)
                break
            except (yuebing.ReplicaNotReady, yuebing.NoAvailableHandle):
                assert time.monotonic() - started < 20, "the node did not remount"
                time.sleep(0.05)
        assert got == b"put through the first leader"
        print(f"a get reached the new leader {time.monotonic() - started:.2f} s after the kill")
        store.put(after, b"put through the next leader")
        assert store.get(after) == b"put through the next leader"
        assert leader_of(address) != leader

        from mooncake.store import MooncakeDistributedStore
        compat = MooncakeDistributedStore()
        assert compat.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", address) == 0
        assert compat.get(before) == b"put through the first leader"
        bad = MooncakeDistributedStore()
        assert bad.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "",
                         f"etcd://{etcd.endpoint}") == -600
    finally:
        for s in (compat, store):
            if s is not None:
                s.close()
        for p in procs:
            p.kill()
        etcd.stop()
