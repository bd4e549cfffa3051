"""Mooncake's own store tests (python/mooncake-upstream-tests, unmodified) against a real
`yuebing master` and the drop-in, run as Mooncake's CI runs them."""

import os
import pathlib
import re
import subprocess
import sys

from conftest import Cluster

UPSTREAM = pathlib.Path(__file__).resolve().parents[1] / "mooncake-upstream-tests"
FILES = ["test_distributed_object_store.py", "test_replicated_distributed_object_store.py"]
# The tests' count in the copied files: a file that lost tests would pass with fewer.
EXPECTED = 21


def test_mooncakes_store_tests_pass_unmodified():
    # Mooncake's CI starts its master with --default_kv_lease_ttl=500 and tells the tests so.
    cluster = Cluster(nodes=0, master_args=("--lease-ttl-ms", "500"))
    try:
        env = dict(os.environ, PROTOCOL="tcp", MASTER_SERVER=cluster.address.removeprefix("tcp://"),
                   MC_METADATA_SERVER="P2PHANDSHAKE", DEFAULT_KV_LEASE_TTL="500",
                   LOCAL_HOSTNAME="localhost")
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FILES],
            cwd=UPSTREAM, env=env, capture_output=True, text=True, timeout=600)
    finally:
        cluster.stop()
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed.group(1)) == EXPECTED, out[-3000:]
