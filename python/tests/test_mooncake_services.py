"""The drop-in's services and commands against real processes on 127.0.0.1: the HTTP metadata
server (``mooncake.http_metadata_server``, its ``mooncake_http_metadata_server`` command, and
Mooncake's own test of it, unmodified), the store's REST service
(``mooncake.mooncake_store_service``, ``mc_store_rest_server``), and the ``mooncake_master`` /
``mooncake_client`` launch lines run as ``yuebing master`` / ``yuebing node``."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import socket

import pytest
from conftest import Cluster, Process, yuebing_bin

from mooncake.http_metadata_server import KVBootstrapServer, KVPoll

MIB = 1 << 20
UPSTREAM = pathlib.Path(__file__).resolve().parents[1] / "mooncake-upstream-tests"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, method, key, body=None):
    url = f"http://127.0.0.1:{port}/metadata" + ("" if key is None else f"?key={key}")
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_metadata_server_stores_values_over_http():
    server = KVBootstrapServer(port=0)
    assert server.poll() is KVPoll.Failed, "not started"
    server.run()
    try:
        assert server.port != 0 and server.poll() is KVPoll.Success
        p = server.port
        assert call(p, "GET", "a") == (404, b"metadata not found")
        assert call(p, "PUT", "a", b'{"x": 1}')[0] == 200
        assert call(p, "GET", "%20a%20") == (200, b'{"x": 1}'), "keys are stripped"
        assert call(p, "PUT", "mooncake/rpc_meta/n1", b"1")[0] == 200
        assert call(p, "PUT", "mooncake/rpc_meta/n1", b"2")[0] == 400, "a name taken"
        assert call(p, "PUT", None, b"v")[0] == 400
        assert call(p, "POST", "a", b"v")[0] == 405
        assert call(p, "DELETE", "a")[0] == 200
        assert call(p, "DELETE", "a")[0] == 404
        # A second server on the same port cannot listen: run() says so.
        with pytest.raises(OSError):
            KVBootstrapServer(port=p).run()
    finally:
        server.close()
    assert server.poll() is KVPoll.Failed


def test_the_metadata_server_command_serves_until_sigterm():
    cmd = [sys.executable, "-m", "mooncake.http_metadata_server", "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "ready on 127.0.0.1:" in line, line + proc.stderr.read()
        port = int(line.rsplit(":", 1)[1])
        assert call(port, "PUT", "k", b"v")[0] == 200
        assert call(port, "GET", "k") == (200, b"v")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_mooncakes_metadata_server_test_passes_unmodified():
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "test_http_metadata_server.py"], cwd=UPSTREAM, capture_output=True,
                         text=True, timeout=120, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "5 passed" in run.stdout, run.stdout


def mooncake_command(module, *args):
    env = dict(os.environ, YUEBING_BIN=yuebing_bin())
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=30, env=env)


def test_mooncake_master_and_client_launch_lines_run_yuebing(tmp_path, monkeypatch):
    from mooncake.store import MooncakeDistributedStore
    # The client serves dummy clients on Mooncake's default port: its socket in a directory of
    # this test's.
    monkeypatch.setenv("YUEBING_DUMMY_DIR", str(tmp_path / "dummies"))
    metrics = free_port()
    master = Process(["--rpc_port=0", "--rpc_address", "127.0.0.1", "--default_kv_lease_ttl=2s",
                      "--client_ttl", "5", "--eviction_high_watermark_ratio=0.8",
                      "--allocation_strategy=random", "--rpc_thread_num=2", "--noenable_ha",
                      f"--metrics_port={metrics}"],
                     "yuebing master ready on ", program=[sys.executable, "-m", "mooncake.cli"])
    node = None
    st = MooncakeDistributedStore()
    try:
        address = master.announced.removeprefix("tcp://")
        node = Process(["--master_server_address", address, "--global_segment_size=64 MB",
                        "--protocol=tcp", "--metadata_server=P2PHANDSHAKE", "--host=127.0.0.1",
                        "--local_buffer_size=16MB"],
                       "mooncake_client ready: ",
                       program=[sys.executable, "-m", "mooncake.cli_client"])
        # SGLang's check_server: the master's metrics port lists the real client's segment.
        url = f"http://127.0.0.1:{metrics}/get_all_segments"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.read().decode().split() == [node.announced.split()[0]]
        assert st.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", address) == 0
        assert st.put("k", b"v" * 1000) == 0
        assert st.get("k") == b"v" * 1000
        # The lease of --default_kv_lease_ttl=2s: a get's lease holds off a plain remove.
        assert st.remove("k") == -706
    finally:
        st.close()
        for p in (node, master):
            if p is not None:
                p.kill()


def test_mooncake_master_serves_the_http_metadata_server_beside_it():
    port = free_port()
    master = Process(["--port=0", "--enable_http_metadata_server",
                      f"--http_metadata_server_port={port}", f"--metrics_port={free_port()}"],
                     "yuebing master ready on ",
                     program=[sys.executable, "-m", "mooncake.cli"])
    try:
        assert call(port, "PUT", "k", b"v")[0] == 200
        assert call(port, "GET", "k") == (200, b"v")
        master.signal(signal.SIGTERM)
        assert master.proc.wait(timeout=20) in (0, 143)
    finally:
        master.kill()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metadata?key=k", timeout=2)


@pytest.mark.parametrize("module,args,named", [
    ("mooncake.cli", ["--metrics_host=0.0.0.0"], "--metrics_host"),
    ("mooncake.cli", ["--enable_ha"], "--etcd_endpoints"),
    ("mooncake.cli", ["--allocation_strategy=cxl"], "--allocation_strategy"),
    ("mooncake.cli", ["--no_such_flag=1"], "--no_such_flag"),
    ("mooncake.cli", ["--default_kv_lease_ttl=soon"], "duration"),
    ("mooncake.cli_client", ["--master_server_address=127.0.0.1:1", "--port=none"], "--port"),
    ("mooncake.cli_client", ["--master_server_address=127.0.0.1:1", "--port=70000"], "--port"),
    ("mooncake.cli_client", ["--master_server_address=127.0.0.1:1", "--protocol=efa"],
     "--protocol"),
    ("mooncake.cli_client", ["--global_segment_size=1GB"], "--master_server_address"),
])
def test_flags_yuebing_cannot_honour_are_refused_by_name(module, args, named):
    run = mooncake_command(module, *args)
    assert run.returncode == 1, run
    assert named in run.stderr, run.stderr


def rest(port, method, path, body=None):
    """``(status, body bytes)`` of a call to the store's REST service; ``body``: JSON, or raw
    bytes sent as they are."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_store_rest_service_serves_a_real_store_until_sigterm(monkeypatch):
    # A short read lease: the get below holds off the remove that follows until it ends.
    cluster = Cluster(nodes=0, master_args=("--lease-ttl-ms", "100"))
    monkeypatch.setenv("MOONCAKE_MASTER", cluster.address.removeprefix("tcp://"))
    monkeypatch.setenv("MOONCAKE_LOCAL_HOSTNAME", "127.0.0.1")
    monkeypatch.setenv("MOONCAKE_PROTOCOL", "tcp")
    monkeypatch.setenv("MOONCAKE_LOCAL_BUFFER_SIZE", "16MB")
    # Two shared-memory objects, mounted over HTTP: /api/mount_shm, then /api/reconfigure.
    tag = uuid.uuid4().hex
    shm, decode = (pathlib.Path(f"/dev/shm/yuebing-test-rest-{kind}-{tag}")
                   for kind in ("shm", "decode"))
    service = None
    try:
        for path in (shm, decode):
            path.write_bytes(bytes(8 * MIB))
        # No store space of its own (-D over the environment's default): every object lands
        # in what is mounted over HTTP.
        service = Process(["--port", "0", "-Dglobal_segment_size=0"],
                          "mooncake store service ready on http://127.0.0.1:",
                          program=[sys.executable, "-m", "mooncake.mooncake_store_service"])
        port = int(service.announced)
        assert rest(port, "PUT", "/api/put", {"key": "k", "value": "v"})[0] == 500, \
            "no store space yet"

        # The second half of a shared-memory object as store space; a put lands in it.
        status, body = rest(port, "POST", "/api/mount_shm",
                            {"name": shm.name, "size": 4 * MIB, "offset": 4 * MIB})
        assert status == 200, body
        shm_ids = json.loads(body)["segment_ids"]
        assert len(shm_ids) == 1, body
        assert rest(port, "POST", "/api/mount_shm", {"name": "../x", "size": MIB})[0] == 400
        assert rest(port, "POST", "/api/mount_shm",
                    {"name": f"{shm.name}.missing", "size": MIB})[0] == 500
        value = f"in shm {tag} " * 512
        assert rest(port, "PUT", "/api/put", {"key": "s", "value": value})[0] == 200
        assert shm.read_bytes().find(value.encode()) >= 4 * MIB, "in the mounted half"
        assert rest(port, "GET", "/api/get/s") == (200, value.encode())
        # Unmounted, its only replica goes with it.
        ids = {"segment_ids": shm_ids}
        assert rest(port, "POST", "/api/unmount_shm", ids) == (200, b'{"status": "success"}')
        status, body = rest(port, "POST", "/api/unmount_shm", ids)
        assert status == 500 and json.loads(body)["failed_segment_ids"] == shm_ids, body
        deadline = time.monotonic() + 10
        while json.loads(rest(port, "GET", "/api/exist/s")[1])["exists"]:
            assert time.monotonic() < deadline, "the object outlived its segment"
            time.sleep(0.05)

        # Decode: a file mounted as store space; the objects below live in it.
        status, body = rest(port, "POST", "/api/reconfigure",
                            {"mode": "decode", "path": str(decode), "size": 8 * MIB})
        assert status == 200, body
        decoded = json.loads(body)
        assert decoded["mode"] == "decode" and len(decoded["segment_ids"]) == 1, body
        assert rest(port, "POST", "/api/reconfigure", {"mode": "decode"})[0] == 400
        value = f"h\u00e9llo {tag} " * 512
        assert rest(port, "PUT", "/api/put", {"key": "k", "value": value}) == \
            (200, b'{"status": "success"}')
        assert decode.read_bytes().find(value.encode()) >= 0, "in the decode file"
        assert rest(port, "GET", "/api/get/k") == (200, value.encode())
        assert json.loads(rest(port, "GET", "/api/exist/k")[1]) == {"exists": True}
        assert rest(port, "GET", "/api/get/missing")[0] == 404
        assert json.loads(rest(port, "GET", "/api/exist/missing")[1]) == {"exists": False}
        assert rest(port, "PUT", "/api/put", b"not json")[0] == 400
        assert rest(port, "PUT", "/api/put", {"key": "k2"})[0] == 400
        deadline = time.monotonic() + 10
        while (removed := rest(port, "DELETE", "/api/remove/k"))[0] != 200:
            assert b"ret=-706" in removed[1] and time.monotonic() < deadline, removed
            time.sleep(0.05)
        assert json.loads(rest(port, "GET", "/api/exist/k")[1]) == {"exists": False}
        assert rest(port, "PUT", "/api/put", {"key": "k3", "value": "v"})[0] == 200
        assert json.loads(rest(port, "DELETE", "/api/remove_all")[1]) == \
            {"status": "success removed 1 keys"}
        # Prefill unmounts what decode mounted: no store space again.
        assert rest(port, "POST", "/api/reconfigure", {"mode": "prefill"}) == \
            (200, b'{"status": "success", "mode": "prefill"}')
        assert rest(port, "PUT", "/api/put", {"key": "k4", "value": "v"})[0] == 500

        # Store space the service allocates, rounded up to 4 MiB, and given back.
        status, body = rest(port, "POST", "/api/mount", {"size": 1})
        assert status == 200, body
        mounted = json.loads(body)
        assert mounted["allocated_size"] == 4 << 20 and len(mounted["segment_ids"]) == 1
        assert rest(port, "POST", "/api/mount", {"size": 0})[0] == 400
        ids = {"segment_ids": mounted["segment_ids"]}
        assert rest(port, "POST", "/api/unmount", ids)[0] == 200
        assert rest(port, "POST", "/api/unmount", ids)[0] == 500, "not mounted any more"
        # No SSD tier: nothing to drain.
        assert rest(port, "POST", "/api/unmount_local_disk",
                    {"grace_period_seconds": 3601})[0] == 400
        assert rest(port, "POST", "/api/unmount_local_disk", {}) == \
            (200, b'{"status": "success"}')
        service.proc.send_signal(signal.SIGTERM)
        assert service.proc.wait(timeout=15) == 0, service.stderr()
    finally:
        if service is not None:
            service.kill()
        cluster.stop()
        for path in (shm, decode):
            path.unlink(missing_ok=True)


def test_the_store_rest_service_gives_up_on_a_master_that_never_answers():
    env = dict(os.environ, MOONCAKE_MASTER=f"127.0.0.1:{free_port()}",
               MOONCAKE_GLOBAL_SEGMENT_SIZE="0")
    run = subprocess.run([sys.executable, "-m", "mooncake.mooncake_store_service", "--port",
                          "0", "--max-wait-time", "1"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert run.returncode == 1, run
    assert run.stderr.splitlines()[-1] == \
        "mc_store_rest_server: RuntimeError: Failed to start store service", run.stderr


def test_the_store_rest_service_stops_at_once_on_a_refused_setting():
    # A tenant yuebing cannot honour: setup answers -600, which no retry changes.
    env = dict(os.environ, MOONCAKE_MASTER=f"127.0.0.1:{free_port()}",
               MOONCAKE_GLOBAL_SEGMENT_SIZE="0", MOONCAKE_TENANT_ID="team-a")
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "mooncake.mooncake_store_service", "--port",
                          "0", "--max-wait-time", "30"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert run.returncode == 1, run
    assert time.monotonic() - started < 20, "it waited out --max-wait-time"
    assert "a setting was refused" in run.stderr, run.stderr
