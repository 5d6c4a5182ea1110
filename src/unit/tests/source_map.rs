use crate::unit::source_map::{offset_of, SourceMap, SCHEMA};
use crate::unit::test_support::*;
use crate::unit::*;

#[test]
fn schema_names_every_field_and_only_real_ones() {
    let text = DESIGN_EXAMPLE
        .replace("base: \"main\")", "base: \"main\", branch: Some(\"b\"))")
        .replace("network: Host", "network: Allow([\"a.com\"])")
        .replace(
            "    essential: false,",
            "    max_runtime: Some(\"8h\"),\n    max_total_runtime: Some(\"1d\"),\n    essential: false,",
        )
        .replace(
            "pids: 1024)",
            "pids: 1024, cpu_limit: Some(4.0), memory_limit: Some(\"8G\"))",
        )
        .replace(
            "    priority: 0,",
            "    priority: 0,\n    after: [\"build\"],\n    preemptible: true,",
        )
        .replace(
            "    env: {",
            "    secrets: {\"A\": Secret(file: \"/s\", hosts: [\"a.com\"], headers: [\"x-api-key\"]), \"B\": Secret(env: \"KEEL_SECRET_B\", hosts: [\"a.com\"])},\n    env: {",
        );
    parse(&text);
    let map = SourceMap::new(&text);
    let written: Vec<String> = map
        .nodes
        .iter()
        .map(|n| map.paths.path(n.path).schema_key())
        .collect();
    for key in &written {
        assert!(schema_hint_for(key).is_some(), "no hint for {key:?}");
    }
    for (key, _) in SCHEMA {
        let list_element = key.ends_with("[]") || key.ends_with("{}");
        assert!(
            list_element || written.iter().any(|w| w == key),
            "schema key {key:?} is not a field of the full example"
        );
    }
}

fn schema_hint_for(key: &str) -> Option<&'static str> {
    SCHEMA
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, hint)| *hint)
}

#[test]
fn large_inputs_stay_linear() {
    // Stray quotes, many duplicate keys, a long list of duplicates, deep nesting: each is
    // quadratic (or worse) in a naive scan, and must finish at once here.
    let quotes = "'".repeat(200_000);
    assert!(parse_unit(Path::new("t.ron"), &quotes).is_err());
    let entries = vec!["\"A\": \"1\""; 20_000].join(", ");
    let text = format!("Unit(command: [\"a\"], env: {{{entries}}})");
    let errors = check_unit(Path::new("t.ron"), &text).expect_err("duplicates");
    assert_eq!(errors.len(), 19_999);
    let signals = vec!["Cpu"; 50_000].join(", ");
    let text = format!("Unit(command: [\"a\"], liveness: Liveness(signals: [{signals}]))");
    let errors = check_unit(Path::new("t.ron"), &text).expect_err("duplicates");
    assert_eq!(errors.len(), 49_999);
    assert_eq!((errors[1].line, errors[1].col), (1, 61));
    let deep = format!(
        "[{}]",
        vec!["[".repeat(40) + &"]".repeat(40); 2_000].join(",")
    );
    assert!(parse_unit(Path::new("t.ron"), &deep).is_err());
}

#[test]
fn positions_map_both_ways() {
    let text = "ab\nçd\n\nx";
    assert_eq!(line_col(text, 0), (1, 1));
    assert_eq!(line_col(text, 3), (2, 1));
    assert_eq!(line_col(text, 5), (2, 2));
    assert_eq!(line_col(text, 8), (4, 1));
    assert_eq!(line_col(text, 99), (4, 2));
    let at = |line, col| ron::error::Position { line, col };
    assert_eq!(offset_of(text, at(2, 2)), 5);
    assert_eq!(offset_of(text, at(4, 1)), 8);
    assert_eq!(offset_of(text, at(9, 1)), text.len());
}

#[test]
fn damaged_files_never_panic_and_point_inside_the_file() {
    let check = |text: &str| {
        let lines = text.lines().count().max(1);
        if let Err(error) = parse_unit(Path::new("t.ron"), text) {
            assert!(
                error.line >= 1 && error.line <= lines + 1,
                "{error} in {text:?}"
            );
            assert!(error.col >= 1, "{error} in {text:?}");
            assert!(!error.message.is_empty());
        }
    };
    let boundaries: Vec<usize> = DESIGN_EXAMPLE
        .char_indices()
        .map(|(i, _)| i)
        .chain([DESIGN_EXAMPLE.len()])
        .collect();
    for &end in &boundaries {
        check(&DESIGN_EXAMPLE[..end]);
    }
    for pair in boundaries.windows(2) {
        let damaged = format!(
            "{}{}",
            &DESIGN_EXAMPLE[..pair[0]],
            &DESIGN_EXAMPLE[pair[1]..]
        );
        check(&damaged);
    }
    for nasty in [
        "[[[[[[[[[[",
        &"(".repeat(10_000),
        "\"",
        "r#\"",
        "'",
        "b'",
        "/*/*",
        "Unit(command:[\"a\"], env:{,,}:)",
    ] {
        check(nasty);
    }
}
