//! What the daemon and a shim tell each other through files in `tasks/<unit>/run/`.
//!
//! The daemon's clone of the shim writes `attempt.ron` (an [`AttemptSpec`]) once it has started
//! the agent, before its exec of `keel shim` (the daemon removes the previous attempt's before
//! the clone: a held attempt lock never comes with an older attempt's spec); the shim writes
//! `shim.ron` (a [`ShimRecord`]) as its first act, and `exit.ron` (an [`ExitRecord`])
//! as its last. Each carries the attempt's generation, so a record left by an older attempt is
//! never mistaken for the current one (fencing).

use crate::sys::wait::AgentStatus;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Everything the shim needs to run one attempt of a task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AttemptSpec {
    pub unit: String,
    pub generation: u64,
    pub attempt: u32,
    /// The agent's argv (`command`, or `resume_command` from attempt 2 on).
    pub argv: Vec<String>,
    /// Variables set on top of the shim's own environment: the unit's `env` and `KEEL_*`.
    pub env: Vec<(String, String)>,
    /// The agent's working directory.
    pub cwd: PathBuf,
    /// `tasks/<unit>/run`: logs, progress file, exit record.
    pub run_dir: PathBuf,
    /// Rotate `output.log` when it reaches this size…
    pub log_max_bytes: u64,
    /// …keeping this many rotated files (`output.log.1` … `output.log.N`).
    pub log_keep: u32,
    /// The sandbox the agent runs in. Always set by the daemon; `None` only for tests that
    /// run a shim by hand.
    #[serde(default)]
    pub sandbox: Option<SandboxSpec>,
    /// The task's v1 `cgroup.procs` files (hybrid hosts), joined by the shim before it starts
    /// the agent; on v2 the shim was spawned into its cgroup and this is empty.
    #[serde(default)]
    pub cgroup_v1_procs: Vec<PathBuf>,
}

/// What the agent's sandbox is made of (DESIGN, "What the agent sees"). Host paths unless
/// said otherwise.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxSpec {
    /// Where the task's work directory appears inside (`workdir`, default `/work`).
    pub workdir: PathBuf,
    /// `tasks/<unit>/work`: bound read-write at `workdir` when the unit has no `repo` (with
    /// one, [`SandboxSpec::checkout`] says what shows there).
    pub work_source: PathBuf,
    /// The task's git checkout (`repo:` in the unit), made by `crate::checkout::prepare`.
    /// `serde(default)`: a spec written by a keel that predates checkouts still reads.
    #[serde(default)]
    pub checkout: Option<CheckoutMounts>,
    /// `tasks/<unit>/run/root`: an empty directory the new root is built on.
    pub new_root: PathBuf,
    /// `tasks/<unit>/run/progress`: bound at [`SANDBOX_PROGRESS`].
    pub progress_file: PathBuf,
    /// `tasks/<unit>/checkpoint`: bound at [`SANDBOX_CHECKPOINT_DIR`].
    pub checkpoint_source: PathBuf,
    /// Made invisible: keel's state directory, then the unit's `sandbox.hidden`.
    pub hidden: Vec<PathBuf>,
    /// Covered by an empty directory, but for the task's own paths inside (its checkout's
    /// objects, its writable paths), bound on it: a rootless daemon's user's home.
    /// `serde(default)`: a spec of a keel before it still reads.
    #[serde(default)]
    pub veiled: Vec<PathBuf>,
    /// The unit's `sandbox.writable`: bound read-write at the same path.
    pub writable: Vec<PathBuf>,
    /// The unit's `sandbox.capabilities` (names); none by default.
    pub capabilities: Vec<String>,
    /// The unit's `sandbox.user` (`uid:gid` or a name); `None`: root, with no capabilities.
    pub user: Option<String>,
    /// `sandbox.network`: the host's network, only `lo`, or an allow-list.
    #[serde(default)]
    pub network: SandboxNetwork,
    /// Size caps of the private tmpfs `/tmp` and `$HOME`.
    pub tmp_size: u64,
    pub home_size: u64,
    /// keel's own directories, which no writable path may be, cover or lie inside
    /// ([`SandboxSpec::check_writable`]). `serde(default)`: a spec of an older keel reads.
    #[serde(default)]
    pub keel_dirs: KeelDirs,
    /// The host ids the task's user namespace maps its own `0..count` to (the same block for
    /// uids and gids, owned by this task while it runs: [`IdBlock`]). `None`: no user
    /// namespace — the agent's ids are the host's (`user_namespaces: false` in `keel.ron`).
    #[serde(default)]
    pub id_block: Option<IdBlock>,
    /// What the start's preparation job found of the paths the unit names, in a worker: the
    /// daemon's resolution of the start then does no I/O on them (a path on a filesystem that
    /// does not answer hangs a worker, never the loop). `None`: no job ran (the unit names no
    /// path and has no `repo`).
    #[serde(default)]
    pub findings: Option<PathFindings>,
    /// The unit's secrets for this attempt: the placeholder the agent holds for each (in its
    /// env under the secret's name), where the value is, and its hosts (the relay's to swap
    /// in). Never a value. With any, the sandbox trusts keel's CA (`STATE/network/
    /// ca-bundle.pem` over the host's bundle). `serde(default)`: a spec of an older keel reads.
    #[serde(default)]
    pub secrets: Vec<crate::secrets::TaskSecret>,
}

/// What a worker found of a start's user-named paths (`crate::worker`'s preparation job).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PathFindings {
    /// [`check_writable_paths`]'s verdict: `Some(why)` refuses the start.
    pub writable: Option<String>,
    /// Each hidden and writable path's line of the sandbox templates' host state
    /// (`crate::sandbox::mounts::template::path_line`).
    pub lines: std::collections::BTreeMap<PathBuf, String>,
    /// Each secret file that cannot be read as it is (`secret NAME: why`, with the fix): the
    /// start is deferred until it can. `serde(default)`: a worker of an older keel.
    #[serde(default)]
    pub secrets: Vec<String>,
}

/// A sandbox's network (`sandbox.network`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub enum SandboxNetwork {
    /// The host's network namespace (an explicit opt-in).
    #[default]
    Host,
    /// A network namespace of its own with only `lo`.
    None,
    /// A network namespace of its own whose connections out go through the task's relay
    /// ([`crate::network::relay_protocol`]): the unit's entries, as written (validated), and
    /// the named lists of `keel.ron` they may refer to.
    Allow {
        entries: Vec<String>,
        lists: std::collections::BTreeMap<String, Vec<String>>,
    },
}

impl SandboxNetwork {
    /// Whether the sandbox has a network namespace of its own (`None`, `Allow`).
    pub fn own_namespace(&self) -> bool {
        !matches!(self, SandboxNetwork::Host)
    }
}

/// A block of host ids a task's user namespace maps: inside `0..count` is the host's
/// `first..first + count`, for uids and gids alike.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct IdBlock {
    pub first: u32,
    pub count: u32,
}

impl IdBlock {
    /// The host id of the namespace's `inside` (`None` outside the block).
    pub fn host_id(self, inside: u32) -> Option<u32> {
        (inside < self.count).then(|| self.first + inside)
    }
}

/// The directories of the daemon that starts the task (host paths, as it was given them).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeelDirs {
    pub state: Option<PathBuf>,
    pub units: Option<PathBuf>,
}

impl SandboxSpec {
    /// Refuse a `sandbox.writable` path that would give the agent what the sandbox keeps from
    /// it, as far as the start can tell: keel's state or units directory (as given and as
    /// resolved), a git directory — the main repository's, one the checkout borrows objects
    /// from, or any other: a path named `.git` or inside one, a repository's work tree (it
    /// holds a `.git`), a bare repository or a path inside one (`HEAD` and `objects/`).
    /// The static rules (system directories, `/`) are the validator's
    /// ([`crate::unit::sandbox_rules`]). Its I/O: keel's two directories resolved, and per
    /// writable path an `lstat` of `.git` in it and of `HEAD` in it and each of its ancestors
    /// (plus `objects` where a `HEAD` is) — the user's own paths, which the templates' key
    /// `lstat`s already; no directory is walked, so a repository deeper down is not seen.
    pub fn check_writable(&self) -> Result<(), String> {
        // A worker checked them (the start's preparation job): its verdict, no I/O here.
        if let Some(findings) = &self.findings {
            return findings.writable.clone().map_or(Ok(()), Err);
        }
        let objects = self.checkout.as_ref().map_or(&[][..], |c| &c.objects[..]);
        check_writable_paths(&self.writable, &self.keel_dirs, objects)
    }
}

/// [`SandboxSpec::check_writable`]'s checks, with their I/O: `objects`, the object
/// directories the task's checkout borrows from (the main repository's first). Run by the
/// start's preparation job, in a worker (`crate::worker`), whose verdict the spec then
/// carries ([`PathFindings`]).
pub fn check_writable_paths(
    writable: &[PathBuf],
    keel_dirs: &KeelDirs,
    objects: &[PathBuf],
) -> Result<(), String> {
    use crate::unit::sandbox_rules::{relation, GIT_DIR_HARM};
    if writable.is_empty() {
        return Ok(());
    }
    let mut found: Vec<(&str, PathBuf)> = Vec::new();
    let named = [
        ("state directory", &keel_dirs.state),
        ("units directory", &keel_dirs.units),
    ];
    for (what, dir) in named {
        let Some(dir) = dir else { continue };
        found.push((what, dir.clone()));
        if let Ok(real) = std::fs::canonicalize(dir) {
            found.push((what, real));
        }
    }
    let keel_dirs: Vec<(&str, &Path)> = found.iter().map(|(w, d)| (*w, d.as_path())).collect();
    // The git directories the checkout reads: the main repository's (the parent of its
    // object directory), and the object directories it borrows from.
    let mut git_dirs: Vec<&Path> = Vec::new();
    git_dirs.extend(objects.first().and_then(|o| o.parent()));
    git_dirs.extend(objects.iter().map(PathBuf::as_path));
    for path in writable {
        let refuse = |why: String| Err(format!("sandbox.writable: {why}"));
        let shown = path.display().to_string();
        if let Some(why) = crate::unit::keel_dir_problem(path, &keel_dirs) {
            return refuse(why);
        }
        for dir in &git_dirs {
            if let Some(relation) = relation(path, dir) {
                return refuse(format!(
                    "{shown:?} {} {}, which the task's checkout reads from its main repository: {}",
                    relation.verb(),
                    dir.display(),
                    GIT_DIR_HARM
                ));
            }
        }
        if path.components().any(|c| c.as_os_str() == ".git") {
            return refuse(format!(
                "{shown:?} lies in a git directory (.git): {GIT_DIR_HARM}"
            ));
        }
        if std::fs::symlink_metadata(path.join(".git")).is_ok() {
            return refuse(format!(
                "{shown:?} covers the git repository {shown} (its .git): {}",
                GIT_DIR_HARM
            ));
        }
        let git_dir = path
            .ancestors()
            .filter(|dir| dir.parent().is_some())
            .find(|dir| is_git_dir(dir));
        if let Some(dir) = git_dir {
            let verb = if dir == path.as_path() {
                "is"
            } else {
                "lies inside"
            };
            return refuse(format!(
                "{shown:?} {verb} the git directory {}: {}",
                dir.display(),
                GIT_DIR_HARM
            ));
        }
    }
    Ok(())
}

/// A git directory as git itself recognises one: a `HEAD` file and an `objects` directory.
fn is_git_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join("HEAD")).is_ok_and(|m| m.is_file())
        && std::fs::symlink_metadata(dir.join("objects")).is_ok_and(|m| m.is_dir())
}

/// What makes up a task's checkout in its sandbox (host paths): its files at `workdir`, its
/// own git directory at `<workdir>/.git`, and the main repository's object store, which the
/// checkout borrows objects from (git alternates), read-only at its own path.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct CheckoutMounts {
    pub files: CheckoutFiles,
    /// The task's git directory (refs, index, its own new objects): bound read-write at
    /// `<workdir>/.git`, so that an ordinary `git` finds an ordinary repository there and no
    /// path of the sandbox is written into the git directory itself.
    pub git_dir: PathBuf,
    /// The main repository's object directory, and those it borrows from in turn: bound
    /// read-only at their own paths, explicitly, since the sandbox may show something else
    /// there (its own tmpfs at `/tmp` or `$HOME`).
    pub objects: Vec<PathBuf>,
    /// The repositories those objects belong to, as the host has them (real paths): the main
    /// repository's work tree and git directory, and the git directories (and work trees) of
    /// the repositories it borrows objects from. Covered in the sandbox by an empty read-only
    /// tmpfs wherever they show, so that nothing of them is seen but [`Self::objects`]: not
    /// their `config` (credentials in remote URLs), hooks, refs or files.
    /// `serde(default)`: a spec of an older keel reads (and hides nothing more).
    #[serde(default)]
    pub repositories: Vec<PathBuf>,
}

/// Where a checkout's files come from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub enum CheckoutFiles {
    /// An overlay: the shared read-only base tree of the base commit below, the task's own
    /// upper layer (its changes) and overlayfs's work directory (same filesystem as `upper`).
    Overlay {
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
    },
    /// A full checkout of the task's own (where overlayfs is unavailable), bound read-write.
    Bind(PathBuf),
}

/// Where the agent finds its progress file and checkpoint directory inside the sandbox.
pub const SANDBOX_PROGRESS: &str = "/run/keel/progress";
pub const SANDBOX_CHECKPOINT_DIR: &str = "/run/keel/checkpoint";

/// Written by the shim as soon as it starts: who it is, so that a restarted daemon can find
/// and re-adopt it even if the daemon died between spawning it and recording its pid.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShimRecord {
    pub generation: u64,
    pub pid: i32,
    /// `/proc/<pid>/stat` field 22: with pid and boot id, names one process.
    pub start_time: u64,
    pub boot_id: String,
}

/// Written atomically by the shim when the agent has ended, before the shim exits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExitRecord {
    pub generation: u64,
    pub attempt: u32,
    pub status: AgentStatus,
    pub agent_pid: i32,
    pub started_ms: u64,
    pub ended_ms: u64,
    /// Set when the agent could not be started at all (`execvp: No such file or directory`).
    #[serde(default)]
    pub spawn_error: Option<String>,
    /// The start was refused by the host, not by the unit or its agent (a sandbox step the
    /// kernel refuses for want of a privilege or a resource, the shim's own set-up): the
    /// daemon does not count it against the restart limit; the task waits, `blocked`, and is
    /// retried. `false` in the records of an older keel.
    #[serde(default)]
    pub host_refused: bool,
}

/// File names inside `run/`.
pub fn attempt_path(run_dir: &Path) -> PathBuf {
    run_dir.join("attempt.ron")
}
pub fn shim_record_path(run_dir: &Path) -> PathBuf {
    run_dir.join("shim.ron")
}
pub fn exit_record_path(run_dir: &Path) -> PathBuf {
    run_dir.join("exit.ron")
}
pub fn output_log_path(run_dir: &Path) -> PathBuf {
    run_dir.join("output.log")
}
pub fn shim_log_path(run_dir: &Path) -> PathBuf {
    run_dir.join("shim.log")
}
pub fn progress_path(run_dir: &Path) -> PathBuf {
    run_dir.join("progress")
}
/// The empty directory the sandbox's root is built on.
pub fn sandbox_root_path(run_dir: &Path) -> PathBuf {
    run_dir.join("root")
}

/// Signals the shim passes on to the agent's process group (what `keel kill -s` may send;
/// SIGKILL is sent as [`kill_request_signal`]).
pub const FORWARDED_SIGNALS: [i32; 8] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
];

/// The signal to send to the shim so that the agent receives `signal`.
pub fn signal_for_shim(signal: i32) -> Option<i32> {
    if signal == libc::SIGKILL {
        Some(kill_request_signal())
    } else if FORWARDED_SIGNALS.contains(&signal) {
        Some(signal)
    } else {
        None
    }
}

/// Sent by the daemon to a shim to mean "SIGKILL the agent and everything in its process
/// group" (a shim cannot forward a SIGKILL it receives itself). SIGRTMIN+3: no agent uses it.
pub fn kill_request_signal() -> i32 {
    libc::SIGRTMIN() + 3
}

#[cfg(test)]
mod tests;
