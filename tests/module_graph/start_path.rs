//! The start of an attempt reads one way (issue 17): its files, one per process, use only the
//! files of the processes before them; nothing of the start reaches back into the shim, the
//! spare or the daemon's templates; and `src/sys` imports nothing of the crate but leaves,
//! so no sandbox logic can sit below it.

use super::cycles::{module_name, sibling_edges, SiblingEdges};
use super::scan::read_crate;
use std::path::Path;

/// Every edge from `from` among the children of `parent` whose target is not in `allowed`.
fn edges_outside(
    edges: &SiblingEdges,
    parent: &[&str],
    from: &str,
    allowed: &[&str],
) -> Vec<String> {
    let parent: Vec<String> = parent.iter().map(|s| s.to_string()).collect();
    let Some(children) = edges.get(&parent) else {
        return Vec::new();
    };
    let Some(targets) = children.get(from) else {
        return Vec::new();
    };
    targets
        .iter()
        .filter(|(to, _)| !allowed.contains(&to.as_str()))
        .map(|(to, sites)| {
            let site = &sites[0];
            format!(
                "in {}: {from} → {to} ({}:{}: {})",
                module_name(&parent),
                site.file.display(),
                site.line,
                site.text
            )
        })
        .collect()
}

#[test]
fn the_start_path_only_goes_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let krate = read_crate(&src.join("lib.rs"));
    let edges = sibling_edges(&krate);
    let start = ["sandbox", "start"];
    // The sandbox's files as seen from the start: what it may use.
    let below_the_start = [
        "agent",
        "mounts",
        "ownership",
        "privileges",
        "protocol",
        "seccomp",
        "spec",
    ];
    let mut wrong = Vec::new();
    wrong.extend(edges_outside(&edges, &start, "daemon", &[]));
    wrong.extend(edges_outside(&edges, &start, "agent_child", &["daemon"]));
    wrong.extend(edges_outside(
        &edges,
        &start,
        "clone",
        &["daemon", "agent_child"],
    ));
    wrong.extend(edges_outside(
        &edges,
        &["sandbox"],
        "start",
        &below_the_start,
    ));
    wrong.extend(edges_outside(
        &edges,
        &["sandbox"],
        "protocol",
        &["mounts", "privileges", "spec"],
    ));
    wrong.extend(edges_outside(&edges, &[], "sys", &["fmt"]));
    assert!(
        edges.contains_key(&start.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        "no edges among the start's files: is the scanner reading src/sandbox/start/?"
    );
    assert!(
        wrong.is_empty(),
        "the start path must only go down (daemon ← agent_child ← clone; the start uses only \
         the sandbox's leaves; sys only leaves):\n  {}",
        wrong.join("\n  ")
    );
}
