//! Sandboxing's state in the daemon: the read-only host views each sandboxed start copies
//! ([`crate::sandbox::templates`]) and the spare shim prepared for the next start.

use super::timers::{Timer, Timers};
use crate::sandbox::templates::SandboxTemplates;
use crate::sys::pidns::NamespaceId;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// How long after a sandboxed start the next spare shim is made: once that start is done
/// with the CPU (~2 ms), so the two do not compete for it.
const SPARE_DELAY: Duration = Duration::from_millis(50);

pub(crate) struct Sandboxing {
    /// Read-only host views copied by each sandboxed start (dropped while nothing runs).
    pub templates: SandboxTemplates,
    /// A [`Timer::ReplenishSpare`] is pending.
    spare_due: bool,
    /// The user namespace of the last sandboxed start's task (a copy of the task's
    /// descriptor, until the spare is made): the spare is made for that task's restart, the
    /// one start the daemon knows can come (a spare is PID 1 of its PID namespace, owned by
    /// one task's user namespace: `crate::sandbox::spare`).
    last_start_userns: Option<std::os::fd::OwnedFd>,
}

impl Sandboxing {
    pub fn new(templates: SandboxTemplates) -> Self {
        Sandboxing {
            templates,
            spare_due: false,
            last_start_userns: None,
        }
    }

    /// A start was spawned: after a sandboxed one, make the next spare shortly, for the
    /// task just started (`userns`: its user namespace, `None` when it has none).
    pub fn after_start(
        &mut self,
        sandboxed: bool,
        userns: Option<BorrowedFd<'_>>,
        timers: &mut Timers,
    ) {
        if !sandboxed {
            return;
        }
        self.last_start_userns = userns.and_then(|ns| match ns.try_clone_to_owned() {
            Ok(ns) => Some(ns),
            Err(e) => {
                log::warn!("cannot keep the task's user namespace for a spare shim: {e}");
                None
            }
        });
        if !self.spare_due {
            self.spare_due = true;
            timers.add_after(SPARE_DELAY, Timer::ReplenishSpare);
        }
    }

    /// [`Timer::ReplenishSpare`]: a spare shim for the next sandboxed start, while tasks run
    /// (an idle daemon keeps none: [`Sandboxing::release_when_idle`] drops it with the
    /// templates).
    pub fn replenish_spare(&mut self, shutting_down: bool, anything_runs: bool) {
        self.spare_due = false;
        let userns = self.last_start_userns.take();
        if shutting_down || !anything_runs {
            return;
        }
        // This very binary, even if an upgrade replaced the file on disk (as spawn_shim).
        let nofile = super::ORIGINAL_NOFILE.get().copied();
        self.templates.replenish_spare(
            std::path::Path::new("/proc/self/exe"),
            nofile,
            userns.as_ref().map(|ns| ns.as_fd()),
        );
    }

    /// A task's user namespace is no task's any more (the task was removed, or its block
    /// changed): a spare made for it, or about to be, goes.
    pub fn user_namespace_gone(&mut self, userns: BorrowedFd<'_>) {
        let Ok(gone) = NamespaceId::of(userns) else {
            return;
        };
        let pending = self.last_start_userns.as_ref();
        if pending.is_some_and(|ns| NamespaceId::of(ns.as_fd()).ok() == Some(gone)) {
            self.last_start_userns = None;
        }
        self.templates.user_namespace_gone(gone);
    }

    /// Nothing runs: no template (or spare's copy of one) may keep the host's filesystems
    /// busy, and an idle daemon keeps no spare process.
    pub fn release_when_idle(&mut self, anything_runs: bool) {
        let holds = !self.templates.is_empty() || self.templates.spare().is_some();
        if holds && !anything_runs {
            self.templates.clear();
        }
    }
}
