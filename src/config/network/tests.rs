//! Tests of `network: Network(...)`: the lists and the resolver, their errors at
//! `file:line:col`, the lists a unit's entries reach, the shipped example.

use super::*;
use crate::config::{load_config, parse_config, resolve, Config, HostCapacity};
use std::path::Path;

fn host() -> HostCapacity {
    HostCapacity::new(2, None, 4 << 30, None)
}

fn parse(text: &str) -> Config {
    let raw = parse_config(Path::new("keel.ron"), text).unwrap_or_else(|e| panic!("{e}"));
    resolve(&raw, &host())
}

/// Parses `text`, expecting an error at exactly `line:col` whose message contains `needle`.
fn assert_bad(text: &str, line: usize, col: usize, needle: &str) {
    let error = parse_config(Path::new("/var/lib/keel/keel.ron"), text)
        .expect_err("parsed, expected an error");
    assert!(
        error.message.contains(needle),
        "message lacks {needle:?}: {error}"
    );
    assert_eq!((error.line, error.col), (line, col), "{error}");
    assert!(error
        .to_string()
        .starts_with(&format!("/var/lib/keel/keel.ron:{line}:{col}: ")));
}

#[test]
fn network_lists_and_resolver_are_read() {
    let config = parse(
        r#"Config(network: Network(
    lists: {
        "anthropic": ["api.anthropic.com", "statsig.anthropic.com"],
        "model": ["@anthropic", "host:11434"],
    },
    resolver: Some("127.0.0.1:5353"),
))"#,
    );
    assert_eq!(
        config.network.lists["anthropic"],
        ["api.anthropic.com", "statsig.anthropic.com"]
    );
    assert_eq!(config.network.lists["model"], ["@anthropic", "host:11434"]);
    assert_eq!(
        config.network.resolver,
        Some("127.0.0.1:5353".parse().unwrap())
    );
    assert_eq!(
        parse("Config(network: Network())").network,
        NetworkConfig::default()
    );
    assert_eq!(
        parse("Config(network: Network(resolver: None))")
            .network
            .resolver,
        None
    );
}

#[test]
fn network_errors_are_at_line_and_col() {
    // A malformed entry, at its string, with the entry parser's message.
    assert_bad(
        "Config(\n    network: Network(lists: {\n        \"npm\": [\"registry.npmjs.org\", \"*.org\"],\n    }),\n)",
        3,
        39,
        "network.lists[\"npm\"][1]: \"*.org\" is too broad",
    );
    // A list that names one there is not, at that entry.
    assert_bad(
        "Config(network: Network(lists: {\"a\": [\"a.com\"], \"b\": [\"@a\", \"@c\"]}))",
        1,
        61,
        "network.lists[\"b\"][1]: @c: keel.ron's network lists have no list \"c\" (it has @a, @b)",
    );
    // Lists that include each other, at the first of them.
    assert_bad(
        "Config(network: Network(lists: {\n    \"a\": [\"@b\"],\n    \"b\": [\"x.com\", \"@a\"],\n}))",
        2,
        5,
        "the list includes itself",
    );
    assert_bad(
        "Config(network: Network(lists: {\"npm registry\": [\"registry.npmjs.org\"]}))",
        1,
        33,
        "cannot be a list's name",
    );
    assert_bad(
        "Config(network: Network(resolver: Some(\"localhost\")))",
        1,
        40,
        "network.resolver: \"localhost\" is not an address and port",
    );
    assert_bad(
        "Config(network: Network(list: {}))",
        1,
        25,
        "unknown field \"list\"",
    );
}

#[test]
fn lists_reached_follows_lists_through_lists_only() {
    let lists: BTreeMap<String, Vec<String>> = [
        ("a", vec!["a.com", "@b"]),
        ("b", vec!["b.com", "@a"]),
        ("c", vec!["c.com"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    let entries = |e: &[&str]| e.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let reached = lists_reached(&entries(&["x.org", "@a", "@missing"]), &lists);
    assert_eq!(reached.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert!(lists_reached(&entries(&["x.org"]), &lists).is_empty());
    assert_eq!(lists_reached(&entries(&["@c"]), &lists)["c"], ["c.com"]);
}

#[test]
fn the_shipped_example_configuration_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("units/examples/config/keel.ron");
    let config = load_config(&path, &host()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.network.lists["anthropic"], ["api.anthropic.com"]);
    let reached = lists_reached(&["@registries".to_string()], &config.network.lists);
    assert_eq!(
        reached.keys().collect::<Vec<_>>(),
        ["crates", "go", "npm", "pypi", "registries"]
    );
}

#[test]
fn trusted_cas_are_absolute_pem_files() {
    let dir = std::env::temp_dir().join(format!("keel-config-trust-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pem = dir.join("internal.pem");
    std::fs::write(
        &pem,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let config = parse(&format!(
        "Config(network: Network(trust: [{:?}]))",
        pem.display().to_string()
    ));
    assert_eq!(config.network.trust, std::slice::from_ref(&pem));
    assert!(parse("Config()").network.trust.is_empty());

    let not_pem = dir.join("key.txt");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let missing = dir.join("absent.pem");
    for (path, needle) in [
        (
            "ca/internal.pem".to_string(),
            "is relative: write an absolute path",
        ),
        (
            missing.display().to_string(),
            "does not exist: put the CA's certificate (PEM",
        ),
        (not_pem.display().to_string(), "holds no PEM certificate"),
        (dir.display().to_string(), "is not a regular file"),
    ] {
        let text = format!("Config(\n    network: Network(\n        trust: [{path:?}],\n    ),\n)");
        assert_bad(&text, 3, 17, needle);
        assert_bad(&text, 3, 17, "network.trust[0]: ");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
