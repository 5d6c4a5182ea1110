//! A base tree shared by two tasks, one removed while the other is being prepared on it
//! (issue 18): jobs of different tasks run at once in separate workers, and task A's
//! `keel rm` used to delete the base that task B's preparation had chosen and not yet made
//! its checkout on (B's record, the base's only sign of use, appears when its checkout is in
//! place). `KEEL_TEST_PREPARE_PAUSE` holds B in that window while A is removed.

mod checkout_support;
mod common;
mod jobs_support;
use common::wait::wait_for;
use common::*;
use jobs_support::*;
use std::path::Path;
use std::time::Duration;

/// The base trees in the state directory (not the hidden builds).
fn bases(state: &Path) -> Vec<String> {
    std::fs::read_dir(state.join("bases"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| !name.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_removal_keeps_the_base_a_concurrent_preparation_has_chosen() {
    if !checkout_support::ready("jobs: shared base") {
        return;
    }
    let mut d = Daemon::prepare("jobs-shared-base");
    let pause = d.scratch.dir.join("pause-b");
    d.env.push((
        "KEEL_TEST_PREPARE_PAUSE".into(),
        format!("b:{}", pause.display()),
    ));
    d.spawn();
    let repo = many_files_repo(&d.scratch.dir, 10);
    d.write_unit("a", &counting_unit(&repo, ""));
    d.wait_state("a", "succeeded", Duration::from_secs(60));
    let built = bases(&d.state());
    assert_eq!(built.len(), 1, "{built:?}");
    // B chooses the same base and is held before its checkout is in place.
    std::fs::write(&pause, "").unwrap();
    d.write_unit("b", &counting_unit(&repo, ""));
    let mut paused = pause.clone().into_os_string();
    paused.push(".paused");
    wait_for(Duration::from_secs(60), "b's preparation paused", || {
        Path::new(&paused).exists().then_some(())
    });
    // A goes: its checkout, but not the base B is about to use.
    let out = d.keel(&["rm", "a"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(bases(&d.state()), built, "the base B chose was removed");
    std::fs::remove_file(&pause).unwrap();
    d.wait_state("b", "succeeded", Duration::from_secs(60));
    let count = std::fs::read_to_string(d.task_dir("b").join("checkpoint/count")).unwrap();
    assert_eq!(count.trim(), "10", "b saw a partial base");
    // Once B is removed too, nothing holds the base: it goes, and its lock file with it.
    let out = d.keel(&["rm", "b"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_until(Duration::from_secs(30), "the base removed", || {
        bases(&d.state()).is_empty()
    });
    let locks: Vec<_> = std::fs::read_dir(d.state().join("base-locks"))
        .map(|e| e.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(locks.is_empty(), "lock files left: {locks:?}");
}
