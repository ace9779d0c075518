#!/usr/bin/env bash
# Installs the AG-UI peers of rein-agui's tests: the official AG-UI client (@ag-ui/client,
# @ag-ui/core) and playwright-core (npm, pinned) into DIR/npm, and Debian's chromium for the
# console's browser test; appends REIN_AGUI_NODE_MODULES (and REIN_AGUI_CHROMIUM when chromium is
# there) to DIR/env. Nothing is left running: the tests start the server and node themselves.
# Usage: bash .ci/peers-agui.sh DIR
set -euo pipefail
DIR="${1:?usage: peers-agui.sh DIR}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
NPM_DIR="$DIR/npm"
AGUI_VERSION="1.0.0"
PLAYWRIGHT_VERSION="1.65.1"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "peers-agui: node/npm not found; installing Debian's nodejs and npm"
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi

CLIENT="$NPM_DIR/node_modules/@ag-ui/client/package.json"
PLAYWRIGHT="$NPM_DIR/node_modules/playwright-core/package.json"
have() { [ -f "$1" ] && grep -q "\"version\": \"$2\"" "$1"; }
if have "$CLIENT" "$AGUI_VERSION" && have "$PLAYWRIGHT" "$PLAYWRIGHT_VERSION"; then
  echo "peers-agui: @ag-ui/client $AGUI_VERSION and playwright-core already in $NPM_DIR"
else
  t0=$(date +%s)
  mkdir -p "$NPM_DIR"
  [ -f "$NPM_DIR/package.json" ] || echo '{"name":"rein-peers","private":true}' > "$NPM_DIR/package.json"
  # playwright-core drives an installed browser: it downloads none.
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error \
    "@ag-ui/client@$AGUI_VERSION" "@ag-ui/core@$AGUI_VERSION" \
    "playwright-core@$PLAYWRIGHT_VERSION"
  echo "peers-agui: npm install took $(( $(date +%s) - t0 ))s"
fi
[ -f "$CLIENT" ] || { echo "peers-agui: missing $CLIENT after install" >&2; exit 1; }

if [ ! -x /usr/bin/chromium ]; then
  echo "peers-agui: installing Debian's chromium (headless browser for the console test)"
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null || true
fi

{
  echo "export REIN_AGUI_NODE_MODULES=\"$NPM_DIR/node_modules\""
  if [ -x /usr/bin/chromium ]; then echo "export REIN_AGUI_CHROMIUM=/usr/bin/chromium"; fi
} >> "$DIR/env"
