#!/usr/bin/env bash
# Transferable memory (registered regions, engine buffers, peers' mappings) may be written by a
# peer at any time, so no Rust reference is formed over it: every byte of it moves through
# engine/src/memory/raw.rs, the one audited module. Pointers a C caller hands over, and buffers
# handed to C, are read and made only in bridge/src/ffi/raw.rs, the C boundary's audited module.
# This check fails if a slice is built from a raw pointer, or raw memory is copied, anywhere else
# in the workspace's Rust sources.
set -euo pipefail
cd "$(dirname "$0")/.."
audited="engine/src/memory/raw.rs|bridge/src/ffi/raw.rs"
pattern='from_raw_parts(_mut)?|ptr::copy(_nonoverlapping)?\b|copy_nonoverlapping|read_volatile|write_volatile'
hits=$(grep -rnE "$pattern" --include='*.rs' rpc engine etcd store bridge python src examples tests 2>/dev/null \
  | grep -vE "^($audited):" || true)
if [ -n "$hits" ]; then
  echo "raw memory touched outside $audited:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "raw memory is touched only in $audited"
