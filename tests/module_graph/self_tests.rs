//! The checker's own parts, on made-up input.

use super::cycles::{circles, find_cycles, sibling_edges};
use super::scan::{resolve, scan_file, Crate, ModPath, Reference, Site};
use super::tokens::tokenize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn graph(edges: &[(&str, &str)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in edges {
        g.entry(a.to_string()).or_default().insert(b.to_string());
    }
    g
}

#[test]
fn cycle_finder_names_each_circle_once_and_ignores_chains() {
    let g = graph(&[
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
        ("c", "d"),
        ("d", "e"),
        ("e", "d"),
        ("e", "f"),
        ("x", "y"),
        ("y", "z"),
        ("x", "z"),
    ]);
    assert_eq!(
        find_cycles(&g),
        vec![
            vec!["a".to_string(), "b".into(), "c".into()],
            vec!["d".to_string(), "e".into()]
        ]
    );
    assert!(find_cycles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    assert!(find_cycles(&BTreeMap::new()).is_empty());
}

#[test]
fn cycle_finder_picks_the_shortest_way_back_within_a_component() {
    // a → b → c → d → a and a shortcut c → a: the component is {a, b, c, d}, the cycle from a
    // reported is a → b → c (→ a).
    let g = graph(&[("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("c", "a")]);
    assert_eq!(
        find_cycles(&g),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}

fn scan(text: &str, module: &[&str]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let module: ModPath = module.iter().map(|s| s.to_string()).collect();
    let scanned = scan_file(&tokenize(text), &module, Path::new("x.rs"));
    (
        scanned
            .children
            .iter()
            .map(|c| c.module.join("::"))
            .collect(),
        scanned
            .references
            .iter()
            .map(|r| format!("{}: {}", r.from.join("::"), r.segments.join("::")))
            .collect(),
        scanned
            .reexports
            .iter()
            .map(|r| {
                let how = if r.relative { "relative" } else { "absolute" };
                format!(
                    "{} as {}: {how} {}",
                    r.module.join("::"),
                    r.name,
                    r.target.join("::")
                )
            })
            .collect(),
    )
}

#[test]
fn scanner_expands_use_groups_and_resolves_super_inside_inline_modules() {
    let text = r##"
        //! crate::in_a_comment::is_not_code
        use crate::fmt::{self, duration, sizes::{bytes as b, Unit}};
        use super::sibling::*;
        pub(in crate::visibility) fn f() -> String {
            let s = "crate::in_a_string"; let r = r#"crate::raw"#; let c = '"';
            crate::inline::path::call(); self::own::g();
            s.to_string()
        }
        /* crate::block /* nested */ comment */
        #[path = "elsewhere.rs"]
        mod moved;
        mod tests {
            use super::*;
            use super::super::up;
        }
        pub use child::{Thing, other::Two as Deux};
        pub(crate) use crate::fmt::duration as dur;
        use super::private::Kept;
        pub use serde::Serialize;
    "##;
    let (children, references, reexports) = scan(text, &["a", "b"]);
    assert_eq!(children, ["a::b::moved", "a::b::tests"]);
    assert_eq!(
        references,
        [
            "a::b: fmt",
            "a::b: fmt::duration",
            "a::b: fmt::sizes::bytes",
            "a::b: fmt::sizes::Unit",
            "a::b: a::sibling::*",
            "a::b: inline::path::call",
            "a::b: a::b::own::g",
            "a::b::tests: a::b::*",
            "a::b::tests: a::up",
            "a::b: fmt::duration",
            "a::b: a::private::Kept",
        ]
    );
    assert_eq!(
        reexports,
        [
            "a::b as Thing: relative child::Thing",
            "a::b as Deux: relative child::other::Two",
            "a::b as dur: absolute fmt::duration",
            "a::b as Serialize: relative serde::Serialize",
        ]
    );
}

#[test]
fn edges_are_lifted_to_siblings_and_parent_child_references_are_allowed() {
    let modules: BTreeSet<ModPath> = [
        vec![],
        vec!["a"],
        vec!["a", "x"],
        vec!["a", "y"],
        vec!["b"],
        vec!["b", "z"],
    ]
    .into_iter()
    .map(|m| m.into_iter().map(String::from).collect())
    .collect();
    let reference = |from: &[&str], to: &[&str]| Reference {
        from: from.iter().map(|s| s.to_string()).collect(),
        segments: to.iter().map(|s| s.to_string()).collect(),
        site: Site {
            file: "x.rs".into(),
            line: 1,
            text: String::new(),
        },
    };
    let krate = Crate {
        modules,
        files: BTreeSet::new(),
        reexports: BTreeMap::new(),
        references: vec![
            reference(&["a", "x"], &["b", "z", "Item"]), // a → b
            reference(&["b", "z"], &["a", "y", "f"]),    // b → a: a circle at the root
            reference(&["a", "x"], &["a", "y"]),         // x → y inside a
            reference(&["a", "y"], &["a", "Type"]),      // child to parent: allowed
            reference(&["a"], &["a", "x", "g"]),         // parent to child: allowed
        ],
    };
    let edges = sibling_edges(&krate);
    let at = |parent: &[&str]| -> Vec<(String, String)> {
        let parent: ModPath = parent.iter().map(|s| s.to_string()).collect();
        edges[&parent]
            .iter()
            .flat_map(|(from, to)| to.keys().map(move |t| (from.clone(), t.clone())))
            .collect()
    };
    assert_eq!(
        at(&[]),
        [("a".into(), "b".into()), ("b".into(), "a".into())]
    );
    assert_eq!(at(&["a"]), [("x".into(), "y".into())]);
    assert_eq!(edges.len(), 2);
    let found = circles(&krate);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("in crate: a, b depend on each other, e.g. a → b → a"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("a → b: 1 reference(s)") && found[0].contains("b → a: 1 reference(s)")
    );
}

#[test]
fn a_name_re_exported_by_a_parent_is_the_module_it_comes_from() {
    // a/mod.rs: `pub use x::Thing;` — y's `super::Thing` is a reference to x, not to a.
    let text = "pub use x::Thing;\npub use serde::Serialize;\nmod x;\nmod y;\n";
    let module: ModPath = vec!["a".to_string()];
    let scanned = scan_file(&tokenize(text), &module, Path::new("a/mod.rs"));
    let mut krate = Crate::default();
    for m in [vec![], vec!["a"], vec!["a", "x"], vec!["a", "y"]] {
        krate
            .modules
            .insert(m.into_iter().map(String::from).collect());
    }
    for r in scanned.reexports {
        let child: ModPath = r.module.iter().chain(r.target.first()).cloned().collect();
        if krate.modules.contains(&child) {
            let target = r.module.iter().chain(&r.target).cloned().collect();
            krate.reexports.insert((r.module, r.name), target);
        }
    }
    assert_eq!(
        krate.reexports.len(),
        1,
        "serde's is not ours: {:?}",
        krate.reexports
    );
    let seg = |p: &[&str]| -> Vec<String> { p.iter().map(|s| s.to_string()).collect() };
    assert_eq!(
        resolve(&krate, &seg(&["a", "Thing", "new"])),
        seg(&["a", "x"])
    );
    assert_eq!(resolve(&krate, &seg(&["a", "Other"])), seg(&["a"]));
    krate.references.push(Reference {
        from: seg(&["a", "y"]),
        segments: seg(&["a", "Thing"]),
        site: Site {
            file: "a/y.rs".into(),
            line: 1,
            text: "super::Thing".into(),
        },
    });
    let edges = sibling_edges(&krate);
    assert!(edges[&seg(&["a"])]["y"].contains_key("x"), "{edges:?}");
}
