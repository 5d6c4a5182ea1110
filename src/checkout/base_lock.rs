//! The lock of a base tree, between the jobs that use one and the removal that deletes it.
//! Bases are shared by the tasks of one repository, commit and owner, and the jobs of different
//! tasks run at once in separate workers: task A's `keel rm` must not delete the base that task
//! B's preparation has just chosen and is about to make its checkout on. A base's use is known
//! from the checkout records that name it, but B's record appears only when its checkout is
//! renamed into place; until then the lock says so:
//!
//! - a preparation holds it *shared* from before it looks at the base until its checkout (and
//!   record) is in place: any number of them at once, and a build under it too;
//! - a removal takes it *exclusive*, without waiting, before it reads the records: a base it
//!   cannot lock at once is being prepared on, and is kept (a later `keel prune` removes it
//!   once nothing uses it).
//!
//! The lock is `flock(2)` on `STATE/base-locks/<key>` (beside `bases/`, whose hidden
//! entries are builds; it dies with its holder: a killed worker
//! leaves nothing held). A removal unlinks the file while it holds it, so that the files do not
//! pile up; a preparation that was waiting on the unlinked file finds the path no longer names
//! what it locked, and locks anew (then builds the base again).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::error::{io_err, CheckoutError};
use crate::state::StateDir;

/// A held lock of base `key`.
pub(crate) struct BaseLock {
    /// Unlocked when dropped (after the unlink below).
    _lock: Flock<File>,
    path: PathBuf,
    exclusive: bool,
}

fn locks_dir(dirs: &StateDir) -> PathBuf {
    dirs.root.join("base-locks")
}

/// Lock base `key` shared, waiting while a removal holds it.
pub(crate) fn lock_shared(dirs: &StateDir, key: &str) -> Result<BaseLock, CheckoutError> {
    loop {
        match lock(dirs, key, FlockArg::LockShared)? {
            Attempt::Held(lock) => return Ok(lock),
            Attempt::Busy | Attempt::Unlinked => {}
        }
    }
}

/// Lock base `key` exclusive if nobody holds it; `None` when a preparation does.
pub(crate) fn try_lock_exclusive(
    dirs: &StateDir,
    key: &str,
) -> Result<Option<BaseLock>, CheckoutError> {
    loop {
        match lock(dirs, key, FlockArg::LockExclusiveNonblock)? {
            Attempt::Held(lock) => return Ok(Some(lock)),
            Attempt::Busy => return Ok(None),
            Attempt::Unlinked => {}
        }
    }
}

enum Attempt {
    Held(BaseLock),
    /// Held by another, and not waited for.
    Busy,
    /// The file locked was unlinked meanwhile by a removal: try again.
    Unlinked,
}

fn lock(dirs: &StateDir, key: &str, how: FlockArg) -> Result<Attempt, CheckoutError> {
    let dir = locks_dir(dirs);
    crate::state::create_private_dir(&dir)
        .map_err(io_err("creating the base locks' directory", &dir))?;
    let path = dir.join(key);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(io_err("opening the base's lock", &path))?;
    let lock = match Flock::lock(file, how) {
        Ok(lock) => lock,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(Attempt::Busy),
        Err((_, errno)) => {
            return Err(CheckoutError::io(
                "locking the base",
                &path,
                std::io::Error::from_raw_os_error(errno as i32),
            ))
        }
    };
    if !names_same_file(&path, &lock) {
        return Ok(Attempt::Unlinked);
    }
    let exclusive = matches!(
        how,
        FlockArg::LockExclusive | FlockArg::LockExclusiveNonblock
    );
    Ok(Attempt::Held(BaseLock {
        _lock: lock,
        path,
        exclusive,
    }))
}

fn names_same_file(path: &Path, file: &File) -> bool {
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(at_path), Ok(held)) => at_path.dev() == held.dev() && at_path.ino() == held.ino(),
        _ => false,
    }
}

impl Drop for BaseLock {
    fn drop(&mut self) {
        // Unlinked while held: a waiter on this file sees it gone and locks the new one.
        if self.exclusive {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Remove the lock files of bases that are gone (a preparation that failed leaves its lock
/// file), each only when nobody holds it. For `keel prune`.
pub(crate) fn sweep(dirs: &StateDir) {
    let Ok(entries) = std::fs::read_dir(locks_dir(dirs)) else {
        return;
    };
    for entry in entries.flatten() {
        let key = entry.file_name().to_string_lossy().into_owned();
        if !dirs.bases_dir().join(&key).exists() {
            // Dropped at once: unlinked while held.
            let _ = try_lock_exclusive(dirs, &key);
        }
    }
}

/// `KEEL_TEST_PREPARE_PAUSE=<unit>:<path>` (docs/testing.md): the preparation of `unit`, its
/// base chosen (and locked), pauses while `path` exists, having created `<path>.paused`: the
/// window in which another task's `keel rm` used to delete the base under it.
pub(crate) fn pause_if_asked(unit: &str) {
    let Some(asked) = std::env::var_os("KEEL_TEST_PREPARE_PAUSE") else {
        return;
    };
    let asked = asked.to_string_lossy().into_owned();
    let Some((who, path)) = asked.split_once(':') else {
        return;
    };
    let path = PathBuf::from(path);
    if who != unit || !path.exists() {
        return;
    }
    log::warn!("KEEL_TEST_PREPARE_PAUSE: {unit}'s preparation paused with its base chosen");
    let mut paused = path.clone().into_os_string();
    paused.push(".paused");
    let _ = std::fs::write(&paused, "");
    while path.exists() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests;
