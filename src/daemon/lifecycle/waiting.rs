//! Why a queued task waits: what `keel status` shows, and the `after` dependencies that hold a
//! task back before the scheduler sees it.

use crate::daemon::queue::WaitReason;
use crate::daemon::record::TaskState;
use crate::daemon::Daemon;
use std::collections::BTreeMap;

impl Daemon {
    /// Why a queued task waits, shown by `keel status`; a journal line when its cause
    /// changes, not one per round (nor one each time a dependency it waits for moves on).
    pub(crate) fn note_waiting(&mut self, unit: &str, why: WaitReason) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let same = task.waiting.as_ref().is_some_and(|w| w.same_cause(&why));
        if !same {
            self.store.task_event(task, "waiting", &why.to_string());
        }
        task.waiting = Some(why);
    }

    /// The queued tasks their `after` dependencies hold back, with the reason (`blocked: …`
    /// when one of them will not succeed without a person) (the dependencies it names are its cause, for the journal).
    pub(super) fn dependency_holds(&self) -> BTreeMap<String, WaitReason> {
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
                let text = match gate {
                    Gate::Ready => return None,
                    Gate::Waits(why) => why,
                    Gate::Blocked(why) => format!("blocked: {why}"),
                };
                Some((t.name.clone(), WaitReason::Held { text, key }))
            })
            .collect()
    }
}
