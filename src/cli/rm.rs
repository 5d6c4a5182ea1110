//! `keel rm [--force] UNIT`: stop the task, remove its unit file and its state. A checkout
//! that holds uncommitted or unharvested work is kept, and the daemon says why (`--force`
//! removes it, harvesting first); so is a plain work directory that holds files.

use super::{print_outcome, request, CliResult};
use crate::protocol::Request;
use std::path::Path;

pub fn run(state_dir: &Path, unit: &str, force: bool) -> CliResult {
    print_outcome(request(
        state_dir,
        &Request::Remove {
            unit: unit.to_string(),
            force,
        },
        None,
    )?)
}
