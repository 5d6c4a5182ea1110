//! Semantic validation: a pure function of the parsed unit.

use super::sandbox_rules::{refused_capability, relation, writable_problem};
use super::values::{check_argv, format_duration, parse_capability};
use super::Unit;
use std::fmt;
use std::path::Path;

mod resources;
mod secrets;

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
    pub(super) fn schema_key(&self) -> String {
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
    for (index, dependency) in unit.after.iter().enumerate() {
        if let Err(why) = super::validate_name(dependency) {
            problems.add(
                root.field("after").index(index),
                format!("{dependency:?} cannot be a unit's name: {why}"),
            );
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

    problems
        .0
        .extend(resources::resource_problems(&unit.resources));

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
    if let super::Network::Allow(entries) = &sandbox.network {
        for (index, entry) in entries.iter().enumerate() {
            if let Err(error) = crate::network::entry::parse(entry) {
                problems.add(at.field("network").index(index), error.to_string());
            }
        }
    }
    for (index, capability) in sandbox.capabilities.iter().enumerate() {
        let refused = parse_capability(capability).and_then(|number| {
            refused_capability(number, sandbox.network == super::Network::Host).map_or(Ok(()), Err)
        });
        if let Err(message) = refused {
            problems.add(at.field("capabilities").index(index), message);
        }
    }
    let repo = unit.repo.as_ref().map(|repo| repo.path.as_str());
    for (index, path) in sandbox.writable.iter().enumerate() {
        let refused = check_absolute_path(path, "/srv/agent-data")
            .and_then(|()| writable_problem(path, repo).map_or(Ok(()), Err));
        if let Err(message) = refused {
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

    if !super::values::STOP_SIGNALS.contains(&unit.stop.signal.0) {
        problems.add(
            root.field("stop").field("signal"),
            format!(
                "{} cannot be a stop signal: use SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or SIGKILL",
                crate::fmt::signal_name(unit.stop.signal.0)
            ),
        );
    }
    if unit.stop.timeout.0.is_zero() {
        problems.add(
            root.field("stop").field("timeout"),
            "is 0: give the agent time to exit cleanly before SIGKILL, e.g. \"30s\"".to_string(),
        );
    }
    for (field, budget) in [
        ("max_runtime", unit.max_runtime),
        ("max_total_runtime", unit.max_total_runtime),
    ] {
        if budget.is_some_and(|d| d.0.is_zero()) {
            problems.add(
                root.field(field),
                "is 0: no attempt could run; give a budget such as Some(\"8h\"), or None"
                    .to_string(),
            );
        }
    }
    problems.0.extend(secrets::secret_problems(unit));
    problems.0
}

/// The unit's writable paths against keel's own directories (`(what, path)`: `("state
/// directory", "/var/lib/keel")`), which only the caller knows: `keel check` (its `--state`),
/// the daemon at each start. Compared as written: give canonical paths.
pub fn keel_dir_problems(unit: &Unit, dirs: &[(&str, &Path)]) -> Vec<Problem> {
    let at = FieldPath::default().field("sandbox").field("writable");
    let mut problems = Problems::default();
    for (index, path) in unit.sandbox.writable.iter().enumerate() {
        if let Some(message) = keel_dir_problem(Path::new(path), dirs) {
            problems.add(at.index(index), message);
        }
    }
    problems.0
}

/// The unit's `"@name"` entries against the named lists of `keel.ron` (`lists`), which only
/// the caller knows: `keel check` (the state directory's `keel.ron`), the daemon as it
/// accepts a unit file. A list that names one `keel.ron` lacks is reported at its entry,
/// with the lists there are. (The lists themselves are checked with `keel.ron`.)
pub fn network_list_problems(
    unit: &Unit,
    lists: &std::collections::BTreeMap<String, Vec<String>>,
) -> Vec<Problem> {
    let super::Network::Allow(entries) = &unit.sandbox.network else {
        return Vec::new();
    };
    let at = FieldPath::default().field("sandbox").field("network");
    let mut problems = Problems::default();
    for (index, entry) in entries.iter().enumerate() {
        let Ok(crate::network::Entry::List(list)) = crate::network::entry::parse(entry) else {
            continue;
        };
        if !lists.contains_key(&list) {
            let error = crate::network::PolicyError::UnknownList {
                list,
                known: lists.keys().cloned().collect(),
            };
            problems.add(at.index(index), error.to_string());
        }
    }
    problems
        .0
        .extend(secrets::unreached_hosts(unit, Some(lists)));
    problems.0
}

/// Why `path`, a writable path, may not be shared for its relation to one of keel's
/// directories (`(what, path)`), if it may not.
pub fn keel_dir_problem(path: &Path, dirs: &[(&str, &Path)]) -> Option<String> {
    dirs.iter().find_map(|(what, dir)| {
        relation(path, dir).map(|relation| {
            format!(
                "{:?} {} keel's {what} {}: an agent that writes there rewrites tasks' records, \
                 unit files (and so its own sandbox) and other tasks' work; share a directory \
                 outside it",
                path.display().to_string(),
                relation.verb(),
                dir.display()
            )
        })
    })
}

pub fn check_env_key(key: &str) -> Result<(), String> {
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

pub(super) fn check_absolute_path(path: &str, example: &str) -> Result<(), String> {
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
