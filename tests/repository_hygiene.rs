//! What no commit may hold: a merge's conflict markers left in any tracked text file (code,
//! docs, units, scripts). A marker in a document is as wrong as one in code, and no compiler
//! sees it.

use std::path::{Path, PathBuf};

fn tracked_files(root: &Path) -> Vec<PathBuf> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    out.stdout
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| root.join(String::from_utf8_lossy(name).as_ref()))
        .collect()
}

#[test]
fn no_tracked_file_holds_a_merge_conflict_marker() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = tracked_files(root);
    assert!(files.len() > 50, "the repository's files: {}", files.len());
    let mut found = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            let marker = line.starts_with("<<<<<<< ")
                || line.starts_with(">>>>>>> ")
                || (line == "=======" && text.contains("\n<<<<<<< "));
            if marker {
                found.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "merge conflict markers:\n{}",
        found.join("\n")
    );
}
