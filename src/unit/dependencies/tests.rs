use super::*;
use crate::unit::test_support::parse;

fn others(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    list.iter()
        .map(|(n, a)| (n.to_string(), a.iter().map(|s| s.to_string()).collect()))
        .collect()
}

fn messages(name: &str, text: &str, known: &[(&str, &[&str])]) -> Vec<String> {
    dependency_problems(name, &parse(text), &others(known))
        .into_iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect()
}

#[test]
fn known_units_are_fine() {
    let text = r#"Unit(command: ["x"], after: ["build", "lint"])"#;
    let known: &[(&str, &[&str])] = &[("build", &[]), ("lint", &["build"])];
    assert!(messages("test", text, known).is_empty());
    assert!(messages("test", r#"Unit(command: ["x"])"#, &[]).is_empty());
}

#[test]
fn unknown_twice_and_itself() {
    let text = r#"Unit(command: ["x"], after: ["build", "nope", "build", "test"])"#;
    let got = messages("test", text, &[("build", &[])]);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        got[0].starts_with("after[1]: no unit named \"nope\""),
        "{got:?}"
    );
    assert!(
        got[1].starts_with("after[2]: \"build\" is named twice"),
        "{got:?}"
    );
    assert!(
        got[2].starts_with("after[3]: is this unit itself"),
        "{got:?}"
    );
}

#[test]
fn a_cycle_is_named_in_order() {
    let text = r#"Unit(command: ["x"], after: ["ok", "b"])"#;
    let known: &[(&str, &[&str])] = &[("ok", &[]), ("b", &["c"]), ("c", &["ok", "a"])];
    let got = messages("a", text, known);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("after[1]: a dependency cycle: a → b → c → a"),
        "{got:?}"
    );
}

#[test]
fn find_cycle_follows_every_branch_and_long_chains() {
    let after: Vec<(String, Vec<String>)> = (0..10_000)
        .map(|i| (format!("u{i}"), vec![format!("u{}", i + 1)]))
        .chain([("u10000".to_string(), vec!["u0".to_string()])])
        .collect();
    let graph: BTreeMap<&str, &[String]> = after
        .iter()
        .map(|(n, a)| (n.as_str(), a.as_slice()))
        .collect();
    let cycle = find_cycle(&graph, "u0").expect("a cycle");
    assert_eq!(cycle.len(), 10_002);
    assert_eq!(cycle.first(), cycle.last());

    let list = others(&[("a", &["x", "b"]), ("b", &[]), ("x", &["y"]), ("y", &[])]);
    let graph: BTreeMap<&str, &[String]> = list
        .iter()
        .map(|(n, a)| (n.as_str(), a.as_slice()))
        .collect();
    assert_eq!(find_cycle(&graph, "a"), None);
}
