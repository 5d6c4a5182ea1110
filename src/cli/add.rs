//! `keel add FILE.ron`: validate locally (errors name the user's file), then let the daemon
//! install it atomically into its units directory.

use super::{print_outcome, request, CliError, CliResult};
use crate::protocol::Request;
use std::path::Path;
use std::time::Duration;

pub fn run(state_dir: &Path, file: &Path) -> CliResult {
    let (name, unit, text) =
        crate::unit::load_unit_file(file).map_err(|e| CliError(e.to_string()))?;
    // A secret file that is there but loose, or another user's: refused with the fix; one
    // not there yet is a warning (the task waits for it).
    let (mut refused, warnings) = super::check::secret_file_problems(&unit);
    // A `sandbox.user` this host does not have: every start would wait for it; refused now,
    // with the fix (`keel check` only warns: the unit may be meant for another host).
    refused.extend(super::check::missing_user_problem(&unit));
    if !refused.is_empty() {
        let errors = crate::unit::check_unit_with(file, &text, |_| refused.clone())
            .err()
            .unwrap_or_default();
        let lines: Vec<String> = errors
            .iter()
            .map(|e| crate::fmt::printable(&e.to_string()).into_owned())
            .collect();
        return Err(CliError(lines.join("\n")));
    }
    for warning in warnings {
        eprintln!(
            "{}: warning: {}",
            crate::fmt::printable(&file.display().to_string()),
            crate::fmt::printable(&warning)
        );
    }
    print_outcome(request(
        state_dir,
        &Request::Add { name, text },
        Some(Duration::from_secs(30)),
    )?)
}
