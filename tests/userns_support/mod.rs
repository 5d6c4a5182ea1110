//! Helpers of the user-namespace tests (issue 17): a Python probe for what no command-line
//! tool does (hold inotify instances and epoll watches, hand a `/proc/<pid>` directory over a
//! Unix socket), the block a task's `uid_map` names, and the host pid and ids of an agent.

#![allow(dead_code)]

use super::common::sandbox::HostDir;
use super::common::{privileged_required, require_root, wait::wait_for, Daemon};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// How many host ids a task's user namespace maps (the design: `0 <block first> 65536`).
pub const BLOCK_SIZE: u64 = 65536;

/// The probe's actions (argv[1]):
/// - `inotify LIMIT HELD RELEASE`: create inotify instances until the kernel refuses or LIMIT
///   are held; write `HELD` ("<count> <why it stopped>"); hold them until RELEASE exists.
/// - `epoll BOUND HELD RELEASE`: epoll watches (500 descriptors of one eventfd, each added to
///   one epoll instance after another) until the kernel refuses or BOUND are held; likewise.
/// - `give DIR SOCKET`: open DIR (a `/proc/<pid>` directory), serve it once over a Unix
///   socket at SOCKET (`SOCKET.ready` once listening), then wait for the peer to hang up.
/// - `take SOCKET TAG`: receive that directory and try to read `environ`, `maps` and
///   `status` through it: one line `TAG-<file> ok|denied <error>|error <error>` each.
const PROBE: &str = r#"
import ctypes, errno, os, select, socket, sys, time
def wait_for(path, seconds=120):
    end = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > end:
            sys.exit("gave up waiting for " + path)
        time.sleep(0.05)
def report(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text + "\n")
    os.rename(path + ".tmp", path)
action = sys.argv[1]
if action == "inotify":
    limit, held, release = int(sys.argv[2]), sys.argv[3], sys.argv[4]
    libc = ctypes.CDLL(None, use_errno=True)
    fds, why = [], "limit"
    while len(fds) < limit:
        fd = libc.inotify_init1(0)
        if fd < 0:
            why = os.strerror(ctypes.get_errno())
            break
        fds.append(fd)
    report(held, "%d %s" % (len(fds), why))
    wait_for(release)
elif action == "epoll":
    bound, held, release = int(sys.argv[2]), sys.argv[3], sys.argv[4]
    first = os.eventfd(0)
    fds = [first] + [os.dup(first) for _ in range(499)]
    polls, count, why = [], 0, "bound"
    try:
        while count < bound:
            poll = select.epoll()
            polls.append(poll)
            for fd in fds[: bound - count]:
                poll.register(fd, select.EPOLLIN)
                count += 1
    except OSError as e:
        why = os.strerror(e.errno)
    report(held, "%d %s" % (count, why))
    wait_for(release)
elif action == "give":
    target, path = sys.argv[2], sys.argv[3]
    dirfd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o666)
    server.listen(1)
    server.settimeout(120)
    report(path + ".ready", "listening")
    conn, _ = server.accept()
    socket.send_fds(conn, [b"x"], [dirfd])
    conn.settimeout(120)
    conn.recv(1)
elif action == "take":
    path, tag = sys.argv[2], sys.argv[3]
    wait_for(path + ".ready")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    _, fds, _, _ = socket.recv_fds(conn, 1, 4)
    for name in ("environ", "maps", "status"):
        try:
            fd = os.open(name, os.O_RDONLY, dir_fd=fds[0])
            os.read(fd, 4096)
            print("%s-%s ok" % (tag, name))
        except OSError as e:
            kind = "denied" if e.errno in (errno.EACCES, errno.EPERM) else "error"
            print("%s-%s %s %s" % (tag, name, kind, os.strerror(e.errno)))
    conn.close()
else:
    sys.exit("unknown action " + action)
"#;

/// The probe's file in `dir` (under /var/tmp: the sandbox sees the host's /var, read-only; the
/// file and its directory are world-readable, so an agent of any uid can run it).
pub fn write_probe(dir: &HostDir) -> String {
    let path = dir.0.join("probe.py");
    std::fs::write(&path, PROBE).unwrap();
    set_mode(&dir.0, 0o755);
    set_mode(&path, 0o644);
    path.display().to_string()
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Root, and python3 for the probe (CI installs it: .ci/run).
pub fn ready(test: &str) -> bool {
    if !require_root(test) {
        return false;
    }
    if Command::new("python3").arg("--version").output().is_err() {
        assert!(
            !privileged_required(),
            "{test}: needs python3 (apt-get install python3)"
        );
        eprintln!("{test}: skipped: no python3");
        return false;
    }
    true
}

/// The first host id of the block a `uid_map` or `gid_map` (as the agent read it) maps its
/// ids to. Asserts the design: one line `0 <first> 65536`, the block above the host's own
/// first 65536 ids — never the identity map `0 0 4294967295` of the host's namespace.
pub fn mapped_block(what: &str, map: &str) -> u64 {
    let lines: Vec<Vec<u64>> = map
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|f| f.parse().unwrap_or_else(|_| panic!("{what}: {map:?}")))
                .collect()
        })
        .collect();
    assert_eq!(lines.len(), 1, "{what}: one range expected: {map:?}");
    let range = &lines[0];
    assert_eq!(range.len(), 3, "{what}: {map:?}");
    assert_ne!(
        range[..],
        [0, 0, 4_294_967_295],
        "{what}: the identity map: the agent's ids are the host's"
    );
    assert_eq!(
        range[0], 0,
        "{what}: the block starts at id 0 inside: {map:?}"
    );
    assert_eq!(range[2], BLOCK_SIZE, "{what}: block size: {map:?}");
    assert!(
        range[1] >= BLOCK_SIZE,
        "{what}: the block overlaps the host's first {BLOCK_SIZE} ids: {map:?}"
    );
    range[1]
}

/// The lines of the agent's output from `begin` to `end` markers (exclusive).
pub fn section(out: &str, name: &str) -> String {
    let lines: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != format!("{name}-begin"))
        .skip(1)
        .take_while(|l| *l != format!("{name}-end"))
        .collect();
    lines.join("\n")
}

/// The shim pid `tasks/<unit>/run/shim.ron` records, if it does yet.
pub fn shim_pid(d: &Daemon, unit: &str) -> Option<i32> {
    let text = std::fs::read_to_string(d.task_dir(unit).join("run/shim.ron")).ok()?;
    text.split("pid:")
        .nth(1)?
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The host pid of `unit`'s running agent: its shim's first child.
pub fn agent_pid(d: &Daemon, unit: &str) -> i32 {
    wait_for(Duration::from_secs(30), "the agent's host pid", || {
        super::common::first_child(shim_pid(d, unit)?)
    })
}

/// The real, effective, saved and filesystem uids (`Uid:`) or gids (`Gid:`) of host `pid`.
pub fn host_ids(pid: i32, field: &str) -> Vec<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect()
}

/// Wait for a file the probe writes atomically; its text, trimmed.
pub fn wait_report(path: &Path, what: &str) -> String {
    wait_for(Duration::from_secs(60), what, || {
        std::fs::read_to_string(path)
            .ok()
            .map(|t| t.trim().to_string())
    })
}

/// Wait until the agent's output log (`run/output.log`) has a line `want`; the whole log.
pub fn wait_output_line(path: &Path, want: &str) -> String {
    wait_for(Duration::from_secs(30), want, || {
        let text = std::fs::read_to_string(path).ok()?;
        text.lines().any(|l| l == want).then_some(text)
    })
}
