//! References lifted to edges between siblings, and the circles among them.

use super::scan::{resolve, Crate, ModPath, Site};
use std::collections::{BTreeMap, BTreeSet};

/// Edges among the children of each parent module: parent → (from child → to child → sites).
pub(crate) type SiblingEdges = BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Vec<Site>>>>;

pub(crate) fn sibling_edges(krate: &Crate) -> SiblingEdges {
    let mut edges = SiblingEdges::new();
    for reference in &krate.references {
        let target = resolve(krate, &reference.segments);
        let from = &reference.from;
        let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
        if common == from.len() || common == target.len() {
            continue; // an ancestor and its descendant (or the module itself)
        }
        edges
            .entry(from[..common].to_vec())
            .or_default()
            .entry(from[common].clone())
            .or_default()
            .entry(target[common].clone())
            .or_default()
            .push(reference.site.clone());
    }
    edges
}

/// The circles of a directed graph: for each strongly connected component of more than one node
/// (Tarjan), one concrete cycle through its smallest node, so that the message can name each
/// edge. Sorted, deterministic.
pub(crate) fn find_cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut nodes: BTreeSet<&String> = graph.keys().collect();
    nodes.extend(graph.values().flatten());
    let mut cycles = Vec::new();
    for component in strongly_connected(graph, &nodes) {
        if component.len() < 2 {
            continue;
        }
        let start = component.iter().min().expect("not empty").clone();
        cycles.push(shortest_cycle(graph, &start, &component));
    }
    cycles.sort();
    cycles
}

pub(crate) fn strongly_connected(
    graph: &BTreeMap<String, BTreeSet<String>>,
    nodes: &BTreeSet<&String>,
) -> Vec<BTreeSet<String>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g String, usize>,
        low: BTreeMap<&'g String, usize>,
        stack: Vec<&'g String>,
        on_stack: BTreeSet<&'g String>,
        components: Vec<BTreeSet<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, node: &'g String) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = BTreeSet::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.insert(top.clone());
                    if top == node {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for node in nodes {
        if !tarjan.index.contains_key(*node) {
            tarjan.visit(node);
        }
    }
    tarjan.components
}

/// The shortest cycle from `start` back to itself inside `component` (breadth first), as the
/// nodes in order, `start` first.
pub(crate) fn shortest_cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    start: &String,
    component: &BTreeSet<String>,
) -> Vec<String> {
    let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next_frontier = Vec::new();
        for node in frontier {
            for next in graph.get(node).into_iter().flatten() {
                if !component.contains(next) {
                    continue;
                }
                if next == start {
                    let mut cycle = vec![node.clone()];
                    let mut at = node;
                    while at != start {
                        at = came_from[at];
                        cycle.push(at.clone());
                    }
                    cycle.reverse();
                    return cycle;
                }
                if !came_from.contains_key(next) {
                    came_from.insert(next, node);
                    next_frontier.push(next);
                }
            }
        }
        frontier = next_frontier;
    }
    unreachable!("{start} is in a strongly connected component of more than one node")
}

pub(crate) fn module_name(path: &[String]) -> String {
    std::iter::once("crate")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

/// Every circle among siblings in `krate`, one paragraph each: the modules caught in it, one
/// cycle through them, and every edge among them with the references that make it.
pub(crate) fn circles(krate: &Crate) -> Vec<String> {
    let mut found = Vec::new();
    for (parent, edges) in sibling_edges(krate) {
        let graph: BTreeMap<String, BTreeSet<String>> = edges
            .iter()
            .map(|(from, to)| (from.clone(), to.keys().cloned().collect()))
            .collect();
        let mut nodes: BTreeSet<&String> = graph.keys().collect();
        nodes.extend(graph.values().flatten());
        for component in strongly_connected(&graph, &nodes) {
            if component.len() < 2 {
                continue;
            }
            let start = component.iter().min().expect("not empty");
            let cycle = shortest_cycle(&graph, start, &component);
            let mut text = format!(
                "in {}: {} depend on each other, e.g. {} → {}",
                module_name(&parent),
                component.iter().cloned().collect::<Vec<_>>().join(", "),
                cycle.join(" → "),
                cycle[0]
            );
            for (from, to, sites) in edges
                .iter()
                .flat_map(|(from, to)| to.iter().map(move |(t, s)| (from, t, s)))
            {
                if !component.contains(from) || !component.contains(to) {
                    continue;
                }
                text.push_str(&format!(
                    "\n    {from} → {to}: {} reference(s), e.g.",
                    sites.len()
                ));
                for site in sites.iter().take(3) {
                    text.push_str(&format!(
                        "\n      {}:{}: {}",
                        site.file.display(),
                        site.line,
                        site.text
                    ));
                }
            }
            found.push(text);
        }
    }
    found.sort();
    found
}
