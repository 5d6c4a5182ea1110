//! Verbs that send one request and print the daemon's one-line answer: `start`, `stop`,
//! `restart`, `kill`, `pause`, `resume`, `reload`, `shutdown`.

use super::{print_outcome, request, CliResult};
use crate::protocol::Request;
use std::path::Path;

pub fn run(state_dir: &Path, req: Request) -> CliResult {
    // `stop` waits for the task to end (up to its stop timeout and the SIGKILL after it).
    print_outcome(request(state_dir, &req, None)?)
}
