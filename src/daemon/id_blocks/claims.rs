//! Host-wide claims on blocks of host ids: no two live tasks on the host — whatever keel
//! daemon runs them — hold ids of the same block (they could signal and ptrace each other,
//! and would share per-user kernel quotas).
//!
//! A claim is a write lock on the byte range `[first, first + count)` of one file, the claims
//! file `claims` in a directory every keel daemon of the host shares ([`claims_dir`]:
//! `/run/keel/id-blocks/`, made 0700 and owned by the daemon's user). The lock is an open file
//! description lock (`F_OFD_SETLK`, fcntl(2)): a byte range names a block exactly, so blocks
//! of two daemons whose `keel.ron` ranges differ (even off each other's grid) conflict when
//! they share one id; and the lock belongs to the open file *description*, so every
//! descriptor of it — a dup, a forked or exec'd process's inherited copy — holds it until the
//! last one closes, across the death of the process that took it.
//!
//! Who holds a claim:
//! - **The daemon, while the task exists.** At a task's first start the daemon opens the
//!   claims file (a description of the task's own) and locks its block's range; it keeps it
//!   across attempts and backoff, and closes it once the task is removed. A block whose range
//!   anyone holds is skipped at allocation ([`super::block_for_start`]).
//! - **The attempt's shim, while its processes use the ids.** The shim inherits that same
//!   description (fd [`crate::sandbox::protocol::ID_CLAIM_FD`], through the daemon's clone or a
//!   spare's `SCM_RIGHTS`) and keeps it open until it exits. The shim is PID 1 of the task's PID
//!   namespace: every process of the task dies with it. So a daemon that dies (SIGKILL, OOM)
//!   leaves each running task's claim held by its shim; never by the agent (the descriptor is
//!   close-on-exec in the agent's child). (The kernel closes an exiting shim's descriptors
//!   just before it kills the rest of its PID namespace: a daemon whose own claim is gone —
//!   it died — leaves a window of microseconds in which the task's last processes, already
//!   being killed, outlive its claim.)
//! - **After a daemon restart**, the new daemon takes each task's claim again on a new
//!   description: for a task whose shim still runs that lock conflicts with the shim's, and
//!   the daemon trusts that the block is held (by that shim) and takes its own claim once the
//!   attempt has ended ([`Claims::sync`]). A kept block whose range someone else holds by then
//!   (another daemon took it while this one was down and the task had no shim) is lost: the
//!   task's next start takes another block (the checkout's upper layer is shifted to it at that
//!   start: `crate::sandbox::ownership`).
//!
//! The file's content is never read or written and it is never removed (removing a lock file
//! races with a taker that opened it before): one empty file per host. On a /run that is not a
//! tmpfs the file survives a reboot, harmlessly — locks do not. Every keel daemon of a host
//! must use the same directory; `KEEL_ID_CLAIMS_DIR` names another one (tests give each daemon
//! its own, or two the same).

use crate::sandbox::spec::IdBlock;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The claims' directory of the host, unless [`CLAIMS_DIR_ENV`] names another.
pub const DEFAULT_CLAIMS_DIR: &str = "/run/keel/id-blocks";
/// The variable that names another claims directory (tests; a host whose /run is read-only).
pub const CLAIMS_DIR_ENV: &str = "KEEL_ID_CLAIMS_DIR";
/// The claims file's name in the directory.
const CLAIMS_FILE: &str = "claims";

/// The claims directory this daemon uses: `$KEEL_ID_CLAIMS_DIR`, else [`DEFAULT_CLAIMS_DIR`].
pub fn claims_dir() -> PathBuf {
    std::env::var_os(CLAIMS_DIR_ENV)
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| DEFAULT_CLAIMS_DIR.into(), PathBuf::from)
}

/// The claims file of a host, opened.
#[derive(Debug)]
pub struct ClaimsFile {
    path: PathBuf,
}

impl ClaimsFile {
    /// Make `dir` (0700) and its claims file (0600) if they are not there. `Err` says what to
    /// change: a read-only or missing /run, a directory another user owns or can write.
    pub fn open(dir: &Path) -> Result<ClaimsFile, String> {
        let why = |what: &str, e: io::Error| {
            let hint = match e.raw_os_error() {
                Some(libc::EROFS) => {
                    " — the filesystem is read-only: keel needs a writable directory shared by \
                     every keel daemon of this host (a tmpfs such as /run)"
                }
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    " — keel's user may not write there (a daemon that is not root needs a \
                     directory of its own user)"
                }
                Some(libc::ENOENT) | Some(libc::ENOTDIR) => " — its parent is missing",
                _ => "",
            };
            format!(
                "cannot {what} {} for the host-wide claims on blocks of host ids: {e}{hint}; \
                 or set {CLAIMS_DIR_ENV} to such a directory (the same for every keel daemon of \
                 this host)",
                dir.display()
            )
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| why("create", e))?;
        let meta = std::fs::symlink_metadata(dir).map_err(|e| why("read", e))?;
        judge_dir(
            dir,
            meta.is_dir(),
            meta.uid(),
            meta.permissions().mode(),
            nix::unistd::geteuid().as_raw(),
        )?;
        let path = dir.join(CLAIMS_FILE);
        let claims = ClaimsFile { path };
        claims
            .open_description()
            .map_err(|e| why("open a file in", e))?;
        Ok(claims)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new open file description of the claims file (read-write: a write lock needs it).
    fn open_description(&self) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
    }

    /// Claim `block` on a description of its own: `Ok(None)` when anyone holds one of its ids.
    pub fn try_claim(&self, block: IdBlock) -> io::Result<Option<Claim>> {
        let file = self.open_description()?;
        let range = libc::flock {
            l_type: libc::F_WRLCK as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: i64::from(block.first),
            l_len: i64::from(block.count),
            // OFD locks: must be 0.
            l_pid: 0,
        };
        match nix::fcntl::fcntl(file.as_fd(), nix::fcntl::FcntlArg::F_OFD_SETLK(&range)) {
            Ok(_) => Ok(Some(Claim { block, file })),
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EACCES) => Ok(None),
            Err(e) => Err(io::Error::from(e)),
        }
    }
}

/// The directory must be one nobody else can put files in or take them from: a directory,
/// owned by the daemon's user, writable by nobody else. Pure.
pub fn judge_dir(dir: &Path, is_dir: bool, owner: u32, mode: u32, euid: u32) -> Result<(), String> {
    let dir = dir.display();
    if !is_dir {
        return Err(format!(
            "{dir} is not a directory (a symbolic link?): keel keeps the host-wide claims on \
             blocks of host ids there; remove it, or set {CLAIMS_DIR_ENV}"
        ));
    }
    if owner != euid {
        return Err(format!(
            "{dir} belongs to uid {owner}, not to keel's user (uid {euid}): whoever owns it could \
             hold or forge claims on blocks of host ids; remove it (keel makes it 0700), or set \
             {CLAIMS_DIR_ENV}"
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "{dir} is writable by other users (mode {:o}): run chmod 0700 {dir}",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// A held claim: the lock lives as long as any descriptor of this description (the shim's
/// inherited copy included).
#[derive(Debug)]
pub struct Claim {
    block: IdBlock,
    file: File,
}

impl Claim {
    pub fn block(&self) -> IdBlock {
        self.block
    }

    /// The descriptor a shim inherits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// What this daemon knows of a task's claim.
#[derive(Debug)]
enum Holder {
    /// The daemon holds it.
    Daemon(Claim),
    /// A live attempt's shim holds it (one re-adopted after a restart): taken by the daemon
    /// once that attempt has ended.
    Shim(IdBlock),
    /// Someone else holds the task's kept block: its next start takes another.
    Lost(IdBlock),
}

/// This daemon's claims, by task.
#[derive(Debug)]
pub struct Claims {
    file: ClaimsFile,
    holders: HashMap<String, Holder>,
}

/// A task as [`Claims::sync`] sees it.
pub struct TaskBlock<'a> {
    pub unit: &'a str,
    pub block: Option<IdBlock>,
    /// The task has a live attempt (its shim may hold the claim).
    pub attempt_live: bool,
}

impl Claims {
    pub fn new(file: ClaimsFile) -> Self {
        Claims {
            file,
            holders: HashMap::new(),
        }
    }

    pub fn file(&self) -> &ClaimsFile {
        &self.file
    }

    /// The claim the daemon holds for `unit`, if it holds one.
    pub fn held(&self, unit: &str) -> Option<&Claim> {
        match self.holders.get(unit) {
            Some(Holder::Daemon(claim)) => Some(claim),
            _ => None,
        }
    }

    /// Whether `unit`'s claim on `block` is the daemon's or its live shim's.
    pub fn holds(&self, unit: &str, block: IdBlock) -> bool {
        match self.holders.get(unit) {
            Some(Holder::Daemon(claim)) => claim.block == block,
            Some(Holder::Shim(held)) => *held == block,
            _ => false,
        }
    }

    /// Bring the claims in line with the tasks: a removed task's claim goes (closed: its shim
    /// is gone by then); a task with a block and no claim known takes it — or, when that
    /// fails, is trusted to have it held by its live shim, or has lost it.
    pub fn sync<'a>(&mut self, tasks: impl IntoIterator<Item = TaskBlock<'a>>) {
        let tasks: Vec<TaskBlock<'a>> = tasks.into_iter().collect();
        self.holders
            .retain(|unit, holder| match tasks.iter().find(|t| t.unit == unit) {
                None => false,
                Some(task) => match holder {
                    Holder::Daemon(claim) => task.block == Some(claim.block),
                    // Looked at again once the attempt ends.
                    Holder::Shim(block) => task.attempt_live && task.block == Some(*block),
                    // Until a start takes another block (or this one, free again).
                    Holder::Lost(block) => task.block == Some(*block),
                },
            });
        for task in tasks {
            let Some(block) = task.block else { continue };
            if self.holders.contains_key(task.unit) {
                continue;
            }
            let holder = match self.file.try_claim(block) {
                Ok(Some(claim)) => Holder::Daemon(claim),
                Ok(None) if task.attempt_live => Holder::Shim(block),
                Ok(None) => {
                    log::warn!(
                        "{}: its block of host ids ({}…) is claimed by someone else on this \
                         host (another keel daemon took it while this one was down): its next \
                         start takes another",
                        task.unit,
                        block.first
                    );
                    Holder::Lost(block)
                }
                Err(e) => {
                    log::warn!(
                        "{}: cannot claim its block of host ids in {}: {e}",
                        task.unit,
                        self.file.path.display()
                    );
                    continue;
                }
            };
            self.holders.insert(task.unit.to_string(), holder);
        }
    }

    /// Claim `block` for `unit`'s start, unless it holds it already: `Ok(false)` when anyone
    /// else holds one of its ids. A claim taken replaces the one the task held (on a block it
    /// no longer uses: it has no live attempt).
    pub fn claim_for(&mut self, unit: &str, block: IdBlock) -> io::Result<bool> {
        if self.held(unit).is_some_and(|claim| claim.block == block) {
            return Ok(true);
        }
        let Some(claim) = self.file.try_claim(block)? else {
            return Ok(false);
        };
        self.holders.insert(unit.to_string(), Holder::Daemon(claim));
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
