use super::*;

#[test]
fn the_exec_arguments_carry_the_agent_or_the_error() {
    // A launch whose cgroup cannot be joined fails before any fork.
    let spec = AttemptSpec {
        unit: "t".into(),
        generation: 1,
        attempt: 1,
        argv: vec!["/bin/true".into()],
        env: Vec::new(),
        cwd: "/".into(),
        run_dir: "/nonexistent".into(),
        log_max_bytes: 1,
        log_keep: 1,
        sandbox: None,
        cgroup_v1_procs: vec!["/nonexistent/keel-test/cgroup.procs".into()],
    };
    let launch = Launch::new(&spec, Vec::new()).unwrap();
    let started = start_agent(&launch);
    let dir = std::env::temp_dir().join(format!("keel-launch-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec_path = dir.join("attempt.ron");
    // Not launch_for_exec itself: it closes every other descriptor of this process.
    // start_agent fails at the cgroup, before any fork.
    let handed = hand_over(started, &spec, &spec_path, None);
    let (extra, pid) = (handed.to_args(), handed.agent());
    let written: AttemptSpec = crate::state::read_ron(&spec_path).unwrap().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        written, spec,
        "the spec is written even when the start failed"
    );
    assert_eq!(pid, None);
    assert_eq!(extra[0].to_str().unwrap(), "--launch-error");
    assert!(
        extra[1].to_str().unwrap().contains("cannot join"),
        "{extra:?}"
    );
}

#[test]
fn start_errors_name_the_step_the_ids_and_what_to_change() {
    let refused = StartError::UserNamespace {
        block: IdBlock {
            first: 100_000,
            count: 65_536,
        },
        error: std::io::Error::from_raw_os_error(libc::ENOSPC),
    };
    let text = refused.to_string();
    assert!(
        text.starts_with("cannot create the task's user namespace (host ids 100000–165535)"),
        "{text}"
    );
    assert!(text.contains("user.max_user_namespaces"), "{text}");
    let upper = StartError::UpperLayer {
        path: "/state/tasks/t/checkout/upper".into(),
        first: 100_000,
        error: std::io::Error::from_raw_os_error(libc::EROFS),
    };
    let text = upper.to_string();
    assert!(text.contains("/state/tasks/t/checkout/upper"), "{text}");
    assert!(text.contains("(100000…)"), "{text}");
}

#[test]
fn a_start_the_unit_could_not_resolve_is_the_units_and_every_clone_step_the_hosts() {
    use super::super::daemon::ResolveError;
    let unit_mistake = StartError::Resolve(ResolveError::Command("a NUL byte".into()));
    assert!(!unit_mistake.refused_by_host());
    let writable = StartError::Resolve(ResolveError::Writable("keel's state".into()));
    assert!(!writable.refused_by_host());
    let host_root = StartError::Resolve(ResolveError::ListHostRoot(
        std::io::Error::from_raw_os_error(libc::EACCES),
    ));
    assert!(host_root.refused_by_host());
    let cgroup = StartError::JoinCgroup(std::io::Error::from_raw_os_error(libc::ENOENT));
    assert!(cgroup.refused_by_host());
}
