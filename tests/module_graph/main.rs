//! Dependencies between keel's modules run one way: no import circle between sibling modules.
//!
//! Reads every `src/**/*.rs` reached from a crate root (`src/lib.rs`, `src/main.rs`) through its
//! `mod` items (`#[path]` and inline `mod x { … }` included), and resolves each `crate::…`,
//! `super::…` and `self::…` path — in `use` items (groups expanded) and inline in code — to the
//! module it names, through `pub use` re-exports (`super::TaskCgroup`, which `cgroup`
//! re-exports from `cgroup::task`, names `cgroup::task`). Each reference is lifted to the pair
//! of siblings it crosses: one from `daemon::lifecycle` to `fmt` is the edge `daemon → fmt`
//! among the crate's top-level modules; one from `sandbox::shim` to `sandbox::protocol::Handed`
//! the edge `shim → protocol` among the children of `sandbox`. References between a module and
//! its ancestors are allowed (a child may use its parent and the parent its child). Any circle
//! among siblings fails the test, which names the modules caught in it, one cycle through
//! them and the references behind each edge. Comments and string literals are not code and
//! are skipped; a file under `src/` that no `mod` item reaches fails the test too.

mod conventions;
mod cycles;
mod scan;
mod self_tests;
mod start_path;
mod tokens;

use cycles::circles;
use scan::read_crate;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut BTreeSet<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.insert(path);
        }
    }
}

#[test]
fn no_import_circle_between_sibling_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut reached = BTreeSet::new();
    let mut problems = Vec::new();
    for root in ["lib.rs", "main.rs"] {
        let krate = read_crate(&src.join(root));
        assert!(
            krate.references.len() > 10 || root == "main.rs",
            "{root}: only {} crate/super/self paths found; is the scanner reading the tree?",
            krate.references.len()
        );
        problems.extend(circles(&krate));
        reached.extend(krate.files);
    }
    let mut all = BTreeSet::new();
    rust_files(&src, &mut all);
    let unreached: Vec<_> = all
        .difference(&reached)
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        unreached.is_empty(),
        "files under src/ no `mod` item reaches (not checked): {unreached:?}"
    );
    assert!(
        problems.is_empty(),
        "import circles between sibling modules (dependencies must run one way; move what both \
         need into a leaf below them, or into the module that owns the concept):\n  {}",
        problems.join("\n  ")
    );
}
