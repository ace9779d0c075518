#!/usr/bin/env bash
# Starts Arize Phoenix (PyPI `arize-phoenix`, an OTLP receiver with a trace UI) on 127.0.0.1
# only, without its telemetry, for rein-otel's end-to-end test and the trace screenshot:
#   port 16006: the UI, its REST/GraphQL API and OTLP/HTTP (`/v1/traces`);
#   port 14317: OTLP/gRPC.
# usage: peers-phoenix.sh DIR  -> appends its pid to DIR/pids and `export` lines to DIR/env.
# Stop with: kill $(cat DIR/pids)
set -euo pipefail
D=${1:-$PWD/target/peers}
mkdir -p "$D"
D=$(cd "$D" && pwd)
touch "$D/pids" "$D/env"
t0=$(date +%s)
PORT=16006
GRPC_PORT=14317

if [ ! -f "$D/phoenix/.installed" ]; then
  python3 -m venv "$D/phoenix"
  "$D/phoenix/bin/pip" install -q --disable-pip-version-check arize-phoenix==20.26.1
  touch "$D/phoenix/.installed"
fi
echo "phoenix: installed (+$(( $(date +%s) - t0 ))s)"

# A fresh database each time: the tests read back what they exported.
rm -rf "$D/phoenix-data"
mkdir -p "$D/phoenix-data"
PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$PORT PHOENIX_GRPC_PORT=$GRPC_PORT \
  PHOENIX_WORKING_DIR="$D/phoenix-data" PHOENIX_TELEMETRY_ENABLED=false \
  DO_NOT_TRACK=1 \
  "$D/phoenix/bin/phoenix" serve > "$D/phoenix.log" 2>&1 &
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
if command -v ss >/dev/null; then
  ss -ltnp 2>/dev/null | grep ":$PORT " | grep -q "pid=$PID," \
    || fail "port $PORT is not held by phoenix (pid $PID); see $D/phoenix.log"
fi

cat >> "$D/env" <<EOT
export REIN_TEST_PHOENIX_URL=http://127.0.0.1:$PORT
export REIN_TEST_PHOENIX_OTLP_GRPC=http://127.0.0.1:$GRPC_PORT
EOT
echo "phoenix: up in $(( $(date +%s) - t0 ))s (UI, API and OTLP/HTTP :$PORT, OTLP/gRPC :$GRPC_PORT)"
