//! `after: [...]` on the real daemon: a task starts only once each unit it names succeeded; a
//! failure in the middle of a chain blocks what follows (visibly), and fixing it lets the
//! chain go on; `keel check` and `keel add` refuse unknown names and cycles at file:line:col.

mod common;
use common::*;
use std::time::Duration;
use wait::{holds_throughout, wait_for};

/// The units' `starting` and `exited` events, in journal order: `("build", "starting")`, …
fn order(d: &Daemon) -> Vec<(String, String)> {
    d.events(None)
        .into_iter()
        .filter(|e| matches!(e["event"].as_str(), Some("starting" | "exited")))
        .map(|e| {
            (
                e["unit"].as_str().unwrap_or_default().to_string(),
                e["event"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn position(events: &[(String, String)], unit: &str, event: &str) -> usize {
    events
        .iter()
        .position(|(u, e)| u == unit && e == event)
        .unwrap_or_else(|| panic!("no {event} of {unit} in {events:?}"))
}

fn unit(script: &str, after: &[&str]) -> String {
    format!(r#"Unit(command: ["/bin/sh", "-c", {script:?}], restart: Never, after: {after:?})"#)
}

#[test]
fn a_chain_with_a_failure_in_the_middle_waits_blocked_until_it_is_fixed() {
    if !require_root("a_chain_with_a_failure_in_the_middle_waits_blocked_until_it_is_fixed") {
        return;
    }
    let d = Daemon::start("deps-chain");
    // deploy and notify first: they must wait for what they name, whatever the order.
    d.write_unit("notify", &unit("exit 0", &["deploy"]));
    d.write_unit("deploy", &unit("exit 0", &["test"]));
    d.write_unit("test", &unit("sleep 0.3; exit 1", &["build"]));
    d.write_unit("build", &unit("sleep 0.3; exit 0", &[]));

    d.wait_state("build", "succeeded", Duration::from_secs(20));
    d.wait_state("test", "failed", Duration::from_secs(20));
    let deploy = wait_for(Duration::from_secs(10), "deploy blocked", || {
        let t = d.task("deploy")?;
        let reason = t["reason"].as_str()?.to_string();
        reason.starts_with("blocked: ").then_some(t)
    });
    assert_eq!(deploy["state"], "queued", "{deploy}");
    assert_eq!(
        deploy["reason"],
        "blocked: after \"test\": \"test\" failed (`keel start test` to try it again)"
    );
    let notify = d.task("notify").unwrap();
    assert_eq!(notify["state"], "queued", "{notify}");
    assert!(
        notify["reason"]
            .as_str()
            .is_some_and(|r| r
                .starts_with("blocked: after \"deploy\" (which waits in turn): \"test\" failed")),
        "{notify}"
    );
    // `keel status` (the table) flags them as needing a person.
    let table = stdout_of(&d.keel(&["status"]));
    assert!(table.contains("blocked: after \"test\""), "{table}");
    let events = order(&d);
    assert!(position(&events, "build", "exited") < position(&events, "test", "starting"));
    assert!(
        !events.iter().any(|(u, _)| u == "deploy" || u == "notify"),
        "nothing after the failure started: {events:?}"
    );

    // Fixed, and started again: the rest of the chain runs, in order.
    d.write_unit("test", &unit("exit 0", &["build"]));
    std::thread::sleep(Duration::from_millis(700));
    let out = d.keel(&["start", "test"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    d.wait_state("notify", "succeeded", Duration::from_secs(30));
    let events = order(&d);
    let test_ok = events
        .iter()
        .rposition(|(u, e)| u == "test" && e == "exited")
        .unwrap();
    assert!(
        test_ok < position(&events, "deploy", "starting"),
        "{events:?}"
    );
    assert!(
        position(&events, "deploy", "exited") < position(&events, "notify", "starting"),
        "{events:?}"
    );
}

#[test]
fn a_task_waits_for_each_dependency_and_says_which() {
    if !require_root("a_task_waits_for_each_dependency_and_says_which") {
        return;
    }
    let d = Daemon::start("deps-wait");
    d.write_unit(
        "lint",
        &unit("while [ ! -e /work/release ]; do sleep 0.05; done", &[]),
    );
    d.write_unit("build", &unit("exit 0", &[]));
    d.write_unit("release", &unit("exit 0", &["build", "lint"]));
    d.wait_state("build", "succeeded", Duration::from_secs(20));
    d.wait_state("lint", "running", Duration::from_secs(20));
    let waiting = wait_for(Duration::from_secs(10), "release waits for lint", || {
        let t = d.task("release")?;
        (t["reason"] == "waits for \"lint\" (running)").then_some(t)
    });
    assert_eq!(waiting["state"], "queued", "{waiting}");
    holds_throughout(Duration::from_millis(800), "release stays queued", || {
        d.task("release").is_some_and(|t| t["state"] == "queued")
    });
    std::fs::write(d.task_dir("lint").join("work/release"), "").unwrap();
    d.wait_state("release", "succeeded", Duration::from_secs(20));
}

#[test]
fn check_and_add_refuse_unknown_names_and_cycles_at_their_position() {
    if !require_root("check_and_add_refuse_unknown_names_and_cycles_at_their_position") {
        return;
    }
    let d = Daemon::start("deps-check");
    let dir = d.scratch.dir.join("drafts");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.join(format!("{name}.ron"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let a = write(
        "a",
        "Unit(\n    command: [\"true\"],\n    after: [\"b\"],\n)\n",
    );
    write(
        "b",
        "Unit(\n    command: [\"true\"],\n    after: [\"c\"],\n)\n",
    );
    write("c", "Unit(command: [\"true\"], after: [\"a\"])\n");
    let lone = write(
        "lone",
        "Unit(command: [\"true\"], after: [\"ok\", \"nope\"])\n",
    );
    write("ok", "Unit(command: [\"true\"])\n");

    let out = d.keel(&["check", &path_str(&a), &path_str(&lone)]);
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert!(
        err.contains(&format!(
            "{}:3:13: after[0]: a dependency cycle: a → b → c → a",
            path_str(&a)
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{}:1:39: after[1]: no unit named \"nope\"",
            path_str(&lone)
        )),
        "{err}"
    );

    // A draft naming a unit of the daemon's units directory: known with `--units`.
    d.write_unit("installed", "Unit(command: [\"true\"], restart: Never)");
    let draft = write(
        "draft",
        "Unit(command: [\"true\"], after: [\"installed\"])\n",
    );
    let out = d.keel(&["check", &path_str(&draft)]);
    assert!(!out.status.success(), "{}", stdout_of(&out));
    assert!(stderr_of(&out).contains("no unit named \"installed\""));
    let units = path_str(&d.units());
    let out = d.keel(&["check", "--units", &units, &path_str(&draft)]);
    assert!(out.status.success(), "{}", stderr_of(&out));

    // keel add: the daemon's units are what an entry may name.
    let out = d.keel(&["add", &path_str(&dir.join("ok.ron"))]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let out = d.keel(&["add", &path_str(&lone)]);
    assert!(!out.status.success(), "added with an unknown dependency");
    let err = stderr_of(&out);
    assert!(
        err.contains(":1:39: after[1]: no unit named \"nope\""),
        "{err}"
    );
    assert!(
        d.task("lone").is_none(),
        "nothing installed: {:?}",
        d.task("lone")
    );
    let out = d.keel(&["add", &path_str(&dir.join("b.ron"))]);
    assert!(!out.status.success(), "added with an unknown dependency");
    // A unit that closes a cycle among the daemon's units.
    d.write_unit(
        "x",
        "Unit(command: [\"true\"], restart: Never, after: [\"y\"])",
    );
    d.wait_state("x", "queued", Duration::from_secs(10));
    let y = write("y", "Unit(command: [\"true\"], after: [\"x\"])\n");
    let out = d.keel(&["add", &path_str(&y)]);
    assert!(!out.status.success(), "added a cycle");
    let err = stderr_of(&out);
    assert!(
        err.contains(":1:33: after[0]: a dependency cycle: y → x → y"),
        "{err}"
    );
    // x waits, blocked, for the unit that is not there.
    let x = d.task("x").unwrap();
    assert!(
        x["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no unit is named \"y\"")),
        "{x}"
    );
}
