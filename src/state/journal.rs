//! The journal, `events.jsonl`: one JSON line per transition, appended, synced once per loop
//! round, rotated past a size.

use super::{io_err, StateError};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// One line of `events.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub ts_ms: u64,
    pub unit: String,
    pub attempt: u32,
    pub generation: u64,
    /// The transition or happening: `queued`, `starting`, `running`, `exited`, `backoff`, …
    pub event: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// The append-only journal of transitions.
pub struct Journal {
    path: PathBuf,
    file: File,
    dirty: bool,
    size: u64,
}

/// The journal is rotated to `events.jsonl.1` (replacing the previous one) past this size.
pub const JOURNAL_MAX_BYTES: u64 = 32 << 20;

/// The rotated journal beside `path`.
pub fn rotated_journal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

impl Journal {
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(io_err(path))?;
        // A line torn by a power cut must not swallow the next event: end it.
        if Self::ends_mid_line(&mut file).map_err(io_err(path))? {
            file.write_all(b"\n").map_err(io_err(path))?;
        }
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            dirty: false,
            size,
        })
    }

    fn ends_mid_line(file: &mut File) -> io::Result<bool> {
        use std::io::{Read, Seek, SeekFrom};
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(false);
        }
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        Ok(last[0] != b'\n')
    }

    /// Past [`JOURNAL_MAX_BYTES`], start a new file (the old one stays as `events.jsonl.1`).
    fn rotate_if_full(&mut self) -> Result<(), StateError> {
        if self.size < JOURNAL_MAX_BYTES {
            return Ok(());
        }
        let _ = self.file.sync_data();
        fs::rename(&self.path, rotated_journal_path(&self.path)).map_err(io_err(&self.path))?;
        *self = Journal::open(&self.path)?;
        Ok(())
    }

    /// Append one event as one line. [`Journal::sync`] makes it durable: the daemon syncs
    /// once per loop round, so a burst of transitions costs one fdatasync, not one each.
    pub fn append(&mut self, event: &Event) -> Result<(), StateError> {
        let mut line = serde_json::to_string(event).map_err(|e| StateError::Parse {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        line.push('\n');
        self.rotate_if_full()?;
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            // A line cut short (a full disk mid-write) would run into the next one: take it
            // back. Truncating frees space, so it works on a full disk.
            let _ = self.file.set_len(self.size);
            return Err(io_err(&self.path)(e));
        }
        self.size += line.len() as u64;
        self.dirty = true;
        Ok(())
    }

    /// fdatasync what was appended since the last sync.
    pub fn sync(&mut self) -> Result<(), StateError> {
        if !self.dirty {
            return Ok(());
        }
        self.dirty = false;
        self.file.sync_data().map_err(io_err(&self.path))
    }
}

/// Format unix milliseconds as RFC 3339 UTC (`2026-11-30T05:12:03.123Z`).
pub fn rfc3339(ts_ms: u64) -> String {
    let secs = ts_ms / 1000;
    let millis = ts_ms % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
