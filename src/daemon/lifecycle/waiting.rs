//! Why a queued task waits: what `keel status` shows, and the `after` dependencies that hold a
//! task back before the scheduler sees it.

use crate::daemon::record::TaskState;
use crate::daemon::Daemon;
use std::collections::BTreeMap;

impl Daemon {
    /// Why a queued task waits, shown by `keel status`; one journal line when it changes, not
    /// one per round.
    pub(super) fn note_waiting(&mut self, unit: &str, why: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        if task.waiting.as_deref() != Some(why) {
            task.waiting = Some(why.to_string());
            self.store.task_event(task, "waiting", why);
        }
    }

    /// The queued tasks their `after` dependencies hold back, with the reason (`blocked: …`
    /// when one of them will not succeed without a person).
    pub(super) fn dependency_holds(&self) -> BTreeMap<String, String> {
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
                    },
                )
            })
            .collect();
        let gates = Gates::new(&nodes);
        self.tasks
            .values()
            .filter(|t| t.record.state == TaskState::Queued)
            .filter_map(|t| match gates.gate(&t.name) {
                Gate::Ready => None,
                Gate::Waits(why) => Some((t.name.clone(), why)),
                Gate::Blocked(why) => Some((t.name.clone(), format!("blocked: {why}"))),
            })
            .collect()
    }
}
