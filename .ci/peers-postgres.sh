#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for the session-store tests (rein-sessions, feature
# `postgres`) on 127.0.0.1 only, and appends `export REIN_TEST_POSTGRES=...` to DIR/env.
# Usage: bash .ci/peers-postgres.sh DIR   (stop it with .ci/stop-postgres.sh)
# Installs Debian's `postgresql` package when no server binaries are found. The data directory
# lives in DIR/postgres (initdb as the `postgres` user; no systemd needed).
set -euo pipefail
DIR="$(mkdir -p "${1:-target/peers}" && cd "${1:-target/peers}" && pwd)"
PORT="${REIN_PG_PORT:-55432}"
t0=$(date +%s)

find_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}
BIN="$(find_bin || true)"
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
  echo "postgres: installing Debian's postgresql package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
  BIN="$(find_bin)"
fi
echo "postgres: binaries in $BIN (+$(( $(date +%s) - t0 ))s)"

PGDATA="$DIR/postgres/data"
RUNAS=()
if [ "$(id -u)" = 0 ]; then RUNAS=(runuser -u postgres --); fi

# A server left over from an earlier run is stopped first.
if [ -f "$PGDATA/postmaster.pid" ]; then
  "${RUNAS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -m immediate stop >/dev/null 2>&1 || true
fi
rm -rf "$DIR/postgres"
mkdir -p "$DIR/postgres"
if [ "$(id -u)" = 0 ]; then chown postgres "$DIR/postgres"; fi
# The postgres user must be able to reach the data directory.
d="$DIR"; while [ "$d" != "/" ]; do [ -x "$d" ] || chmod o+x "$d" 2>/dev/null || true; d="$(dirname "$d")"; done

# Take the first free port from $PORT on (another server may hold it).
for _ in $(seq 1 50); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then PORT=$((PORT + 1)); else break; fi
done
"${RUNAS[@]}" "$BIN/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --no-locale >/dev/null
"${RUNAS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -l "$DIR/postgres/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR/postgres -c fsync=off -c max_connections=100" start >/dev/null
"$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -q -c "CREATE DATABASE rein_test" >/dev/null
echo "$PGDATA" > "$DIR/postgres/pgdata"
echo "$BIN" > "$DIR/postgres/bin"
echo "export REIN_TEST_POSTGRES=postgres://postgres@127.0.0.1:$PORT/rein_test" >> "$DIR/env"
echo "postgres: listening on 127.0.0.1:$PORT (+$(( $(date +%s) - t0 ))s)"
