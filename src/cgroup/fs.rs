//! The few operations keel performs on cgroup filesystems, behind a trait so that the plan of
//! writes of each backend can be checked without a kernel (`testing::RecordingFs`).

use std::fmt;
use std::io::{self, Write};
use std::path::Path;

/// Operations on cgroupfs. Errors are the kernel's, unchanged: callers decide what EEXIST,
/// ENOENT and EBUSY mean at their step.
pub trait CgroupFs: fmt::Debug + Send + Sync {
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    fn rmdir(&self, path: &Path) -> io::Result<()>;
    /// Write `value` to an existing interface file in one write(2).
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    fn read(&self, path: &Path) -> io::Result<String>;
    /// The names of the child cgroups (subdirectories) of `path`.
    fn subdirs(&self, path: &Path) -> io::Result<Vec<String>>;
    /// SIGKILL one process (the freeze-and-kill fallback where `cgroup.kill` is missing).
    fn sigkill(&self, pid: i32) -> io::Result<()>;
}

/// The real thing.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl CgroupFs for RealFs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        // No O_CREAT (a missing file means a missing controller, not a file to create) and no
        // O_TRUNC; one write(2), because the kernel parses each write to an interface file on
        // its own (kernfs hands every write(2) to the file's handler as one buffer).
        let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
        let written = file.write(value.as_bytes())?;
        if written != value.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write to {}", path.display()),
            ));
        }
        Ok(())
    }

    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn subdirs(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn sigkill(&self, pid: i32) -> io::Result<()> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .map_err(io::Error::from)
    }
}

/// mkdir(2) of a cgroup: `Ok(true)` when made, `Ok(false)` when it was there already.
pub(super) fn mkdir_or_existing(fs: &dyn CgroupFs, path: &Path) -> io::Result<bool> {
    match fs.mkdir(path) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
        Err(e) => Err(e),
    }
}

/// rmdir(2) of a cgroup; one that is gone already is no error.
pub(super) fn rmdir_or_gone(fs: &dyn CgroupFs, path: &Path) -> io::Result<()> {
    match fs.rmdir(path) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}
