//! Why the state directory refuses a write, in words an operator can act on (a client's
//! error, a log line): a full disk, no inodes, a read-only mount.

use std::path::Path;

/// Why a write in `dir` fails, as an operator can act on it: its filesystem is full, out of
/// inodes, or read-only (statvfs), or else "see the log".
pub(crate) fn why_unwritable(dir: &Path) -> String {
    match nix::sys::statvfs::statvfs(dir) {
        Ok(fs) => unwritable_reason(
            fs.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY),
            fs.blocks_available().saturating_mul(fs.fragment_size()),
            fs.files_available(),
        ),
        Err(_) => unwritable_reason(false, u64::MAX, u64::MAX),
    }
}

/// The decision of [`why_unwritable`]: below 64 KiB free, a state file (a few hundred bytes,
/// written beside the old one before the rename) may not fit.
fn unwritable_reason(read_only: bool, bytes_free: u64, inodes_free: u64) -> String {
    if read_only {
        "its filesystem is read-only: remount it read-write".to_string()
    } else if bytes_free < 64 * 1024 {
        format!("no space left on its filesystem ({bytes_free} bytes free): free some space there")
    } else if inodes_free == 0 {
        "no inodes left on its filesystem: remove files there".to_string()
    } else {
        "the write failed (the daemon's log has the error)".to_string()
    }
}

#[cfg(test)]
mod tests;
