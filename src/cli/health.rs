//! `keel health`: exit 0 iff the daemon answers within 5 s and its loop is live. Fit for a
//! container HEALTHCHECK or a Kubernetes exec probe.

use super::{request, CliError, CliResult};
use crate::protocol::{Request, Response};
use std::path::Path;
use std::time::Duration;

/// A loop that has not ticked for this long is wedged.
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
