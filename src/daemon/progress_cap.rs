//! The progress file is a status line, not a log: its disk use is capped. An agent that
//! appends to `$KEEL_PROGRESS` for days (or in a tight loop: 38 MB in 30 s was measured) must
//! not fill the state filesystem. When the daemon reads the file after a write (at most every
//! [`super::liveness::PROGRESS_EVENTS_WINDOW`]) and finds more than [`PROGRESS_CAP`] allocated,
//! it punches out every block before the last [`PROGRESS_KEEP`] bytes
//! (`fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`).
//!
//! Why a hole and not a truncation: the agent holds the file open, with `O_APPEND` or not.
//! A hole keeps the inode, the length and every offset (a writer at offset N goes on writing
//! at N, an appender at the end), and the tail — the last line `keel status` shows and the
//! liveness fingerprint hashes — is untouched. The file's length (`ls -l`) may keep growing;
//! its blocks (`du`, the filesystem's free space) stay under the cap plus what the agent writes
//! in one window. A filesystem without hole punching is answered with a truncation to zero
//! (the inode kept: an appender goes on at 0, a writer at offset N leaves a sparse file).

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

/// Most bytes a progress file may hold on disk before its head is punched out.
pub(crate) const PROGRESS_CAP: u64 = 64 << 10;
/// What is kept of it: its tail (more than the 4 KiB `keel status` and the fingerprint read).
pub(crate) const PROGRESS_KEEP: u64 = 16 << 10;

/// The byte range `[0, end)` to punch out of a file of `len` bytes with `allocated` bytes on
/// disk, in blocks of `block` bytes; `None` while it is within the cap or nothing before the
/// kept tail is a whole block.
pub(crate) fn punch_range(len: u64, allocated: u64, block: u64) -> Option<u64> {
    if allocated <= PROGRESS_CAP {
        return None;
    }
    let block = block.max(1);
    let end = len.saturating_sub(PROGRESS_KEEP) / block * block;
    (end > 0).then_some(end)
}

/// What [`cap`] did to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Capped {
    /// Within the cap: untouched.
    Within,
    /// Its head punched out (bytes), or it was truncated to zero (no hole punching there);
    /// with its mtime after, which was keel's doing and not the agent's write.
    Punched(u64, Option<SystemTime>),
    Truncated(Option<SystemTime>),
}

/// Cap the progress file at `path` (a local file in the state directory, as the fingerprint
/// read is: no longer a wait than that read's).
pub(crate) fn cap(path: &Path) -> io::Result<Capped> {
    let file = File::options().write(true).open(path)?;
    let meta = file.metadata()?;
    let Some(end) = punch_range(meta.len(), meta.blocks() * 512, meta.blksize()) else {
        return Ok(Capped::Within);
    };
    use nix::fcntl::{fallocate, FallocateFlags};
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    let len = libc::off_t::try_from(end).unwrap_or(libc::off_t::MAX);
    let mtime = || file.metadata().and_then(|m| m.modified()).ok();
    match fallocate(&file, flags, 0, len) {
        Ok(()) => return Ok(Capped::Punched(end, mtime())),
        Err(nix::errno::Errno::EOPNOTSUPP) => {}
        Err(e) => return Err(e.into()),
    }
    file.set_len(0)?;
    Ok(Capped::Truncated(mtime()))
}

#[cfg(test)]
mod tests;
