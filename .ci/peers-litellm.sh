#!/usr/bin/env bash
# Installs and starts LiteLLM's proxy (PyPI `litellm[proxy]`) on 127.0.0.1:18110 as a Gemini-API
# front for the llama.cpp servers that .ci/peers-llm.sh starts on :18080 (chat) and :18081 (tools):
# its `/v1beta/models/{model}:streamGenerateContent?alt=sse` route takes Gemini-format requests and
# answers in Gemini's stream format, so rein-models' Gemini provider runs end to end against a
# third-party implementation of that wire format (no Google server speaks it locally).
# Model names: `smollm2` (→ :18080) and `smollm2-tools` (→ :18081); key `rein-e2e-key`.
# usage: peers-litellm.sh DIR  -> appends its pid to DIR/pids and `export` lines to DIR/env.
#
# Why 1.80.17: later releases on PyPI need `litellm-proxy*` packages that this index does not have
# for them (1.110.x), and 1.100.5 streams each fragment of a function call's arguments as a call of
# its own. What no local server can produce (thought signatures, safety blocks, cached-token usage;
# LiteLLM's streamed usage is all zeros) stays with the fixture tests (rein-models tests/it/gemini.rs).
set -euo pipefail
D=${1:-$PWD/target/peers}
mkdir -p "$D"
D=$(cd "$D" && pwd)
touch "$D/pids" "$D/env"
t0=$(date +%s)
VERSION=1.80.17
PORT=18110
fail() { echo "peers-litellm: $*" >&2; exit 1; }

if [ ! -f "$D/litellm/.installed-$VERSION" ]; then
  rm -rf "$D/litellm"
  python3 -m venv "$D/litellm"
  "$D/litellm/bin/pip" install -q --disable-pip-version-check "litellm[proxy]==$VERSION"
  touch "$D/litellm/.installed-$VERSION"
  echo "peers-litellm: installed litellm $VERSION in $(( $(date +%s) - t0 ))s"
fi

cat > "$D/litellm/config.yaml" <<'EOT'
model_list:
  - model_name: smollm2
    litellm_params: {model: openai/smollm2, api_base: "http://127.0.0.1:18080/v1", api_key: none}
  - model_name: smollm2-tools
    litellm_params: {model: openai/smollm2, api_base: "http://127.0.0.1:18081/v1", api_key: none}
general_settings:
  master_key: rein-e2e-key
litellm_settings:
  telemetry: false
EOT
# Offline: the model price map from the package, no telemetry, no update checks.
LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_TELEMETRY=False LITELLM_LOG=ERROR \
  "$D/litellm/bin/litellm" --config "$D/litellm/config.yaml" --host 127.0.0.1 --port "$PORT" \
  > "$D/litellm.log" 2>&1 &
PID=$!
echo "$PID" >> "$D/pids"
for _ in $(seq 1 240); do
  curl -sf -o /dev/null "http://127.0.0.1:$PORT/health/liveliness" && break
  kill -0 "$PID" 2>/dev/null || fail "exited; see $D/litellm.log"
  sleep 0.5
done
curl -sf -o /dev/null "http://127.0.0.1:$PORT/health/liveliness" || fail "not up; see $D/litellm.log"
# A port already taken would make the check above pass against someone else's server.
sleep 1
kill -0 "$PID" 2>/dev/null || fail "process $PID exited (port $PORT taken?); see $D/litellm.log"

echo "export REIN_E2E_GEMINI=http://127.0.0.1:$PORT/v1beta" >> "$D/env"
echo "peers-litellm: up in $(( $(date +%s) - t0 ))s (LiteLLM proxy :$PORT, Gemini routes)"
