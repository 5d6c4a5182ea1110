//! One convention for unit tests, held by the suite: a module's unit tests are its child module
//! `tests`, declared `#[cfg(test)] mod tests;` and kept in `<module>/tests.rs` (for `x.rs` and
//! `x/mod.rs` alike: `x/tests.rs`); a large suite is `x/tests/mod.rs` with children by concern.
//! No `#[path]` (a module's file is where its name says), no inline `mod tests { … }`, no
//! `x_tests.rs` or `tests_x.rs` beside the module.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn offences(path: &Path, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name.ends_with("_tests.rs") || name.starts_with("tests_") {
        found.push(format!(
            "{}: tests beside their module: move them to <module>/tests.rs",
            path.display()
        ));
    }
    for (number, line) in text.lines().enumerate() {
        // The line's code without its comment and its white space: `#[cfg(test)] mod tests {`
        // and `pub mod test{` are caught as well as `mod tests {`.
        let code: String = line
            .split("//")
            .next()
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        if code.contains("#[path") {
            found.push(format!(
                "{}:{}: #[path]: put the module's file where its name says",
                path.display(),
                number + 1
            ));
        }
        if code.contains("modtests{") || code.contains("modtest{") {
            found.push(format!(
                "{}:{}: inline tests: move them to <module>/tests.rs as `mod tests;`",
                path.display(),
                number + 1
            ));
        }
    }
    found
}

#[test]
fn unit_tests_follow_one_convention() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: BTreeSet<PathBuf> = BTreeSet::new();
    super::rust_files(&src, &mut files);
    let mut found = Vec::new();
    let mut test_modules = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        test_modules += text.lines().filter(|l| l.trim() == "mod tests;").count();
        found.extend(offences(path, &text));
    }
    assert!(
        test_modules > 20,
        "only {test_modules} `mod tests;` found under src/: is the check reading the tree?"
    );
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn each_way_of_breaking_the_convention_is_caught() {
    let file = Path::new("src/x.rs");
    assert_eq!(offences(file, "#[cfg(test)]\nmod tests;\n").len(), 0);
    assert_eq!(offences(file, "#[cfg(test)]\nmod tests {\n}\n").len(), 1);
    assert_eq!(offences(file, "#[cfg(test)] mod tests{}\n").len(), 1);
    assert_eq!(offences(file, "pub(crate) mod test {\n").len(), 1);
    assert_eq!(
        offences(file, "#[cfg(test)] #[path = \"t.rs\"] mod tests;\n").len(),
        1
    );
    assert_eq!(offences(file, "// mod tests { in a comment\n").len(), 0);
    assert_eq!(
        offences(file, "#[path = \"x_tests.rs\"]\nmod tests;\n").len(),
        1
    );
    assert_eq!(offences(Path::new("src/x_tests.rs"), "").len(), 1);
    assert_eq!(offences(Path::new("src/tests_plan.rs"), "").len(), 1);
}
