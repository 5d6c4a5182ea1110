//! `keel check FILE.ron...`: validate unit files offline. Each error is printed as
//! `file:line:col: message`; the exit code is 1 if any file is bad.

use super::{CliError, CliResult};
use std::path::PathBuf;

pub fn run(files: &[PathBuf]) -> CliResult {
    let mut bad = 0;
    for file in files {
        match crate::unit::load_unit_file(file) {
            Ok((name, _, _)) => println!("{}: ok (unit {name})", file.display()),
            Err(e) => {
                eprintln!("{e}");
                bad += 1;
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
