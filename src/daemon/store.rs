//! What the daemon writes down: the state directory (task records, accepted units, run files)
//! and the journal, and what this loop round changed that the loop acts on before it sleeps.

use super::record::TaskState;
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
    /// The events some hook of `keel.ron`'s `notify` is run on (set by the notifier).
    pub notify_kinds: Vec<crate::config::notify::EventKind>,
    /// Journal events of those kinds, for the notifier after this round (`notifications/`);
    /// bounded by [`MAX_NOTICES`].
    pub notices: Vec<Event>,
    /// Those past [`MAX_NOTICES`] this round, counted (the notifier journals the count).
    pub notices_dropped: u64,
}

/// The most journal events held for the notifier in one round (a round that journals more
/// is a storm the coalescing would fold anyway; the rest are counted).
pub(crate) const MAX_NOTICES: usize = 4096;

impl Store {
    pub fn new(dirs: StateDir, journal: Journal) -> Self {
        Store {
            dirs,
            journal,
            counts_changed: true,
            queue_changed: true,
            notify_kinds: Vec::new(),
            notices: Vec::new(),
            notices_dropped: 0,
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
        let kind = crate::config::notify::EventKind::of_journal(event);
        if kind.is_some_and(|kind| self.notify_kinds.contains(&kind)) {
            if self.notices.len() < MAX_NOTICES {
                self.notices.push(entry);
            } else {
                self.notices_dropped += 1;
            }
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

/// Change state, persist, journal — in that order. Returns whether the record reached the
/// disk.
pub(crate) fn transition(task: &mut Task, to: TaskState, detail: &str, store: &mut Store) -> bool {
    if to == TaskState::Queued && task.record.state != TaskState::Queued {
        task.queued_since_ms = now_ms();
    }
    if to != TaskState::Queued {
        task.waiting = None;
    }
    if task.record.state != to {
        // What an attempt reserved may be free again, and a task whose `after` names this one
        // may go, wait or be blocked now: a scheduling round before the loop sleeps.
        store.queue_changed = true;
    }
    task.record.state = to;
    let persisted = store.persist(task).is_ok();
    let unit = &task.name;
    let what = if detail.is_empty() {
        to.to_string()
    } else {
        format!("{to} ({detail})")
    };
    if persisted {
        store.task_event(task, to.as_str(), detail);
        log::info!("{unit}: {what}");
    } else {
        // Not journaled either: the caller may take it back (a stop, a start), and the
        // journal holds what the records held.
        log::warn!("{unit}: {what}: not recorded in the state directory");
    }
    persisted
}
