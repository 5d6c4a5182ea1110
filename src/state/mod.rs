//! Durable state: the state-directory layout (`layout`), atomic files (`atomic`), the instance
//! and attempt locks (`locks`), the journal (`journal`), and the modes of what keel creates
//! (`private`: 0700 directories, 0600 files).
//!
//! Every state file is written whole to a temporary file in the same directory, fsynced,
//! renamed over the old one, and the directory fsynced (rename(2), fsync(2)): a crash at any
//! instant leaves the old or the new version, never a torn one.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

mod atomic;
mod journal;
mod layout;
mod locks;
mod modes;
mod private;

pub use atomic::{
    atomic_write, read_ron, remove_stale_temp_files, replace_volatile, write_ron,
    write_ron_volatile,
};
pub use journal::{rfc3339, rotated_journal_path, Event, Journal, JOURNAL_MAX_BYTES};
pub use layout::StateDir;
pub use locks::{attempt_lock_held, attempt_lock_path, take_attempt_lock, InstanceLock};
pub use modes::{create_new_private_dir, create_private_dir, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE};

/// Errors of this module carry the path they are about.
#[derive(Debug)]
pub enum StateError {
    Io { path: PathBuf, source: io::Error },
    Parse { path: PathBuf, message: String },
    Locked { path: PathBuf, holder: Option<i32> },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            StateError::Parse { path, message } => {
                write!(f, "{}: unreadable state file: {message}", path.display())
            }
            StateError::Locked { path, holder } => match holder {
                Some(pid) => write!(
                    f,
                    "another keel daemon (pid {pid}) already uses this state directory ({})",
                    path.parent().unwrap_or(path).display()
                ),
                None => write!(
                    f,
                    "another keel daemon already uses this state directory ({})",
                    path.parent().unwrap_or(path).display()
                ),
            },
        }
    }
}

impl std::error::Error for StateError {}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Milliseconds since the Unix epoch (wall clock: what survives a restart).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Test hook (DESIGN: crash points): when `KEEL_CRASH_AT` names this point, die right here,
/// as a power cut would. `KEEL_CRASH_AT=name:N` dies the N-th time the point is reached (so a
/// test can interrupt an overwrite, not only the first write). Only for tests.
pub fn crash_point(name: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static REACHED: AtomicU32 = AtomicU32::new(0);
    let Ok(wanted) = std::env::var("KEEL_CRASH_AT") else {
        return;
    };
    let (point, nth) = match wanted.split_once(':') {
        Some((point, n)) => (point, n.parse().unwrap_or(1)),
        None => (wanted.as_str(), 1),
    };
    if point != name || REACHED.fetch_add(1, Ordering::SeqCst) + 1 != nth {
        return;
    }
    log::warn!("KEEL_CRASH_AT={wanted}: dying on purpose");
    // SIGKILL, not abort(): no unwinding, no flushing, no core file — a power cut.
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    std::process::abort();
}

/// Test hook: `KEEL_TEST_REFUSE_WATCH=shim,progress,oom,events,accept` makes those
/// registrations fail with ENOSPC (`events`: the progress files' inotify descriptor back in the
/// loop after a window; `accept`: the control socket's accept, with EMFILE), as a kernel out of
/// watches or a daemon out of descriptors would; with `KEEL_TEST_REFUSE_WATCH_WHILE=PATH`, only
/// while PATH exists, so that a test can end the refusal and see the watch recovered. `kind`
/// names the registration; `Some(error)` when it is to be refused. Only for tests.
pub fn refused_watch(kind: &str) -> Option<std::io::Error> {
    let kinds = std::env::var("KEEL_TEST_REFUSE_WATCH").ok()?;
    if !kinds.split(',').any(|k| k.trim() == kind) {
        return None;
    }
    if let Some(path) = std::env::var_os("KEEL_TEST_REFUSE_WATCH_WHILE") {
        if !Path::new(&path).exists() {
            return None;
        }
    }
    let errno = if kind == "accept" {
        libc::EMFILE
    } else {
        libc::ENOSPC
    };
    Some(std::io::Error::from_raw_os_error(errno))
}

/// A fresh scratch directory for a test of this module.
#[cfg(test)]
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-state-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
