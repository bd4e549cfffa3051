#!/usr/bin/env bash
# Captures the stock Mooncake master's answers on `/get_all_segments` and `/query_key` (status,
# content type, body) for the cluster shapes of tests/master_admin/like_mooncake.rs, into
# tests/fixtures/mooncake_admin/answers.json, which that test compares yuebing's master against.
#
#   bash scripts/capture_mooncake_admin.sh
#
# Needs the stock wheel (PEER_VENV, default ~/.cache/yuebing-peer-venv, made by
# ${PEERS:-../shared/peers}/setup.sh if missing) and etcd (Debian's etcd-server, installed if
# missing) for the standby's answers. Starts a mooncake_master and two clients, then etcd and two
# masters with --enable_ha, on 127.0.0.1 only (scripts/capture_mooncake_admin.py), and stops
# them (by pid) before it returns.
set -euo pipefail
cd "$(dirname "$0")/.."
peer_venv="${PEER_VENV:-$HOME/.cache/yuebing-peer-venv}"
if [ ! -x "$peer_venv/bin/mooncake_master" ]; then
  VENV="$peer_venv" bash "${PEERS:-../shared/peers}/setup.sh"
fi
if ! command -v etcd >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
fi
out=tests/fixtures/mooncake_admin
mkdir -p "$out"
"$peer_venv/bin/python" scripts/capture_mooncake_admin.py "$out/answers.json"
