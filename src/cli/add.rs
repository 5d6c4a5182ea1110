//! `keel add FILE.ron`: validate locally (errors name the user's file), then let the daemon
//! install it atomically into its units directory.

use super::{print_outcome, request, CliError, CliResult};
use crate::protocol::Request;
use std::path::Path;
use std::time::Duration;

pub fn run(state_dir: &Path, file: &Path) -> CliResult {
    let (name, _unit, text) =
        crate::unit::load_unit_file(file).map_err(|e| CliError(e.to_string()))?;
    print_outcome(request(
        state_dir,
        &Request::Add { name, text },
        Some(Duration::from_secs(30)),
    )?)
}
