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
