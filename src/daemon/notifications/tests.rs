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
