//! Kernel quotas, as a worker applies and reads them (`crate::daemon::disk::quota` decides):
//! the task's project id on the directories its agent writes, the project's limits, and its
//! usage. A worker, not the loop: the walk of a checkout's directories and the quota file's
//! update take what the disk takes.

use super::protocol::QuotaAsk;
use crate::state::StateDir;
use crate::sys::quota::{project_use, set_directory_project, set_project_limits, ProjectUse};
use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The directories of `unit` its agent writes: `work/`, `checkpoint/` and the checkout. Not
/// the task's own directory, `run/` (the progress file, the attempt's lock), its logs and its
/// record: keel's writes there never count against the task's quota.
fn agent_dirs(dirs: &StateDir, unit: &str) -> [PathBuf; 3] {
    [
        dirs.work_dir(unit),
        dirs.checkpoint_dir(unit),
        crate::checkout::checkout_dir(dirs, unit),
    ]
}

/// Set `ask`'s limits, then its project id (inherited) on every directory under the agent's
/// directories, on the state filesystem only; the files already there keep their own id.
pub(super) fn apply(dirs: &StateDir, unit: &str, ask: &QuotaAsk) -> Result<(), String> {
    let root = File::open(&dirs.root).map_err(|e| {
        format!(
            "cannot open the state directory {}: {e}",
            dirs.root.display()
        )
    })?;
    set_project_limits(root.as_fd(), ask.project, ask.hard, ask.soft).map_err(|e| {
        format!(
            "cannot set the limits of project {:#x} on the state filesystem: {e}",
            ask.project
        )
    })?;
    let dev = root
        .metadata()
        .map_err(|e| format!("cannot stat the state directory: {e}"))?
        .dev();
    for dir in agent_dirs(dirs, unit) {
        mark_tree(&dir, dev, ask.project)?;
    }
    Ok(())
}

/// `dir` and each directory under it (not through symlinks, nor onto another filesystem) get
/// `project`. A directory that does not exist is skipped.
fn mark_tree(dir: &Path, dev: u64, project: u32) -> Result<(), String> {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let opened = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&dir);
        let handle = match opened {
            Ok(handle) => handle,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot open {}: {e}", dir.display())),
        };
        match handle.metadata() {
            Ok(meta) if meta.dev() != dev => continue,
            Ok(_) => {}
            Err(e) => return Err(format!("cannot stat {}: {e}", dir.display())),
        }
        set_directory_project(handle.as_fd(), project).map_err(|e| {
            format!(
                "cannot give {} the project id {project:#x}: {e}",
                dir.display()
            )
        })?;
        let entries =
            fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(entry.path());
            }
        }
    }
    Ok(())
}

/// The project's usage and limits on the state filesystem.
pub(super) fn usage(dirs: &StateDir, project: u32) -> Result<ProjectUse, String> {
    let root = File::open(&dirs.root).map_err(|e| {
        format!(
            "cannot open the state directory {}: {e}",
            dirs.root.display()
        )
    })?;
    project_use(root.as_fd(), project)
        .map_err(|e| format!("cannot read the quota of project {project:#x}: {e}"))
}
