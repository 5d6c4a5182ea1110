use super::*;

#[test]
fn a_start_deferred_again_and_again_waits_longer_up_to_five_minutes() {
    assert_eq!(deferral_delay(0), Duration::from_secs(5));
    assert_eq!(deferral_delay(1), Duration::from_secs(10));
    assert_eq!(deferral_delay(3), Duration::from_secs(40));
    assert_eq!(deferral_delay(6), Duration::from_secs(300));
    assert_eq!(deferral_delay(40), Duration::from_secs(300));
    assert_eq!(deferral_delay(u32::MAX), Duration::from_secs(300));
}

#[test]
fn a_unit_with_a_secret_file_has_its_file_checked_by_the_preparation_job() {
    let text = r#"Unit(command: ["a"], sandbox: Sandbox(network: Allow(["a.com"])),
        secrets: {"TOKEN": Secret(file: "/etc/keel/secrets/t", hosts: ["a.com"]),
                  "OTHER": Secret(env: "KEEL_SECRET_OTHER", hosts: ["a.com"])})"#;
    let unit = crate::unit::parse_unit(std::path::Path::new("t.ron"), text).unwrap();
    let dirs = crate::state::StateDir::new("/s");
    let ctx = spawn::AttemptContext {
        unit_name: "t",
        attempt: 1,
        generation: 1,
        last_exit: None,
        last_progress: None,
        network_lists: &Default::default(),
    };
    let spec = spawn::attempt_spec(&dirs, &unit, &ctx);
    let job = preparation_job("t", &unit, spec.sandbox.as_ref(), None).unwrap();
    let Some(Job::Prepare { paths, .. }) = job else {
        panic!("expected a preparation job, got {job:?}");
    };
    assert_eq!(
        paths.secret_files,
        [("TOKEN".to_string(), "/etc/keel/secrets/t".into())]
    );
    // Only env secrets: nothing on a disk to read, no job.
    let text = r#"Unit(command: ["a"], sandbox: Sandbox(network: Allow(["a.com"])),
        secrets: {"OTHER": Secret(env: "KEEL_SECRET_OTHER", hosts: ["a.com"])})"#;
    let unit = crate::unit::parse_unit(std::path::Path::new("t.ron"), text).unwrap();
    let spec = spawn::attempt_spec(&dirs, &unit, &ctx);
    assert_eq!(
        preparation_job("t", &unit, spec.sandbox.as_ref(), None),
        Ok(None)
    );
}

#[test]
fn a_blocked_start_waits_longer_each_time_up_to_a_minute() {
    use blocked::blocked_delay;
    assert_eq!(blocked_delay(0), Duration::from_secs(5));
    assert_eq!(blocked_delay(1), Duration::from_secs(10));
    assert_eq!(blocked_delay(3), Duration::from_secs(40));
    assert_eq!(blocked_delay(4), Duration::from_secs(60));
    assert_eq!(blocked_delay(u32::MAX), Duration::from_secs(60));
}

#[test]
fn the_hosts_spawn_failures_block_and_the_units_fail() {
    use blocked::refused_by_host;
    let errno = std::io::Error::from_raw_os_error;
    for host in [
        SpawnError::Clone(errno(libc::EPERM)),
        SpawnError::Clone(errno(libc::ENOSPC)),
        SpawnError::Clone(errno(libc::EAGAIN)),
        SpawnError::Clone(errno(libc::ENOMEM)),
        SpawnError::Open("/s/tasks/a/run/shim.log".into(), errno(libc::ENOSPC)),
        SpawnError::Refused("sandbox.user \"agent\": no such user".into()),
    ] {
        assert!(refused_by_host(&host), "{host}");
    }
    for unit in [
        SpawnError::Launch("cannot start the agent: the command is empty".into()),
        SpawnError::Clone(errno(libc::EINVAL)),
        SpawnError::NulInPath,
        SpawnError::PreviousShimAlive,
    ] {
        assert!(!refused_by_host(&unit), "{unit}");
    }
}

#[test]
fn a_blocked_task_keeps_its_attempt_and_budget_and_journals_a_reason_once() {
    use super::super::record::{PastExit, TaskRecord, TaskState};
    let mut before = TaskRecord::new("a", 1);
    before.attempt = 2;
    before.generation = 4;
    before.restarts = vec![10, 20];
    before.consecutive_failures = 2;
    before.last_exit = Some(super::super::record::LastExit::Oom);
    let (record, new) = blocked::blocked_record(before.clone(), 5, "cgroups unavailable");
    assert!(new);
    assert_eq!(record.state, TaskState::Queued);
    assert_eq!(
        record.attempt, 2,
        "the attempt that never ran is not counted"
    );
    assert_eq!(record.generation, 5, "a generation handed out stays spent");
    assert_eq!(record.restarts, before.restarts);
    assert_eq!(record.consecutive_failures, 2);
    assert_eq!(record.last_exit, before.last_exit);
    assert_eq!(
        record.reason.as_deref(),
        Some("blocked: cgroups unavailable")
    );
    assert_eq!(record.blocked.as_deref(), Some("cgroups unavailable"));
    // The same reason again: not journaled again; another one is.
    let (again, new) = blocked::blocked_record(record.clone(), 6, "cgroups unavailable");
    assert!(!new);
    assert_eq!(again.generation, 6);
    let (_, new) = blocked::blocked_record(again, 6, "no such user \"agent\"");
    assert!(new);

    // Refused after its shim was spawned: the attempt number goes back, its start and end
    // are the attempt's before it (none before the first).
    let mut running = TaskRecord::new("a", 1);
    running.state = TaskState::Running;
    running.attempt = 1;
    running.started_ms = Some(99);
    let first = blocked::before_refused_attempt(&running);
    assert_eq!(
        (first.attempt, first.started_ms, first.finished_ms),
        (0, None, None)
    );
    running.attempt = 3;
    running.remember_exit(PastExit {
        attempt: 2,
        exit: super::super::record::LastExit::Lost,
        started_ms: Some(40),
        ended_ms: 50,
        note: None,
    });
    let third = blocked::before_refused_attempt(&running);
    assert_eq!(
        (third.attempt, third.started_ms, third.finished_ms),
        (2, Some(40), Some(50))
    );
}
