//! Whole-file writes that a crash cannot tear: temp file, fsync, rename, directory fsync; and
//! the RON state files read and written through them.

use super::{crash_point, io_err, StateError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Write `bytes` to `path` atomically: temp file, fsync, rename, fsync the directory.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    replace_file(path, bytes, true, 0o600)
}

/// `bytes` in place of `path` by rename, without fsync, mode `mode` (as
/// [`write_ron_volatile`]): for files made again whenever they are missing or other (keel's
/// resolv.conf, 0644: sandboxes are shown it), or that matter only while the process that
/// reads them lives (a relay's spec).
pub fn replace_volatile(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateError> {
    replace_file(path, bytes, false, mode)
}

/// Write `bytes` to a temporary file beside `path` (`.<name>.tmp.<pid>`) and rename it over
/// `path`; `durable`: fsync the file before the rename and the directory after it.
fn replace_file(path: &Path, bytes: &[u8], durable: bool, mode: u32) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(bytes)?;
        if durable {
            file.sync_all()?;
            drop(file);
            crash_point("mid-write");
        }
        fs::rename(&tmp, path)?;
        if durable {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err(path))
}

/// Remove temporary files a crash left in `dir` (`.<name>.tmp.<pid>` of [`atomic_write`]).
/// Only for directories no live process writes to: the caller holds the instance lock.
pub fn remove_stale_temp_files(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.contains(".tmp.") {
            log::info!("removing {} left by a crash", entry.path().display());
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Serialize `value` and replace `path` with it by rename, without fsync: for records that
/// only matter while the process that wrote them is alive (a shim's identity, the spec it
/// reads at start). A power cut kills that process too, and the boot id then tells the next
/// daemon so; a process crash cannot tear them (rename is atomic). Saves two fsyncs on the
/// path of every start.
pub fn write_ron_volatile<T: Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    replace_file(path, to_ron(path, value)?.as_bytes(), false, 0o600)
}

/// Serialize `value` as pretty RON and write it atomically.
pub fn write_ron<T: Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    atomic_write(path, to_ron(path, value)?.as_bytes())
}

fn to_ron<T: Serialize>(path: &Path, value: &T) -> Result<String, StateError> {
    ron::ser::to_string_pretty(value, ron::ser::PrettyConfig::default()).map_err(|e| {
        StateError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    })
}

/// Read a RON state file. `Ok(None)` when it does not exist.
pub fn read_ron<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StateError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    ron::from_str(&text)
        .map(Some)
        .map_err(|e| StateError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests;
