//! Why a queued task waits: what `keel status` shows, and the `after` dependencies that hold a
//! task back before the scheduler sees it.

use crate::daemon::record::TaskState;
use crate::daemon::Daemon;
use std::collections::BTreeMap;

impl Daemon {
    /// Why a queued task waits, shown by `keel status`; a journal line when `key` changes
    /// (not one per round, nor one each time a dependency it waits for changes state).
    pub(crate) fn note_waiting(&mut self, unit: &str, why: &str, key: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        task.waiting = Some(why.to_string());
        if task.waiting_key.as_deref() != Some(key) {
            task.waiting_key = Some(key.to_string());
            self.store.task_event(task, "waiting", why);
        }
    }

    /// The queued tasks their `after` dependencies hold back, with the reason (`blocked: …`
    /// when one of them will not succeed without a person) and its journal key.
    pub(super) fn dependency_holds(&self) -> BTreeMap<String, (String, String)> {
        use crate::daemon::dependencies::{Gate, Gates, Node};
        let has_after =
            |t: &crate::daemon::task::Task| t.unit.as_ref().is_some_and(|u| !u.after.is_empty());
        if !self.tasks.values().any(has_after) {
            return BTreeMap::new();
        }
        let nodes: BTreeMap<&str, Node> = self
            .tasks
            .values()
            .map(|t| {
                let after = t.unit.as_ref().map_or(&[][..], |u| u.after.as_slice());
                (
                    t.name.as_str(),
                    Node {
                        after,
                        state: t.record.state,
                        host_blocked: t.record.blocked.as_deref(),
                    },
                )
            })
            .collect();
        let gates = Gates::new(&nodes);
        self.tasks
            .values()
            .filter(|t| t.record.state == TaskState::Queued)
            .filter_map(|t| {
                let gate = gates.gate(&t.name);
                let key = gate.journal_key();
                match gate {
                    Gate::Ready => None,
                    Gate::Waits(why) => Some((t.name.clone(), (why, key))),
                    Gate::Blocked(why) => Some((t.name.clone(), (format!("blocked: {why}"), key))),
                }
            })
            .collect()
    }
}
