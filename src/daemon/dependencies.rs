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
use std::collections::{BTreeMap, BTreeSet};

/// A unit as the gate sees it: its `after` list and its task's state.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    pub after: &'a [String],
    pub state: TaskState,
    /// A queued task whose start the host refused (`blocked: …`): why. Its dependents are
    /// blocked by it too: it will not succeed until a person fixes the host.
    pub host_blocked: Option<&'a str>,
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

impl Gate {
    /// What the journal keys a change on: the class and the names, not the dependencies'
    /// states (a fan-in of many dependents writes one line each when one of them blocks, not
    /// one each time a dependency moves from queued to starting to running).
    pub fn journal_key(&self) -> String {
        match self {
            Gate::Ready => String::new(),
            Gate::Waits(why) => {
                let names: Vec<&str> = why.split('"').skip(1).step_by(2).collect();
                format!("waits:{}", names.join(","))
            }
            Gate::Blocked(why) => format!("blocked:{why}"),
        }
    }
}

/// Why a unit will not succeed without a person, by name: what its dependents are blocked by.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cause {
    /// The unit where it starts: failed, stopped, blocked by the host, missing, or in a cycle.
    root: String,
    text: String,
    /// The unit is in a cycle of queued units: `text` names it.
    cycle: bool,
}

/// The gates of one scheduling round: every unit's [`Cause`], computed once, in O(units +
/// `after` entries) — iteratively, so a long chain costs no recursion.
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
        if let Some(cause) = self.causes.get(name).filter(|c| c.cycle && c.root == name) {
            return Gate::Blocked(cause.text.clone());
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
            return Some(missing(name));
        }
        self.causes.get(name).cloned()
    }
}

fn missing(name: &str) -> Cause {
    Cause {
        root: name.to_string(),
        text: format!("no unit is named {name:?} (add it, or remove the entry)"),
        cycle: false,
    }
}

/// A unit's own cause: failed, stopped, or a queued start the host refused.
fn own_cause(name: &str, node: &Node<'_>) -> Option<Cause> {
    let text = match (node.state, node.host_blocked) {
        (TaskState::Failed, _) => format!("{name:?} failed (`keel start {name}` to try it again)"),
        (TaskState::Stopped, _) => format!("{name:?} was stopped (`keel start {name}`)"),
        (TaskState::Queued, Some(why)) => format!("{name:?} is blocked: {why}"),
        _ => return None,
    };
    Some(Cause {
        root: name.to_string(),
        text,
        cycle: false,
    })
}

/// Every unit's cause. The queued units are taken a strongly connected component at a time,
/// dependencies before dependents (Tarjan's order): a component that is a cycle blocks each
/// of its members, naming the cycle; a single queued unit inherits the cause of its first
/// dependency that has one. Only queued units inherit: a dependency already started may
/// still succeed, and a cycle through it holds nobody.
fn causes<'a>(nodes: &BTreeMap<&'a str, Node<'a>>) -> BTreeMap<&'a str, Cause> {
    let mut causes: BTreeMap<&'a str, Cause> = BTreeMap::new();
    let mut queued: BTreeMap<&'a str, Vec<&'a str>> = BTreeMap::new();
    for (name, node) in nodes {
        if let Some(cause) = own_cause(name, node) {
            causes.insert(name, cause);
        } else if node.state == TaskState::Queued {
            let edges = node
                .after
                .iter()
                .filter_map(|d| nodes.get_key_value(d.as_str()))
                .filter(|(d, n)| n.state == TaskState::Queued && own_cause(d, n).is_none())
                .map(|(d, _)| *d)
                .collect();
            queued.insert(name, edges);
        }
    }
    for component in components(&queued) {
        let looped = component.len() > 1 || queued[component[0]].contains(&component[0]);
        if looped {
            for (member, text) in cycle_texts(&component, &queued) {
                causes.insert(
                    member,
                    Cause {
                        root: member.to_string(),
                        text,
                        cycle: true,
                    },
                );
            }
            continue;
        }
        let name = component[0];
        let inherited = nodes[name]
            .after
            .iter()
            .find_map(|d| match nodes.get(d.as_str()) {
                None => Some(missing(d)),
                Some(_) => causes.get(d.as_str()).cloned(),
            });
        if let Some(cause) = inherited {
            causes.insert(name, cause);
        }
    }
    causes
}

/// Tarjan's bookkeeping: each unit's discovery index and lowest reachable index, and the
/// units of the components not yet emitted.
#[derive(Default)]
struct Tarjan<'a> {
    index: BTreeMap<&'a str, usize>,
    low: BTreeMap<&'a str, usize>,
    on_stack: BTreeSet<&'a str>,
    stack: Vec<&'a str>,
    /// The depth-first path: each unit with the next of its edges to follow.
    calls: Vec<(&'a str, usize)>,
}

impl<'a> Tarjan<'a> {
    fn visit(&mut self, v: &'a str) {
        let i = self.index.len();
        self.index.insert(v, i);
        self.low.insert(v, i);
        self.stack.push(v);
        self.on_stack.insert(v);
        self.calls.push((v, 0));
    }

    fn lower(&mut self, v: &'a str, to: usize) {
        if let Some(low) = self.low.get_mut(v) {
            *low = (*low).min(to);
        }
    }
}

/// The strongly connected components of `graph`, each emitted after every component it
/// reaches (Tarjan's algorithm, iterative).
fn components<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    let mut t = Tarjan::default();
    let mut out = Vec::new();
    for &start in graph.keys() {
        if t.index.contains_key(start) {
            continue;
        }
        t.visit(start);
        while let Some(&(v, edge)) = t.calls.last() {
            if let Some(&w) = graph[v].get(edge) {
                if let Some(top) = t.calls.last_mut() {
                    top.1 += 1;
                }
                if !t.index.contains_key(w) {
                    t.visit(w);
                } else if t.on_stack.contains(w) {
                    let to = t.index[w];
                    t.lower(v, to);
                }
                continue;
            }
            t.calls.pop();
            if let Some(&(parent, _)) = t.calls.last() {
                let to = t.low[v];
                t.lower(parent, to);
            }
            if t.low[v] == t.index[v] {
                let mut component = Vec::new();
                while let Some(w) = t.stack.pop() {
                    t.on_stack.remove(w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                component.sort_unstable();
                out.push(component);
            }
        }
    }
    out
}

/// Each member of a cyclic component with its message: the cycle through it when it is on
/// the one found (from the first member), else the cycle it is caught in.
fn cycle_texts<'a>(
    component: &[&'a str],
    graph: &BTreeMap<&'a str, Vec<&'a str>>,
) -> Vec<(&'a str, String)> {
    let members: BTreeSet<&str> = component.iter().copied().collect();
    let owned: Vec<(&str, Vec<String>)> = component
        .iter()
        .map(|m| {
            let inside = graph[m].iter().filter(|d| members.contains(*d));
            (*m, inside.map(|d| d.to_string()).collect())
        })
        .collect();
    let small: BTreeMap<&str, &[String]> = owned.iter().map(|(m, e)| (*m, e.as_slice())).collect();
    let first = component[0];
    let cycle = crate::unit::find_cycle(&small, first).unwrap_or_else(|| vec![first.into()]);
    let ring = &cycle[..cycle.len().saturating_sub(1).max(1)];
    component
        .iter()
        .map(|member| {
            let text = match ring.iter().position(|m| m == member) {
                Some(at) => {
                    let mut path: Vec<&str> = ring[at..]
                        .iter()
                        .chain(&ring[..at])
                        .map(String::as_str)
                        .collect();
                    path.push(member);
                    format!(
                        "a dependency cycle: {} (remove one of these `after` entries)",
                        path.join(" → ")
                    )
                }
                None => format!(
                    "{member:?} is caught in a dependency cycle: {} (remove one of these \
                     `after` entries)",
                    cycle.join(" → ")
                ),
            };
            (*member, text)
        })
        .collect()
}

#[cfg(test)]
mod tests;
