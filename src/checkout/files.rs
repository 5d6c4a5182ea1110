//! File-system chores of checkouts: build directories under temporary names, durability,
//! ownership, disk use, removal.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{io_err, CheckoutError};

/// Distinguishes builds of one process (tests make checkouts from several threads).
static BUILDS: AtomicU64 = AtomicU64::new(0);

/// `<parent>/.<name>.tmp.<pid>.<n>`: where something is built before it is renamed to
/// `<parent>/<name>`. The pid lets a later process tell a dead builder's leftovers.
pub(crate) fn build_path(parent: &Path, name: &str) -> PathBuf {
    let n = BUILDS.fetch_add(1, Ordering::Relaxed);
    parent.join(format!(".{name}.tmp.{}.{n}", std::process::id()))
}

/// Remove what builders that are no longer alive left in `parent` (a crash mid-build).
pub(crate) fn remove_stale_builds(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = builder_pid(&name.to_string_lossy()) else {
            continue;
        };
        if !process_alive(pid) {
            log::info!("removing {} left by a crash", entry.path().display());
            let _ = remove_tree(&entry.path());
        }
    }
}

/// The pid in `.<name>.tmp.<pid>.<n>`.
pub(crate) fn builder_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix('.')?;
    let (_, tail) = rest.rsplit_once(".tmp.")?;
    let (pid, n) = tail.split_once('.')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

fn process_alive(pid: i32) -> bool {
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    // EPERM: alive, somebody else's.
    !matches!(kill(Pid::from_raw(pid), None), Err(nix::Error::ESRCH))
}

/// remove_dir_all that also copes with what overlayfs leaves in its work directory
/// (`work/work`, mode 000: root may remove it regardless, another user first needs to
/// chmod it).
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    if fs::symlink_metadata(path).is_ok_and(|m| !m.is_dir()) {
        return fs::remove_file(path); // a scratch file left by a crash
    }
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            make_writable(path);
            fs::remove_dir_all(path)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn make_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_dir() {
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(path) {
            for entry in entries.flatten() {
                make_writable(&entry.path());
            }
        }
    }
}

/// syncfs(2) of the filesystem `path` lies on: everything just written there reaches the
/// disk, in one call.
pub(crate) fn sync_filesystem(path: &Path) -> Result<(), CheckoutError> {
    let dir = fs::File::open(path).map_err(io_err("opening", path))?;
    nix::unistd::syncfs(&dir).map_err(|e| CheckoutError::io("syncing", path, e.into()))
}

/// fsync(2) of every file and directory below `path` (symlinks not followed): for a small tree
/// just written (a task's git directory), where syncfs would also flush whatever else is dirty
/// on the filesystem — other agents' builds, a neighbour's checkout — and take its time.
pub(crate) fn sync_tree(path: &Path) -> Result<(), CheckoutError> {
    let meta = fs::symlink_metadata(path).map_err(io_err("reading", path))?;
    if meta.is_dir() {
        for entry in fs::read_dir(path).map_err(io_err("reading", path))? {
            let entry = entry.map_err(io_err("reading", path))?;
            sync_tree(&entry.path())?;
        }
    } else if !meta.is_file() {
        return Ok(());
    }
    fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io_err("syncing", path))
}

pub(crate) fn sync_dir(path: &Path) -> Result<(), CheckoutError> {
    fs::File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing", path))
}

/// A small new file, fsynced (its directory is synced by whoever renames it into place).
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), CheckoutError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(crate::state::PRIVATE_FILE_MODE)
        .open(path)
        .map_err(io_err("writing", path))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io_err("writing", path))
}

/// Give `path` and everything below it to `owner` (lchown: symlinks themselves).
pub(crate) fn chown_tree(path: &Path, (uid, gid): (u32, u32)) -> Result<(), CheckoutError> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(io_err("chown", path))?;
    let meta = fs::symlink_metadata(path).map_err(io_err("reading", path))?;
    if meta.is_dir() {
        for entry in fs::read_dir(path).map_err(io_err("reading", path))? {
            let entry = entry.map_err(io_err("reading", path))?;
            chown_tree(&entry.path(), (uid, gid))?;
        }
    }
    Ok(())
}

/// The disk space `path` and everything below it use (allocated blocks, each hard-linked
/// file once), on `path`'s own filesystem only: what removing it would free.
pub fn disk_bytes(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    walk(path, &meta, meta.dev(), &mut seen, &mut total);
    total
}

fn walk(
    path: &Path,
    meta: &fs::Metadata,
    dev: u64,
    seen: &mut std::collections::HashSet<u64>,
    total: &mut u64,
) {
    if meta.dev() != dev {
        return;
    }
    if meta.nlink() > 1 && !meta.is_dir() && !seen.insert(meta.ino()) {
        return;
    }
    *total += meta.blocks() * 512;
    if !meta.is_dir() {
        return;
    }
    let Ok(entries) = fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let child = entry.path();
        if let Ok(meta) = fs::symlink_metadata(&child) {
            walk(&child, &meta, dev, seen, total);
        }
    }
}
