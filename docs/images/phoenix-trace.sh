#!/usr/bin/env bash
# Re-takes docs/images/phoenix-trace.png: runs the `observability` example against a local
# Phoenix and photographs the run's trace in Phoenix's UI with headless Chromium.
# usage: docs/images/phoenix-trace.sh [PHOENIX_URL]
#   PHOENIX_URL defaults to $REIN_TEST_PHOENIX_URL (set by `.ci/peers-phoenix.sh DIR` in DIR/env).
# Needs: chromium (Debian: apt-get install chromium), curl, python3.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
URL=${1:-${REIN_TEST_PHOENIX_URL:?start Phoenix with .ci/peers-phoenix.sh DIR and source DIR/env}}
URL=${URL%/}
OUT="$HERE/phoenix-trace.png"
CHROMIUM=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$CHROMIUM" ] || { echo "phoenix-trace: no chromium found" >&2; exit 1; }

# The traces of runs that paused (stop reason `interrupt`): the one this run adds holds every
# decision.
paused() {
  curl -sf "$URL/v1/projects/default/spans?limit=1000&name=invoke_agent%20assistant" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["data"]:
    if s["attributes"].get("rein.stop_reason") == "interrupt":
        print(s["context"]["trace_id"])
'
}
BEFORE=$(paused || true)

# A run with a deny, a failing tool, a guide and a confirm (its resume is a second trace).
(cd "$ROOT" && OTEL_EXPORTER_OTLP_ENDPOINT="$URL" OTEL_METRICS_EXPORTER=none \
  cargo run -q -p rein-examples --example observability)

TRACE=""
for _ in $(seq 1 40); do
  TRACE=$(paused | grep -vxF -e "${BEFORE:-none}" | head -n 1 || true)
  [ -n "$TRACE" ] && break
  sleep 0.5
done
[ -n "$TRACE" ] || { echo "phoenix-trace: the run's trace did not arrive" >&2; exit 1; }
PROJECT=$(curl -sf "$URL/v1/projects" | python3 -c '
import json, sys
print(next(p["id"] for p in json.load(sys.stdin)["data"] if p["name"] == "default"))')

# The UI is a single-page app: give its scripts virtual time to fetch and draw the trace.
PROFILE=$(mktemp -d)
trap 'rm -rf "$PROFILE"' EXIT
"$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$PROFILE" \
  --no-first-run --disable-extensions --window-size=1600,1000 --virtual-time-budget=15000 \
  --screenshot="$OUT" "$URL/projects/$PROJECT/traces/$TRACE" 2>/dev/null
echo "phoenix-trace: wrote $OUT (trace $TRACE)"
