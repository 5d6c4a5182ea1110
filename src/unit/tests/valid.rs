use crate::unit::test_support::*;
use crate::unit::*;

// ------------------------------------------------------------------------------------------
// Every field, every default.

#[test]
fn design_example_parses_every_field_as_written() {
    let unit = parse(DESIGN_EXAMPLE);
    assert_eq!(
        unit.command,
        Command(strings(&[
            "claude",
            "-p",
            "Fix the flaky test in tests/net.rs"
        ]))
    );
    assert_eq!(
        unit.resume_command,
        Some(Command(strings(&[
            "claude",
            "--continue",
            "-p",
            "Continue where you stopped."
        ])))
    );
    assert_eq!(
        unit.env,
        BTreeMap::from([("RUST_LOG".to_string(), "info".to_string())])
    );
    assert_eq!(
        unit.repo,
        Some(Repo {
            path: "/srv/repos/app".to_string(),
            base: "main".to_string(),
            branch: None,
        })
    );
    assert_eq!(unit.restart, RestartPolicy::OnFailure);
    assert_eq!(
        unit.backoff,
        Backoff {
            initial: secs(1),
            max: secs(300),
            factor: 2.0,
            reset_after: secs(600),
        }
    );
    assert_eq!(
        unit.restart_limit,
        RestartLimit {
            count: 5,
            within: secs(3600),
        }
    );
    assert_eq!(
        unit.resources,
        Resources {
            cpu: 2.0,
            memory: Size(4 << 30),
            pids: 1024,
            cpu_limit: None,
            memory_limit: None,
            disk: None,
        }
    );
    assert_eq!(unit.priority, 0);
    assert_eq!(
        unit.liveness,
        Liveness {
            heartbeat_timeout: secs(300),
            progress_timeout: secs(1800),
            startup_grace: secs(120),
            on_stall: OnStall::Restart,
            signals: vec![
                LivenessSignal::Heartbeat,
                LivenessSignal::Output,
                LivenessSignal::Cpu
            ],
        }
    );
    assert_eq!(unit.workdir, "/work");
    assert_eq!(
        unit.sandbox,
        Sandbox {
            network: Network::Host,
            user: None,
            capabilities: vec![],
            writable: vec![],
            hidden: vec![],
        }
    );
    assert_eq!(
        unit.stop,
        Stop {
            signal: StopSignal(libc::SIGTERM),
            timeout: secs(30),
        }
    );
    assert!(!unit.essential);
}

#[test]
fn every_field_set_to_a_non_default_value() {
    let unit = parse(
        r#"Unit(
                command: ["agent"],
                resume_command: None,
                env: {"A": "1", "B": ""},
                repo: Some(Repo(path: "/srv/app", base: "develop", branch: Some("work/fix-1"))),
                restart: Always,
                backoff: Backoff(initial: "250ms", max: "1h30m", factor: 1.5, reset_after: "1d"),
                restart_limit: RestartLimit(count: 1, within: "90s"),
                resources: Resources(cpu: 0.5, memory: "512M", pids: 64, cpu_limit: Some(4.0),
                                     memory_limit: Some("6G")),
                priority: -3,
                liveness: Liveness(heartbeat_timeout: "1m", progress_timeout: "2h",
                                   startup_grace: "0", on_stall: Report, signals: [Cpu]),
                workdir: "/home/agent/src",
                sandbox: Sandbox(network: None, user: Some("1000:1000"),
                                 capabilities: ["CAP_NET_BIND_SERVICE", "kill"],
                                 writable: ["/data"], hidden: ["/home", "/root"]),
                stop: Stop(signal: "INT", timeout: "1s"),
                essential: true,
                max_runtime: Some("8h"),
                max_total_runtime: Some("1d"),
            )"#,
    );
    assert_eq!(unit.resume_command, None);
    assert_eq!(unit.env.get("B").map(String::as_str), Some(""));
    let repo = unit.repo.expect("repo");
    assert_eq!(repo.base, "develop");
    assert_eq!(repo.branch.as_deref(), Some("work/fix-1"));
    assert_eq!(unit.restart, RestartPolicy::Always);
    assert_eq!(unit.backoff.initial, Dur(Duration::from_millis(250)));
    assert_eq!(unit.backoff.max, secs(5400));
    assert_eq!(unit.backoff.factor, 1.5);
    assert_eq!(unit.backoff.reset_after, secs(86_400));
    assert_eq!(unit.restart_limit.count, 1);
    assert_eq!(unit.restart_limit.within, secs(90));
    assert_eq!(unit.resources.cpu, 0.5);
    assert_eq!(unit.resources.memory, Size(512 << 20));
    assert_eq!(unit.resources.pids, 64);
    assert_eq!(unit.resources.cpu_limit, Some(4.0));
    assert_eq!(unit.resources.memory_limit, Some(Size(6 << 30)));
    assert_eq!(unit.resources.memory_limit_bytes(), 6 << 30);
    assert_eq!(unit.priority, -3);
    assert_eq!(unit.liveness.heartbeat_timeout, secs(60));
    assert_eq!(unit.liveness.progress_timeout, secs(7200));
    assert_eq!(unit.liveness.startup_grace, Dur(Duration::ZERO));
    assert_eq!(unit.liveness.on_stall, OnStall::Report);
    assert_eq!(unit.liveness.signals, vec![LivenessSignal::Cpu]);
    assert_eq!(unit.workdir, "/home/agent/src");
    assert_eq!(unit.sandbox.network, Network::None);
    assert_eq!(unit.sandbox.user.as_deref(), Some("1000:1000"));
    assert_eq!(
        unit.sandbox.capabilities,
        strings(&["CAP_NET_BIND_SERVICE", "kill"])
    );
    assert_eq!(unit.sandbox.writable, strings(&["/data"]));
    assert_eq!(unit.sandbox.hidden, strings(&["/home", "/root"]));
    assert_eq!(unit.stop.signal, StopSignal(libc::SIGINT));
    assert_eq!(unit.stop.timeout, secs(1));
    assert!(unit.essential);
    assert_eq!(unit.max_runtime, Some(secs(8 * 3600)));
    assert_eq!(unit.max_total_runtime, Some(secs(86_400)));
}

#[test]
fn only_command_gets_every_default() {
    let unit = parse(r#"Unit(command: ["agent"])"#);
    assert_eq!(unit.command, Command(strings(&["agent"])));
    assert_eq!(unit.resume_command, None);
    assert!(unit.env.is_empty());
    assert_eq!(unit.repo, None);
    assert_eq!(unit.restart, RestartPolicy::OnFailure);
    assert_eq!(unit.backoff.initial, secs(1));
    assert_eq!(unit.backoff.max, secs(300));
    assert_eq!(unit.backoff.factor, 2.0);
    assert_eq!(unit.backoff.reset_after, secs(600));
    assert_eq!(unit.restart_limit.count, 5);
    assert_eq!(unit.restart_limit.within, secs(3600));
    // Requests an idle agent fits in (a quarter of a core, 512M); no CPU cap; a 4G limit.
    assert_eq!(unit.resources.cpu, 0.25);
    assert_eq!(unit.resources.memory, Size(512 << 20));
    assert_eq!(unit.resources.pids, 1024);
    assert_eq!(unit.resources.cpu_limit, None);
    assert_eq!(unit.resources.memory_limit, None);
    assert_eq!(unit.resources.memory_limit_bytes(), 4 << 30);
    assert_eq!(unit.priority, 0);
    assert_eq!(unit.liveness.heartbeat_timeout, secs(300));
    assert_eq!(unit.liveness.progress_timeout, secs(1800));
    assert_eq!(unit.liveness.startup_grace, secs(120));
    assert_eq!(unit.liveness.on_stall, OnStall::Restart);
    assert_eq!(
        unit.liveness.signals,
        vec![
            LivenessSignal::Heartbeat,
            LivenessSignal::Output,
            LivenessSignal::Cpu
        ]
    );
    assert_eq!(unit.workdir, "/work");
    assert_eq!(
        unit.sandbox.network,
        Network::Allow(vec![]),
        "by default nothing goes out"
    );
    assert_eq!(unit.sandbox.user, None);
    assert!(unit.sandbox.capabilities.is_empty());
    assert!(unit.sandbox.writable.is_empty());
    assert!(unit.sandbox.hidden.is_empty());
    assert_eq!(unit.stop.signal, StopSignal(libc::SIGTERM));
    assert_eq!(unit.stop.timeout, secs(30));
    assert!(!unit.essential);
    assert_eq!(unit.max_runtime, None);
    assert_eq!(unit.max_total_runtime, None);
}

#[test]
fn nested_structs_default_their_missing_fields() {
    let unit = parse(
        r#"Unit(command: ["a"], repo: Some(Repo(path: "/r")), backoff: Backoff(factor: 3.0),
                   restart_limit: RestartLimit(count: 2), resources: Resources(pids: 10),
                   liveness: Liveness(on_stall: Kill), sandbox: Sandbox(), stop: Stop(timeout: "5s"))"#,
    );
    let repo = unit.repo.expect("repo");
    assert_eq!((repo.base.as_str(), repo.branch), ("main", None));
    assert_eq!(
        unit.backoff,
        Backoff {
            factor: 3.0,
            ..Backoff::default()
        }
    );
    assert_eq!(unit.restart_limit.within, secs(3600));
    assert_eq!(
        unit.resources,
        Resources {
            pids: 10,
            ..Resources::default()
        }
    );
    assert_eq!(
        unit.liveness,
        Liveness {
            on_stall: OnStall::Kill,
            ..Liveness::default()
        }
    );
    assert_eq!(unit.sandbox, Sandbox::default());
    assert_eq!(unit.stop.signal, StopSignal(libc::SIGTERM));
}

#[test]
fn network_none_is_the_enum_and_user_none_is_the_option() {
    let unit = parse(r#"Unit(command: ["a"], sandbox: Sandbox(network: None, user: None))"#);
    assert_eq!(unit.sandbox.network, Network::None);
    assert_eq!(unit.sandbox.user, None);
    let unit =
        parse(r#"Unit(command: ["a"], sandbox: Sandbox(network: Host, user: Some("agent")))"#);
    assert_eq!(unit.sandbox.network, Network::Host);
    assert_eq!(unit.sandbox.user.as_deref(), Some("agent"));
    let unit = parse(r#"Unit(command: ["a"], sandbox: Sandbox(network: None))"#);
    assert_eq!(unit.sandbox.network, Network::None);
}

#[test]
fn network_allow_takes_every_kind_of_entry_as_written() {
    let entries = [
        "api.anthropic.com",
        "github.com:22",
        "*.npmjs.org",
        "203.0.113.7:22",
        "10.0.0.0/8:5432",
        "[2001:db8::/32]:443",
        "host:11434",
        "@anthropic",
    ];
    let text = format!(
        "Unit(command: [\"a\"], sandbox: Sandbox(network: Allow([{}])))",
        entries.map(|e| format!("{e:?}")).join(", ")
    );
    let unit = parse(&text);
    assert_eq!(unit.sandbox.network, Network::Allow(strings(&entries)));
    assert_eq!(unit.sandbox.network.mode(), "allow");
    let unit = parse(r#"Unit(command: ["a"], sandbox: Sandbox(network: Allow([])))"#);
    assert_eq!(unit.sandbox.network, Network::Allow(vec![]));
    assert_eq!(Network::Host.mode(), "host");
    assert_eq!(Network::None.mode(), "none");
}

#[test]
fn every_bad_network_entry_is_reported_at_its_string() {
    let text = "Unit(\n    command: [\"a\"],\n    sandbox: Sandbox(network: Allow([\n        \"*\",\n        \"ok.example.com\",\n        \"host:0\",\n        \"1.2.3.4\",\n    ])),\n)";
    let errors = check_unit(Path::new("t.ron"), text).expect_err("invalid");
    let found: Vec<(usize, usize, &str)> = errors
        .iter()
        .map(|e| (e.line, e.col, e.message.split(':').next().unwrap_or("")))
        .collect();
    assert_eq!(
        found,
        [
            (4, 9, "sandbox.network[0]"),
            (6, 9, "sandbox.network[2]"),
            (7, 9, "sandbox.network[3]")
        ],
        "{errors:?}"
    );
    assert!(errors[1].message.contains("is not a port"), "{}", errors[1]);
}

#[test]
fn network_lists_are_checked_against_the_callers_lists() {
    let file = Path::new("units/t.ron");
    let text = "Unit(\n    command: [\"a\"],\n    sandbox: Sandbox(network: Allow([\"@anthropic\", \"@npm\"])),\n)";
    let lists: BTreeMap<String, Vec<String>> =
        [("anthropic".to_string(), strings(&["api.anthropic.com"]))].into();
    let errors = check_unit_with(file, text, |unit| network_list_problems(unit, &lists))
        .expect_err("@npm is not a list");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0].line, errors[0].col), (3, 52), "{}", errors[0]);
    assert!(
        errors[0]
            .message
            .starts_with("sandbox.network[1]: @npm: keel.ron's network lists have no list \"npm\" (it has @anthropic)"),
        "{}",
        errors[0]
    );
    let none = BTreeMap::new();
    let errors = check_unit_with(file, text, |unit| network_list_problems(unit, &none))
        .expect_err("no lists at all");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].message.contains("keel.ron names no lists"),
        "{}",
        errors[0]
    );
    let both: BTreeMap<String, Vec<String>> = [
        ("anthropic".to_string(), strings(&["api.anthropic.com"])),
        ("npm".to_string(), strings(&["registry.npmjs.org"])),
    ]
    .into();
    check_unit_with(file, text, |unit| network_list_problems(unit, &both)).expect("both known");
    // The lists do not matter to a unit without "@" entries, nor to Host or None.
    for network in ["Host", "None", "Allow([\"a.com\"])"] {
        let text = format!("Unit(command: [\"a\"], sandbox: Sandbox(network: {network}))");
        check_unit_with(file, &text, |unit| network_list_problems(unit, &none))
            .unwrap_or_else(|e| panic!("{network}: {e:?}"));
    }
}

#[test]
fn ron_syntax_variants_are_accepted() {
    // Unnamed struct, trailing commas, comments everywhere, raw strings, escapes, a BOM.
    let unit = parse(
        "\u{feff}( /* a unit */\n  command: [r#\"sh\"#, \"-c\", \"echo \\\"hi\\\"\\n\",], // argv\n  restart: Never,\n)\n",
    );
    assert_eq!(
        unit.command,
        Command(strings(&["sh", "-c", "echo \"hi\"\n"]))
    );
    assert_eq!(unit.restart, RestartPolicy::Never);
    // A file may opt in to ron's implicit Some.
    let unit =
        parse("#![enable(implicit_some)]\nUnit(command: [\"a\"], sandbox: Sandbox(user: \"0:0\"))");
    assert_eq!(unit.sandbox.user.as_deref(), Some("0:0"));
}

#[test]
fn validate_unit_is_pure_and_accepts_the_defaults() {
    let mut unit = parse(r#"Unit(command: ["a"])"#);
    assert_eq!(validate_unit(&unit), vec![]);
    unit.backoff.factor = 0.5;
    unit.resources.pids = 0;
    unit.env.insert("KEEL_X".into(), "1".into());
    let paths: Vec<String> = validate_unit(&unit)
        .iter()
        .map(|p| p.path.to_string())
        .collect();
    assert_eq!(
        paths,
        ["env[\"KEEL_X\"]", "backoff.factor", "resources.pids"]
    );
    assert_eq!(validate_unit(&unit), validate_unit(&unit.clone()));
}

#[test]
fn check_unit_reports_every_problem_in_file_order() {
    let text = r#"Unit(
    command: ["agent"],
    workdir: "work",
    backoff: Backoff(factor: 0.5),
    resources: Resources(pids: 0),
)"#;
    let errors = check_unit(Path::new("t.ron"), text).expect_err("invalid");
    let positions: Vec<(usize, usize)> = errors.iter().map(|e| (e.line, e.col)).collect();
    assert_eq!(positions, [(3, 14), (4, 30), (5, 32)]);
    assert!(errors[0].message.starts_with("workdir: "));
    assert!(errors[1].message.starts_with("backoff.factor: "));
    assert!(errors[2].message.starts_with("resources.pids: "));
}

#[test]
fn error_display_is_file_line_col_message() {
    let error = UnitError {
        file: PathBuf::from("units/a.ron"),
        line: 3,
        col: 14,
        message: "duration \"5x\" has unknown unit \"x\": use ms, s, m, h or d".to_string(),
    };
    assert_eq!(
        error.to_string(),
        "units/a.ron:3:14: duration \"5x\" has unknown unit \"x\": use ms, s, m, h or d"
    );
}

// ------------------------------------------------------------------------------------------
// The example units, the schema, robustness.

fn example_units() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("units");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        // units/ also holds keel.service, the daemon's own systemd unit.
        .filter(|path| path.extension().is_some_and(|e| e == "ron"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_file_in_units_is_a_valid_unit() {
    let files = example_units();
    let names: Vec<String> = files.iter().filter_map(|f| unit_name_of(f)).collect();
    for expected in ["flaky", "hello", "ticker"] {
        assert!(
            names.iter().any(|n| n == expected),
            "units/{expected}.ron missing"
        );
    }
    for file in files {
        if let Err(error) = load_unit_file(&file) {
            panic!("{error}");
        }
    }
}

#[test]
fn example_units_behave_as_documented() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("units");
    let load = |name: &str| load_unit_file(&dir.join(format!("{name}.ron"))).unwrap().1;
    let hello = load("hello");
    assert_eq!(hello.restart, RestartPolicy::Never);
    let flaky = load("flaky");
    assert_eq!(flaky.restart, RestartPolicy::OnFailure);
    assert_eq!(flaky.backoff.initial, Dur(Duration::from_millis(500)));
    assert!(
        flaky.restart_limit.count >= 2,
        "flaky must get its third attempt"
    );
    let ticker = load("ticker");
    assert_eq!(ticker.restart, RestartPolicy::Always);
    for unit in [&hello, &flaky, &ticker] {
        // Only /bin/sh and coreutils: no agent is installed for the quickstart.
        assert_eq!(unit.command.0[..2], strings(&["/bin/sh", "-c"]));
        assert!(unit.command.0[2].contains("$KEEL_PROGRESS"));
    }
}

#[test]
fn example_unit_scripts_are_valid_shell() {
    for file in example_units() {
        let (_, unit, _) = load_unit_file(&file).unwrap();
        let status = std::process::Command::new("/bin/sh")
            .args(["-n", "-c", &unit.command.0[2]])
            .status()
            .unwrap();
        assert!(status.success(), "{}: sh -n failed", file.display());
    }
}

#[test]
fn flaky_example_fails_twice_then_succeeds() {
    let dir = temp_dir("flaky");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("units/flaky.ron");
    let (_, unit, _) = load_unit_file(&file).unwrap();
    let progress = dir.join("progress");
    let exits: Vec<Option<i32>> = (1..=3)
        .map(|attempt| {
            std::process::Command::new(&unit.command.0[0])
                .args(&unit.command.0[1..])
                .env("KEEL_ATTEMPT", attempt.to_string())
                .env("KEEL_PROGRESS", &progress)
                .output()
                .unwrap()
                .status
                .code()
        })
        .collect();
    assert_eq!(exits, [Some(1), Some(1), Some(0)]);
    let written = std::fs::read_to_string(&progress).unwrap();
    assert!(written.contains("attempt 3 succeeded"), "{written}");
    std::fs::remove_dir_all(dir).unwrap();
}
