//! Tests of the configuration file: defaults, each field, and errors at `file:line:col`.

use super::jobs::Jobs;
use super::network::NetworkConfig;
use super::*;
use crate::checkout::HarvestLimits;

const G: u64 = 1 << 30;

/// 8 CPUs, 16G of memory.
fn host() -> HostCapacity {
    HostCapacity::new(8, None, 16 * G, None)
}

fn parse(text: &str) -> Config {
    let raw = parse_config(Path::new("keel.ron"), text).unwrap_or_else(|e| panic!("{e}"));
    resolve(&raw, &host())
}

/// Parses `text`, expecting an error at exactly `line:col` whose message contains `needle`.
pub(super) fn assert_bad(text: &str, line: usize, col: usize, needle: &str) {
    let error = match parse_config(Path::new("/var/lib/keel/keel.ron"), text) {
        Ok(raw) => panic!("parsed, expected an error: {raw:?}"),
        Err(error) => error,
    };
    assert!(
        error.message.contains(needle),
        "message lacks {needle:?}: {error}"
    );
    assert_eq!((error.line, error.col), (line, col), "{error}");
    assert!(error
        .to_string()
        .starts_with(&format!("/var/lib/keel/keel.ron:{line}:{col}: ")));
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-config-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn defaults() {
    let defaults = Config {
        capacity: Capacity {
            cpu_millis: 8000,
            memory: 16 * G * 9 / 10,
            max_running: None,
        },
        starvation_limit: Duration::from_secs(600),
        // 40% CPU, 10% memory, 40% I/O, in hundredths of a percent.
        pressure: Some(super::pressure::PressureThresholds {
            cpu: 4000,
            memory: 1000,
            io: 4000,
            settle_ms: 5000,
        }),
        user_namespaces: UserNamespaces::On(IdRange {
            first_id: 0x7000_0000,
            blocks: 1024,
        }),
        jobs: Jobs::default(),
        harvest_limits: HarvestLimits::default(),
        network: NetworkConfig::default(),
        disk_reserve: None,
        notify: Vec::new(),
    };
    assert_eq!(parse("Config()"), defaults);
    assert_eq!(parse("()"), defaults);
    assert_eq!(parse("Config(capacity: Capacity())"), defaults);
    assert_eq!(parse("// all defaults\nConfig(\n)\n"), defaults);
    assert_eq!(resolve(&RawConfig::default(), &host()), defaults);
    assert_eq!(defaults.starvation_limit_ms(), 600_000);
}

#[test]
fn the_example_of_the_issue() {
    let config = parse(
        r#"Config(capacity: Capacity(cpu: 2.0, memory: "8G", max_running: Some(4)), starvation_limit: "10m")"#,
    );
    assert_eq!(
        config,
        Config {
            capacity: Capacity {
                cpu_millis: 2000,
                memory: 8 * G,
                max_running: Some(4),
            },
            starvation_limit: Duration::from_secs(600),
            pressure: Some(Default::default()),
            user_namespaces: UserNamespaces::On(IdRange {
                first_id: 1_879_048_192,
                blocks: 1024,
            }),
            jobs: Jobs::default(),
            harvest_limits: HarvestLimits::default(),
            network: NetworkConfig::default(),
            disk_reserve: None,
            notify: Vec::new(),
        }
    );
}

#[test]
fn each_field_alone() {
    let config = parse("Config(capacity: Capacity(cpu: 0.5))");
    assert_eq!(config.capacity.cpu_millis, 500);
    assert_eq!(config.capacity.memory, 16 * G * 9 / 10);
    assert_eq!(
        parse("Config(capacity: Capacity(cpu: 3))")
            .capacity
            .cpu_millis,
        3000
    );
    assert_eq!(
        parse("Config(capacity: Capacity(cpu: 0.1))")
            .capacity
            .cpu_millis,
        100
    );

    let config = parse("Config(capacity: Capacity(memory: \"1.5G\"))");
    assert_eq!(config.capacity.memory, 3 * G / 2);
    assert_eq!(config.capacity.cpu_millis, 8000);

    let config = parse("Config(capacity: Capacity(max_running: Some(2)))");
    assert_eq!(config.capacity.max_running, Some(2));
    let config = parse("Config(capacity: Capacity(max_running: None))");
    assert_eq!(config.capacity.max_running, None);

    let config = parse("Config(starvation_limit: \"1h30m\")");
    assert_eq!(config.starvation_limit, Duration::from_secs(5400));
    assert_eq!(config.capacity.max_running, None);
    // Zero: a blocked task holds the line at once (strict order, no backfilling).
    assert_eq!(
        parse("Config(starvation_limit: \"0\")").starvation_limit_ms(),
        0
    );
}

#[test]
fn a_capacity_above_the_host_is_the_operators_choice() {
    let config = parse("Config(capacity: Capacity(cpu: 64.0, memory: \"1T\"))");
    assert_eq!(config.capacity.cpu_millis, 64_000);
    assert_eq!(config.capacity.memory, 1 << 40);
}

#[test]
fn host_capacity() {
    // Affinity alone, then capped by a quota of 1.5 CPUs ("150000 100000").
    assert_eq!(HostCapacity::new(4, None, G, None).cpu_millis, 4000);
    assert_eq!(
        HostCapacity::new(4, Some((150_000, 100_000)), G, None).cpu_millis,
        1500
    );
    assert_eq!(
        HostCapacity::new(2, Some((800_000, 100_000)), G, None).cpu_millis,
        2000
    );
    assert_eq!(
        HostCapacity::new(2, Some((1, 100_000)), G, None).cpu_millis,
        1
    );
    assert_eq!(HostCapacity::new(2, Some((1, 0)), G, None).cpu_millis, 2000);
    assert_eq!(HostCapacity::new(0, None, G, None).cpu_millis, 1000);
    // MemTotal, capped by the cgroup's limit.
    assert_eq!(
        HostCapacity::new(1, None, 16 * G, Some(4 * G)).memory,
        4 * G
    );
    assert_eq!(
        HostCapacity::new(1, None, 16 * G, Some(u64::MAX)).memory,
        16 * G
    );
    let config = resolve(
        &RawConfig::default(),
        &HostCapacity::new(4, Some((250_000, 100_000)), 16 * G, Some(10 * G)),
    );
    assert_eq!(config.capacity.cpu_millis, 2500);
    assert_eq!(config.capacity.memory, 9 * G);
    assert_eq!(default_memory(u64::MAX), 16_602_069_666_338_596_453);
}

#[test]
fn mem_total_of_meminfo() {
    let meminfo = "MemTotal:       16316412 kB\nMemFree:         1234567 kB\n";
    assert_eq!(parse_mem_total(meminfo), Some(16_316_412 * 1024));
    assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
    assert_eq!(parse_mem_total("MemTotal: lots kB\n"), None);
}

#[test]
fn detect_reads_this_host() {
    let host = HostCapacity::detect(None, None).unwrap();
    assert!(host.cpu_millis >= 1000 && host.cpu_millis.is_multiple_of(1000));
    assert!(host.memory > 0);
    let capped = HostCapacity::detect(Some((50_000, 100_000)), Some(G)).unwrap();
    assert_eq!(capped.cpu_millis, 500);
    assert_eq!(capped.memory, G.min(host.memory));
}

#[test]
fn unknown_fields_are_errors_with_line_and_col() {
    assert_bad(
        "Config(\n    capacity: Capacity(cpus: 2.0),\n)",
        2,
        24,
        "unknown field \"cpus\" in Capacity (did you mean \"cpu\"?); valid fields are cpu, memory, max_running",
    );
    assert_bad(
        "Config(\n    starvation: \"5m\",\n)",
        2,
        5,
        "unknown field \"starvation\" in Config (did you mean \"starvation_limit\"?)",
    );
    assert_bad(
        "Config(\n  cpu: 2.0,\n)",
        2,
        3,
        "\"cpu\" belongs inside capacity: write capacity: Capacity(cpu: ...)",
    );
}

#[test]
fn bad_values_are_errors_with_line_and_col() {
    assert_bad(
        "Config(\n    capacity: Capacity(memory: \"8Q\"),\n)",
        2,
        32,
        "capacity.memory: size \"8Q\" has unknown unit \"Q\"",
    );
    assert_bad(
        "Config(starvation_limit: \"10\")",
        1,
        26,
        "starvation_limit: duration \"10\" has no unit",
    );
    assert_bad(
        "Config(\n    capacity: Capacity(cpu: \"2\"),\n)",
        2,
        29,
        "capacity.cpu: expected",
    );
    assert_bad(
        "Config(capacity: Capacity(max_running: 4))",
        1,
        40,
        "here Some(4)",
    );
    assert_bad(
        "Config(capacity: Capacity(max_running: Some(-1)))",
        1,
        45,
        "capacity.max_running",
    );
}

#[test]
fn values_that_cannot_be_meant_are_errors_with_line_and_col() {
    assert_bad(
        "Config(\n  capacity: Capacity(\n    cpu: 0.0,\n  ),\n)",
        3,
        10,
        "capacity.cpu: 0 is not a positive number of CPU cores",
    );
    assert_bad(
        "Config(capacity: Capacity(cpu: -1.0))",
        1,
        32,
        "capacity.cpu: -1 is not a positive number",
    );
    assert_bad(
        "Config(capacity: Capacity(memory: \"1M\"))",
        1,
        35,
        "capacity.memory: 1M leaves no room for a task (the smallest memory reservation is 4M)",
    );
    assert_bad(
        "Config(\n  capacity: Capacity(max_running: Some(0)),\n)",
        2,
        40,
        "capacity.max_running: Some(0) would never start a task",
    );
    // Two problems: the first in the file is reported.
    assert_bad(
        "Config(capacity: Capacity(max_running: Some(0), cpu: 0.0))",
        1,
        45,
        "max_running",
    );
}

#[test]
fn whole_file_errors_speak_of_a_configuration() {
    assert_bad("", 1, 1, "the file holds no configuration: write Config()");
    assert_bad("// nothing\n", 1, 1, "the file holds no configuration");
    assert_bad(
        "Config()\nConfig()",
        2,
        1,
        "after the end of the configuration: the file holds exactly one Config(...)",
    );
    assert_bad("42", 1, 1, "expected Config(capacity: Capacity(");
    assert_bad(
        "Unit(command: [\"a\"])",
        1,
        1,
        "expected Config(...) here, found Unit(...)",
    );
    assert_bad(
        "Config(\n  capacity: Capacity(cpu: 2.0\n",
        2,
        21,
        "never closed",
    );
}

#[test]
fn load_config_missing_file_means_defaults() {
    let dir = temp_dir("missing");
    let config = load_config(&dir.join(CONFIG_FILE), &host()).unwrap();
    assert_eq!(config, resolve(&RawConfig::default(), &host()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn load_config_reads_the_file() {
    let dir = temp_dir("load");
    let path = dir.join(CONFIG_FILE);
    std::fs::write(&path, "\u{feff}Config(capacity: Capacity(cpu: 1.5))\n").unwrap();
    assert_eq!(
        load_config(&path, &host()).unwrap().capacity.cpu_millis,
        1500
    );

    std::fs::write(
        &path,
        "Config(\n  capacity: Capacity(memory: \"lots\"),\n)\n",
    )
    .unwrap();
    let error = load_config(&path, &host()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}:2:30: capacity.memory: size \"lots\" does not start with a number: write e.g. \"512M\" or \"4G\"",
            path.display()
        )
    );

    std::fs::write(&path, b"Config(\n  \xff)").unwrap();
    let error = load_config(&path, &host()).unwrap_err();
    assert_eq!((error.line, error.col), (2, 3), "{error}");
    assert!(error.message.contains("invalid UTF-8"), "{error}");

    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let error = load_config(&path, &host()).unwrap_err();
    assert_eq!((error.line, error.col), (0, 0));
    assert!(error.message.contains("is a directory"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn user_namespaces() {
    let on = |first_id, blocks| UserNamespaces::On(IdRange { first_id, blocks });
    let parse_userns = |text: &str| parse(text).user_namespaces;
    assert_eq!(parse_userns("Config()"), on(0x7000_0000, 1024));
    assert_eq!(
        parse_userns("Config(user_namespaces: UserNamespaces(first_id: 1879048192, blocks: 1024))"),
        on(1_879_048_192, 1024)
    );
    assert_eq!(
        parse_userns("Config(user_namespaces: UserNamespaces(first_id: 0x10000000))"),
        on(0x1000_0000, 1024)
    );
    assert_eq!(
        parse_userns("Config(user_namespaces: UserNamespaces(blocks: 16))"),
        on(0x7000_0000, 16)
    );
    assert_eq!(
        parse_userns("Config(user_namespaces: UserNamespaces())"),
        on(0x7000_0000, 1024)
    );
    assert_eq!(
        parse_userns("Config(user_namespaces: Off)"),
        UserNamespaces::Off
    );
    // The default range: 0x70000000-0x73FFFFFF, inside what systemd leaves unused.
    let IdRange { first_id, blocks } = match parse_userns("Config()") {
        UserNamespaces::On(range) => range,
        UserNamespaces::Off => panic!("on by default"),
    };
    let range = IdRange { first_id, blocks };
    assert_eq!(range.end(), 0x7400_0000);
    assert!(range.end() <= ID_RANGE_LIMIT);
    // The largest range that fits: up to systemd's foreign ids (0x7FFE0000) exactly.
    assert_eq!(
        parse_userns("Config(user_namespaces: UserNamespaces(first_id: 65536, blocks: 32765))"),
        on(65536, 32765)
    );
    assert_eq!(
        parse_userns("Config(user_namespaces: UserNamespaces(first_id: 2147287040, blocks: 1))"),
        on(0x7FFD_0000, 1)
    );
}

#[test]
fn user_namespaces_errors() {
    assert_bad(
        "Config(\n  user_namespaces: UserNamespaces(first_id: 1000),\n)",
        2,
        45,
        "user_namespaces.first_id: 1000 is below 65536",
    );
    assert_bad(
        "Config(user_namespaces: UserNamespaces(first_id: 0))",
        1,
        50,
        "host's own users",
    );
    assert_bad(
        "Config(user_namespaces: UserNamespaces(blocks: 0))",
        1,
        48,
        "user_namespaces.blocks: 0 blocks would never start a task",
    );
    // Past 0x7FFE0000: the fix names the most blocks that fit from the first id written.
    assert_bad(
        "Config(user_namespaces: UserNamespaces(first_id: 2000000000, blocks: 4096))",
        1,
        70,
        "write blocks: 2248 or fewer",
    );
    // Only the first id written: it is the one to lower.
    assert_bad(
        "Config(user_namespaces: UserNamespaces(first_id: 2140000000))",
        1,
        50,
        "write first_id: 2080243712 or lower",
    );
    // More blocks than fit from any first id.
    assert_bad(
        "Config(user_namespaces: UserNamespaces(first_id: 65536, blocks: 40000))",
        1,
        65,
        "write blocks: 32765 or fewer",
    );
    assert_bad(
        "Config(user_namespaces: UserNamespaces(blocks: 40000))",
        1,
        48,
        "write blocks: 4094 or fewer",
    );
    // The highest id there is: no overflow, the first id is what to lower.
    assert_bad(
        "Config(user_namespaces: UserNamespaces(first_id: 4294967295, blocks: 1))",
        1,
        50,
        "write first_id: 2147287040 or lower",
    );
    assert_bad(
        "Config(user_namespaces: UserNamespaces(first_id: 2147480000, blocks: 40000))",
        1,
        70,
        "at most 32765 blocks fit, from first_id: 65536",
    );
    // Not a bool, not another variant, no unknown field, no negative id.
    for (text, col) in [
        ("Config(user_namespaces: false)", 25),
        ("Config(user_namespaces: On)", 25),
        ("Config(user_namespaces: Some(Off))", 25),
        ("Config(user_namespaces: UserNamespaces(first_id: -1))", 50),
        (
            "Config(user_namespaces: UserNamespaces(first_id: 5000000000))",
            50,
        ),
    ] {
        let error = parse_config(Path::new("keel.ron"), text).expect_err(text);
        assert_eq!((error.line, error.col), (1, col), "{text}: {error}");
        assert!(error.message.starts_with("user_namespaces"), "{error}");
    }
}

#[test]
fn user_namespaces_error_messages_say_what_to_write() {
    let message = |text: &str| {
        parse_config(Path::new("keel.ron"), text)
            .expect_err(text)
            .message
    };
    let m = message("Config(user_namespaces: false)");
    assert!(m.contains("use Off or UserNamespaces"), "{m}");
    let m = message("Config(user_namespaces: UserNamespaces(first_id: -1))");
    assert!(m.contains("a host id such as 1879048192"), "{m}");
    let m = message("Config(user_namespaces: UserNamespaces(size: 4096))");
    assert!(m.contains("valid fields are first_id, blocks"), "{m}");
    let m = message("Config(user_namespace: Off)");
    assert!(m.contains("did you mean \"user_namespaces\""), "{m}");
}

#[test]
fn jobs_and_harvest_limits_are_read_and_checked() {
    let config = parse(
        r#"Config(jobs: Jobs(workers: 3, memory: "512M", deadline: "2s", preparation_idle: "5s"), harvest_limits: HarvestLimits(max_pack_bytes: 1000))"#,
    );
    assert_eq!(config.jobs.workers, 3);
    assert_eq!(config.jobs.memory, 512 << 20);
    assert_eq!(config.jobs.deadline, Duration::from_secs(2));
    assert_eq!(config.jobs.preparation_idle, Duration::from_secs(5));
    assert_eq!(
        config.jobs.preparation_deadline,
        super::jobs::DEFAULT_PREPARATION_DEADLINE
    );
    assert_eq!(config.harvest_limits.max_pack_bytes, 1000);
    assert_eq!(
        config.harvest_limits.max_object_bytes,
        HarvestLimits::default().max_object_bytes
    );
    let path = std::path::Path::new("keel.ron");
    let zero = parse_config(path, "Config(jobs: Jobs(workers: 0))").unwrap_err();
    assert!(zero.to_string().contains("jobs.workers"), "{zero}");
    let small = parse_config(path, r#"Config(jobs: Jobs(memory: "1M"))"#).unwrap_err();
    assert!(small.to_string().contains("too little"), "{small}");
}

#[test]
fn disk_reserve_is_a_size_with_a_default_of_the_filesystem() {
    assert_eq!(
        parse(r#"Config(disk_reserve: "2G")"#).disk_reserve,
        Some(2 * G)
    );
    assert_eq!(parse(r#"Config(disk_reserve: "0")"#).disk_reserve, Some(0));
    assert_eq!(parse("Config()").disk_reserve, None);
    assert_eq!(crate::config::default_disk_reserve(100 * G), G);
    assert_eq!(
        crate::config::default_disk_reserve(272 << 20),
        (272 << 20) / 20
    );
    let error = parse_config(Path::new("keel.ron"), r#"Config(disk_reserve: "lots")"#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("keel.ron:1:"), "{error}");
}
