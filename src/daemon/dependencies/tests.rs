use super::*;
use TaskState::*;

/// `(name, state, after)` to owned lists, then the gate of each.
fn units(list: &[(&str, TaskState, &[&str])]) -> Vec<(String, TaskState, Vec<String>)> {
    list.iter()
        .map(|(n, s, a)| (n.to_string(), *s, a.iter().map(|d| d.to_string()).collect()))
        .collect()
}

/// The gate's view of owned `(name, state, after)` lists: nothing blocked by the host.
fn nodes_of(owned: &[(String, TaskState, Vec<String>)]) -> BTreeMap<&str, Node<'_>> {
    owned
        .iter()
        .map(|(n, s, a)| {
            (
                n.as_str(),
                Node {
                    after: a,
                    state: *s,
                    host_blocked: None,
                },
            )
        })
        .collect()
}

fn gates_of(list: &[(&str, TaskState, &[&str])], names: &[&str]) -> Vec<Gate> {
    let owned = units(list);
    let nodes = nodes_of(&owned);
    let gates = Gates::new(&nodes);
    names.iter().map(|n| gates.gate(n)).collect()
}

fn blocked(gate: &Gate) -> &str {
    match gate {
        Gate::Blocked(why) => why,
        other => panic!("not blocked: {other:?}"),
    }
}

#[test]
fn no_after_or_all_succeeded_is_ready() {
    let list = [
        ("a", Queued, &[][..]),
        ("b", Succeeded, &[]),
        ("c", Queued, &["b"]),
    ];
    assert_eq!(gates_of(&list, &["a", "c"]), [Gate::Ready, Gate::Ready]);
}

#[test]
fn waits_names_each_dependency_on_its_way() {
    for state in [Queued, Starting, Running, Stalled, Stopping, Backoff] {
        let list = [
            ("build", state, &[][..]),
            ("lint", Succeeded, &[]),
            ("test", Queued, &["build", "lint"]),
        ];
        assert_eq!(
            gates_of(&list, &["test"]),
            [Gate::Waits(format!(
                "waits for \"build\" ({})",
                state.as_str()
            ))]
        );
    }
    let list = [
        ("build", Running, &[][..]),
        ("lint", Queued, &[]),
        ("test", Queued, &["build", "lint"]),
    ];
    assert_eq!(
        gates_of(&list, &["test"]),
        [Gate::Waits(
            "waits for \"build\" (running), \"lint\" (queued)".into()
        )]
    );
}

#[test]
fn failed_stopped_or_missing_blocks_with_the_fix() {
    let list = [
        ("f", Failed, &[][..]),
        ("s", Stopped, &[]),
        ("a", Queued, &["f"]),
        ("b", Queued, &["s"]),
        ("c", Queued, &["gone"]),
    ];
    let gates = gates_of(&list, &["a", "b", "c"]);
    assert_eq!(
        blocked(&gates[0]),
        "after \"f\": \"f\" failed (`keel start f` to try it again)"
    );
    assert_eq!(
        blocked(&gates[1]),
        "after \"s\": \"s\" was stopped (`keel start s`)"
    );
    assert!(blocked(&gates[2]).contains("no unit is named \"gone\""));
}

/// build → test → deploy → notify, with test failed: deploy is blocked by test, and so is
/// notify (through deploy); build's success changes nothing.
#[test]
fn a_chain_with_a_failure_in_the_middle() {
    let list = [
        ("build", Succeeded, &[][..]),
        ("test", Failed, &["build"]),
        ("deploy", Queued, &["test"]),
        ("notify", Queued, &["deploy"]),
    ];
    let gates = gates_of(&list, &["deploy", "notify"]);
    assert_eq!(
        blocked(&gates[0]),
        "after \"test\": \"test\" failed (`keel start test` to try it again)"
    );
    assert_eq!(
        blocked(&gates[1]),
        "after \"deploy\" (which waits in turn): \"test\" failed (`keel start test` to try it \
         again)"
    );
    // test started again: deploy waits for it, notify for deploy.
    let list = [
        ("build", Succeeded, &[][..]),
        ("test", Running, &["build"]),
        ("deploy", Queued, &["test"]),
        ("notify", Queued, &["deploy"]),
    ];
    assert_eq!(
        gates_of(&list, &["deploy", "notify"]),
        [
            Gate::Waits("waits for \"test\" (running)".into()),
            Gate::Waits("waits for \"deploy\" (queued)".into())
        ]
    );
}

#[test]
fn a_blocked_dependency_wins_over_a_waiting_one() {
    let list = [
        ("r", Running, &[][..]),
        ("f", Failed, &[]),
        ("a", Queued, &["r", "f"]),
    ];
    assert!(blocked(&gates_of(&list, &["a"])[0]).starts_with("after \"f\""));
}

#[test]
fn cycles_block_their_members_and_those_behind_them() {
    let list = [
        ("a", Queued, &["b"][..]),
        ("b", Queued, &["c"]),
        ("c", Queued, &["a"]),
        ("d", Queued, &["a"]),
        ("e", Queued, &["e"]),
    ];
    let gates = gates_of(&list, &["a", "b", "d", "e"]);
    assert_eq!(
        blocked(&gates[0]),
        "a dependency cycle: a → b → c → a (remove one of these `after` entries)"
    );
    assert!(blocked(&gates[1]).starts_with("a dependency cycle: b → c → a → b"));
    assert_eq!(
        blocked(&gates[2]),
        "after \"a\": a dependency cycle: a → b → c → a (remove one of these `after` entries)"
    );
    assert!(blocked(&gates[3]).starts_with("a dependency cycle: e → e"));
    // A cycle through a unit already running holds nobody: that one may still succeed.
    let list = [("a", Queued, &["b"][..]), ("b", Running, &["a"])];
    assert_eq!(
        gates_of(&list, &["a"]),
        [Gate::Waits("waits for \"b\" (running)".into())]
    );
}

/// A chain of 10,000 queued units with a failure at its end: linear, no recursion.
#[test]
fn a_long_chain_is_gated_without_recursion() {
    let names: Vec<String> = (0..10_000).map(|i| format!("u{i}")).collect();
    let mut owned: Vec<(String, TaskState, Vec<String>)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let after = names.get(i + 1).cloned().into_iter().collect();
            (n.clone(), Queued, after)
        })
        .collect();
    owned.last_mut().unwrap().1 = Failed;
    let nodes = nodes_of(&owned);
    let gates = Gates::new(&nodes);
    assert!(blocked(&gates.gate("u0")).contains("\"u9999\" failed"));
    assert!(blocked(&gates.gate("u9998")).starts_with("after \"u9999\": "));
}

/// A long chain behind a cycle, every unit gated: each in the cycle names it, each behind it
/// is blocked through its dependency (one pass over the graph, not one search per unit).
#[test]
fn every_unit_of_a_long_chain_behind_a_cycle_is_gated_in_one_pass() {
    let n = 10_000;
    let mut owned: Vec<(String, TaskState, Vec<String>)> = (0..n)
        .map(|i| (format!("u{i:05}"), Queued, vec![format!("u{:05}", i + 1)]))
        .collect();
    owned.push((format!("u{n:05}"), Queued, vec![format!("u{:05}", n - 1)]));
    let nodes = nodes_of(&owned);
    let gates = Gates::new(&nodes);
    let last = format!("u{n:05}");
    let before = format!("u{:05}", n - 1);
    assert!(blocked(&gates.gate(&last))
        .starts_with(&format!("a dependency cycle: {last} → {before} → {last}")));
    for (name, _, _) in &owned[..(n - 1) as usize] {
        let why = gates.gate(name);
        assert!(blocked(&why).starts_with("after \"u"), "{name}: {why:?}");
    }
}

#[test]
fn a_dependency_the_host_refuses_blocks_its_dependents_with_its_reason() {
    let after = vec!["b".to_string()];
    let none: Vec<String> = Vec::new();
    let nodes: BTreeMap<&str, Node> = [
        (
            "a",
            Node {
                after: &after,
                state: Queued,
                host_blocked: None,
            },
        ),
        (
            "b",
            Node {
                after: &none,
                state: Queued,
                host_blocked: Some("no such user \"agent\" on this host"),
            },
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        blocked(&Gates::new(&nodes).gate("a")),
        "after \"b\": \"b\" is blocked: no such user \"agent\" on this host"
    );
}

#[test]
fn the_journal_key_ignores_the_dependencies_states() {
    let key = |list: &[(&str, TaskState, &[&str])]| gates_of(list, &["t"])[0].journal_key();
    let queued = key(&[("b", Queued, &[]), ("t", Queued, &["b"])]);
    let running = key(&[("b", Running, &[]), ("t", Queued, &["b"])]);
    assert_eq!(queued, running);
    assert_eq!(queued, "waits:b");
    let failed = key(&[("b", Failed, &[]), ("t", Queued, &["b"])]);
    assert_ne!(failed, running);
    assert_eq!(key(&[("t", Queued, &[])]), "");
}
