//! Sandbox templates: the read-only host view built once, copied per attempt.
//!
//! Most of a sandbox is the same for every attempt of every task of one shape (same
//! `workdir`, `$HOME`, hidden, writable and read-only paths, over the same host): the root
//! tmpfs with the host's directories bound in, `/dev`, the hidden paths, all read-only. Built
//! per attempt that is ~60 mount operations (~2 ms). A template is that part, built once in a
//! mount namespace of its own that the daemon keeps open; an attempt joins it (setns(2)),
//! copies it (unshare(2) `CLONE_NEWNS` copies every mount of the namespace in one call, as a
//! private copy: mount_namespaces(7)), and mounts only what is its own: a fresh `/proc` for its
//! PID namespace, fresh `/tmp`, `$HOME`, `/dev/shm`, a new devpts instance, and its work
//! directory, progress file and checkpoint directory (cloned from the host with open_tree(2)
//! before the setns, attached with move_mount(2) after it). The result is the same mount table
//! the full plan builds: [`attempt_on_template`] compares the two plans operation by
//! operation and refuses a layout where they differ (a checkout, a writable path inside
//! `$HOME`, a hidden path inside the work directory) — those take the full plan.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::error::Step;
use super::kernel::mount_fresh;
use super::planner::{plan_steps, under};
use super::{KernelMounter, MountAttrs, MountOp, Mounter, RootEntry, SandboxLayout};
use crate::sys::mount as sys;

/// The per-task sources a template leaves out, as placeholders in its layout.
const PLACEHOLDER_WORK: &str = "work";
const PLACEHOLDER_PROGRESS: &str = "progress";
const PLACEHOLDER_CHECKPOINT: &str = "checkpoint";
/// A template build (~3 ms) that takes longer than this is given up (a hung host mount): the
/// attempt builds its sandbox in full, in its own child.
const BUILD_DEADLINE_MS: u64 = 2000;

/// Why an attempt could not be built on its template.
#[derive(Debug)]
pub enum EnterError {
    /// Before the setns: nothing changed.
    Unjoined(String),
    /// In the template's namespace: the child must not go on.
    Failed(String),
}

/// What an attempt mounts itself on a copy of its template, in sandbox paths.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttemptOnTemplate {
    /// A key naming the template's shape (equal layouts but for the per-attempt parts, over
    /// the same host): attempts with equal keys share a template.
    pub key: u64,
    /// The shape alone (the template's mounts, without the host's state): a template of the
    /// same shape but another key is out of date.
    pub shape: u64,
    /// The host's state as every shape sees it (its mount table and the entries of `/`; the
    /// layout's own paths are in `key` only): templates of another are out of date.
    pub host: u64,
    /// Fresh filesystems (proc, tmpfs, devpts), in plan order, at sandbox paths.
    fresh: Vec<MountOp>,
    /// Host sources bound at sandbox paths (the work directory, progress file, checkpoint).
    binds: Vec<(PathBuf, PathBuf)>,
    /// Host trees bound at their own paths with every mount below them (`sandbox.writable`):
    /// per attempt too, so that they can be idmapped with the task's user namespace.
    #[serde(default)]
    tree_binds: Vec<(PathBuf, PathBuf)>,
}

/// The layout a template of `layout`'s shape is built from, in `dir` (its root and
/// placeholders for the per-task sources).
pub fn template_layout(layout: &SandboxLayout, dir: &Path) -> SandboxLayout {
    SandboxLayout {
        new_root: dir.join("root"),
        work_source: dir.join(PLACEHOLDER_WORK),
        progress_file: dir.join(PLACEHOLDER_PROGRESS),
        checkpoint_source: dir.join(PLACEHOLDER_CHECKPOINT),
        ..layout.clone()
    }
}

/// How `layout`'s attempt goes on a template, or `None` when it cannot (its plan differs from
/// the template's in more than the per-attempt mounts). `host_state`: what identifies the host
/// view a template snapshots — its mount table and the identity of every path the plan binds
/// or hides ([`host_state`]); part of the key.
pub fn attempt_on_template(
    layout: &SandboxLayout,
    host_root: &[RootEntry],
    host_state: &str,
) -> Option<AttemptOnTemplate> {
    if layout.checkout.is_some() || super::validate::validate(layout, host_root).is_err() {
        return None;
    }
    let probe_dir = Path::new("/keel-template");
    let template = template_layout(layout, probe_dir);
    let attempt_plan = plan_steps(layout, host_root);
    let template_plan = plan_steps(&template, host_root);
    let own_sources: Vec<&PathBuf> = [
        &layout.work_source,
        &layout.progress_file,
        &layout.checkpoint_source,
    ]
    .into_iter()
    .chain(&layout.writable)
    .collect();
    let (attempt_rest, fresh, binds, tree_binds) =
        split(&attempt_plan, &layout.new_root, &own_sources)?;
    let template_sources: Vec<&PathBuf> = [
        &template.work_source,
        &template.progress_file,
        &template.checkpoint_source,
    ]
    .into_iter()
    .chain(&template.writable)
    .collect();
    let (template_rest, _, template_binds, _) =
        split(&template_plan, &template.new_root, &template_sources)?;
    // The same mount table but for what each attempt mounts itself.
    let same = attempt_rest.len() == template_rest.len()
        && attempt_rest
            .iter()
            .zip(&template_rest)
            .all(|(a, t)| a.1 == t.1)
        && binds
            .iter()
            .map(|b| &b.1)
            .eq(template_binds.iter().map(|b| &b.1));
    if !same {
        return None;
    }
    // The host as every shape sees it (its mount table, the entries of `/`): templates made
    // of another are out of date, whatever their shape.
    let mut host = DefaultHasher::new();
    let everyones = host_state.split(LAYOUT_PATHS).next().unwrap_or(host_state);
    everyones.hash(&mut host);
    let host = host.finish();
    let mut hasher = DefaultHasher::new();
    template_rest
        .iter()
        .for_each(|(_, op)| op.hash(&mut hasher));
    let shape = hasher.finish();
    host_state.hash(&mut hasher);
    Some(AttemptOnTemplate {
        key: hasher.finish(),
        shape,
        host,
        fresh,
        binds,
        tree_binds,
    })
}

/// The host's side of a template's key, read now: the mount table, and the identity (device,
/// inode, type) — or absence — of each top-level entry of `/` and each hidden, writable and
/// read-only path of `layout`. A hidden file replaced by rename(2) (passwd(1) does that to
/// /etc/shadow) detaches the bind that hid it in every namespace; a hidden path created later,
/// a writable directory deleted and made again: each changes the key, and the next attempt
/// gets a template built afresh.
///
/// A path that is a symlink is recorded with what it points to as well: hiding or binding it
/// follows it, so a target replaced by rename (a Kubernetes projected volume swaps `..data`
/// this way) changes the key too.
///
/// `mount_table`: the daemon's `/proc/self/mountinfo` (read again only when the kernel says it
/// changed: [`crate::sandbox::host_view::HostView`]).
pub fn host_state(layout: &SandboxLayout, host_root: &[RootEntry], mount_table: &str) -> String {
    host_state_with(layout, host_root, mount_table, &BTreeMap::new())
}

/// [`host_state`], with the lines of the paths in `given` as a worker read them
/// ([`path_line`]; `crate::sandbox::spec::PathFindings`): not read here.
pub fn host_state_with(
    layout: &SandboxLayout,
    host_root: &[RootEntry],
    mount_table: &str,
    given: &BTreeMap<PathBuf, String>,
) -> String {
    let mut state = mount_table.to_owned();
    let top = host_root
        .iter()
        .map(|e| (Path::new("/").join(&e.name), false));
    let hidden = layout.hidden.iter().map(|p| (p.clone(), true));
    let others = layout
        .writable
        .iter()
        .chain(&layout.readonly)
        .map(|p| (p.clone(), false));
    for (i, (path, is_hidden)) in top.chain(hidden).chain(others).enumerate() {
        if i == host_root.len() {
            state.push_str(LAYOUT_PATHS);
        }
        match given.get(&path) {
            Some(line) => state.push_str(line),
            None => state.push_str(&path_line(&path, is_hidden)),
        }
    }
    if !state.contains(LAYOUT_PATHS) {
        state.push_str(LAYOUT_PATHS);
    }
    state
}

/// A path's line of [`host_state`]: its identity (device, inode, type; a hidden file's change
/// time too), and what it points to when it is a symlink. Its I/O: an `lstat` (and a `stat`
/// of a symlink's target).
pub fn path_line(path: &Path, is_hidden: bool) -> String {
    use std::os::unix::fs::MetadataExt;
    // A hidden file's change time too: a file that replaces it by rename may be given the
    // inode number of the one before, and the hide of the old one is gone. (Not a
    // directory's: it changes with every entry made in it — keel's own state directory
    // is hidden.)
    let identity = |m: &std::fs::Metadata| {
        let mut id = format!("{} {} {:o}", m.dev(), m.ino(), m.mode() & 0o170000);
        if is_hidden && !m.is_dir() {
            id.push_str(&format!(" {}.{:09}", m.ctime(), m.ctime_nsec()));
        }
        id
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            let target =
                std::fs::metadata(path).map_or_else(|_| "dangling".to_string(), |t| identity(&t));
            format!("{} {} -> {target}\n", path.display(), identity(&m))
        }
        Ok(m) => format!("{} {}\n", path.display(), identity(&m)),
        Err(_) => format!("{} absent\n", path.display()),
    }
}

/// In [`host_state`], between what every shape's key has (the mount table, the entries of
/// `/`) and the layout's own paths. No mountinfo line or path line starts with `#`.
const LAYOUT_PATHS: &str = "# the layout's own paths\n";

/// `op` with `map` applied to every path it mounts on or creates (not to sources).
fn with_targets(op: &MountOp, map: impl Fn(&PathBuf) -> PathBuf) -> MountOp {
    let mut op = op.clone();
    match &mut op {
        MountOp::Tmpfs { target, .. }
        | MountOp::MakeUnbindable { target }
        | MountOp::Proc { target }
        | MountOp::Sysfs { target }
        | MountOp::Devpts { target }
        | MountOp::Hide { target }
        | MountOp::SetAttrRecursive { target, .. }
        | MountOp::SetAttr { target, .. }
        | MountOp::BindRecursive { target, .. }
        | MountOp::Bind { target, .. }
        | MountOp::Overlay { target, .. } => *target = map(target),
        MountOp::Mkdir { path, .. }
        | MountOp::MkFile { path }
        | MountOp::Mountpoint { path, .. } => *path = map(path),
        MountOp::Symlink { link, .. } => *link = map(link),
        MountOp::PivotRoot { new_root } => *new_root = map(new_root),
        MountOp::MakeRootPrivate => {}
    }
    op
}

/// An operation with its target as the sandbox will see it: before the pivot, targets under
/// `new_root` are mapped to `/…`.
fn in_sandbox(op: &MountOp, new_root: &Path, pivoted: bool) -> MountOp {
    if pivoted {
        return op.clone();
    }
    with_targets(op, |p| match p.strip_prefix(new_root) {
        Ok(rel) => Path::new("/").join(rel),
        Err(_) => p.clone(),
    })
}

type Split = (
    Vec<(Step, MountOp)>,
    Vec<MountOp>,
    Vec<(PathBuf, PathBuf)>,
    Vec<(PathBuf, PathBuf)>,
);

/// Split a plan into what a template holds (sandbox paths), the fresh filesystems and the
/// per-task binds (`own_sources`); `None` when something else lies below one of those (it
/// would need the per-attempt mount under it).
fn split(plan: &[(Step, MountOp)], new_root: &Path, own_sources: &[&PathBuf]) -> Option<Split> {
    let mut rest = Vec::new();
    let mut fresh = Vec::new();
    let mut binds = Vec::new();
    let mut tree_binds = Vec::new();
    let mut pivoted = false;
    for (step, op) in plan {
        let mapped = in_sandbox(op, new_root, pivoted);
        match &mapped {
            MountOp::PivotRoot { .. } => pivoted = true,
            MountOp::Tmpfs { target, .. } if target != Path::new("/") => {
                fresh.push(mapped.clone());
                continue;
            }
            MountOp::Proc { .. } | MountOp::Devpts { .. } | MountOp::Sysfs { .. } => {
                fresh.push(mapped.clone());
                continue;
            }
            MountOp::Bind { source, target } if own_sources.contains(&source) => {
                binds.push((source.clone(), target.clone()));
                continue;
            }
            MountOp::BindRecursive { source, target } if own_sources.contains(&source) => {
                tree_binds.push((source.clone(), target.clone()));
                continue;
            }
            _ => {}
        }
        rest.push((step.clone(), mapped));
    }
    let own_targets: Vec<PathBuf> = fresh
        .iter()
        .filter_map(|op| op.target().map(Path::to_path_buf))
        .chain(binds.iter().chain(&tree_binds).map(|(_, t)| t.clone()))
        .collect();
    // A fresh filesystem below a per-task bind would be covered by it (the binds are attached
    // after the fresh mounts): the full plan, which mounts in order.
    let bind_targets: Vec<&PathBuf> = binds.iter().chain(&tree_binds).map(|(_, t)| t).collect();
    let fresh_below_a_bind = fresh
        .iter()
        .filter_map(|op| op.target())
        .any(|f| bind_targets.iter().any(|t| f != t.as_path() && under(f, t)));
    if fresh_below_a_bind {
        return None;
    }
    let creates = |op: &MountOp| {
        matches!(
            op,
            MountOp::Mkdir { .. }
                | MountOp::MkFile { .. }
                | MountOp::Mountpoint { .. }
                | MountOp::Symlink { .. }
        )
    };
    let mut kept = Vec::new();
    for (step, op) in rest {
        let Some(target) = op.target() else {
            kept.push((step, op));
            continue;
        };
        let at_own = own_targets.iter().any(|t| t == target);
        let below_own = own_targets.iter().any(|t| t != target && under(target, t));
        if below_own {
            return None;
        }
        // The mountpoints stay in the template; the setattr clearing `rdonly` on a
        // per-attempt mount is done by mounting it writable.
        if at_own && !creates(&op) {
            continue;
        }
        kept.push((step, op));
    }
    Some((kept, fresh, binds, tree_binds))
}

/// Build the template for `attempt`'s shape in `dir`: a mount namespace of its own, returned
/// as a descriptor (`/proc/<pid>/ns/mnt` of the child that built it). The child is a fork of
/// the caller, which must be single-threaded.
pub fn build_template(
    layout: &SandboxLayout,
    host_root: &[RootEntry],
    dir: &Path,
) -> Result<OwnedFd, String> {
    let template = template_layout(layout, dir);
    // `templates/` itself private (it may have been removed with the last template): the
    // mount points below keep the modes the sandbox needs.
    if let Some(templates) = dir.parent() {
        crate::state::create_private_dir(templates)
            .map_err(|e| format!("{}: {e}", templates.display()))?;
    }
    for sub in [
        &template.new_root,
        &template.work_source,
        &template.checkpoint_source,
    ] {
        std::fs::create_dir_all(sub).map_err(|e| format!("{}: {e}", sub.display()))?;
    }
    std::fs::write(&template.progress_file, b"")
        .map_err(|e| format!("{}: {e}", template.progress_file.display()))?;
    let sources = [
        &template.work_source,
        &template.progress_file,
        &template.checkpoint_source,
    ];
    let plan = plan_steps(&template, host_root);
    let sources: Vec<&PathBuf> = sources.into_iter().chain(&template.writable).collect();
    let (kept, _, _, _) = split(&plan, &template.new_root, &sources)
        .ok_or_else(|| "this sandbox cannot be templated".to_string())?;
    // Back to paths the kernel mounter expects (under the new root before the pivot).
    let mut pivoted = false;
    let ops: Vec<MountOp> = kept
        .into_iter()
        .map(|(_, op)| {
            let out = if pivoted {
                op.clone()
            } else {
                on_host(&op, &template.new_root)
            };
            if matches!(op, MountOp::PivotRoot { .. }) {
                pivoted = true;
            }
            out
        })
        .collect();
    let new_root = template.new_root.clone();
    crate::sys::child::run_in_child(
        &|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
                .map_err(|e| format!("unshare: {e}"))?;
            let mut mounter = KernelMounter::new(&new_root);
            for op in &ops {
                mounter.apply(op).map_err(|e| format!("{op}: {e}"))?;
            }
            Ok(())
        },
        &|pid| std::fs::File::open(format!("/proc/{pid}/ns/mnt")).map(OwnedFd::from),
        BUILD_DEADLINE_MS,
    )
}

/// The inverse of [`in_sandbox`] before the pivot: sandbox paths back under `new_root`.
fn on_host(op: &MountOp, new_root: &Path) -> MountOp {
    with_targets(op, |p| {
        let rel = p.strip_prefix("/").unwrap_or(p);
        if rel.as_os_str().is_empty() {
            new_root.to_path_buf()
        } else {
            new_root.join(rel)
        }
    })
}

impl AttemptOnTemplate {
    /// In the agent's child: clone the per-task sources from the host (idmapped with
    /// `userns`, the task's user namespace, when it has one), join and copy the template
    /// `ns` (with the task's `others` namespaces: those it does not make in its user
    /// namespace later), mount the fresh filesystems and attach the clones. On success the
    /// caller's root is the sandbox (cwd `/`).
    ///
    /// `Err(Unjoined)`: nothing changed yet (the caller can still build the sandbox in full).
    pub fn enter(
        &self,
        ns: BorrowedFd<'_>,
        others: nix::sched::CloneFlags,
        userns: Option<BorrowedFd<'_>>,
    ) -> Result<(), EnterError> {
        let clones = self.clone_sources(userns).map_err(EnterError::Unjoined)?;
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNS).map_err(|e| {
            EnterError::Unjoined(format!("cannot join the sandbox template (setns: {e})"))
        })?;
        self.finish(clones, others).map_err(EnterError::Failed)
    }

    /// The per-task sources, cloned from the host's view (before the setns): private,
    /// writable, nosuid, nodev — what the full plan leaves on them; idmapped with `userns`
    /// when the task has a user namespace ([`sys::idmapped_clone`]).
    fn clone_sources(
        &self,
        userns: Option<BorrowedFd<'_>>,
    ) -> Result<Vec<(OwnedFd, &PathBuf)>, String> {
        let mut clones = Vec::with_capacity(self.binds.len() + self.tree_binds.len());
        let all = self.binds.iter().map(|b| (b, false));
        for ((source, target), tree) in all.chain(self.tree_binds.iter().map(|b| (b, true))) {
            let what = |e: io::Error| {
                format!(
                    "cannot bind {} at {}: {e}",
                    source.display(),
                    target.display()
                )
            };
            let opened = sys::open_no_symlinks(source).map_err(what)?;
            if let Some(userns) = userns {
                let clone =
                    sys::idmapped_clone(opened.as_fd(), userns, tree, false).map_err(what)?;
                clones.push((clone, target));
                continue;
            }
            let clone = sys::clone_mount(opened.as_fd(), tree).map_err(what)?;
            // Below a tree's top, read-only as the full plan leaves it.
            let below = MountAttrs::NOSUID
                .union(MountAttrs::NODEV)
                .union(MountAttrs::RDONLY);
            sys::mount_setattr_fd(clone.as_fd(), tree, (below, MountAttrs::NONE), true)
                .map_err(what)?;
            let top = (MountAttrs::NONE, MountAttrs::RDONLY);
            sys::mount_setattr_fd(clone.as_fd(), false, top, false).map_err(what)?;
            clones.push((clone, target));
        }
        Ok(clones)
    }

    /// In the template's namespace: a copy of it (the caller's mount namespace from now on;
    /// with `others` too: the task's, [`super::task_namespaces`]), at its root.
    fn copy_template(others: nix::sched::CloneFlags) -> Result<(), String> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS | others).map_err(|e| {
            format!("cannot create the task's namespaces (unshare: {e}): run keel as root — namespaces need CAP_SYS_ADMIN")
        })?;
        sys::chdir(Path::new("/")).map_err(|e| format!("chdir /: {e}"))?;
        // The copy's root is not unbindable as the template's was: again, as the full plan
        // leaves it (no recursive bind of a host directory can copy the sandbox into itself).
        sys::set_propagation(Path::new("/"), nix::mount::MsFlags::MS_UNBINDABLE)
            .map_err(|e| format!("cannot make the root unbindable: {e}"))
    }

    /// The fresh filesystems of `which` kind, `/proc` first (a directory of keel's own
    /// read-only root): the other targets are then mounted on through `/proc/self/fd`.
    /// Targets are opened without following symlinks, as the full plan's are.
    fn mount_fresh_ones(&self, which: Fresh) -> Result<(), String> {
        let (proc, others): (Vec<&MountOp>, Vec<&MountOp>) = self
            .fresh
            .iter()
            .filter(|op| which.includes(op))
            .partition(|op| matches!(op, MountOp::Proc { .. }));
        for op in proc.into_iter().chain(others) {
            let Some(target) = op.target() else { continue };
            let read_only = matches!(op, MountOp::Proc { .. });
            let place = if read_only {
                None
            } else {
                Some(sys::open_no_symlinks(target).map_err(|e| format!("{op}: {e}"))?)
            };
            let at = place.as_ref().map_or(target.to_path_buf(), sys::fd_path);
            mount_fresh(op, &at, read_only).map_err(|e| format!("{op}: {e}"))?;
        }
        Ok(())
    }

    /// In the sandbox's namespace: the per-task sources' clones attached at their targets.
    fn attach(clones: Vec<(OwnedFd, &PathBuf)>) -> Result<(), String> {
        for (clone, target) in &clones {
            let attach = || -> io::Result<()> {
                let place = sys::open_no_symlinks(target)?;
                sys::move_mount_onto(clone.as_fd(), place.as_fd())
            };
            attach().map_err(|e| format!("cannot attach the bind at {}: {e}", target.display()))?;
        }
        Ok(())
    }

    /// In the template's namespace: a copy of it, the fresh mounts, the clones attached.
    fn finish(
        &self,
        clones: Vec<(OwnedFd, &PathBuf)>,
        others: nix::sched::CloneFlags,
    ) -> Result<(), String> {
        Self::copy_template(others)?;
        self.mount_fresh_ones(Fresh::All)?;
        Self::attach(clones)
    }

    /// Ahead of a task, in a spare shim (PID 1 of the PID namespace its task will have: see
    /// [`crate::sandbox::spare`]): a copy of the template `ns` with the fresh mounts that
    /// belong to the PID namespace rather than to the task (`/proc`, `/dev/pts`), returned as
    /// a descriptor of that mount namespace. The caller is back in its own mount namespace
    /// (at `/`) afterwards, whatever happened, or gets [`EnterError::Failed`] and must end:
    /// it would be stranded in the copy.
    pub fn prepare_copy(&self, ns: BorrowedFd<'_>) -> Result<OwnedFd, EnterError> {
        let own = std::fs::File::open("/proc/self/ns/mnt")
            .map_err(|e| EnterError::Unjoined(format!("/proc/self/ns/mnt: {e}")))?;
        // setns(2) back puts the root at the namespace's: under a daemon started chroot(2)ed,
        // this root is put back after.
        let root = sys::open_no_symlinks(Path::new("/"))
            .map_err(|e| EnterError::Unjoined(format!("cannot open /: {e}")))?;
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNS).map_err(|e| {
            EnterError::Unjoined(format!("cannot join the sandbox template (setns: {e})"))
        })?;
        // The mount namespace only: the task's others are its agent's, made at its start.
        let copied = Self::copy_template(nix::sched::CloneFlags::empty())
            .and_then(|()| self.mount_fresh_ones(Fresh::OfThePidNamespace))
            // The new /proc is this PID namespace's: "self" is the caller.
            .and_then(|()| {
                std::fs::File::open("/proc/self/ns/mnt")
                    .map(OwnedFd::from)
                    .map_err(|e| format!("/proc/self/ns/mnt of the copy: {e}"))
            });
        nix::sched::setns(own.as_fd(), nix::sched::CloneFlags::CLONE_NEWNS)
            .and_then(|()| nix::unistd::fchdir(&root))
            .and_then(|()| nix::unistd::chroot("."))
            .and_then(|()| nix::unistd::chdir("/"))
            .map_err(|e| {
                EnterError::Failed(format!(
                    "cannot return to the host's mount namespace (setns: {e})"
                ))
            })?;
        copied.map_err(EnterError::Unjoined)
    }

    /// In the agent's child, on a copy made by [`AttemptOnTemplate::prepare_copy`] in this
    /// PID namespace: clone the per-task sources from the host, join the copy (its own: no
    /// other process uses it), make the task's other namespaces, mount the task's fresh
    /// filesystems and attach the clones. The same mount table as
    /// [`AttemptOnTemplate::enter`] leaves.
    pub fn enter_prepared(
        &self,
        prepared: BorrowedFd<'_>,
        others: nix::sched::CloneFlags,
        userns: Option<BorrowedFd<'_>>,
    ) -> Result<(), EnterError> {
        let clones = self.clone_sources(userns).map_err(EnterError::Unjoined)?;
        nix::sched::setns(prepared, nix::sched::CloneFlags::CLONE_NEWNS).map_err(|e| {
            EnterError::Unjoined(format!("cannot join the prepared sandbox (setns: {e})"))
        })?;
        let finish = || {
            nix::sched::unshare(others).map_err(|e| {
                format!("cannot create the task's namespaces (unshare: {e}): run keel as root — namespaces need CAP_SYS_ADMIN")
            })?;
            sys::chdir(Path::new("/")).map_err(|e| format!("chdir /: {e}"))?;
            self.mount_fresh_ones(Fresh::OfTheTask)?;
            Self::attach(clones)
        };
        finish().map_err(EnterError::Failed)
    }

    /// Whether a template kept for another attempt (its key, shape and host) is out of date
    /// once this one is computed: made of another host, or of this shape's own paths as they
    /// were.
    pub fn outdates(&self, key: u64, shape: u64, host: u64) -> bool {
        host != self.host || (shape == self.shape && key != self.key)
    }

    /// Whether a copy prepared for `other` serves this attempt: the same template, the same
    /// mounts of the PID namespace.
    pub fn can_use_copy_of(&self, other: &AttemptOnTemplate) -> bool {
        let of_pid_ns = |a: &AttemptOnTemplate| -> Vec<MountOp> {
            a.fresh
                .iter()
                .filter(|op| Fresh::OfThePidNamespace.includes(op))
                .cloned()
                .collect()
        };
        self.key == other.key && of_pid_ns(self) == of_pid_ns(other)
    }
}

/// Which of an attempt's fresh filesystems to mount.
#[derive(Clone, Copy)]
enum Fresh {
    All,
    /// `/proc` and `/dev/pts`: the same for every task of a PID namespace's shape.
    OfThePidNamespace,
    /// The rest: tmpfs sized for the task (`/tmp`, `$HOME` owned by its user, `/dev/shm`).
    OfTheTask,
}

impl Fresh {
    fn includes(self, op: &MountOp) -> bool {
        let of_pid_ns = matches!(op, MountOp::Proc { .. } | MountOp::Devpts { .. });
        match self {
            Fresh::All => true,
            Fresh::OfThePidNamespace => of_pid_ns,
            Fresh::OfTheTask => !of_pid_ns,
        }
    }
}

#[cfg(test)]
mod tests;
