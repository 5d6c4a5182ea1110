//! The tasks' blocks of host ids as the daemon hands them out: one per task from `keel.ron`'s
//! range, persisted in `state.ron` before the spawn uses it (and in the attempt's spec), kept
//! across attempts and daemon restarts, free again at `keel rm`; a start with every block
//! held waits without spending the task's attempts.

mod common;
use common::*;
use keel::sandbox::spec::{attempt_path, AttemptSpec, IdBlock};
use std::time::Duration;

const FIRST: u32 = 0x7000_0000;
const SECOND: u32 = 0x7001_0000;

fn write_config(d: &Daemon, text: &str) {
    std::fs::create_dir_all(d.state()).unwrap();
    std::fs::write(d.state().join("keel.ron"), text).unwrap();
}

fn block(first: u32) -> Option<IdBlock> {
    Some(IdBlock {
        first,
        count: 65536,
    })
}

/// The block the spec of `unit`'s current attempt maps.
fn spec_block(d: &Daemon, unit: &str) -> Option<IdBlock> {
    let path = attempt_path(&d.task_dir(unit).join("run"));
    // The clone writes the spec once the agent has started: wait for it.
    let mut spec: Option<AttemptSpec> = None;
    wait_until(Duration::from_secs(10), "the attempt's spec", || {
        spec = keel::state::read_ron(&path).ok().flatten();
        spec.is_some()
    });
    let spec = spec.unwrap();
    spec.sandbox.expect("a sandboxed attempt").id_block
}

const LONG: &str = r#"Unit(command: ["sleep", "300"], resources: Resources(cpu: 0.1))"#;

#[test]
fn each_task_holds_its_own_block_until_it_is_removed() {
    let mut d = Daemon::prepare("id-blocks");
    write_config(
        &d,
        "Config(user_namespaces: UserNamespaces(first_id: 1879048192, blocks: 2))",
    );
    d.spawn();
    d.write_unit("a", LONG);
    d.wait_state("a", "running", Duration::from_secs(10));
    d.write_unit("b", LONG);
    d.wait_state("b", "running", Duration::from_secs(10));
    // The lowest free block each, in the record and in the spec the shim was given.
    assert_eq!(d.record("a").id_block, block(FIRST));
    assert_eq!(d.record("b").id_block, block(SECOND));
    assert_eq!(spec_block(&d, "a"), block(FIRST));
    assert_eq!(spec_block(&d, "b"), block(SECOND));

    // A third task finds every block held: its start waits, and says why.
    d.write_unit("c", LONG);
    wait_until(Duration::from_secs(10), "c's start deferred", || {
        d.events(Some("c")).iter().any(|e| {
            e["event"] == "start-deferred"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("all 2 blocks of host ids are held"))
        })
    });
    let c = d.task("c").unwrap();
    assert_eq!(c["state"], "queued", "{c}");
    // Status says why, and the wait spent none of its attempts or restarts.
    assert!(
        c["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("start deferred: all 2 blocks")),
        "{c}"
    );
    assert_eq!(
        (c["attempt"].as_u64(), c["restarts"].as_u64()),
        (Some(0), Some(0)),
        "{c}"
    );
    assert!(
        !d.events(Some("c")).iter().any(|e| e["event"] == "starting"),
        "c never started"
    );

    // A daemon restart: every task resumes with the block its record holds (the queued c,
    // though it may be scheduled first, finds none free).
    assert!(d.shutdown().unwrap().success(), "{}", d.daemon_log());
    d.spawn();
    d.wait_state("a", "running", Duration::from_secs(10));
    d.wait_state("b", "running", Duration::from_secs(10));
    let (a, b) = (d.record("a"), d.record("b"));
    assert_eq!((a.attempt, a.id_block), (2, block(FIRST)));
    assert_eq!((b.attempt, b.id_block), (2, block(SECOND)));
    assert_eq!(spec_block(&d, "a"), block(FIRST));
    assert_eq!(d.task("c").unwrap()["state"], "queued");

    // Removing a frees its block: c starts with it, at its first attempt.
    let out = d.keel(&["rm", "a"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    d.wait_state("c", "running", Duration::from_secs(20));
    let c = d.record("c");
    assert_eq!((c.attempt, c.id_block), (1, block(FIRST)));
    assert_eq!(spec_block(&d, "c"), block(FIRST));
    assert!(d.shutdown().unwrap().success());
}

#[test]
fn with_user_namespaces_off_no_block_is_given_and_a_change_waits_for_the_next_start() {
    let mut d = Daemon::prepare("id-blocks-off");
    write_config(&d, "Config(user_namespaces: Off)");
    d.spawn();
    d.write_unit("a", LONG);
    d.wait_state("a", "running", Duration::from_secs(10));
    assert_eq!(d.record("a").id_block, None);
    assert_eq!(spec_block(&d, "a"), None);
    assert!(
        d.daemon_log().contains("user_namespaces: Off"),
        "the daemon says what Off gives up:\n{}",
        d.daemon_log()
    );
    // Turned on at a reload: the range was not checked at this start, so it waits for the
    // next one, and says so.
    write_config(&d, "Config()");
    let out = d.keel(&["reload"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    d.write_unit("b", LONG);
    d.wait_state("b", "running", Duration::from_secs(10));
    assert_eq!(d.record("b").id_block, None);
    assert!(
        d.daemon_log()
            .contains("user_namespaces changed: it takes effect at the next daemon start"),
        "{}",
        d.daemon_log()
    );
    // At the next start both tasks get a block each.
    assert!(d.shutdown().unwrap().success());
    d.spawn();
    d.wait_state("a", "running", Duration::from_secs(10));
    d.wait_state("b", "running", Duration::from_secs(10));
    let (a, b) = (d.record("a").id_block, d.record("b").id_block);
    let mut firsts = [a.unwrap().first, b.unwrap().first];
    firsts.sort();
    assert_eq!(firsts, [FIRST, SECOND]);
    assert_eq!(spec_block(&d, "b"), b);
    assert!(d.shutdown().unwrap().success());
}
