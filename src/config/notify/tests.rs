//! Tests of `notify: [...]`: the defaults, the names of events both ways, users looked up as
//! the file is read, and every error at its `file:line:col`.

use super::*;
use crate::config::tests::assert_bad;
use crate::config::{parse_config, resolve as resolve_config, HostCapacity};
use std::collections::BTreeMap;
use std::path::Path;

fn hooks(text: &str) -> Vec<Hook> {
    let raw = parse_config(Path::new("keel.ron"), text).unwrap_or_else(|e| panic!("{e}"));
    resolve_config(&raw, &HostCapacity::new(2, None, 1 << 33, None)).notify
}

#[test]
fn the_example_of_the_issue_with_its_defaults() {
    let hooks = hooks(
        r#"Config(notify: [Notify(on: [Failed, Stalled, Succeeded, OomKill], command: ["ntfy", "publish", "agents"])])"#,
    );
    assert_eq!(
        hooks,
        vec![Hook {
            on: vec![
                EventKind::Failed,
                EventKind::Stalled,
                EventKind::Succeeded,
                EventKind::OomKill
            ],
            command: vec!["ntfy".into(), "publish".into(), "agents".into()],
            user: None,
            timeout: DEFAULT_TIMEOUT,
            coalesce: DEFAULT_COALESCE,
            units: None,
            env: BTreeMap::new(),
        }]
    );
}

#[test]
fn no_notify_means_no_hooks() {
    assert!(hooks("Config()").is_empty());
    assert!(hooks("Config(notify: [])").is_empty());
}

#[test]
fn every_field_is_read() {
    let hooks = hooks(
        r#"Config(notify: [Notify(on: [Exited], command: ["/bin/true"], user: Some("root"),
            timeout: Some("30s"), coalesce: Some("1m"), units: Some(["a", "b"]))])"#,
    );
    let hook = &hooks[0];
    assert_eq!(hook.timeout, Duration::from_secs(30));
    assert_eq!(hook.coalesce, Duration::from_secs(60));
    let user = hook.user.as_ref().expect("root is looked up");
    assert_eq!((user.name.as_str(), user.uid, user.gid), ("root", 0, 0));
    assert!(user.groups.contains(&0), "{user:?}");
    assert!(hook.wants(EventKind::Exited, "a"));
    assert!(!hook.wants(EventKind::Exited, "c"), "not one of its units");
    assert!(!hook.wants(EventKind::Failed, "a"), "not one of its events");
}

#[test]
fn every_kind_maps_to_a_journal_event_and_back() {
    let mut journal_names = std::collections::BTreeSet::new();
    for kind in ALL_KINDS {
        assert_eq!(EventKind::of_journal(kind.journal_name()), Some(kind));
        assert!(
            journal_names.insert(kind.journal_name()),
            "{kind:?} shares a name"
        );
        // The written name parses back to the kind.
        let text = format!(
            r#"Config(notify: [Notify(on: [{}], command: ["x"])])"#,
            kind.name()
        );
        assert_eq!(hooks(&text)[0].on, vec![kind]);
    }
    for not_notified in ["running", "queued", "notify-failed", "daemon-start", ""] {
        assert_eq!(EventKind::of_journal(not_notified), None, "{not_notified}");
    }
}

#[test]
fn an_unknown_event_name_is_an_error_at_its_place() {
    assert_bad(
        "Config(\n  notify: [Notify(on: [Failed, Explode], command: [\"x\"])],\n)",
        2,
        32,
        "Explode",
    );
}

#[test]
fn a_missing_user_is_an_error_at_its_place() {
    assert_bad(
        "Config(notify: [\n  Notify(on: [Failed], command: [\"x\"],\n         user: Some(\"keel-no-such-user-x9\")),\n])",
        3,
        21,
        "no user \"keel-no-such-user-x9\" in /etc/passwd",
    );
}

#[test]
fn values_that_cannot_be_meant_are_errors_at_their_place() {
    assert_bad(
        "Config(notify: [Notify(on: [], command: [\"x\"])])",
        1,
        28,
        "never run",
    );
    assert_bad(
        "Config(notify: [Notify(on: [Failed], command: [])])",
        1,
        47,
        "is empty",
    );
    assert_bad(
        "Config(notify: [Notify(on: [Failed], command: [\"\"])])",
        1,
        48,
        "not a program name",
    );
    assert_bad(
        "Config(notify: [Notify(on: [Failed], command: [\"x\"], timeout: Some(\"0s\"))])",
        1,
        68,
        "more than 0",
    );
    assert_bad(
        "Config(notify: [Notify(on: [Failed], command: [\"x\"], timeout: Some(\"2h\"))])",
        1,
        68,
        "at most",
    );
    assert_bad(
        "Config(notify: [Notify(on: [Failed], command: [\"x\"], coalesce: Some(\"100ms\"))])",
        1,
        69,
        "is below 1s",
    );
    assert_bad(
        "Config(notify: [Notify(on: [Failed], command: [\"x\"], colaesce: Some(\"1m\"))])",
        1,
        54,
        "colaesce",
    );
    assert_bad("Config(notify: [Notify(command: [\"x\"])])", 1, 17, "on");
}

#[test]
fn describe_is_short() {
    let mut hook =
        hooks(r#"Config(notify: [Notify(on: [Failed], command: ["ntfy", "publish", "agents"])])"#)
            .remove(0);
    assert_eq!(hook.describe(), "ntfy publish agents");
    hook.command = vec!["x".repeat(100)];
    assert_eq!(hook.describe().chars().count(), 61);
}

/// Every `Notify(...)` of docs/notifications.md parses and checks (users are not looked up:
/// the examples name users of their own).
#[test]
fn the_examples_of_the_docs_parse() {
    let doc = include_str!("../../../docs/notifications.md");
    let mut examples = 0;
    for block in doc.split("```ron\n").skip(1) {
        let block = block.split("```").next().unwrap();
        let list = match block.trim_start().starts_with("Config(") {
            true => {
                let config: crate::config::RawConfig =
                    ron::from_str(block).unwrap_or_else(|e| panic!("{e}:\n{block}"));
                config.notify
            }
            false => {
                let text = format!("[{block}]");
                ron::from_str::<Vec<RawNotify>>(&text).unwrap_or_else(|e| panic!("{e}:\n{block}"))
            }
        };
        assert!(check(&list).is_empty(), "{:?}:\n{block}", check(&list));
        examples += list.len();
    }
    assert!(examples >= 9, "{examples} examples");
}

#[test]
fn a_hook_env_is_checked_like_a_unit_env() {
    let hooks = hooks(
        r#"Config(notify: [Notify(on: [Failed], command: ["x"], env: {"TOPIC": "agents"})])"#,
    );
    assert_eq!(
        hooks[0].env,
        BTreeMap::from([("TOPIC".to_string(), "agents".to_string())])
    );
    assert_bad(
        "Config(notify: [Notify(on: [Failed], command: [\"x\"],\n  env: {\"KEEL_EVENT_UNIT\": \"x\"})])",
        2,
        9,
        "KEEL_ prefix is reserved",
    );
}
