//! What failed while building the sandbox, and what to do about it.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The setup step an operation of the plan belongs to, with the path a message should name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    PrivateMounts,
    RootTmpfs(PathBuf),
    HostBind(PathBuf),
    Work {
        source: PathBuf,
        workdir: PathBuf,
    },
    /// The task's checkout as an overlay whose upper layer is `upper`.
    Overlay {
        upper: PathBuf,
        workdir: PathBuf,
    },
    /// The task's git directory, bound at `at` (`<workdir>/.git`).
    GitDir {
        source: PathBuf,
        at: PathBuf,
    },
    /// The main repository's object store a checkout borrows from.
    Objects(PathBuf),
    /// A repository a checkout borrows objects from, covered but for its objects.
    Repository(PathBuf),
    Proc,
    Dev(PathBuf),
    Tmp,
    Home(PathBuf),
    RunKeel(PathBuf),
    Writable(PathBuf),
    Hidden(PathBuf),
    PivotRoot(PathBuf),
    ReadOnly(PathBuf),
}

impl Step {
    pub(super) fn error(self, source: io::Error) -> SandboxError {
        match self {
            Step::PrivateMounts => SandboxError::PrivateMounts { source },
            Step::RootTmpfs(path) => SandboxError::RootTmpfs { path, source },
            Step::HostBind(path) => SandboxError::HostBind { path, source },
            Step::Work {
                source: from,
                workdir,
            } => SandboxError::Work {
                path: from,
                workdir,
                source,
            },
            Step::Overlay { upper, workdir } => SandboxError::Overlay {
                upper,
                workdir,
                source,
            },
            Step::GitDir { source: from, at } => SandboxError::GitDir {
                path: from,
                at,
                source,
            },
            Step::Objects(path) => SandboxError::Objects { path, source },
            Step::Repository(path) => SandboxError::Repository { path, source },
            Step::Proc => SandboxError::Proc {
                path: PathBuf::from("/proc"),
                source,
            },
            Step::Dev(path) => SandboxError::Dev { path, source },
            Step::Tmp => SandboxError::Tmp {
                path: PathBuf::from("/tmp"),
                source,
            },
            Step::Home(path) => SandboxError::Home { path, source },
            Step::RunKeel(path) => SandboxError::RunKeel { path, source },
            Step::Writable(path) => SandboxError::Writable { path, source },
            Step::Hidden(path) => SandboxError::Hidden { path, source },
            Step::PivotRoot(path) => SandboxError::PivotRoot { path, source },
            Step::ReadOnly(path) => SandboxError::ReadOnly { path, source },
        }
    }
}

/// Why the sandbox could not be built. The task must then be refused with this message,
/// never run unsandboxed.
#[derive(Debug)]
pub enum SandboxError {
    /// The layout itself is unusable (checked before any mount).
    Layout {
        path: PathBuf,
        problem: String,
    },
    PrivateMounts {
        source: io::Error,
    },
    RootTmpfs {
        path: PathBuf,
        source: io::Error,
    },
    /// A host top-level entry could not be bound (or `/` could not be listed).
    HostBind {
        path: PathBuf,
        source: io::Error,
    },
    /// `path` is the checkout on the host.
    Work {
        path: PathBuf,
        workdir: PathBuf,
        source: io::Error,
    },
    /// `upper` is the checkout's own layer on the host.
    Overlay {
        upper: PathBuf,
        workdir: PathBuf,
        source: io::Error,
    },
    /// `path` is the task's git directory on the host, `at` where it goes.
    GitDir {
        path: PathBuf,
        at: PathBuf,
        source: io::Error,
    },
    /// `path` is an object directory of the main repository.
    Objects {
        path: PathBuf,
        source: io::Error,
    },
    Repository {
        path: PathBuf,
        source: io::Error,
    },
    Proc {
        path: PathBuf,
        source: io::Error,
    },
    Dev {
        path: PathBuf,
        source: io::Error,
    },
    Tmp {
        path: PathBuf,
        source: io::Error,
    },
    Home {
        path: PathBuf,
        source: io::Error,
    },
    /// `path` is the host file or directory bound into `/run/keel` (or `/run`).
    RunKeel {
        path: PathBuf,
        source: io::Error,
    },
    Writable {
        path: PathBuf,
        source: io::Error,
    },
    Hidden {
        path: PathBuf,
        source: io::Error,
    },
    PivotRoot {
        path: PathBuf,
        source: io::Error,
    },
    ReadOnly {
        path: PathBuf,
        source: io::Error,
    },
}

impl SandboxError {
    /// The I/O error underneath, if any.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            SandboxError::Layout { .. } => None,
            SandboxError::PrivateMounts { source }
            | SandboxError::RootTmpfs { source, .. }
            | SandboxError::HostBind { source, .. }
            | SandboxError::Work { source, .. }
            | SandboxError::Overlay { source, .. }
            | SandboxError::GitDir { source, .. }
            | SandboxError::Objects { source, .. }
            | SandboxError::Repository { source, .. }
            | SandboxError::Proc { source, .. }
            | SandboxError::Dev { source, .. }
            | SandboxError::Tmp { source, .. }
            | SandboxError::Home { source, .. }
            | SandboxError::RunKeel { source, .. }
            | SandboxError::Writable { source, .. }
            | SandboxError::Hidden { source, .. }
            | SandboxError::PivotRoot { source, .. }
            | SandboxError::ReadOnly { source, .. } => Some(source),
        }
    }
}

fn is(source: &io::Error, errno: i32) -> bool {
    source.raw_os_error() == Some(errno)
}

impl fmt::Display for SandboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxError::Layout { path, problem } => {
                write!(f, "invalid sandbox: {}: {problem}", path.display())
            }
            // EINVAL: "/" is no mount point, as in a plain chroot (engines pivot_root).
            SandboxError::PrivateMounts { source } if is(source, libc::EINVAL) => write!(
                f,
                "cannot make mounts private: {source}: / is not a mount point (is keel in a \
                 chroot?): run it in a container, or bind-mount its root onto itself first"
            ),
            SandboxError::PrivateMounts { source } => write!(
                f,
                "cannot make mounts private (mount namespaces unavailable?): {source}: run keel \
                 as root, or with CAP_SYS_ADMIN"
            ),
            SandboxError::RootTmpfs { path, source } => write!(
                f,
                "cannot mount the sandbox's root tmpfs on {}: {source}: the directory must exist \
                 on the host (keel creates it before the start) and tmpfs must be mountable",
                path.display()
            ),
            SandboxError::HostBind { path, source } => write!(
                f,
                "cannot bind host {} read-only into the sandbox: {source}: make it readable by \
                 root, or list it in sandbox.hidden",
                path.display()
            ),
            SandboxError::Work {
                path,
                workdir,
                source,
            } => write!(
                f,
                "cannot bind the task's checkout {} read-write at {}: {source}: the checkout \
                 must exist on the host{}",
                path.display(),
                workdir.display(),
                if is(source, libc::ENOENT) {
                    ", and the parent of workdir must exist on the host unless keel creates it \
                     (a workdir under a bound host directory needs that directory there)"
                } else {
                    ""
                }
            ),
            SandboxError::Overlay {
                upper,
                workdir,
                source,
            } => write!(
                f,
                "cannot mount the task's checkout at {} (an overlay whose upper layer is {}): \
                 {source}: overlayfs must be available (modprobe overlay) and the checkout's \
                 upper and work directories on a filesystem it accepts (ext4, xfs, btrfs, \
                 tmpfs)",
                workdir.display(),
                upper.display()
            ),
            SandboxError::GitDir { path, at, source } => write!(
                f,
                "cannot bind the task's git directory {} at {}: {source}: the checkout must \
                 hold a .git directory (keel makes it; was it removed on the host?)",
                path.display(),
                at.display()
            ),
            SandboxError::Objects { path, source } => write!(
                f,
                "cannot bind the main repository's objects {} read-only into the sandbox: \
                 {source}: the checkout borrows them (git alternates); the repository must \
                 stay where it was when the checkout was made",
                path.display()
            ),
            SandboxError::Repository { path, source } => write!(
                f,
                "cannot hide the repository {} from the sandbox (all of it but its objects): \
                 {source}: refusing to run the task with its config and files visible; the \
                 repository must stay where it was when the checkout was made",
                path.display()
            ),
            SandboxError::Proc { source, .. } => write!(
                f,
                "cannot mount a fresh /proc: {source}: keel must run as root (CAP_SYS_ADMIN) in \
                 a new PID namespace; inside a container, /proc may be masked by the runtime \
                 (run it privileged)"
            ),
            SandboxError::Dev { path, source } => write!(
                f,
                "cannot set up {} in the sandbox's /dev: {source}: the host must have it, and \
                 tmpfs and devpts must be mountable",
                path.display()
            ),
            SandboxError::Tmp { source, .. } => write!(
                f,
                "cannot mount a private /tmp: {source}: tmpfs must be mountable (check the \
                 /tmp size cap)"
            ),
            SandboxError::Home { path, source } => {
                write!(
                    f,
                    "cannot mount a private $HOME at {}: {source}",
                    path.display()
                )?;
                if is(source, libc::ENOENT) {
                    write!(
                        f,
                        ": its parent is bound read-only from the host, so the directory must \
                         exist on the host (create it), or set HOME to a path that does"
                    )
                } else {
                    write!(f, ": tmpfs must be mountable (check the $HOME size cap)")
                }
            }
            SandboxError::RunKeel { path, source } => write!(
                f,
                "cannot set up /run/keel ({}): {source}: the task's progress file and \
                 checkpoint directory must exist on the host (keel creates them before the \
                 start)",
                path.display()
            ),
            SandboxError::Writable { path, source } => write!(
                f,
                "cannot bind {} read-write (sandbox.writable): {source}: the path must exist on \
                 the host",
                path.display()
            ),
            SandboxError::Hidden { path, source } => write!(
                f,
                "cannot hide {} (keel's state or sandbox.hidden): {source}: refusing to run \
                 the task with it visible",
                path.display()
            ),
            SandboxError::PivotRoot { path, source } => {
                write!(f, "cannot pivot_root into {}: {source}", path.display())?;
                if is(source, libc::EINVAL) {
                    write!(
                        f,
                        ": the host's / must be a mount point, not an initramfs (rootfs); boot \
                         with a real root filesystem or switch_root to a tmpfs first"
                    )
                } else {
                    write!(f, ": run keel as root, or with CAP_SYS_ADMIN")
                }
            }
            SandboxError::ReadOnly { path, source } => {
                if is(source, libc::ENOSYS) {
                    write!(
                        f,
                        "mount_setattr failed: Linux ≥ 5.12 is required for a read-only sandbox"
                    )
                } else if is(source, libc::EINVAL) {
                    write!(
                        f,
                        "cannot set the sandbox's read-only flags on {}: {source}: it is not a \
                         mount point inside the sandbox (did a symlink on its path change \
                         while the sandbox was built?)",
                        path.display()
                    )
                } else {
                    write!(
                        f,
                        "cannot set the sandbox's read-only flags on {}: {source}: run keel as \
                         root on Linux ≥ 5.12",
                        path.display()
                    )
                }
            }
        }
    }
}

impl std::error::Error for SandboxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io_error()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
