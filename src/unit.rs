//! Unit files: one `.ron` file per agent task.
//!
//! A unit is parsed with serde + ron; every field but `command` has a default, unknown fields
//! are errors, and every error names `file:line:col` so that an operator can fix it without
//! guessing. Durations (`"250ms"`, `"90s"`, `"5m"`, `"1h"`) and sizes (`"512M"`, `"4G"`) are
//! strings with units, parsed here.

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

/// Parse `"250ms"`, `"90s"`, `"5m"`, `"1h"`, `"1d"` (a bare `"0"` is zero).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| {
            format!("duration {text:?} has no unit: write e.g. \"90s\", \"5m\", \"250ms\"")
        })?;
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} does not start with a number"))?;
    let millis_per_unit = match unit {
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
    let millis = value * millis_per_unit;
    if !millis.is_finite() || millis > 1e15 {
        return Err(format!("duration {text:?} is too large"));
    }
    Ok(Duration::from_micros((millis * 1000.0).round() as u64))
}

/// Parse `"512M"`, `"4G"`, `"100K"`, `"1T"`, `"4096"` (binary multiples; `"4GiB"` also accepted).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("size {text:?} does not start with a number (write e.g. \"512M\")"))?;
    let multiplier: u64 = match unit.trim_end_matches("iB").trim_end_matches('B') {
        "" => 1,
        "K" | "k" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => {
            return Err(format!(
                "size {text:?} has unknown unit {unit:?}: use K, M, G or T"
            ))
        }
    };
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size {text:?} is too large"));
    }
    Ok(bytes.round() as u64)
}

/// Signal number from `"SIGTERM"` / `"TERM"`.
pub fn parse_signal(text: &str) -> Result<i32, String> {
    let name = text.trim().trim_start_matches("SIG");
    let number = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "ALRM" => libc::SIGALRM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "WINCH" => libc::SIGWINCH,
        "PWR" => libc::SIGPWR,
        _ => {
            return Err(format!(
                "unknown signal {text:?}: use SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or SIGKILL"
            ))
        }
    };
    Ok(number)
}

/// Signal name for display (`SIGTERM`), or `SIG<n>` when unknown.
pub fn signal_name(number: i32) -> String {
    match nix::sys::signal::Signal::try_from(number) {
        Ok(signal) => signal.as_str().to_string(),
        Err(_) => format!("SIG{number}"),
    }
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
        if argv.is_empty() || argv[0].is_empty() {
            return Err(serde::de::Error::custom(
                "command is empty: give the program and its arguments, e.g. [\"claude\", \"-p\", \"...\"]",
            ));
        }
        if argv.iter().any(|arg| arg.contains('\0')) {
            return Err(serde::de::Error::custom("command contains a NUL byte"));
        }
        Ok(Command(argv))
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
    let bytes = name.as_bytes();
    let valid_first = bytes
        .first()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let valid_rest = bytes[1.min(bytes.len())..]
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c));
    if valid_first && valid_rest && bytes.len() <= 63 {
        Ok(())
    } else {
        Err(format!(
            "unit name {name:?} is invalid: the file stem must match [a-z0-9][a-z0-9._-]{{0,62}}"
        ))
    }
}

/// The unit name of a unit file path (`units/fix-tests.ron` → `fix-tests`).
pub fn unit_name_of(path: &Path) -> Option<String> {
    if path.extension()? != "ron" {
        return None;
    }
    Some(path.file_stem()?.to_str()?.to_string())
}

/// Parse a unit's text. `file` is only used in error messages.
pub fn parse_unit(file: &Path, text: &str) -> Result<Unit, UnitError> {
    let unit: Unit = ron::from_str(text).map_err(|e| UnitError {
        file: file.to_path_buf(),
        line: e.span.start.line,
        col: e.span.start.col,
        message: e.code.to_string(),
    })?;
    Ok(unit)
}

/// Read, name-check and parse a unit file.
pub fn load_unit_file(path: &Path) -> Result<(String, Unit, String), UnitError> {
    let whole_file = |message: String| UnitError {
        file: path.to_path_buf(),
        line: 0,
        col: 0,
        message,
    };
    let name = unit_name_of(path)
        .ok_or_else(|| whole_file("a unit file's name must end in .ron".to_string()))?;
    validate_name(&name).map_err(whole_file)?;
    let text =
        std::fs::read_to_string(path).map_err(|e| whole_file(format!("cannot read: {e}")))?;
    let unit = parse_unit(path, &text)?;
    Ok((name, unit, text))
}
