//! The shared base tree's build, for real: its progress as the files are written, and a build
//! whose process is killed half-way (SIGKILL: a daemon or its worker dying mid-job), which
//! leaves nothing a later build trusts — it is removed and built again, once, whole.
//!
//! Needs root (the overlay is tried for real) and the git command.

mod checkout_support;
mod common;

use checkout_support::*;

use keel::checkout::{self, BaseProgress, PrepareOptions};
use keel::state::StateDir;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

const CHILD_ENV: &str = "KEEL_TEST_BASE_BUILD";

/// Runs only when the parent sets [`CHILD_ENV`] (`<state dir>|<repository>`): prepares unit
/// `u`, printing each progress report; at the first past zero it stops for good (its thread
/// sleeps until the parent kills the process), so the build is caught half-made.
#[test]
fn base_build_child() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (state, repo) = args.split_once('|').unwrap();
    let dirs = StateDir::new(PathBuf::from(state));
    let options = PrepareOptions {
        progress: Some(Arc::new(|p: BaseProgress| {
            println!("PROGRESS {} {}", p.done, p.total);
            if p.done > 0 {
                loop {
                    std::thread::park();
                }
            }
        })),
        ..Default::default()
    };
    let _ = checkout::prepare(&dirs, "u", &repo_spec(Path::new(repo)), &options);
    println!("FINISHED");
}

/// Entries of `dir` whose names start with `prefix`.
fn named(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_build_killed_half_way_is_not_trusted_and_is_built_again() {
    if !ready("a_build_killed_half_way_is_not_trusted_and_is_built_again") {
        return;
    }
    let files = 2_000;
    let setup = Setup::new("killed", files, 1);
    setup.dirs.create_task_dirs("u").unwrap();
    let state = setup.dirs.tasks_dir().parent().unwrap().to_path_buf();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "base_build_child", "--nocapture"])
        .env(
            CHILD_ENV,
            format!("{}|{}", state.display(), setup.main.display()),
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        seen.push(line.clone());
        let Some(rest) = line.strip_prefix("PROGRESS ") else {
            continue;
        };
        let (done, total) = rest.split_once(' ').unwrap();
        assert_eq!(total, files.to_string(), "the tree's files, known up front");
        if done != "0" {
            break;
        }
    }
    // Killed mid-build, by its pid.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        seen.iter()
            .any(|l| l.starts_with("PROGRESS ") && !l.ends_with(" 0 2000")),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|l| l == "FINISHED"), "{seen:?}");
    let bases = setup.dirs.bases_dir();
    let half_made = named(&bases, ".");
    assert_eq!(half_made.len(), 1, "{half_made:?}");
    assert!(
        named(&bases, "").iter().all(|n| n.starts_with('.')),
        "a base in place: {:?}",
        named(&bases, "")
    );
    assert!(!checkout::exists(&setup.dirs, "u"));

    // The next build: the leftover goes, the base is built whole, with progress to the end.
    let reports: Arc<Mutex<Vec<BaseProgress>>> = Arc::default();
    let seen = reports.clone();
    let options = PrepareOptions {
        progress: Some(Arc::new(move |p| seen.lock().unwrap().push(p))),
        ..Default::default()
    };
    let prepared = setup.prepare("u", &options);
    assert!(prepared.created && prepared.base_built, "{prepared:?}");
    assert!(named(&bases, ".").is_empty(), "{:?}", named(&bases, "."));
    let reports = reports.lock().unwrap();
    let total = files as u64;
    assert_eq!(reports.last(), Some(&BaseProgress { done: total, total }));
    assert!(reports.windows(2).all(|w| w[0].done <= w[1].done));
    assert!(
        reports.len() <= 200,
        "{} reports for {files} files",
        reports.len()
    );
    // Whole: clean at once (the index's stat data matches), every file there.
    let out = setup.run(
        "u",
        &prepared,
        "git status --porcelain; git ls-files | wc -l",
    );
    assert_eq!(out, files.to_string());
    // A second checkout of the commit shares it.
    let again = setup.prepare("v", &PrepareOptions::default());
    assert!(again.created && !again.base_built);

    // A base in place without its `ready` (somebody's hands in it) is rebuilt too.
    let base = bases.join(named(&bases, "")[0].clone());
    checkout::remove(&setup.dirs, "v", 1, false).unwrap();
    std::fs::remove_file(base.join("ready")).unwrap();
    std::fs::remove_file(base.join("tree/d3/f3.txt")).unwrap();
    let third = setup.prepare("w", &PrepareOptions::default());
    assert!(third.base_built);
    assert!(base.join("tree/d3/f3.txt").is_file());
    assert_eq!(setup.run("w", &third, "git status --porcelain"), "");
}
