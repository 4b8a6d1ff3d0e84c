#!/usr/bin/env bash
# `make run-ha`: a replica group of three members on this machine, with etcd as its arbiter
# (docs/store-format.md §14.3): etcd on 127.0.0.1:2379, members on 10911 (master), 10921 and
# 10931, data under $DATA (default ./data-ha). Ctrl-C stops everything. Kill the master
# (`kill -9`) and watch a follower take over: `msgstore admin role --server 127.0.0.1:10921`.
set -euo pipefail
BIN=${BIN:-.venv/bin}
DATA=${DATA:-./data-ha}
MODE=${MODE:-SYNC}
ETCD=${ETCD:-$(command -v etcd || true)}
if [ -z "$ETCD" ]; then
  echo "no etcd on the PATH: install it (Debian: apt-get install etcd-server) or set ETCD=/path/to/etcd" >&2
  exit 2
fi
mkdir -p "$DATA"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
"$ETCD" --name arbiter --data-dir "$DATA/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster arbiter=http://127.0.0.1:2380 --log-level error >"$DATA/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do curl -sf http://127.0.0.1:2379/health >/dev/null 2>&1 && break; sleep 0.2; done
ARBITER="etcd://127.0.0.1:2379/msgstore"
role=(--set "brokerRole=${MODE}_MASTER" --set inSyncReplicas=2)
for i in 0 1 2; do
  port=$((10911 + 10 * i))
  args=(serve --data-dir "$DATA/m$i" --port "$port" --metrics-port $((port + 1)) --node-name "m$i" --group g0 --arbiter "$ARBITER")
  [ "$i" = 0 ] && args+=("${role[@]}") || args+=(--replica-of 127.0.0.1:10911)
  "$BIN/msgstore" "${args[@]}" >"$DATA/m$i.log" 2>&1 &
  pids+=($!)
done
echo "etcd 127.0.0.1:2379 (arbiter $ARBITER); members m0 127.0.0.1:10911 (master, $MODE), m1 :10921, m2 :10931; logs in $DATA"
echo "try: $BIN/msgstore send orders hello --server 127.0.0.1:10921; kill -9 the master; $BIN/msgstore admin role --server 127.0.0.1:10921"
wait -n "${pids[@]}"
