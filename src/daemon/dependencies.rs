//! The dependency gate: a queued task whose unit has `after: [...]` starts only once each unit
//! named there has succeeded. A pure function of the units' `after` lists and the tasks'
//! states, asked at each scheduling round (nothing is stored: a dependency started again and
//! succeeded lets a blocked task go, one started again waits it out).
//!
//! - Every dependency `succeeded`: the task goes to the scheduler ([`Gate::Ready`]).
//! - One failed or stopped, or no unit of that name, or a cycle (the static checks of
//!   `keel check` and `keel add` refuse both, but a unit file may reach the units directory by
//!   other means): [`Gate::Blocked`] — a person has to act, and the reason names what.
//! - Otherwise (one queued, running, in backoff, …): [`Gate::Waits`], naming each one and its
//!   state. A dependency that is itself blocked blocks its dependents too, naming the root.

use super::record::TaskState;
use std::collections::BTreeMap;

/// A unit as the gate sees it: its `after` list and its task's state.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    pub after: &'a [String],
    pub state: TaskState,
}

/// Whether a queued task may go to the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Ready,
    /// Dependencies still on their way: `waits for "build" (running), "lint" (queued)`.
    Waits(String),
    /// A dependency that will not succeed without a person: what `keel status` shows after
    /// `blocked: `.
    Blocked(String),
}

/// Why a unit will not succeed without a person, by name: what its dependents are blocked by.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cause {
    /// The unit where it starts: failed, stopped, missing, or in a cycle.
    root: String,
    text: String,
    /// Left over by Kahn's order: in a cycle, or waiting on one.
    cycle: bool,
}

/// The gates of one scheduling round: every unit's [`Cause`], computed once, in O(units +
/// `after` entries) (a long chain costs no recursion).
pub struct Gates<'a> {
    nodes: &'a BTreeMap<&'a str, Node<'a>>,
    causes: BTreeMap<&'a str, Cause>,
}

impl<'a> Gates<'a> {
    pub fn new(nodes: &'a BTreeMap<&'a str, Node<'a>>) -> Gates<'a> {
        Gates {
            nodes,
            causes: causes(nodes),
        }
    }

    /// The gate of `name` (a unit the daemon has; an unknown one is not held back).
    pub fn gate(&self, name: &str) -> Gate {
        let Some(node) = self.nodes.get(name) else {
            return Gate::Ready;
        };
        if node.after.is_empty() {
            return Gate::Ready;
        }
        // Only a unit Kahn's order left over can be in a cycle that holds it (one through a
        // unit already started does not: that one may still succeed).
        if self.causes.get(name).is_some_and(|c| c.cycle) {
            if let Some(cycle) = cycle_through(name, self.nodes) {
                return Gate::Blocked(format!(
                    "a dependency cycle: {} (remove one of these `after` entries)",
                    cycle.join(" → ")
                ));
            }
        }
        let mut waiting = Vec::new();
        for dependency in node.after {
            if let Some(cause) = self.cause(dependency) {
                let through = if cause.root == *dependency {
                    String::new()
                } else {
                    " (which waits in turn)".to_string()
                };
                return Gate::Blocked(format!("after {dependency:?}{through}: {}", cause.text));
            }
            let state = self.nodes[dependency.as_str()].state;
            if state != TaskState::Succeeded {
                waiting.push(format!("{dependency:?} ({})", state.as_str()));
            }
        }
        if waiting.is_empty() {
            Gate::Ready
        } else {
            Gate::Waits(format!("waits for {}", waiting.join(", ")))
        }
    }

    fn cause(&self, name: &str) -> Option<Cause> {
        if !self.nodes.contains_key(name) {
            return Some(Cause {
                root: name.to_string(),
                text: format!("no unit is named {name:?} (add it, or remove the entry)"),
                cycle: false,
            });
        }
        self.causes.get(name).cloned()
    }
}

/// Every unit's cause, dependencies before dependents (Kahn's order over the queued units:
/// only a queued unit inherits its dependencies' causes). A queued unit left over is in or
/// behind a cycle.
fn causes<'a>(nodes: &BTreeMap<&'a str, Node<'a>>) -> BTreeMap<&'a str, Cause> {
    let mut causes: BTreeMap<&'a str, Cause> = BTreeMap::new();
    let own = |name: &str, state: TaskState| match state {
        TaskState::Failed => Some(format!(
            "{name:?} failed (`keel start {name}` to try it again)"
        )),
        TaskState::Stopped => Some(format!("{name:?} was stopped (`keel start {name}`)")),
        _ => None,
    };
    // For each queued unit, its dependencies not settled yet; for each unit, who waits on it.
    let mut pending: BTreeMap<&'a str, usize> = BTreeMap::new();
    let mut dependents: BTreeMap<&'a str, Vec<&'a str>> = BTreeMap::new();
    let mut ready: Vec<&'a str> = Vec::new();
    for (name, node) in nodes {
        if node.state != TaskState::Queued {
            if let Some(text) = own(name, node.state) {
                causes.insert(
                    name,
                    Cause {
                        root: name.to_string(),
                        text,
                        cycle: false,
                    },
                );
            }
            continue;
        }
        let queued: Vec<&'a str> = node
            .after
            .iter()
            .filter_map(|d| nodes.get_key_value(d.as_str()))
            .filter(|(_, n)| n.state == TaskState::Queued)
            .map(|(d, _)| *d)
            .collect();
        for d in &queued {
            dependents.entry(d).or_default().push(name);
        }
        pending.insert(name, queued.len());
        if queued.is_empty() {
            ready.push(name);
        }
    }
    while let Some(name) = ready.pop() {
        let node = &nodes[name];
        let inherited = node.after.iter().find_map(|d| match nodes.get(d.as_str()) {
            None => Some(Cause {
                root: d.clone(),
                text: format!("no unit is named {d:?} (add it, or remove the entry)"),
                cycle: false,
            }),
            Some(_) => causes.get(d.as_str()).cloned(),
        });
        if let Some(cause) = inherited {
            causes.insert(name, cause);
        }
        for dependent in dependents.get(name).cloned().unwrap_or_default() {
            let left = pending.entry(dependent).or_default();
            *left = left.saturating_sub(1);
            if *left == 0 {
                ready.push(dependent);
            }
        }
    }
    for (name, left) in pending {
        if left > 0 && !causes.contains_key(name) {
            causes.insert(
                name,
                Cause {
                    root: name.to_string(),
                    text: format!("{name:?} waits on a dependency cycle (`keel status {name}`)"),
                    cycle: true,
                },
            );
        }
    }
    causes
}

/// A cycle of `after` edges through `name`.
fn cycle_through(name: &str, nodes: &BTreeMap<&str, Node<'_>>) -> Option<Vec<String>> {
    let graph: BTreeMap<&str, &[String]> = nodes.iter().map(|(n, node)| (*n, node.after)).collect();
    crate::unit::find_cycle(&graph, name)
}

#[cfg(test)]
mod tests;
