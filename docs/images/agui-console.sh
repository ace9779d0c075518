#!/usr/bin/env bash
# Re-takes docs/images/agui-console*.png: installs the AG-UI peers (npm packages, chromium) into
# target/peers if needed and runs the console's browser test with REIN_AGUI_UPDATE_SCREENSHOT=1.
# Usage: bash docs/images/agui-console.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PEERS="${CARGO_TARGET_DIR:-target}/peers-agui"
mkdir -p "$PEERS"; : > "$PEERS/env"
bash .ci/peers-agui.sh "$PEERS"
# shellcheck disable=SC1091
source "$PEERS/env"
REIN_AGUI_UPDATE_SCREENSHOT=1 cargo test -p rein-agui --test it console_browser -- --nocapture
echo "updated docs/images/agui-console*.png"
