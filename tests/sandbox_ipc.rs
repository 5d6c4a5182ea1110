//! The task's IPC (issue 17, the red team's attack): a default agent must not reach the host's
//! SysV objects or POSIX message queues — a root 0600 segment, a root 0600 queue the test
//! makes — and what it makes itself dies with its attempt; its hostname is the host's, in a
//! UTS namespace of its own. Checked on every path a start can take: the daemon's clone on a
//! template, the daemon's clone building the whole plan (`KEEL_NO_SANDBOX_TEMPLATES`), and a
//! spare shim on its copy or building in full (`KEEL_NO_SPARE` turns spares off).

mod common;
use common::sandbox::*;
use common::*;
use std::process::Command;
use std::sync::Mutex;

/// Held by each test for its whole run: they make and look for objects in the host's IPC
/// namespace, which all of them share.
static HOST_IPC: Mutex<()> = Mutex::new(());

/// A Python probe (ctypes; no unsafe Rust in a test) for what no command-line tool does: make,
/// count and unlink a POSIX queue on the host; from inside, the red team's attack — empty the
/// queue by name, remove the segment by key.
const PROBE: &str = r#"
import ctypes, ctypes.util, os, sys
libc = ctypes.CDLL(None, use_errno=True)
rt = libc if hasattr(libc, "mq_open") else ctypes.CDLL(ctypes.util.find_library("rt"), use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long),
                ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
rt.mq_getattr.argtypes = [ctypes.c_int, ctypes.POINTER(Attr)]
rt.mq_send.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint]
rt.mq_receive.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p]
rt.mq_receive.restype = ctypes.c_ssize_t
rt.mq_unlink.argtypes = [ctypes.c_char_p]
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
err = lambda: os.strerror(ctypes.get_errno())
action, name = sys.argv[1], sys.argv[2].encode()
if action == "create":
    fd = rt.mq_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, None)
    if fd < 0 or rt.mq_send(fd, b"host-secret", 11, 0) != 0:
        sys.exit("cannot create the queue: " + err())
elif action == "count":
    fd = rt.mq_open(name, os.O_RDONLY, 0, None)
    attr = Attr()
    if fd < 0 or rt.mq_getattr(fd, ctypes.byref(attr)) != 0:
        sys.exit("cannot open the queue: " + err())
    print(attr.curmsgs)
elif action == "unlink":
    rt.mq_unlink(name)
elif action == "attack":
    fd = rt.mq_open(name, os.O_RDWR | os.O_NONBLOCK, 0, None)
    if fd < 0:
        print("mq-open", err())
    else:
        buf = ctypes.create_string_buffer(8192)
        got = 0
        while rt.mq_receive(fd, buf, 8192, None) >= 0:
            got += 1
        print("mq-open ok, emptied", got)
    shmid = libc.shmget(int(sys.argv[3]), 0, 0)
    if shmid < 0:
        print("shm-get", err())
    else:
        libc.shmctl(shmid, 0, None)
        print("shm-get ok, removed", shmid)
"#;

/// The probe's file, under /var/tmp: the sandbox sees the host's /var, read-only.
fn write_probe(dir: &HostDir) -> String {
    let path = dir.0.join("probe.py");
    std::fs::write(&path, PROBE).unwrap();
    path.display().to_string()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", stderr_of(&out));
    stdout_of(&out)
}

/// The lines of the host's /proc/sysvipc/shm (key, shmid, perms, size, …), without the header.
fn host_segments() -> Vec<Vec<String>> {
    std::fs::read_to_string("/proc/sysvipc/shm")
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// A root-owned 0600 SysV segment on the host (`ipcmk`), removed at the end, whatever happens.
struct HostSegment {
    id: String,
    key: String,
}

impl HostSegment {
    fn new() -> HostSegment {
        let out = run(Command::new("ipcmk").args(["-M", "4096", "-p", "0600"]));
        let id = out.rsplit(':').next().unwrap().trim().to_string();
        let key = host_segments()
            .into_iter()
            .find(|f| f[1] == id)
            .unwrap_or_else(|| panic!("segment {id} not in /proc/sysvipc/shm"))[0]
            .clone();
        HostSegment { id, key }
    }

    fn still_there(&self) -> bool {
        host_segments()
            .iter()
            .any(|f| f[0] == self.key && f[1] == self.id)
    }
}

impl Drop for HostSegment {
    fn drop(&mut self) {
        if self.still_there() {
            let _ = Command::new("ipcrm").args(["-m", &self.id]).status();
        }
    }
}

/// A root-owned 0600 POSIX message queue on the host holding one message, unlinked at the end.
struct HostQueue {
    name: String,
    probe: String,
}

impl HostQueue {
    fn new(probe: &str, tag: &str) -> HostQueue {
        let name = format!("/keel-test-ipc-{tag}-{}", std::process::id());
        let queue = HostQueue {
            name,
            probe: probe.to_string(),
        };
        queue.probe("unlink");
        queue.probe("create");
        queue
    }

    fn probe(&self, action: &str) -> String {
        run(Command::new("python3").args([&self.probe, action, &self.name]))
    }
}

impl Drop for HostQueue {
    fn drop(&mut self) {
        let _ = Command::new("python3")
            .args([&self.probe, "unlink", &self.name])
            .status();
    }
}

/// Segments of `size` on the host: what a task's `ipcmk` leaves when its IPC is the host's.
/// Removed at the end, so that a failing run leaves none behind.
struct LeftBehind {
    size: String,
}

impl LeftBehind {
    fn ids(&self) -> Vec<String> {
        host_segments()
            .into_iter()
            .filter(|f| f[3] == self.size)
            .map(|f| f[1].clone())
            .collect()
    }
}

impl Drop for LeftBehind {
    fn drop(&mut self) {
        for id in self.ids() {
            let _ = Command::new("ipcrm").args(["-m", &id]).status();
        }
    }
}

fn namespace(kind: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .unwrap()
        .display()
        .to_string()
}

/// The lines an agent printed between `begin` and `end` markers.
fn section<'a>(out: &'a str, name: &str) -> Vec<&'a str> {
    out.lines()
        .skip_while(|l| *l != format!("{name}-begin"))
        .skip(1)
        .take_while(|l| *l != format!("{name}-end"))
        .collect()
}

/// How a start is expected to go, and the line of its shim's log that shows it did.
#[derive(Clone, Copy)]
enum StartPath {
    /// The daemon's clone, on a template.
    Template,
    /// The daemon's clone, the whole plan.
    InFull,
    /// A spare shim, on the copy it prepared.
    Spare,
    /// A spare shim, the whole plan.
    SpareInFull,
}

impl StartPath {
    fn daemon(self, tag: &str) -> Daemon {
        let (templates, spares) = match self {
            StartPath::Template => (true, false),
            StartPath::InFull => (false, false),
            StartPath::Spare => (true, true),
            StartPath::SpareInFull => (false, true),
        };
        common::sandbox::daemon_starting(tag, templates, spares)
    }

    /// Run `script` as `unit` this way (on a spare: its restart, the start a spare is made
    /// for: `common::sandbox::run_agent_on_spare`).
    fn run(self, d: &Daemon, unit: &str, script: &str) -> (serde_json::Value, String) {
        match self {
            StartPath::Spare | StartPath::SpareInFull => {
                common::sandbox::run_agent_on_spare(d, unit, script, "")
            }
            _ => run_agent(d, unit, script, ""),
        }
    }

    /// Assert that `unit`'s start went this way.
    fn check_taken(self, d: &Daemon, unit: &str) {
        let log = std::fs::read_to_string(d.task_dir(unit).join("run/shim.log")).unwrap();
        let on_spare = format!("spare shim took attempt 2 of {unit}");
        match self {
            StartPath::Template => {
                assert!(!log.contains("spare"), "{log}");
                let daemon_log = d.daemon_log();
                let built = |l: &str| l.contains("sandbox template ") && l.contains(" built in ");
                assert!(daemon_log.lines().any(built), "{daemon_log}");
            }
            StartPath::InFull => {
                assert!(!log.contains("spare"), "{log}");
                assert!(!d.daemon_log().contains("sandbox template"));
            }
            StartPath::Spare => assert!(
                log.contains(&format!("{on_spare} (its sandbox built on the copy")),
                "{log}"
            ),
            StartPath::SpareInFull => assert!(
                log.contains(&format!("{on_spare} (its sandbox built in full)")),
                "{log}"
            ),
        }
    }
}

/// The attack and the leftover check, on a daemon whose starts take `path`.
fn the_hosts_ipc_is_out_of_reach(path: StartPath, tag: &str) {
    let _host = HOST_IPC.lock().unwrap_or_else(|p| p.into_inner());
    let dir = HostDir::new(tag);
    let probe = write_probe(&dir);
    let segment = HostSegment::new();
    let queue = HostQueue::new(&probe, tag);
    assert_eq!(queue.probe("count").trim(), "1");
    let d = path.daemon(tag);

    let script = format!(
        r#"
        echo "ipc-ns $(readlink /proc/self/ns/ipc)"
        echo "uts-ns $(readlink /proc/self/ns/uts)"
        echo "hostname $(cat /proc/sys/kernel/hostname)"
        echo sysvipc-begin; cat /proc/sysvipc/shm; echo sysvipc-end
        echo ipcs-begin; ipcs -m 2>&1; echo ipcs-end
        echo mqueue-begin; ls -a /dev/mqueue 2>&1; echo mqueue-end
        python3 {probe} attack {name} {key} 2>&1
        if nsenter --ipc=/proc/self/ns/ipc true 2>/tmp/e; then echo "setns ok"; else echo "setns $(cat /tmp/e)"; fi
        "#,
        name = queue.name,
        key = segment.key,
    );
    let (task, out) = path.run(&d, "see", &script);
    assert_eq!(task["state"], "succeeded", "{out}");
    path.check_taken(&d, "see");
    // Namespaces of its own; the hostname is the host's (docs/sandbox.md).
    assert_ne!(line(&out, "ipc-ns "), namespace("ipc"), "{out}");
    assert_ne!(line(&out, "uts-ns "), namespace("uts"), "{out}");
    let hostname = nix::unistd::gethostname().unwrap();
    assert_eq!(line(&out, "hostname "), hostname.to_str().unwrap(), "{out}");
    // The host's segment is not listed, by /proc or by ipcs (which prints keys in hex).
    let key_hex = format!("0x{:08x}", segment.key.parse::<i64>().unwrap() as u32);
    assert!(
        !section(&out, "sysvipc")
            .iter()
            .any(|l| l.split_whitespace().next() == Some(segment.key.as_str())),
        "{out}"
    );
    assert!(
        !section(&out, "ipcs").iter().any(|l| l.contains(&key_hex)),
        "{key_hex}: {out}"
    );
    let queue_file = queue.name.trim_start_matches('/');
    assert!(
        !section(&out, "mqueue")
            .iter()
            .any(|l| l.contains(queue_file)),
        "{out}"
    );
    // Nor can it be reached by name or key.
    assert_eq!(line(&out, "mq-open"), "No such file or directory", "{out}");
    assert_eq!(line(&out, "shm-get"), "No such file or directory", "{out}");
    // No way back to another namespace (seccomp denies setns, capabilities are gone).
    assert!(
        line(&out, "setns ").contains("Operation not permitted"),
        "{out}"
    );
    assert!(segment.still_there(), "the host's segment is gone");
    assert_eq!(
        queue.probe("count").trim(),
        "1",
        "the host's queue lost its message"
    );

    // A segment the task makes and leaves dies with its attempt: the host never holds it.
    let left = LeftBehind {
        size: (1_048_576 + std::process::id() % 100_000 * 8 + path as u32).to_string(),
    };
    let script = format!(
        "ipcmk -M {size} -p 0600 && echo sysvipc-begin && cat /proc/sysvipc/shm && echo sysvipc-end",
        size = left.size
    );
    let (task, out) = path.run(&d, "leave", &script);
    assert_eq!(task["state"], "succeeded", "{out}");
    path.check_taken(&d, "leave");
    assert!(
        section(&out, "sysvipc")
            .iter()
            .any(|l| l.split_whitespace().nth(3) == Some(left.size.as_str())),
        "the task made no segment: {out}"
    );
    assert_eq!(left.ids(), Vec::<String>::new(), "left on the host");
    if matches!(path, StartPath::Spare | StartPath::SpareInFull) {
        d.keel(&["stop", "keep"]);
    }
}

#[test]
fn on_a_template_the_hosts_ipc_is_out_of_reach() {
    if !require_root("on_a_template_the_hosts_ipc_is_out_of_reach") {
        return;
    }
    the_hosts_ipc_is_out_of_reach(StartPath::Template, "ipc-tpl");
}

#[test]
fn in_full_the_hosts_ipc_is_out_of_reach() {
    if !require_root("in_full_the_hosts_ipc_is_out_of_reach") {
        return;
    }
    the_hosts_ipc_is_out_of_reach(StartPath::InFull, "ipc-full");
}

#[test]
fn on_a_spare_the_hosts_ipc_is_out_of_reach() {
    if !require_root("on_a_spare_the_hosts_ipc_is_out_of_reach") {
        return;
    }
    the_hosts_ipc_is_out_of_reach(StartPath::Spare, "ipc-spare");
}

#[test]
fn on_a_spare_in_full_the_hosts_ipc_is_out_of_reach() {
    if !require_root("on_a_spare_in_full_the_hosts_ipc_is_out_of_reach") {
        return;
    }
    the_hosts_ipc_is_out_of_reach(StartPath::SpareInFull, "ipc-spare-full");
}
