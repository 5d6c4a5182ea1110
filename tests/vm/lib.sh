# Helpers for the VM scenarios' checks (busybox sh). A check runs as the companion command of
# `keel init` (`keel init -- /bin/sh CHECK`): outside any sandbox, as PID 1's child, with the
# console as stdout and stderr. Its exit status becomes keel init's and the VM's result.
set -u
: "${SCENARIO:=$(basename "$(dirname "$0")")}"
: "${KEEL_STATE_DIR:=/var/lib/keel}"
export KEEL_STATE_DIR
CG=/sys/fs/cgroup
: "${TREE:=$CG/keel}"

say() { echo "vm[$SCENARIO]: $*"; }

fail() {
    say "FAIL: $*"
    echo "KEEL-VM-CHECK $SCENARIO fail"
    exit 1
}

pass() {
    say "ok: $*"
    echo "KEEL-VM-CHECK $SCENARIO pass"
    exit 0
}

# Seconds since boot, in hundredths (integer arithmetic only).
now_cs() { awk '{ printf "%d\n", $1 * 100 }' /proc/uptime; }

# wait_for SECONDS WHAT COMMAND...: poll COMMAND every 0.1 s until it succeeds. COMMAND's
# arguments are expanded once, by the caller: put a `$(...)` to re-evaluate in a function.
wait_for() {
    limit=$(( $(now_cs) + $1 * 100 )); what=$2; shift 2
    until "$@"; do
        [ "$(now_cs)" -lt "$limit" ] || fail "timed out waiting for $what"
        sleep 0.1
    done
}

# task_field UNIT KEY: a task's field from `keel status UNIT --json` (one line a field; the
# task's fields are indented by six spaces, the daemon's by four). null prints as "null".
task_field() {
    keel status "$1" --json 2>/dev/null | sed -n "s/^      \"$2\": //p" | head -n 1 |
        sed 's/,$//; s/^"//; s/"$//'
}

daemon_field() {
    keel status --json 2>/dev/null | sed -n "s/^    \"$1\": //p" | head -n 1 |
        sed 's/,$//; s/^"//; s/"$//'
}

is_state() { [ "$(task_field "$1" state)" = "$2" ]; }
is_running() { is_state "$1" running; }
# The agent itself is up (a task is `running` from its shim's spawn; the shim then builds the
# sandbox, which takes a second or two under TCG): its progress line reads WORD.
says() { [ "$(task_field "$1" progress)" = "$2" ]; }

# Zombies anywhere on the machine.
zombies() { cat /proc/[0-9]*/stat 2>/dev/null | awk '$3 == "Z"' | wc -l; }

say "check started $(cut -d" " -f1 /proc/uptime) s after boot; cgroup2: $(cat $CG/cgroup.controllers)"
answers() { keel health >/dev/null 2>&1; }
wait_for 30 "the daemon to answer" answers
[ "$(daemon_field cgroup_mode)" = v2 ] || fail "cgroup mode is '$(daemon_field cgroup_mode)', not v2"
