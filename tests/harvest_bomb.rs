//! The red team's decompression bomb through the real daemon (issue 18): a task commits a
//! sparse 2 GiB file (a ~2 MiB object). The harvest after the attempt refuses it on the
//! object's header, in a worker: the daemon's own memory stays small (its peak RSS, VmHWM),
//! its loop answers, the branch is kept in the checkout with the reason, and a restarted
//! daemon stays as small.

mod checkout_support;
mod common;
use checkout_support::{git, init_repo};
use common::*;
use std::time::Duration;

#[test]
fn a_sparse_2_gib_commit_is_refused_by_the_harvest_and_the_daemon_stays_small() {
    if !require_root("a_sparse_2_gib_commit_is_refused_by_the_harvest_and_the_daemon_stays_small") {
        return;
    }
    let mut d = Daemon::start("harvest-bomb");
    let repo = d.scratch.dir.join("repo");
    init_repo(&repo);
    std::fs::write(repo.join("README"), "readme\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    let script = "set -e; truncate -s 2G big; git add big; git commit -qm bomb; echo committed";
    d.write_unit(
        "bomb",
        &format!(
            r#"Unit(command: ["/bin/sh", "-c", {script:?}], repo: Some(Repo(path: {repo:?}, base: "main")), restart: Never)"#,
            repo = repo.display().to_string()
        ),
    );
    let task = d.wait_state("bomb", "succeeded", Duration::from_secs(180));
    let output = std::fs::read_to_string(d.task_dir("bomb").join("run/output.log")).unwrap();
    assert!(output.contains("committed"), "{output}\n{task}");
    let refused = d
        .events(Some("bomb"))
        .into_iter()
        .find(|e| e["event"] == "harvest-failed")
        .unwrap_or_else(|| panic!("no harvest-failed event: {:?}", d.events(Some("bomb"))));
    let why = refused["detail"].as_str().unwrap_or_default();
    assert!(
        why.contains("max_object_bytes")
            && why.contains("2G")
            && (why.contains("big") || why.contains("--find-object=")),
        "the refusal names the object and the limit: {why}"
    );
    // Nothing came home; the branch is still the checkout's.
    let branches = git(&repo, &["branch", "--list", "keel/bomb"]);
    assert!(branches.trim().is_empty(), "harvested anyway: {branches}");
    assert!(d.task_dir("bomb").join("checkout").is_dir());
    assert!(d.keel(&["health"]).status.success());
    let pid = d.child.as_ref().unwrap().id();
    let peak = peak_rss_kib(&pid.to_string());
    // The red team measured 2.1 GB before workers; a daemon's own footprint is a few MB.
    assert!(peak < 200 * 1024, "the daemon's peak RSS: {peak} KiB");

    // A restarted daemon (it finds the task ended) does not blow up either.
    d.shutdown();
    d.spawn();
    assert!(d.keel(&["health"]).status.success());
    let harvest = d.keel(&["harvest", "bomb"]);
    let said = String::from_utf8_lossy(&harvest.stdout).to_string()
        + &String::from_utf8_lossy(&harvest.stderr);
    assert!(!harvest.status.success(), "harvested on request: {said}");
    assert!(said.contains("max_object_bytes"), "{said}");
    let pid = d.child.as_ref().unwrap().id();
    let peak = peak_rss_kib(&pid.to_string());
    assert!(
        peak < 200 * 1024,
        "the restarted daemon's peak RSS: {peak} KiB"
    );
}
