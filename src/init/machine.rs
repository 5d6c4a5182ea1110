//! `keel init` as the PID 1 of a machine (a VM or a host booted straight into keel), as opposed
//! to the PID 1 of a container's PID namespace.
//!
//! As PID 1 of a machine booted from an initramfs, keel init:
//! - leaves the initramfs root for a bind mount of it (see [`needs_rebind`]);
//! - mounts what the kernel does not: `/proc`, `/sys`, `/dev` (devtmpfs), `/dev/pts`,
//!   `/dev/shm`, `/run` and cgroup2 at `/sys/fs/cgroup` with `nsdelegate` — each only where
//!   nothing is mounted yet;
//! - and when it is done, sweeps the last processes (SIGTERM, then SIGKILL), syncs and powers
//!   the machine off with `reboot(RB_POWER_OFF)` instead of exiting (PID 1 exiting would panic
//!   the kernel), after printing `keel init: powering off, status N` on its console.
//!
//! In a container none of this applies: the runtime has mounted what is needed and exiting is
//! how PID 1 reports its status. The decisions are pure functions of `/proc/self/mountinfo`.

use nix::mount::MsFlags;
use std::path::Path;

/// A filesystem the PID 1 of a machine mounts when nothing is mounted at `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountSpec {
    pub source: &'static str,
    pub target: &'static str,
    pub fstype: &'static str,
    pub flags: MsFlags,
    pub data: Option<&'static str>,
}

const NOSUID_NODEV_NOEXEC: MsFlags = MsFlags::MS_NOSUID
    .union(MsFlags::MS_NODEV)
    .union(MsFlags::MS_NOEXEC);

/// In order: a parent before what is mounted inside it.
pub const MOUNTS: [MountSpec; 7] = [
    MountSpec {
        source: "proc",
        target: "/proc",
        fstype: "proc",
        flags: NOSUID_NODEV_NOEXEC,
        data: None,
    },
    MountSpec {
        source: "sysfs",
        target: "/sys",
        fstype: "sysfs",
        flags: NOSUID_NODEV_NOEXEC,
        data: None,
    },
    MountSpec {
        source: "devtmpfs",
        target: "/dev",
        fstype: "devtmpfs",
        flags: MsFlags::MS_NOSUID,
        data: Some("mode=0755"),
    },
    MountSpec {
        source: "devpts",
        target: "/dev/pts",
        fstype: "devpts",
        flags: MsFlags::MS_NOSUID.union(MsFlags::MS_NOEXEC),
        data: Some("mode=0620,ptmxmode=0666"),
    },
    MountSpec {
        source: "shm",
        target: "/dev/shm",
        fstype: "tmpfs",
        flags: MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV),
        data: Some("mode=1777"),
    },
    MountSpec {
        source: "tmpfs",
        target: "/run",
        fstype: "tmpfs",
        flags: MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV),
        data: Some("mode=0755"),
    },
    // nsdelegate: a cgroup namespace's root is a delegation boundary (cgroup-v2.rst,
    // "Delegation"), as systemd mounts it.
    MountSpec {
        source: "cgroup2",
        target: "/sys/fs/cgroup",
        fstype: "cgroup2",
        flags: NOSUID_NODEV_NOEXEC,
        data: Some("nsdelegate"),
    },
];

/// Where keel init moves the initramfs root to (a directory of the initramfs itself).
pub const REBIND_AT: &str = "/.keel-root";

/// A line of mountinfo (proc(5): "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root
/// rw"; optional fields end at " - ").
struct Mount<'a> {
    id: &'a str,
    parent: &'a str,
    point: &'a str,
    fstype: &'a str,
}

fn mounts(mountinfo: &str) -> impl Iterator<Item = Mount<'_>> {
    mountinfo.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut fields = left.split(' ');
        let (id, parent) = (fields.next()?, fields.next()?);
        let point = fields.nth(2)?;
        let fstype = right.split(' ').next()?;
        Some(Mount {
            id,
            parent,
            point,
            fstype,
        })
    })
}

/// The mounts of [`MOUNTS`] whose target has nothing mounted on it yet. A target under one
/// that is missing is missing too (it cannot be mounted before its parent).
pub fn missing_mounts(mountinfo: &str) -> Vec<MountSpec> {
    let mounted: Vec<&str> = mounts(mountinfo).map(|m| m.point).collect();
    MOUNTS
        .into_iter()
        .filter(|spec| !mounted.contains(&spec.target))
        .collect()
}

/// Whether `/` is the initramfs itself (the kernel's `rootfs` mount, a ramfs or tmpfs that can
/// never be unmounted): pivot_root(2) refuses to move away from it (EINVAL, "the rootfs cannot
/// be pivot_root()ed": the root mount must have a parent), and every task's sandbox is built
/// with pivot_root. Only the last mount at `/` counts (a root mounted over it is what this
/// process sees); the top of the mount tree is its own parent in mountinfo.
pub fn needs_rebind(mountinfo: &str) -> bool {
    mounts(mountinfo)
        .filter(|m| m.point == "/")
        .last()
        .is_some_and(|m| m.fstype == "rootfs" && m.id == m.parent)
}

/// `status` as keel init's final line on a machine's console (scripts grep for it).
pub fn power_off_line(status: i32) -> String {
    format!("keel init: powering off, status {status}")
}

/// Move off the initramfs root when `/` is it, then mount what is missing. Failures are
/// logged and the boot goes on: a missing filesystem is reported again by whatever needs it.
pub fn prepare(mountinfo: impl Fn() -> String) {
    if needs_rebind(&mountinfo()) {
        // Why a bind of the initramfs and not switch_root's copy into a tmpfs: the root only
        // has to be a mount with a parent for pivot_root to work in each task's namespace;
        // a recursive bind of rootfs moved onto `/` is one, costs no copy of the files (nor
        // twice their memory), and keel stays the same process, PID 1, with nothing re-executed.
        match crate::sys::machine::rebind_root(Path::new(REBIND_AT)) {
            Ok(()) => log::info!("moved / off the initramfs root (a bind of it, for pivot_root)"),
            Err(e) => log::error!(
                "cannot move / off the initramfs root ({e}): every task's sandbox will fail \
                 (pivot_root)"
            ),
        }
    }
    for spec in missing_mounts(&mountinfo()) {
        let target = Path::new(spec.target);
        let result = std::fs::create_dir_all(target).and_then(|()| {
            crate::sys::mount::mount_fs(spec.source, target, spec.fstype, spec.flags, spec.data)
        });
        match result {
            Ok(()) => log::debug!("mounted {} on {}", spec.fstype, spec.target),
            Err(e) => log::error!("cannot mount {} on {}: {e}", spec.fstype, spec.target),
        }
    }
}

#[cfg(test)]
mod tests;
