//! `secrets`: the syntax, and each rule at its field's line and column.

use crate::secrets::SecretSource;
use crate::unit::test_support::*;
use crate::unit::*;

/// The problems of `text`, as `line:col: message`.
fn errors(text: &str) -> Vec<String> {
    match check_unit(Path::new("units/t.ron"), text) {
        Ok(unit) => panic!("parsed, expected errors: {unit:?}"),
        Err(errors) => errors
            .into_iter()
            .map(|e| format!("{}:{}: {}", e.line, e.col, e.message))
            .collect(),
    }
}

fn assert_one(text: &str, at: &str, needle: &str) {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].starts_with(at), "expected at {at}: {errors:#?}");
    assert!(errors[0].contains(needle), "lacks {needle:?}: {errors:#?}");
}

#[test]
fn file_and_env_secrets_parse() {
    let unit = parse(
        r#"Unit(
    command: ["claude"],
    secrets: {
        "ANTHROPIC_API_KEY": Secret(file: "/etc/keel/secrets/anthropic", hosts: ["API.Anthropic.com."]),
        "GH_TOKEN": Secret(env: "KEEL_SECRET_GH_TOKEN", hosts: ["api.github.com", "github.com"]),
    },
    sandbox: Sandbox(network: Allow(["api.anthropic.com", "*.github.com", "github.com"])),
)"#,
    );
    let anthropic = &unit.secrets["ANTHROPIC_API_KEY"];
    assert_eq!(
        anthropic.source(),
        Some(SecretSource::File("/etc/keel/secrets/anthropic".into()))
    );
    assert_eq!(anthropic.normalised_hosts(), ["api.anthropic.com"]);
    assert_eq!(
        unit.secrets["GH_TOKEN"].source(),
        Some(SecretSource::Env("KEEL_SECRET_GH_TOKEN".into()))
    );
    assert!(parse(r#"Unit(command: ["a"])"#).secrets.is_empty());
}

const ALLOW: &str = r#"sandbox: Sandbox(network: Allow(["api.example.com"])),"#;

fn unit_with(secret: &str) -> String {
    format!(
        "Unit(\n    command: [\"a\"],\n    {ALLOW}\n    secrets: {{\n        {secret}\n    }},\n)"
    )
}

#[test]
fn each_rule_is_reported_at_its_field() {
    // Line 5 holds the secret (after 8 spaces); each problem at the token named.
    let cases: &[(&str, &str, &str)] = &[
        (
            r#""KEEL_TOKEN": Secret(file: "/s", hosts: ["api.example.com"]),"#,
            r#""KEEL_TOKEN""#,
            "KEEL_ prefix is reserved",
        ),
        (
            r#""MY-TOKEN": Secret(file: "/s", hosts: ["api.example.com"]),"#,
            r#""MY-TOKEN""#,
            "not an environment variable name",
        ),
        (
            r#""T": Secret(file: "/s", env: "E", hosts: ["api.example.com"]),"#,
            r#""E""#,
            "give file or env, not both",
        ),
        (
            r#""T": Secret(hosts: ["api.example.com"]),"#,
            r#""T""#,
            "says neither file nor env",
        ),
        (
            r#""T": Secret(file: "secrets/t", hosts: ["api.example.com"]),"#,
            r#""secrets/t""#,
            "is relative: write an absolute path",
        ),
        (
            r#""T": Secret(env: "1BAD", hosts: ["api.example.com"]),"#,
            r#""1BAD""#,
            "not an environment variable name",
        ),
        (
            r#""T": Secret(file: "/s", hosts: []),"#,
            "[]",
            "is empty: name the hosts",
        ),
        (
            r#""T": Secret(file: "/s"),"#,
            r#""T""#,
            "is empty: name the hosts",
        ),
        (
            r#""T": Secret(file: "/s", hosts: ["api.example.com:443"]),"#,
            r#""api"#,
            "has a port",
        ),
        (
            r#""T": Secret(file: "/s", hosts: ["https://api.example.com"]),"#,
            r#""https"#,
            "has a scheme",
        ),
        (
            r#""T": Secret(file: "/s", hosts: ["*.example.com"]),"#,
            r#""*"#,
            "exact names (no wildcards)",
        ),
        (
            r#""T": Secret(file: "/s", hosts: ["10.0.0.1"]),"#,
            r#""10"#,
            "is an address",
        ),
        (
            r#""T": Secret(file: "/s", hosts: ["bad_name-.com"]),"#,
            r#""bad"#,
            "not a DNS label",
        ),
        (
            r#""T": Secret(file: "/s", hosts: ["api.example.com", "other.example.org"]),"#,
            r#""other"#,
            "is not in sandbox.network's allow-list",
        ),
    ];
    for (secret, token, needle) in cases {
        let text = unit_with(secret);
        let at = format!("5:{}:", 9 + secret.find(token).unwrap());
        let errors = errors(&text);
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(&at) && e.contains(needle)),
            "{secret}: expected {at} {needle:?} in {errors:#?}"
        );
    }
}

#[test]
fn a_name_also_in_env_is_refused_at_the_env_entry() {
    assert_one(
        "Unit(\n    command: [\"a\"],\n    env: {\"TOKEN\": \"x\"},\n    secrets: {\"TOKEN\": Secret(env: \"KEEL_SECRET_TOKEN\", hosts: [\"a.com\"])},\n    sandbox: Sandbox(network: Allow([\"a.com\"])),\n)",
        "3:11:",
        "env[\"TOKEN\"]: TOKEN is also a secret",
    );
}

#[test]
fn secrets_need_the_allow_network() {
    for (network, col) in [("Host", 31), ("None", 31)] {
        let text = format!("Unit(\n    command: [\"a\"],\n    sandbox: Sandbox(network: {network}),\n    secrets: {{\"T\": Secret(env: \"KEEL_SECRET_T\", hosts: [\"a.com\"])}},\n)");
        assert_one(
            &text,
            &format!("3:{col}:"),
            "secrets are swapped in by the Allow network's relay: use network: Allow([...])",
        );
    }
    // The default network (Allow([])): the host is not reached.
    assert_one(
        "Unit(\n    command: [\"a\"],\n    secrets: {\"T\": Secret(env: \"KEEL_SECRET_T\", hosts: [\"a.com\"])},\n)",
        "3:57:",
        "secrets[\"T\"].hosts[0]: \"a.com\" is not in sandbox.network's allow-list",
    );
}

#[test]
fn a_host_is_reached_by_its_name_a_wildcard_above_it_or_a_list() {
    for allow in [r#""a.com""#, r#""A.com:443""#, r#""*.example.com""#] {
        let host = if allow.contains("example") {
            "api.example.com"
        } else {
            "a.com"
        };
        let text = format!(
            "Unit(command: [\"a\"], sandbox: Sandbox(network: Allow([{allow}])), secrets: {{\"T\": Secret(env: \"KEEL_SECRET_T\", hosts: [\"{host}\"])}})"
        );
        parse(&text);
    }
    // A list: unknown to the unit alone, so nothing is said; with keel.ron's lists, checked.
    let text = "Unit(command: [\"a\"], sandbox: Sandbox(network: Allow([\"@model\"])), secrets: {\"T\": Secret(env: \"KEEL_SECRET_T\", hosts: [\"api.anthropic.com\"])})";
    let unit = parse(text);
    let mut lists = std::collections::BTreeMap::new();
    lists.insert("model".to_string(), vec!["@anthropic".to_string()]);
    lists.insert(
        "anthropic".to_string(),
        vec!["api.anthropic.com".to_string()],
    );
    assert_eq!(network_list_problems(&unit, &lists), vec![]);
    lists.insert("anthropic".to_string(), vec!["claude.ai".to_string()]);
    let problems = network_list_problems(&unit, &lists);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0]
        .to_string()
        .contains("not in sandbox.network's allow-list"));
}

#[test]
fn a_misspelt_field_of_a_secret_is_named_with_the_fields_there_are() {
    let errors = errors(
        "Unit(\n    command: [\"a\"],\n    secrets: {\"T\": Secret(path: \"/s\", hosts: [\"a.com\"])},\n)",
    );
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].starts_with("3:27:"), "{errors:#?}");
    assert!(errors[0].contains("path"), "{errors:#?}");
    assert!(errors[0].contains("file"), "{errors:#?}");
}

#[test]
fn a_secrets_value_of_the_wrong_type_says_what_a_secret_is() {
    let errors = errors("Unit(\n    command: [\"a\"],\n    secrets: {\"T\": \"sk-123\"},\n)");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].starts_with("3:20:"), "{errors:#?}");
    assert!(errors[0].contains("Secret(file:"), "{errors:#?}");
}

#[test]
fn a_near_miss_of_a_secrets_field_is_suggested() {
    let errors = errors(
        "Unit(\n    command: [\"a\"],\n    secrets: {\"T\": Secret(fille: \"/s\", hosts: [\"a.com\"])},\n)",
    );
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains("did you mean \"file\""), "{errors:#?}");
    let errors = errors_of_field("secrtes");
    assert!(errors.contains("did you mean \"secrets\""), "{errors}");
}

fn errors_of_field(field: &str) -> String {
    errors(&format!("Unit(command: [\"a\"], {field}: {{}})")).join("\n")
}

#[test]
fn a_variable_of_keels_environment_must_be_a_keel_secret_one() {
    let text = "Unit(\n    command: [\"a\"],\n    secrets: {\"GH_TOKEN\": Secret(env: \"GH_TOKEN\", hosts: [\"api.github.com\"])},\n    sandbox: Sandbox(network: Allow([\"api.github.com\"])),\n)";
    let err = crate::unit::parse_unit(std::path::Path::new("units/t.ron"), text).unwrap_err();
    let said = err.to_string();
    assert!(said.starts_with("units/t.ron:3:"), "{said}");
    assert!(said.contains("secrets[\"GH_TOKEN\"].env"), "{said}");
    assert!(
        said.contains("KEEL_SECRET_GH_TOKEN"),
        "the name to use: {said}"
    );
}
