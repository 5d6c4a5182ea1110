//! Sandboxing's state in the daemon: the read-only host views each sandboxed start copies
//! ([`crate::sandbox::templates`]) and the spare shim prepared for the next start.

use super::timers::{Timer, Timers};
use crate::sandbox::templates::SandboxTemplates;
use std::time::Duration;

/// How long after a sandboxed start the next spare shim is made: once that start is done
/// with the CPU (~2 ms), so the two do not compete for it.
const SPARE_DELAY: Duration = Duration::from_millis(50);

pub(crate) struct Sandboxing {
    /// Read-only host views copied by each sandboxed start (dropped while nothing runs).
    pub templates: SandboxTemplates,
    /// A [`Timer::ReplenishSpare`] is pending.
    spare_due: bool,
}

impl Sandboxing {
    pub fn new(templates: SandboxTemplates) -> Self {
        Sandboxing {
            templates,
            spare_due: false,
        }
    }

    /// A start was spawned: after a sandboxed one, make the next spare shortly.
    pub fn after_start(&mut self, sandboxed: bool, timers: &mut Timers) {
        if sandboxed && !self.spare_due {
            self.spare_due = true;
            timers.add_after(SPARE_DELAY, Timer::ReplenishSpare);
        }
    }

    /// [`Timer::ReplenishSpare`]: a spare shim for the next sandboxed start, while tasks run
    /// (an idle daemon keeps none: [`Sandboxing::release_when_idle`] drops it with the
    /// templates).
    pub fn replenish_spare(&mut self, shutting_down: bool, anything_runs: bool) {
        self.spare_due = false;
        if shutting_down || !anything_runs {
            return;
        }
        // This very binary, even if an upgrade replaced the file on disk (as spawn_shim).
        let nofile = super::ORIGINAL_NOFILE.get().copied();
        self.templates
            .replenish_spare(std::path::Path::new("/proc/self/exe"), nofile);
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
