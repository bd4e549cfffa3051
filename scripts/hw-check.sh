#!/usr/bin/env bash
# The checks that need hardware this project's CI does not have: RDMA NICs, a GPU, many cores.
# Run it on such a machine from a checkout (it builds what it needs with cargo), or with
# prebuilt executables: YUEBING_BIN (a release `yuebing` built with --features rdma,cuda),
# YUEBING_RDMA_TESTS (the engine's `conformance` test executable, built with
# `cargo test -p yuebing-engine --features rdma --no-run`) and YUEBING_GPU_TESTS (its `gpu`
# test executable and lib tests, built with `--features cuda`). Prints what it found and each
# table; exits non-zero if a check it could run failed.
#
#   RDMA NIC:  the transport conformance suite on the real NICs (YUEBING_RDMA_HW=1: the
#              suite's rdma pair uses this machine's NICs instead of fake ones), then
#              `yuebing bench transfer --transport rdma,tcp` beside perftest's ib_write_bw /
#              ib_read_bw on the same NIC (loopback), >= 1 MiB.
#   GPU:       the engine's GPU tests on cuda:0 (device memory over local and tcp), then
#              `yuebing bench transfer --gpu 0` beside the GPU's pinned host-device copy.
#   many cores (>= 8): `yuebing bench bridge --inflight 64` (blocking and callback against async).
set -uo pipefail
cd "$(dirname "$0")/.."

failed=0
run() {
  echo "+ $*"
  "$@" || { echo "FAILED: $*"; failed=1; }
}

cores=$(nproc)
nics=$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')
gpu=$(command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | head -n 4)
echo "== hardware: ${cores} cores; RDMA NICs: ${nics:-none}; GPUs: ${gpu:-none}"

bin="${YUEBING_BIN:-}"
if [ -z "$bin" ] && command -v cargo >/dev/null; then
  run cargo build --release --locked --features rdma,cuda --bin yuebing
  bin=target/release/yuebing
fi

if [ -n "$nics" ]; then
  echo "== rdma: the conformance suite on this machine's NICs"
  if [ -n "${YUEBING_RDMA_TESTS:-}" ]; then
    for t in $YUEBING_RDMA_TESTS; do run env YUEBING_RDMA_HW=1 "$t" rdma:: --test-threads 1; done
  else
    run env YUEBING_RDMA_HW=1 cargo test --release --locked -p yuebing-engine --features rdma \
      --test conformance -- rdma:: --test-threads 1
  fi
  if [ -n "$bin" ]; then
    echo "== rdma: yuebing bench transfer --transport rdma (loopback over the first NIC)"
    run "$bin" bench transfer --transport rdma,tcp --blocks 1M,16M,64M
  fi
  dev=${nics%% *}
  if command -v ib_write_bw >/dev/null; then
    echo "== rdma: perftest baselines on $dev (loopback), 1 MiB and 16 MiB"
    for tool in ib_write_bw ib_read_bw; do
      for size in 1048576 16777216; do
        "$tool" -d "$dev" -s "$size" -n 2000 -F >/dev/null 2>&1 &
        server=$!
        sleep 1
        run "$tool" -d "$dev" -s "$size" -n 2000 -F 127.0.0.1
        wait "$server" 2>/dev/null
      done
    done
  else
    echo "perftest is not installed (apt-get install perftest): no ib_*_bw baseline"
  fi
else
  echo "== rdma: no RDMA NIC here; the rdma transport is tested over fake NICs only"
fi

if [ -n "$gpu" ]; then
  echo "== gpu: device memory as cuda:0 over local and tcp (staged), and the driver's typed errors"
  if [ -n "${YUEBING_GPU_TESTS:-}" ]; then
    for t in $YUEBING_GPU_TESTS; do run "$t" --test-threads 1; done
  else
    run cargo test --release --locked -p yuebing-engine --features cuda --test gpu --lib -- \
      --test-threads 1 gpu
  fi
  if [ -n "$bin" ]; then
    echo "== gpu: yuebing bench transfer --gpu 0 (initiator memory on the GPU, staged) beside the pinned host-device copy"
    for op in write read; do
      run "$bin" bench transfer --gpu 0 --op "$op" --transport tcp,shm --blocks 1M,16M,64M --batches 1,32
    done
  fi
fi

if [ "$cores" -ge 8 ] && [ -n "$bin" ]; then
  echo "== many cores: yuebing bench bridge --inflight 64"
  run "$bin" bench bridge --inflight 64
fi
exit "$failed"
