//! A daemon whose state directory is a small tmpfs: the state filesystem filled, its free
//! space below a reserve (tests/full_disk.rs, tests/disk_budget.rs).

use super::Daemon;
use std::path::{Path, PathBuf};

/// A tmpfs of `size` over `path`, unmounted (lazily) when dropped, then the scratch directory
/// removed.
pub struct Tmpfs {
    path: PathBuf,
    scratch: PathBuf,
}

impl Tmpfs {
    pub fn mount(path: &Path, size: &str, scratch: &Path) -> Tmpfs {
        std::fs::create_dir_all(path).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(format!("size={size},mode=0700").as_str()),
        )
        .unwrap_or_else(|e| panic!("mount a tmpfs on {}: {e}", path.display()));
        Tmpfs {
            path: path.to_path_buf(),
            scratch: scratch.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
        // Dropped after the daemon (a Fixture's field order): nothing uses the directory now.
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// The daemon is dropped (shut down, its shims and cgroups gone) before the tmpfs.
pub struct Fixture {
    pub daemon: Daemon,
    pub _tmpfs: Tmpfs,
}

impl Fixture {
    /// A daemon whose state directory is a tmpfs of `size`, with `config` as its keel.ron
    /// (when given).
    pub fn start(name: &str, size: &str, config: Option<&str>) -> Fixture {
        let mut daemon = Daemon::prepare(name);
        let tmpfs = Tmpfs::mount(&daemon.state(), size, &daemon.scratch.dir);
        if let Some(config) = config {
            std::fs::write(daemon.state().join("keel.ron"), config).unwrap();
        }
        daemon.spawn();
        Fixture {
            daemon,
            _tmpfs: tmpfs,
        }
    }
}
