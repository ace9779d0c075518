#!/usr/bin/env bash
# Installs the MCP reference servers (npm) used by rein-mcp's tests and the mcp_tools example,
# and the MCP Inspector whose CLI mode is a third-party client in rein-cli's tests, into DIR/npm
# (skipped when already there), and appends their launch commands to DIR/env.
# Usage: bash .ci/peers-mcp.sh DIR
# The servers are spawned over stdio by the tests themselves (and, for the Streamable-HTTP test,
# started on 127.0.0.1 by the test); nothing is left running by this script.
set -euo pipefail
DIR="${1:?usage: peers-mcp.sh DIR}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
NPM_DIR="$DIR/npm"
VERSION="2026.8.31"
# 2.12.0 declares node >= 22.19; its CLI mode runs on Debian's node 20 (npm warns, installs).
INSPECTOR_VERSION="2.12.0"
EVERYTHING="$NPM_DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
FILESYSTEM="$NPM_DIR/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
INSPECTOR_DIR="$NPM_DIR/node_modules/@modelcontextprotocol/inspector"
# What `npx @modelcontextprotocol/inspector` runs (the package's bin), run by node directly.
INSPECTOR="$INSPECTOR_DIR/clients/launcher/build/index.js"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "peers-mcp: node/npm not found; installing Debian's nodejs and npm"
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi

if [ -f "$EVERYTHING" ] && [ -f "$FILESYSTEM" ] \
  && grep -q "\"version\": \"$INSPECTOR_VERSION\"" "$INSPECTOR_DIR/package.json" 2>/dev/null; then
  echo "peers-mcp: MCP servers already installed in $NPM_DIR"
else
  t0=$(date +%s)
  mkdir -p "$NPM_DIR"
  [ -f "$NPM_DIR/package.json" ] || echo '{"name":"rein-mcp-peers","private":true}' > "$NPM_DIR/package.json"
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@$VERSION" \
    "@modelcontextprotocol/server-filesystem@$VERSION" \
    "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
  echo "peers-mcp: npm install took $(( $(date +%s) - t0 ))s"
fi

SDK="$NPM_DIR/node_modules/@modelcontextprotocol/sdk/dist/cjs/client/index.js"
for f in "$EVERYTHING" "$FILESYSTEM" "$SDK" "$INSPECTOR"; do
  [ -f "$f" ] || { echo "peers-mcp: missing $f after install" >&2; exit 1; }
done

{
  echo "export REIN_MCP_EVERYTHING=\"node $EVERYTHING stdio\""
  echo "export REIN_MCP_FILESYSTEM=\"node $FILESYSTEM\""
  # The official TypeScript SDK (a dependency of server-everything, pinned by it): the
  # third-party client of `rein mcp serve`'s tests (.ci/e2e/mcp-sdk-client.cjs).
  echo "export REIN_MCP_SDK=\"$NPM_DIR\""
  # The MCP Inspector's launcher: rein-cli's tests run `node $REIN_MCP_INSPECTOR --cli ...`.
  echo "export REIN_MCP_INSPECTOR=\"$INSPECTOR\""
} >> "$DIR/env"
