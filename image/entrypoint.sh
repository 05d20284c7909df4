#!/bin/bash
# The entrypoint of snowid's container images (scripts/image), with the official postgres
# image's interface:
#   POSTGRES_PASSWORD           the password of POSTGRES_USER; needed on first start, unless
#                               POSTGRES_HOST_AUTH_METHOD is trust
#   POSTGRES_USER               the superuser that initdb creates (postgres)
#   POSTGRES_DB                 the database made on first start (POSTGRES_USER's name)
#   POSTGRES_INITDB_ARGS        more arguments for initdb
#   POSTGRES_HOST_AUTH_METHOD   how TCP connections authenticate (scram-sha-256)
#   PGDATA                      the data directory (/var/lib/postgresql/data, a volume)
# and snowid's own:
#   SNOWID_SHARDS               snowid.shards, the shards this server generates for, at every
#                               start (unset: all of them)
# Arguments that start with `-` are server options (`-c port=5433`); a command runs instead.
#
# First start (no PG_VERSION in PGDATA): initdb; snowid preloaded; a temporary server on the Unix
# socket only; POSTGRES_DB created, with CREATE EXTENSION snowid in it; the files in
# /docker-entrypoint-initdb.d in name order (*.sh run, or sourced if not executable; *.sql and
# *.sql.gz fed to psql). If any of that fails, the data directory is emptied again (initdb only
# works in an empty one), so the volume is left as it was found, not with a half-made cluster.
#
# Started as root, it makes PGDATA postgres's and runs itself again as postgres: the server
# never runs as root. SIGTERM or SIGINT stops the server with a fast shutdown (clients are
# disconnected, then a shutdown checkpoint), SIGQUIT with an immediate one.
# No `set -u`: the .sh files in /docker-entrypoint-initdb.d are sourced, as the official image
# sources them, and may read variables that are not set.
set -Eeo pipefail

if [ $# = 0 ] || [ "${1#-}" != "$1" ]; then set -- postgres "$@"; fi
[ "$1" = postgres ] || exec "$@"
shift
# The server's version, help or settings list: nothing to set up.
for arg; do case "$arg" in -V | --version | '-?' | --help | --describe-config) exec postgres "$@" ;; esac; done

export PGDATA=${PGDATA:-/var/lib/postgresql/data}
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres /var/run/postgresql
    find "$PGDATA" ! -user postgres -exec chown postgres:postgres {} +
    [ -s "$PGDATA/PG_VERSION" ] || chmod 700 "$PGDATA"
    export HOME=/var/lib/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" postgres "$@"
fi

say() { echo "snowid-entrypoint: $*" >&2; }

# psql on the temporary server's socket, as POSTGRES_USER, stopping at the first error.
init_psql() { psql -X -q -v ON_ERROR_STOP=1 --no-password "$@"; }

# Empties the data directory that this first start filled (see above).
undo_first_start() {
    say "the first start failed; emptying $PGDATA so that the next start begins afresh"
    pg_ctl -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || true
    find "$PGDATA" -mindepth 1 -delete
}

first_start() {
    local auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256} password=() pwfile file
    if [ -n "${POSTGRES_PASSWORD:-}" ]; then
        pwfile=$(mktemp)
        printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
        password=(--pwfile="$pwfile")
    elif [ "$auth" != trust ]; then
        say "the data directory is empty and POSTGRES_PASSWORD is not set: set it, or set POSTGRES_HOST_AUTH_METHOD=trust to let everyone connect without a password"
        exit 1
    fi
    # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of arguments.
    initdb --username="$POSTGRES_USER" "${password[@]}" --auth-local=trust \
        --auth-host="$auth" ${POSTGRES_INITDB_ARGS:-} >&2 || { rm -f "${pwfile:-}"; exit 1; }
    rm -f "${pwfile:-}"
    trap undo_first_start ERR
    printf '%s\n' "listen_addresses = '*'" "shared_preload_libraries = 'snowid'" \
        >>"$PGDATA/postgresql.conf"
    echo "host all all all $auth" >>"$PGDATA/pg_hba.conf"

    # The temporary server takes the same options as the real one, but listens on no TCP port.
    pg_ctl -D "$PGDATA" -w -t 60 start \
        -o "$(printf '%q ' "${SERVER_OPTIONS[@]}" -c listen_addresses= -p 5432)" >&2
    export PGHOST=/var/run/postgresql PGPORT=5432 PGUSER=$POSTGRES_USER PGDATABASE=$POSTGRES_DB
    if [ "$POSTGRES_DB" != postgres ]; then
        init_psql -d postgres -v db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
    fi
    init_psql -c 'CREATE EXTENSION snowid'
    for file in /docker-entrypoint-initdb.d/*; do
        [ -e "$file" ] || continue
        say "running $file"
        case "$file" in
            *.sh) if [ -x "$file" ]; then "$file"; else . "$file"; fi ;;
            *.sql) init_psql -f "$file" ;;
            *.sql.gz) gunzip -c "$file" | init_psql ;;
            *) say "ignoring $file" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >&2
    unset PGHOST PGPORT PGUSER PGDATABASE
    trap - ERR
    say "first start complete: database \"$POSTGRES_DB\", snowid created in it"
}

SERVER_OPTIONS=()
if [ -n "${SNOWID_SHARDS:-}" ]; then SERVER_OPTIONS+=(-c "snowid.shards=$SNOWID_SHARDS"); fi
SERVER_OPTIONS+=("$@")

if [ ! -s "$PGDATA/PG_VERSION" ]; then first_start; fi

postgres "${SERVER_OPTIONS[@]}" &
server=$!
trap 'kill -INT "$server" 2>/dev/null' INT TERM
trap 'kill -QUIT "$server" 2>/dev/null' QUIT
# A trapped signal ends `wait` early: wait again until the server is gone, then exit with its
# status, which bash keeps.
while kill -0 "$server" 2>/dev/null; do wait "$server" || true; done
wait "$server"
