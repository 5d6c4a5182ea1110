//! `keel check FILE.ron...`: validate unit files offline. Each error is printed as
//! `file:line:col: message` (every problem of a file, not just the first); the exit code is 1
//! if any file is bad.
//!
//! Beyond the rules every unit obeys, a writable path may not be, cover or lie inside keel's
//! state directory (`--state`, `$KEEL_STATE_DIR` or the default) or its default units
//! directory (`STATE/units`); the daemon checks its own at each start.

use super::{CliError, CliResult};
use crate::fmt::printable;
use std::path::{Path, PathBuf};

pub fn run(files: &[PathBuf], state_dir: &Path) -> CliResult {
    let units_dir = state_dir.join("units");
    // The real directories as well: a writable path must be a real path (binds refuse
    // symlinks), and the state directory may be reached through one.
    let mut dirs: Vec<(&str, PathBuf)> = Vec::new();
    for (what, dir) in [
        ("state directory", state_dir),
        ("units directory", &units_dir),
    ] {
        dirs.push((what, dir.to_path_buf()));
        if let Ok(real) = std::fs::canonicalize(dir) {
            dirs.push((what, real));
        }
    }
    let dirs: Vec<(&str, &Path)> = dirs.iter().map(|(w, d)| (*w, d.as_path())).collect();
    let more = |unit: &crate::unit::Unit| crate::unit::keel_dir_problems(unit, &dirs);
    let mut bad = 0;
    for file in files {
        let checked = crate::unit::load_unit_file(file).and_then(|(name, _, text)| {
            match crate::unit::check_unit_with(file, &text, more) {
                Ok(_) => Ok(name),
                Err(mut errors) => Err(errors.remove(0)),
            }
        });
        match checked {
            Ok(name) => println!(
                "{}: ok (unit {name})",
                printable(&file.display().to_string())
            ),
            Err(first) => {
                bad += 1;
                // A readable file may hold several problems: report them all.
                let all = std::fs::read_to_string(file)
                    .ok()
                    .filter(|_| first.line > 0)
                    .and_then(|text| crate::unit::check_unit_with(file, &text, more).err())
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
