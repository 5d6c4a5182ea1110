//! Asking the daemon for its status, and rendering the answer: the table, or one task in full.

use super::{detail, printable, table};
use crate::cli::{request, CliError};
use crate::protocol::{Request, Response, StatusReport};
use std::path::Path;
use std::time::Duration;

/// One status request (`unit`: that task in full), answered within `timeout`.
pub fn fetch(
    state_dir: &Path,
    unit: Option<&str>,
    timeout: Duration,
) -> Result<StatusReport, CliError> {
    fetch_report(state_dir, unit, timeout)?.map_err(CliError)
}

/// [`fetch`], telling a daemon that cannot be reached (the outer error) from one that answers
/// with a refusal (the inner one: an unknown unit).
pub fn fetch_report(
    state_dir: &Path,
    unit: Option<&str>,
    timeout: Duration,
) -> Result<Result<StatusReport, String>, CliError> {
    let response = request(
        state_dir,
        &Request::Status {
            unit: unit.map(str::to_string),
        },
        Some(timeout),
    )?;
    match response {
        Response::Status(report) => Ok(Ok(report)),
        Response::Error { message } => Ok(Err(message)),
        other => Err(CliError(format!("unexpected answer: {other:?}"))),
    }
}

/// The table, or one task in full when the report holds its detail; every string of the
/// report escaped ([`printable::escaped`]).
pub fn render(report: &StatusReport, now: u64, colour: bool) -> String {
    let report = &printable::escaped(report);
    if let [task] = report.tasks.as_slice() {
        if let Some(detail) = &task.detail {
            return detail::render(task, detail, now, colour);
        }
    }
    table::render_table(report, now, colour)
}
