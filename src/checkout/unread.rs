//! What an agent left in its checkout's files that keel will not read: FIFOs, sockets and
//! devices, symlinks named `.gitignore`, `.gitattributes` or `.gitmodules` (libgit2 follows
//! them), and repositories inside the work tree (their git directories are the agent's). Opening a FIFO blocks until somebody writes to it — a FIFO named `.gitignore`
//! hung the daemon in libgit2's status — and a device may do anything; so before libgit2 is
//! pointed at a checkout's files, they are walked here without opening any but directories
//! (`getdents` and `lstat`), and a checkout that has such a file is never shown to libgit2:
//! it has changes keel will not read, and only a forced removal (which deletes them unread)
//! takes it away.
//!
//! An overlay checkout's upper layer holds everything the agent made (the base tree, the
//! lower layer, is keel's own checkout: directories, files and symlinks only), so only it is
//! walked. There a character device 0:0 is how overlayfs records a deletion (a whiteout), not
//! an agent's file: it is skipped. A full checkout's files are walked whole, and a 0:0 device
//! there is a device.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use super::error::{io_err, CheckoutError};

/// At most this many are named in a message (all are counted).
pub(crate) const NAMED: usize = 5;

/// The non-regular files found: the first [`NAMED`] (relative paths, with what they are),
/// and how many in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Unreadable {
    pub named: Vec<String>,
    pub count: usize,
}

impl Unreadable {
    /// Count `path` (under `root`), and name it with `what` while fewer than [`NAMED`] are.
    fn note(&mut self, root: &Path, path: &Path, what: &str) {
        self.count += 1;
        if self.named.len() < NAMED {
            let rel = path.strip_prefix(root).unwrap_or(path);
            self.named.push(format!("{} ({what})", rel.display()));
        }
    }
}

/// Which layout `root` is: an overlay's upper layer (whiteouts are deletions) or files as
/// they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    Upper,
    Files,
}

/// Every FIFO, socket and device under `root` (nothing followed, nothing opened but
/// directories). A directory that cannot be read is an error: "nothing found" must mean it.
pub(crate) fn find(root: &Path, layer: Layer) -> Result<Unreadable, CheckoutError> {
    let mut found = Unreadable::default();
    if fs::symlink_metadata(root).is_err() {
        return Ok(found);
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let reading = "looking at the checkout's files";
        for entry in fs::read_dir(&dir).map_err(io_err(reading, &dir))? {
            let entry = entry.map_err(io_err(reading, &dir))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(io_err(reading, &path))?;
            // A repository inside the work tree (a submodule checked out, a clone): libgit2
            // would open its git directory — its config, index, links — which the agent
            // wrote. The checkout's own `.git` is at the top.
            if entry.file_name() == ".git" && dir != root {
                found.note(root, &path, "a repository keel will not read");
                continue;
            }
            if kind.is_dir() {
                stack.push(path);
                continue;
            }
            if kind.is_file() {
                continue;
            }
            if kind.is_symlink() {
                // libgit2 follows a symlinked `.gitignore`, `.gitattributes` or `.gitmodules`
                // wherever it points (a FIFO in a writable path, a device): git ≥ 2.32 will
                // not, and neither does keel. Any other symlink is only read as a link.
                let metadata_file = matches!(
                    entry.file_name().to_str(),
                    Some(".gitignore" | ".gitattributes" | ".gitmodules")
                );
                if metadata_file {
                    found.note(root, &path, "a symlink git would follow");
                }
                continue;
            }
            let what = if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_socket() {
                "a socket"
            } else if kind.is_block_device() {
                "a block device"
            } else {
                let meta = fs::symlink_metadata(&path).map_err(io_err(reading, &path))?;
                if layer == Layer::Upper && meta.rdev() == 0 {
                    continue; // a whiteout: the agent deleted a file of the base
                }
                "a character device"
            };
            found.note(root, &path, what);
        }
    }
    found.named.sort();
    Ok(found)
}
