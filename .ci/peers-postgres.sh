#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for the session-store tests (rein-sessions, feature
# `postgres`) on 127.0.0.1 only, and appends to DIR/env:
#   REIN_TEST_POSTGRES               postgres://postgres@127.0.0.1:PORT/rein_test (plaintext)
#   REIN_TEST_POSTGRES_RESTART       a command restarting the server (append `fast` or
#                                    `immediate`, pg_ctl's stop mode): the reconnect test
#   REIN_TEST_POSTGRES_TLS_CA        a throwaway CA's PEM; it signed the server's certificate
#                                    (for localhost and 127.0.0.1); the server has TLS on
#   REIN_TEST_POSTGRES_TLS_OTHER_CA  another CA's PEM, which signed nothing the server has
#   REIN_TEST_POSTGRES_TLS_ONLY      the URL of a database that refuses plaintext connections
# Usage: bash .ci/peers-postgres.sh DIR   (stop it with .ci/stop-postgres.sh). REIN_PG_PORT is
# the first port tried (default 15432). Running it again replaces the earlier server.
# Installs Debian's `postgresql` package when no server binaries are found (openssl comes
# with it). The data directory lives in DIR/postgres (initdb as the `postgres` user; no
# systemd needed).
set -euo pipefail
DIR="$(mkdir -p "${1:-target/peers}" && cd "${1:-target/peers}" && pwd)"
# Below Linux's ephemeral range (32768-60999), like the other peers' ports: a port in it can be
# held by any outgoing connection's local end, which a listener probe does not see (it once
# failed the start with "Address already in use").
PORT="${REIN_PG_PORT:-15432}"
t0=$(date +%s)

find_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}
BIN="$(find_bin || true)"
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ] || ! command -v openssl >/dev/null; then
  echo "postgres: installing Debian's postgresql package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql openssl >/dev/null
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

# TLS: a throwaway CA (valid 7 days) signs the server's certificate for localhost and
# 127.0.0.1; a second CA signs nothing (the tests' wrong CA). EC P-256 keys: quick to make.
TLS="$DIR/postgres/tls"
mkdir -p "$TLS"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
for ca in ca other-ca; do
  openssl req -x509 "${ec[@]}" -days 7 -subj "/CN=rein test $ca" -keyout "$TLS/$ca.key" \
    -out "$TLS/$ca.pem" -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
done
openssl req "${ec[@]}" -subj "/CN=localhost" -keyout "$TLS/server.key" -out "$TLS/server.csr" 2>/dev/null
printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=critical,CA:FALSE" \
  "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" > "$TLS/server.ext"
openssl x509 -req -in "$TLS/server.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial \
  -days 7 -extfile "$TLS/server.ext" -out "$TLS/server.pem" 2>/dev/null
chmod 600 "$TLS/server.key"

# Settings go in postgresql.conf (not `pg_ctl -o`), so a restart keeps them.
{
  echo "listen_addresses = '127.0.0.1'"
  echo "port = $PORT"
  echo "unix_socket_directories = '$DIR/postgres'"
  echo "fsync = off"
  echo "max_connections = 100"
  echo "ssl = on"
  echo "ssl_cert_file = '$TLS/server.pem'"
  echo "ssl_key_file = '$TLS/server.key'"
} >> "$PGDATA/postgresql.conf"
# The first matching line wins: the database rein_tls_only refuses plaintext connections.
printf '%s\n' "local all all trust" "hostnossl rein_tls_only all 127.0.0.1/32 reject" \
  "host all all 127.0.0.1/32 trust" > "$PGDATA/pg_hba.conf"
if [ "$(id -u)" = 0 ]; then chown -R postgres "$TLS" "$PGDATA/postgresql.conf" "$PGDATA/pg_hba.conf"; fi

# Should the port still be taken when the server binds it, the next one is tried (a later
# `port` line in postgresql.conf wins).
for attempt in 1 2 3 4 5; do
  if "${RUNAS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -l "$DIR/postgres/server.log" -w -t 60 start >/dev/null; then
    break
  fi
  grep -q "could not create any TCP/IP sockets" "$DIR/postgres/server.log" && [ "$attempt" -lt 5 ] \
    || { tail -n 5 "$DIR/postgres/server.log" >&2; exit 1; }
  echo "postgres: port $PORT was taken when the server bound it; trying $((PORT + 1))"
  PORT=$((PORT + 1))
  echo "port = $PORT" >> "$PGDATA/postgresql.conf"
  : > "$DIR/postgres/server.log"
done
for db in rein_test rein_tls_only; do
  "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -q -c "CREATE DATABASE $db" >/dev/null
done

# The reconnect test's restart command: stop (fast or immediate) and start again.
RESTART="$DIR/postgres/restart.sh"
{
  echo '#!/usr/bin/env bash'
  echo '# Restarts the test server of .ci/peers-postgres.sh. Usage: restart.sh [fast|immediate]'
  echo 'set -euo pipefail'
  echo "${RUNAS[*]} '$BIN/pg_ctl' -D '$PGDATA' -m \"\${1:-fast}\" -w -t 60 stop >/dev/null"
  echo "${RUNAS[*]} '$BIN/pg_ctl' -D '$PGDATA' -l '$DIR/postgres/server.log' -w -t 60 start >/dev/null"
} > "$RESTART"

echo "$PGDATA" > "$DIR/postgres/pgdata"
echo "$BIN" > "$DIR/postgres/bin"
{
  echo "export REIN_TEST_POSTGRES=postgres://postgres@127.0.0.1:$PORT/rein_test"
  echo "export REIN_TEST_POSTGRES_RESTART='bash $RESTART'"
  echo "export REIN_TEST_POSTGRES_TLS_CA=$TLS/ca.pem"
  echo "export REIN_TEST_POSTGRES_TLS_OTHER_CA=$TLS/other-ca.pem"
  echo "export REIN_TEST_POSTGRES_TLS_ONLY=postgres://postgres@127.0.0.1:$PORT/rein_tls_only"
} >> "$DIR/env"
echo "postgres: listening on 127.0.0.1:$PORT, TLS on (+$(( $(date +%s) - t0 ))s)"
