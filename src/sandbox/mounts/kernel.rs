//! The real [`Mounter`]: applies each [`MountOp`] with the syscalls of `crate::sys::mount`.
//!
//! Before the pivot every target lies under `new_root`, and no symlink on the way may lead
//! out of it (a host `/home/x` → `/data/x`, a state directory behind a symlink): the sandbox
//! will resolve that path inside its root, so the mount must land there too. Two ways:
//!
//! - a path made only of what this mounter created itself (directories and files in its own
//!   tmpfs layers) and of mount roots is free of symlinks: it is used as is, relative to the
//!   current directory, which is the new root from its tmpfs's mount on. That is most of the
//!   plan, and costs one syscall an operation;
//! - any other path is resolved with openat2(2) `RESOLVE_IN_ROOT` (symlinks resolve as if
//!   `new_root` were `/`), and the mount made on `/proc/self/fd/N` of the result.
//!
//! Files and directories are only ever created inside a tmpfs this mounter mounted (or, by
//! the slow way, one that fstatfs(2) says is a tmpfs): never on the host, whatever the plan.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, AT_FDCWD};
use nix::mount::MsFlags;
use nix::sys::stat::{Mode, SFlag};

use super::planner::under;
use super::{MountOp, Mounter};
use crate::sys::mount as sys;

/// What this mounter knows a path (relative to the new root) to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// A directory or file it created.
    Created,
    /// The root of a tmpfs it mounted.
    Tmpfs,
    /// The root of another mount it made (a bind: host content below).
    Mount,
}

/// Applies a plan to the kernel. Create it with the layout's `new_root`. It changes the
/// current directory (to the new root, then `/` after the pivot).
pub struct KernelMounter {
    new_root: PathBuf,
    /// The new root's tmpfs, opened once it is mounted (for openat2).
    root: Option<OwnedFd>,
    known: HashMap<PathBuf, Known>,
    /// The current directory is the new root's tmpfs.
    in_root: bool,
    pivoted: bool,
    /// The task's user namespace, and the host paths bound through mounts idmapped with it.
    idmap: Option<Idmap>,
}

/// The task's own files, bound idmapped ([`sys::idmapped_clone`]): the agent, root of the
/// task's user namespace, owns what the host's root owns there, and what it writes is stored
/// as the host's root's. The checkout overlay's base tree (its lower layer) too, read-only.
pub struct Idmap {
    pub userns: OwnedFd,
    /// Bind sources (host paths) that are the task's own.
    pub own: Vec<PathBuf>,
}

/// Where to point a syscall at: a path, and the descriptor it names if any (kept open as
/// long as the path is used).
struct Place {
    path: PathBuf,
    _fd: Option<OwnedFd>,
}

fn refuse(message: String) -> io::Error {
    io::Error::other(message)
}

fn errno(e: nix::Error) -> io::Error {
    io::Error::from(e)
}

impl KernelMounter {
    pub fn new(new_root: &Path) -> KernelMounter {
        KernelMounter {
            new_root: new_root.to_path_buf(),
            root: None,
            known: HashMap::new(),
            in_root: false,
            pivoted: false,
            idmap: None,
        }
    }

    /// Bind the task's own files (and the base tree of its checkout) idmapped with its user
    /// namespace: [`Idmap`].
    pub fn with_idmap(mut self, idmap: Idmap) -> KernelMounter {
        self.idmap = Some(idmap);
        self
    }

    /// The user namespace a bind of `source` is idmapped with, if it is one of the task's own.
    fn idmap_for(&self, source: &Path) -> Option<std::os::fd::BorrowedFd<'_>> {
        let idmap = self.idmap.as_ref()?;
        idmap
            .own
            .iter()
            .any(|own| own == source)
            .then(|| idmap.userns.as_fd())
    }

    /// `target` relative to the new root ("" for the root itself).
    fn relative<'t>(&self, target: &'t Path) -> io::Result<&'t Path> {
        target.strip_prefix(&self.new_root).map_err(|_| {
            refuse(format!(
                "{} is outside the sandbox root {}: refusing to touch the host",
                target.display(),
                self.new_root.display()
            ))
        })
    }

    /// Is every component of `rel` something this mounter created or mounted on? Then it
    /// holds no symlink and can be used as a path relative to the new root.
    fn trusted(&self, rel: &Path) -> bool {
        self.in_root
            && rel
                .ancestors()
                .all(|a| a == Path::new("") || self.known.contains_key(a))
    }

    /// May this mounter create entries in directory `rel`? Only in a tmpfs of its own.
    fn creatable(&self, rel: &Path) -> bool {
        if !self.trusted(rel) {
            return false;
        }
        for ancestor in rel.ancestors() {
            match self.known.get(ancestor) {
                Some(Known::Created) => continue,
                Some(Known::Tmpfs) => return true,
                Some(Known::Mount) => return false,
                None => return ancestor == Path::new(""),
            }
        }
        false
    }

    /// Record a mount at `rel`: what this mounter created below it is out of view.
    fn mounted(&mut self, rel: &Path, known: Known) {
        self.known.retain(|path, _| !under(path, rel));
        self.known.insert(rel.to_path_buf(), known);
    }

    /// The path to give a syscall for `target`, before or after the pivot.
    /// mount_setattr(2) on the mount at `target`. After the pivot, on the descriptor itself
    /// (`AT_EMPTY_PATH`): a sandbox template has no /proc for a `/proc/self/fd` path.
    fn set_attributes(
        &mut self,
        target: &Path,
        recursive: bool,
        set: sys::MountAttrs,
        clear: sys::MountAttrs,
    ) -> io::Result<()> {
        if self.pivoted {
            let fd = sys::open_no_symlinks(target)?;
            return sys::mount_setattr_fd(fd.as_fd(), recursive, (set, clear), false);
        }
        let place = self.place(target)?;
        sys::mount_setattr(&place.path, recursive, set, clear)
    }

    fn place(&mut self, target: &Path) -> io::Result<Place> {
        if self.pivoted {
            // After the pivot the agent's earlier attempts may have left symlinks in writable
            // directories: a remount goes exactly where the plan says, or nowhere.
            let fd = sys::open_no_symlinks(target)?;
            return Ok(Place {
                path: sys::fd_path(&fd),
                _fd: Some(fd),
            });
        }
        if target == self.new_root {
            return Ok(Place {
                path: target.to_path_buf(),
                _fd: None,
            });
        }
        let rel = self.relative(target)?;
        if self.trusted(rel) {
            return Ok(Place {
                path: rel.to_path_buf(),
                _fd: None,
            });
        }
        let fd = self.open_in_root(rel)?;
        Ok(Place {
            path: sys::fd_path(&fd),
            _fd: Some(fd),
        })
    }

    /// An O_PATH descriptor of `rel`, resolved inside the new root.
    fn open_in_root(&mut self, rel: &Path) -> io::Result<OwnedFd> {
        if self.root.is_none() {
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            let fd = nix::fcntl::open(&self.new_root, flags, Mode::empty()).map_err(errno)?;
            self.root = Some(fd);
        }
        let root = self.root.as_ref().expect("opened above");
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        sys::open_in_root(root.as_fd(), rel, OFlag::O_PATH)
    }

    /// Create `path` with `create(dirfd, name)`, in a tmpfs only. Returns whether the new
    /// entry may be trusted (it was created the fast way, in a known tmpfs).
    fn create(
        &mut self,
        path: &Path,
        create: impl FnOnce(Option<&OwnedFd>, &Path) -> nix::Result<()>,
    ) -> io::Result<bool> {
        let rel = self.relative(path)?.to_path_buf();
        if self.pivoted {
            return Err(refuse(format!(
                "{}: cannot create after pivot_root",
                path.display()
            )));
        }
        let (Some(parent), Some(_)) = (rel.parent(), rel.file_name()) else {
            return Err(refuse(format!("{}: nothing to create", path.display())));
        };
        if self.creatable(parent) {
            create(None, &rel).map_err(errno)?;
            return Ok(true);
        }
        let parent_fd = self.open_in_root(parent)?;
        if !sys::is_tmpfs(&parent_fd)? {
            return Err(refuse(format!(
                "refusing to create {}: its parent is not one of keel's tmpfs layers (it would \
                 be created on the host)",
                path.display()
            )));
        }
        let name = Path::new(rel.file_name().expect("checked above"));
        create(Some(&parent_fd), name).map_err(errno)?;
        Ok(false)
    }

    fn mkdir(&mut self, path: &Path, mode: u32) -> io::Result<()> {
        let mode = Mode::from_bits_truncate(mode);
        let fast = self.create(path, |dir, name| match dir {
            Some(dir) => nix::sys::stat::mkdirat(dir, name, mode),
            None => nix::sys::stat::mkdirat(AT_FDCWD, name, mode),
        })?;
        self.note_created(path, fast)
    }

    /// An empty regular file, with mknodat(2) (`S_IFREG` needs no privilege and, unlike
    /// open(O_CREAT), leaves no descriptor to close).
    fn mkfile(&mut self, path: &Path) -> io::Result<()> {
        let (kind, mode) = (SFlag::S_IFREG, Mode::from_bits_truncate(0o644));
        let fast = self.create(path, |dir, name| match dir {
            Some(dir) => nix::sys::stat::mknodat(dir, name, kind, mode, 0),
            None => nix::sys::stat::mknodat(AT_FDCWD, name, kind, mode, 0),
        })?;
        self.note_created(path, fast)
    }

    fn note_created(&mut self, path: &Path, fast: bool) -> io::Result<()> {
        if fast {
            let rel = self.relative(path)?.to_path_buf();
            self.known.insert(rel, Known::Created);
        }
        Ok(())
    }

    /// Mount with `mount(place)` on `target`, then record what now shows there.
    fn mount_on(
        &mut self,
        target: &Path,
        known: Known,
        mount: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<()> {
        let place = self.place(target)?;
        mount(&place.path)?;
        if target == self.new_root {
            // The tmpfs now over the new root: work from inside it. A descriptor opened
            // before would name the directory underneath.
            self.root = None;
            sys::chdir(&self.new_root)?;
            self.in_root = true;
            self.known.clear();
        } else if !self.pivoted {
            if place._fd.is_none() {
                let rel = self.relative(target)?.to_path_buf();
                self.mounted(&rel, known);
            } else {
                // Resolved through a symlink, maybe: where it landed is not known, so
                // nothing below it can be trusted any more.
                self.known.clear();
            }
        }
        Ok(())
    }

    /// Bind `source` (with the mounts below it for `recursive`) at `target`: through a clone
    /// idmapped with the task's user namespace when it is one of the task's own files.
    fn bind_source(&mut self, source: &Path, target: &Path, recursive: bool) -> io::Result<()> {
        let opened = sys::open_no_symlinks(source)?;
        if let Some(userns) = self.idmap_for(source) {
            let clone = sys::idmapped_clone(opened.as_fd(), userns, recursive, false)?;
            return self.mount_on(target, Known::Mount, |at| {
                sys::move_mount_to(clone.as_fd(), at)
            });
        }
        let from = sys::fd_path(&opened);
        self.mount_on(target, Known::Mount, |at| sys::bind(&from, at, recursive))
    }

    /// The checkout's overlay with its base tree (`lower`) idmapped: the base tree's clone is
    /// attached at `target` first, and the overlay (`mount`, given the absolute path of that
    /// clone as its lower layer) mounted over it. The upper layer is not idmapped: overlayfs
    /// copies up with the credentials of whoever mounted it (the host's root here, so that
    /// `redirect_dir` keeps its trusted xattrs), which an idmapped upper layer could not
    /// store; the files there belong to the task's ids instead (docs/sandbox.md).
    fn idmapped_overlay(
        &mut self,
        target: &Path,
        lower: &Path,
        userns: OwnedFd,
        mount: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<()> {
        let opened = sys::open_no_symlinks(lower)?;
        let clone = sys::idmapped_clone(opened.as_fd(), userns.as_fd(), false, true)?;
        let rel = self.relative(target)?.to_path_buf();
        if self.pivoted || !self.trusted(&rel) {
            return Err(refuse(format!(
                "{}: the checkout's mountpoint must be one keel made in its own root",
                target.display()
            )));
        }
        self.mount_on(target, Known::Mount, |at| {
            sys::move_mount_to(clone.as_fd(), at)?;
            Ok(())
        })?;
        // The clone's root, through the host path of the new root (which crosses mounts; a
        // /proc/self/fd path would name the directory under the clone).
        let lower_at = self.new_root.join(&rel);
        mount(&lower_at)?;
        Ok(())
    }

    /// Hide `target`: an empty read-only tmpfs over a directory, /dev/null over anything
    /// else. A path that does not exist is hidden already.
    fn hide(&mut self, target: &Path) -> io::Result<()> {
        let rel = self.relative(target)?.to_path_buf();
        let fd = match self.open_in_root(&rel) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            other => other?,
        };
        let path = sys::fd_path(&fd);
        let stat = nix::sys::stat::fstat(&fd).map_err(errno)?;
        self.known.clear();
        if stat.st_mode & libc::S_IFMT == libc::S_IFDIR {
            let flags =
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            sys::mount_fs("tmpfs", &path, "tmpfs", flags, Some("size=4k,mode=000"))
        } else {
            sys::bind(Path::new("/dev/null"), &path, false)
        }
    }
}

fn tmpfs_data(size: u64, mode: u32, owner: Option<(u32, u32)>) -> String {
    let mut data = format!("size={size},mode={mode:04o}");
    if let Some((uid, gid)) = owner {
        data.push_str(&format!(",uid={uid},gid={gid}"));
    }
    data
}

impl Mounter for KernelMounter {
    fn apply(&mut self, op: &MountOp) -> io::Result<()> {
        match op {
            MountOp::MakeRootPrivate => {
                sys::set_propagation(Path::new("/"), MsFlags::MS_REC | MsFlags::MS_PRIVATE)
            }
            MountOp::Tmpfs { target, .. } => {
                self.mount_on(target, Known::Tmpfs, |at| mount_fresh(op, at, false))
            }
            MountOp::MakeUnbindable { target } => {
                let place = self.place(target)?;
                sys::set_propagation(&place.path, MsFlags::MS_UNBINDABLE)
            }
            MountOp::Mkdir { path, mode } => self.mkdir(path, *mode),
            MountOp::MkFile { path } => self.mkfile(path),
            MountOp::Mountpoint { path, like } => {
                // stat(2), following symlinks: the bind will show what `like` points to.
                if std::fs::metadata(like)?.is_dir() {
                    self.mkdir(path, 0o755)
                } else {
                    self.mkfile(path)
                }
            }
            MountOp::Symlink { target, link } => {
                // Never trusted as a path component: it is a symlink.
                self.create(link, |dir, name| match dir {
                    Some(dir) => nix::unistd::symlinkat(target, dir, name),
                    None => nix::unistd::symlinkat(target, AT_FDCWD, name),
                })
                .map(drop)
            }
            MountOp::BindRecursive { source, target } => self.bind_source(source, target, true),
            MountOp::Bind { source, target } => self.bind_source(source, target, false),
            MountOp::Overlay {
                lower,
                upper,
                work,
                target,
                in_user_namespace,
            } => {
                let in_user_namespace = *in_user_namespace;
                let data = super::overlay_data_in(lower, upper, work, in_user_namespace)
                    .map_err(|problem| io::Error::new(io::ErrorKind::InvalidInput, problem))?;
                let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
                if let Some(idmap) = &self.idmap {
                    return self.idmapped_overlay(target, lower, idmap.userns.try_clone()?, |at| {
                        let data = super::overlay_data_in(at, upper, work, in_user_namespace)
                            .map_err(|problem| {
                                io::Error::new(io::ErrorKind::InvalidInput, problem)
                            })?;
                        sys::mount_fs("overlay", at, "overlay", flags, Some(&data))
                    });
                }
                self.mount_on(target, Known::Mount, |at| {
                    sys::mount_fs("overlay", at, "overlay", flags, Some(&data))
                })
            }
            MountOp::Proc { target } | MountOp::Devpts { target } | MountOp::Sysfs { target } => {
                self.mount_on(target, Known::Mount, |at| mount_fresh(op, at, false))
            }
            MountOp::Hide { target } => self.hide(target),
            MountOp::PivotRoot { new_root } => {
                sys::chdir(new_root)?;
                self.root = None;
                sys::pivot_root_to_cwd()?;
                self.pivoted = true;
                self.known.clear();
                Ok(())
            }
            MountOp::SetAttrRecursive { target, set, clear } => {
                self.set_attributes(target, true, *set, *clear)
            }
            MountOp::SetAttr { target, set, clear } => {
                self.set_attributes(target, false, *set, *clear)
            }
        }
    }
}

/// Mount the new filesystem instance of `op` (tmpfs, proc or devpts) at `at`, with the flags
/// the plan gives it; `read_only`: then make that mount (not its filesystem) read-only, as
/// the plan's recursive setattr leaves a proc mounted before it (a sandbox template's attempt
/// mounts its proc after). Other operations: `EINVAL`.
pub(super) fn mount_fresh(op: &MountOp, at: &Path, read_only: bool) -> io::Result<()> {
    match op {
        MountOp::Tmpfs {
            size,
            mode,
            noexec,
            owner,
            ..
        } => {
            let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
            if *noexec {
                flags |= MsFlags::MS_NOEXEC;
            }
            let data = tmpfs_data(*size, *mode, *owner);
            sys::mount_fs("tmpfs", at, "tmpfs", flags, Some(&data))?;
        }
        MountOp::Proc { .. } => {
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            // hidepid=ptraceable (proc(5)): a process the reader may not ptrace is not
            // listed. The agent, without capabilities, may not ptrace its shim (which has
            // them, and stays in the host's mount namespace): /proc/1 — its mountinfo,
            // cmdline and root — is out of the agent's sight, its own processes are not.
            sys::mount_fs("proc", at, "proc", flags, Some("hidepid=ptraceable"))?;
        }
        MountOp::Sysfs { .. } => {
            let flags =
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            sys::mount_fs("sysfs", at, "sysfs", flags, None)?;
        }
        MountOp::Devpts { .. } => {
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
            let data = "newinstance,ptmxmode=0666,mode=620";
            sys::mount_fs("devpts", at, "devpts", flags, Some(data))?;
        }
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    }
    if read_only {
        sys::mount_setattr(at, false, sys::MountAttrs::RDONLY, sys::MountAttrs::NONE)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
