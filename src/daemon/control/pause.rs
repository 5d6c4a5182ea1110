//! `keel pause` and `keel resume` (one task, or `--all`): the task's cgroup frozen and thawed
//! ([`crate::daemon::pausing`]), answered at once (a freeze the kernel has not finished yet
//! shows as `frozen: false` in `keel status` until it has).

use super::{not_persisted, unknown_unit};
use crate::daemon::pausing::PauseError;
use crate::daemon::record::{PauseOrigin, TaskState};
use crate::daemon::Daemon;
use crate::protocol::Response;

impl Daemon {
    pub(super) fn pause_request(&mut self, unit: Option<&str>) -> Response {
        match unit {
            Some(unit) => self.pause_one(unit),
            None => self.pause_all(),
        }
    }

    pub(super) fn resume_request(&mut self, unit: Option<&str>) -> Response {
        match unit {
            Some(unit) => self.resume_one(unit),
            None => self.resume_all(),
        }
    }

    fn pause_one(&mut self, unit: &str) -> Response {
        if !self.tasks.contains(unit) {
            return unknown_unit(unit, &self.units);
        }
        match self.pause_task(unit, "keel pause", PauseOrigin::Request) {
            Ok(true) => ok(format!("{unit}: paused")),
            Ok(false) => ok(format!("{unit}: paused (the kernel is still freezing it)")),
            Err(e) => self.refusal(unit, "cannot pause", e),
        }
    }

    fn resume_one(&mut self, unit: &str) -> Response {
        if !self.tasks.contains(unit) {
            return unknown_unit(unit, &self.units);
        }
        match self.resume_task(unit, "keel resume", PauseOrigin::Request) {
            Ok(lasted) => ok(format!(
                "{unit}: resumed after {} paused",
                crate::fmt::duration(lasted)
            )),
            Err(e) => self.refusal(unit, "cannot resume", e),
        }
    }

    /// The hold on starts first (recorded before it acts: a restarted daemon keeps it; while
    /// it lasts keel preempts and resumes nothing), then every task with a live attempt that
    /// is not paused yet; the others are left as they are (keel's own pauses stay keel's:
    /// they resume when room returns, after the window).
    fn pause_all(&mut self) -> Response {
        let since = crate::state::rfc3339(crate::state::now_ms());
        if crate::daemon::start_hold::store(&self.store.dirs, Some(&since)).is_err() {
            return not_persisted("--all", &self.store.dirs.root);
        }
        self.starts_held = Some(since);
        let candidates: Vec<String> = (self.tasks.values())
            .filter(|t| t.shim.is_some() && t.record.paused.is_none())
            .filter(|t| matches!(t.record.state, TaskState::Running | TaskState::Stalled))
            .map(|t| t.name.clone())
            .collect();
        let mut done = Vec::new();
        let mut refused = Vec::new();
        for unit in candidates {
            match self.pause_task(&unit, "keel pause --all", PauseOrigin::Request) {
                Ok(_) => done.push(unit),
                Err(PauseError::Refused(why)) => refused.push(format!("{unit}: {why}")),
                Err(PauseError::NotPersisted) => {
                    let why = self.refusal(&unit, "cannot pause", PauseError::NotPersisted);
                    refused.push(message_of(why));
                }
            }
        }
        prefixed(
            "starts held until keel resume --all; ",
            summary("paused", done, refused),
        )
    }

    /// The hold on starts ended, then every task a person paused resumed (keel's own resume
    /// when room returns: resuming them all at once would overcommit the CPUs).
    fn resume_all(&mut self) -> Response {
        if crate::daemon::start_hold::store(&self.store.dirs, None).is_err() {
            return not_persisted("--all", &self.store.dirs.root);
        }
        if self.starts_held.take().is_some() {
            self.store.queue_changed = true;
        }
        let paused: Vec<String> = (self.tasks.values())
            .filter(|t| {
                (t.record.paused.as_ref()).is_some_and(|p| p.origin == PauseOrigin::Request)
            })
            .map(|t| t.name.clone())
            .collect();
        let mut done = Vec::new();
        let mut refused = Vec::new();
        for unit in paused {
            match self.resume_task(&unit, "keel resume --all", PauseOrigin::Request) {
                Ok(_) => done.push(unit),
                Err(PauseError::Refused(why)) => refused.push(format!("{unit}: {why}")),
                Err(PauseError::NotPersisted) => {
                    let why = self.refusal(&unit, "cannot resume", PauseError::NotPersisted);
                    refused.push(message_of(why));
                }
            }
        }
        prefixed(
            "the hold on starts ended; ",
            summary("resumed", done, refused),
        )
    }

    fn refusal(&self, unit: &str, what: &str, e: PauseError) -> Response {
        match e {
            PauseError::NotPersisted => not_persisted(unit, &self.store.dirs.root),
            PauseError::Refused(why) => Response::Error {
                message: format!("{unit}: {what}: {why}"),
            },
        }
    }
}

fn message_of(response: Response) -> String {
    match response {
        Response::Ok { message } | Response::Error { message } => message,
        _ => String::new(),
    }
}

/// `response`'s message with `prefix` before it; a refusal of every task is no error here
/// (the hold itself was done).
fn prefixed(prefix: &str, response: Response) -> Response {
    Response::Ok {
        message: format!("{prefix}{}", message_of(response)),
    }
}

fn ok(message: String) -> Response {
    Response::Ok { message }
}

/// `paused 2 tasks: a, b` (and what was refused); an error only when every one was refused.
fn summary(verb: &str, done: Vec<String>, refused: Vec<String>) -> Response {
    let count = |n: usize| if n == 1 { "task" } else { "tasks" };
    let mut message = match done.len() {
        0 => format!("no task {verb}"),
        n => format!("{verb} {n} {}: {}", count(n), done.join(", ")),
    };
    if !refused.is_empty() {
        message.push_str(&format!("; not {verb}: {}", refused.join("; ")));
    }
    if done.is_empty() && !refused.is_empty() {
        Response::Error { message }
    } else {
        Response::Ok { message }
    }
}
