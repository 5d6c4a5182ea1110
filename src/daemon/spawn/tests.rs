use super::*;
use crate::unit::parse_unit;
use std::collections::BTreeMap;

fn unit(text: &str) -> Unit {
    parse_unit(Path::new("t.ron"), text).unwrap()
}

fn env_of(spec: &AttemptSpec, key: &str) -> String {
    spec.env
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("{key} missing"))
}

#[test]
fn first_attempt_uses_command_and_is_not_resumed() {
    let dirs = StateDir::new("/var/lib/keel");
    let u = unit(r#"Unit(command: ["a"], resume_command: Some(["b"]), env: {"X": "1"})"#);
    let ctx = AttemptContext {
        unit_name: "t",
        attempt: 1,
        generation: 7,
        last_exit: None,
        last_progress: None,
        network_lists: &BTreeMap::new(),
    };
    let spec = attempt_spec(&dirs, &u, &ctx);
    assert_eq!(spec.argv, ["a"]);
    assert_eq!(env_of(&spec, "KEEL_RESUMED"), "0");
    assert_eq!(env_of(&spec, "KEEL_ATTEMPT"), "1");
    assert_eq!(env_of(&spec, "KEEL_LAST_EXIT"), "");
    assert_eq!(env_of(&spec, "X"), "1");
    assert_eq!(env_of(&spec, "KEEL_PROGRESS"), "/run/keel/progress");
    assert_eq!(env_of(&spec, "KEEL_CHECKPOINT_DIR"), "/run/keel/checkpoint");
    assert_eq!(spec.cwd, Path::new("/work"));
    let sandbox = spec.sandbox.unwrap();
    assert_eq!(sandbox.work_source, Path::new("/var/lib/keel/tasks/t/work"));
    assert_eq!(
        sandbox.hidden[0],
        Path::new("/var/lib/keel"),
        "the state dir is hidden"
    );
    assert_eq!(
        sandbox.new_root,
        Path::new("/var/lib/keel/tasks/t/run/root")
    );
}

#[test]
fn later_attempts_resume() {
    let dirs = StateDir::new("/s");
    let u = unit(r#"Unit(command: ["a"], resume_command: Some(["b", "--continue"]))"#);
    let ctx = AttemptContext {
        unit_name: "t",
        attempt: 2,
        generation: 8,
        last_exit: Some("exit:1".into()),
        last_progress: Some("step 3".into()),
        network_lists: &BTreeMap::new(),
    };
    let spec = attempt_spec(&dirs, &u, &ctx);
    assert_eq!(spec.argv, ["b", "--continue"]);
    assert_eq!(env_of(&spec, "KEEL_RESUMED"), "1");
    assert_eq!(env_of(&spec, "KEEL_LAST_EXIT"), "exit:1");
    assert_eq!(env_of(&spec, "KEEL_LAST_PROGRESS"), "step 3");
    let plain = unit(r#"Unit(command: ["a"])"#);
    assert_eq!(attempt_spec(&dirs, &plain, &ctx).argv, ["a"]);
}

#[test]
fn a_users_home_is_read_from_its_passwd_line() {
    let passwd =
        "root:x:0:0:root:/root:/bin/sh\nkeeluser:x:1000:1000:k:/home/keeluser:/bin/sh\nbad:line\n";
    assert_eq!(
        super::home_of(1000, passwd),
        Some(std::path::PathBuf::from("/home/keeluser"))
    );
    assert_eq!(
        super::home_of(0, passwd),
        Some(std::path::PathBuf::from("/root"))
    );
    assert_eq!(super::home_of(1001, passwd), None);
}

#[test]
fn the_units_network_becomes_the_sandboxs_with_the_lists_it_reaches() {
    let dirs = StateDir::new("/s");
    let lists: BTreeMap<String, Vec<String>> = [
        ("anthropic", vec!["api.anthropic.com", "@telemetry"]),
        ("telemetry", vec!["statsig.anthropic.com"]),
        ("npm", vec!["registry.npmjs.org"]),
    ]
    .into_iter()
    .map(|(name, entries)| {
        let entries = entries.into_iter().map(String::from).collect();
        (name.to_string(), entries)
    })
    .collect();
    let ctx = AttemptContext {
        unit_name: "t",
        attempt: 1,
        generation: 1,
        last_exit: None,
        last_progress: None,
        network_lists: &lists,
    };
    let network = |text: &str| {
        attempt_spec(&dirs, &unit(text), &ctx)
            .sandbox
            .unwrap()
            .network
    };
    let allowed = network(
        r#"Unit(command: ["a"], sandbox: Sandbox(network: Allow(["github.com:22", "@anthropic"])))"#,
    );
    let spec::SandboxNetwork::Allow {
        entries,
        lists: given,
    } = allowed
    else {
        panic!("expected Allow, got {allowed:?}");
    };
    assert_eq!(entries, ["github.com:22", "@anthropic"]);
    assert_eq!(
        given.keys().collect::<Vec<_>>(),
        ["anthropic", "telemetry"],
        "the lists reached, through one another, and not @npm"
    );
    assert_eq!(given["telemetry"], ["statsig.anthropic.com"]);
    assert_eq!(
        network(r#"Unit(command: ["a"])"#),
        spec::SandboxNetwork::Allow {
            entries: Vec::new(),
            lists: BTreeMap::new()
        },
        "the default lets nothing out"
    );
    let host = network(r#"Unit(command: ["a"], sandbox: Sandbox(network: Host))"#);
    assert_eq!(host, spec::SandboxNetwork::Host);
    let none = network(r#"Unit(command: ["a"], sandbox: Sandbox(network: None))"#);
    assert_eq!(none, spec::SandboxNetwork::None);
}
