//! `keel health`: exit 0 iff the daemon answers within 5 s and its loop is live. Fit for a
//! container HEALTHCHECK or a Kubernetes exec probe.
//!
//! The request is read and answered by the daemon's loop itself, so an answer is the proof
//! that the loop runs: an idle loop needs no periodic tick, and a wedged or stopped one does
//! not answer (exit 1 after 5 s). `loop_age_ms` is how long the loop's current round had run
//! before it answered: a round stuck on something slow (a hung disk) shows there.

use super::{request, CliError, CliResult};
use crate::protocol::{Request, Response};
use std::path::Path;
use std::time::Duration;

/// A loop round that has run this long before answering is wedged.
const MAX_LOOP_AGE_MS: u64 = 10_000;

pub fn run(state_dir: &Path) -> CliResult {
    match request(state_dir, &Request::Health, Some(Duration::from_secs(5)))? {
        Response::Health {
            pid,
            loop_age_ms,
            tasks,
        } if loop_age_ms <= MAX_LOOP_AGE_MS => {
            println!("ok: daemon pid {pid}, {tasks} tasks");
            Ok(())
        }
        Response::Health { loop_age_ms, .. } => Err(CliError(format!(
            "daemon loop has not ticked for {loop_age_ms} ms"
        ))),
        other => Err(CliError(format!("unexpected answer: {other:?}"))),
    }
}
