use super::*;

#[test]
fn start_time_survives_odd_command_names() {
    let stat =
        "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
    assert_eq!(parse_start_time(stat), Some(987654));
}

#[test]
fn v2_cgroup_membership_is_matched_by_the_whole_path() {
    let dir = std::path::Path::new("/user.slice/keel/tasks/a");
    assert!(v2_cgroup_matches(
        "12:pids:/user.slice\n0::/user.slice/keel/tasks/a\n",
        dir
    ));
    // Another task, a prefix of the name, the tree's root, the root cgroup: not ours.
    assert!(!v2_cgroup_matches("0::/user.slice/keel/tasks/b\n", dir));
    assert!(!v2_cgroup_matches("0::/user.slice/keel/tasks/aa\n", dir));
    assert!(!v2_cgroup_matches("0::/keel/tasks/a/sub\n", dir));
    assert!(!v2_cgroup_matches("0::/\n", dir));
    // A cgroup elsewhere whose last components are the task's: not ours either.
    assert!(!v2_cgroup_matches("0::/a\n", dir));
    assert!(!v2_cgroup_matches("0::/tasks/a\n", dir));
    assert!(!v2_cgroup_matches("0::/keel/tasks/a\n", dir));
    assert!(!v2_cgroup_matches(
        "0::/other/user.slice/keel/tasks/a\n",
        dir
    ));
    assert!(!v2_cgroup_matches(
        "4:memory:/user.slice/keel/tasks/a\n",
        dir
    ));
}

#[test]
fn own_start_time_is_stable() {
    let pid = std::process::id() as i32;
    let first = process_start_time(pid).unwrap();
    assert_eq!(process_start_time(pid).unwrap(), first);
    assert!(same_process_alive(pid, first));
    assert!(!same_process_alive(pid, first + 1));
}

#[test]
fn pidfd_signal_reaches_a_live_child_and_not_a_reaped_one() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let fd = pidfd_open(child.id() as i32).unwrap();
    pidfd_send_signal(&fd, libc::SIGKILL).unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let err = pidfd_send_signal(&fd, libc::SIGKILL).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ESRCH));
}
