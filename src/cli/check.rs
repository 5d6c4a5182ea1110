//! `keel check FILE.ron...`: validate unit files offline. Each error is printed as
//! `file:line:col: message` (every problem of a file, not just the first); the exit code is 1
//! if any file is bad.
//!
//! Beyond the rules every unit obeys, a writable path may not be, cover or lie inside keel's
//! state directory (`--state`, `$KEEL_STATE_DIR` or the default) or its default units
//! directory (`STATE/units`); the daemon checks its own at each start. A `"@name"` entry of
//! `sandbox.network` must name a list of the configuration (`--config`, or `STATE/keel.ron`),
//! as the daemon requires when it reads the unit; a configuration with an error is reported
//! (and fails the check) and that rule is then left out.
//!
//! A secret's file (`secrets: {"NAME": Secret(file: ...)}`) is checked as keel reads it: one
//! that is there but loose (group-writable, or anything for others), another user's, not a
//! regular file or not a one-line value is an error with the fix (`chmod 600 FILE`); one that
//! is not there yet is a warning (the task waits for it).
//!
//! Each `after` entry must name a unit — one of the files checked, a unit file beside one of
//! them, or one of the daemon's units directory (`--units`, default `STATE/units`) — and the
//! entries may not form a cycle.
//!
//! A `sandbox.user` this host does not have is a warning (the unit may be meant for another
//! machine; `keel add` refuses it, and a task whose user is missing waits, blocked).

use super::{CliError, CliResult};
use crate::fmt::printable;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub fn run(
    files: &[PathBuf],
    state_dir: &Path,
    config: &Path,
    daemon_units: Option<&Path>,
) -> CliResult {
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
    let mut bad = 0;
    let lists = network_lists(config);
    if let Err(error) = &lists {
        eprintln!("{}", printable(&error.to_string()));
    }
    let known = known_units(files, daemon_units.unwrap_or(&units_dir));
    let more = |name: &str, unit: &crate::unit::Unit| {
        let mut problems = secret_file_problems(unit).0;
        problems.extend(crate::unit::dependency_problems(name, unit, &known));
        problems.extend(crate::unit::keel_dir_problems(unit, &dirs));
        if let Ok(lists) = &lists {
            problems.extend(crate::unit::network_list_problems(unit, lists));
        }
        problems
    };
    for file in files {
        let checked = crate::unit::load_unit_file(file).and_then(|(name, unit, text)| {
            match crate::unit::check_unit_with(file, &text, |u| more(&name, u)) {
                Ok(_) => Ok((name, unit)),
                Err(mut errors) => Err(errors.remove(0)),
            }
        });
        match checked {
            Ok((name, unit)) => {
                println!(
                    "{}: ok (unit {name})",
                    printable(&file.display().to_string())
                );
                let user = missing_user_problem(&unit).map(|p| {
                    format!(
                        "{p} (on the host that runs it, the task waits, blocked, until it exists)"
                    )
                });
                for warning in secret_file_problems(&unit).1.into_iter().chain(user) {
                    eprintln!(
                        "{}: warning: {}",
                        printable(&file.display().to_string()),
                        printable(&warning)
                    );
                }
            }
            Err(first) => {
                bad += 1;
                // A readable file may hold several problems: report them all.
                let name = crate::unit::unit_name_of(file).unwrap_or_default();
                let all = std::fs::read_to_string(file)
                    .ok()
                    .filter(|_| first.line > 0)
                    .and_then(|text| {
                        crate::unit::check_unit_with(file, &text, |u| more(&name, u)).err()
                    })
                    .unwrap_or_else(|| vec![first]);
                for error in all {
                    // The message may quote the file: escaped.
                    eprintln!("{}", printable(&error.to_string()));
                }
            }
        }
    }
    if let Err(error) = &lists {
        return Err(CliError(format!(
            "{}: invalid, so \"@name\" entries went unchecked ({bad} of {} unit files invalid)",
            printable(&error.file.display().to_string()),
            files.len()
        )));
    }
    if bad > 0 {
        return Err(CliError(format!(
            "{bad} of {} unit files invalid",
            files.len()
        )));
    }
    Ok(())
}

/// The units an `after` entry may name, with their own `after` lists: the files checked, the
/// other unit files beside each of them, and the default units directory (`STATE/units`). A
/// unit file that does not parse still counts as a name (its own check reports it).
fn known_units(files: &[PathBuf], units_dir: &Path) -> BTreeMap<String, Vec<String>> {
    let after_of = |path: &Path| {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        crate::unit::parse_unit(path, &text)
            .map(|u| u.after)
            .unwrap_or_default()
    };
    let mut dirs: Vec<PathBuf> = files
        .iter()
        .map(|f| match f.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        })
        .collect();
    dirs.push(units_dir.to_path_buf());
    dirs.sort();
    dirs.dedup();
    let mut known = BTreeMap::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()) {
            if let Some(name) = crate::unit::unit_name_of(&path) {
                known.entry(name).or_insert_with(|| after_of(&path));
            }
        }
    }
    // The files checked win over a namesake elsewhere.
    for file in files {
        if let Some(name) = crate::unit::unit_name_of(file) {
            known.insert(name, after_of(file));
        }
    }
    known
}

/// The unit's secret files as keel would read them: the problems that refuse the unit (each
/// at its `secrets["NAME"].file`), and warnings: a file not there yet (the task waits for it),
/// or one this user cannot judge (another user runs `keel check` than the daemon: the owner
/// and the reading are the daemon's to check).
pub(super) fn secret_file_problems(
    unit: &crate::unit::Unit,
) -> (Vec<crate::unit::Problem>, Vec<String>) {
    use crate::secrets::SecretError;
    let root = nix::unistd::geteuid().is_root();
    let (mut problems, mut warnings) = (Vec::new(), Vec::new());
    for (name, secret) in &unit.secrets {
        let Some(file) = &secret.file else { continue };
        let at = crate::unit::FieldPath::default()
            .field("secrets")
            .key(name)
            .field("file");
        match crate::secrets::check_file(Path::new(file)) {
            Ok(()) => {}
            Err(error @ (SecretError::Missing(_) | SecretError::Unreadable { .. })) => {
                warnings.push(format!("{at}: {error} (until then the task waits)"));
            }
            Err(error @ SecretError::WrongOwner { .. }) if !root => {
                warnings.push(format!("{at}: {error} (if keel runs as this user)"));
            }
            Err(error) => problems.push(crate::unit::Problem {
                path: at,
                message: error.to_string(),
                also: Vec::new(),
            }),
        }
    }
    (problems, warnings)
}

/// A `sandbox.user` this host's `/etc/passwd` or `/etc/group` does not have, at
/// `sandbox.user`, with the fix: `keel add` refuses the unit, `keel check` warns (the unit
/// may be checked on another machine than the one that runs it).
pub(super) fn missing_user_problem(unit: &crate::unit::Unit) -> Option<crate::unit::Problem> {
    let spec = unit.sandbox.user.as_deref()?;
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let message = crate::sandbox::start::daemon::missing_user(spec, &passwd, &group)?;
    Some(crate::unit::Problem {
        path: crate::unit::FieldPath::default()
            .field("sandbox")
            .field("user"),
        message,
        also: Vec::new(),
    })
}

/// The named network lists of the configuration at `path` (none: no file).
fn network_lists(path: &Path) -> Result<BTreeMap<String, Vec<String>>, crate::unit::UnitError> {
    if std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(BTreeMap::new());
    }
    let text = crate::unit::read_ron_text(
        path,
        "the configuration is a file Config(...)",
        "the configuration",
    )?;
    let raw = crate::config::parse_config(path, &text)?;
    Ok(raw.network.lists)
}
