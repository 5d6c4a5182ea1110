//! The task's mount namespace: what the agent sees (DESIGN, "What the agent sees").
//!
//! A pure [`plan`] turns a [`SandboxLayout`] and a listing of the host's `/` into a list of
//! [`MountOp`]s; a [`Mounter`] applies them ([`KernelMounter`] for real, [`RecordingMounter`]
//! in tests); [`build`] does both and names the failed step in a [`SandboxError`].
//!
//! The sandbox root is a fresh tmpfs at `new_root` (a directory under the task's state) made
//! of mountpoints only: every host top-level directory is bound recursively at its own name,
//! top-level symlinks (merged `/usr`) and files are carried over; `/proc` (fresh), `/dev`
//! (a few nodes, a new devpts, a tmpfs `/dev/shm`), `/run` (only `/run/keel`), `/tmp` and
//! `$HOME` (tmpfs) are keel's own. Directories are created only inside tmpfs layers keel
//! mounted, never on the host. Hidden paths are covered wherever a bind shows them. After
//! `pivot_root`, one recursive mount_setattr(2) makes every mount read-only, nosuid and nodev,
//! and the few that must stay writable (or hold devices) get `rdonly` (or `nodev`) cleared.
//!
//! At `workdir` is the task's work directory, or, for a unit with a `repo`, its git checkout:
//! an overlay of the shared base tree under the task's own upper layer (or a bind of a full
//! checkout), the task's git directory bound on its `.git`, and the main repository's object
//! directories bound read-only at their own paths (`crate::checkout` makes all of it).
//!
//! Call [`build`] (or [`setup`]) in the agent's child, after `unshare(CLONE_NEWNS)` and inside
//! the new PID namespace (a fresh procfs shows the caller's), as root, single-threaded,
//! before capabilities are dropped. It changes the current directory (to `/` of the sandbox
//! on success). On error the namespace is half-built: the child must exit, never exec.

mod error;
mod kernel;
mod overlay;
mod planner;
pub mod template;
#[cfg(test)]
mod tests;
mod validate;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

pub use crate::sys::mount::MountAttrs;
pub use error::SandboxError;
pub use kernel::{Idmap, KernelMounter};
pub use overlay::{overlay_data, overlay_data_in, overlay_path_problem};

pub use crate::sandbox::spec::{CheckoutFiles, CheckoutMounts};

/// Where everything comes from and goes to. Host paths are absolute; `workdir`, `home` and
/// the entries of `hidden`, `writable` and `readonly` are paths as the sandbox sees them,
/// which for the last three are also their host paths (binds are made at the same path).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SandboxLayout {
    /// An existing directory on the host (`<state>/tasks/<unit>/run/root`, empty): the new
    /// root's tmpfs is mounted on it, in the child's namespace only.
    pub new_root: PathBuf,
    /// The task's work directory on the host, bound read-write at `workdir` when there is
    /// no `checkout`.
    pub work_source: PathBuf,
    /// The task's git checkout: its files at `workdir` (an overlay, or a bind of a full
    /// checkout), its git directory at `<workdir>/.git`, the main repository's objects
    /// read-only at their own paths.
    pub checkout: Option<CheckoutMounts>,
    /// Where the checkout appears (default `/work`).
    pub workdir: PathBuf,
    /// An existing host file, bound read-write at `/run/keel/progress`.
    pub progress_file: PathBuf,
    /// An existing host directory, bound read-write at `/run/keel/checkpoint`.
    pub checkpoint_source: PathBuf,
    /// `$HOME` inside: a private tmpfs.
    pub home: PathBuf,
    /// Owner (uid, gid) of the `$HOME` tmpfs: the user the agent runs as (`sandbox.user`),
    /// `None` for root.
    pub home_owner: Option<(u32, u32)>,
    /// Size caps, in bytes, of `/tmp` (also `/dev/shm`) and `$HOME`.
    pub tmp_size: u64,
    pub home_size: u64,
    /// keel's state directory and the unit's `sandbox.hidden`: made invisible.
    pub hidden: Vec<PathBuf>,
    /// Host paths covered by an empty directory, the task's own paths inside them bound back
    /// ([`crate::sandbox::spec::SandboxSpec::veiled`]).
    pub veiled: Vec<PathBuf>,
    /// The unit's `sandbox.writable`: host paths bound read-write at the same path.
    pub writable: Vec<PathBuf>,
    /// Host paths bound read-only at the same path even where keel mounts its own (`/run`,
    /// `$HOME`): [`resolv_conf_run_dir`] for one.
    pub readonly: Vec<PathBuf>,
    /// The sandbox is built in a user namespace other than the host's (a daemon that is not
    /// root: [`crate::sys::own_userns`]; a user-namespaced container): the host's mounts are
    /// locked in its mount namespace, so `/sys` is bound with its submounts (the host's
    /// cgroup tree hidden under an empty tmpfs), and overlayfs needs `userxattr`.
    pub in_user_namespace: bool,
    /// The sandbox has a network namespace of its own (`sandbox.network: None | Allow`): its
    /// `/sys` is a fresh sysfs of that namespace, mounted by each attempt (not the host's,
    /// which lists the host's interfaces). `serde(default)`: a spec of an older keel reads.
    #[serde(default)]
    pub own_network: bool,
    /// `network: Allow`: keel's resolv.conf (naming the sandbox's resolver, 198.18.0.2) and
    /// where the host's `/etc/resolv.conf` really is (the sandbox shows it there instead).
    #[serde(default)]
    pub resolver_file: Option<(PathBuf, PathBuf)>,
    /// A unit with secrets: keel's CA bundle (`STATE/network/ca-bundle.pem`: the host's
    /// bundle and keel's CA) and the canonical path of the host's bundle, where the sandbox
    /// shows it instead. `serde(default)`: a layout of an older keel reads.
    #[serde(default)]
    pub ca_bundle: Option<(PathBuf, PathBuf)>,
}

/// One entry of the host's `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RootEntry {
    pub name: String,
    pub kind: RootEntryKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum RootEntryKind {
    Dir,
    /// A symlink and its target as read by readlink(2) (`usr/bin` on merged-/usr hosts).
    Symlink(PathBuf),
    File,
    /// Sockets, fifos, device nodes: not carried into the sandbox.
    Other,
}

/// One step of the mount plan. Before [`MountOp::PivotRoot`] every target is under
/// `new_root` (sources are host paths); after it, paths are the sandbox's own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MountOp {
    /// `mount(NULL, "/", NULL, MS_REC|MS_PRIVATE)`: nothing we mount propagates back to the
    /// host's namespace (mount_namespaces(7)).
    MakeRootPrivate,
    /// A fresh tmpfs, always `nosuid,nodev`; `size` in bytes.
    Tmpfs {
        target: PathBuf,
        size: u64,
        mode: u32,
        noexec: bool,
        owner: Option<(u32, u32)>,
    },
    /// `MS_UNBINDABLE` on the new root, so that a recursive bind of a host directory that
    /// contains it (say `/var` around `/var/lib/keel`) prunes it instead of copying the
    /// sandbox into itself (mount_namespaces(7), "MS_UNBINDABLE").
    MakeUnbindable { target: PathBuf },
    /// A directory inside one of keel's tmpfs layers.
    Mkdir { path: PathBuf, mode: u32 },
    /// An empty file inside one of keel's tmpfs layers: a mountpoint for a file bind.
    MkFile { path: PathBuf },
    /// A directory or an empty file, whichever `like` (a host path) is: the mountpoint of a
    /// `sandbox.writable` path that falls inside a keel tmpfs such as `$HOME`.
    Mountpoint { path: PathBuf, like: PathBuf },
    /// `link` → `target`, inside one of keel's tmpfs layers.
    Symlink { target: PathBuf, link: PathBuf },
    /// `MS_BIND|MS_REC`: the source's whole subtree.
    BindRecursive { source: PathBuf, target: PathBuf },
    /// `MS_BIND`: the one mount at `source`.
    Bind { source: PathBuf, target: PathBuf },
    /// An overlayfs of `lower` (read-only) under `upper` at `target`, `nosuid,nodev`, with
    /// the options of [`overlay_data`].
    Overlay {
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
        target: PathBuf,
        /// Mounted in a user namespace other than the host's ([`overlay_data_in`]).
        in_user_namespace: bool,
    },
    /// A fresh procfs (of the caller's PID namespace), `nosuid,nodev,noexec`.
    Proc { target: PathBuf },
    /// A fresh sysfs (of the caller's network namespace: `/sys/class/net` lists its
    /// interfaces, not the host's), read-only, `nosuid,nodev,noexec`.
    Sysfs { target: PathBuf },
    /// A new devpts instance: `newinstance,ptmxmode=0666,mode=620`, `nosuid,noexec`.
    Devpts { target: PathBuf },
    /// Make `target` invisible: an empty read-only tmpfs (mode 000) over a directory,
    /// `/dev/null` bound over anything else; nothing when it does not exist.
    Hide { target: PathBuf },
    /// `pivot_root` into `new_root` and detach the old root: the host is gone from view.
    PivotRoot { new_root: PathBuf },
    /// mount_setattr(2) with `AT_RECURSIVE`: every mount at and below `target`.
    SetAttrRecursive {
        target: PathBuf,
        set: MountAttrs,
        clear: MountAttrs,
    },
    /// mount_setattr(2) on the one mount at `target`.
    SetAttr {
        target: PathBuf,
        set: MountAttrs,
        clear: MountAttrs,
    },
}

impl MountOp {
    /// The path this operation creates or mounts on (`None` for the propagation change of
    /// the whole namespace).
    pub fn target(&self) -> Option<&Path> {
        match self {
            MountOp::MakeRootPrivate => None,
            MountOp::Tmpfs { target, .. }
            | MountOp::MakeUnbindable { target }
            | MountOp::BindRecursive { target, .. }
            | MountOp::Bind { target, .. }
            | MountOp::Overlay { target, .. }
            | MountOp::Proc { target }
            | MountOp::Sysfs { target }
            | MountOp::Devpts { target }
            | MountOp::Hide { target }
            | MountOp::SetAttrRecursive { target, .. }
            | MountOp::SetAttr { target, .. } => Some(target),
            MountOp::Mkdir { path, .. }
            | MountOp::MkFile { path }
            | MountOp::Mountpoint { path, .. } => Some(path),
            MountOp::Symlink { link, .. } => Some(link),
            MountOp::PivotRoot { new_root } => Some(new_root),
        }
    }
}

fn size_text(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "k")];
    for (unit, suffix) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

impl fmt::Display for MountOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MountOp::MakeRootPrivate => write!(f, "make-private  / (recursive)"),
            MountOp::Tmpfs {
                target,
                size,
                mode,
                noexec,
                owner,
            } => {
                write!(
                    f,
                    "tmpfs         {} size={} mode={mode:04o} nosuid,nodev{}",
                    target.display(),
                    size_text(*size),
                    if *noexec { ",noexec" } else { "" }
                )?;
                if let Some((uid, gid)) = owner {
                    write!(f, " uid={uid},gid={gid}")?;
                }
                Ok(())
            }
            MountOp::MakeUnbindable { target } => {
                write!(f, "unbindable    {}", target.display())
            }
            MountOp::Mkdir { path, mode } => {
                write!(f, "mkdir         {} {mode:04o}", path.display())
            }
            MountOp::MkFile { path } => write!(f, "mkfile        {}", path.display()),
            MountOp::Mountpoint { path, like } => write!(
                f,
                "mountpoint    {} (dir or file, like {})",
                path.display(),
                like.display()
            ),
            MountOp::Symlink { target, link } => {
                write!(
                    f,
                    "symlink       {} -> {}",
                    link.display(),
                    target.display()
                )
            }
            MountOp::BindRecursive { source, target } => {
                write!(
                    f,
                    "rbind         {} -> {}",
                    source.display(),
                    target.display()
                )
            }
            MountOp::Bind { source, target } => {
                write!(
                    f,
                    "bind          {} -> {}",
                    source.display(),
                    target.display()
                )
            }
            MountOp::Overlay {
                lower,
                upper,
                work,
                target,
                in_user_namespace,
            } => write!(
                f,
                "overlay       {} lower={} upper={} work={}{}",
                target.display(),
                lower.display(),
                upper.display(),
                work.display(),
                if *in_user_namespace { " userxattr" } else { "" }
            ),
            MountOp::Proc { target } => write!(f, "proc          {}", target.display()),
            MountOp::Sysfs { target } => write!(f, "sysfs         {} ro", target.display()),
            MountOp::Devpts { target } => write!(
                f,
                "devpts        {} newinstance,ptmxmode=0666,mode=620",
                target.display()
            ),
            MountOp::Hide { target } => write!(f, "hide          {}", target.display()),
            MountOp::PivotRoot { new_root } => write!(
                f,
                "pivot-root    {} (old root detached)",
                new_root.display()
            ),
            MountOp::SetAttrRecursive { target, set, clear } => {
                write!(f, "setattr -R    {}", target.display())?;
                write_attrs(f, *set, *clear)
            }
            MountOp::SetAttr { target, set, clear } => {
                write!(f, "setattr       {}", target.display())?;
                write_attrs(f, *set, *clear)
            }
        }
    }
}

fn write_attrs(f: &mut fmt::Formatter<'_>, set: MountAttrs, clear: MountAttrs) -> fmt::Result {
    if !set.is_empty() {
        write!(f, " +{set}")?;
    }
    if !clear.is_empty() {
        write!(f, " -{clear}")?;
    }
    Ok(())
}

/// Applies mount operations: the kernel, or a recording double.
pub trait Mounter {
    fn apply(&mut self, op: &MountOp) -> Result<(), io::Error>;
}

/// A test double: records every operation it is given and fails, if told to, at one.
#[derive(Debug, Default)]
pub struct RecordingMounter {
    pub ops: Vec<MountOp>,
    fail_at: Option<(usize, i32)>,
}

impl RecordingMounter {
    pub fn new() -> RecordingMounter {
        RecordingMounter::default()
    }

    /// Fail the operation of index `index` (0-based, as in [`plan`]'s output) with `errno`.
    pub fn failing_at(index: usize, errno: i32) -> RecordingMounter {
        RecordingMounter {
            ops: Vec::new(),
            fail_at: Some((index, errno)),
        }
    }
}

impl Mounter for RecordingMounter {
    fn apply(&mut self, op: &MountOp) -> Result<(), io::Error> {
        let index = self.ops.len();
        self.ops.push(op.clone());
        match self.fail_at {
            Some((at, errno)) if at == index => Err(io::Error::from_raw_os_error(errno)),
            _ => Ok(()),
        }
    }
}

/// The mount plan for `layout` over a host whose `/` holds `host_root`. Pure. Assumes a
/// layout that [`build`] validates (absolute paths without `..`, and so on).
pub fn plan(layout: &SandboxLayout, host_root: &[RootEntry]) -> Vec<MountOp> {
    planner::plan_steps(layout, host_root)
        .into_iter()
        .map(|(_, op)| op)
        .collect()
}

/// Validate `layout`, then apply its plan with `mounter`, stopping at the first failure,
/// which names the step that failed and what to do about it. On success the caller's root is
/// the sandbox.
pub fn build(
    layout: &SandboxLayout,
    host_root: &[RootEntry],
    mounter: &mut dyn Mounter,
) -> Result<(), SandboxError> {
    validate::validate(layout, host_root)?;
    for (step, op) in planner::plan_steps(layout, host_root) {
        mounter.apply(&op).map_err(|e| step.error(e))?;
    }
    Ok(())
}

/// [`build`] against the kernel, over the host's current `/`.
pub fn setup(layout: &SandboxLayout) -> Result<(), SandboxError> {
    let host_root = list_host_root().map_err(|source| SandboxError::HostBind {
        path: PathBuf::from("/"),
        source,
    })?;
    build(
        layout,
        &host_root,
        &mut KernelMounter::new(&layout.new_root),
    )
}

/// The namespaces the agent's child unshares with its mount namespace, on every start path
/// (the whole plan, a template, a spare's copy): IPC — its own SysV objects and POSIX message
/// queues, which die with its last process, none of the host's or another task's in reach —
/// and UTS (the host's hostname, copied; the task's to keep). (A network namespace of its own,
/// for `network: None | Allow`, is joined first: `Prepared::enter`.) The shim, which uses no
/// IPC, stays in the host's.
pub fn task_namespaces() -> nix::sched::CloneFlags {
    nix::sched::CloneFlags::CLONE_NEWIPC | nix::sched::CloneFlags::CLONE_NEWUTS
}

/// The directory `/etc/resolv.conf` really lives in, when that is under `/run`
/// (systemd-resolved, resolvconf): the sandbox's `/run` is keel's own, so unless this
/// directory is among [`SandboxLayout::readonly`], a symlinked resolv.conf dangles inside and
/// name resolution fails (resolv.conf(5)). `None` when it is a plain file elsewhere.
pub fn resolv_conf_run_dir() -> Option<PathBuf> {
    let target = std::fs::canonicalize("/etc/resolv.conf").ok()?;
    if target.starts_with("/run") {
        target.parent().map(Path::to_path_buf)
    } else {
        None
    }
}

/// The entries of the host's `/`, sorted by name, without following symlinks. Names that are
/// not UTF-8 are left out (and so not visible in the sandbox).
pub fn list_host_root() -> io::Result<Vec<RootEntry>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir("/")? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            log::warn!(
                "{:?} at / has a non-UTF-8 name: not in the sandbox",
                entry.path()
            );
            continue;
        };
        let file_type = entry.file_type()?;
        let kind = if file_type.is_dir() {
            RootEntryKind::Dir
        } else if file_type.is_symlink() {
            RootEntryKind::Symlink(std::fs::read_link(entry.path())?)
        } else if file_type.is_file() {
            RootEntryKind::File
        } else {
            RootEntryKind::Other
        };
        entries.push(RootEntry { name, kind });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}
