//! What the daemon writes down: the state directory (task records, accepted units, run files)
//! and the journal, and what this loop round changed that the loop acts on before it sleeps.

use super::Task;
use crate::state::{now_ms, Event, Journal, StateDir, StateError};

pub(crate) struct Store {
    pub dirs: StateDir,
    pub journal: Journal,
    /// A journal entry was written this round: the task counts may have changed (systemd's
    /// `STATUS=`).
    pub counts_changed: bool,
    /// A task became startable or freed what it reserved: run the scheduler before sleeping.
    pub queue_changed: bool,
}

impl Store {
    pub fn new(dirs: StateDir, journal: Journal) -> Self {
        Store {
            dirs,
            journal,
            counts_changed: true,
            queue_changed: true,
        }
    }

    /// Append to the journal (synced once per loop round); a failing journal is logged, never
    /// fatal.
    pub fn event(&mut self, unit: &str, attempt: u32, generation: u64, event: &str, detail: &str) {
        let ts_ms = now_ms();
        self.counts_changed = true;
        let entry = Event {
            time: crate::state::rfc3339(ts_ms),
            ts_ms,
            unit: unit.to_string(),
            attempt,
            generation,
            event: event.to_string(),
            detail: detail.to_string(),
        };
        if let Err(e) = self.journal.append(&entry) {
            log::error!("journal: {e}");
        }
    }

    /// A journal entry about the task's current attempt.
    pub fn task_event(&mut self, task: &Task, event: &str, detail: &str) {
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        self.event(&task.name, attempt, generation, event, detail);
    }

    /// Write the task's record.
    pub fn persist(&self, task: &Task) -> Result<(), StateError> {
        crate::state::write_ron(&self.dirs.record_path(&task.name), &task.record).inspect_err(|e| {
            log::error!("{}: cannot persist state: {e}", task.name);
        })
    }

    /// Sync the journal once per loop round.
    pub fn sync(&mut self) {
        if let Err(e) = self.journal.sync() {
            log::error!("journal: {e}");
        }
    }
}
