#!/usr/bin/env bash
# The engine's tests (unit tests, the local, tcp and shm tests, the conformance suite and the
# release tests) and the C ABI's lifetime tests under valgrind's memcheck: exits non-zero on
# any invalid read or write (and on any failing test). There is no nightly toolchain here, so no Miri or -Zsanitizer; memcheck
# sees what the engine's raw-pointer copies and syscalls do to memory.
#
#   bash scripts/memcheck.sh            # every binary
#   bash scripts/memcheck.sh conformance # only the binaries whose name matches
set -euo pipefail
cd "$(dirname "$0")/.."
only="${1:-}"

if ! command -v valgrind >/dev/null; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends valgrind
fi

# The test binaries cargo builds (`cargo test ARGS --no-run`), one "name path" line each.
test_binaries() {
  cargo test "$@" --locked --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["target"]["name"], m["executable"])
'
}

# The engine's test binaries optimized (with debug info), as unoptimized code runs some 50
# times slower under valgrind, and what memcheck checks is the machine code's memory accesses
# either way.
echo "== building the engine's tests (release profile)"
cargo test -p yuebing-engine --release --locked --no-run
mapfile -t binaries < <(test_binaries -p yuebing-engine --release)
# The C ABI's lifetime and argument tests (bridge/tests/ffi_lifetimes.rs: a destroy racing
# calls on its engine's memory, registrations it did not make; ffi_arguments.rs: bad arguments
# refused where they enter; ffi_writes.rs and ffi_located.rs: arrays of parts read from the
# caller, locations, and replica structs handed over, lent and freed) through the exported
# symbols, as the debug build `cargo test` made them: small enough to run unoptimized.
c_abi=(-p yuebing-bridge --test ffi_lifetimes --test ffi_arguments --test ffi_writes --test ffi_located)
echo "== building the C ABI's lifetime and argument tests"
cargo test "${c_abi[@]}" --locked --no-run
mapfile -t -O "${#binaries[@]}" binaries < <(test_binaries "${c_abi[@]}")

failed=0
for entry in "${binaries[@]}"; do
  name="${entry%% *}"; exe="${entry#* }"
  if [ -n "$only" ] && [[ "$name" != *"$only"* ]]; then continue; fi
  echo "== memcheck $name"
  start=$SECONDS
  set +e
  # 97: memcheck found an error; anything else non-zero: a test failed.
  valgrind -q --error-exitcode=97 --leak-check=no --fair-sched=yes "$exe" --test-threads=2 2>&1 |
    grep -v -e 'unhandled amd64-linux syscall: 434' -e 'You may be able to write your own handler' \
      -e 'README_MISSING_SYSCALL_OR_IOCTL' -e 'Nor should you use this syscall'
  rc=${PIPESTATUS[0]}
  set -e
  echo "   $name: exit $rc in $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || failed=1
done
if [ "$failed" -ne 0 ]; then
  echo "memcheck: FAILED (exit 97 above: an invalid memory access; otherwise a failing test)"
  exit 1
fi
echo "memcheck: no invalid read or write"
