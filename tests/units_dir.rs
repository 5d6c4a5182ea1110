//! The units directory as editors, git and people treat it: files renamed away and back,
//! rewritten in place, symlinked, the directory itself replaced.

mod common;
use common::*;
use std::time::Duration;
use wait::{holds_throughout, PATIENCE};

/// Says which attempt it is on its output and appends it to its checkpoint, then waits.
const LONG: &str = r#"Unit(command: ["/bin/sh", "-c", "echo attempt $KEEL_ATTEMPT; echo $KEEL_ATTEMPT >> $KEEL_CHECKPOINT_DIR/seen; exec sleep 60"])"#;

fn checkpoint(d: &Daemon, unit: &str) -> String {
    std::fs::read_to_string(d.task_dir(unit).join("checkpoint/seen")).unwrap_or_default()
}

fn output(d: &Daemon, unit: &str) -> String {
    std::fs::read_to_string(d.task_dir(unit).join("run/output.log")).unwrap_or_default()
}

/// For a task that must be left alone: the journal has no stop of it.
fn never_stopped(d: &Daemon, unit: &str) -> bool {
    !d.events(Some(unit))
        .iter()
        .any(|e| ["stopping", "stopped", "exited"].contains(&e["event"].as_str().unwrap_or("")))
}

#[test]
fn an_editor_save_that_renames_the_file_away_and_back_harms_nothing() {
    let d = Daemon::start("rename-dance");
    d.write_unit("edited", LONG);
    let before = d.wait_state("edited", "running", PATIENCE);
    wait_until(PATIENCE, "checkpoint written", || {
        checkpoint(&d, "edited") == "1\n"
    });
    // vim's default: rename to a backup, write the new file, remove the backup. The file is
    // away for as long as a slow save (longer than the daemon's rescan debounce, shorter than
    // its removal confirmation): part of the scenario, not a synchronisation.
    let path = d.units().join("edited.ron");
    let backup = d.units().join("edited.ron~");
    std::fs::rename(&path, &backup).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&path, LONG.replace("sleep 60", "sleep 61")).unwrap();
    std::fs::remove_file(&backup).unwrap();
    let edited = || {
        d.task("edited")
            .expect("the save made the daemon forget edited")
    };
    wait_until(PATIENCE, "the new content seen", || {
        edited()["unit_changed"] == true
    });
    // Negative check: well past the removal confirmation, the attempt is untouched.
    holds_throughout(Duration::from_secs(2), "edited runs on, untouched", || {
        let after = edited();
        after["state"] == "running" && after["pid"] == before["pid"]
    });
    assert!(
        never_stopped(&d, "edited"),
        "{:?}",
        d.events(Some("edited"))
    );
    assert_eq!(checkpoint(&d, "edited"), "1\n", "no second attempt");
}

#[test]
fn a_file_that_comes_back_while_its_task_stops_restarts_it() {
    let d = Daemon::start("comeback");
    // Slow to stop: 1 s between SIGTERM and exit.
    let slow = r#"Unit(command: ["/bin/sh", "-c", "trap 'sleep 1; exit 0' TERM; while :; do sleep 0.1; done"])"#;
    d.write_unit("slow", slow);
    d.wait_state("slow", "running", PATIENCE);
    let path = d.units().join("slow.ron");
    std::fs::remove_file(&path).unwrap();
    d.wait_state("slow", "stopping", PATIENCE);
    d.write_unit("slow", slow);
    let task = d.wait_state("slow", "running", PATIENCE);
    assert_eq!(task["attempt"], 2);
}

#[test]
fn a_removed_unit_file_keeps_checkpoint_and_logs() {
    let d = Daemon::start("forget");
    d.write_unit("gone", LONG);
    d.wait_state("gone", "running", PATIENCE);
    wait_until(PATIENCE, "checkpoint and output written", || {
        checkpoint(&d, "gone") == "1\n" && output(&d, "gone").contains("attempt 1\n")
    });
    std::fs::remove_file(d.units().join("gone.ron")).unwrap();
    wait_until(PATIENCE, "task forgotten", || d.task("gone").is_none());
    assert_eq!(checkpoint(&d, "gone"), "1\n");
    assert_eq!(output(&d, "gone"), "attempt 1\n", "its log is kept");
    assert!(!d.task_dir("gone").join("state.ron").exists());
    // Brought back, it starts again (a new task: attempt 1) with its checkpoint there.
    d.write_unit("gone", LONG);
    d.wait_state("gone", "running", PATIENCE);
    wait_until(
        PATIENCE,
        "the new attempt appended to the kept checkpoint",
        || checkpoint(&d, "gone") == "1\n1\n",
    );
}

#[test]
fn rewritten_in_place_symlinked_and_a_replaced_directory_are_all_seen() {
    let d = Daemon::start("watch-edges");
    // A symlink into the units directory (IN_CREATE, no IN_CLOSE_WRITE).
    let elsewhere = d.scratch.dir.join("linked.ron");
    std::fs::write(&elsewhere, LONG).unwrap();
    std::os::unix::fs::symlink(&elsewhere, d.units().join("linked.ron")).unwrap();
    d.wait_state("linked", "running", PATIENCE);
    // Editing the link's target is invisible to inotify: SIGHUP reloads.
    std::fs::write(&elsewhere, LONG.replace("sleep 60", "sleep 62")).unwrap();
    // Negative check: longer than a rescan's debounce, nothing notices the edit.
    holds_throughout(
        Duration::from_secs(1),
        "the edit unseen before SIGHUP",
        || d.task("linked").unwrap()["unit_changed"] == false,
    );
    let pid = nix::unistd::Pid::from_raw(d.child.as_ref().unwrap().id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    wait_until(PATIENCE, "SIGHUP reload saw the edit", || {
        d.task("linked").unwrap()["unit_changed"] == true
    });
    // Rewritten in place (no rename).
    d.write_unit(
        "inplace",
        r#"Unit(command: ["/bin/sh", "-c", "exit 0"], restart: Never)"#,
    );
    d.wait_state("inplace", "succeeded", PATIENCE);
    std::fs::write(
        d.units().join("inplace.ron"),
        r#"Unit(command: ["/bin/sh", "-c", "exit 3"], restart: Never)"#,
    )
    .unwrap();
    wait_until(PATIENCE, "in-place edit seen", || {
        d.events(Some("inplace"))
            .iter()
            .any(|e| e["event"] == "unit-changed")
    });
    // The directory itself replaced: the new one is watched.
    let old = d.scratch.dir.join("units.old");
    std::fs::rename(d.units(), &old).unwrap();
    // Gone a while (past a retry): the daemon makes no empty one in its place (which would
    // be in the operator's way and read as every unit removed), and the task runs on.
    holds_throughout(
        Duration::from_millis(1500),
        "no units directory made by the daemon",
        || !d.units().exists() && d.task("linked").is_some_and(|t| t["state"] == "running"),
    );
    // A start meanwhile waits (the directory is hidden from a sandbox only while it exists:
    // an agent started now would see it appear), blocked, never counted.
    let out = d.keel(&["restart", "linked"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    wait_until(
        PATIENCE,
        "the restart blocked on the missing directory",
        || {
            d.task("linked").is_some_and(|t| {
                t["state"] == "queued"
                    && t["reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("the units directory") && r.contains("missing"))
            })
        },
    );
    std::fs::create_dir(d.units()).unwrap();
    for f in ["linked.ron", "inplace.ron"] {
        let _ = std::fs::rename(old.join(f), d.units().join(f));
    }
    let watching = format!("watching {} again", d.units().display());
    wait_until(PATIENCE, "the new directory watched", || {
        d.daemon_log().contains(&watching)
    });
    // Written after the daemon watches the new directory: seen through its watch.
    d.write_unit(
        "fresh",
        r#"Unit(command: ["/bin/sh", "-c", "exit 0"], restart: Never)"#,
    );
    d.wait_state("fresh", "succeeded", PATIENCE);
    // The start that waited for the directory went once it was back.
    d.wait_state("linked", "running", PATIENCE);
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
    let notes = d.units().join("notes.txt");
    wait_until(PATIENCE, "churn under way", || notes.exists());
    // The churn goes on until the new unit runs: a rescan that waited for a quiet directory
    // would never come, and this would time out.
    d.write_unit("new", LONG);
    d.wait_state("new", "running", PATIENCE);
    assert!(!churn.is_finished(), "the churn went on throughout");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
}

#[test]
fn a_wrong_units_directory_is_refused_and_unseen_units_are_not_forgotten() {
    let mut d = Daemon::start("wrong-units");
    d.write_unit("kept", LONG);
    let before = d.wait_state("kept", "running", PATIENCE);
    let out = d.keel(&["shutdown", "--keep-tasks"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let _ = d.child.take().unwrap().wait();
    // A typo in --units: refused, naming the directory.
    let out = std::process::Command::new(keel_bin())
        .args(["daemon", "--state"])
        .arg(d.state())
        .arg("--units")
        .arg(d.scratch.dir.join("unitz"))
        .env("KEEL_ID_CLAIMS_DIR", d.scratch.dir.join("id-claims"))
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
    let task = d.wait_state("kept", "running", PATIENCE);
    assert_eq!(task["pid"], before["pid"]);
    assert_eq!(task["unit_file_missing"], true);
    // Negative check: well past the removal confirmation, still kept and running.
    holds_throughout(Duration::from_secs(2), "kept is not forgotten", || {
        d.task("kept").is_some_and(|t| {
            t["state"] == "running" && t["pid"] == before["pid"] && t["unit_file_missing"] == true
        })
    });
    assert!(never_stopped(&d, "kept"), "{:?}", d.events(Some("kept")));
}

#[test]
fn rm_removes_what_a_forgotten_task_left_behind() {
    let d = Daemon::start("leftovers");
    d.write_unit("old", LONG);
    d.wait_state("old", "running", PATIENCE);
    wait_until(PATIENCE, "checkpoint written", || {
        checkpoint(&d, "old") == "1\n"
    });
    std::fs::remove_file(d.units().join("old.ron")).unwrap();
    wait_until(PATIENCE, "forgotten", || d.task("old").is_none());
    assert_eq!(checkpoint(&d, "old"), "1\n");
    let out = d.keel(&["rm", "old"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(!d.task_dir("old").exists());
}

/// A unit's `"@name"` network entries are checked against `keel.ron`'s lists as the daemon
/// reads the unit, and again when `keel reload` changes the lists.
#[test]
fn a_unit_naming_a_network_list_keel_ron_lacks_is_invalid_until_the_list_exists() {
    let mut d = Daemon::prepare("net-lists");
    let config = d.state().join("keel.ron");
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(
        &config,
        r#"Config(network: Network(lists: {"a": ["a.example.com"]}))"#,
    )
    .unwrap();
    d.spawn();
    d.write_unit(
        "listed",
        "Unit(\n    command: [\"/bin/sh\", \"-c\", \"exec sleep 60\"],\n    sandbox: Sandbox(network: Allow([\"@a\", \"@b\"])),\n)",
    );
    let invalid = || d.status()["invalid_units"].to_string();
    wait_until(PATIENCE, "the unit reported invalid", || {
        invalid().contains("listed.ron:3:44: sandbox.network[1]: @b")
    });
    assert!(invalid().contains("(it has @a)"), "{}", invalid());
    assert!(d.task("listed").is_none(), "an invalid unit made a task");
    // The list appears: the reload reads the unit again, and the task starts.
    std::fs::write(
        &config,
        r#"Config(network: Network(lists: {"a": ["a.example.com"], "b": ["host:8080"]}))"#,
    )
    .unwrap();
    let out = d.keel(&["reload"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let task = d.wait_state("listed", "running", PATIENCE);
    assert_eq!(
        task["network"]["entries"],
        serde_json::json!(["@a", "@b"]),
        "{task}"
    );
    assert!(!invalid().contains("listed.ron"), "{}", invalid());
}
