//! `after: [...]` across units: every name must be a unit, and no unit may depend on itself,
//! directly or through others (a cycle would never start). Pure functions of the units' names
//! and `after` lists: `keel check` runs them over the files it checks and their neighbours,
//! the daemon over its units at `keel add`. (At run time the daemon's gate,
//! `daemon::dependencies`, says the same of units that reached it otherwise.)

use super::{FieldPath, Problem, Unit};
use std::collections::{BTreeMap, BTreeSet};

/// The problems of `unit` (named `name`) among `others` (every other known unit's `after`
/// list, by name), each at its `after[i]`: a name that is no unit, a unit named twice, and an
/// entry through which the dependencies come back to `name`.
pub fn dependency_problems(
    name: &str,
    unit: &Unit,
    others: &BTreeMap<String, Vec<String>>,
) -> Vec<Problem> {
    let mut graph: BTreeMap<&str, &[String]> = others
        .iter()
        .map(|(n, after)| (n.as_str(), after.as_slice()))
        .collect();
    graph.insert(name, &unit.after);
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (index, dependency) in unit.after.iter().enumerate() {
        let at = FieldPath::default().field("after").index(index);
        let message = if !seen.insert(dependency.as_str()) {
            Some(format!(
                "{dependency:?} is named twice: name each unit once"
            ))
        } else if dependency == name {
            Some("is this unit itself: a unit cannot wait for its own success".to_string())
        } else if !graph.contains_key(dependency.as_str()) {
            Some(format!(
                "no unit named {dependency:?}: add its unit file first (or check them \
                 together: `keel check {dependency}.ron {name}.ron`)"
            ))
        } else {
            path_back(&graph, dependency, name).map(|path| {
                let mut cycle = vec![name.to_string()];
                cycle.extend(path);
                format!(
                    "a dependency cycle: {} (none of them would ever start): remove one of \
                     these `after` entries",
                    cycle.join(" → ")
                )
            })
        };
        if let Some(message) = message {
            problems.push(Problem {
                path: at,
                message,
                also: Vec::new(),
            });
        }
    }
    problems
}

/// A path of `after` edges from `from` to `to` (both included), if there is one.
fn path_back(graph: &BTreeMap<&str, &[String]>, from: &str, to: &str) -> Option<Vec<String>> {
    // Depth first, iteratively (a long chain must not overflow the stack); each unit once.
    let mut visited: BTreeSet<&str> = BTreeSet::new();
    let mut stack: Vec<(&str, usize)> = vec![(from, 0)];
    visited.insert(from);
    while let Some((node, next)) = stack.last_mut() {
        if *node == to {
            return Some(stack.iter().map(|(n, _)| n.to_string()).collect());
        }
        let edges = graph.get(node).copied().unwrap_or_default();
        if let Some(child) = edges.get(*next) {
            *next += 1;
            if visited.insert(child.as_str()) {
                stack.push((child.as_str(), 0));
            }
        } else {
            stack.pop();
        }
    }
    None
}

/// A cycle through `name` in `graph` (`name → … → name`), if any.
pub fn find_cycle(graph: &BTreeMap<&str, &[String]>, name: &str) -> Option<Vec<String>> {
    let edges = graph.get(name).copied().unwrap_or_default();
    edges.iter().find_map(|first| {
        path_back(graph, first, name).map(|path| {
            let mut cycle = vec![name.to_string()];
            cycle.extend(path);
            cycle
        })
    })
}

#[cfg(test)]
mod tests;
