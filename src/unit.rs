//! Unit files: one `.ron` file per agent task.
//!
//! A unit is parsed with serde + ron; every field but `command` has a default, unknown fields
//! are errors, and every error names `file:line:col` so that an operator can fix it without
//! guessing. Durations (`"250ms"`, `"90s"`, `"5m"`, `"1h"`) and sizes (`"512M"`, `"4G"`) are
//! strings with units, parsed here.
//!
//! Three layers:
//! - [`parse_unit`] / [`check_unit`] / [`load_unit_file`]: text (or a file) to a valid [`Unit`].
//! - [`validate_unit`]: the semantic rules (backoff factor ≥ 1, absolute paths, …), a pure
//!   function of a parsed unit that names each problem by its [`FieldPath`].
//! - A small lexer and a tolerant structural scan of the text (`SourceMap`) that map field
//!   paths to positions and back. ron reports where its cursor was (often the whitespace before
//!   a token, or inside a string after a custom error); the scan turns that into the start of
//!   the offending token and the field it belongs to, and locates semantic problems.

use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A unit as accepted: the agent's command and everything keel needs to run it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unit {
    pub command: Command,
    #[serde(default)]
    pub resume_command: Option<Command>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub repo: Option<Repo>,
    #[serde(default)]
    pub restart: RestartPolicy,
    #[serde(default)]
    pub backoff: Backoff,
    #[serde(default)]
    pub restart_limit: RestartLimit,
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub liveness: Liveness,
    #[serde(default = "default_workdir")]
    pub workdir: String,
    #[serde(default)]
    pub sandbox: Sandbox,
    #[serde(default)]
    pub stop: Stop,
    #[serde(default)]
    pub essential: bool,
}

fn default_workdir() -> String {
    "/work".to_string()
}

/// argv of the agent: never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct Command(pub Vec<String>);

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repo {
    pub path: String,
    #[serde(default = "default_base")]
    pub base: String,
    #[serde(default)]
    pub branch: Option<String>,
}

fn default_base() -> String {
    "main".to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum RestartPolicy {
    Always,
    #[default]
    OnFailure,
    Never,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    #[serde(default = "Backoff::default_initial")]
    pub initial: Dur,
    #[serde(default = "Backoff::default_max")]
    pub max: Dur,
    #[serde(default = "Backoff::default_factor")]
    pub factor: f64,
    #[serde(default = "Backoff::default_reset_after")]
    pub reset_after: Dur,
}

impl Backoff {
    fn default_initial() -> Dur {
        Dur(Duration::from_secs(1))
    }
    fn default_max() -> Dur {
        Dur(Duration::from_secs(300))
    }
    fn default_factor() -> f64 {
        2.0
    }
    fn default_reset_after() -> Dur {
        Dur(Duration::from_secs(600))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Self::default_initial(),
            max: Self::default_max(),
            factor: Self::default_factor(),
            reset_after: Self::default_reset_after(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartLimit {
    #[serde(default = "RestartLimit::default_count")]
    pub count: u32,
    #[serde(default = "RestartLimit::default_within")]
    pub within: Dur,
}

impl RestartLimit {
    fn default_count() -> u32 {
        5
    }
    fn default_within() -> Dur {
        Dur(Duration::from_secs(3600))
    }
}

impl Default for RestartLimit {
    fn default() -> Self {
        RestartLimit {
            count: Self::default_count(),
            within: Self::default_within(),
        }
    }
}

/// A reservation that the scheduler counts and the kernel enforces (cgroup limits).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// CPU cores (fractional).
    #[serde(default = "Resources::default_cpu")]
    pub cpu: f64,
    #[serde(default = "Resources::default_memory")]
    pub memory: Size,
    #[serde(default = "Resources::default_pids")]
    pub pids: u32,
}

impl Resources {
    fn default_cpu() -> f64 {
        1.0
    }
    fn default_memory() -> Size {
        Size(2 << 30)
    }
    fn default_pids() -> u32 {
        1024
    }
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu: Self::default_cpu(),
            memory: Self::default_memory(),
            pids: Self::default_pids(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Liveness {
    #[serde(default = "Liveness::default_heartbeat_timeout")]
    pub heartbeat_timeout: Dur,
    #[serde(default = "Liveness::default_progress_timeout")]
    pub progress_timeout: Dur,
    #[serde(default = "Liveness::default_startup_grace")]
    pub startup_grace: Dur,
    #[serde(default)]
    pub on_stall: OnStall,
    #[serde(default = "Liveness::default_signals")]
    pub signals: Vec<LivenessSignal>,
}

impl Liveness {
    fn default_heartbeat_timeout() -> Dur {
        Dur(Duration::from_secs(300))
    }
    fn default_progress_timeout() -> Dur {
        Dur(Duration::from_secs(1800))
    }
    fn default_startup_grace() -> Dur {
        Dur(Duration::from_secs(120))
    }
    fn default_signals() -> Vec<LivenessSignal> {
        vec![
            LivenessSignal::Heartbeat,
            LivenessSignal::Output,
            LivenessSignal::Cpu,
        ]
    }
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            heartbeat_timeout: Self::default_heartbeat_timeout(),
            progress_timeout: Self::default_progress_timeout(),
            startup_grace: Self::default_startup_grace(),
            on_stall: OnStall::default(),
            signals: Self::default_signals(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum OnStall {
    #[default]
    Restart,
    Kill,
    Report,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum LivenessSignal {
    Heartbeat,
    Output,
    Cpu,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    #[serde(default)]
    pub network: Network,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default)]
    pub writable: Vec<String>,
    #[serde(default)]
    pub hidden: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum Network {
    #[default]
    Host,
    None,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stop {
    #[serde(default = "Stop::default_signal")]
    pub signal: StopSignal,
    #[serde(default = "Stop::default_timeout")]
    pub timeout: Dur,
}

impl Stop {
    fn default_signal() -> StopSignal {
        StopSignal(libc::SIGTERM)
    }
    fn default_timeout() -> Dur {
        Dur(Duration::from_secs(30))
    }
}

impl Default for Stop {
    fn default() -> Self {
        Stop {
            signal: Self::default_signal(),
            timeout: Self::default_timeout(),
        }
    }
}

/// A duration written as a string with a unit: `"250ms"`, `"90s"`, `"5m"`, `"1h"`, `"1d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

/// A size in bytes written as a string: `"512M"`, `"4G"`, `"100K"`, `"1024"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

/// A signal number, written by name: `"SIGTERM"` or `"TERM"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignal(pub i32);

/// Parse `"250ms"`, `"90s"`, `"5m"`, `"1h"`, `"1d"`, or a sum such as `"1h30m"` (a bare `"0"` is
/// zero). Units: `ms`, `s`, `m` (or `min`), `h`, `d`; the number may have a fraction (`"1.5s"`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("duration is empty: write e.g. \"90s\", \"5m\" or \"250ms\"".to_string());
    }
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.starts_with('-') {
        return Err(format!(
            "duration {text:?} is negative: write a positive one such as \"90s\""
        ));
    }
    let mut rest = t;
    let mut millis = 0.0_f64;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(split);
        if number.is_empty() {
            return Err(format!(
                "duration {text:?} does not start with a number: write e.g. \"90s\", \"5m\" or \"250ms\""
            ));
        }
        let value: f64 = number
            .parse()
            .map_err(|_| format!("duration {text:?} has a malformed number {number:?}"))?;
        let tail = tail.trim_start();
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(tail.len());
        let (unit, after) = tail.split_at(unit_len);
        let millis_per_unit = match unit {
            "" => {
                return Err(format!(
                    "duration {text:?} has no unit: write e.g. \"{number}s\" or \"{number}m\" (units: ms, s, m, h, d)"
                ))
            }
            "ms" => 1.0,
            "s" => 1_000.0,
            "m" | "min" => 60_000.0,
            "h" => 3_600_000.0,
            "d" => 86_400_000.0,
            _ => {
                return Err(format!(
                    "duration {text:?} has unknown unit {unit:?}: use ms, s, m, h or d"
                ))
            }
        };
        millis += value * millis_per_unit;
        rest = after.trim_start();
    }
    if !millis.is_finite() || millis > 1e15 {
        return Err(format!("duration {text:?} is too large"));
    }
    Ok(Duration::from_micros((millis * 1000.0).round() as u64))
}

/// A duration as a unit file would write it: `"500ms"`, `"90s"`, `"5m"`, `"1h"`, `"2d"`.
/// `parse_duration(&format_duration(d))` gives back `d` (to the microsecond).
pub fn format_duration(duration: Duration) -> String {
    let micros = duration.as_micros();
    if micros == 0 {
        return "0s".to_string();
    }
    if micros % 1000 != 0 {
        return format!("{}ms", micros as f64 / 1000.0);
    }
    let millis = micros / 1000;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if millis % size == 0 {
            return format!("{}{unit}", millis / size);
        }
    }
    format!("{millis}ms")
}

/// Parse `"512M"`, `"4G"`, `"100K"`, `"1T"`, `"4096"` (binary multiples; `"4GiB"`, `"4GB"` and
/// lowercase `"512m"` are also accepted, and a fraction such as `"1.5G"`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("size is empty: write e.g. \"512M\" or \"4G\"".to_string());
    }
    if t.starts_with('-') {
        return Err(format!(
            "size {text:?} is negative: write a positive one such as \"512M\""
        ));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    if number.is_empty() {
        return Err(format!(
            "size {text:?} does not start with a number: write e.g. \"512M\" or \"4G\""
        ));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("size {text:?} has a malformed number {number:?}"))?;
    let unit = unit.trim_start();
    let bare = unit.strip_suffix('B').unwrap_or(unit);
    let bare = bare.strip_suffix('i').unwrap_or(bare);
    let multiplier: u64 = match bare.to_ascii_uppercase().as_str() {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => {
            return Err(format!(
                "size {text:?} has unknown unit {unit:?}: use K, M, G or T (e.g. \"512M\")"
            ))
        }
    };
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size {text:?} is too large"));
    }
    Ok(bytes.round() as u64)
}

/// A size as a unit file would write it: `"512M"`, `"4G"`, `"1536K"`, `"1000"`.
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Signal number from `"SIGTERM"` / `"TERM"` (any case).
pub fn parse_signal(text: &str) -> Result<i32, String> {
    use std::str::FromStr;
    let upper = text.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let full = format!("SIG{bare}");
    if !bare.is_empty() {
        if let Ok(signal) = nix::sys::signal::Signal::from_str(&full) {
            return Ok(signal as i32);
        }
    }
    let names: Vec<&str> = nix::sys::signal::Signal::iterator()
        .map(|s| s.as_str())
        .collect();
    let hint = match did_you_mean(&full, &names) {
        Some(name) => format!(" (did you mean {name:?}?)"),
        None => String::new(),
    };
    Err(format!(
        "unknown signal {text:?}{hint}: use a name such as SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or SIGKILL"
    ))
}

/// Signal name for display (`SIGTERM`), or `SIG<n>` when unknown.
pub fn signal_name(number: i32) -> String {
    match nix::sys::signal::Signal::try_from(number) {
        Ok(signal) => signal.as_str().to_string(),
        Err(_) => format!("SIG{number}"),
    }
}

/// Linux capability names, indexed by number (see capabilities(7)).
const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// Capability number from `"CAP_NET_ADMIN"` / `"NET_ADMIN"` (any case), as the sandbox grants it.
pub fn parse_capability(text: &str) -> Result<u8, String> {
    let upper = text.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    if let Some(number) = CAPABILITIES.iter().position(|name| *name == bare) {
        return Ok(number as u8);
    }
    let hint = match did_you_mean(bare, &CAPABILITIES) {
        Some(name) => format!(" (did you mean \"CAP_{name}\"?)"),
        None => String::new(),
    };
    Err(format!(
        "unknown capability {text:?}{hint}: write a name from capabilities(7) such as \"CAP_NET_BIND_SERVICE\""
    ))
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_size(&text)
            .map(Size)
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for StopSignal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_signal(&text)
            .map(StopSignal)
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let argv = Vec::<String>::deserialize(deserializer)?;
        match check_argv(&argv) {
            Ok(()) => Ok(Command(argv)),
            Err((_, message)) => Err(serde::de::Error::custom(message)),
        }
    }
}

/// `Err((index of the bad argument, message))` for an argv keel cannot exec.
fn check_argv(argv: &[String]) -> Result<(), (usize, String)> {
    match argv.first() {
        None => Err((
            0,
            "the list is empty: give the program and its arguments, e.g. [\"claude\", \"-p\", \"...\"]"
                .to_string(),
        )),
        Some(program) if program.trim().is_empty() => Err((
            0,
            "the program (the first element) is empty: give the program and its arguments, e.g. [\"claude\", \"-p\", \"...\"]"
                .to_string(),
        )),
        _ => match argv.iter().position(|arg| arg.contains('\0')) {
            Some(index) => Err((index, format!("argument {index} contains a NUL byte"))),
            None => Ok(()),
        },
    }
}

/// An error in a unit file, with the position an editor can jump to.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitError {
    pub file: PathBuf,
    /// 1-based; 0 when the error is about the file as a whole (its name, or reading it).
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line.max(1),
            self.col.max(1),
            self.message
        )
    }
}

impl std::error::Error for UnitError {}

/// A unit name is the file stem: `[a-z0-9][a-z0-9._-]{0,62}`.
pub fn validate_name(name: &str) -> Result<(), String> {
    let bad_char = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(*c)));
    let reason = if name.is_empty() {
        "it is empty".to_string()
    } else if let Some(c) = bad_char {
        if c.is_ascii_uppercase() {
            format!("it contains the uppercase letter {c:?}: use lowercase")
        } else if c.is_whitespace() {
            "it contains a space: use \"-\" or \"_\" instead".to_string()
        } else {
            format!("it contains {c:?}")
        }
    } else if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        let first = name.chars().next().unwrap_or_default();
        format!("it starts with {first:?}: start with a lowercase letter or a digit")
    } else if name.len() > 63 {
        format!("it is {} characters long: the limit is 63", name.len())
    } else {
        return Ok(());
    };
    Err(format!(
        "unit name {name:?} is invalid: {reason} (the file name without .ron must match [a-z0-9][a-z0-9._-]{{0,62}})"
    ))
}

/// The unit name of a unit file path (`units/fix-tests.ron` → `fix-tests`).
pub fn unit_name_of(path: &Path) -> Option<String> {
    if path.extension()? != "ron" {
        return None;
    }
    Some(path.file_stem()?.to_str()?.to_string())
}

/// A unit file larger than this is refused unread: a unit is a few lines of RON.
pub const MAX_UNIT_FILE_SIZE: u64 = 1 << 20;

/// Parse a unit's text and validate it. `file` is only used in error messages. On error, the
/// first problem in file order is returned (see [`check_unit`] for all of them).
pub fn parse_unit(file: &Path, text: &str) -> Result<Unit, UnitError> {
    check_unit(file, text).map_err(|errors| {
        errors
            .into_iter()
            .next()
            .expect("check_unit reports at least one error")
    })
}

/// Parse a unit's text and validate it, reporting every problem found, in file order. A syntax
/// or type error stops parsing, so it is reported alone; semantic problems (a backoff factor
/// below 1, a relative path, …) are all reported. A leading byte-order mark is ignored.
pub fn check_unit(file: &Path, text: &str) -> Result<Unit, Vec<UnitError>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let error_at = |offset: usize, message: String| {
        let (line, col) = line_col(text, offset);
        UnitError {
            file: file.to_path_buf(),
            line,
            col,
            message,
        }
    };
    let parsed: Result<Unit, _> = ron::from_str(text);
    let map = SourceMap::new(text);
    let unit = match parsed {
        Ok(unit) => unit,
        Err(error) => {
            let (offset, message) = map.explain(&error);
            return Err(vec![error_at(offset, message)]);
        }
    };
    let mut found = map.duplicate_keys();
    for problem in validate_unit(&unit) {
        let offset = std::iter::once(&problem.path)
            .chain(&problem.also)
            .find_map(|path| map.find(path))
            .unwrap_or_else(|| map.locate(&problem.path));
        found.push((offset, problem.to_string()));
    }
    if found.is_empty() {
        return Ok(unit);
    }
    found.sort_by_key(|(offset, _)| *offset);
    // Offsets in order: one pass over the text finds every line and column.
    let (mut line, mut col, mut at) = (1, 1, 0);
    Err(found
        .into_iter()
        .map(|(offset, message)| {
            for c in text[at..offset.min(text.len())].chars() {
                if c == '\n' {
                    (line, col) = (line + 1, 1);
                } else {
                    col += 1;
                }
            }
            at = offset.min(text.len());
            UnitError {
                file: file.to_path_buf(),
                line,
                col,
                message,
            }
        })
        .collect())
}

/// Read, name-check and parse a unit file: `(name, unit, text)`.
pub fn load_unit_file(path: &Path) -> Result<(String, Unit, String), UnitError> {
    use std::io::Read;
    let whole_file = |message: String| UnitError {
        file: path.to_path_buf(),
        line: 0,
        col: 0,
        message,
    };
    let name = unit_name_of(path).ok_or_else(|| {
        whole_file(
            "not a unit file: unit files are named NAME.ron, NAME matching [a-z0-9][a-z0-9._-]{0,62}"
                .to_string(),
        )
    })?;
    validate_name(&name).map_err(whole_file)?;
    // Checked before opening: opening a FIFO would block.
    let metadata = std::fs::metadata(path).map_err(|e| whole_file(format!("cannot read: {e}")))?;
    if metadata.is_dir() {
        return Err(whole_file(
            "is a directory: a unit is a file NAME.ron".to_string(),
        ));
    }
    if !metadata.is_file() {
        return Err(whole_file(
            "is not a regular file: a unit is a file NAME.ron".to_string(),
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| whole_file(format!("cannot read: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_UNIT_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| whole_file(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_UNIT_FILE_SIZE {
        return Err(whole_file(format!(
            "is larger than {}: a unit file is a few lines of RON",
            format_size(MAX_UNIT_FILE_SIZE)
        )));
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => {
            let valid = error.utf8_error().valid_up_to();
            let bytes = error.into_bytes();
            let prefix = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
            let (line, col) = line_col(prefix, valid);
            return Err(UnitError {
                file: path.to_path_buf(),
                line,
                col,
                message: format!(
                    "invalid UTF-8 (byte 0x{:02x}): save the file as UTF-8",
                    bytes[valid]
                ),
            });
        }
    };
    let unit = parse_unit(path, &text)?;
    Ok((name, unit, text))
}

// ----------------------------------------------------------------------------------------------
// Semantic validation: a pure function of the parsed unit.

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathSeg {
    /// A struct field: `backoff`, `factor`.
    Field(String),
    /// A list element: `signals[2]`.
    Index(usize),
    /// A map entry, by key: `env["RUST_LOG"]`.
    Key(String),
}

/// Where a value sits in a unit: `backoff.factor`, `env["KEEL_X"]`, `liveness.signals[1]`.
/// The empty path is the unit itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FieldPath(pub Vec<PathSeg>);

impl FieldPath {
    pub fn field(&self, name: &str) -> FieldPath {
        self.with(PathSeg::Field(name.to_string()))
    }
    pub fn index(&self, index: usize) -> FieldPath {
        self.with(PathSeg::Index(index))
    }
    pub fn key(&self, key: &str) -> FieldPath {
        self.with(PathSeg::Key(key.to_string()))
    }
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
    fn with(&self, seg: PathSeg) -> FieldPath {
        let mut path = self.clone();
        path.0.push(seg);
        path
    }
    /// The path with indices and keys generalised (`liveness.signals[]`, `env{}`), as the
    /// schema of hints knows it.
    fn schema_key(&self) -> String {
        let mut key = String::new();
        for seg in &self.0 {
            match seg {
                PathSeg::Field(name) => {
                    if !key.is_empty() {
                        key.push('.');
                    }
                    key.push_str(name);
                }
                PathSeg::Index(_) => key.push_str("[]"),
                PathSeg::Key(_) => key.push_str("{}"),
            }
        }
        key
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                PathSeg::Field(name) if i == 0 => write!(f, "{name}")?,
                PathSeg::Field(name) => write!(f, ".{name}")?,
                PathSeg::Index(index) => write!(f, "[{index}]")?,
                PathSeg::Key(key) => write!(f, "[{key:?}]")?,
            }
        }
        Ok(())
    }
}

/// A unit that parsed but cannot be run as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: FieldPath,
    /// What is wrong and how to fix it; reads after the path (`backoff.factor: 0.5 is below 1.0…`).
    pub message: String,
    /// Other fields involved, pointed at when `path` is not written in the file (a default).
    pub also: Vec<FieldPath>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_root() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The smallest memory reservation a unit may ask for.
pub const MIN_MEMORY: u64 = 4 << 20;

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, path: FieldPath, message: String) {
        self.add_also(path, Vec::new(), message);
    }

    fn add_also(&mut self, path: FieldPath, also: Vec<FieldPath>, message: String) {
        self.0.push(Problem {
            path,
            message,
            also,
        });
    }
}

/// Every semantic problem of a parsed unit, in field order (empty: the unit is valid).
pub fn validate_unit(unit: &Unit) -> Vec<Problem> {
    let mut problems = Problems::default();
    let root = FieldPath::default();

    if let Err((index, message)) = check_argv(&unit.command.0) {
        problems.add(root.field("command").index(index), message);
    }
    if let Some(resume) = &unit.resume_command {
        if let Err((index, message)) = check_argv(&resume.0) {
            problems.add(root.field("resume_command").index(index), message);
        }
    }
    for (key, value) in &unit.env {
        let at = root.field("env").key(key);
        if let Err(message) = check_env_key(key) {
            problems.add(at.clone(), message);
        }
        if value.contains('\0') {
            problems.add(at, "the value contains a NUL byte".to_string());
        }
    }
    if let Some(repo) = &unit.repo {
        let at = root.field("repo");
        if let Err(message) = check_absolute_path(&repo.path, "/srv/repos/app") {
            problems.add(at.field("path"), message);
        }
        if repo.base.trim().is_empty() {
            problems.add(
                at.field("base"),
                "is empty: name the branch, tag or commit to start from, e.g. \"main\"".to_string(),
            );
        } else if repo
            .base
            .contains(|c: char| c.is_whitespace() || c.is_control())
        {
            problems.add(
                at.field("base"),
                format!("{:?} contains a space or control character: name a branch, tag or commit, e.g. \"main\"", repo.base),
            );
        }
        if let Some(branch) = &repo.branch {
            if let Err(message) = check_branch_name(branch) {
                problems.add(at.field("branch"), message);
            }
        }
    }

    let backoff = &unit.backoff;
    let at = root.field("backoff");
    if !backoff.factor.is_finite() {
        problems.add(
            at.field("factor"),
            format!("{} is not a finite number: use e.g. 2.0", backoff.factor),
        );
    } else if backoff.factor < 1.0 {
        problems.add(
            at.field("factor"),
            format!(
                "{} is below 1.0, so delays would shrink: use 1.0 for a fixed delay or 2.0 to double it after each failure",
                backoff.factor
            ),
        );
    }
    if backoff.initial.0.is_zero() {
        problems.add(
            at.field("initial"),
            "is 0: restarts need a pause between them; use e.g. \"1s\"".to_string(),
        );
    } else if backoff.initial > backoff.max {
        problems.add_also(
            at.field("initial"),
            vec![at.field("max")],
            format!(
                "\"{}\" is longer than backoff.max (\"{}\"): make initial <= max",
                format_duration(backoff.initial.0),
                format_duration(backoff.max.0)
            ),
        );
    }

    let at = root.field("restart_limit");
    if unit.restart_limit.count == 0 {
        problems.add(
            at.field("count"),
            "is 0: allow at least 1 restart (to never restart, write restart: Never)".to_string(),
        );
    }
    if unit.restart_limit.within.0.is_zero() {
        problems.add(
            at.field("within"),
            "is 0: give the window in which restarts are counted, e.g. \"1h\"".to_string(),
        );
    }

    let resources = &unit.resources;
    let at = root.field("resources");
    if !(resources.cpu.is_finite() && resources.cpu > 0.0) {
        problems.add(
            at.field("cpu"),
            format!(
                "{} is not a positive number of CPU cores: use e.g. 0.5 or 2.0",
                resources.cpu
            ),
        );
    }
    if resources.memory.0 < MIN_MEMORY {
        problems.add(
            at.field("memory"),
            format!(
                "\"{}\" is below the minimum of \"4M\": use e.g. \"512M\" or \"4G\"",
                format_size(resources.memory.0)
            ),
        );
    }
    if resources.pids == 0 {
        problems.add(
            at.field("pids"),
            "is 0: the agent itself is a process; use e.g. 1024".to_string(),
        );
    }

    let liveness = &unit.liveness;
    let at = root.field("liveness");
    for (name, timeout) in [
        ("heartbeat_timeout", liveness.heartbeat_timeout),
        ("progress_timeout", liveness.progress_timeout),
    ] {
        if timeout.0.is_zero() {
            problems.add(
                at.field(name),
                "is 0: every task would be judged stalled at once; use e.g. \"5m\"".to_string(),
            );
        }
    }
    if liveness.signals.is_empty() {
        problems.add(
            at.field("signals"),
            "is empty: list the evidence that counts as working, e.g. [Heartbeat, Output, Cpu]"
                .to_string(),
        );
    }
    let mut seen = Vec::new(); // at most one of each variant
    for (index, signal) in liveness.signals.iter().enumerate() {
        if seen.contains(signal) {
            problems.add(
                at.field("signals").index(index),
                format!("{signal:?} is listed twice: remove one"),
            );
        } else {
            seen.push(*signal);
        }
    }

    let at = root.field("workdir");
    if let Err(message) = check_absolute_path(&unit.workdir, "/work") {
        problems.add(at, message);
    } else if is_root_dir(&unit.workdir) {
        problems.add(
            at,
            "is the root directory: the checkout needs a directory of its own, e.g. \"/work\""
                .to_string(),
        );
    }

    let sandbox = &unit.sandbox;
    let at = root.field("sandbox");
    if let Some(user) = &sandbox.user {
        if let Err(message) = check_user(user) {
            problems.add(at.field("user"), message);
        }
    }
    for (index, capability) in sandbox.capabilities.iter().enumerate() {
        if let Err(message) = parse_capability(capability) {
            problems.add(at.field("capabilities").index(index), message);
        }
    }
    for (index, path) in sandbox.writable.iter().enumerate() {
        if let Err(message) = check_absolute_path(path, "/data") {
            problems.add(at.field("writable").index(index), message);
        }
    }
    for (index, path) in sandbox.hidden.iter().enumerate() {
        if let Err(message) = check_absolute_path(path, "/home") {
            problems.add(at.field("hidden").index(index), message);
        } else if is_root_dir(path) {
            problems.add(
                at.field("hidden").index(index),
                "is the root directory: hiding it would hide everything, the agent too".to_string(),
            );
        }
    }

    if unit.stop.timeout.0.is_zero() {
        problems.add(
            root.field("stop").field("timeout"),
            "is 0: give the agent time to exit cleanly before SIGKILL, e.g. \"30s\"".to_string(),
        );
    }
    problems.0
}

fn check_env_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        Err("the variable name is empty: write {\"NAME\": \"value\"}".to_string())
    } else if key.contains('=') {
        Err("a variable name cannot contain \"=\": write {\"NAME\": \"value\"}".to_string())
    } else if key.contains('\0') {
        Err("the variable name contains a NUL byte".to_string())
    } else if key.starts_with("KEEL_") {
        Err("the KEEL_ prefix is reserved: keel sets KEEL_UNIT, KEEL_ATTEMPT, KEEL_PROGRESS and the other KEEL_* variables itself; choose another name".to_string())
    } else {
        Ok(())
    }
}

fn check_absolute_path(path: &str, example: &str) -> Result<(), String> {
    if path.is_empty() {
        Err(format!(
            "is empty: write an absolute path such as {example:?}"
        ))
    } else if path.contains('\0') {
        Err(format!("{path:?} contains a NUL byte"))
    } else if !path.starts_with('/') {
        Err(format!(
            "{path:?} is relative: write an absolute path such as {example:?}"
        ))
    } else if Path::new(path)
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        Err(format!(
            "{path:?} contains \"..\": write the path without it"
        ))
    } else {
        Ok(())
    }
}

fn is_root_dir(path: &str) -> bool {
    Path::new(path).components().all(|c| {
        matches!(
            c,
            std::path::Component::RootDir | std::path::Component::CurDir
        )
    })
}

/// `"uid:gid"` (numbers) or a user name as useradd accepts it.
fn check_user(user: &str) -> Result<(), String> {
    let is_id = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit())
            && s.parse::<u32>().is_ok_and(|id| id != u32::MAX)
    };
    let is_user_name = |s: &str| {
        let name = s.strip_suffix('$').unwrap_or(s);
        !name.is_empty()
            && s.len() <= 32
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    match user.split_once(':') {
        Some((uid, gid)) if is_id(uid) && is_id(gid) => Ok(()),
        Some(_) => Err(format!(
            "{user:?} is not uid:gid: write two numbers, e.g. \"1000:1000\""
        )),
        None if is_user_name(user) => Ok(()),
        None => Err(format!(
            "{user:?} is neither uid:gid (e.g. \"1000:1000\") nor a user name (lowercase letters, digits, \"_\" and \"-\", at most 32 characters)"
        )),
    }
}

/// The rules of git check-ref-format, for a branch name.
fn check_branch_name(branch: &str) -> Result<(), String> {
    let reason = if branch.is_empty() {
        "it is empty"
    } else if branch.starts_with('-') {
        "it starts with \"-\""
    } else if branch.starts_with('/') || branch.ends_with('/') || branch.contains("//") {
        "it has an empty path component"
    } else if branch.ends_with('.') || branch.contains("..") {
        "it contains \"..\" or ends with \".\""
    } else if branch == "@" || branch.contains("@{") {
        "it is \"@\" or contains \"@{\""
    } else if branch
        .contains(|c: char| c.is_whitespace() || c.is_control() || "~^:?*[\\".contains(c))
    {
        "it contains a space, a control character or one of ~ ^ : ? * [ \\"
    } else if branch
        .split('/')
        .any(|part| part.starts_with('.') || part.ends_with(".lock"))
    {
        "a component starts with \".\" or ends with \".lock\""
    } else {
        return Ok(());
    };
    Err(format!(
        "{branch:?} is not a valid git branch name: {reason}"
    ))
}

/// The candidate closest to `word` if it is plausibly a typo of it.
fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let word = squash(word);
    if word.is_empty() {
        return None;
    }
    candidates
        .iter()
        .filter_map(|candidate| {
            let squashed = squash(candidate);
            let distance = edit_distance(&word, &squashed);
            let close = distance <= (squashed.chars().count() / 4).max(1)
                || (word.len() >= 4 && squashed.starts_with(&word));
            close.then_some((distance, *candidate))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Edit distance counting a swap of two neighbours as one edit (optimal string alignment).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// "A, B or C"
fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [only] => only.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

// ----------------------------------------------------------------------------------------------
// Positions: ron reports where its cursor was; an operator needs the offending token. A small
// lexer and a tolerant structural scan of the text map field paths to positions and back.

const DURATION_HINT: &str = "a duration such as \"90s\", \"5m\" or \"250ms\"";

/// What each field holds, for messages ("expected …"). Keys as [`FieldPath::schema_key`].
const SCHEMA: &[(&str, &str)] = &[
    ("", "a unit, Unit(command: [\"program\", \"arg\"], ...)"),
    (
        "command",
        "a list of strings such as [\"claude\", \"-p\", \"...\"]",
    ),
    ("command[]", "a string"),
    (
        "resume_command",
        "None or Some([\"program\", \"arg\", ...])",
    ),
    ("resume_command[]", "a string"),
    ("env", "a map of strings such as {\"RUST_LOG\": \"info\"}"),
    ("env{}", "a string"),
    (
        "repo",
        "None or Some(Repo(path: \"/srv/repos/app\", base: \"main\"))",
    ),
    ("repo.path", "an absolute path such as \"/srv/repos/app\""),
    ("repo.base", "a branch, tag or commit such as \"main\""),
    ("repo.branch", "None or Some(\"branch-name\")"),
    ("restart", "Always, OnFailure or Never"),
    (
        "backoff",
        "Backoff(initial: \"1s\", max: \"5m\", factor: 2.0, reset_after: \"10m\")",
    ),
    ("backoff.initial", DURATION_HINT),
    ("backoff.max", DURATION_HINT),
    ("backoff.factor", "a number such as 2.0"),
    ("backoff.reset_after", DURATION_HINT),
    ("restart_limit", "RestartLimit(count: 5, within: \"1h\")"),
    ("restart_limit.count", "a whole number such as 5"),
    ("restart_limit.within", DURATION_HINT),
    (
        "resources",
        "Resources(cpu: 2.0, memory: \"4G\", pids: 1024)",
    ),
    ("resources.cpu", "a number of CPU cores such as 2.0"),
    ("resources.memory", "a size such as \"512M\" or \"4G\""),
    ("resources.pids", "a whole number such as 1024"),
    ("priority", "a whole number such as 0, 10 or -5"),
    (
        "liveness",
        "Liveness(heartbeat_timeout: \"5m\", progress_timeout: \"30m\", ...)",
    ),
    ("liveness.heartbeat_timeout", DURATION_HINT),
    ("liveness.progress_timeout", DURATION_HINT),
    ("liveness.startup_grace", DURATION_HINT),
    ("liveness.on_stall", "Restart, Kill or Report"),
    (
        "liveness.signals",
        "a list such as [Heartbeat, Output, Cpu]",
    ),
    ("liveness.signals[]", "Heartbeat, Output or Cpu"),
    ("workdir", "an absolute path such as \"/work\""),
    (
        "sandbox",
        "Sandbox(network: Host, user: None, capabilities: [], writable: [], hidden: [])",
    ),
    ("sandbox.network", "Host or None"),
    ("sandbox.user", "None or Some(\"uid:gid\")"),
    (
        "sandbox.capabilities",
        "a list of strings such as [\"CAP_NET_BIND_SERVICE\"]",
    ),
    (
        "sandbox.capabilities[]",
        "a capability name such as \"CAP_NET_BIND_SERVICE\"",
    ),
    (
        "sandbox.writable",
        "a list of absolute paths such as [\"/data\"]",
    ),
    ("sandbox.writable[]", "an absolute path (a string)"),
    (
        "sandbox.hidden",
        "a list of absolute paths such as [\"/home\"]",
    ),
    ("sandbox.hidden[]", "an absolute path (a string)"),
    ("stop", "Stop(signal: \"SIGTERM\", timeout: \"30s\")"),
    ("stop.signal", "a signal name such as \"SIGTERM\""),
    ("stop.timeout", DURATION_HINT),
    ("essential", "true or false"),
];

fn schema_hint(path: &FieldPath) -> Option<&'static str> {
    let key = path.schema_key();
    SCHEMA
        .iter()
        .find(|(schema_key, _)| *schema_key == key)
        .map(|(_, hint)| *hint)
}

/// The nested struct a top-level field name belongs to, and how to open it
/// (`factor` → `backoff`, `Backoff(`).
fn nested_home(field: &str) -> Option<(&'static str, &'static str, &'static str)> {
    let (key, _) = SCHEMA
        .iter()
        .find(|(key, _)| key.split_once('.').is_some_and(|(_, name)| name == field))?;
    let (parent, _) = key.split_once('.')?;
    let (open, close) = match parent {
        "backoff" => ("Backoff(", ")"),
        "restart_limit" => ("RestartLimit(", ")"),
        "resources" => ("Resources(", ")"),
        "liveness" => ("Liveness(", ")"),
        "sandbox" => ("Sandbox(", ")"),
        "stop" => ("Stop(", ")"),
        "repo" => ("Some(Repo(", "))"),
        _ => return None,
    };
    Some((parent, open, close))
}

/// 1-based line and column (in characters, as ron counts) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = 1 + before.bytes().filter(|b| *b == b'\n').count();
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    (line, 1 + text[line_start..offset].chars().count())
}

/// The byte offset of a ron position (1-based line and column in characters).
fn offset_of(text: &str, position: ron::error::Position) -> usize {
    let mut start = 0;
    for _ in 1..position.line {
        match text[start..].find('\n') {
            Some(n) => start += n + 1,
            None => return text.len(),
        }
    }
    text[start..]
        .char_indices()
        .nth(position.col.saturating_sub(1))
        .map_or(text.len(), |(n, _)| start + n)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokKind {
    Ident,
    Str,
    Char,
    Num,
    Punct(char),
    Comment,
}

#[derive(Debug, Clone, Copy)]
struct Tok {
    kind: TokKind,
    start: usize,
    end: usize,
}

fn is_ron_whitespace(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t'
            | '\n'
            | '\r'
            | '\x0B'
            | '\x0C'
            | '\u{85}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// Tokens of RON text, tolerant of anything: an unterminated string or comment runs to the end.
fn lex(text: &str) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        let start = i;
        let rest = &text[i..];
        let next = rest[c.len_utf8()..].chars().next();
        let kind = if is_ron_whitespace(c) {
            i += c.len_utf8();
            continue;
        } else if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
            TokKind::Comment
        } else if rest.starts_with("/*") {
            i += block_comment_len(rest);
            TokKind::Comment
        } else if let Some(len) = raw_string_len(rest) {
            i += len;
            TokKind::Str
        } else if c == '"' {
            i += quoted_len(rest, '"');
            TokKind::Str
        } else if c == 'b' && next == Some('"') {
            i += 1 + quoted_len(&rest[1..], '"');
            TokKind::Str
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            // A char literal is short ('a', '\n', '\u{1F600}'): look no further than that, so
            // that stray quotes cannot make the scan quadratic.
            let skip = usize::from(c == 'b');
            let mut window = (skip + 16).min(rest.len());
            while !rest.is_char_boundary(window) {
                window -= 1;
            }
            let len = quoted_len(&rest[skip..window], '\'');
            if rest[skip..skip + len].ends_with('\'') && len > 2 {
                i += skip + len;
                TokKind::Char
            } else {
                i += c.len_utf8();
                TokKind::Punct(c)
            }
        } else if c.is_ascii_digit()
            || (matches!(c, '+' | '-' | '.')
                && next.is_some_and(|n| n.is_ascii_digit() || n == '.' || n.is_alphabetic()))
        {
            i += c.len_utf8();
            let mut prev = c;
            while let Some(n) = text[i..].chars().next() {
                let exponent_sign = matches!(n, '+' | '-') && matches!(prev, 'e' | 'E');
                if !(n.is_alphanumeric() || n == '_' || n == '.' || exponent_sign) {
                    break;
                }
                i += n.len_utf8();
                prev = n;
            }
            TokKind::Num
        } else if c == '_' || c.is_alphabetic() {
            i += c.len_utf8();
            if c == 'r' && next == Some('#') {
                i += 1;
            }
            while let Some(n) = text[i..].chars().next() {
                if !(n.is_alphanumeric() || n == '_') {
                    break;
                }
                i += n.len_utf8();
            }
            TokKind::Ident
        } else {
            i += c.len_utf8();
            TokKind::Punct(c)
        };
        toks.push(Tok {
            kind,
            start,
            end: i,
        });
    }
    toks
}

/// Length of a (nested) block comment at the start of `text`.
fn block_comment_len(text: &str) -> usize {
    let mut depth = 0;
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with("/*") {
            depth += 1;
            i += 2;
        } else if text[i..].starts_with("*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += text[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    text.len()
}

/// Length of a quoted literal at the start of `text` (opening quote included), honouring
/// backslash escapes; to the end of `text` when unterminated.
fn quoted_len(text: &str, quote: char) -> usize {
    let mut chars = text.char_indices().skip(1);
    while let Some((n, c)) = chars.next() {
        if c == '\\' {
            chars.next();
        } else if c == quote {
            return n + c.len_utf8();
        }
    }
    text.len()
}

/// Length of a raw string (`r"…"`, `r#"…"#`, `br"…"`) at the start of `text`, if there is one.
fn raw_string_len(text: &str) -> Option<usize> {
    let after_b = text.strip_prefix('b').unwrap_or(text);
    let after_r = after_b.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    let body = after_r[hashes..].strip_prefix('"')?;
    let prefix = text.len() - body.len();
    let closing = format!("\"{}", "#".repeat(hashes));
    Some(match body.find(&closing) {
        Some(n) => prefix + n + closing.len(),
        None => text.len(),
    })
}

/// The value of a string token (for map keys), or `None` when it cannot be decoded simply.
fn decode_string(token: &str) -> Option<String> {
    if let Some(body) = token
        .strip_prefix('r')
        .map(|t| t.trim_matches('#'))
        .and_then(|t| t.strip_prefix('"'))
        .and_then(|t| t.strip_suffix('"'))
    {
        return Some(body.to_string());
    }
    let body = token.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            '0' => out.push('\0'),
            'u' => {
                let hex: String = chars.by_ref().take_while(|c| *c != '}').collect();
                let code = u32::from_str_radix(hex.trim_start_matches('{'), 16).ok()?;
                out.push(char::from_u32(code)?);
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// A value found in the text: where its field name (or map key) and its value are.
#[derive(Debug, Clone)]
struct Node {
    /// Its field path, as an id in [`Paths`].
    path: usize,
    key: Option<usize>,
    start: usize,
    end: usize,
}

/// Field paths, interned: each is its parent's id and one more step, so that memory stays
/// linear in the size of the text however deep the values nest. Id 0 is the unit itself.
#[derive(Default)]
struct Paths {
    steps: Vec<(usize, PathSeg)>,
    ids: std::collections::HashMap<(usize, PathSeg), usize>,
}

impl Paths {
    const ROOT: usize = 0;

    fn child(&mut self, parent: usize, seg: PathSeg) -> usize {
        let next = self.steps.len() + 1;
        let id = *self.ids.entry((parent, seg.clone())).or_insert(next);
        if id == next {
            self.steps.push((parent, seg));
        }
        id
    }

    fn id_of(&self, path: &FieldPath) -> Option<usize> {
        path.0.iter().try_fold(Self::ROOT, |parent, seg| {
            self.ids.get(&(parent, seg.clone())).copied()
        })
    }

    fn path(&self, mut id: usize) -> FieldPath {
        let mut segs = Vec::new();
        while id != Self::ROOT {
            let (parent, seg) = &self.steps[id - 1];
            segs.push(seg.clone());
            id = *parent;
        }
        segs.reverse();
        FieldPath(segs)
    }

    fn last(&self, id: usize) -> Option<&PathSeg> {
        id.checked_sub(1).map(|i| &self.steps[i].1)
    }
}

/// Deeper than any unit goes; the scan skips what lies below.
const MAX_SCAN_DEPTH: usize = 32;

/// Walks the tokens as ron would, recording a [`Node`] for every value; never fails.
struct Scanner<'a> {
    text: &'a str,
    toks: &'a [Tok],
    i: usize,
    nodes: Vec<Node>,
    paths: Paths,
}

impl Scanner<'_> {
    fn kind(&self, ahead: usize) -> Option<TokKind> {
        self.toks.get(self.i + ahead).map(|t| t.kind)
    }

    fn at(&self, c: char) -> bool {
        self.kind(0) == Some(TokKind::Punct(c))
    }

    fn text_of(&self, tok: Tok) -> &str {
        &self.text[tok.start..tok.end]
    }

    /// Skips one token, or a whole bracketed group.
    fn skip(&mut self) {
        let mut depth = 0usize;
        while let Some(kind) = self.kind(0) {
            self.i += 1;
            match kind {
                TokKind::Punct('(' | '[' | '{') => depth += 1,
                TokKind::Punct(')' | ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth == 0 {
                break;
            }
        }
    }

    fn value(&mut self, path: usize, key: Option<usize>, depth: usize) {
        let first = self.i;
        let start = self.toks.get(self.i).map_or(self.text.len(), |t| t.start);
        if depth > MAX_SCAN_DEPTH {
            self.skip();
        } else {
            match self.kind(0) {
                Some(TokKind::Punct('(')) => self.group(path, depth),
                Some(TokKind::Punct('[')) => self.list(path, depth),
                Some(TokKind::Punct('{')) => self.map(path, depth),
                Some(TokKind::Ident) => {
                    self.i += 1;
                    if self.at('(') {
                        self.group(path, depth);
                    }
                }
                Some(TokKind::Punct(',' | ')' | ']' | '}' | ':')) | None => {}
                Some(_) => self.i += 1,
            }
        }
        let end = if self.i > first {
            self.toks[self.i - 1].end
        } else {
            start
        };
        self.nodes.push(Node {
            path,
            key,
            start,
            end,
        });
    }

    /// Runs `element` for each comma-separated element up to `close`, making progress always.
    fn elements(&mut self, close: char, mut element: impl FnMut(&mut Self, usize)) {
        self.i += 1;
        let mut index = 0;
        while let Some(kind) = self.kind(0) {
            if kind == TokKind::Punct(close) {
                self.i += 1;
                return;
            }
            let before = self.i;
            element(self, index);
            index += 1;
            if self.at(',') {
                self.i += 1;
            } else if self.i == before {
                self.skip();
            }
        }
    }

    fn group(&mut self, path: usize, depth: usize) {
        let is_struct =
            self.kind(1) == Some(TokKind::Ident) && self.kind(2) == Some(TokKind::Punct(':'));
        self.elements(')', |scan, _| {
            if !is_struct {
                scan.value(path, None, depth + 1);
            } else if scan.kind(0) == Some(TokKind::Ident)
                && scan.kind(1) == Some(TokKind::Punct(':'))
            {
                let name_tok = scan.toks[scan.i];
                let name = scan.text_of(name_tok).trim_start_matches("r#").to_string();
                scan.i += 2;
                let field = scan.paths.child(path, PathSeg::Field(name));
                scan.value(field, Some(name_tok.start), depth + 1);
            } else {
                scan.skip();
            }
        });
    }

    fn list(&mut self, path: usize, depth: usize) {
        self.elements(']', |scan, index| {
            let element = scan.paths.child(path, PathSeg::Index(index));
            scan.value(element, None, depth + 1)
        });
    }

    fn map(&mut self, path: usize, depth: usize) {
        self.elements('}', |scan, _| {
            let Some(key_tok) = scan.toks.get(scan.i).copied() else {
                return;
            };
            if matches!(key_tok.kind, TokKind::Punct(_)) {
                scan.skip();
                return;
            }
            let text = scan.text_of(key_tok);
            let key = decode_string(text).unwrap_or_else(|| text.to_string());
            scan.i += 1;
            if scan.at(':') {
                scan.i += 1;
            }
            let entry = scan.paths.child(path, PathSeg::Key(key));
            scan.value(entry, Some(key_tok.start), depth + 1);
        });
    }
}

/// The text of a unit file, tokenized and mapped.
struct SourceMap<'a> {
    text: &'a str,
    /// Every token, comments included, in order.
    all: Vec<Tok>,
    /// The tokens ron parses (no comments), in order.
    toks: Vec<Tok>,
    nodes: Vec<Node>,
    paths: Paths,
    /// Where each path is written, by path id (see [`SourceMap::find`]).
    written: std::collections::HashMap<usize, usize>,
    /// `(closing bracket, its opening bracket)`, by token start.
    pairs: Vec<(usize, usize)>,
    /// The innermost bracket never closed.
    unclosed: Option<Tok>,
}

impl<'a> SourceMap<'a> {
    fn new(text: &'a str) -> Self {
        let all = lex(text);
        let toks: Vec<Tok> = all
            .iter()
            .copied()
            .filter(|t| t.kind != TokKind::Comment)
            .collect();
        let mut pairs = Vec::new();
        let mut open: Vec<Tok> = Vec::new();
        for tok in &toks {
            match tok.kind {
                TokKind::Punct('(' | '[' | '{') => open.push(*tok),
                TokKind::Punct(c @ (')' | ']' | '}')) => {
                    let opener = match c {
                        ')' => '(',
                        ']' => '[',
                        _ => '{',
                    };
                    if open
                        .last()
                        .is_some_and(|o| o.kind == TokKind::Punct(opener))
                    {
                        let o = open.pop().expect("checked");
                        pairs.push((tok.start, o.start));
                    }
                }
                _ => {}
            }
        }
        let mut scanner = Scanner {
            text,
            toks: &toks,
            i: 0,
            nodes: Vec::new(),
            paths: Paths::default(),
        };
        // `#![enable(...)]` attributes come before the value.
        while scanner.at('#') {
            scanner.i += 1;
            if scanner.at('!') {
                scanner.i += 1;
            }
            if scanner.at('[') {
                scanner.skip();
            }
        }
        scanner.value(Paths::ROOT, None, 0);
        let Scanner { nodes, paths, .. } = scanner;
        // The smallest value written for each path (`"x"` rather than `Some("x")`); a map
        // entry is found by its key.
        let mut best: std::collections::HashMap<usize, &Node> = std::collections::HashMap::new();
        for node in &nodes {
            let better = |old: &&Node| {
                (node.end - node.start, std::cmp::Reverse(node.start))
                    < (old.end - old.start, std::cmp::Reverse(old.start))
            };
            if best.get(&node.path).map_or(true, better) {
                best.insert(node.path, node);
            }
        }
        let written = best
            .into_iter()
            .map(|(path, node)| {
                let offset = match paths.last(path) {
                    Some(PathSeg::Key(_)) => node.key.unwrap_or(node.start),
                    _ => node.start,
                };
                (path, offset)
            })
            .collect();
        SourceMap {
            text,
            all,
            toks,
            nodes,
            paths,
            written,
            pairs,
            unclosed: open.last().copied(),
        }
    }

    /// The first parsed token at or after `offset` (the one containing it, if any).
    fn token_from(&self, offset: usize) -> Option<(usize, Tok)> {
        self.toks
            .iter()
            .copied()
            .enumerate()
            .find(|(_, t)| t.end > offset)
    }

    /// Where the value at `path` is written (its key for a map entry), if it is.
    fn find(&self, path: &FieldPath) -> Option<usize> {
        self.written.get(&self.paths.id_of(path)?).copied()
    }

    /// Where the value at `path` is, falling back to the nearest enclosing value written in the
    /// file (a default is not written), then to the start of the unit.
    fn locate(&self, path: &FieldPath) -> usize {
        let mut path = path.clone();
        loop {
            if let Some(offset) = self.find(&path) {
                return offset;
            }
            if path.0.pop().is_none() {
                return self.toks.first().map_or(0, |t| t.start);
            }
        }
    }

    /// The smallest value whose text contains `offset`.
    fn innermost(&self, offset: usize) -> Option<&Node> {
        self.nodes
            .iter()
            .filter(|n| {
                n.start <= offset && (offset < n.end || (n.start == n.end && n.start == offset))
            })
            .min_by_key(|n| {
                (
                    n.end - n.start,
                    std::cmp::Reverse(self.paths.path(n.path).0.len()),
                )
            })
    }

    /// The largest value starting exactly at `offset`.
    fn value_at(&self, offset: usize) -> Option<&Node> {
        self.nodes
            .iter()
            .filter(|n| n.start == offset && n.end > n.start)
            .max_by_key(|n| n.end)
    }

    /// A token for a message: punctuation quoted, anything else as written.
    fn token_text(&self, tok: Tok) -> String {
        match tok.kind {
            TokKind::Punct(c) => format!("\"{c}\""),
            _ => self.snippet(tok.start, tok.end),
        }
    }

    /// Source text for a message: whitespace collapsed, cut at 40 characters.
    fn snippet(&self, start: usize, end: usize) -> String {
        let flat = self.text[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if flat.chars().count() > 40 {
            format!("{}…", flat.chars().take(39).collect::<String>())
        } else {
            flat
        }
    }

    /// Map keys given twice (ron keeps the last silently): `(offset, message)`.
    fn duplicate_keys(&self) -> Vec<(usize, String)> {
        let mut entries: Vec<(usize, usize)> = self
            .nodes
            .iter()
            .filter(|n| matches!(self.paths.last(n.path), Some(PathSeg::Key(_))))
            .filter_map(|n| Some((n.key?, n.path)))
            .collect();
        entries.sort_unstable();
        let mut seen = std::collections::HashSet::new();
        let mut found = Vec::new();
        for (key, path) in entries {
            if !seen.insert(path) {
                found.push((
                    key,
                    format!(
                        "{}: this key is given twice: remove one (only the last would count)",
                        self.paths.path(path)
                    ),
                ));
            }
        }
        found
    }

    /// Turns a ron error into `(offset of the offending token, message for the operator)`.
    fn explain(&self, error: &ron::error::SpannedError) -> (usize, String) {
        use ron::error::Error as E;
        let code = &error.code;
        let span_start = offset_of(self.text, error.span.start);
        let span_end = offset_of(self.text, error.span.end).max(span_start);

        if let E::UnclosedBlockComment = code {
            let comment = self
                .all
                .iter()
                .rev()
                .find(|t| t.kind == TokKind::Comment && t.start <= span_start);
            return (
                comment.map_or(span_start, |t| t.start),
                "this comment is never closed: add \"*/\" (block comments nest: every \"/*\" needs its own \"*/\")"
                    .to_string(),
            );
        }
        if self.toks.is_empty() {
            return (
                0,
                "the file holds no unit: write at least Unit(command: [\"program\", \"arg\"])"
                    .to_string(),
            );
        }

        // ron's span is the last thing its cursor moved over: whitespace before the offending
        // token, the token itself, or (for "expected , or )" and the like) the token before it.
        let about_what_follows = matches!(
            code,
            E::ExpectedComma
                | E::ExpectedMapColon
                | E::ExpectedArrayEnd
                | E::ExpectedMapEnd
                | E::ExpectedStructLikeEnd
                | E::ExpectedOptionEnd
                | E::Eof
                | E::TrailingCharacters
        );
        let mut offset = span_start;
        let mut target = self.token_from(offset);
        if about_what_follows && span_start < span_end {
            if let Some((_, tok)) = target {
                if tok.end <= span_end {
                    offset = span_end;
                    target = self.token_from(offset);
                }
            }
        }
        let Some((index, tok)) = target else {
            return self.unexpected_end();
        };
        let found = self.token_text(tok);

        match code {
            E::Message(message) => match self.innermost(tok.start) {
                Some(node) => (node.start, with_path(&self.paths.path(node.path), message)),
                None => (tok.start, message.clone()),
            },
            E::NoSuchStructField {
                expected,
                found: field,
                outer,
            } => {
                let mut message = format!("unknown field {field:?}");
                if let Some(outer) = outer {
                    message += &format!(" in {outer}");
                }
                if let Some(suggestion) = did_you_mean(field, expected) {
                    message += &format!(" (did you mean {suggestion:?}?)");
                } else if outer.as_deref() == Some("Unit") {
                    if let Some((parent, open, close)) = nested_home(field) {
                        message += &format!(
                            " ({field:?} belongs inside {parent}: write {parent}: {open}{field}: ...{close})"
                        );
                    }
                }
                message += &format!("; valid fields are {}", expected.join(", "));
                (tok.start, message)
            }
            E::DuplicateStructField { field, outer } => (
                tok.start,
                format!(
                    "field {field:?} is given twice{}: remove one",
                    outer.as_ref().map(|o| format!(" in {o}")).unwrap_or_default()
                ),
            ),
            E::MissingStructField { field, outer } => {
                let mut at = tok.start;
                if tok.kind == TokKind::Punct(')') {
                    if let Some(&(_, open)) = self.pairs.iter().find(|(close, _)| *close == tok.start)
                    {
                        at = open;
                        let before = self.toks.iter().rev().find(|t| t.end <= open);
                        if let Some(name) = before.filter(|t| t.kind == TokKind::Ident) {
                            at = name.start;
                        }
                    }
                }
                let message = if *field == "command" && outer.as_deref() == Some("Unit") {
                    "missing field \"command\": a unit must say what to run, e.g. command: [\"claude\", \"-p\", \"Fix the flaky test\"]".to_string()
                } else {
                    let within = outer.as_ref().map(|o| format!(" in {o}")).unwrap_or_default();
                    let hint = self
                        .innermost(at)
                        .and_then(|node| schema_hint(&self.paths.path(node.path).field(field)))
                        .map(|hint| format!(": add {field} ({hint})"))
                        .unwrap_or_default();
                    format!("missing field {field:?}{within}{hint}")
                };
                (at, message)
            }
            E::NoSuchEnumVariant {
                expected,
                found: variant,
                ..
            } => {
                let mut message = format!("unknown value {variant}");
                if let Some(suggestion) = did_you_mean(variant, expected) {
                    message += &format!(" (did you mean {suggestion}?)");
                }
                message += &format!(": use {}", one_of(expected));
                match self.value_at(tok.start) {
                    Some(node) => (tok.start, with_path(&self.paths.path(node.path), &message)),
                    None => (tok.start, message),
                }
            }
            E::ExpectedDifferentStructName { expected, found } => {
                let is_call = self.toks.get(index + 1).map(|t| t.kind) == Some(TokKind::Punct('('));
                let message = if is_call {
                    format!("expected {expected}(...) here, found {found}(...)")
                } else {
                    format!("expected {expected}(...) here, found {found}: the fields go inside {expected}( ... )")
                };
                match self.value_at(tok.start) {
                    Some(node) => (tok.start, with_path(&self.paths.path(node.path), &message)),
                    None => (tok.start, message),
                }
            }
            E::ExpectedStringEnd => (
                tok.start,
                "this string is never closed: add the closing '\"'".to_string(),
            ),
            E::TrailingCharacters => (
                tok.start,
                format!("unexpected {found} after the end of the unit: a unit file holds exactly one Unit(...)"),
            ),
            E::ExpectedComma if tok.start < offset => self.type_error(code, tok.start, &found),
            E::ExpectedComma
                if matches!(tok.kind, TokKind::Punct('(' | '[' | '{'))
                    && index > 0
                    && self.toks[index - 1].end == tok.start
                    && self.toks[index - 1].kind == TokKind::Ident =>
            {
                let previous = self.toks[index - 1];
                self.type_error(code, previous.start, &self.token_text(previous))
            }
            E::ExpectedComma => (tok.start, format!("expected \",\" before {found}")),
            E::ExpectedMapColon => (tok.start, format!("expected \":\" before {found}")),
            E::ExpectedArrayEnd => (tok.start, format!("expected \",\" or \"]\" before {found}")),
            E::ExpectedMapEnd => (tok.start, format!("expected \",\" or \"}}\" before {found}")),
            E::ExpectedStructLikeEnd | E::ExpectedOptionEnd => {
                (tok.start, format!("expected \",\" or \")\" before {found}"))
            }
            E::Eof => self.unexpected_end(),
            E::UnexpectedChar(c) => (tok.start, format!("unexpected character {c:?}")),
            E::ExpectedArray
            | E::ExpectedBoolean
            | E::ExpectedChar
            | E::ExpectedFloat
            | E::ExpectedInteger
            | E::ExpectedOption
            | E::ExpectedMap
            | E::ExpectedStructLike
            | E::ExpectedNamedStructLike(_)
            | E::ExpectedUnit
            | E::ExpectedString
            | E::ExpectedByteString
            | E::ExpectedIdentifier
            | E::ExpectedStructName(_)
            | E::InvalidValueForType { .. }
            | E::ExpectedDifferentLength { .. }
            | E::IntegerOutOfBounds
            | E::InvalidIntegerDigit { .. }
            | E::FloatUnderscore
            | E::UnderscoreAtBeginning => self.type_error(code, tok.start, &found),
            other => (tok.start, format!("{}, found {found}", lowercase_first(&other.to_string()))),
        }
    }

    /// A value of the wrong type (or out of range) starting at `at`.
    fn type_error(&self, code: &ron::error::Error, at: usize, token: &str) -> (usize, String) {
        use ron::error::Error as E;
        let Some(node) = self.value_at(at) else {
            if let Some(entry) = self.nodes.iter().find(|n| {
                n.key == Some(at) && matches!(self.paths.last(n.path), Some(PathSeg::Key(_)))
            }) {
                let mut map = self.paths.path(entry.path);
                map.0.pop();
                let message = format!("map keys are strings: write \"{token}\", not {token}");
                return (at, with_path(&map, &message));
            }
            if let Some(empty) = self.nodes.iter().find(|n| n.start == at && n.end == at) {
                let path = self.paths.path(empty.path);
                if let Some(hint) = schema_hint(&path) {
                    let message = format!("expected {hint}, found {token}");
                    return (at, with_path(&path, &message));
                }
            }
            let expected = match code {
                E::ExpectedIdentifier => "expected a field name".to_string(),
                _ => lowercase_first(&code.to_string()),
            };
            return (at, format!("{expected}, found {token}"));
        };
        let found = self.snippet(node.start, node.end);
        let path = self.paths.path(node.path);
        let expected = schema_hint(&path).map_or_else(
            || lowercase_first(&code.to_string()).replacen("expected ", "", 1),
            str::to_string,
        );
        let message = match code {
            E::IntegerOutOfBounds => format!("{found} is out of range: expected {expected}"),
            E::ExpectedOption => format!(
                "expected {expected}, found {found}: an optional value is written Some(...) or None, here Some({found})"
            ),
            E::ExpectedIdentifier if found.starts_with('"') => {
                format!("expected {expected}, found {found}: write the name without quotes")
            }
            _ => format!("expected {expected}, found {found}"),
        };
        (node.start, with_path(&path, &message))
    }

    /// The text ends inside a bracket (or is otherwise cut short).
    fn unexpected_end(&self) -> (usize, String) {
        match self.unclosed {
            Some(open) => {
                let (c, close) = match open.kind {
                    TokKind::Punct('[') => ('[', ']'),
                    TokKind::Punct('{') => ('{', '}'),
                    _ => ('(', ')'),
                };
                (
                    open.start,
                    format!("this \"{c}\" is never closed: the file ends before its \"{close}\""),
                )
            }
            None => (
                self.toks.last().map_or(0, |t| t.end),
                "the file ends too early".to_string(),
            ),
        }
    }
}

fn with_path(path: &FieldPath, message: &str) -> String {
    if path.is_root() {
        message.to_string()
    } else {
        format!("{path}: {message}")
    }
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Unit {
        parse_unit(Path::new("units/t.ron"), text).unwrap_or_else(|e| panic!("{e}"))
    }

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

    /// A fresh directory under the system temp directory.
    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("keel-unit-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The full example of DESIGN.md, "Unit files (`.ron`)", verbatim.
    const DESIGN_EXAMPLE: &str = r#"Unit(
    command: ["claude", "-p", "Fix the flaky test in tests/net.rs"],
    resume_command: Some(["claude", "--continue", "-p", "Continue where you stopped."]),
    env: {"RUST_LOG": "info"},
    repo: Some(Repo(path: "/srv/repos/app", base: "main")),   // branch defaults to "keel/<unit>"
    restart: OnFailure,                                        // Always | OnFailure | Never
    backoff: Backoff(initial: "1s", max: "5m", factor: 2.0, reset_after: "10m"),
    restart_limit: RestartLimit(count: 5, within: "1h"),       // then the task is `failed`
    resources: Resources(cpu: 2.0, memory: "4G", pids: 1024), // reservation AND enforced limit
    priority: 0,
    liveness: Liveness(heartbeat_timeout: "5m", progress_timeout: "30m", startup_grace: "2m",
                       on_stall: Restart,                      // Restart | Kill | Report
                       signals: [Heartbeat, Output, Cpu]),     // which evidence counts as working
    workdir: "/work",                                          // where the checkout appears
    sandbox: Sandbox(network: Host, user: None, capabilities: [], writable: [], hidden: []),
    stop: Stop(signal: "SIGTERM", timeout: "30s"),
    essential: false,                                          // under `keel init`: its final failure ends the container
)"#;

    fn secs(n: u64) -> Dur {
        Dur(Duration::from_secs(n))
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

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
                resources: Resources(cpu: 0.5, memory: "512M", pids: 64),
                priority: -3,
                liveness: Liveness(heartbeat_timeout: "1m", progress_timeout: "2h",
                                   startup_grace: "0", on_stall: Report, signals: [Cpu]),
                workdir: "/home/agent/src",
                sandbox: Sandbox(network: None, user: Some("1000:1000"),
                                 capabilities: ["CAP_NET_BIND_SERVICE", "sys_ptrace"],
                                 writable: ["/data"], hidden: ["/home", "/root"]),
                stop: Stop(signal: "INT", timeout: "1s"),
                essential: true,
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
            strings(&["CAP_NET_BIND_SERVICE", "sys_ptrace"])
        );
        assert_eq!(unit.sandbox.writable, strings(&["/data"]));
        assert_eq!(unit.sandbox.hidden, strings(&["/home", "/root"]));
        assert_eq!(unit.stop.signal, StopSignal(libc::SIGINT));
        assert_eq!(unit.stop.timeout, secs(1));
        assert!(unit.essential);
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
        assert_eq!(unit.resources.cpu, 1.0);
        assert_eq!(unit.resources.memory, Size(2 << 30));
        assert_eq!(unit.resources.pids, 1024);
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
        assert_eq!(unit.sandbox.network, Network::Host);
        assert_eq!(unit.sandbox.user, None);
        assert!(unit.sandbox.capabilities.is_empty());
        assert!(unit.sandbox.writable.is_empty());
        assert!(unit.sandbox.hidden.is_empty());
        assert_eq!(unit.stop.signal, StopSignal(libc::SIGTERM));
        assert_eq!(unit.stop.timeout, secs(30));
        assert!(!unit.essential);
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
        let unit = parse(
            "#![enable(implicit_some)]\nUnit(command: [\"a\"], sandbox: Sandbox(user: \"0:0\"))",
        );
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
    // Scalars.

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("250ms", ms(250)),
            ("90s", ms(90_000)),
            ("5m", ms(300_000)),
            ("2min", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("1d", ms(86_400_000)),
            ("1.5s", ms(1_500)),
            ("0.5ms", Duration::from_micros(500)),
            ("1h30m", ms(5_400_000)),
            ("1m 30s", ms(90_000)),
            (" 10s ", ms(10_000)),
            ("5 s", ms(5_000)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text:?}");
        }
        for (text, needle) in [
            ("", "is empty"),
            ("5", "has no unit"),
            ("5x", "unknown unit \"x\": use ms, s, m, h or d"),
            ("5 minutes", "unknown unit \"minutes\""),
            ("-5s", "is negative"),
            ("s", "does not start with a number"),
            ("1.2.3s", "malformed number \"1.2.3\""),
            ("1h30", "has no unit"),
            ("99999999999999d", "too large"),
        ] {
            let error = parse_duration(text).expect_err(text);
            assert!(error.contains(needle), "{text:?}: {error}");
        }
    }

    #[test]
    fn durations_format_and_round_trip() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_secs(2 * 86_400), "2d"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
    }

    #[test]
    fn sizes() {
        for (text, want) in [
            ("4096", 4096),
            ("100K", 100 << 10),
            ("100k", 100 << 10),
            ("512M", 512 << 20),
            ("512m", 512 << 20),
            ("4G", 4 << 30),
            ("4GiB", 4 << 30),
            ("4GB", 4 << 30),
            ("1.5G", 3 << 29),
            ("1T", 1 << 40),
            ("8 M", 8 << 20),
        ] {
            assert_eq!(parse_size(text), Ok(want), "{text:?}");
        }
        for (text, needle) in [
            ("", "is empty"),
            ("-512M", "is negative"),
            ("lots", "does not start with a number"),
            ("4Q", "unknown unit \"Q\""),
            ("1.2.3G", "malformed number"),
            ("99999999999T", "too large"),
        ] {
            let error = parse_size(text).expect_err(text);
            assert!(error.contains(needle), "{text:?}: {error}");
        }
        assert_eq!(format_size(512 << 20), "512M");
        assert_eq!(format_size(1536 << 10), "1536K");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(format_size(0), "0");
    }

    #[test]
    fn signals() {
        assert_eq!(parse_signal("SIGTERM"), Ok(libc::SIGTERM));
        assert_eq!(parse_signal("TERM"), Ok(libc::SIGTERM));
        assert_eq!(parse_signal("sigint"), Ok(libc::SIGINT));
        assert_eq!(parse_signal("HUP"), Ok(libc::SIGHUP));
        assert_eq!(parse_signal("SIGUSR2"), Ok(libc::SIGUSR2));
        assert_eq!(parse_signal("KILL"), Ok(libc::SIGKILL));
        assert!(parse_signal("SIGTREM")
            .unwrap_err()
            .contains("did you mean \"SIGTERM\"?"));
        assert!(parse_signal("15")
            .unwrap_err()
            .contains("unknown signal \"15\""));
        assert!(parse_signal("").is_err());
        assert!(parse_signal("SIG").is_err());
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(99), "SIG99");
    }

    #[test]
    fn capabilities() {
        assert_eq!(parse_capability("CAP_CHOWN"), Ok(0));
        assert_eq!(parse_capability("CAP_NET_ADMIN"), Ok(12));
        assert_eq!(parse_capability("net_admin"), Ok(12));
        assert_eq!(parse_capability("SYS_ADMIN"), Ok(21));
        assert_eq!(parse_capability("CAP_CHECKPOINT_RESTORE"), Ok(40));
        let error = parse_capability("CAP_NET_ADMN").unwrap_err();
        assert!(error.contains("did you mean \"CAP_NET_ADMIN\"?"), "{error}");
        assert!(parse_capability("CAP_EVERYTHING").is_err());
    }

    #[test]
    fn names() {
        for name in ["a", "0", "fix-tests", "agent_2", "v1.2", &"a".repeat(63)] {
            assert_eq!(validate_name(name), Ok(()), "{name:?}");
        }
        for (name, needle) in [
            ("", "is empty"),
            ("Fix", "uppercase letter 'F'"),
            ("my unit", "contains a space"),
            (".hidden", "starts with '.'"),
            ("-x", "starts with '-'"),
            ("_x", "starts with '_'"),
            ("a/b", "contains '/'"),
            ("é", "contains 'é'"),
            (&"a".repeat(64), "64 characters long"),
        ] {
            let error = validate_name(name).expect_err(name);
            assert!(error.contains(needle), "{name:?}: {error}");
            assert!(error.contains("[a-z0-9][a-z0-9._-]{0,62}"), "{error}");
        }
        assert_eq!(
            unit_name_of(Path::new("units/fix-tests.ron")).as_deref(),
            Some("fix-tests")
        );
        assert_eq!(unit_name_of(Path::new("fix.yaml")), None);
        assert_eq!(unit_name_of(Path::new("fix.ron.bak")), None);
        assert_eq!(unit_name_of(Path::new("units/.ron")), None);
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
            => 3:31, "sandbox.network: expected Host or None, found Host(1)";
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
        zero_pids: "Unit(\n    command: [\"agent\"],\n    resources: Resources(pids: 0),\n)"
            => 3:32, "resources.pids: is 0";
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

    // ------------------------------------------------------------------------------------------
    // The example units, the schema, robustness.

    fn example_units() -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("units");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
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

    #[test]
    fn schema_names_every_field_and_only_real_ones() {
        let text =
            DESIGN_EXAMPLE.replace("base: \"main\")", "base: \"main\", branch: Some(\"b\"))");
        parse(&text);
        let map = SourceMap::new(&text);
        let written: Vec<String> = map
            .nodes
            .iter()
            .map(|n| map.paths.path(n.path).schema_key())
            .collect();
        for key in &written {
            assert!(schema_hint_for(key).is_some(), "no hint for {key:?}");
        }
        for (key, _) in SCHEMA {
            let list_element = key.ends_with("[]") || key.ends_with("{}");
            assert!(
                list_element || written.iter().any(|w| w == key),
                "schema key {key:?} is not a field of the full example"
            );
        }
    }

    fn schema_hint_for(key: &str) -> Option<&'static str> {
        SCHEMA
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, hint)| *hint)
    }

    #[test]
    fn large_inputs_stay_linear() {
        // Stray quotes, many duplicate keys, a long list of duplicates, deep nesting: each is
        // quadratic (or worse) in a naive scan, and must finish at once here.
        let quotes = "'".repeat(200_000);
        assert!(parse_unit(Path::new("t.ron"), &quotes).is_err());
        let entries = vec!["\"A\": \"1\""; 20_000].join(", ");
        let text = format!("Unit(command: [\"a\"], env: {{{entries}}})");
        let errors = check_unit(Path::new("t.ron"), &text).expect_err("duplicates");
        assert_eq!(errors.len(), 19_999);
        let signals = vec!["Cpu"; 50_000].join(", ");
        let text = format!("Unit(command: [\"a\"], liveness: Liveness(signals: [{signals}]))");
        let errors = check_unit(Path::new("t.ron"), &text).expect_err("duplicates");
        assert_eq!(errors.len(), 49_999);
        assert_eq!((errors[1].line, errors[1].col), (1, 61));
        let deep = format!(
            "[{}]",
            vec!["[".repeat(40) + &"]".repeat(40); 2_000].join(",")
        );
        assert!(parse_unit(Path::new("t.ron"), &deep).is_err());
    }

    #[test]
    fn positions_map_both_ways() {
        let text = "ab\nçd\n\nx";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 3), (2, 1));
        assert_eq!(line_col(text, 5), (2, 2));
        assert_eq!(line_col(text, 8), (4, 1));
        assert_eq!(line_col(text, 99), (4, 2));
        let at = |line, col| ron::error::Position { line, col };
        assert_eq!(offset_of(text, at(2, 2)), 5);
        assert_eq!(offset_of(text, at(4, 1)), 8);
        assert_eq!(offset_of(text, at(9, 1)), text.len());
    }

    #[test]
    fn damaged_files_never_panic_and_point_inside_the_file() {
        let check = |text: &str| {
            let lines = text.lines().count().max(1);
            if let Err(error) = parse_unit(Path::new("t.ron"), text) {
                assert!(
                    error.line >= 1 && error.line <= lines + 1,
                    "{error} in {text:?}"
                );
                assert!(error.col >= 1, "{error} in {text:?}");
                assert!(!error.message.is_empty());
            }
        };
        let boundaries: Vec<usize> = DESIGN_EXAMPLE
            .char_indices()
            .map(|(i, _)| i)
            .chain([DESIGN_EXAMPLE.len()])
            .collect();
        for &end in &boundaries {
            check(&DESIGN_EXAMPLE[..end]);
        }
        for pair in boundaries.windows(2) {
            let damaged = format!(
                "{}{}",
                &DESIGN_EXAMPLE[..pair[0]],
                &DESIGN_EXAMPLE[pair[1]..]
            );
            check(&damaged);
        }
        for nasty in [
            "[[[[[[[[[[",
            &"(".repeat(10_000),
            "\"",
            "r#\"",
            "'",
            "b'",
            "/*/*",
            "Unit(command:[\"a\"], env:{,,}:)",
        ] {
            check(nasty);
        }
    }
}
