//! What `keel init` needs as the PID 1 of a machine: moving off the initramfs root, knowing
//! whether it is the initial PID namespace, sweeping the last processes, powering off.
//!
//! Thin and policy-free: what to mount and when to power off is decided in `crate::init`.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::mount::MsFlags;
use nix::sys::signal::Signal;

/// The inode of the initial PID namespace's `/proc/<pid>/ns/pid` (`PROC_PID_INIT_INO` in
/// include/linux/proc_ns.h, fixed since Linux 3.8). A container's PID namespace has another.
pub const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

fn errno(e: nix::Error) -> io::Error {
    io::Error::from(e)
}

/// The inode number of this process's PID namespace (needs `/proc`).
pub fn pid_namespace_inode() -> io::Result<u64> {
    Ok(std::fs::metadata("/proc/self/ns/pid")?.ino())
}

/// Make a recursive bind of the current root at `mountpoint` the new root, the way
/// switch_root(8) moves to the real root: `mount --rbind / MOUNTPOINT; cd MOUNTPOINT;
/// mount --move . /; chroot .`. The files stay where they are; only the mount changes.
pub fn rebind_root(mountpoint: &Path) -> io::Result<()> {
    std::fs::create_dir_all(mountpoint)?;
    nix::mount::mount(
        Some("/"),
        mountpoint,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(errno)?;
    nix::unistd::chdir(mountpoint).map_err(errno)?;
    nix::mount::mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(errno)?;
    nix::unistd::chroot(".").map_err(errno)?;
    nix::unistd::chdir("/").map_err(errno)
}

/// `kill(-1, signal)`: every process but PID 1 itself (kill(2)). Only for the PID 1 of a
/// machine that is about to power off. `Ok(false)` when there was no process to signal.
pub fn signal_all(signal: Signal) -> io::Result<bool> {
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(-1), signal) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::ESRCH) => Ok(false),
        Err(e) => Err(errno(e)),
    }
}

/// sync(2), then `reboot(RB_POWER_OFF)`. Returns only on failure (reboot(2): EPERM without
/// CAP_SYS_BOOT; in a child PID namespace the call would end the namespace's init instead).
pub fn power_off() -> io::Error {
    nix::unistd::sync();
    match nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_POWER_OFF) {
        Ok(never) => match never {},
        Err(e) => errno(e),
    }
}
