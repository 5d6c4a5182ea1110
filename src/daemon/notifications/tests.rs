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

#[test]
fn dropped_notices_say_why_they_were_dropped() {
    assert_eq!(Dropped::default().describe(), None);
    let full = Dropped {
        full: 7,
        ..Dropped::default()
    };
    let text = full.describe().unwrap();
    assert!(
        text.starts_with("7 notices dropped: 7 as 4 hooks ran"),
        "{text}"
    );
    let mixed = Dropped {
        full: 0,
        storm: 3,
        reloaded: 2,
    };
    let text = mixed.describe().unwrap();
    assert!(
        text.starts_with("5 notices dropped: 3 past 4096 events in one loop round; 2 held"),
        "{text}"
    );
    assert!(!text.contains("hooks ran"), "{text}");
}

#[test]
fn only_the_kinds_some_hook_is_run_on_are_kept() {
    let hook = |on: Vec<EventKind>| Hook {
        on,
        command: vec!["x".into()],
        user: None,
        timeout: Duration::from_secs(1),
        coalesce: Duration::from_secs(1),
        units: None,
        env: Default::default(),
    };
    let hooks = [
        hook(vec![EventKind::Stalled, EventKind::Failed]),
        hook(vec![EventKind::Failed]),
    ];
    assert_eq!(
        wanted_kinds(&hooks),
        vec![EventKind::Failed, EventKind::Stalled]
    );
    assert!(wanted_kinds(&[]).is_empty());
}
