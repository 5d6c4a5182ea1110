//! Per-task checkouts through the real daemon, on a repository each test generates: a commit
//! inside a task comes home on `keel/<unit>`; git commands that damage a checkout's refs and
//! objects cannot reach the main repository or another task; uncommitted work survives a
//! restart of the task and of the daemon; removal refuses to lose work; bad specs are refused.

mod checkout_support;
mod common;
use checkout_support::{git, init_repo};
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A repository on `main` with three commits of a few files.
fn make_repo(d: &Daemon) -> PathBuf {
    let repo = d.scratch.dir.join("repo");
    init_repo(&repo);
    for c in 0..3 {
        std::fs::write(repo.join(format!("f{c}.txt")), format!("commit {c}\n")).unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", &format!("commit {c}")]);
    }
    repo
}

fn unit_with_repo(repo: &Path, script: &str, extra: &str) -> String {
    format!(
        r#"Unit(command: ["/bin/sh", "-c", {script:?}], repo: Some(Repo(path: {repo:?}, base: "main")), restart: Never, {extra})"#,
        repo = repo.display().to_string(),
    )
}

#[test]
fn a_commit_in_a_task_comes_home_and_git_damage_inside_reaches_nothing_else() {
    if !require_root("checkouts") {
        return;
    }
    let d = Daemon::start("co-harvest");
    let repo = make_repo(&d);
    // B: waits with its checkout mounted, then reports what its git sees.
    let b_script = "while [ ! -e /run/keel/checkpoint/go ]; do sleep 0.05; done; \
        git log --oneline | wc -l > /run/keel/checkpoint/log; \
        git status --porcelain > /run/keel/checkpoint/status; \
        cat f0.txt > /run/keel/checkpoint/f0";
    d.write_unit("b", &unit_with_repo(&repo, b_script, ""));
    d.wait_state("b", "running", Duration::from_secs(20));
    let before = checkout_support::snapshot(&repo.join(".git"));
    // A: a fresh checkout is clean; a commit; then everything that would hurt a shared
    // repository; and B's files are out of sight.
    let b_upper = d.task_dir("b").join("checkout/upper");
    let a_script = format!(
        "set -e; test -z \"$(git status --porcelain)\"; \
         test \"$(git rev-parse --abbrev-ref HEAD)\" = keel/a; \
         echo new > new.txt; git add new.txt; git commit -qm 'agent commit'; \
         git branch -D main || true; \
         git update-ref refs/heads/main HEAD~1; \
         git gc -q --prune=now; git worktree prune; git reflog expire --expire=now --all; \
         if [ -e {b:?} ]; then echo SEES-B; exit 3; fi; \
         echo done",
        b = b_upper.display().to_string()
    );
    d.write_unit("a", &unit_with_repo(&repo, &a_script, ""));
    let a = d.wait_state("a", "succeeded", Duration::from_secs(30));
    assert_eq!(
        a["last_exit"],
        "exit:0",
        "{}",
        String::from_utf8_lossy(&d.keel(&["logs", "a"]).stdout)
    );
    // Harvested: the commit is on keel/a in the main repository; nothing else moved.
    let log = git(&repo, &["log", "--format=%s", "keel/a"]);
    assert!(log.starts_with("agent commit\ncommit 2"), "{log}");
    let events = d.events(Some("a"));
    assert!(events.iter().any(|e| e["event"] == "harvest"), "{events:?}");
    let after = checkout_support::snapshot(&repo.join(".git"));
    let refs_before: Vec<&str> = before.0.lines().collect();
    for line in refs_before {
        assert!(
            after.0.contains(line),
            "ref changed: {line}\nnow:\n{}",
            after.0
        );
    }
    for object in &before.1 {
        assert!(after.1.contains(object), "object gone: {object}");
    }
    git(&repo, &["fsck", "--no-progress"]);
    // B never noticed.
    std::fs::write(d.task_dir("b").join("checkpoint/go"), "").unwrap();
    d.wait_state("b", "succeeded", Duration::from_secs(20));
    let read =
        |f: &str| std::fs::read_to_string(d.task_dir("b").join("checkpoint").join(f)).unwrap();
    assert_eq!(read("log").trim(), "3");
    assert_eq!(read("status"), "");
    assert_eq!(read("f0"), "commit 0\n");
}

#[test]
fn uncommitted_work_survives_a_killed_attempt_and_a_daemon_restart() {
    if !require_root("checkout resume") {
        return;
    }
    let mut d = Daemon::start("co-resume");
    let repo = make_repo(&d);
    let script = "echo $KEEL_ATTEMPT: $(cat wip.txt 2>/dev/null) >> /run/keel/checkpoint/seen; \
        echo wip-$KEEL_ATTEMPT > wip.txt; exec sleep 60";
    d.write_unit(
        "w",
        &unit_with_repo(&repo, script, "").replace(
            "restart: Never",
            "restart: Always, backoff: Backoff(initial: \"100ms\")",
        ),
    );
    let seen = d.task_dir("w").join("checkpoint/seen");
    let lines = |n: usize| {
        std::fs::read_to_string(&seen)
            .unwrap_or_default()
            .lines()
            .count()
            >= n
    };
    wait_until(Duration::from_secs(20), "attempt 1 ran", || lines(1));
    assert!(d.keel(&["kill", "w"]).status.success());
    wait_until(Duration::from_secs(20), "attempt 2 ran", || lines(2));
    assert!(d.shutdown().unwrap().success());
    d.spawn();
    wait_until(Duration::from_secs(20), "attempt 3 ran", || lines(3));
    let text = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(
        text, "1:\n2: wip-1\n3: wip-2\n",
        "the checkout was reused as it was"
    );
}

#[test]
fn removal_keeps_unsaved_work_and_prune_frees_what_is_safe() {
    if !require_root("checkout removal") {
        return;
    }
    let d = Daemon::start("co-remove");
    let repo = make_repo(&d);
    // A commit, then uncommitted work on top.
    d.write_unit(
        "dirty",
        &unit_with_repo(
            &repo,
            "echo d > d.txt && git add d.txt && git commit -qm dirty-commit && echo wip > wip.txt",
            "",
        ),
    );
    d.write_unit(
        "clean",
        &unit_with_repo(
            &repo,
            "echo x > x.txt && git add x.txt && git commit -qm x",
            "",
        ),
    );
    d.wait_state("dirty", "succeeded", Duration::from_secs(30));
    d.wait_state("clean", "succeeded", Duration::from_secs(30));
    // Uncommitted work: rm refuses to delete the checkout and says why.
    let out = d.keel(&["rm", "dirty"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let said = stdout_of(&out);
    assert!(said.contains("kept") && said.contains("wip.txt"), "{said}");
    assert!(d.task_dir("dirty").join("checkout").is_dir());
    // keel prune removes the clean, harvested one and says what it freed.
    let out = d.keel(&["prune"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let said = stdout_of(&out);
    assert!(said.contains("freed") && said.contains("clean"), "{said}");
    assert!(!d.task_dir("clean").join("checkout").exists());
    assert!(git(&repo, &["log", "--format=%s", "keel/clean"]).starts_with('x'));
    // --force removes the dirty one, harvesting first. Its commit came home when its attempt
    // ended; gone from the main repository again, only this harvest can bring it back.
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", "keel/dirty"]).trim(),
        "dirty-commit"
    );
    git(&repo, &["branch", "-D", "keel/dirty"]);
    let out = d.keel(&["rm", "--force", "dirty"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let said = stdout_of(&out);
    assert!(!d.task_dir("dirty").exists(), "{said}");
    assert!(said.contains("harvested keel/dirty"), "{said}");
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", "keel/dirty"]).trim(),
        "dirty-commit",
        "harvested before the checkout went: {said}"
    );
}

#[test]
fn a_bad_repo_spec_is_refused_at_add_with_its_message() {
    if !require_root("checkout specs") {
        return;
    }
    let d = Daemon::start("co-bad");
    let repo = make_repo(&d);
    let not_git = d.scratch.dir.join("plain");
    std::fs::create_dir_all(&not_git).unwrap();
    // keel/taken exists in main at another commit than the base.
    git(&repo, &["branch", "keel/taken", "HEAD~1"]);
    let cases = [
        (
            "missing",
            format!(
                r#"Repo(path: "{}/nope", base: "main")"#,
                d.scratch.dir.display()
            ),
            "nope",
        ),
        (
            "plain",
            format!(r#"Repo(path: "{}", base: "main")"#, not_git.display()),
            "not a git repository",
        ),
        (
            "nobase",
            format!(
                r#"Repo(path: "{}", base: "no-such-branch")"#,
                repo.display()
            ),
            "no-such-branch",
        ),
        (
            "taken",
            format!(r#"Repo(path: "{}", base: "main")"#, repo.display()),
            "keel/taken",
        ),
    ];
    for (name, spec, needle) in cases {
        let file = d.scratch.dir.join(format!("{name}.ron"));
        std::fs::write(
            &file,
            format!(r#"Unit(command: ["true"], repo: Some({spec}))"#),
        )
        .unwrap();
        let out = d.keel(&["add", &path_str(&file)]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stdout_of(&out));
        let err = stderr_of(&out);
        assert!(
            err.to_lowercase().contains(&needle.to_lowercase()),
            "{name}: {err}"
        );
        assert!(!d.units().join(format!("{name}.ron")).exists());
    }
    assert!(d.status()["tasks"].as_array().unwrap().is_empty());
}

/// The red team's FIFO named `.gitignore` (issue 18): `keel prune` hung on it (libgit2's
/// status opened it). Now prune answers at once, keeps the checkout and says why, the daemon
/// stays healthy, and `keel rm --force` removes it without opening it.
#[test]
fn a_fifo_left_in_a_checkout_never_hangs_prune_and_force_removes_it() {
    if !require_root("a FIFO in a checkout") {
        return;
    }
    let d = Daemon::start("co-fifo");
    let repo = make_repo(&d);
    d.write_unit(
        "fifo",
        &unit_with_repo(
            &repo,
            "mkfifo .gitignore && mkdir deep && mkfifo deep/pipe",
            "",
        ),
    );
    d.wait_state("fifo", "succeeded", Duration::from_secs(30));
    // Bounded: a hang fails the test (timeout's 124) instead of stalling it.
    let keel = |args: &[&str]| {
        std::process::Command::new("timeout")
            .arg("60")
            .arg(keel_bin())
            .arg("--state")
            .arg(d.state())
            .args(args)
            .output()
            .unwrap()
    };
    let out = keel(&["prune"]);
    assert_ne!(out.status.code(), Some(124), "keel prune hung");
    let said = format!("{}{}", stdout_of(&out), stderr_of(&out));
    assert!(
        said.contains("changes keel will not read") && said.contains(".gitignore (a FIFO)"),
        "{said}"
    );
    assert!(d.task_dir("fifo").join("checkout").is_dir());
    assert!(keel(&["health"]).status.success());
    let out = keel(&["rm", "--force", "fifo"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(!d.task_dir("fifo").exists(), "{}", stdout_of(&out));
}
