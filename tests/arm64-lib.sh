# shellcheck shell=bash
# Helpers for the arm64 tests (tests/package/arm64, tests/image/run with SNOWID_ARCH=arm64):
# arm64 programs run under proot and qemu-aarch64 (scripts/arm64 run), each group of them in a PID
# namespace of its own, as in a container. Every process a group starts, orphans too, lives in its
# namespace, so a SIGKILL to the group's first process ends them all at once (as `podman kill -s
# KILL` does), and arm64_end_all leaves none behind. Source it after scripts/lib.sh.

ARM64_GROUP_PIDS=()
declare -A ARM64_STATUS_FILE=()
# arm64_spawn LOG [-b HOST:GUEST]... ROOT CMD...: CMD in the background, in a namespace of its own
# (with its own /proc, which proot reads),
# its output appended to LOG; sets SPAWNED to the group's pid (the process to kill, and to wait for
# with arm64_wait, which prints CMD's exit status).
arm64_spawn() {
    local log=$1
    shift
    rm -f "$log.status"
    # proot's own files (its loader) go beside the log, not to /tmp, where a group that is killed
    # would leave them.
    mkdir -p "$log.proot"
    chmod 755 "$log.proot"
    PROOT_TMP_DIR=$log.proot $SUDO unshare --pid --fork --kill-child --mount-proc /bin/bash -c '"${@:2}"; echo $? >"$1"' bash "$log.status" \
        "$SNOWID_ROOT/scripts/arm64" run "$@" >>"$log" 2>&1 &
    SPAWNED=$!
    # Its status is in the file; the shell need not report how it ended.
    disown "$SPAWNED"
    ARM64_GROUP_PIDS+=("$SPAWNED")
    ARM64_STATUS_FILE[$SPAWNED]=$log.status
}

# arm64_running GROUP: whether the group runs (a group that ended but was not reaped yet does not).
arm64_running() {
    local state
    state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

# arm64_kill GROUP: SIGKILL to every process of that group at once (to the namespace's first
# process, and so to all; through sudo, to sudo's child too); waits until they are gone.
arm64_kill() {
    local _
    $SUDO pkill -KILL -P "$1" 2>/dev/null || true
    $SUDO kill -KILL "$1" 2>/dev/null || true
    for _ in $(seq 1 120); do arm64_running "$1" || break; sleep 0.5; done
}

# arm64_end_all: kills every group still running (for traps).
arm64_end_all() {
    local pid
    for pid in "${ARM64_GROUP_PIDS[@]}"; do
        if arm64_running "$pid"; then arm64_kill "$pid"; fi
    done
    return 0
}

# arm64_wait GROUP [SECONDS]: waits for the group to end (120 s at most) and prints CMD's exit
# status (137 when it was killed); fails if it does not end in time.
arm64_wait() {
    local pid=$1 limit=${2:-120} _ file
    file=${ARM64_STATUS_FILE[$pid]}
    for _ in $(seq 1 $((limit * 2))); do
        if ! arm64_running "$pid"; then
            if [ -s "$file" ]; then cat "$file"; else echo 137; fi
            return 0
        fi
        sleep 0.5
    done
    return 1
}

# guest_processes GROUP: "PID PPID UID GUEST ARGS" for each process of that group, GUEST 1 for the
# arm64 programs (run by qemu-aarch64) and 0 for what runs them (unshare, proot, bash).
guest_processes() {
    ps -e -o pid=,ppid=,uid=,args= | awk -v group="$1" -v qemu="$ARM64_QEMU" '
        { parent[$1] = $2; uid[$1] = $3; line = $0; sub(/^ *[0-9]+ +[0-9]+ +[0-9]+ +/, "", line); args[$1] = line }
        END {
            for (pid in parent) {
                for (p = parent[pid]; p > 1 && p != group; p = parent[p]) {}
                if (p == group) print pid, parent[pid], uid[pid], (index(args[pid], qemu) == 1), args[pid]
            }
        }'
}

# arm64_main_pid GROUP PATTERN: the host pid of the group's first arm64 program whose command line
# matches PATTERN (the postmaster, and not its children, which share its command line).
arm64_main_pid() {
    guest_processes "$1" | awk -v pattern="$2" '
        { guest[$1] = $4; parent[$1] = $2; line = $0; sub(/^[0-9]+ [0-9]+ [0-9]+ [01] /, "", line); args[$1] = line }
        END {
            for (pid in guest) {
                if (!guest[pid] || args[pid] !~ pattern) continue
                if (guest[parent[pid]] && args[parent[pid]] ~ pattern) continue
                print pid
                exit
            }
        }'
}

# arm64_users GROUP ROOT: the names of the users that the group's arm64 programs run as, by
# ROOT's /etc/passwd (one line per user).
arm64_users() {
    guest_processes "$1" | awk '$4 == 1 { print $3 }' | sort -u | while read -r id; do
        awk -F: -v id="$id" '$3 == id { print $1; found = 1 } END { if (!found) print "uid " id }' "$2/etc/passwd"
    done
}
