//! The modes of what keel creates under the state directory: 0700 directories and 0600 files,
//! set explicitly (a umask can only narrow a mode). Why, and the tightening at start:
//! `private.rs`.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// The mode of keel's own directories.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// The mode of keel's own files.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Create `path` (and any missing parent) mode 0700; an existing directory is left as it is.
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(path)
}

/// Create the new directory `path` mode 0700 (an error if it exists).
pub fn create_new_private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new().mode(PRIVATE_DIR_MODE).create(path)
}
