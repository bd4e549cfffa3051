"""What a dummy client costs: SGLang HiCache's page calls (``batch_put_from`` and
``batch_get_into`` of K/V pages from a host pool) through a dummy client of ``mooncake_client
--port`` against the same calls of a full client (the baseline), interleaved in one run, the
median of ``--repeat`` rounds and its spread. Both put into the same real client's store space.

    python scripts/bench_dummy.py [--pages 64] [--page 65536] [--rounds 20] [--repeat 3]

Needs the drop-in and ``yuebing`` (``YUEBING_BIN`` or on ``PATH``); runs on 127.0.0.1 only.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator

MIB = 1 << 20


def start(cmd, prefix, env):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    line = proc.stdout.readline()
    if not line.startswith(prefix):
        proc.kill()
        raise SystemExit(f"{cmd[0]} printed {line!r}")
    return proc, line[len(prefix):].strip()


def rate(store, pool, pages, page, rounds):
    """GB/s of batch_put_from and of batch_get_into of ``pages`` K and V pages."""
    keys_all = []
    put_s = get_s = 0.0
    for _ in range(rounds):
        prefix = uuid.uuid4().hex
        keys = [f"{prefix}{i:04x}_0_{kv}" for i in range(pages) for kv in "kv"]
        ptrs = [pool + (kv * pages + i) * page for i in range(pages) for kv in (0, 1)]
        t = time.perf_counter()
        assert store.batch_put_from(keys, ptrs, [page] * len(keys)) == [0] * len(keys)
        put_s += time.perf_counter() - t
        t = time.perf_counter()
        assert store.batch_get_into(keys, ptrs, [page] * len(keys)) == [page] * len(keys)
        get_s += time.perf_counter() - t
        keys_all += keys
    store.batch_remove(keys_all, True)
    moved = rounds * 2 * pages * page / 1e9
    return moved / put_s, moved / get_s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=64)
    ap.add_argument("--page", type=int, default=64 * 1024)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    yb = os.environ.get("YUEBING_BIN", "yuebing")
    env = dict(os.environ, YUEBING_DUMMY_DIR=tempfile.mkdtemp(prefix="bench-dummy-"))
    os.environ["YUEBING_DUMMY_DIR"] = env["YUEBING_DUMMY_DIR"]
    master, addr = start([yb, "master", "--bind", "127.0.0.1", "--port", "0", "--metrics-port", "off"],
                         "yuebing master ready on ", env)
    addr = addr.removeprefix("tcp://")
    port = 50152
    real, _ = start([sys.executable, "-m", "mooncake.cli_client",
                     f"--master_server_address={addr}", f"--port={port}",
                     "--global_segment_size=1GB", "--host=127.0.0.1"],
                    "mooncake_client ready: ", env)
    alloc = MooncakeHostMemAllocator()
    bytes_ = 2 * a.pages * a.page
    pools = {name: alloc.alloc(bytes_) for name in ("full", "dummy")}
    full, dummy = MooncakeDistributedStore(), MooncakeDistributedStore()
    try:
        assert full.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", addr) == 0
        assert dummy.setup_dummy(bytes_, 16 * MIB, f"127.0.0.1:{port}") == 0
        for name, st in (("full", full), ("dummy", dummy)):
            assert st.register_buffer(pools[name], bytes_) == 0
        runs = {"full": [], "dummy": []}
        for _ in range(a.repeat):
            for name, st in (("full", full), ("dummy", dummy)):  # interleaved
                runs[name].append(rate(st, pools[name], a.pages, a.page, a.rounds))
        print(f"| {a.pages} K+V pages of {a.page // 1024} KiB | full client GB/s | dummy GB/s "
              "| ratio |")
        print("|---|---|---|---|")
        for i, op in enumerate(("batch_put_from", "batch_get_into")):
            f = [r[i] for r in runs["full"]]
            d = [r[i] for r in runs["dummy"]]
            print(f"| {op} | {statistics.median(f):.3f} ({min(f):.3f}-{max(f):.3f}) | "
                  f"{statistics.median(d):.3f} ({min(d):.3f}-{max(d):.3f}) | "
                  f"{statistics.median(d) / statistics.median(f):.2f} |")
    finally:
        dummy.close()
        full.close()
        real.terminate()
        real.wait()
        master.kill()
        master.wait()


if __name__ == "__main__":
    main()
