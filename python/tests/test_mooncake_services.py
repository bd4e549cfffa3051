"""The drop-in's pure-Python services against real sockets on 127.0.0.1: the HTTP metadata
server (``mooncake.http_metadata_server``, its ``mooncake_http_metadata_server`` command), and
Mooncake's own test of it, unmodified."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from mooncake.http_metadata_server import KVBootstrapServer, KVPoll

UPSTREAM = pathlib.Path(__file__).resolve().parents[1] / "mooncake-upstream-tests"


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
