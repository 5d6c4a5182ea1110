//! Locks that die with their holder (flock(2)): the instance lock (one daemon per state
//! directory) and a task's attempt lock (at most one live shim per task).

use super::{io_err, StateError};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `flock(LOCK_EX|LOCK_NB)` on `state_dir/lock`: one daemon per state directory. The holder's
/// pid is written into the file so a refused second daemon can name it. The lock dies with
/// the process (no stale pid file to be fooled by pid reuse).
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    pub fn acquire(path: &Path) -> Result<Self, StateError> {
        // A daemon killed an instant after forking a shim leaves the lock held by that child
        // until it execs (close-on-exec): when the recorded holder is dead, wait a little.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            match Self::try_acquire(path) {
                Err(StateError::Locked { holder, .. })
                    if holder.is_some_and(|pid| !pid_alive(pid))
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    fn try_acquire(path: &Path) -> Result<Self, StateError> {
        use std::io::{Read, Seek};
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(io_err(path))?;
        let locked = crate::sys::try_lock_exclusive(&file).map_err(io_err(path))?;
        if !locked {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(StateError::Locked {
                path: path.to_path_buf(),
                holder: text.trim().parse().ok(),
            });
        }
        file.set_len(0).map_err(io_err(path))?;
        file.rewind().map_err(io_err(path))?;
        writeln!(file, "{}", std::process::id()).map_err(io_err(path))?;
        file.sync_all().map_err(io_err(path))?;
        Ok(InstanceLock { _file: file })
    }
}

fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// `run/attempt.lock`: held by the daemon from just before the spawn, then by the shim (as
/// its fd 3) for its whole life. Whoever can take it knows that no shim of this task is
/// alive — even one that has not yet written `shim.ron`.
pub fn attempt_lock_path(run_dir: &Path) -> PathBuf {
    run_dir.join("attempt.lock")
}

/// Is a shim of this task alive (holding the attempt lock)?
pub fn attempt_lock_held(run_dir: &Path) -> bool {
    match OpenOptions::new()
        .read(true)
        .open(attempt_lock_path(run_dir))
    {
        Ok(file) => !crate::sys::try_lock_exclusive(&file).unwrap_or(true),
        Err(_) => false,
    }
}

/// Take the attempt lock of the task whose run directory is `run_dir` (creating the file):
/// `Ok(None)` when a shim of an earlier attempt still holds it. The lock is held while the
/// returned file (or a descriptor of it inherited across fork and exec) stays open.
pub fn take_attempt_lock(run_dir: &Path) -> io::Result<Option<File>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(attempt_lock_path(run_dir))?;
    Ok(crate::sys::try_lock_exclusive(&file)?.then_some(file))
}

#[cfg(test)]
mod tests;
