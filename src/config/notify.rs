//! `notify: [...]` of `keel.ron`: commands the daemon runs when chosen events are journaled,
//! for an operator who is away (docs/notifications.md).
//!
//! ```ron
//! notify: [
//!     Notify(on: [Failed, Stalled, OomKill], command: ["ntfy", "publish", "agents"]),
//!     Notify(on: [Succeeded], command: ["/usr/local/bin/mail-me"], user: Some("alerts"),
//!            timeout: Some("30s"), coalesce: Some("1m")),
//! ]
//! ```
//!
//! A hook's environment is its own: `PATH`, `HOME`, `USER`, `LOGNAME`, `LANG`, `LC_ALL`, `TZ`
//! (the daemon's, or the named user's), what `env: {...}` sets, and `KEEL_EVENT_*` — never the
//! rest of the daemon's (its secrets, its test switches).
//!
//! A named user is looked up when the file is read: a user this host does not have is an
//! error at its `file:line:col`, like any other.

use crate::unit::{Dur, FieldPath};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The default `timeout` of a hook.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default `coalesce` window: per (hook, unit, event), the first at once, then at most
/// one per window, carrying how many it stands for.
pub const DEFAULT_COALESCE: Duration = Duration::from_secs(20);
/// No window shorter than this: a hook is a process, and "a few per minute" is the point.
pub const MIN_COALESCE: Duration = Duration::from_secs(1);
/// No hook may run longer than this (a hook that needs an hour is a job, not a notice).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// The events a hook may be run on, as written in `on: [...]`: each stands for one journal
/// event ([`EventKind::journal_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub enum EventKind {
    /// The task ended `failed` (restart policy or limit, a start that cannot succeed).
    Failed,
    /// The task ended `succeeded`.
    Succeeded,
    /// The liveness watch judged the attempt stalled.
    Stalled,
    /// The OOM killer struck in the task's cgroup.
    OomKill,
    /// An attempt ended (any exit; `detail` says how).
    Exited,
    /// The task waits out its backoff before a restart.
    Restarting,
    /// A start is blocked by the host (a missing user, a refused mount).
    Blocked,
    /// A start failed (its program or sandbox could not be set up).
    StartFailed,
    /// The attempt spent its `max_runtime` and is being stopped.
    Timeout,
    /// The task is over its disk budget and is being stopped.
    Disk,
    /// The task was paused (by `keel pause` or for memory pressure).
    Paused,
    /// The task was stopped.
    Stopped,
    /// The stop signal did not end it within `stop.timeout`: SIGKILL.
    StopTimeout,
    /// An attempt was fenced (another daemon or host owns the task).
    Fenced,
    /// A secret was sent toward a destination it is not for.
    SecretMisdirected,
    /// A harvest failed.
    HarvestFailed,
    /// A unit file in the units directory does not parse or check.
    InvalidUnit,
}

/// Every kind, for the mapping both ways and the tests.
pub const ALL_KINDS: [EventKind; 17] = [
    EventKind::Failed,
    EventKind::Succeeded,
    EventKind::Stalled,
    EventKind::OomKill,
    EventKind::Exited,
    EventKind::Restarting,
    EventKind::Blocked,
    EventKind::StartFailed,
    EventKind::Timeout,
    EventKind::Disk,
    EventKind::Paused,
    EventKind::Stopped,
    EventKind::StopTimeout,
    EventKind::Fenced,
    EventKind::SecretMisdirected,
    EventKind::HarvestFailed,
    EventKind::InvalidUnit,
];

impl EventKind {
    /// The journal's name of the event (`keel events`).
    pub fn journal_name(self) -> &'static str {
        match self {
            EventKind::Failed => "failed",
            EventKind::Succeeded => "succeeded",
            EventKind::Stalled => "stalled",
            EventKind::OomKill => "oom-kill",
            EventKind::Exited => "exited",
            EventKind::Restarting => "backoff",
            EventKind::Blocked => "start-blocked",
            EventKind::StartFailed => "start-failed",
            EventKind::Timeout => "timeout",
            EventKind::Disk => "disk-budget",
            EventKind::Paused => "paused",
            EventKind::Stopped => "stopped",
            EventKind::StopTimeout => "stop-timeout",
            EventKind::Fenced => "fenced",
            EventKind::SecretMisdirected => "secret-misdirected",
            EventKind::HarvestFailed => "harvest-failed",
            EventKind::InvalidUnit => "invalid-unit",
        }
    }

    /// The kind of a journal event, if hooks may be run on it.
    pub fn of_journal(event: &str) -> Option<EventKind> {
        ALL_KINDS.into_iter().find(|k| k.journal_name() == event)
    }

    /// The name as written in `keel.ron` (`OomKill`), as hooks are told it.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Failed => "Failed",
            EventKind::Succeeded => "Succeeded",
            EventKind::Stalled => "Stalled",
            EventKind::OomKill => "OomKill",
            EventKind::Exited => "Exited",
            EventKind::Restarting => "Restarting",
            EventKind::Blocked => "Blocked",
            EventKind::StartFailed => "StartFailed",
            EventKind::Timeout => "Timeout",
            EventKind::Disk => "Disk",
            EventKind::Paused => "Paused",
            EventKind::Stopped => "Stopped",
            EventKind::StopTimeout => "StopTimeout",
            EventKind::Fenced => "Fenced",
            EventKind::SecretMisdirected => "SecretMisdirected",
            EventKind::HarvestFailed => "HarvestFailed",
            EventKind::InvalidUnit => "InvalidUnit",
        }
    }
}

/// `Notify(on: [...], command: [...], user: Some("alerts"), timeout: Some("30s"),
/// coalesce: Some("20s"), units: Some(["agent-1"]), env: {"TOPIC": "agents"})` as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename = "Notify")]
pub struct RawNotify {
    pub on: Vec<EventKind>,
    pub command: Vec<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub timeout: Option<Dur>,
    #[serde(default)]
    pub coalesce: Option<Dur>,
    /// Only the events of these units; `None`: every unit's (and the daemon's own).
    #[serde(default)]
    pub units: Option<Vec<String>>,
    /// Variables set for the hook, beside the few it always has (`PATH`, `HOME`, ...) and
    /// `KEEL_EVENT_*`: nothing else of the daemon's environment reaches it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The user as looked up when the file was read (`resolve_users`).
    #[serde(skip)]
    pub resolved_user: Option<HookUser>,
}

/// A hook's user, looked up in the host's user database when `keel.ron` was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Its groups: the primary one, then each `/etc/group` lists it in.
    pub groups: Vec<u32>,
    pub home: std::path::PathBuf,
}

/// A hook in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub on: Vec<EventKind>,
    pub command: Vec<String>,
    /// `None`: the daemon's own user.
    pub user: Option<HookUser>,
    pub timeout: Duration,
    pub coalesce: Duration,
    pub units: Option<Vec<String>>,
    /// `env: {...}` as written.
    pub env: BTreeMap<String, String>,
}

impl Hook {
    /// Whether this hook is run on `kind` of `unit`.
    pub fn wants(&self, kind: EventKind, unit: &str) -> bool {
        self.on.contains(&kind)
            && self
                .units
                .as_ref()
                .is_none_or(|u| u.iter().any(|n| n == unit))
    }

    /// `ntfy publish agents`, for the journal and the log (at most 60 characters).
    pub fn describe(&self) -> String {
        let text = self.command.join(" ");
        match text.char_indices().nth(60) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text,
        }
    }
}

pub fn resolve(raw: &[RawNotify]) -> Vec<Hook> {
    raw.iter()
        .map(|r| Hook {
            on: r.on.clone(),
            command: r.command.clone(),
            user: r.resolved_user.clone(),
            timeout: r.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
            coalesce: r.coalesce.map_or(DEFAULT_COALESCE, |d| d.0),
            units: r.units.clone(),
            env: r.env.clone(),
        })
        .collect()
}

/// Values that parse but cannot be meant.
pub(super) fn check(raw: &[RawNotify]) -> Vec<(FieldPath, String)> {
    let mut problems = Vec::new();
    for (i, hook) in raw.iter().enumerate() {
        let at = FieldPath::default().field("notify").index(i);
        if hook.on.is_empty() {
            problems.push((
                at.field("on"),
                "is empty: the hook would never run; write e.g. on: [Failed, Stalled]".to_string(),
            ));
        }
        match hook.command.first() {
            None => problems.push((
                at.field("command"),
                "is empty: write the program and its arguments, e.g. [\"ntfy\", \"publish\", \"agents\"]"
                    .to_string(),
            )),
            Some(program) if program.is_empty() || program.contains('\0') => problems.push((
                at.field("command").index(0),
                "is not a program name: write e.g. \"ntfy\" or \"/usr/local/bin/alert\"".to_string(),
            )),
            Some(_) => {}
        }
        if let Some((j, _)) = hook
            .command
            .iter()
            .enumerate()
            .find(|(_, a)| a.contains('\0'))
        {
            problems.push((at.field("command").index(j), "holds a NUL byte".to_string()));
        }
        if let Some(timeout) = hook.timeout {
            if timeout.0.is_zero() || timeout.0 > MAX_TIMEOUT {
                problems.push((
                    at.field("timeout"),
                    format!(
                        "must be more than 0 and at most {}: write e.g. Some(\"30s\"), or leave it out for {}",
                        crate::unit::format_duration(MAX_TIMEOUT),
                        crate::unit::format_duration(DEFAULT_TIMEOUT)
                    ),
                ));
            }
        }
        if hook.coalesce.is_some_and(|c| c.0 < MIN_COALESCE) {
            problems.push((
                at.field("coalesce"),
                format!(
                    "is below {}: a burst would run the hook for every event; write e.g. Some(\"20s\")",
                    crate::unit::format_duration(MIN_COALESCE)
                ),
            ));
        }
        for (key, value) in &hook.env {
            if let Err(message) = crate::unit::check_env_key(key) {
                problems.push((at.field("env").key(key), message));
            }
            if value.contains('\0') {
                problems.push((
                    at.field("env").key(key),
                    "the value contains a NUL byte".to_string(),
                ));
            }
        }
        if hook.user.as_ref().is_some_and(|u| u.is_empty()) {
            problems.push((
                at.field("user"),
                "is empty: write Some(\"alerts\") or None for the daemon's own user".to_string(),
            ));
        }
    }
    problems
}

/// Look each hook's user up in `/etc/passwd` and `/etc/group` (read as text, as the sandbox
/// does: no NSS, nothing that can wait on a directory service); the first that is missing is
/// an error at its `user` field.
pub(super) fn resolve_users(raw: &mut [RawNotify]) -> Result<(), (FieldPath, String)> {
    if raw.iter().all(|hook| hook.user.is_none()) {
        return Ok(());
    }
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    resolve_users_in(raw, &read("/etc/passwd"), &read("/etc/group"))
}

/// [`resolve_users`] against the given texts.
pub(super) fn resolve_users_in(
    raw: &mut [RawNotify],
    passwd: &str,
    group: &str,
) -> Result<(), (FieldPath, String)> {
    for (i, hook) in raw.iter_mut().enumerate() {
        let Some(name) = hook.user.clone() else {
            continue;
        };
        let at = FieldPath::default().field("notify").index(i).field("user");
        match crate::sandbox::privileges::account(passwd, group, &name) {
            Ok(Some(account)) => {
                hook.resolved_user = Some(HookUser {
                    name,
                    uid: account.uid,
                    gid: account.gid,
                    groups: account.groups,
                    home: account.home,
                });
            }
            Ok(None) => {
                return Err((
                    at,
                    format!(
                        "no user {name:?} in /etc/passwd: create it (useradd --system {name}), \
                         or write user: None to run the hook as the daemon's user"
                    ),
                ))
            }
            Err(e) => return Err((at, format!("cannot look user {name:?} up: {e}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
