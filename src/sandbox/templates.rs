//! The daemon's sandbox templates (see [`crate::sandbox::mounts::template`]): a few mount
//! namespaces, each the read-only host view of one sandbox shape, kept open between starts.
//!
//! A template is a snapshot of the host: its key covers the host's mount table and the
//! identity of `/`'s entries and of every hidden, writable and read-only path, so a change
//! there builds a new one. A change of the mount table or of `/` drops every template; one of
//! a shape's own paths drops that shape's (other shapes keep theirs). A
//! template pins what it binds (a filesystem unmounted on the host stays busy while a
//! template holds it), so the daemon drops them all whenever no task is running
//! ([`SandboxTemplates::clear`]), and keeps at most [`MAX_TEMPLATES`]. The host's side of the
//! key is read again only when the kernel reports a change ([`crate::sandbox::host_view`]).

use crate::sandbox::host_view::{HostState, HostView};
use crate::sandbox::mounts::template::{attempt_on_template, build_template, AttemptOnTemplate};
use crate::sandbox::mounts::{self, RootEntry, SandboxLayout};
use crate::sandbox::spare::Spare;
use crate::sandbox::start::daemon::{Prepared, TemplateCache};
use crate::sys::pidns::NamespaceId;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Templates kept at once (shapes differ by `workdir`, `$HOME`, hidden and writable paths).
pub const MAX_TEMPLATES: usize = 4;

struct Entry {
    key: u64,
    shape: u64,
    host: u64,
    ns: OwnedFd,
    dir: PathBuf,
    used: Instant,
}

/// The templates of one daemon, built on demand in `dir` (under keel's state directory,
/// which every sandbox hides).
pub struct SandboxTemplates {
    dir: PathBuf,
    entries: Vec<Entry>,
    /// Keys whose build failed: not tried again until [`SandboxTemplates::clear`].
    failed: Vec<u64>,
    /// `KEEL_NO_SANDBOX_TEMPLATES=1` (tests, and a way out): every sandbox built in full.
    disabled: bool,
    /// What [`attempt_on_template`] said of recent layouts (two mount plans compared: ~1 ms),
    /// by a hash of the layout and the host's state; the most recent last.
    shapes: Vec<(u64, Option<AttemptOnTemplate>)>,
    /// The host as templates' keys see it, read again only when it changed.
    host: HostView,
    /// A start prepared ahead ([`crate::sandbox::spare`]), and whether there are any: not
    /// with `KEEL_NO_SPARE=1` (`allowed`), nor where they do not pay off.
    spare: Option<Spare>,
    spares: bool,
    spares_allowed: bool,
    /// The template of the last start on one: the next spare copies it.
    last: Option<AttemptOnTemplate>,
}

/// Layouts whose verdict is remembered (a daemon's units come in a few shapes).
const REMEMBERED_SHAPES: usize = 64;

impl SandboxTemplates {
    pub fn new(dir: PathBuf) -> SandboxTemplates {
        let spares_allowed = std::env::var_os("KEEL_NO_SPARE").is_none_or(|v| v != "1");
        // What an earlier daemon left: empty placeholders (its namespaces died with it).
        remove_dir(&dir);
        SandboxTemplates {
            dir,
            entries: Vec::new(),
            failed: Vec::new(),
            shapes: Vec::new(),
            host: HostView::new(),
            spare: None,
            spares: spares_allowed,
            spares_allowed,
            last: None,
            disabled: std::env::var_os("KEEL_NO_SANDBOX_TEMPLATES").is_some_and(|v| v == "1")
                || !can_join_mount_namespaces(),
        }
    }

    /// Build `prepared` on a template of its shape when it has one (built now if need be):
    /// the agent's start then mounts a dozen things, not sixty.
    pub fn use_for(&mut self, prepared: &mut Prepared) {
        if !self.enabled() {
            // Not even the host's state is read: it would only be thrown away.
            return;
        }
        let (layout, host_root) = (prepared.layout(), prepared.host_root());
        let host = self.host.state(layout, host_root, prepared.path_lines());
        let Some(attempt) = self.shape(layout, host_root, &host) else {
            return;
        };
        if let Some(ns) = self.get(&attempt, layout, host_root) {
            prepared.build_on_template(attempt, ns);
        }
    }

    /// The template namespace for `attempt` (a descriptor of its own, for the spawn), built
    /// now if there is none of its key. `None` when the build failed (logged once; the
    /// attempt then takes the full plan, which reports any real problem as its own).
    pub fn get(
        &mut self,
        attempt: &AttemptOnTemplate,
        layout: &SandboxLayout,
        host_root: &[RootEntry],
    ) -> Option<OwnedFd> {
        if self.disabled {
            return None;
        }
        // Snapshots of a host that has changed since: nothing will use them again, and they
        // keep what they bound busy.
        // A snapshot of another host, or of this shape's paths as they were: out of date for
        // good (should a path come back as it was — a new file given the old one's inode —
        // its hide would be gone all the same: a rename over a hidden file detaches it).
        let stale = |e: &Entry| attempt.outdates(e.key, e.shape, e.host);
        for entry in self.entries.iter().filter(|e| stale(e)) {
            remove_dir(&entry.dir);
        }
        self.entries.retain(|e| !stale(e));
        self.last = Some(attempt.clone());
        if let Some(entry) = self.entries.iter_mut().find(|e| e.key == attempt.key) {
            entry.used = Instant::now();
            return entry.ns.as_fd().try_clone_to_owned().ok();
        }
        if self.failed.contains(&attempt.key) {
            return None;
        }
        if self.entries.len() >= MAX_TEMPLATES {
            let oldest = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used)?;
            let entry = self.entries.swap_remove(oldest);
            remove_dir(&entry.dir);
        }
        let dir = self.dir.join(format!("{:016x}", attempt.key));
        let started = Instant::now();
        match build_template(layout, host_root, &dir) {
            Ok(ns) => {
                log::info!(
                    "sandbox template {:016x} built in {} µs",
                    attempt.key,
                    started.elapsed().as_micros()
                );
                let copy = ns.as_fd().try_clone_to_owned().ok();
                self.entries.push(Entry {
                    key: attempt.key,
                    shape: attempt.shape,
                    host: attempt.host,
                    ns,
                    dir,
                    used: Instant::now(),
                });
                copy
            }
            Err(e) => {
                log::warn!("no sandbox template ({e}): sandboxes are built in full");
                self.failed.push(attempt.key);
                remove_dir(&dir);
                None
            }
        }
    }

    /// The entries of the host's `/` (read again only when `/` changed).
    pub fn host_root(&mut self) -> std::io::Result<Vec<RootEntry>> {
        self.host.root()
    }

    /// The host's state for `layout` (see [`HostView`]): part of its template's key.
    pub fn host_state(&mut self, layout: &SandboxLayout, host_root: &[RootEntry]) -> HostState {
        self.host.state(layout, host_root, &Default::default())
    }

    /// How `layout` starts on a template of its shape over the host as it is now
    /// (`host_state`), if it can: remembered per layout and host state.
    pub fn shape(
        &mut self,
        layout: &SandboxLayout,
        host_root: &[RootEntry],
        host_state: &HostState,
    ) -> Option<AttemptOnTemplate> {
        if self.disabled {
            return None;
        }
        let mut hasher = DefaultHasher::new();
        (layout, host_root, host_state.hash).hash(&mut hasher);
        let key = hasher.finish();
        if let Some(i) = self.shapes.iter().position(|(k, _)| *k == key) {
            let found = self.shapes.remove(i);
            let verdict = found.1.clone();
            self.shapes.push(found);
            return verdict;
        }
        let verdict = attempt_on_template(layout, host_root, &host_state.text);
        if self.shapes.len() >= REMEMBERED_SHAPES {
            self.shapes.remove(0);
        }
        self.shapes.push((key, verdict.clone()));
        verdict
    }

    /// The spare, for a sandboxed start of the task whose user namespace is `task` (`None`:
    /// it has none), if there is one made for it ([`Spare::fits`]) and it is alive. A spare
    /// made for another task stays (its task's restart may come; the next replenishment
    /// replaces it). (Its copy is used only if it is of this start's template:
    /// [`AttemptOnTemplate::can_use_copy_of`].)
    pub fn take_spare(&mut self, task: Option<NamespaceId>) -> Option<Spare> {
        let spare = self.spare.take()?;
        if !spare.alive() {
            // Killed or crashed: the daemon's reaper has its status.
            log::warn!(
                "spare shim {} ended before its start: starting the usual way",
                spare.pid()
            );
            return None;
        }
        if !spare.fits(task) {
            log::debug!(
                "spare shim {} is another task's: starting the usual way",
                spare.pid()
            );
            self.spare = Some(spare);
            return None;
        }
        Some(spare)
    }

    /// Make a spare for the task whose user namespace is `userns` (`None`: a task without
    /// one) if there is none for it — one made for another is replaced — copying the
    /// template of the last start on one (if it is still kept). `keel`: the binary it runs;
    /// `nofile`: the daemon's original limit.
    pub fn replenish_spare(
        &mut self,
        keel: &Path,
        nofile: Option<(u64, u64)>,
        userns: Option<BorrowedFd<'_>>,
    ) {
        if !self.spares {
            return;
        }
        let wanted = match userns.map(NamespaceId::of).transpose() {
            Ok(wanted) => wanted,
            Err(e) => {
                log::warn!("cannot identify the task's user namespace ({e}): no spare shim");
                return;
            }
        };
        if let Some(spare) = &self.spare {
            if spare.fits(wanted) {
                return;
            }
            log::debug!(
                "spare shim {} replaced by one for the last start's task",
                spare.pid()
            );
            self.spare = None;
        }
        let template = self.last.as_ref().and_then(|last| {
            let entry = self.entries.iter().find(|e| e.key == last.key)?;
            Some((last, entry.ns.as_fd()))
        });
        let state = self.dir.parent().unwrap_or(&self.dir);
        match Spare::spawn(keel, nofile, state, template, userns) {
            Ok(spare) => {
                log::debug!("spare shim pid {}", spare.pid());
                self.spare = Some(spare);
            }
            Err(e) => {
                log::warn!("cannot make a spare shim ({e}): starts take the usual path");
            }
        }
    }

    /// The user namespace `gone` is no task's any more (its task was removed, or given
    /// another): a spare made for it goes, since no start can take it.
    pub fn user_namespace_gone(&mut self, gone: NamespaceId) {
        if self.spare.as_ref().and_then(|s| s.user_namespace()) == Some(gone) {
            self.spare = None;
        }
    }

    /// Whether spares are worth making on this host (the daemon's judgment of its cgroups:
    /// `crate::daemon`'s `spares_pay_off`). Off, the spare there is goes.
    pub fn spares_pay_off(&mut self, pay_off: bool) {
        if !pay_off && self.spares {
            log::info!(
                "spare shims off: joining a task's cgroup from one would wait for an RCU grace period (mount cgroup2 with favordynmods to have them)"
            );
            self.spare = None;
        }
        self.spares = self.spares_allowed && pay_off;
    }

    /// The spare, to wait on (benchmarks, tests).
    pub fn spare(&self) -> Option<&Spare> {
        self.spare.as_ref()
    }

    /// Drop every template (their namespaces go with the last descriptor), and the spare.
    pub fn clear(&mut self) {
        self.spare = None;
        self.last = None;
        self.remove_templates();
        self.shapes.clear();
        self.host.clear();
        self.failed.clear();
    }

    fn remove_templates(&mut self) {
        for entry in self.entries.drain(..) {
            remove_dir(&entry.dir);
        }
        // Made again with the next template.
        let _ = std::fs::remove_dir(&self.dir);
    }

    /// Whether templates are used at all (not turned off, and setns(2) is allowed).
    pub fn enabled(&self) -> bool {
        !self.disabled
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl TemplateCache for SandboxTemplates {
    fn host_listing(&mut self) -> std::io::Result<Vec<RootEntry>> {
        if self.enabled() {
            self.host_root()
        } else {
            mounts::list_host_root()
        }
    }

    fn put_on_template(&mut self, prepared: &mut Prepared) {
        self.use_for(prepared)
    }
}

impl Drop for SandboxTemplates {
    fn drop(&mut self) {
        self.spare = None;
        self.remove_templates();
    }
}

/// setns(2) into a mount namespace needs CAP_SYS_ADMIN and CAP_SYS_CHROOT; a container given
/// only the first (the documented minimum) builds every sandbox in full, ~2 ms more a start.
fn can_join_mount_namespaces() -> bool {
    const CAP_SYS_CHROOT: u32 = 18;
    const CAP_SYS_ADMIN: u32 = 21;
    let Ok((effective, _, _)) = crate::sys::caps::current_caps() else {
        return false;
    };
    let has = |cap: u32| effective & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) && !has(CAP_SYS_CHROOT) {
        log::info!(
            "sandbox templates off: joining one needs CAP_SYS_CHROOT (setns(2)); every sandbox is built in full"
        );
    }
    has(CAP_SYS_ADMIN) && has(CAP_SYS_CHROOT)
}

/// A template's directory on the host holds only empty placeholders: its mounts live in the
/// template's namespace alone.
fn remove_dir(dir: &std::path::Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!("cannot remove {}: {e}", dir.display());
        }
    }
}
