//! The units directory as editors, git and people treat it: files renamed away and back,
//! rewritten in place, symlinked, the directory itself replaced.

mod common;
use common::*;
use std::time::Duration;

const LONG: &str = r#"Unit(command: ["/bin/sh", "-c", "echo $KEEL_ATTEMPT > $KEEL_CHECKPOINT_DIR/seen; exec sleep 60"])"#;

#[test]
fn an_editor_save_that_renames_the_file_away_and_back_harms_nothing() {
    let d = Daemon::start("rename-dance");
    d.write_unit("edited", LONG);
    let before = d.wait_state("edited", "running", Duration::from_secs(5));
    // vim's default: rename to a backup, write the new file, remove the backup.
    let path = d.units().join("edited.ron");
    let backup = d.units().join("edited.ron~");
    std::fs::rename(&path, &backup).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&path, LONG.replace("sleep 60", "sleep 61")).unwrap();
    std::fs::remove_file(&backup).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let after = d.task("edited").unwrap();
    assert_eq!(after["state"], "running");
    assert_eq!(after["pid"], before["pid"], "the attempt was not touched");
    assert_eq!(after["unit_changed"], true);
    assert!(d.task_dir("edited").join("checkpoint/seen").exists());
}

#[test]
fn a_file_that_comes_back_while_its_task_stops_restarts_it() {
    let d = Daemon::start("comeback");
    // Slow to stop: 1 s between SIGTERM and exit.
    let slow = r#"Unit(command: ["/bin/sh", "-c", "trap 'sleep 1; exit 0' TERM; while :; do sleep 0.1; done"])"#;
    d.write_unit("slow", slow);
    d.wait_state("slow", "running", Duration::from_secs(5));
    let path = d.units().join("slow.ron");
    std::fs::remove_file(&path).unwrap();
    d.wait_state("slow", "stopping", Duration::from_secs(5));
    d.write_unit("slow", slow);
    let task = d.wait_state("slow", "running", Duration::from_secs(10));
    assert_eq!(task["attempt"], 2);
}

#[test]
fn a_removed_unit_file_keeps_checkpoint_and_logs() {
    let d = Daemon::start("forget");
    d.write_unit("gone", LONG);
    d.wait_state("gone", "running", Duration::from_secs(5));
    wait_until(Duration::from_secs(5), "checkpoint written", || {
        d.task_dir("gone").join("checkpoint/seen").exists()
    });
    std::fs::remove_file(d.units().join("gone.ron")).unwrap();
    wait_until(Duration::from_secs(5), "task forgotten", || {
        d.task("gone").is_none()
    });
    assert!(d.task_dir("gone").join("checkpoint/seen").exists());
    assert!(!d.task_dir("gone").join("state.ron").exists());
    // Brought back, it starts again with its checkpoint there.
    d.write_unit("gone", LONG);
    d.wait_state("gone", "running", Duration::from_secs(5));
}

#[test]
fn rewritten_in_place_symlinked_and_a_replaced_directory_are_all_seen() {
    let d = Daemon::start("watch-edges");
    // A symlink into the units directory (IN_CREATE, no IN_CLOSE_WRITE).
    let elsewhere = d.scratch.dir.join("linked.ron");
    std::fs::write(&elsewhere, LONG).unwrap();
    std::os::unix::fs::symlink(&elsewhere, d.units().join("linked.ron")).unwrap();
    d.wait_state("linked", "running", Duration::from_secs(5));
    // Editing the link's target is invisible to inotify: SIGHUP reloads.
    std::fs::write(&elsewhere, LONG.replace("sleep 60", "sleep 62")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(d.task("linked").unwrap()["unit_changed"], false);
    let pid = nix::unistd::Pid::from_raw(d.child.as_ref().unwrap().id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    wait_until(Duration::from_secs(5), "SIGHUP reload saw the edit", || {
        d.task("linked").unwrap()["unit_changed"] == true
    });
    // Rewritten in place (no rename).
    d.write_unit(
        "inplace",
        r#"Unit(command: ["/bin/sh", "-c", "exit 0"], restart: Never)"#,
    );
    d.wait_state("inplace", "succeeded", Duration::from_secs(5));
    std::fs::write(
        d.units().join("inplace.ron"),
        r#"Unit(command: ["/bin/sh", "-c", "exit 3"], restart: Never)"#,
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "in-place edit seen", || {
        d.events(Some("inplace"))
            .iter()
            .any(|e| e["event"] == "unit-changed")
    });
    // The directory itself replaced: the new one is watched.
    let old = d.scratch.dir.join("units.old");
    std::fs::rename(d.units(), &old).unwrap();
    std::fs::create_dir(d.units()).unwrap();
    for f in ["linked.ron", "inplace.ron"] {
        let _ = std::fs::rename(old.join(f), d.units().join(f));
    }
    std::thread::sleep(Duration::from_millis(300));
    d.write_unit(
        "fresh",
        r#"Unit(command: ["/bin/sh", "-c", "exit 0"], restart: Never)"#,
    );
    d.wait_state("fresh", "succeeded", Duration::from_secs(5));
    assert_eq!(d.task("linked").unwrap()["state"], "running");
}

#[test]
fn steady_churn_in_the_directory_does_not_hold_back_new_units() {
    let d = Daemon::start("churn");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let path = d.units().join("notes.txt");
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::write(&path, "x").unwrap();
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let t0 = std::time::Instant::now();
    d.write_unit("new", LONG);
    d.wait_state("new", "running", Duration::from_secs(3));
    let took = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
    assert!(took < Duration::from_secs(1), "queued after {took:?}");
}

#[test]
fn a_wrong_units_directory_is_refused_and_unseen_units_are_not_forgotten() {
    let mut d = Daemon::start("wrong-units");
    d.write_unit("kept", LONG);
    let before = d.wait_state("kept", "running", Duration::from_secs(5));
    let out = d.keel(&["shutdown", "--keep-tasks"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let _ = d.child.take().unwrap().wait();
    // A typo in --units: refused, naming the directory.
    let out = std::process::Command::new(keel_bin())
        .args(["daemon", "--state"])
        .arg(d.state())
        .arg("--units")
        .arg(d.scratch.dir.join("unitz"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("unitz does not exist"),
        "{}",
        stderr_of(&out)
    );
    // An existing but empty (say, not yet mounted) directory: the running task is re-adopted
    // and kept, not forgotten; `keel status` says its file is missing.
    let empty = d.scratch.dir.join("empty-units");
    std::fs::create_dir(&empty).unwrap();
    let real_units = d.units();
    std::fs::rename(&real_units, d.scratch.dir.join("units.away")).unwrap();
    std::os::unix::fs::symlink(&empty, &real_units).unwrap();
    d.spawn();
    std::thread::sleep(Duration::from_millis(1500));
    let task = d.task("kept").unwrap();
    assert_eq!(task["state"], "running");
    assert_eq!(task["pid"], before["pid"]);
    assert_eq!(task["unit_file_missing"], true);
}

#[test]
fn rm_removes_what_a_forgotten_task_left_behind() {
    let d = Daemon::start("leftovers");
    d.write_unit("old", LONG);
    d.wait_state("old", "running", Duration::from_secs(5));
    std::fs::remove_file(d.units().join("old.ron")).unwrap();
    wait_until(Duration::from_secs(5), "forgotten", || {
        d.task("old").is_none()
    });
    assert!(d.task_dir("old").join("checkpoint/seen").exists());
    let out = d.keel(&["rm", "old"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(!d.task_dir("old").exists());
}
