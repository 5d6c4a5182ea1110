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

mod dependencies;
mod lexer;
mod resources;
pub mod sandbox_rules;
mod scanner;
mod secrets;
pub(crate) mod source_map;
mod suggest;
mod validate;
mod values;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use dependencies::{dependency_problems, find_cycle};
pub use resources::{Resources, DEFAULT_MEMORY_LIMIT};
pub use secrets::Secret;
pub use validate::{
    check_env_key, keel_dir_problem, keel_dir_problems, network_list_problems, validate_unit,
    FieldPath, PathSeg, Problem,
};
pub use values::{
    cpu_millis, format_duration, format_size, parse_capability, parse_duration, parse_signal,
    parse_size, Dur, Size, StopSignal,
};

use serde::Deserialize;
use source_map::{line_col, SourceMap};
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
    /// Credentials the agent uses but never holds: its variable is a placeholder.
    #[serde(default)]
    pub secrets: BTreeMap<String, Secret>,
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
    /// Units that must have succeeded before this one starts (`after: ["build", "lint"]`).
    #[serde(default)]
    pub after: Vec<String>,
    /// keel may pause (freeze) this task for one of higher priority, or when memory pressure
    /// passes its threshold, and resumes it when room returns.
    #[serde(default)]
    pub preemptible: bool,
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
    /// The longest an attempt may run, frozen time (`keel pause`) and host sleep not counted:
    /// past it keel stops the attempt (`stop` applies) and it ends as `timeout`, a failure for
    /// the restart policy. `None`: no limit.
    #[serde(default)]
    pub max_runtime: Option<Dur>,
    /// The budget of all the task's attempts together (since it was added, or last started by
    /// `keel start` / `keel restart`), counted as `max_runtime` is: spent, the attempt is
    /// stopped as `timeout` and the task ends `failed`, whatever its restart policy.
    #[serde(default)]
    pub max_total_runtime: Option<Dur>,
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

/// `sandbox.network`: what the agent may reach over the network.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub enum Network {
    /// The host's network namespace: everything the host reaches (an explicit opt-in that
    /// `keel status` marks).
    Host,
    /// A network namespace of its own with only `lo`.
    None,
    /// A network namespace of its own from which only these destinations are reached
    /// (`crate::network::entry`'s syntax; `"@name"` a list of `keel.ron`), as written.
    /// `Allow([])`, the default: nothing out.
    Allow(Vec<String>),
}

impl Default for Network {
    fn default() -> Self {
        Network::Allow(Vec::new())
    }
}

impl Network {
    /// `host`, `none` or `allow`, as `keel status` names the mode.
    pub fn mode(&self) -> &'static str {
        match self {
            Network::Host => "host",
            Network::None => "none",
            Network::Allow(_) => "allow",
        }
    }
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

/// An error in a unit file, with the position an editor can jump to.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitError {
    pub file: PathBuf,
    /// 1-based; 0 when the error is about the file as a whole (its name, or reading it).
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl UnitError {
    /// An error at byte `offset` of `text`, the contents of `file`.
    pub(crate) fn at(file: &Path, text: &str, offset: usize, message: String) -> Self {
        let (line, col) = line_col(text, offset);
        UnitError {
            file: file.to_path_buf(),
            line,
            col,
            message,
        }
    }
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

/// The smallest memory request (and limit) a unit may ask for.
pub const MIN_MEMORY: u64 = 4 << 20;

/// The smallest `resources.disk`.
pub const MIN_DISK: u64 = 16 << 20;

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

/// [`parse_unit`] with the problems `more` finds as well (see [`check_unit_with`]).
pub fn parse_unit_with(
    file: &Path,
    text: &str,
    more: impl FnOnce(&Unit) -> Vec<Problem>,
) -> Result<Unit, UnitError> {
    check_unit_with(file, text, more).map_err(|errors| {
        errors
            .into_iter()
            .next()
            .expect("check_unit_with reports at least one error")
    })
}

/// Parse a unit's text and validate it, reporting every problem found, in file order. A syntax
/// or type error stops parsing, so it is reported alone; semantic problems (a backoff factor
/// below 1, a relative path, …) are all reported. A leading byte-order mark is ignored.
pub fn check_unit(file: &Path, text: &str) -> Result<Unit, Vec<UnitError>> {
    check_unit_with(file, text, |_| Vec::new())
}

/// [`check_unit`] with the problems `more` finds in the parsed unit as well (rules that need
/// what only the caller knows: keel's directories, [`keel_dir_problems`]), each located in the
/// text as the validator's are.
pub fn check_unit_with(
    file: &Path,
    text: &str,
    more: impl FnOnce(&Unit) -> Vec<Problem>,
) -> Result<Unit, Vec<UnitError>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let error_at = |offset: usize, message: String| UnitError::at(file, text, offset, message);
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
    let mut problems = validate_unit(&unit);
    // One problem per value: what the validator says of it comes first.
    let more: Vec<Problem> = more(&unit)
        .into_iter()
        .filter(|extra| problems.iter().all(|p| p.path != extra.path))
        .collect();
    problems.extend(more);
    for problem in problems {
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

/// The text of a small RON file (a unit, `keel.ron`): refused when it is a directory, not a
/// regular file (a FIFO would block), over [`MAX_UNIT_FILE_SIZE`], or not UTF-8 (with the
/// line and column of the first bad byte). `shape` says what the file should be ("a unit is a
/// file NAME.ron"), `kind` names it ("a unit file").
pub(crate) fn read_ron_text(path: &Path, shape: &str, kind: &str) -> Result<String, UnitError> {
    use std::io::Read;
    let whole_file = |message: String| UnitError {
        file: path.to_path_buf(),
        line: 0,
        col: 0,
        message,
    };
    // Checked before opening: opening a FIFO would block.
    let metadata = std::fs::metadata(path).map_err(|e| whole_file(format!("cannot read: {e}")))?;
    if metadata.is_dir() {
        return Err(whole_file(format!("is a directory: {shape}")));
    }
    if !metadata.is_file() {
        return Err(whole_file(format!("is not a regular file: {shape}")));
    }
    let file = std::fs::File::open(path).map_err(|e| whole_file(format!("cannot read: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_UNIT_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| whole_file(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_UNIT_FILE_SIZE {
        return Err(whole_file(format!(
            "is larger than {}: {kind} is a few lines of RON",
            format_size(MAX_UNIT_FILE_SIZE)
        )));
    }
    String::from_utf8(bytes).map_err(|error| {
        let valid = error.utf8_error().valid_up_to();
        let bytes = error.into_bytes();
        let prefix = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
        let (line, col) = line_col(prefix, valid);
        UnitError {
            file: path.to_path_buf(),
            line,
            col,
            message: format!(
                "invalid UTF-8 (byte 0x{:02x}): save the file as UTF-8",
                bytes[valid]
            ),
        }
    })
}

/// Read, name-check and parse a unit file: `(name, unit, text)`.
pub fn load_unit_file(path: &Path) -> Result<(String, Unit, String), UnitError> {
    load_unit_file_with(path, |_| Vec::new())
}

/// [`load_unit_file`] with the problems `more` finds as well (see [`check_unit_with`]): the
/// daemon's rules that need its configuration (the named lists of `keel.ron`).
pub fn load_unit_file_with(
    path: &Path,
    more: impl FnOnce(&Unit) -> Vec<Problem>,
) -> Result<(String, Unit, String), UnitError> {
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
    let text = read_ron_text(path, "a unit is a file NAME.ron", "a unit file")?;
    let unit = parse_unit_with(path, &text, more)?;
    Ok((name, unit, text))
}
