//! Unit tests of the task namespace's pure parts: the policy of an `Allow` spec.

use super::*;

#[test]
fn an_allow_spec_becomes_its_policy_with_its_lists_expanded() {
    let lists = BTreeMap::from([(
        "models".to_string(),
        vec!["host:11434".to_string(), "10.0.0.0/8:5432".to_string()],
    )]);
    let policy = policy_of(&["api.example.com".into(), "@models".into()], &lists).unwrap();
    assert!(policy.name_listed("api.example.com"));
    assert_eq!(policy.static_ports(), (vec![11434], vec![5432]));
    let unknown = policy_of(&["@nope".into()], &lists).unwrap_err();
    assert!(unknown.contains("nope"), "{unknown}");
    let bad = policy_of(&["*".into()], &BTreeMap::new()).unwrap_err();
    assert!(bad.starts_with("\"*\": "), "{bad}");
}

#[test]
fn the_relay_spec_names_files_in_the_run_directory() {
    let fds = RelayFds {
        netns: 3,
        dns_udp: 4,
        dns_tcp: 5,
        sniffer: None,
        listeners: vec![],
    };
    let run = Path::new("/var/lib/keel/tasks/t/run");
    let spec = relay_spec(
        &["host:8080".into()],
        &BTreeMap::new(),
        ("t", run, None),
        fds,
    );
    assert_eq!(spec.report, report_path(run));
    assert_eq!(spec.names, run.join("network/names"));
    assert_eq!(spec.entries, ["host:8080"]);
}
