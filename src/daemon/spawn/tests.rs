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

const SECRET_UNIT: &str = r#"Unit(
    command: ["a"],
    env: {"SSL_CERT_FILE": "/mine.pem", "X": "1"},
    secrets: {
        "ANTHROPIC_API_KEY": Secret(file: "/etc/keel/secrets/anthropic", hosts: ["API.anthropic.com"]),
        "GH_TOKEN": Secret(env: "KEEL_SECRET_SPAWN_TEST_GH", hosts: ["api.github.com"]),
    },
    sandbox: Sandbox(network: Allow(["api.anthropic.com", "api.github.com"])),
)"#;

#[test]
fn each_secret_is_a_fresh_placeholder_in_the_env_and_the_spec() {
    let dirs = StateDir::new("/s");
    let ctx = AttemptContext {
        unit_name: "t",
        attempt: 1,
        generation: 1,
        last_exit: None,
        last_progress: None,
        network_lists: &BTreeMap::new(),
    };
    let u = unit(SECRET_UNIT);
    let first = attempt_spec(&dirs, &u, &ctx);
    let second = attempt_spec(&dirs, &u, &ctx);
    let secrets = &first.sandbox.as_ref().unwrap().secrets;
    assert_eq!(secrets.len(), 2);
    let key = &secrets[0];
    assert_eq!(key.name, "ANTHROPIC_API_KEY");
    assert!(crate::secrets::is_placeholder(key.placeholder.as_bytes()));
    assert_eq!(
        key.source,
        crate::secrets::SecretSource::File("/etc/keel/secrets/anthropic".into())
    );
    assert_eq!(key.hosts, ["api.anthropic.com"], "lower-cased");
    assert_eq!(
        secrets[1].source,
        crate::secrets::SecretSource::Env("KEEL_SECRET_SPAWN_TEST_GH".into())
    );
    assert!(
        (first.sandbox.as_ref().unwrap().hidden).contains(&"/etc/keel/secrets/anthropic".into()),
        "the secret's file is hidden from the agent"
    );
    assert_eq!(env_of(&first, "ANTHROPIC_API_KEY"), key.placeholder);
    assert_eq!(env_of(&first, "GH_TOKEN"), secrets[1].placeholder);
    assert_ne!(
        env_of(&second, "ANTHROPIC_API_KEY"),
        key.placeholder,
        "a placeholder of its own for every attempt"
    );
    // The CA variables, when the host has a bundle: the unit's own env wins.
    if let Some(bundle) = crate::secrets::ca_bundle_target() {
        let bundle = bundle.display().to_string();
        for name in [
            "NODE_EXTRA_CA_CERTS",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "GIT_SSL_CAINFO",
        ] {
            assert_eq!(env_of(&first, name), bundle, "{name}");
        }
        let ssl: Vec<&String> = (first.env.iter())
            .filter(|(k, _)| k == "SSL_CERT_FILE")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(
            ssl,
            [&bundle, &"/mine.pem".to_string()],
            "the unit's, last, wins"
        );
    }
    // Without secrets: no CA variables, no secrets in the spec.
    let plain = attempt_spec(&dirs, &unit(r#"Unit(command: ["a"])"#), &ctx);
    assert!(!plain.env.iter().any(|(k, _)| k == "NODE_EXTRA_CA_CERTS"));
    assert!(plain.sandbox.unwrap().secrets.is_empty());
}

#[test]
fn an_env_secret_missing_from_keels_environment_is_a_reason_to_wait() {
    let u = unit(
        r#"Unit(command: ["a"], sandbox: Sandbox(network: Allow(["a.com"])),
                secrets: {"TOKEN": Secret(env: "KEEL_SECRET_SPAWN_TEST_UNSET", hosts: ["a.com"])})"#,
    );
    let why = env_secret_problem(&u).expect("unset");
    assert!(
        why.starts_with(
            "secret TOKEN: KEEL_SECRET_SPAWN_TEST_UNSET is not set in keel's environment"
        ),
        "{why}"
    );
    std::env::set_var("KEEL_SECRET_SPAWN_TEST_SET", "v");
    let u = unit(
        r#"Unit(command: ["a"], sandbox: Sandbox(network: Allow(["a.com"])),
                secrets: {"TOKEN": Secret(env: "KEEL_SECRET_SPAWN_TEST_SET", hosts: ["a.com"]),
                          "FILE": Secret(file: "/nonexistent/secret", hosts: ["a.com"])})"#,
    );
    assert_eq!(
        env_secret_problem(&u),
        None,
        "files are the worker's to check"
    );
}
