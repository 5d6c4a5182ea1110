use crate::unit::test_support::*;
use crate::unit::*;

/// Parses `text`, expecting an error at exactly `line:col` whose message contains `needle`.
fn assert_bad(text: &str, line: usize, col: usize, needle: &str) {
    let error = match parse_unit(Path::new("units/t.ron"), text) {
        Ok(unit) => panic!("parsed, expected an error: {unit:?}"),
        Err(error) => error,
    };
    assert!(
        error.message.contains(needle),
        "message lacks {needle:?}: {error}"
    );
    assert_eq!((error.line, error.col), (line, col), "{error}");
    assert!(error
        .to_string()
        .starts_with(&format!("units/t.ron:{line}:{col}: ")));
}

/// As `assert_bad`, for a file that fails on its name: whole-file errors have line 0, col 0.
fn assert_bad_file(path: &str, needle: &str) {
    let error = load_unit_file(Path::new(path)).expect_err("should fail");
    assert_eq!((error.line, error.col), (0, 0), "{error}");
    assert!(
        error.message.contains(needle),
        "message lacks {needle:?}: {error}"
    );
    assert!(
        error.to_string().starts_with(&format!("{path}:1:1: ")),
        "{error}"
    );
}

// ------------------------------------------------------------------------------------------
// Bad inputs: each at its exact line and column, with a message that says what to fix.

macro_rules! bad_inputs {
    ($($name:ident: $text:expr => $line:literal:$col:literal, $needle:expr;)*) => {
        $(
            #[test]
            fn $name() {
                assert_bad($text, $line, $col, $needle);
            }
        )*
    };
}

bad_inputs! {
    // Syntax and types (reported by ron; positions and messages reworked).
    missing_command: "Unit(\n    restart: Never,\n)"
        => 1:1, "missing field \"command\": a unit must say what to run";
    missing_command_in_unnamed_struct: "\n(\n    restart: Never,\n)"
        => 2:1, "missing field \"command\"";
    empty_command: "Unit(\n    command: [],\n)"
        => 2:14, "command: the list is empty: give the program and its arguments";
    empty_program: "Unit(\n    command: [\"\", \"-p\"],\n)"
        => 2:14, "the program (the first element) is empty";
    empty_resume_command: "Unit(\n    command: [\"a\"],\n    resume_command: Some([]),\n)"
        => 3:26, "resume_command: the list is empty";
    unknown_top_level_field: "Unit(\n    command: [\"agent\"],\n    restrat: Always,\n)"
        => 3:5, "unknown field \"restrat\" in Unit (did you mean \"restart\"?); valid fields are command, resume_command, env,";
    unknown_nested_field: "Unit(\n    command: [\"agent\"],\n    stop: Stop(signal: \"SIGTERM\", grace: \"5s\"),\n)"
        => 3:35, "unknown field \"grace\" in Stop; valid fields are signal, timeout";
    nested_field_at_top_level: "Unit(\n    command: [\"agent\"],\n    factor: 2.0,\n)"
        => 3:5, "\"factor\" belongs inside backoff: write backoff: Backoff(factor: ...)";
    duplicate_field: "Unit(\n    command: [\"agent\"],\n    command: [\"other\"],\n)"
        => 3:5, "field \"command\" is given twice in Unit";
    bad_duration_unit: "Unit(\n    command: [\"agent\"],\n    stop: Stop(timeout: \"5x\"),\n)"
        => 3:25, "stop.timeout: duration \"5x\" has unknown unit \"x\": use ms, s, m, h or d";
    duration_without_unit: "Unit(\n    command: [\"agent\"],\n    backoff: Backoff(max: \"90\"),\n)"
        => 3:27, "backoff.max: duration \"90\" has no unit: write e.g. \"90s\" or \"90m\"";
    duration_behind_comments: "Unit(\n    command: [\"agent\"],\n    liveness: Liveness(\n        // silence\n        heartbeat_timeout: /* minutes */ \"5 minutes\",\n    ),\n)"
        => 5:42, "liveness.heartbeat_timeout: duration \"5 minutes\" has unknown unit \"minutes\"";
    duration_as_number: "Unit(\n    command: [\"agent\"],\n    stop: Stop(timeout: 30),\n)"
        => 3:25, "stop.timeout: expected a duration such as \"90s\", \"5m\" or \"250ms\", found 30";
    negative_size: "Unit(\n    command: [\"agent\"],\n    resources: Resources(memory: \"-512M\"),\n)"
        => 3:34, "resources.memory: size \"-512M\" is negative";
    garbage_size: "Unit(\n    command: [\"agent\"],\n    resources: Resources(memory: \"lots\"),\n)"
        => 3:34, "size \"lots\" does not start with a number: write e.g. \"512M\" or \"4G\"";
    size_unknown_unit: "Unit(\n    command: [\"agent\"],\n    resources: Resources(memory: \"4Q\"),\n)"
        => 3:34, "size \"4Q\" has unknown unit \"Q\": use K, M, G or T";
    bad_signal_name: "Unit(\n    command: [\"agent\"],\n    stop: Stop(signal: \"SIGTREM\"),\n)"
        => 3:24, "stop.signal: unknown signal \"SIGTREM\" (did you mean \"SIGTERM\"?)";
    signal_as_number: "Unit(\n    command: [\"agent\"],\n    stop: Stop(signal: 15),\n)"
        => 3:24, "stop.signal: expected a signal name such as \"SIGTERM\", found 15";
    bad_restart_variant: "Unit(\n    command: [\"agent\"],\n    restart: Sometimes,\n)"
        => 3:14, "restart: unknown value Sometimes: use Always, OnFailure or Never";
    restart_variant_in_snake_case: "Unit(\n    command: [\"agent\"],\n    restart: on_failure,\n)"
        => 3:14, "unknown value on_failure (did you mean OnFailure?)";
    quoted_variant: "Unit(\n    command: [\"agent\"],\n    restart: \"Always\",\n)"
        => 3:14, "found \"Always\": write the name without quotes";
    bad_liveness_signal: "Unit(\n    command: [\"agent\"],\n    liveness: Liveness(signals: [Heartbeat, Progress]),\n)"
        => 3:45, "liveness.signals[1]: unknown value Progress: use Heartbeat, Output or Cpu";
    variant_with_arguments: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(network: Host(1)),\n)"
        => 3:31, "sandbox.network: expected Allow([\"api.example.com\", ...]), None or Host, found Host(1)";
    bad_network_variant: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(network: Open),\n)"
        => 3:31, "sandbox.network: unknown value Open: use Host, None or Allow";
    allow_without_a_list: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(network: Allow(\"a.com\")),\n)"
        => 3:37, "sandbox.network";
    // Allow-list entries: each at its own string, with network::entry's message.
    malformed_network_entry: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(network: Allow([\n        \"api.anthropic.com\",\n        \"github.com:ssh\",\n    ])),\n)"
        => 5:9, "sandbox.network[1]: \"github.com:ssh\": \"ssh\" is not a port (1 to 65535)";
    too_broad_wildcard: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(network: Allow([\"*.com\"])),\n)"
        => 3:38, "sandbox.network[0]: \"*.com\" is too broad";
    everything_wildcard: "Unit(command: [\"a\"], sandbox: Sandbox(network: Allow([\"a.org\", \"*\"])))"
        => 1:64, "sandbox.network[1]: \"*\" is too broad";
    address_without_port: "Unit(command: [\"a\"], sandbox: Sandbox(network: Allow([\"10.0.0.0/8\"])))"
        => 1:55, "an address entry needs its port";
    bad_list_name: "Unit(command: [\"a\"], sandbox: Sandbox(network: Allow([\"@\"])))"
        => 1:55, "a list is named by letters, digits";
    wrong_type_string_for_integer: "Unit(\n    command: [\"agent\"],\n    priority: \"high\",\n)"
        => 3:15, "priority: expected a whole number such as 0, 10 or -5, found \"high\"";
    wrong_type_float_for_integer: "Unit(\n    command: [\"agent\"],\n    priority: 1.5,\n)"
        => 3:15, "priority: expected a whole number such as 0, 10 or -5, found 1.5";
    wrong_type_string_for_list: "Unit(\n    command: \"agent --go\",\n)"
        => 2:14, "command: expected a list of strings such as [\"claude\", \"-p\", \"...\"], found \"agent --go\"";
    wrong_type_in_list: "Unit(\n    command: [\"agent\", 42],\n)"
        => 2:24, "command[1]: expected a string, found 42";
    wrong_type_bool: "Unit(\n    command: [\"agent\"],\n    essential: yes,\n)"
        => 3:16, "essential: expected true or false, found yes";
    integer_out_of_range: "Unit(\n    command: [\"agent\"],\n    resources: Resources(pids: -1),\n)"
        => 3:32, "resources.pids: -1 is out of range: expected a whole number such as 1024";
    option_without_some: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(user: \"1000:1000\"),\n)"
        => 3:28, "here Some(\"1000:1000\")";
    struct_without_some: "Unit(\n    command: [\"agent\"],\n    repo: Repo(path: \"/srv/app\"),\n)"
        => 3:11, "repo: expected None or Some(Repo(";
    wrong_struct_name: "Unit(\n    command: [\"agent\"],\n    stop: Backoff(timeout: \"5s\"),\n)"
        => 3:11, "stop: expected Stop(...) here, found Backoff(...)";
    wrong_top_level_name: "Service(\n    command: [\"agent\"],\n)"
        => 1:1, "expected Unit(...) here, found Service(...)";
    fields_without_unit: "command: [\"agent\"],\n"
        => 1:1, "the fields go inside Unit( ... )";
    missing_repo_path: "Unit(\n    command: [\"agent\"],\n    repo: Some(Repo(base: \"main\")),\n)"
        => 3:16, "missing field \"path\" in Repo: add path (an absolute path such as \"/srv/repos/app\")";
    unterminated_string: "Unit(\n    command: [\"agent\", \"--go],\n    restart: Never,\n)\n"
        => 2:24, "this string is never closed";
    unclosed_block_comment: "Unit(\n    command: [\"agent\"], /* restart: Never,\n)\n"
        => 2:25, "this comment is never closed: add \"*/\"";
    unclosed_paren: "Unit(\n    command: [\"agent\"],\n    stop: Stop(timeout: \"5s\",\n"
        => 3:15, "this \"(\" is never closed: the file ends before its \")\"";
    unclosed_list: "Unit(\n    command: [\"agent\", \"--go\""
        => 2:14, "this \"[\" is never closed";
    missing_comma: "Unit(\n    command: [\"agent\"]\n    restart: Never,\n)"
        => 3:5, "expected \",\" before restart";
    missing_colon: "Unit(\n    command: [\"agent\"],\n    env: {\"A\" \"b\"},\n)"
        => 3:15, "expected \":\" before \"b\"";
    unquoted_map_key: "Unit(\n    command: [\"agent\"],\n    env: {RUST_LOG: \"info\"},\n)"
        => 3:11, "env: map keys are strings: write \"RUST_LOG\", not RUST_LOG";
    trailing_garbage: "Unit(\n    command: [\"agent\"],\n)\nrestart: Never\n"
        => 4:1, "unexpected restart after the end of the unit";
    empty_file: ""
        => 1:1, "the file holds no unit";
    only_comments: "// nothing here yet\n/* really */\n"
        => 1:1, "the file holds no unit";
    columns_count_characters: "Unit(\n    command: [\"agent\"],\n    env: {\"NAME\": \"héllo\", \"T\": 5},\n)"
        => 3:33, "env[\"T\"]: expected a string, found 5";
    duplicate_env_key: "Unit(\n    command: [\"agent\"],\n    env: {\"A\": \"1\", \"A\": \"2\"},\n)"
        => 3:21, "env[\"A\"]: this key is given twice";

    // Semantic validation (positions found in the text).
    factor_below_one: "Unit(\n    command: [\"agent\"],\n    backoff: Backoff(factor: 0.5),\n)"
        => 3:30, "backoff.factor: 0.5 is below 1.0";
    factor_infinite: "Unit(\n    command: [\"agent\"],\n    backoff: Backoff(factor: inf),\n)"
        => 3:30, "backoff.factor: inf is not a finite number";
    factor_nan: "Unit(\n    command: [\"agent\"],\n    backoff: Backoff(factor: NaN),\n)"
        => 3:30, "backoff.factor: NaN is not a finite number";
    initial_above_max: "Unit(\n    command: [\"agent\"],\n    backoff: Backoff(initial: \"10m\", max: \"5m\"),\n)"
        => 3:31, "backoff.initial: \"10m\" is longer than backoff.max (\"5m\"): make initial <= max";
    max_below_default_initial: "Unit(\n    command: [\"agent\"],\n    backoff: Backoff(max: \"500ms\"),\n)"
        => 3:27, "backoff.initial: \"1s\" is longer than backoff.max (\"500ms\")";
    initial_zero: "Unit(\n    command: [\"agent\"],\n    backoff: Backoff(initial: \"0s\"),\n)"
        => 3:31, "backoff.initial: is 0";
    zero_restart_count: "Unit(\n    command: [\"agent\"],\n    restart_limit: RestartLimit(count: 0),\n)"
        => 3:40, "restart_limit.count: is 0: allow at least 1 restart";
    zero_restart_window: "Unit(\n    command: [\"agent\"],\n    restart_limit: RestartLimit(within: \"0s\"),\n)"
        => 3:41, "restart_limit.within: is 0";
    zero_cpu: "Unit(\n    command: [\"agent\"],\n    resources: Resources(cpu: 0.0),\n)"
        => 3:31, "resources.cpu: 0 is not a positive number of CPU cores";
    negative_cpu: "Unit(\n    command: [\"agent\"],\n    resources: Resources(cpu: -1.5),\n)"
        => 3:31, "resources.cpu: -1.5 is not a positive number";
    memory_below_minimum: "Unit(\n    command: [\"agent\"],\n    resources: Resources(memory: \"1M\"),\n)"
        => 3:34, "resources.memory: \"1M\" is below the minimum of \"4M\"";
    zero_max_runtime: "Unit(\n    command: [\"agent\"],\n    max_runtime: Some(\"0s\"),\n)"
        => 3:23, "max_runtime: is 0";
    zero_max_total_runtime: "Unit(\n    command: [\"agent\"],\n    max_total_runtime: Some(\"0s\"),\n)"
        => 3:29, "max_total_runtime: is 0";
    zero_pids: "Unit(\n    command: [\"agent\"],\n    resources: Resources(pids: 0),\n)"
        => 3:32, "resources.pids: is 0";
    zero_cpu_limit: "Unit(\n    command: [\"agent\"],\n    resources: Resources(cpu_limit: Some(0.0)),\n)"
        => 3:42, "resources.cpu_limit: Some(0) is not a positive number of CPU cores";
    cpu_limit_below_request: "Unit(\n    command: [\"agent\"],\n    resources: Resources(cpu: 2.0, cpu_limit: Some(1.5)),\n)"
        => 3:52, "resources.cpu_limit: Some(1.5) is below the request (cpu: 2): the task could never use what it reserves";
    cpu_limit_below_default_request: "Unit(\n    command: [\"agent\"],\n    resources: Resources(cpu_limit: Some(0.1)),\n)"
        => 3:42, "resources.cpu_limit: Some(0.1) is below the request (cpu: 0.25)";
    cpu_limit_without_some: "Unit(\n    command: [\"agent\"],\n    resources: Resources(cpu_limit: 4.0),\n)"
        => 3:37, "resources.cpu_limit";
    memory_limit_below_request: "Unit(\n    command: [\"agent\"],\n    resources: Resources(memory: \"2G\", memory_limit: Some(\"1G\")),\n)"
        => 3:59, "resources.memory_limit: Some(\"1G\") is below the request (memory: \"2G\"): the task would be killed";
    memory_limit_below_default_request: "Unit(\n    command: [\"agent\"],\n    resources: Resources(memory_limit: Some(\"256M\")),\n)"
        => 3:45, "resources.memory_limit: Some(\"256M\") is below the request (memory: \"512M\")";
    memory_limit_below_minimum: "Unit(\n    command: [\"agent\"],\n    resources: Resources(memory: \"4M\", memory_limit: Some(\"1M\")),\n)"
        => 3:59, "resources.memory_limit: Some(\"1M\") is below the minimum of \"4M\"";
    memory_limit_bad_size: "Unit(\n    command: [\"agent\"],\n    resources: Resources(memory_limit: Some(\"4Q\")),\n)"
        => 3:45, "resources.memory_limit";
    disk_below_minimum: "Unit(\n    command: [\"agent\"],\n    resources: Resources(disk: Some(\"1M\")),\n)"
        => 3:37, "resources.disk: \"1M\" is below the minimum of \"16M\"";
    relative_workdir: "Unit(\n    command: [\"agent\"],\n    workdir: \"work\",\n)"
        => 3:14, "workdir: \"work\" is relative: write an absolute path such as \"/work\"";
    root_workdir: "Unit(\n    command: [\"agent\"],\n    workdir: \"/\",\n)"
        => 3:14, "workdir: is the root directory";
    workdir_with_dotdot: "Unit(\n    command: [\"agent\"],\n    workdir: \"/work/../etc\",\n)"
        => 3:14, "contains \"..\"";
    reserved_env_key: "Unit(\n    command: [\"agent\"],\n    env: {\"PATH\": \"/bin\", \"KEEL_UNIT\": \"x\"},\n)"
        => 3:27, "env[\"KEEL_UNIT\"]: the KEEL_ prefix is reserved";
    env_key_with_equals: "Unit(\n    command: [\"agent\"],\n    env: {\"A=B\": \"x\"},\n)"
        => 3:11, "env[\"A=B\"]: a variable name cannot contain \"=\"";
    empty_env_key: "Unit(\n    command: [\"agent\"],\n    env: {\"\": \"x\"},\n)"
        => 3:11, "the variable name is empty";
    env_key_with_nul: "Unit(\n    command: [\"agent\"],\n    env: {\"A\\u{0}\": \"x\"},\n)"
        => 3:11, "contains a NUL byte";
    duplicate_liveness_signal: "Unit(\n    command: [\"agent\"],\n    liveness: Liveness(signals: [Heartbeat, Output, Heartbeat]),\n)"
        => 3:53, "liveness.signals[2]: Heartbeat is listed twice";
    empty_liveness_signals: "Unit(\n    command: [\"agent\"],\n    liveness: Liveness(signals: []),\n)"
        => 3:33, "liveness.signals: is empty";
    zero_heartbeat_timeout: "Unit(\n    command: [\"agent\"],\n    liveness: Liveness(heartbeat_timeout: \"0s\"),\n)"
        => 3:43, "liveness.heartbeat_timeout: is 0";
    zero_progress_timeout: "Unit(\n    command: [\"agent\"],\n    liveness: Liveness(progress_timeout: \"0ms\"),\n)"
        => 3:42, "liveness.progress_timeout: is 0";
    zero_stop_timeout: "Unit(\n    command: [\"agent\"],\n    stop: Stop(timeout: \"0s\"),\n)"
        => 3:25, "stop.timeout: is 0";
    bad_user_name: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(user: Some(\"Bob Smith\")),\n)"
        => 3:33, "sandbox.user: \"Bob Smith\" is neither uid:gid";
    bad_uid_gid: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(user: Some(\"1000:staff\")),\n)"
        => 3:33, "sandbox.user: \"1000:staff\" is not uid:gid";
    unknown_capability: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(capabilities: [\"CAP_NET_ADMN\"]),\n)"
        => 3:37, "sandbox.capabilities[0]: unknown capability \"CAP_NET_ADMN\" (did you mean \"CAP_NET_ADMIN\"?)";
    relative_writable_path: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(writable: [\"/data\", \"cache\"]),\n)"
        => 3:42, "sandbox.writable[1]: \"cache\" is relative";
    relative_hidden_path: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(hidden: [\"secrets\"]),\n)"
        => 3:31, "sandbox.hidden[0]: \"secrets\" is relative";
    hidden_root: "Unit(\n    command: [\"agent\"],\n    sandbox: Sandbox(hidden: [\"/\"]),\n)"
        => 3:31, "sandbox.hidden[0]: is the root directory";
    relative_repo_path: "Unit(\n    command: [\"agent\"],\n    repo: Some(Repo(path: \"repos/app\")),\n)"
        => 3:27, "repo.path: \"repos/app\" is relative";
    empty_repo_base: "Unit(\n    command: [\"agent\"],\n    repo: Some(Repo(path: \"/srv/app\", base: \"\")),\n)"
        => 3:45, "repo.base: is empty";
    bad_branch_name: "Unit(\n    command: [\"agent\"],\n    repo: Some(Repo(path: \"/srv/app\", branch: Some(\"feature..x\"))),\n)"
        => 3:52, "repo.branch: \"feature..x\" is not a valid git branch name";
    nul_in_argument: "Unit(\n    command: [\"agent\", \"a\\u{0}b\"],\n)"
        => 2:14, "command: argument 1 contains a NUL byte";
}

// File names: whole-file errors.
#[test]
fn name_with_uppercase() {
    assert_bad_file("units/Hello.ron", "uppercase letter 'H'");
}

#[test]
fn name_with_space() {
    assert_bad_file("units/my unit.ron", "contains a space");
}

#[test]
fn name_with_leading_dot() {
    assert_bad_file("units/.hidden.ron", "starts with '.'");
}

#[test]
fn name_too_long() {
    assert_bad_file(
        &format!("units/{}.ron", "a".repeat(64)),
        "64 characters long: the limit is 63",
    );
}

#[test]
fn name_without_ron_extension() {
    assert_bad_file(
        "units/hello.yaml",
        "not a unit file: unit files are named NAME.ron",
    );
    assert_bad_file("units/hello.ron.bak", "not a unit file");
}

#[test]
fn unreadable_files() {
    let dir = temp_dir("unreadable");
    assert_bad_file(dir.join("missing.ron").to_str().unwrap(), "cannot read");
    std::fs::create_dir(dir.join("dir.ron")).unwrap();
    assert_bad_file(dir.join("dir.ron").to_str().unwrap(), "is a directory");
    let big = dir.join("big.ron");
    std::fs::write(&big, vec![b' '; MAX_UNIT_FILE_SIZE as usize + 1]).unwrap();
    assert_bad_file(big.to_str().unwrap(), "is larger than 1M");
    let fifo = dir.join("fifo.ron");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert_bad_file(fifo.to_str().unwrap(), "is not a regular file");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn invalid_utf8_is_located() {
    let dir = temp_dir("utf8");
    let path = dir.join("bad.ron");
    std::fs::write(&path, b"Unit(\n    command: [\"ag\xffent\"],\n)").unwrap();
    let error = load_unit_file(&path).expect_err("invalid UTF-8");
    assert_eq!((error.line, error.col), (2, 18), "{error}");
    assert!(
        error.message.contains("invalid UTF-8 (byte 0xff)"),
        "{error}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn load_unit_file_returns_name_unit_and_text() {
    let dir = temp_dir("load");
    let path = dir.join("fix-tests.ron");
    let text = "Unit(command: [\"agent\"], restart: Never)\n";
    std::fs::write(&path, text).unwrap();
    let (name, unit, read) = load_unit_file(&path).unwrap();
    assert_eq!(name, "fix-tests");
    assert_eq!(unit.restart, RestartPolicy::Never);
    assert_eq!(read, text);
    std::fs::write(
        &path,
        "Unit(\n    command: [\"agent\"],\n    stop: Stop(timeout: \"5x\"),\n)",
    )
    .unwrap();
    let error = load_unit_file(&path).expect_err("bad duration");
    assert_eq!(error.file, path);
    assert_eq!((error.line, error.col), (3, 25));
    std::fs::remove_dir_all(dir).unwrap();
}
