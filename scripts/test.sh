#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine: installs what the tests need (idempotently),
# then checks formatting and lints and runs every crate's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests need: valgrind (memcheck); etcd and protoc for yuebing-etcd (its
# etcd client compiles etcd's protos at build time; the protos import libprotobuf-dev's
# descriptor.proto, only a Recommends of protobuf-compiler); iproute2 and util-linux (`ip`,
# `unshare`: Mooncake's engine tests run in a loopback-only network namespace); prometheus
# (`promtool check metrics` and a real Prometheus scraping the master's admin server; its
# service is not started by the tests, which run their own on a free port); cmake and
# libclang-dev for the rdma feature (rdma-mummy-sys builds a loader for rdma-core and generates
# its bindings; rdma-core itself is loaded at run time and need not be installed).
need_pkgs=(valgrind etcd-server etcd-client protobuf-compiler libprotobuf-dev iproute2 util-linux
  prometheus cmake libclang-dev)
missing=()
for pkg in "${need_pkgs[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# A clean CI checkout builds once: incremental state would only add tens of GiB on its disk.
# Our crates carry line tables only there (file:line in panics and valgrind's stacks, no
# variables): full debug info in every test binary filled CI's shared disk until the linker
# died of SIGBUS. A developer's build keeps full debug info for debuggers.
if [ "${CI:-}" = "true" ]; then
  export CARGO_INCREMENTAL=0
  export CARGO_PROFILE_DEV_DEBUG=line-tables-only
fi

# The disk is shared with other jobs on CI's host: say what was free, so that a build that dies
# of a full disk (ENOSPC, or the linker's SIGBUS) is told apart from a fault of ours. (A clean
# run of this script needs about 8 GiB.)
echo "== disk free here: $(df -h --output=avail . | tail -1)"
echo "== raw memory only in the audited module"
bash scripts/check_raw_memory.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo clippy --features etcd (the elected master's command line and tests)"
cargo clippy --all-targets --features etcd --locked -- -D warnings
echo "== cargo clippy --all-features (feature-gated code: etcd, rdma, cuda)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== elected masters on etcd, clients that follow them, nodes on etcd metadata, the admin server's roles, as processes (--features etcd)"
cargo test --locked --features etcd --test ha_cluster --test ha_clients --test metadata_etcd \
  --test master_admin
echo "== yuebing demo --ha and yuebing bench ha, small settings (--features etcd)"
cargo test --locked --features etcd --test ha_tools
echo "== the rdma transport over fake NICs, the conformance suite, GPU memory without a driver (--features rdma,cuda)"
cargo test --locked -p yuebing-engine --features rdma,cuda --lib --test rdma --test conformance --test gpu
echo "== python package (scripts/python_tests.sh)"
# The `yuebing` binary that cargo test just built (for its integration tests) is the one the
# Python tests start.
YUEBING_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/yuebing" bash scripts/python_tests.sh
echo "== memcheck (the engine's tests under valgrind)"
bash scripts/memcheck.sh
