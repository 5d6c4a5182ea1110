//! The mount syscalls the sandbox needs: mount(2) (through nix), umount2(2), pivot_root(2),
//! mount_setattr(2) and openat2(2) with `RESOLVE_IN_ROOT`.
//!
//! Thin and policy-free: what to mount where is decided by `crate::sandbox::mounts`.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::mount::{MntFlags, MsFlags};

/// `MOUNT_ATTR_*` bits of mount_setattr(2), printable as `rdonly|nosuid|nodev`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct MountAttrs(pub u64);

impl MountAttrs {
    pub const NONE: MountAttrs = MountAttrs(0);
    pub const RDONLY: MountAttrs = MountAttrs(libc::MOUNT_ATTR_RDONLY);
    pub const NOSUID: MountAttrs = MountAttrs(libc::MOUNT_ATTR_NOSUID);
    pub const NODEV: MountAttrs = MountAttrs(libc::MOUNT_ATTR_NODEV);
    pub const NOEXEC: MountAttrs = MountAttrs(libc::MOUNT_ATTR_NOEXEC);

    pub const fn union(self, other: MountAttrs) -> MountAttrs {
        MountAttrs(self.0 | other.0)
    }
    pub const fn contains(self, other: MountAttrs) -> bool {
        self.0 & other.0 == other.0
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for MountAttrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (MountAttrs::RDONLY, "rdonly"),
            (MountAttrs::NOSUID, "nosuid"),
            (MountAttrs::NODEV, "nodev"),
            (MountAttrs::NOEXEC, "noexec"),
        ];
        let mut first = true;
        for (bit, name) in names {
            if self.contains(bit) {
                write!(f, "{}{name}", if first { "" } else { "|" })?;
                first = false;
            }
        }
        if first {
            write!(f, "none")?;
        }
        Ok(())
    }
}

fn errno(e: nix::Error) -> io::Error {
    io::Error::from(e)
}

/// `mount(source, target, fstype, flags, data)` for a new filesystem instance (tmpfs, proc,
/// devpts).
pub fn mount_fs(
    source: &str,
    target: &Path,
    fstype: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> io::Result<()> {
    nix::mount::mount(Some(source), target, Some(fstype), flags, data).map_err(errno)
}

/// A bind mount (`MS_BIND`, plus `MS_REC` for the whole subtree). The new mount copies the
/// source mount's flags (mount(2), "Creating a bind mount").
pub fn bind(source: &Path, target: &Path, recursive: bool) -> io::Result<()> {
    let mut flags = MsFlags::MS_BIND;
    if recursive {
        flags |= MsFlags::MS_REC;
    }
    nix::mount::mount(Some(source), target, None::<&str>, flags, None::<&str>).map_err(errno)
}

/// Change the propagation type of `target` (`MS_PRIVATE`, `MS_UNBINDABLE`, with `MS_REC` for
/// the subtree): mount(2), "Changing the propagation type of an existing mount".
pub fn set_propagation(target: &Path, flags: MsFlags) -> io::Result<()> {
    nix::mount::mount(None::<&str>, target, None::<&str>, flags, None::<&str>).map_err(errno)
}

/// Make the current directory the root of this mount namespace and detach the old root, with
/// the `pivot_root(".", ".")` idiom of pivot_root(2) (NOTES): the old root ends up mounted on
/// top of the new one at ".", where `umount2(".", MNT_DETACH)` removes it, so no `put_old`
/// directory is needed. Then `chdir("/")`.
pub fn pivot_root_to_cwd() -> io::Result<()> {
    nix::unistd::pivot_root(".", ".").map_err(errno)?;
    nix::mount::umount2(".", MntFlags::MNT_DETACH).map_err(errno)?;
    nix::unistd::chdir("/").map_err(errno)
}

/// umount2(2) of the mount at `target`; `detach` (`MNT_DETACH`): lazily, when still busy.
pub fn unmount(target: &Path, detach: bool) -> io::Result<()> {
    let flags = if detach {
        MntFlags::MNT_DETACH
    } else {
        MntFlags::empty()
    };
    nix::mount::umount2(target, flags).map_err(errno)
}

pub fn chdir(path: &Path) -> io::Result<()> {
    nix::unistd::chdir(path).map_err(errno)
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: path contains a NUL byte", path.display()),
        )
    })
}

/// mount_setattr(2) on the mount at `path` (which must be a mount's root), or on the whole
/// tree below it with `recursive` (`AT_RECURSIVE`). Linux ≥ 5.12; ENOSYS before.
pub fn mount_setattr(
    path: &Path,
    recursive: bool,
    set: MountAttrs,
    clear: MountAttrs,
) -> io::Result<()> {
    let path = c_path(path)?;
    raw_mount_setattr(libc::AT_FDCWD, &path, 0, recursive, (set, clear, 0), None)
}

/// mount_setattr(2) at `dirfd`/`path` with `flags` (plus `AT_RECURSIVE` for `recursive`):
/// attributes to set and clear, and a propagation type (`MS_PRIVATE`…, 0 to leave it); with
/// `idmap`, `MOUNT_ATTR_IDMAP` with that user namespace.
fn raw_mount_setattr(
    dirfd: RawFd,
    path: &std::ffi::CStr,
    flags: libc::c_uint,
    recursive: bool,
    (set, clear, propagation): (MountAttrs, MountAttrs, u64),
    idmap: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: set.0 | idmap.map_or(0, |_| libc::MOUNT_ATTR_IDMAP),
        attr_clr: clear.0,
        propagation,
        userns_fd: idmap.map_or(0, |fd| fd.as_raw_fd() as u64),
    };
    let mut flags = flags;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `path` is a NUL-terminated string and `attr` a fully initialised mount_attr,
    // both alive for the duration of the call; the size passed is that of the struct
    // (MOUNT_ATTR_SIZE_VER0). The kernel only reads them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// openat2(2) of `path` below the directory `root` with `RESOLVE_IN_ROOT`: every `..` and
/// every absolute symlink met on the way is resolved as if `root` were `/` — as the sandbox
/// itself will see the path after pivot_root. `path` is relative to `root` ("." for root).
/// Linux ≥ 5.6.
/// An O_PATH descriptor of `path` (absolute, from the current root) that refuses to follow
/// any symlink on the way (openat2(2) `RESOLVE_NO_SYMLINKS`): a directory an agent could write
/// to in an earlier attempt can never redirect a bind or a remount elsewhere.
pub fn open_no_symlinks(path: &Path) -> io::Result<OwnedFd> {
    let cpath = c_path(path)?;
    // SAFETY: open_how is a plain C struct of integers; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (OFlag::O_PATH | OFlag::O_CLOEXEC).bits() as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `cpath` is NUL-terminated and `how` fully initialised, both alive for the call;
    // the size passed is that of the struct. The kernel returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            cpath.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::ELOOP) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} goes through a symlink: give its real path (symlinks are refused so that nothing written in an earlier attempt can redirect a mount)",
                    path.display()
                ),
            ));
        }
        return Err(error);
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub fn open_in_root(root: BorrowedFd<'_>, path: &Path, flags: OFlag) -> io::Result<OwnedFd> {
    let cpath = c_path(path)?;
    // SAFETY: open_how is a plain C struct of integers (and libc marks it non-exhaustive, so
    // it cannot be built with a struct expression); all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | OFlag::O_CLOEXEC).bits() as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `cpath` is NUL-terminated and `how` fully initialised, both alive for the call;
    // the size passed is that of the struct, as openat2(2) requires. The kernel only reads
    // them and returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            cpath.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The `/proc/self/fd/N` path of a descriptor: mount(2) given it as a target follows the
/// magic link to exactly the object the descriptor names (proc(5), /proc/pid/fd), so a
/// target found with [`open_in_root`] cannot be swapped for another path in between.
pub fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Is the directory behind `fd` on a tmpfs? (fstatfs(2), `TMPFS_MAGIC`.)
pub fn is_tmpfs(fd: &OwnedFd) -> io::Result<bool> {
    let stat = nix::sys::statfs::fstatfs(fd).map_err(errno)?;
    Ok(stat.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

/// open_tree(2) with `OPEN_TREE_CLONE` of the mount at descriptor `source` (an O_PATH fd of a
/// directory or file): a detached copy of that one mount (a bind mount not yet attached
/// anywhere), which survives a change of mount namespace and is attached with
/// [`move_mount_onto`]. Linux ≥ 5.2.
pub fn open_tree_clone(source: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    open_tree(source, false)
}

/// open_tree(2) `OPEN_TREE_CLONE` of `source`, with `AT_RECURSIVE` for `recursive` (every
/// mount below it too).
pub fn clone_mount(source: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    open_tree(source, recursive)
}

/// open_tree(2) `OPEN_TREE_CLONE` of `source`, with `AT_RECURSIVE` for `recursive`.
fn open_tree(source: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    let empty = c"";
    let mut flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as u32;
    if recursive {
        flags |= libc::AT_RECURSIVE as u32;
    }
    // SAFETY: `source` is a live descriptor, `empty` a NUL-terminated string; the kernel
    // returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            source.as_raw_fd(),
            empty.as_ptr(),
            flags,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open_tree returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// mount_setattr(2) on the (detached or attached) mount `mount` itself (`AT_EMPTY_PATH`), or
/// on the whole tree below it with `recursive` (`AT_RECURSIVE`); `private` also makes it
/// `MS_PRIVATE` (a clone of a shared host mount would otherwise join its peer group, and
/// mounts made on the host below it would show up in the sandbox: mount_namespaces(7)).
pub fn mount_setattr_fd(
    mount: BorrowedFd<'_>,
    recursive: bool,
    (set, clear): (MountAttrs, MountAttrs),
    private: bool,
) -> io::Result<()> {
    let flags = libc::AT_EMPTY_PATH as libc::c_uint;
    let propagation = if private { libc::MS_PRIVATE } else { 0 };
    raw_mount_setattr(
        mount.as_raw_fd(),
        c"",
        flags,
        recursive,
        (set, clear, propagation),
        None,
    )
}

/// A detached clone of the mount at `source` (recursive: with every mount below it),
/// `MS_PRIVATE`, `nosuid,nodev`, idmapped with the user namespace `userns`
/// (mount_setattr(2) `MOUNT_ATTR_IDMAP`): through it, a file the host sees owned by uid N is
/// owned by the namespace's N, and what the namespace's N creates is stored as N — on disk
/// nothing changes owner. With `read_only` every mount of it is read-only; without, only its
/// top one is writable (the mounts below stay read-only, as the full plan leaves them). The
/// filesystem must support idmapped mounts (ext4, xfs, btrfs, tmpfs: EINVAL otherwise).
/// Linux ≥ 5.12.
pub fn idmapped_clone(
    source: BorrowedFd<'_>,
    userns: BorrowedFd<'_>,
    recursive: bool,
    read_only: bool,
) -> io::Result<OwnedFd> {
    let clone = open_tree(source, recursive)?;
    let set = MountAttrs::NOSUID
        .union(MountAttrs::NODEV)
        .union(MountAttrs::RDONLY);
    let at = libc::AT_EMPTY_PATH as libc::c_uint;
    raw_mount_setattr(
        clone.as_raw_fd(),
        c"",
        at,
        recursive,
        (set, MountAttrs::NONE, libc::MS_PRIVATE),
        Some(userns),
    )?;
    if !read_only {
        let writable = (MountAttrs::NONE, MountAttrs::RDONLY, 0);
        raw_mount_setattr(clone.as_raw_fd(), c"", at, false, writable, None)?;
    }
    Ok(clone)
}

/// move_mount(2) of the detached mount `mount` onto the path `target` (relative to the current
/// directory, or a `/proc/self/fd/N` of [`fd_path`]: move_mount does not take that magic
/// link — EINVAL, measured on 6.18 — so descriptor N itself is the target then).
pub fn move_mount_to(mount: BorrowedFd<'_>, target: &Path) -> io::Result<()> {
    let by_fd = target
        .strip_prefix("/proc/self/fd")
        .ok()
        .and_then(|n| n.to_str()?.parse::<RawFd>().ok());
    let (to_dir, to_path, flags) = match by_fd {
        Some(fd) => (
            fd,
            c"".to_owned(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
        ),
        None => (
            libc::AT_FDCWD,
            c_path(target)?,
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        ),
    };
    raw_move_mount(mount, (to_dir, &to_path), flags)
}

/// move_mount(2) of the detached mount `mount` onto the directory or file `target` (an O_PATH
/// descriptor: no path is resolved again).
pub fn move_mount_onto(mount: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    raw_move_mount(
        mount,
        (target.as_raw_fd(), c""),
        libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
    )
}

/// move_mount(2) of `mount` (`MOVE_MOUNT_F_EMPTY_PATH`) to `to` (a directory descriptor or
/// AT_FDCWD, and a path), with `flags`.
fn raw_move_mount(
    mount: BorrowedFd<'_>,
    (to_dir, to_path): (RawFd, &std::ffi::CStr),
    flags: libc::c_uint,
) -> io::Result<()> {
    let empty = c"";
    // SAFETY: a live descriptor (and `to_dir`, a descriptor the caller holds open, or
    // AT_FDCWD) and two NUL-terminated strings alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mount.as_raw_fd(),
            empty.as_ptr(),
            to_dir,
            to_path.as_ptr(),
            flags,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
