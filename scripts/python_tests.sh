#!/usr/bin/env bash
# The Python package's tests (python/tests) against real `yuebing master` and `yuebing node`
# processes on 127.0.0.1: makes a venv of its own (reused when present) with maturin, pytest and
# numpy from PyPI, builds the package into it (`maturin develop`, a debug build that reuses the
# workspace's compiled crates), builds the `yuebing` binary the tests start, and runs pytest.
# Idempotent; arguments go to pytest (e.g. `-k get_into -x`).
#
# Settings: PYTHON (the interpreter that makes the venv; default python3, CPython >= 3.11),
# CARGO_TARGET_DIR (where cargo builds; the venv goes under it, in py-venv/), YUEBING_BIN (a
# `yuebing` binary built from these sources; default: build it).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
venv="$target/py-venv"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  echo "== python venv in $venv"
  "$python" -m venv "$venv"
fi
# aiohttp: the drop-in's HTTP metadata server (a dependency of it, as of the stock wheel).
if ! "$venv/bin/python" -c "import pytest, numpy, wheel, aiohttp" 2>/dev/null || [ ! -x "$venv/bin/maturin" ]; then
  echo "== pip install maturin pytest numpy setuptools wheel aiohttp"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "maturin>=1.16,<2" "pytest>=7" "numpy>=1.24" "setuptools>=68" wheel "aiohttp>=3.9"
fi

# The `etcd` feature of the package and of the binary (etcd:// master addresses) where its
# build can run: protoc and libprotobuf-dev's descriptor.proto (scripts/test.sh installs both).
# Without them the default builds, and the etcd test is skipped.
features=()
if command -v protoc >/dev/null && [ -f /usr/include/google/protobuf/descriptor.proto ]; then
  features=(--features etcd)
fi
# The package's `rdma` feature (the drop-in's protocol="rdma") where rdma-mummy-sys can build:
# cmake and libclang (scripts/test.sh installs both). The binary the tests start needs none.
py_features=("${features[@]+"${features[@]}"}")
if command -v cmake >/dev/null && compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null; then
  py_features+=(--features rdma)
fi

# The processes the tests start. scripts/test.sh passes the binary its `cargo test` just built:
# building it again here, with other dev-dependencies' features, would recompile half the
# dependency tree.
bin="${YUEBING_BIN:-}"
if [ -z "$bin" ]; then
  echo "== cargo build --bin yuebing ${features[*]:-}"
  cargo build --locked --bin yuebing ${features[@]+"${features[@]}"}
  bin="$target/debug/yuebing"
fi
echo "== maturin develop ${py_features[*]:-} (python/)"
(cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
  maturin develop --locked --quiet ${py_features[@]+"${py_features[@]}"})

echo "== pip install python/mooncake-compat (the Mooncake drop-in, pure Python)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
  --force-reinstall ./python/mooncake-compat

echo "== pytest python/tests"
YUEBING_BIN="$bin" "$venv/bin/python" -m pytest python/tests -q "$@"
