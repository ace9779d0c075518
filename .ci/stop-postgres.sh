#!/usr/bin/env bash
# Stops the PostgreSQL server started by .ci/peers-postgres.sh (DIR defaults to target/peers).
set -uo pipefail
DIR="${1:-$(cd "$(dirname "$0")/.." && pwd)/target/peers}"
[ -f "$DIR/postgres/pgdata" ] || exit 0
PGDATA="$(cat "$DIR/postgres/pgdata")"; BIN="$(cat "$DIR/postgres/bin")"
RUNAS=(); if [ "$(id -u)" = 0 ]; then RUNAS=(runuser -u postgres --); fi
"${RUNAS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1 || true
rm -f "$DIR/postgres/pgdata"
