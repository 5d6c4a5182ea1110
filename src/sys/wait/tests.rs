use super::*;

#[test]
fn wait_status_decoding() {
    assert_eq!(decode_wait_status(42 << 8), Some(AgentStatus::Exited(42)));
    assert_eq!(decode_wait_status(9), Some(AgentStatus::Signaled(9)));
    assert_eq!(decode_wait_status(0x7f | (19 << 8)), None); // stopped
}

#[test]
fn a_status_reads_as_exit_code_or_signal_name() {
    assert_eq!(AgentStatus::Exited(3).to_string(), "exit:3");
    assert_eq!(
        AgentStatus::Signaled(libc::SIGKILL).to_string(),
        "signal:SIGKILL"
    );
    assert_eq!(AgentStatus::Signaled(libc::SIGTERM).exit_code(), 143);
    assert!(AgentStatus::Exited(0).success() && !AgentStatus::Signaled(9).success());
}
