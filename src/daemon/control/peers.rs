//! Who may talk to the control socket. Beside the uid (root or the daemon's own, from
//! `SO_PEERCRED`), a client must be in the daemon's own user and PID namespaces, and outside
//! every cgroup tree keel puts tasks in — any keel's, not only this daemon's: an agent that
//! finds another daemon's `keel.sock` (or this one's through a second path) must not drive it.
//!
//! A keel task cgroup is recognised by keel's tree layout (`src/cgroup/tree.rs`): a v2 path
//! `…/<tree>/tasks/<unit>[/…]` where `<tree>` also holds `supervisor/`. The rule needs no
//! marker written by the other daemon, so it also finds the trees of keel versions that wrote
//! none, whatever `--cgroup-name` they were given. A tree that cannot be looked at (the path
//! lies outside what this daemon's cgroup2 mounts show: `..` entries, see
//! cgroup_namespaces(7)) counts as keel's: such a client is refused.
//!
//! [`judge`] is the decision, a pure function of what was read; [`PeerFacts::read`] and
//! [`Identity::own`] read `/proc` (the namespaces by the device and inode of their nsfs
//! files, namespaces(7)).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

/// A namespace's identity: the device and inode of its `/proc/<pid>/ns/<kind>` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NsId {
    pub dev: u64,
    pub ino: u64,
}

impl std::fmt::Display for NsId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // As readlink shows it: `user:[4026531837]`.
        write!(f, "[{}]", self.ino)
    }
}

/// A process's user and PID namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Namespaces {
    pub user: NsId,
    pub pid: NsId,
}

/// The daemon's own identity, read once when the socket is bound.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub uid: u32,
    pub namespaces: Namespaces,
    /// The daemon's own v2 cgroup path (`/proc/self/cgroup`, `0::`), if it has one: a daemon
    /// that itself runs inside a keel task accepts clients of that same task.
    pub cgroup: Option<String>,
    /// `/proc` shows this daemon's PID namespace (`/proc/self` is our pid): otherwise the pid
    /// `SO_PEERCRED` gives names another process there, and no client can be checked.
    pub proc_is_own: bool,
    /// `KEEL_ACCEPT_OUTSIDE_CLIENTS=1`: a client the kernel shows with pid 0 (outside this
    /// daemon's PID namespace) is judged by its uid alone — the host of a container driving
    /// it through a shared state directory. Off by default: another keel's sandbox is
    /// outside too, and nothing of it can be read.
    pub accept_outside: bool,
    /// Rootless: the user namespace the daemon was started in, before it made its own
    /// ([`crate::sys::own_userns`]). Its user's shell is there, and is let in as the daemon's
    /// own namespace is; its tasks are in the daemon's (and refused by their PID namespace
    /// and cgroup).
    pub started_in: Option<NsId>,
    /// Rootless: the uid on the host the daemon's 0 stands for (for refusals' messages).
    pub host_uid: Option<u32>,
}

/// The variable that lets clients outside the daemon's PID namespace in.
pub(crate) const ACCEPT_OUTSIDE: &str = "KEEL_ACCEPT_OUTSIDE_CLIENTS";

/// What was read of a client.
#[derive(Clone, Debug)]
pub(crate) struct PeerFacts {
    /// The client's pid in the daemon's PID namespace; 0 when it has none there.
    pub pid: i32,
    pub uid: u32,
    /// Its namespaces, or why they could not be read.
    pub namespaces: Result<Namespaces, String>,
    /// How many PID namespaces, from the daemon's down, it has a pid in (the `NSpid` line of
    /// `/proc/<pid>/status`, readable whatever its user namespace): 1 when it is in the
    /// daemon's own.
    pub pid_levels: Option<usize>,
    /// The text of `/proc/<pid>/cgroup`, or why it could not be read.
    pub cgroups: Result<String, String>,
    /// Whether the client was still alive once all this was read (its pidfd, `SO_PEERPIDFD`):
    /// then its pid was never reused and what was read is its own. `None`: the kernel cannot
    /// tell (before Linux 6.5).
    pub alive_after_read: Option<bool>,
}

/// Whether a cgroup path (as `/proc/<pid>/cgroup` shows it to the daemon) is the root of a keel
/// tree: `Some(true)` it holds `supervisor/`, `Some(false)` it does not, `None` it cannot be
/// looked at.
pub(crate) type TreeProbe<'a> = &'a dyn Fn(&str) -> Option<bool>;

/// Why a client is refused: the client is answered `refused: <reason>`; the log names its
/// pid too, and says each reason once a while ([`RefusalLog`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused: {}", self.0)
    }
}

/// Accept the client, or why not.
pub(crate) fn judge(
    own: &Identity,
    peer: &PeerFacts,
    is_keel_tree: TreeProbe,
) -> Result<(), Refusal> {
    let refuse = |reason: String| Err(Refusal(reason));
    if let (Some(host_uid), true) = (own.host_uid, peer.uid != 0) {
        return refuse(format!(
            "a process of another user than uid {host_uid} (the host's root among them: the \
             kernel shows it as uid {}): a daemon that is not root answers its own user only \
             (as root: `su` to uid {host_uid} first)",
            peer.uid
        ));
    }
    if peer.uid != 0 && peer.uid != own.uid {
        return refuse(format!(
            "uid {} may not control this daemon (only root and uid {})",
            peer.uid, own.uid
        ));
    }
    if own.uid != 0 && peer.uid == 0 {
        // A daemon that is not root cannot read a root process's /proc/<pid>/ns (ptrace
        // access), and runs no sandbox whose agents could be refused: root outranks it.
        return Ok(());
    }
    if peer.pid == 0 {
        // SO_PEERCRED gives 0 for a process outside the daemon's PID namespace and its
        // descendants: an ancestor's (the host of the daemon's container, reaching it through
        // a shared state directory) or one beside it (another keel's sandbox that can see
        // this state directory). Nothing of it can be read to tell them apart.
        if own.accept_outside {
            return Ok(());
        }
        return refuse(format!(
            "the client is outside the daemon's PID namespace (another sandbox, or the host \
             of this daemon's container): run keel inside it (`docker exec`, `nsenter -t PID \
             -p`), or start the daemon with {ACCEPT_OUTSIDE}=1 to let its host in"
        ));
    }
    if !own.proc_is_own {
        return refuse(
            "this daemon's /proc is not of its PID namespace (mount one of its own, e.g. \
             `unshare --pid --fork --mount-proc`), so no client can be checked"
                .to_string(),
        );
    }
    if peer.alive_after_read == Some(false) {
        return refuse(
            "the client exited before it could be checked (what /proc showed may be another \
             process's)"
                .to_string(),
        );
    }
    match &peer.namespaces {
        Ok(theirs) => {
            let started_in = own.started_in.is_some_and(|ns| ns == theirs.user);
            if theirs.user != own.namespaces.user && !started_in {
                return refuse(format!(
                    "the client is in user namespace {}, not the daemon's {}: run keel in the \
                     daemon's namespaces",
                    theirs.user, own.namespaces.user
                ));
            }
            if theirs.pid != own.namespaces.pid {
                return refuse(format!(
                    "the client is in PID namespace {}, not the daemon's {} (a keel sandbox?): \
                     run keel in the daemon's namespaces",
                    theirs.pid, own.namespaces.pid
                ));
            }
        }
        // Rootless: no process may read the namespaces of one in another user namespace
        // (the kernel's ptrace check wants the same namespace or CAP_SYS_PTRACE over the
        // other), the user's own shell in the one the daemon was started in included. Its
        // uid is the daemon's (above), its cgroup is judged below, and `NSpid` says it is in
        // the daemon's PID namespace, where no keel sandbox is.
        Err(_) if own.started_in.is_some() && peer.pid_levels == Some(1) => {}
        Err(why) if own.started_in.is_some() => {
            return refuse(format!(
                "the client's namespaces cannot be read ({why}) and it is not in the daemon's \
                 PID namespace (a sandbox?): run keel in the daemon's namespaces"
            ))
        }
        Err(why) => return refuse(format!("cannot read the client's namespaces: {why}")),
    }
    let text = match &peer.cgroups {
        Ok(text) => text,
        Err(why) => return refuse(format!("cannot read the client's cgroup: {why}")),
    };
    let Some(path) = v2_path(text) else {
        return Ok(());
    };
    for (tree, unit) in task_cgroups(path) {
        let slice = format!("{tree}/tasks/{unit}");
        let shared_with_daemon = own.cgroup.as_deref().is_some_and(|own| within(own, &slice));
        if shared_with_daemon {
            continue;
        }
        if is_keel_tree(&tree) != Some(false) {
            return refuse(format!(
                "the client is inside a keel sandbox (cgroup {path})"
            ));
        }
    }
    Ok(())
}

/// The v2 entry (`0::<path>`) of a `/proc/<pid>/cgroup` text (proc(5)).
pub(crate) fn v2_path(text: &str) -> Option<&str> {
    text.lines().find_map(|line| line.strip_prefix("0::"))
}

/// Every `(tree, unit)` such that `path` lies in `<tree>/tasks/<unit>`: the shape of a keel
/// task's cgroup (`src/cgroup/tree.rs`), outermost first. `<tree>` is a cgroup path of at
/// least one component.
pub(crate) fn task_cgroups(path: &str) -> Vec<(String, String)> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    (1..parts.len().saturating_sub(1))
        .filter(|&i| parts[i] == crate::cgroup::V2_TASKS)
        .map(|i| {
            (
                format!("/{}", parts[..i].join("/")),
                parts[i + 1].to_string(),
            )
        })
        .collect()
}

/// `path` is `prefix` or below it, component-wise.
fn within(path: &str, prefix: &str) -> bool {
    Path::new(path).starts_with(prefix)
}

impl Identity {
    /// The daemon's own identity.
    pub fn own() -> std::io::Result<Identity> {
        let proc_is_own = std::fs::read_link("/proc/self")
            .is_ok_and(|pid| pid.as_os_str() == std::process::id().to_string().as_str());
        Ok(Identity {
            uid: nix::unistd::geteuid().as_raw(),
            namespaces: namespaces_of("self")?,
            cgroup: std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|text| v2_path(&text).map(str::to_string)),
            proc_is_own,
            accept_outside: std::env::var_os(ACCEPT_OUTSIDE).is_some_and(|v| v == "1"),
            started_in: crate::sys::own_userns::started_in().map(|(dev, ino)| NsId { dev, ino }),
            host_uid: crate::sys::own_userns::host_ids().map(|(uid, _)| uid),
        })
    }
}

fn namespaces_of(pid: &str) -> std::io::Result<Namespaces> {
    let id = |kind: &str| {
        std::fs::metadata(format!("/proc/{pid}/ns/{kind}")).map(|m| NsId {
            dev: m.dev(),
            ino: m.ino(),
        })
    };
    Ok(Namespaces {
        user: id("user")?,
        pid: id("pid")?,
    })
}

impl PeerFacts {
    /// Read what `/proc` says of the client `pid` (0: none visible) with uid `uid`, then
    /// whether it is still alive, through `pidfd` (`SO_PEERPIDFD`'s answer).
    pub fn read(pid: i32, uid: u32, pidfd: std::io::Result<OwnedFd>) -> PeerFacts {
        let (namespaces, cgroups, pid_levels) = if pid > 0 {
            (
                namespaces_of(&pid.to_string()).map_err(|e| e.to_string()),
                std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map_err(|e| e.to_string()),
                std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .ok()
                    .and_then(|status| pid_levels(&status)),
            )
        } else {
            (Err("no pid".into()), Err("no pid".into()), None)
        };
        let alive_after_read = match pidfd {
            // Signal 0 checks existence (a zombie still holds its pid); EPERM is alive too.
            Ok(pidfd) => Some(
                crate::sys::pidfd_send_signal(&pidfd, 0)
                    .map_or_else(|e| e.raw_os_error() != Some(libc::ESRCH), |()| true),
            ),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Some(false),
            Err(_) => None,
        };
        PeerFacts {
            pid,
            uid,
            namespaces,
            cgroups,
            pid_levels,
            alive_after_read,
        }
    }
}

/// The number of pids on the `NSpid:` line of a `/proc/<pid>/status` text (proc(5)).
pub(crate) fn pid_levels(status: &str) -> Option<usize> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    Some(line.split_whitespace().count()).filter(|n| *n > 0)
}

/// The cgroup2 mounts this daemon sees, to look at a tree a client's cgroup names.
#[derive(Clone, Debug, Default)]
pub(crate) struct CgroupMounts(Vec<(String, PathBuf)>);

impl CgroupMounts {
    /// From the text of `/proc/self/mountinfo` (proc(5)): `(root, mount point)` of each
    /// cgroup2 mount.
    pub fn parse(mountinfo: &str) -> CgroupMounts {
        CgroupMounts(crate::cgroup::cgroup2_mounts(mountinfo))
    }

    pub fn read() -> CgroupMounts {
        CgroupMounts::parse(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
    }

    /// The directory of cgroup `path` in one of the mounts, if one shows it.
    pub fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let path = Path::new(path);
        if !path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        {
            return None;
        }
        self.0.iter().find_map(|(root, mount_point)| {
            let below = path.strip_prefix(root).ok()?;
            Some(mount_point.join(below))
        })
    }

    /// [`TreeProbe`] on the real filesystem: the tree holds `supervisor/`.
    pub fn is_keel_tree(&self, tree: &str) -> Option<bool> {
        let dir = self.dir_of(tree)?;
        dir.is_dir().then(|| dir.join("supervisor").is_dir())
    }
}

/// How long the same refusal stays out of the log after it was logged: a client connecting in
/// a loop must not flood it.
pub(crate) const REFUSAL_QUIET: Duration = Duration::from_secs(60);

/// At most this many distinct refusals are logged per [`REFUSAL_QUIET`]: a client that
/// varies its reason (a new user namespace per connection) must not flood the log either.
pub(crate) const MAX_REFUSALS_LOGGED: usize = 20;

/// Each refusal is logged once, then not again for [`REFUSAL_QUIET`]; at most
/// [`MAX_REFUSALS_LOGGED`] in that time.
#[derive(Default)]
pub(crate) struct RefusalLog {
    last_logged: HashMap<String, Instant>,
}

impl RefusalLog {
    /// Whether to log `why` now (recorded if so).
    pub fn should_log(&mut self, why: &str, now: Instant) -> bool {
        self.last_logged
            .retain(|_, at| now.saturating_duration_since(*at) < REFUSAL_QUIET);
        if self.last_logged.contains_key(why) || self.last_logged.len() >= MAX_REFUSALS_LOGGED {
            return false;
        }
        self.last_logged.insert(why.to_string(), now);
        true
    }
}

#[cfg(test)]
mod tests;
