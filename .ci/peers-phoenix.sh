#!/usr/bin/env bash
# Starts Arize Phoenix (PyPI `arize-phoenix`, an OTLP receiver with a trace UI) on 127.0.0.1
# only, without its telemetry or any other outbound request, for rein-otel's end-to-end tests
# and the trace screenshot:
#   port 16006: the UI, its REST/GraphQL API and OTLP/HTTP (`/v1/traces`);
#   port 14317: OTLP/gRPC.
# (REIN_PHOENIX_PORT / REIN_PHOENIX_GRPC_PORT move them, e.g. beside a CI run's Phoenix.)
# usage: peers-phoenix.sh DIR  -> appends its pid to DIR/pids and `export` lines to DIR/env.
# Stop with: kill $(cat DIR/pids)
set -euo pipefail
D=${1:-$PWD/target/peers}
mkdir -p "$D"
D=$(cd "$D" && pwd)
touch "$D/pids" "$D/env"
HERE=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
PORT=${REIN_PHOENIX_PORT:-16006}
GRPC_PORT=${REIN_PHOENIX_GRPC_PORT:-14317}
command -v ss >/dev/null || { echo "peers-phoenix: needs ss (iproute2) to check its binds" >&2; exit 1; }

if [ ! -f "$D/phoenix/.installed" ]; then
  python3 -m venv "$D/phoenix"
  "$D/phoenix/bin/pip" install -q --disable-pip-version-check arize-phoenix==20.26.1
  touch "$D/phoenix/.installed"
fi
echo "phoenix: installed (+$(( $(date +%s) - t0 ))s)"

# A fresh database each time: the tests read back what they exported.
rm -rf "$D/phoenix-data"
mkdir -p "$D/phoenix-data"
# PHOENIX_HOST binds the UI/HTTP server only; the launcher puts the gRPC receiver (which
# Phoenix binds on [::]) on 127.0.0.1 too. PHOENIX_ALLOW_EXTERNAL_RESOURCES=false stops the
# start-up download of the WASM sandbox binary, PHOENIX_DISABLE_AGENT_ASSISTANT=true the
# assistant and its docs MCP server (an outside host).
PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$PORT PHOENIX_GRPC_PORT=$GRPC_PORT \
  PHOENIX_WORKING_DIR="$D/phoenix-data" PHOENIX_TELEMETRY_ENABLED=false \
  PHOENIX_ALLOW_EXTERNAL_RESOURCES=false PHOENIX_DISABLE_AGENT_ASSISTANT=true \
  DO_NOT_TRACK=1 \
  "$D/phoenix/bin/python" "$HERE/e2e/phoenix_local.py" serve > "$D/phoenix.log" 2>&1 &
PID=$!
echo $PID >> "$D/pids"

fail() { echo "peers-phoenix: $*" >&2; kill "$PID" 2>/dev/null || true; exit 1; }
for _ in $(seq 1 240); do
  kill -0 "$PID" 2>/dev/null || fail "phoenix exited (port $PORT taken?); see $D/phoenix.log"
  curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" && break
  sleep 0.5
done
curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" || fail "not up on :$PORT; see $D/phoenix.log"
# A port already taken would make the health check pass against someone else's server: insist
# that the process started here still runs and is the one listening.
sleep 1
kill -0 "$PID" 2>/dev/null || fail "phoenix process $PID exited (port taken?); see $D/phoenix.log"
# Both ports are Phoenix's, and every port Phoenix (or a child of it) listens on is bound to
# 127.0.0.1: nothing reachable from outside the machine.
for _ in $(seq 1 40); do
  ss -ltnp 2>/dev/null | grep -q ":$GRPC_PORT .*pid=$PID," && break
  sleep 0.25
done
pids=$PID
for p in $(ps -o pid= --ppid "$PID" 2>/dev/null); do pids="$pids|$p"; done
# gRPC binds 127.0.0.1 on a dual-stack socket, shown as its IPv4-mapped form.
binds=$(ss -ltnpH 2>/dev/null | grep -E "pid=($pids)," | awk '{print $4}' \
  | sed 's/^\[::ffff:127\.0\.0\.1\]:/127.0.0.1:/' | sort -u)
for port in $PORT $GRPC_PORT; do
  grep -qx "127.0.0.1:$port" <<<"$binds" \
    || fail "port $port is not held by phoenix (pid $PID) on 127.0.0.1: ${binds:-no binds}; see $D/phoenix.log"
done
others=$(grep -v '^127\.0\.0\.1:' <<<"$binds" || true)
[ -z "$others" ] || fail "phoenix listens beyond 127.0.0.1: $(echo $others); see $D/phoenix.log"

cat >> "$D/env" <<EOT
export REIN_TEST_PHOENIX_URL=http://127.0.0.1:$PORT
export REIN_TEST_PHOENIX_OTLP_GRPC=http://127.0.0.1:$GRPC_PORT
EOT
echo "phoenix: up in $(( $(date +%s) - t0 ))s (UI, API and OTLP/HTTP :$PORT, OTLP/gRPC :$GRPC_PORT)"
