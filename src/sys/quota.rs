//! Project quotas (ext4, xfs): `quotactl_fd(2)` with `PRJQUOTA` on a descriptor of the
//! filesystem, and `FS_IOC_FSGETXATTR`/`FS_IOC_FSSETXATTR` for a directory's project id.
//! Thin: what to set and when is `crate::daemon::disk::quota`'s.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `quotactl_fd(2)` (Linux 5.14): not in every libc's table (musl's), so named here.
#[cfg(target_arch = "x86_64")]
const SYS_QUOTACTL_FD: libc::c_long = 443;
#[cfg(target_arch = "aarch64")]
const SYS_QUOTACTL_FD: libc::c_long = 443;

/// `<linux/quota.h>`.
const PRJQUOTA: u32 = 2;
/// `XQM_CMD(8)`: the filesystem's quota state, every type's (`struct fs_quota_statv`).
const Q_XGETQSTATV: u32 = 0x5808;
const FS_QSTATV_VERSION1: i8 = 1;
/// `fs_quota_statv.qs_flags`: project quotas accounted, and enforced.
const FS_QUOTA_PDQ_ACCT: u16 = 1 << 4;
const FS_QUOTA_PDQ_ENFD: u16 = 1 << 5;
const Q_GETQUOTA: u32 = 0x80_0007;
const Q_SETQUOTA: u32 = 0x80_0008;
const QIF_BLIMITS: u32 = 1;
/// Quota limits are in blocks of this many bytes (`QIF_DQBLKSIZE`); usage is in bytes.
const QIF_DQBLKSIZE: u64 = 1024;

/// `<linux/fs.h>`: `_IOR('X', 31, struct fsxattr)`, `_IOW('X', 32, struct fsxattr)`.
const FS_IOC_FSGETXATTR: libc::c_ulong = 0x801c_581f;
const FS_IOC_FSSETXATTR: libc::c_ulong = 0x401c_5820;
/// New files and directories under the directory take its project id.
const FS_XFLAG_PROJINHERIT: u32 = 0x200;

#[repr(C)]
#[derive(Default)]
struct IfDqblk {
    bhardlimit: u64,
    bsoftlimit: u64,
    curspace: u64,
    ihardlimit: u64,
    isoftlimit: u64,
    curinodes: u64,
    btime: u64,
    itime: u64,
    valid: u32,
}

#[repr(C)]
#[derive(Default)]
struct FsQfilestatv {
    ino: u64,
    nblks: u64,
    nextents: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Default)]
struct FsQuotaStatv {
    version: i8,
    pad1: u8,
    flags: u16,
    incoredqs: u32,
    uquota: FsQfilestatv,
    gquota: FsQfilestatv,
    pquota: FsQfilestatv,
    btimelimit: i32,
    itimelimit: i32,
    rtbtimelimit: i32,
    bwarnlimit: u16,
    iwarnlimit: u16,
    rtbwarnlimit: u16,
    pad3: u16,
    pad4: u32,
    pad2: [u64; 7],
}

/// Project quotas on a filesystem, as `Q_XGETQSTATV` tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProjectQuotas {
    /// Usage is counted (ext4's `project,quota` features).
    pub accounted: bool,
    /// Limits are enforced (mounted with `prjquota`).
    pub enforced: bool,
}

#[repr(C)]
#[derive(Default)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

/// One project's figures, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProjectUse {
    pub used: u64,
    /// 0: no hard limit.
    pub hard: u64,
    pub soft: u64,
}

fn cmd(command: u32) -> libc::c_uint {
    (command << 8) | (PRJQUOTA & 0xff)
}

/// `quotactl_fd(fs, QCMD(command, PRJQUOTA), id, arg)`. Private: each caller passes the
/// structure its command reads or writes.
fn quotactl<T>(fs: BorrowedFd<'_>, command: u32, id: u32, arg: &mut T) -> io::Result<()> {
    // SAFETY: quotactl_fd reads a descriptor, a command and an id, and reads or writes one
    // structure at `arg`: the command's own (`if_dqblk` for
    // Q_GETQUOTA and Q_SETQUOTA, `fs_quota_statv` for Q_XGETQSTATV), as this module's
    // callers pass it; `arg` lives for the call.
    let rc = unsafe {
        libc::syscall(
            SYS_QUOTACTL_FD,
            fs.as_raw_fd(),
            cmd(command),
            id,
            arg as *mut T,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether project quotas are counted and enforced on the filesystem of `fs` (any
/// descriptor on it), or the kernel's answer: ENOSYS (a kernel, or a filesystem, without
/// quotas), ENOTTY/EINVAL/EOPNOTSUPP. Reads the kernel's in-memory quota state only; needs
/// no privilege.
pub fn project_quotas(fs: BorrowedFd<'_>) -> io::Result<ProjectQuotas> {
    let mut state = FsQuotaStatv {
        version: FS_QSTATV_VERSION1,
        ..FsQuotaStatv::default()
    };
    quotactl(fs, Q_XGETQSTATV, 0, &mut state)?;
    Ok(ProjectQuotas {
        accounted: state.flags & FS_QUOTA_PDQ_ACCT != 0,
        enforced: state.flags & FS_QUOTA_PDQ_ENFD != 0,
    })
}

/// Set `project`'s block limits on the filesystem of `fs`, in bytes (rounded up to the
/// kernel's 1 KiB quota blocks). Needs CAP_SYS_RESOURCE (EPERM without it).
pub fn set_project_limits(
    fs: BorrowedFd<'_>,
    project: u32,
    hard: u64,
    soft: u64,
) -> io::Result<()> {
    let mut quota = IfDqblk {
        bhardlimit: hard.div_ceil(QIF_DQBLKSIZE),
        bsoftlimit: soft.div_ceil(QIF_DQBLKSIZE),
        valid: QIF_BLIMITS,
        ..IfDqblk::default()
    };
    quotactl(fs, Q_SETQUOTA, project, &mut quota)
}

/// `project`'s usage and limits on the filesystem of `fs`, in bytes.
pub fn project_use(fs: BorrowedFd<'_>, project: u32) -> io::Result<ProjectUse> {
    let mut quota = IfDqblk::default();
    quotactl(fs, Q_GETQUOTA, project, &mut quota)?;
    Ok(ProjectUse {
        used: quota.curspace,
        hard: quota.bhardlimit.saturating_mul(QIF_DQBLKSIZE),
        soft: quota.bsoftlimit.saturating_mul(QIF_DQBLKSIZE),
    })
}

fn get_xattr(dir: BorrowedFd<'_>) -> io::Result<FsXattr> {
    let mut attr = FsXattr::default();
    // SAFETY: FS_IOC_FSGETXATTR writes one `struct fsxattr` into `attr`, which lives for the
    // call.
    let rc = unsafe { libc::ioctl(dir.as_raw_fd(), FS_IOC_FSGETXATTR as _, &mut attr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

/// Give the directory `dir` (an open descriptor, not O_PATH) the project id `project` with
/// `FS_XFLAG_PROJINHERIT`: what is created under it from now on takes the id. What it holds
/// already keeps its own. Needs CAP_FOWNER or the directory's owner, and CAP_SYS_RESOURCE
/// to change an id that is set.
pub fn set_directory_project(dir: BorrowedFd<'_>, project: u32) -> io::Result<()> {
    let mut attr = get_xattr(dir)?;
    attr.projid = project;
    attr.xflags |= FS_XFLAG_PROJINHERIT;
    // SAFETY: FS_IOC_FSSETXATTR reads one `struct fsxattr` from `attr`, which lives for the
    // call.
    let rc = unsafe { libc::ioctl(dir.as_raw_fd(), FS_IOC_FSSETXATTR as _, &attr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
