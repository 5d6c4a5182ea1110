//! `keel diff` and the unreviewed mark, through the real daemon: a task (a `keel run --repo`)
//! commits one file and leaves others uncommitted; `keel diff` shows both, escaped; `keel
//! status` calls the task unreviewed until it has been shown, and again once its work changes.

mod checkout_support;
mod common;
use common::wait::wait_for;
use common::*;
use std::path::PathBuf;
use std::time::Duration;

/// A repository on `main` with one commit of `d0/f0.txt`.
fn make_repo(d: &Daemon) -> PathBuf {
    let repo = d.scratch.dir.join("repo");
    checkout_support::make_repo(&repo, 1, 1);
    repo
}

fn unreviewed(d: &Daemon, unit: &str) -> bool {
    let task = d.task(unit).expect("known");
    task["unreviewed"].as_bool().expect("a boolean")
}

/// The marker as the table shows it (no colour: into a pipe).
fn table_marks(d: &Daemon, unit: &str) -> bool {
    let table = stdout_of(&d.keel(&["status"]));
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("{unit} ")))
        .unwrap_or_else(|| panic!("{unit} not in\n{table}"));
    line.contains("unreviewed")
}

#[test]
fn diff_shows_commits_and_uncommitted_work_and_review_clears_the_mark() {
    if !checkout_support::ready("diff_review") {
        return;
    }
    let d = Daemon::start("diff-review");
    let repo = make_repo(&d);
    let script = "echo one > committed.txt; git add committed.txt; \
        git commit -qm 'add committed'; \
        echo staged > staged.txt; git add staged.txt; \
        echo two-$KEEL_ATTEMPT > loose.txt; echo changed >> d0/f0.txt; \
        printf 'evil \\033]0;title\\007 line\\n' > esc.txt";
    let spec = format!("{}@main", repo.display());
    let out = d.keel(&[
        "run", "--name", "w", "--repo", &spec, "--", "/bin/sh", "-c", script,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    // The clean one: a run that changes nothing is never unreviewed.
    let repo_text = repo.display().to_string();
    let out = d.keel(&["run", "--name", "clean", "--repo", &repo_text, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));

    wait_for(Duration::from_secs(90), "w marked unreviewed", || {
        unreviewed(&d, "w").then_some(())
    });
    assert!(table_marks(&d, "w"));
    assert!(!unreviewed(&d, "clean"));
    assert!(!table_marks(&d, "clean"));

    // --stat: the summary, no patch, and not a review.
    let stat = d.keel(&["diff", "w", "--stat"]);
    assert!(stat.status.success(), "{}", stderr_of(&stat));
    let stat = stdout_of(&stat);
    assert!(stat.contains("1 commit past its base main"), "{stat}");
    assert!(stat.contains("committed.txt"), "{stat}");
    assert!(!stat.contains("+one"), "{stat}");
    assert!(unreviewed(&d, "w"));

    let diff = d.keel(&["diff", "w"]);
    assert!(diff.status.success(), "{}", stderr_of(&diff));
    let text = stdout_of(&diff);
    // The commit, its summary and patch.
    assert!(text.contains("add committed"), "{text}");
    assert!(text.contains("Author: Test Author"), "{text}");
    assert!(text.contains("+one"), "{text}");
    // Staged, unstaged, untracked.
    assert!(text.contains("uncommitted, staged: 1 file"), "{text}");
    assert!(text.contains("+staged"), "{text}");
    assert!(text.contains("+changed"), "{text}");
    assert!(
        text.contains("loose.txt") && text.contains("+two-1"),
        "{text}"
    );
    // The agent's escape sequence is shown, not acted on; no colour into a pipe.
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(text.contains("evil \\e]0;title"), "{text}");

    assert!(!unreviewed(&d, "w"), "reviewed by keel diff");
    assert!(!table_marks(&d, "w"));
    let recorded = std::fs::read_to_string(d.task_dir("w").join("reviewed.ron")).unwrap();
    assert!(recorded.contains("fingerprint"), "{recorded}");

    // Run again: the work changes (loose.txt says attempt 2), the mark comes back.
    let started = d.keel(&["start", "w"]);
    assert!(started.status.success(), "{}", stderr_of(&started));
    wait_for(Duration::from_secs(90), "w unreviewed again", || {
        let task = d.task("w")?;
        (task["attempt"] == 2 && task["unreviewed"] == true).then_some(())
    });
    let diff = stdout_of(&d.keel(&["diff", "w"]));
    assert!(diff.contains("+two-2"), "{diff}");
    assert!(!unreviewed(&d, "w"));
}

#[test]
fn diff_of_a_unit_without_a_checkout_says_so() {
    if !require_root("diff_review") {
        return;
    }
    let d = Daemon::start("diff-none");
    let out = d.keel(&["run", "--name", "plain", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let diff = d.keel(&["diff", "plain"]);
    assert_eq!(diff.status.code(), Some(1));
    assert!(
        stderr_of(&diff).contains("plain has no checkout"),
        "{}",
        stderr_of(&diff)
    );
    let unknown = d.keel(&["diff", "nosuch"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr_of(&unknown).contains("unknown unit"),
        "{}",
        stderr_of(&unknown)
    );
    // A path is no unit's name: nothing outside the tasks directory is read.
    std::fs::create_dir_all(d.state().join("elsewhere")).unwrap();
    let escape = d.keel(&["diff", "../elsewhere"]);
    assert_eq!(escape.status.code(), Some(1));
    assert!(
        stderr_of(&escape).contains("is not a unit's name"),
        "{}",
        stderr_of(&escape)
    );
}
