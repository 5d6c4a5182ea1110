//! `keel metrics`: the daemon's figures in the Prometheus text format (version 0.0.4), as
//! `keel daemon --metrics ADDR` serves them (docs/metrics.md). For a node exporter's
//! textfile collector, a cron job, or a look by hand.

use super::{request, CliError, CliResult};
use crate::protocol::{Request, Response};
use std::path::Path;
use std::time::Duration;

pub fn run(state_dir: &Path) -> CliResult {
    match request(state_dir, &Request::Metrics, Some(Duration::from_secs(10)))? {
        Response::Metrics { text } => {
            // The format's own escaping: printed as is.
            use std::io::Write;
            std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(|e| CliError(format!("cannot write the metrics: {e}")))
        }
        Response::Error { message } => Err(CliError(message)),
        other => Err(CliError(format!("unexpected answer: {other:?}"))),
    }
}
