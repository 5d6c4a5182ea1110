use super::*;

fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

#[test]
fn environment_drops_supervisor_variables_and_spec_wins() {
    let inherited = vars(&[
        ("PATH", "/usr/bin"),
        ("HOME", "/root"),
        ("NOTIFY_SOCKET", "/run/systemd/notify"),
        ("WATCHDOG_USEC", "1000"),
        ("WATCHDOG_PID", "1"),
        ("LISTEN_FDS", "1"),
        ("LISTEN_PID", "1"),
        ("LISTEN_FDNAMES", "x"),
        ("KEEL_STATE_DIR", "/var/lib/keel"),
        ("KEEL_CRASH_AT", "mid-write"),
        ("KEEL_UNIT", "stale"),
        ("RUST_LOG", "warn"),
        ("LISTENER", "kept"),
    ]);
    let spec = vec![
        ("KEEL_UNIT".to_string(), "demo".to_string()),
        ("RUST_LOG".to_string(), "info".to_string()),
        ("X".to_string(), "1".to_string()),
        ("X".to_string(), "2".to_string()),
    ];
    let env = agent_env(inherited, &spec);
    assert_eq!(
        env,
        vars(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("LISTENER", "kept"),
            ("KEEL_UNIT", "demo"),
            ("RUST_LOG", "info"),
            ("X", "2"),
        ])
    );
}

fn failure(stage: ExecStage, errno: i32) -> ExecFailure {
    ExecFailure {
        pid: 10,
        stage,
        errno,
        message: None,
    }
}

#[test]
fn spawn_failures_read_well() {
    let cwd = Path::new("/work");
    let (msg, status) = spawn_failure(
        "claude",
        cwd,
        &failure(ExecStage::Exec, libc::ENOENT),
        false,
    );
    assert_eq!(
        msg,
        "spawn failed: claude: No such file or directory (is it installed and on PATH?)"
    );
    assert_eq!(status, AgentStatus::Exited(127));

    let (msg, status) = spawn_failure(
        "./x.sh",
        cwd,
        &failure(ExecStage::Exec, libc::ENOENT),
        false,
    );
    assert_eq!(msg, "spawn failed: ./x.sh: No such file or directory");
    assert_eq!(status, AgentStatus::Exited(127));

    let (msg, status) = spawn_failure("x.sh", cwd, &failure(ExecStage::Exec, libc::ENOENT), true);
    assert!(msg.ends_with("(is the interpreter named on its #! line installed?)"));
    assert_eq!(status, AgentStatus::Exited(126));

    let (msg, status) = spawn_failure("tool", cwd, &failure(ExecStage::Exec, libc::EACCES), true);
    assert_eq!(msg, "spawn failed: tool: Permission denied");
    assert_eq!(status, AgentStatus::Exited(126));

    let (msg, _) = spawn_failure("tool", cwd, &failure(ExecStage::Chdir, libc::ENOENT), false);
    assert_eq!(
        msg,
        "cannot enter the working directory \"/work\": No such file or directory"
    );
}
