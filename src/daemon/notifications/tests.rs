//! How a hook's end is judged.

use super::*;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

#[test]
fn exit_zero_is_success_and_everything_else_says_why() {
    let pid = Pid::from_raw(42);
    assert_eq!(failure(&WaitStatus::Exited(pid, 0)), None);
    assert_eq!(
        failure(&WaitStatus::Exited(pid, 3)).as_deref(),
        Some("exited 3")
    );
    let not_found = failure(&WaitStatus::Exited(pid, 127)).unwrap();
    assert!(not_found.contains("could not be run"), "{not_found}");
    assert!(not_found.contains(LOG_FILE), "{not_found}");
    let user = failure(&WaitStatus::Exited(pid, 126)).unwrap();
    assert!(user.contains("become its user"), "{user}");
    assert_eq!(
        failure(&WaitStatus::Signaled(pid, Signal::SIGKILL, false)).as_deref(),
        Some("killed by SIGKILL")
    );
}

#[test]
fn past_the_waiting_bound_notices_are_dropped_and_counted() {
    let mut waiting = VecDeque::new();
    let mut dropped = 0;
    let event = Event {
        time: String::new(),
        ts_ms: 0,
        unit: "a".into(),
        attempt: 1,
        generation: 1,
        event: "failed".into(),
        detail: String::new(),
    };
    for i in 0..MAX_WAITING + 5 {
        let send = coalesce::Send {
            key: Key {
                hook: 0,
                unit: format!("u{i}"),
                event: "failed",
            },
            event: event.clone(),
            count: 3,
        };
        enqueue(&mut waiting, &mut dropped, send, EventKind::Failed);
    }
    assert_eq!(waiting.len(), MAX_WAITING);
    assert_eq!(
        dropped,
        5 * 3,
        "each dropped notice counts the events it stood for"
    );
    assert_eq!(waiting[0].count, 3);
}
