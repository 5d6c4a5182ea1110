//! `keel check FILE.ron...`: validate unit files offline. Each error is printed as
//! `file:line:col: message` (every problem of a file, not just the first); the exit code is 1
//! if any file is bad.

use super::{CliError, CliResult};
use crate::fmt::printable;
use std::path::PathBuf;

pub fn run(files: &[PathBuf]) -> CliResult {
    let mut bad = 0;
    for file in files {
        match crate::unit::load_unit_file(file) {
            Ok((name, _, _)) => println!(
                "{}: ok (unit {name})",
                printable(&file.display().to_string())
            ),
            Err(first) => {
                bad += 1;
                // A readable file may hold several problems: report them all.
                let all = std::fs::read_to_string(file)
                    .ok()
                    .filter(|_| first.line > 0)
                    .and_then(|text| crate::unit::check_unit(file, &text).err())
                    .unwrap_or_else(|| vec![first]);
                for error in all {
                    // The message may quote the file: escaped.
                    eprintln!("{}", printable(&error.to_string()));
                }
            }
        }
    }
    if bad > 0 {
        return Err(CliError(format!(
            "{bad} of {} unit files invalid",
            files.len()
        )));
    }
    Ok(())
}
