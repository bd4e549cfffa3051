"""Captures the stock Mooncake master's answers on its admin paths `/get_all_segments` and
`/query_key` for a few cluster shapes, for tests/master_admin/like_mooncake.rs to compare
yuebing's master against. Run through scripts/capture_mooncake_admin.sh, with the Python of the
peer venv (../shared/peers/setup.sh installs the stock wheel there):

    python capture_mooncake_admin.py OUT.json      # the master, clients and the answers
    python capture_mooncake_admin.py --client RPC  # one client (the script starts these itself)

Then a standby: two masters with --enable_ha on an etcd (the `etcd` program, Debian's
etcd-server) started with a temporary data directory, and the paths asked of the one that does
not lead.

Everything runs on 127.0.0.1: etcd, the masters' rpc and admin servers are bound there, each
client sets up with local_hostname 127.0.0.1, P2PHANDSHAKE and tcp. Addresses and ports differ
from run to run; they are written down as they came, and the test normalizes them.
"""

import http.client
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
SEGMENT = 16 * MIB  # each client's global segment (and the second one client A mounts)
VALUE = b"0123456789"  # every key's value: 10 bytes


def client(master):
    """A stock client: mounts its segment, then runs one JSON command per stdin line and
    answers each with one JSON line; closes at the end of its input."""
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig

    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", SEGMENT, 16 * MIB, "tcp", "", master)
    print(json.dumps({"rc": rc, "hostname": store.get_hostname()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "put":
            config = ReplicateConfig()
            config.replica_num = cmd["replicas"]
            out = {"rc": store.put(cmd["key"], VALUE, config)}
        elif cmd["op"] == "mount":
            out = {"rc": store.allocate_and_mount_segment(SEGMENT)["ret"]}
        else:
            out = {"rc": None, "error": f"unknown op {cmd['op']!r}"}
        print(json.dumps(out), flush=True)
    store.close()


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def get(port, path):
    """GET `path` on 127.0.0.1:`port`: status, content type and body as they came."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read().decode()
        return {"status": resp.status, "content_type": resp.getheader("Content-Type"), "body": body}
    finally:
        conn.close()


def wait_for(what, check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.2)


def stop(proc):
    """SIGTERM, then SIGKILL after 10 s; reaped either way."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_master(venv_bin, rpc, admin, log, env, *extra):
    # The console script execs the binary, so this pid is the master's own.
    return subprocess.Popen(
        [os.path.join(venv_bin, "mooncake_master"), "--rpc_address=127.0.0.1",
         f"--rpc_port={rpc}", "--metrics_host=127.0.0.1", f"--metrics_port={admin}",
         "--enable_http_metadata_server=false", *extra],
        stdout=log, stderr=subprocess.STDOUT, env=env)


def answers(port):
    """Whether the admin server on `port` answers yet."""
    try:
        return get(port, "/role")["status"] == 200
    except OSError:
        return False


def capture_standby(venv_bin, tmp, env, log, case):
    """Two masters with --enable_ha on a fresh etcd: the paths asked of the standby."""
    etcd_client, etcd_peer, rpc1, admin1, rpc2, admin2 = free_ports(6)
    etcd = subprocess.Popen(
        ["etcd", "--name=capture", f"--data-dir={os.path.join(tmp, 'etcd')}",
         f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
         f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
         f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
         f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
         f"--initial-cluster=capture=http://127.0.0.1:{etcd_peer}"],
        stdout=log, stderr=subprocess.STDOUT)
    masters = []
    try:
        ha = ["--enable_ha=true", f"--etcd_endpoints=127.0.0.1:{etcd_client}",
              "--cluster_id=capture"]
        # One at a time, so that the first leads and the second stands by.
        for rpc, admin in ((rpc1, admin1), (rpc2, admin2)):
            masters.append(start_master(venv_bin, rpc, admin, log, env, *ha))
            wait_for(f"the master on {admin}", lambda: answers(admin))
        wait_for("a leader and a standby", lambda: sorted(
            get(a, "/role")["body"] for a in (admin1, admin2)) == ["leader", "standby"])
        standby = next(a for a in (admin1, admin2) if get(a, "/role")["body"] == "standby")
        shape = "standby (of two masters with --enable_ha)"
        case(standby, "segments_standby", shape, "/get_all_segments")
        case(standby, "query_unknown_standby", shape, "/query_key?key=mc/unknown")
        case(standby, "query_no_parameter_standby", shape, "/query_key")
    finally:
        for m in masters:
            stop(m)
        stop(etcd)
        shutil.rmtree(os.path.join(tmp, "etcd"), ignore_errors=True)


class Client:
    """A `--client` child of this script, driven over its stdin and stdout."""

    def __init__(self, master, env, log):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--client", master], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=log, env=env, text=True)
        ready = self.reply()
        if ready["rc"] != 0:
            sys.exit(f"client setup failed: {ready}")
        self.hostname = ready["hostname"]

    def reply(self):
        line = self.proc.stdout.readline()
        if not line:
            sys.exit("a client ended early (its log is in the temp dir)")
        return json.loads(line)

    def do(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        out = self.reply()
        if out["rc"] != 0:
            sys.exit(f"{cmd}: {out}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def capture(out_path):
    venv_bin = os.path.dirname(sys.executable)
    rpc, admin = free_ports(2)
    tmp = tempfile.mkdtemp(prefix="mc-admin-capture-")
    env = dict(os.environ, MC_TCP_BIND_ADDRESS="127.0.0.1", GLOG_minloglevel="1")
    master_log = open(os.path.join(tmp, "servers.log"), "w")
    client_log = open(os.path.join(tmp, "clients.log"), "w")
    master = start_master(venv_bin, rpc, admin, master_log, env)
    clients = []
    cases = []
    ok = False

    def ask(port, name, shape, path):
        answer = get(port, path)
        cases.append({"name": name, "shape": shape, "path": path, **answer})

    def case(name, shape, path):
        ask(admin, name, shape, path)

    def segments():
        return sorted(get(admin, "/get_all_segments")["body"].splitlines())

    try:
        wait_for("the master's admin server", lambda: answers(admin))
        shape = "no client"
        case("segments_empty", shape, "/get_all_segments")
        case("query_unknown_empty", shape, "/query_key?key=mc/unknown")
        case("query_no_parameter_empty", shape, "/query_key")

        a = Client(f"127.0.0.1:{rpc}", env, client_log)
        clients.append(a)
        wait_for("client A's segment", lambda: segments() == [a.hostname])
        shape = "client A, one segment"
        case("segments_one_client", shape, "/get_all_segments")
        a.do(op="put", key="mc/known", replicas=1)
        case("query_known", shape, "/query_key?key=mc/known")
        case("query_unknown", shape, "/query_key?key=mc/unknown")
        case("query_no_parameter", shape, "/query_key")
        case("query_empty_key", shape, "/query_key?key=")
        case("query_key_without_value", shape, "/query_key?key")
        case("query_other_parameter_first", shape, "/query_key?x=1&key=mc/known")
        case("query_first_key_wins", shape, "/query_key?key=mc/known&key=mc/unknown")
        # The key is taken as it stands in the query, not percent-decoded ('+' is a plus).
        a.do(op="put", key="mc/c+d", replicas=1)
        case("query_raw_plus", shape, "/query_key?key=mc/c+d")
        case("query_percent_encoded", shape, "/query_key?key=mc%2Fc%2Bd")

        b = Client(f"127.0.0.1:{rpc}", env, client_log)
        clients.append(b)
        wait_for("client B's segment", lambda: segments() == sorted([a.hostname, b.hostname]))
        shape = "clients A and B, one segment each"
        case("segments_two_clients", shape, "/get_all_segments")
        b.do(op="put", key="mc/two", replicas=2)
        case("query_two_replicas", shape, "/query_key?key=mc/two")

        a.do(op="mount")
        wait_for("client A's second segment",
                 lambda: segments() == sorted([a.hostname, a.hostname, b.hostname]))
        shape = "clients A (two segments) and B (one)"
        case("segments_one_client_two_segments", shape, "/get_all_segments")
        for c in clients:
            c.stop()
        stop(master)

        capture_standby(venv_bin, tmp, env, master_log, ask)

        record = {
            "captured_by": "scripts/capture_mooncake_admin.sh",
            "mooncake": "mooncake-transfer-engine-non-cuda "
                        + importlib.metadata.version("mooncake-transfer-engine-non-cuda"),
            "segment_bytes": SEGMENT,
            "value_bytes": len(VALUE),
            "clients": {"A": a.hostname, "B": b.hostname},
            "cases": cases,
        }
        with open(out_path, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        print(f"{len(cases)} answers written to {out_path}")
        ok = True
    finally:
        for c in clients:
            c.stop()
        stop(master)
        master_log.close()
        client_log.close()
        for name in ("servers.log", "clients.log"):
            path = os.path.join(tmp, name)
            if not ok:
                with open(path) as f:
                    sys.stderr.write(f"--- {name} (last lines)\n" + "".join(f.readlines()[-20:]))
            os.remove(path)
        os.rmdir(tmp)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--client":
        client(sys.argv[2])
    elif len(sys.argv) == 2:
        capture(sys.argv[1])
    else:
        sys.exit(__doc__)
