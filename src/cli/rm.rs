//! `keel rm UNIT`: stop the task, remove its unit file and its state. A work directory that
//! holds files is kept (the daemon says where).

use super::{print_outcome, request, CliResult};
use crate::protocol::Request;
use std::path::Path;

pub fn run(state_dir: &Path, unit: &str) -> CliResult {
    print_outcome(request(
        state_dir,
        &Request::Remove {
            unit: unit.to_string(),
        },
        None,
    )?)
}
