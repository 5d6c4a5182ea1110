//! A task's checkout through its user namespace (issue 17): the agent writes `/work` and
//! commits, a second attempt finds its files and changes them, the commits are harvested
//! into the main repository, and on the host the checkout looks as docs/sandbox.md says (its
//! git directory root's through an idmapped mount, the overlay's upper layer the task's
//! block's); `keel rm` and `keel prune` still judge it. And the
//! red team's laundering: a root 0600 secret on the host, copied into the checkout and
//! committed, cannot be read in the first place — nothing of it reaches the harvest.
//!
//! Needs root (the daemon's sandboxes) and git.

mod checkout_support;
mod common;

use checkout_support::{git, init_repo};
use common::sandbox::HostDir;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn make_repo(d: &Daemon) -> PathBuf {
    let repo = d.scratch.dir.join("repo");
    init_repo(&repo);
    std::fs::write(repo.join("base.txt"), "base\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    repo
}

fn unit_with_repo(repo: &Path, script: &str, restart: &str) -> String {
    format!(
        r#"Unit(command: ["/bin/sh", "-c", {script:?}], repo: Some(Repo(path: {repo:?}, base: "main")), {restart})"#,
        repo = repo.display().to_string(),
    )
}

/// Every file and directory under `dir` (itself included) with its owner.
fn owners(dir: &Path) -> Vec<(PathBuf, u32, u32)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        found.push((path.clone(), meta.uid(), meta.gid()));
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap().flatten() {
                stack.push(entry.path());
            }
        }
    }
    found
}

fn logs(d: &Daemon, unit: &str) -> String {
    format!(
        "{}\n{}",
        stdout_of(&d.keel(&["logs", unit])),
        std::fs::read_to_string(d.task_dir(unit).join("run/shim.log")).unwrap_or_default()
    )
}

#[test]
fn a_checkout_round_trips_through_the_user_namespace() {
    if !checkout_support::ready("a_checkout_round_trips_through_the_user_namespace") {
        return;
    }
    let d = Daemon::start("userns-checkout");
    let repo = make_repo(&d);
    // Attempt 1 writes and commits, then fails; attempt 2 finds the file, changes it, commits,
    // and leaves uncommitted work.
    let script = "set -e; \
        if [ \"$KEEL_ATTEMPT\" = 1 ]; then \
            echo one > round.txt; git add round.txt; git commit -qm 'attempt one'; exit 3; \
        fi; \
        test \"$(cat round.txt)\" = one; \
        echo two > round.txt; git commit -qam 'attempt two'; \
        echo wip > wip.txt; echo \"inside $(stat -c %u:%g round.txt)\"; \
        echo \"block $(awk '{print $2}' /proc/self/uid_map)\"";
    d.write_unit(
        "round",
        &unit_with_repo(
            &repo,
            script,
            "restart: OnFailure, backoff: Backoff(initial: \"100ms\")",
        ),
    );
    let task = d.wait_state("round", "succeeded", Duration::from_secs(60));
    assert_eq!(task["last_exit"], "exit:0", "{task}\n{}", logs(&d, "round"));
    let out = std::fs::read_to_string(d.task_dir("round").join("run/output.log")).unwrap();
    assert!(out.contains("inside 0:0"), "the agent's own files: {out}");
    // Both commits came home on keel/round.
    wait_until(Duration::from_secs(20), "attempt two harvested", || {
        git(&repo, &["log", "--format=%s", "keel/round"]).starts_with("attempt two\n")
    });
    let log = git(&repo, &["log", "--format=%s", "keel/round"]);
    assert_eq!(log, "attempt two\nattempt one\nbase", "{log}");
    assert_eq!(git(&repo, &["show", "keel/round:round.txt"]), "two");
    // On the host (docs/sandbox.md, "How the task's files look on the host"): the overlay's
    // upper layer, where the agent's changes land, is owned by the task's block (overlayfs
    // copies up with the mounter's credentials); everything else of the checkout — its git
    // directory, which the agent's commits wrote through an idmapped mount — stays root's.
    let first: u32 = common::sandbox::line(&out, "block ").parse().unwrap();
    assert!(first as u64 >= 65536, "{out}");
    let checkout = d.task_dir("round").join("checkout");
    let upper = checkout.join("upper");
    let all = owners(&checkout);
    let written: Vec<_> = all
        .iter()
        .filter(|(p, _, _)| p.ends_with("round.txt") || p.ends_with("wip.txt"))
        .collect();
    assert!(
        written.len() >= 2,
        "the agent's files in {checkout:?}: {written:?}"
    );
    let git_objects = all
        .iter()
        .filter(|(p, _, _)| p.starts_with(checkout.join("git/objects")) && p.is_file())
        .count();
    assert!(
        git_objects > 0,
        "no objects in the task's git directory: {all:?}"
    );
    let wrong: Vec<_> = all
        .iter()
        .filter(|(path, uid, gid)| {
            let want = if path.starts_with(&upper) { first } else { 0 };
            (*uid, *gid) != (want, want)
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "owned otherwise than the upper layer by {first}, the rest by root: {wrong:?}"
    );

    // keel rm keeps the checkout with uncommitted work; prune frees a clean, harvested one.
    let out = d.keel(&["rm", "round"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let said = stdout_of(&out);
    assert!(said.contains("kept") && said.contains("wip.txt"), "{said}");
    assert!(checkout.is_dir());
    d.write_unit(
        "clean",
        &unit_with_repo(
            &repo,
            "echo c > c.txt && git add c.txt && git commit -qm clean",
            "restart: Never",
        ),
    );
    let task = d.wait_state("clean", "succeeded", Duration::from_secs(30));
    assert_eq!(task["last_exit"], "exit:0", "{task}\n{}", logs(&d, "clean"));
    let out = d.keel(&["prune"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let said = stdout_of(&out);
    assert!(said.contains("freed") && said.contains("clean"), "{said}");
    assert!(!d.task_dir("clean").join("checkout").exists());
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", "keel/clean"]),
        "clean"
    );
}

#[test]
fn a_root_secret_copied_and_committed_never_reaches_the_harvest() {
    if !checkout_support::ready("a_root_secret_copied_and_committed_never_reaches_the_harvest") {
        return;
    }
    const SECRET: &str = "sk-userns-laundered-9137";
    let dir = HostDir::new("userns-launder");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = dir.0.join("service.env");
    std::fs::write(&secret, format!("API_KEY={SECRET}\n")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let d = Daemon::start("userns-launder");
    let repo = make_repo(&d);
    let script = format!(
        "if cp {secret} stolen.txt 2>/tmp/e; then echo 'copy ok'; \
         else echo \"copy $(cat /tmp/e)\"; echo nothing > stolen.txt; fi; \
         git add stolen.txt && git commit -qm stolen && echo committed",
        secret = secret.display()
    );
    d.write_unit("steal", &unit_with_repo(&repo, &script, "restart: Never"));
    let task = d.wait_state("steal", "succeeded", Duration::from_secs(30));
    assert_eq!(task["last_exit"], "exit:0", "{task}\n{}", logs(&d, "steal"));
    let out = std::fs::read_to_string(d.task_dir("steal").join("run/output.log")).unwrap();
    assert!(out.contains("committed"), "{out}");
    // The commit was harvested — and carries nothing of the secret; no object of the main
    // repository does.
    wait_until(Duration::from_secs(20), "the commit harvested", || {
        git(&repo, &["log", "-1", "--format=%s", "keel/steal"]) == "stolen"
    });
    let objects = std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .output()
        .unwrap();
    assert!(objects.status.success(), "{}", stderr_of(&objects));
    assert!(
        !String::from_utf8_lossy(&objects.stdout).contains(SECRET),
        "the secret is in the main repository: {out}"
    );
    assert_eq!(git(&repo, &["show", "keel/steal:stolen.txt"]), "nothing");
    let copy = common::sandbox::line(&out, "copy ");
    assert!(copy.contains("Permission denied"), "{out}");
}
