#!/usr/bin/env bash
# Installs Restate's server (npm `@restatedev/restate-server`, a linux-x64 binary inside the
# package) into DIR/restate (skipped when already there) and appends
# `export REIN_RESTATE_SERVER=<binary>` to DIR/env. rein-restate's tests start their own servers
# with it, on 127.0.0.1 only, with their data under the test's directory, and stop them.
# Usage: bash .ci/peers-restate.sh DIR
set -euo pipefail
DIR="${1:?usage: peers-restate.sh DIR}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
NPM_DIR="$DIR/restate"
VERSION="1.7.12"
BIN="$NPM_DIR/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"

if ! command -v npm >/dev/null 2>&1; then
  echo "peers-restate: npm not found; installing Debian's nodejs and npm"
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi

if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "$VERSION"; then
  echo "peers-restate: restate-server $VERSION already installed"
else
  t0=$(date +%s)
  mkdir -p "$NPM_DIR"
  [ -f "$NPM_DIR/package.json" ] || echo '{"name":"rein-restate-peers","private":true}' > "$NPM_DIR/package.json"
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error \
    "@restatedev/restate-server@$VERSION"
  echo "peers-restate: npm install took $(( $(date +%s) - t0 ))s"
fi
[ -x "$BIN" ] || { echo "peers-restate: missing $BIN after install" >&2; exit 1; }
"$BIN" --version | head -n 1
echo "export REIN_RESTATE_SERVER=\"$BIN\"" >> "$DIR/env"
