//! Tests of the shim's process-level helpers.
use super::*;

fn strs(v: Vec<Vec<u8>>) -> Vec<String> {
    v.into_iter()
        .map(|b| String::from_utf8(b).unwrap())
        .collect()
}

#[test]
fn candidates_follow_execvp() {
    assert_eq!(
        strs(exec_candidates(b"claude", Some(b"/a/bin:/b/:"))),
        ["/a/bin/claude", "/b/claude", "claude"]
    );
    assert_eq!(
        strs(exec_candidates(b"./run.sh", Some(b"/x"))),
        ["./run.sh"]
    );
    assert_eq!(strs(exec_candidates(b"/bin/sh", None)), ["/bin/sh"]);
    assert_eq!(
        strs(exec_candidates(b"sh", None)),
        ["/bin/sh", "/usr/bin/sh"]
    );
    assert_eq!(strs(exec_candidates(b"", Some(b"/x"))), [""]);
}

#[test]
fn plan_uses_the_agent_path_and_rejects_nul() {
    let env = vec![
        (OsString::from("PATH"), OsString::from("/first")),
        (OsString::from("HOME"), OsString::from("/h")),
    ];
    let plan = ExecPlan::new(&["tool".into(), "x".into()], &env, Path::new("/")).unwrap();
    assert_eq!(plan.candidates(), [PathBuf::from("/first/tool")]);
    assert!(ExecPlan::new(&[], &env, Path::new("/")).is_err());
    assert!(ExecPlan::new(&["a\0b".into()], &env, Path::new("/")).is_err());
    let bad = vec![(OsString::from("A=B"), OsString::from("c"))];
    assert!(ExecPlan::new(&["sh".into()], &bad, Path::new("/")).is_err());
}

#[test]
fn signal_set_takes_realtime_signals() {
    let rt = libc::SIGRTMIN() + 3;
    let set = signal_set(&[libc::SIGCHLD, rt]).unwrap();
    // SAFETY: as_ref gives an initialised sigset_t.
    let has = |s| unsafe { libc::sigismember(set.as_ref(), s) } == 1;
    assert!(has(rt) && has(libc::SIGCHLD) && !has(libc::SIGTERM));
}

#[test]
fn group_kill_refuses_dangerous_targets() {
    assert!(kill_process_group(0, 0).is_err());
    assert!(kill_process_group(1, 0).is_err());
    assert!(kill_process_group(-5, 0).is_err());
}
