//! `keel rm` deletes nothing in the daemon's loop: the task's files are renamed into
//! `STATE/trash` at once and a worker deletes them; what a dead daemon left in the trash is
//! swept by the next one at its start.

mod common;
use common::*;
use std::time::Duration;

fn trash_is_empty(d: &Daemon) -> bool {
    std::fs::read_dir(d.state().join("trash")).is_ok_and(|mut e| e.next().is_none())
}

#[test]
fn a_removed_tasks_files_go_at_once_and_a_worker_deletes_them() {
    if !require_root("a_removed_tasks_files_go_at_once_and_a_worker_deletes_them") {
        return;
    }
    let mut d = Daemon::start("trash");
    // Many files in the checkpoint directory (the agent's to fill): not walked in the loop.
    let script = "mkdir -p /run/keel/checkpoint/many && cd /run/keel/checkpoint/many && \
                  for i in $(seq 1 500); do : > f$i; done; echo done";
    d.write_unit(
        "filler",
        &format!(r#"Unit(command: ["/bin/sh", "-c", {script:?}], restart: Never)"#),
    );
    d.wait_state("filler", "succeeded", Duration::from_secs(30));
    assert!(d.task_dir("filler").join("checkpoint/many/f500").exists());
    std::fs::remove_file(d.units().join("filler.ron")).unwrap();
    let out = d.keel(&["rm", "filler"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        !d.task_dir("filler").exists(),
        "the task's directory is still there"
    );
    wait_until(Duration::from_secs(30), "the trash to be emptied", || {
        trash_is_empty(&d)
    });

    // A daemon that dies with something in its trash: the next one deletes it.
    d.shutdown();
    let leftover = d.state().join("trash/gone.checkpoint.1");
    std::fs::create_dir_all(leftover.join("deep")).unwrap();
    std::fs::write(leftover.join("deep/file"), "x").unwrap();
    d.spawn();
    wait_until(Duration::from_secs(30), "the leftover to be swept", || {
        !leftover.exists()
    });
}
