# Shared shell helpers for snowid's scripts. Source it; do not run it.
#
# Works as root (PostgreSQL then runs as the `postgres` OS user through sudo) and as a normal
# user with sudo (PostgreSQL runs as that user). Override the PostgreSQL installation with
# SNOWID_PG_CONFIG.

set -euo pipefail

SNOWID_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARGO_PGRX_VERSION=0.18.1

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Which PostgreSQL major: SNOWID_PG=15 (the default; Debian's packages) or 16 (the relocatable
# PostgreSQL 16.2 from PyPI's pgserver wheel, unpacked into SNOWID_PG16_ROOT).
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PG16_ROOT=${SNOWID_PG16_ROOT:-/opt/snowid-pg16}
PG16_CONFIG=$PG16_ROOT/pgserver/pginstall/bin/pg_config
PG_MAJOR=${SNOWID_PG:-15}
case "$PG_MAJOR" in
    15) PG_CONFIG=$PG15_CONFIG ;;
    16) PG_CONFIG=$PG16_CONFIG ;;
    all) PG_CONFIG=$PG15_CONFIG ;;
    *) die "SNOWID_PG must be 15, 16 or all, not '$PG_MAJOR'" ;;
esac
# The cargo features that select the major, for every cargo pgrx command that builds.
PG_FEATURES=(--no-default-features --features "pg${PG_MAJOR/all/15}")
# The integration tests' harness reads this.
export SNOWID_PG_CONFIG=$PG_CONFIG

if [ "$(id -u)" = 0 ]; then
    IS_ROOT=1
    SUDO=""
else
    IS_ROOT=0
    SUDO="sudo"
fi

# Runs a PostgreSQL server program as the OS user that owns the clusters.
as_pg_owner() {
    if [ "$IS_ROOT" = 1 ]; then sudo -u postgres "$@"; else "$@"; fi
}

pg_bindir() { "$PG_CONFIG" --bindir; }

# cluster_init DIR PORT: a new cluster in DIR/data with snowid preloaded, listening on PORT on
# loopback and on a socket in DIR. Extra postgresql.conf lines come on standard input.
cluster_init() {
    local dir=$1 port=$2 bindir
    bindir=$(pg_bindir)
    mkdir -p "$dir"
    [ "$IS_ROOT" = 1 ] && chown postgres:postgres "$dir"
    as_pg_owner "$bindir/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --no-sync >/dev/null
    {
        echo "port = $port"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "shared_preload_libraries = 'snowid'"
        cat
    } | as_pg_owner tee -a "$dir/data/postgresql.conf" >/dev/null
}

cluster_start() {
    local dir=$1
    as_pg_owner "$(pg_bindir)/pg_ctl" start -w -t 60 -D "$dir/data" -l "$dir/server.log" >/dev/null ||
        { tail -n 20 "$dir/server.log" >&2; die "the server in $dir did not start"; }
}

# cluster_stop DIR [MODE]: stops the server if it runs; never fails.
cluster_stop() {
    local dir=$1 mode=${2:-fast}
    [ -f "$dir/data/postmaster.pid" ] || return 0
    as_pg_owner "$(pg_bindir)/pg_ctl" stop -w -t 60 -m "$mode" -D "$dir/data" >/dev/null 2>&1 || true
}

cluster_running() {
    as_pg_owner "$(pg_bindir)/pg_ctl" status -D "$1/data" >/dev/null 2>&1
}

# A TCP port on loopback that nothing listens on.
free_port() {
    local port
    for port in $(shuf -i 40000-59999 -n 50); do
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    die "no free port found"
}
