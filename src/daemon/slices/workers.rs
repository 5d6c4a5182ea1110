//! `<keel tree>/workers`: the cgroup every worker (`keel worker`, the jobs subsystem) runs in,
//! with `jobs.memory` as the memory limit of all of them together. On v2 its `memory.max`;
//! on hybrid hosts the v1 memory controller's `<tree>/workers` (`memory.limit_in_bytes`),
//! which each worker joins first thing (as a shim joins its v1 cgroups), while the v2
//! directory (no controllers there) is where it is cloned into.

use crate::cgroup::{Mode, Tree, V1Controller};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The directory's name under keel's tree in each hierarchy.
pub(crate) const WORKERS: &str = "workers";

/// keel's workers cgroup, ready for clones.
#[derive(Debug)]
pub(crate) struct WorkersCgroup {
    /// The v2 directory (`CLONE_INTO_CGROUP`).
    pub v2_dir: OwnedFd,
    /// Hybrid: the v1 memory controller's `cgroup.procs`, joined by the worker.
    pub v1_procs: Vec<PathBuf>,
    /// The file that counts OOM kills: v2 `memory.events`, v1 `memory.oom_control`.
    oom_counter: Option<PathBuf>,
    /// The file of the memory limit: v2 `memory.max`, v1 `memory.limit_in_bytes`.
    limit_file: PathBuf,
}

impl WorkersCgroup {
    /// A new memory limit for all workers together.
    pub fn set_memory(&self, memory: u64) -> Result<(), String> {
        // v1: memory+swap may not go below memory: raised first, lowered after.
        set_swap_off(&self.limit_file, u64::MAX);
        write(&self.limit_file, &memory.to_string())?;
        set_swap_off(&self.limit_file, memory);
        Ok(())
    }

    /// OOM kills counted in the workers cgroup so far (`None`: not known here).
    pub fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.oom_counter.as_ref()?).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }
}

/// Every directory of the workers cgroup, v2 first.
fn dirs(tree: &Tree) -> Vec<PathBuf> {
    let mut dirs = vec![tree.v2_root().join(WORKERS)];
    if let Some(base) = tree.layout().v1_base(V1Controller::Memory) {
        dirs.push(base.join(tree.name()).join(WORKERS));
    }
    dirs
}

/// Create `<tree>/workers` (an existing one, an earlier daemon's, is reused) with `memory`
/// as its limit. `Err`: why workers run without one (then RLIMIT_AS bounds each).
pub(crate) fn set_up_workers(tree: &Tree, memory: u64) -> Result<WorkersCgroup, String> {
    for dir in dirs(tree) {
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
    }
    let v2 = tree.v2_root().join(WORKERS);
    let (limit_file, oom_counter, v1_procs) = match tree.mode() {
        Mode::V2 => (v2.join("memory.max"), v2.join("memory.events"), Vec::new()),
        Mode::Hybrid => {
            let Some(base) = tree.layout().v1_base(V1Controller::Memory) else {
                return Err("no v1 memory hierarchy to bound the workers in".to_string());
            };
            let dir = base.join(tree.name()).join(WORKERS);
            (
                dir.join("memory.limit_in_bytes"),
                dir.join("memory.oom_control"),
                vec![dir.join("cgroup.procs")],
            )
        }
    };
    write(&limit_file, &memory.to_string())?;
    set_swap_off(&limit_file, memory);
    let v2_dir = open_dir(&v2)?;
    Ok(WorkersCgroup {
        v2_dir,
        v1_procs,
        oom_counter: Some(oom_counter),
        limit_file,
    })
}

/// No swap for the workers, as for tasks: past its limit a worker is killed, not slowed down
/// (best effort: the files exist only where swap is accounted). `u64::MAX`: no limit (v1,
/// before the memory limit is changed).
fn set_swap_off(limit_file: &Path, memory: u64) {
    let Some(dir) = limit_file.parent() else {
        return;
    };
    let (file, value) = if limit_file.ends_with("memory.max") {
        (dir.join("memory.swap.max"), "0".to_string())
    } else if memory == u64::MAX {
        (dir.join("memory.memsw.limit_in_bytes"), "-1".to_string())
    } else {
        (dir.join("memory.memsw.limit_in_bytes"), memory.to_string())
    };
    if file.exists() {
        let _ = std::fs::write(file, value);
    }
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value)
        .map_err(|e| format!("cannot write {value} to {}: {e}", path.display()))
}

fn open_dir(path: &Path) -> Result<OwnedFd, String> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)
        .map(OwnedFd::from)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// At the daemon's end: kill what is left in the workers cgroup and remove it (keel's tree
/// can then go). A worker is killed with the daemon anyway (its death signal).
pub(crate) fn remove_workers(tree: &Tree) {
    for dir in dirs(tree) {
        if !dir.exists() {
            continue;
        }
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // Killed workers take a moment to leave: a few tries, then it is left for the next
        // daemon (which reuses it).
        for _ in 0..100 {
            match std::fs::remove_dir(&dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
    }
}
