#!/usr/bin/env bash
# Issue 15's comparison: Mooncake's own store benchmark (../shared/peers/mooncake_store_bench.py),
# unchanged, through the stock wheel and through yuebing-mooncake, interleaved round by round on
# 127.0.0.1, then medians and ratios (scripts/compare_mooncake_compat.py).
#
#   bash scripts/bench_mooncake_compat.sh [ROUNDS]        # default 3; results in target/compat-bench
#
# Per round: --clients 2 through the stock wheel, yuebing over tcp (YUEBING_MOONCAKE_TRANSPORT=tcp,
# like for like) and yuebing's default (shared memory between processes of one host); --clients 1
# through both; single-thread memcpy (the peers' baseline program); `yuebing bench store`'s
# Rust 4 KiB get, for the Python overhead per call; and its 4 KiB calls with grants and the lease
# cache on (issue 30's Rust client). Issue 30's targets assume the drop-in runs with them on too:
#   YUEBING_GRANT_SIZE=16MiB YUEBING_LEASE_CACHE=16384 bash scripts/bench_mooncake_compat.sh
# Settings: PEERS (default ../shared/peers), PEER_VENV (default ~/.cache/yuebing-peer-venv, made by
# $PEERS/setup.sh if missing), SIZES (default 4K,1M,16M), DURATION (seconds per cell, default 1),
# MULTI (the multi-buffer cell LAYERSxSIZE, default 32x64K: batches of 32 keys, each one block in
# each of 32 per-layer buffers, as vLLM lays out its paged KV cache; empty: none).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
peers="$(cd "${PEERS:-../shared/peers}" && pwd)"
peer_venv="${PEER_VENV:-$HOME/.cache/yuebing-peer-venv}"
sizes="${SIZES:-4K,1M,16M}"
duration="${DURATION:-1}"
multi="${MULTI-32x64K}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
out="$target/compat-bench"
venv="$target/compat-venv"
mkdir -p "$out"

[ -x "$peer_venv/bin/mooncake_master" ] || VENV="$peer_venv" bash "$peers/setup.sh"
echo "== cargo build --release (the yuebing binary)"
cargo build --release --locked --bin yuebing
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.16,<2" "numpy>=1.24" \
  "setuptools>=68" wheel
echo "== maturin build --release (python/) into $venv, and yuebing-mooncake"
rm -rf "$target/compat-wheels"
# A target directory of its own: the wheel's build links yuebing-bridge (a cdylib, whose file
# name carries no hash) with other dependency features than `cargo build --bin yuebing`, so in
# one directory each build would redo the other's (about 2 minutes each way).
(cd python && CARGO_TARGET_DIR="$target/compat-target" "$venv/bin/maturin" build --release --locked \
  --quiet -o "$target/compat-wheels")
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
  "$target"/compat-wheels/yuebing-*.whl
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
  --no-build-isolation ./python/mooncake-compat
gcc -O2 -o "$out/memcpy_bw" "$peers/baselines/memcpy_bw.c"

bench=(--sizes "$sizes" --duration "$duration" --small-duration "$duration")
if [ -n "$multi" ]; then bench+=(--multi "$multi"); fi
# One run of the benchmark through yuebing-mooncake against a fresh `yuebing master`.
yuebing_run() { # clients transport out
  local log addr pid
  log="$(mktemp /tmp/yb-compat-master-XXXXXX)"
  # A 1 s read lease: the benchmark force-removes the objects it has just read (remove_all(True))
  # and puts new ones at once; yuebing keeps force-removed space out of use until the read
  # leases on it end (Mooncake reuses it at once), so with the default 10 s lease the 16 MiB
  # cells would find the 512 MiB segment full (-200).
  "$target/release/yuebing" master --bind 127.0.0.1 --port 0 --metrics-port off --lease-ttl-ms 1000 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do grep -q "ready on" "$log" && break; sleep 0.1; done
  addr="$(sed -n 's|.*ready on \(tcp://\)\{0,1\}\([0-9.:]*\).*|\2|p' "$log" | head -1)"
  [ -n "$addr" ] || { cat "$log"; kill "$pid"; exit 1; }
  YUEBING_MOONCAKE_TRANSPORT="$2" RUST_LOG=warn "$venv/bin/python" \
    "$peers/mooncake_store_bench.py" --clients "$1" --master "$addr" \
    --metadata "http://127.0.0.1:9/metadata" --master-pid "$pid" "${bench[@]}" --out "$3" \
    >"$3.log" 2>&1 || { tail -20 "$3.log"; kill "$pid"; exit 1; }
  kill "$pid"; wait "$pid" 2>/dev/null || true; rm -f "$log"
}
stock_run() { # clients out
  VENV="$peer_venv" bash "$peers/run_store_peer.sh" --clients "$1" "${bench[@]}" --out "$2" \
    >"$2.log" 2>&1 || { tail -20 "$2.log"; exit 1; }
}

for r in $(seq 1 "$rounds"); do
  echo "== round $r/$rounds ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
  stock_run 2 "$out/stock_c2_$r.json"
  yuebing_run 2 tcp "$out/yb-tcp_c2_$r.json"
  yuebing_run 2 auto "$out/yb-auto_c2_$r.json"
  stock_run 1 "$out/stock_c1_$r.json"
  yuebing_run 1 auto "$out/yb-auto_c1_$r.json"
  "$out/memcpy_bw" 1024 3 >"$out/memcpy_$r.txt"
  "$target/release/yuebing" bench store --sizes 4K --transport tcp --repeat 1 \
    --json "$out/rust_store_$r.json" >"$out/rust_store_$r.txt" 2>&1
  # Issue 30's Rust client: one client, shared memory, grants and the lease cache on.
  "$target/release/yuebing" bench store --sizes 4K --transport shm --grants on --lease-cache on \
    --repeat 1 --multi none --json "$out/rust_fast_$r.json" >"$out/rust_fast_$r.txt" 2>&1
done
python3 scripts/compare_mooncake_compat.py "$out" "$rounds"
