use super::*;

#[test]
fn record_round_trips_through_ron() {
    let mut record = TaskRecord::new("a", 5);
    record.state = TaskState::Running;
    record.last_exit = Some(LastExit::Agent(AgentStatus::Signaled(9)));
    record.shim = Some(ShimIdentity {
        pid: 42,
        start_time: 7,
        boot_id: "b".into(),
    });
    record.id_block = Some(IdBlock {
        first: 0x7001_0000,
        count: 65536,
    });
    let text = ron::to_string(&record).unwrap();
    let back: TaskRecord = ron::from_str(&text).unwrap();
    assert_eq!(back, record);
}

#[test]
fn a_record_remembers_the_last_five_exits_and_reads_without_them() {
    let mut record = TaskRecord::new("a", 5);
    for attempt in 1..=7 {
        record.remember_exit(PastExit {
            attempt,
            exit: LastExit::Lost,
            started_ms: None,
            ended_ms: u64::from(attempt),
            note: None,
        });
    }
    let attempts: Vec<u32> = record.recent_exits.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, [3, 4, 5, 6, 7]);
    // A record written before the field existed still reads.
    let old = "(unit: \"a\", state: Queued, attempt: 0, generation: 0, submitted_ms: 1)";
    let back: TaskRecord = ron::from_str(old).unwrap();
    assert!(back.recent_exits.is_empty());
    assert_eq!(back.id_block, None);
}

#[test]
fn last_exit_words_match_the_environment_contract() {
    assert_eq!(
        LastExit::Agent(AgentStatus::Exited(3)).to_string(),
        "exit:3"
    );
    assert_eq!(
        LastExit::Agent(AgentStatus::Signaled(libc::SIGKILL)).to_string(),
        "signal:SIGKILL"
    );
    assert_eq!(LastExit::Oom.to_string(), "oom");
    assert_eq!(LastExit::Lost.to_string(), "lost");
    assert_eq!(LastExit::Agent(AgentStatus::Signaled(15)).exit_code(), 143);
}

#[test]
fn an_exit_record_the_host_refused_is_read_as_such_and_an_older_one_is_not() {
    let dir = std::env::temp_dir().join(format!("keel-record-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut record = ExitRecord {
        generation: 3,
        attempt: 1,
        status: AgentStatus::Exited(125),
        agent_pid: 0,
        started_ms: 1,
        ended_ms: 2,
        spawn_error: Some("sandbox: cannot mount /proc: Operation not permitted".into()),
        host_refused: true,
    };
    crate::state::write_ron(&exit_record_path(&dir), &record).unwrap();
    let ending = Ending::from_records(&dir, 3, "gone");
    assert!(ending.host_refused);
    assert_eq!(ending.exit, LastExit::SpawnFailed);
    record.host_refused = false;
    crate::state::write_ron(&exit_record_path(&dir), &record).unwrap();
    assert!(!Ending::from_records(&dir, 3, "gone").host_refused);
    // The record of an older keel, without the field: the agent's failure, as before.
    let old = "(generation: 3, attempt: 1, status: Exited(125), agent_pid: 0, started_ms: 1, \
               ended_ms: 2, spawn_error: Some(\"x\"))";
    std::fs::write(exit_record_path(&dir), old).unwrap();
    let ending = Ending::from_records(&dir, 3, "gone");
    assert!(!ending.host_refused);
    assert_eq!(ending.exit, LastExit::SpawnFailed);
    // A task record of an older keel reads without `blocked`.
    let text = ron::to_string(&TaskRecord::new("a", 5)).unwrap();
    let older = text.replace(",blocked:None", "");
    assert_ne!(older, text);
    assert_eq!(ron::from_str::<TaskRecord>(&older).unwrap().blocked, None);
    let _ = std::fs::remove_dir_all(&dir);
}
