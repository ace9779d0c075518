#!/usr/bin/env bash
# Supply-chain checks with cargo-deny: advisories, bans, licenses, sources (deny.toml says what
# is accepted and why each exception is there).
#
#   bash .ci/deny.sh                 run every check (CI: .ci/run)
#   bash .ci/deny.sh refresh CLONE   replace the vendored advisory snapshot with CLONE, a git
#                                    clone of the RustSec advisory database
#
# Advisories need the RustSec database, a git repository that cargo-deny clones from its git
# host. Where that host is reachable the live database is used. CI machines reach the package
# registries only, so there the check runs against the snapshot vendored in .ci/advisory-db
# (its commit and date in .ci/advisory-db/SNAPSHOT; CC0 / CC-BY-4.0, see its LICENSE.txt): a
# known advisory still fails CI, and a snapshot older than deny.toml's maximum-db-staleness
# (365 days) fails it too, so it cannot silently rot. Refresh it whenever you can reach the
# database (a session's fetch tool can bring it): `bash .ci/deny.sh refresh DIR`.
set -euo pipefail
cd "$(dirname "$0")/.."

# cargo-deny's version, pinned (a new release may add checks that fail CI on its own).
DENY_VERSION=0.20.2
SNAPSHOT=.ci/advisory-db
# cargo-deny's directory name for the default database URL (its name and a hash of the URL).
DB_NAME=advisory-db-3157b0e258782691

if [ "${1:-}" = refresh ]; then
  clone="${2:?usage: bash .ci/deny.sh refresh CLONE}"
  rm -rf "$SNAPSHOT"
  mkdir -p "$SNAPSHOT"
  cp -r "$clone/crates" "$clone/LICENSE.txt" "$clone/LICENSES" "$SNAPSHOT/"
  printf 'commit %s\ndate %s\n' "$(git -C "$clone" rev-parse HEAD)" \
    "$(git -C "$clone" show -s --format=%cI HEAD)" > "$SNAPSHOT/SNAPSHOT"
  echo "advisory snapshot: $(cat "$SNAPSHOT/SNAPSHOT" | tr '\n' ' ')"
  exit 0
fi

if ! cargo deny --version 2>/dev/null | grep -qx "cargo-deny $DENY_VERSION"; then
  # A cold install (a release build) took 8.5 minutes of a 2-core machine busy with another build.
  t0=$(date +%s)
  cargo install --locked "cargo-deny@$DENY_VERSION"
  echo "cargo-deny $DENY_VERSION installed in $(( $(date +%s) - t0 ))s"
fi

cargo deny --all-features check bans licenses sources

if timeout 120 cargo deny fetch db >/dev/null 2>&1; then
  echo "advisories: the live RustSec database"
  cargo deny --all-features check advisories
else
  date="$(sed -n 's/^date //p' "$SNAPSHOT/SNAPSHOT")"
  echo "advisories: the RustSec database cannot be fetched here; checking against the vendored" \
    "snapshot of $date ($SNAPSHOT; refresh: bash .ci/deny.sh refresh CLONE)"
  db="$PWD/target/advisory-dbs"
  rm -rf "$db"
  mkdir -p "$db/$DB_NAME"
  cp -r "$SNAPSHOT/." "$db/$DB_NAME/"
  (
    cd "$db/$DB_NAME"
    git init -q
    git add -A
    GIT_AUTHOR_DATE="$date" GIT_COMMITTER_DATE="$date" \
      git -c user.name=rein-ci -c user.email=ci@localhost commit -qm "RustSec snapshot"
    # cargo-deny dates a database by its HEAD commit or its HEAD file, the later: the snapshot's
    # date for both, so deny.toml's maximum-db-staleness applies to the snapshot.
    touch -d "$date" .git/HEAD
  )
  config="$PWD/target/deny-offline.toml"
  sed "s|^\[advisories\]|[advisories]\ndb-path = \"$db\"|" deny.toml > "$config"
  cargo deny --all-features --offline --config "$config" check advisories
fi
