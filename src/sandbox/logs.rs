//! A task's captured output: `run/output.log`, rotated to `output.log.1` … `output.log.N`.
//!
//! The shim writes with [`LogWriter`], which never blocks on anything but the write itself and
//! never fails: bytes it cannot write (disk full, I/O error) are counted and dropped, and a
//! `[keel: N bytes of output dropped: <reason>]` line notes the gap once writing works again.
//! `keel logs` reads with [`tail_lines`], across the current and the rotated files.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::sandbox::spec::output_log_path;

/// The output log of a running task.
pub struct LogWriter {
    path: PathBuf,
    file: Option<File>,
    size: u64,
    max_bytes: u64,
    keep: u32,
    at_line_start: bool,
    /// Dropped since the last note was written, and why.
    pending_drop: u64,
    drop_reason: String,
    total_dropped: u64,
    last_warning: Option<String>,
}

/// What to do with the next piece of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Write this many bytes to the current file.
    Write(usize),
    /// Rotate first: the data does not fit and the current file is not empty.
    Rotate,
}

/// Decide how much of `data` goes into a file that holds `size` bytes, capped at `max_bytes`
/// (0 = no cap). Prefers cutting after a newline so that lines stay whole in one file; a line
/// longer than the cap is cut at the cap. Every `Write(n)` has n ≥ 1 when `data` is not empty.
pub fn plan_chunk(size: u64, max_bytes: u64, data: &[u8]) -> Step {
    if max_bytes == 0 || size.saturating_add(data.len() as u64) <= max_bytes {
        return Step::Write(data.len());
    }
    let room = max_bytes.saturating_sub(size).min(data.len() as u64) as usize;
    if let Some(newline) = data[..room].iter().rposition(|&b| b == b'\n') {
        return Step::Write(newline + 1);
    }
    if size == 0 {
        // One line longer than a whole file: cut it.
        return Step::Write(room.max(1));
    }
    Step::Rotate
}

/// `output.log.<n>` next to `output.log`.
pub fn rotated_path(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

impl LogWriter {
    /// Open (append to) `run_dir/output.log`. Rotated files beyond `keep` (left by an older
    /// setting) are removed.
    pub fn open(run_dir: &Path, max_bytes: u64, keep: u32) -> io::Result<LogWriter> {
        let path = output_log_path(run_dir);
        let file = open_append(&path)?;
        let size = file.metadata()?.len();
        let at_line_start = size == 0 || {
            let mut last = [0u8; 1];
            file.read_exact_at(&mut last, size - 1).is_err() || last[0] == b'\n'
        };
        let mut n = keep + 1;
        while fs::remove_file(rotated_path(&path, n)).is_ok() {
            n += 1;
        }
        Ok(LogWriter {
            path,
            file: Some(file),
            size,
            max_bytes,
            keep,
            at_line_start,
            pending_drop: 0,
            drop_reason: String::new(),
            total_dropped: 0,
            last_warning: None,
        })
    }

    /// The path of the current file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes dropped so far because they could not be written.
    pub fn dropped_bytes(&self) -> u64 {
        self.total_dropped
    }

    /// Append `data`, rotating as needed. Never panics and never returns an error: what cannot
    /// be written is counted as dropped.
    pub fn write(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.pending_drop > 0 {
            let mut note = Vec::new();
            if !self.at_line_start {
                note.push(b'\n');
            }
            note.extend_from_slice(
                format!(
                    "[keel: {} bytes of output dropped: {}]\n",
                    self.pending_drop, self.drop_reason
                )
                .as_bytes(),
            );
            match self.put(&note) {
                Ok(()) => {
                    log::warn!(
                        "{}: {} bytes of output were dropped ({})",
                        self.path.display(),
                        self.pending_drop,
                        self.drop_reason
                    );
                    self.pending_drop = 0;
                }
                Err((_, error)) => {
                    // Still failing: the note itself is not counted as dropped output.
                    self.drop(data.len(), &error);
                    return;
                }
            }
        }
        if let Err((unwritten, error)) = self.put(data) {
            self.drop(unwritten, &error);
        }
    }

    fn drop(&mut self, bytes: usize, error: &io::Error) {
        self.pending_drop += bytes as u64;
        self.total_dropped += bytes as u64;
        self.drop_reason = describe(error);
        self.warn_once(format!(
            "cannot write {}: {}; dropping output",
            self.path.display(),
            self.drop_reason
        ));
    }

    fn warn_once(&mut self, message: String) {
        if self.last_warning.as_deref() != Some(message.as_str()) {
            log::warn!("{message}");
            self.last_warning = Some(message);
        }
    }

    /// Write all of `data` with rotation. On failure: how many bytes were not written.
    fn put(&mut self, data: &[u8]) -> Result<(), (usize, io::Error)> {
        let mut rest = data;
        let mut may_rotate = true;
        while !rest.is_empty() {
            if self.file.is_none() {
                self.reopen().map_err(|e| (rest.len(), e))?;
            }
            let step = if may_rotate {
                plan_chunk(self.size, self.max_bytes, rest)
            } else {
                Step::Write(rest.len())
            };
            match step {
                Step::Rotate => {
                    if let Err(error) = self.rotate() {
                        // Keep the output rather than the cap; try again at the next write.
                        self.warn_once(format!(
                            "cannot rotate {}: {}",
                            self.path.display(),
                            describe(&error)
                        ));
                        may_rotate = false;
                    }
                }
                Step::Write(n) => {
                    let written = self.write_raw(&rest[..n]);
                    if let Err(error) = written.1 {
                        return Err((rest.len() - written.0, error));
                    }
                    rest = &rest[n..];
                }
            }
        }
        Ok(())
    }

    /// write(2) until done or an error: (bytes written, outcome). After an error the file is
    /// closed, to be reopened at the next write.
    fn write_raw(&mut self, data: &[u8]) -> (usize, io::Result<()>) {
        let Some(file) = self.file.as_mut() else {
            return (0, Err(io::Error::from(io::ErrorKind::NotConnected)));
        };
        let mut done = 0;
        let outcome = loop {
            if done == data.len() {
                break Ok(());
            }
            match file.write(&data[done..]) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.size += done as u64;
        if done > 0 {
            self.at_line_start = data[done - 1] == b'\n';
        }
        if outcome.is_err() {
            self.file = None;
        } else {
            self.last_warning = None;
        }
        (done, outcome)
    }

    fn reopen(&mut self) -> io::Result<()> {
        let file = open_append(&self.path)?;
        self.size = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    /// `output.log` → `.1` → … → `.keep` (the oldest falls off); a fresh `output.log`.
    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        let result = if self.keep == 0 {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&self.path)
                .map(drop)
        } else {
            (1..self.keep)
                .rev()
                .try_for_each(|n| {
                    match fs::rename(rotated_path(&self.path, n), rotated_path(&self.path, n + 1)) {
                        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                        _ => Ok(()),
                    }
                })
                .and_then(|()| fs::rename(&self.path, rotated_path(&self.path, 1)))
        };
        // Whatever happened, write to what is now at `path`.
        let reopened = self.reopen();
        result.and(reopened)
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

/// An io::Error without the "(os error N)" suffix.
fn describe(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(errno) => nix::errno::Errno::from_raw(errno).desc().to_string(),
        None => error.to_string(),
    }
}

/// The last `n` lines of the task's output, oldest first, read backwards across `output.log`
/// and its rotated files (`.1`, `.2`, … up to the first one missing). A line split across a
/// rotation is joined again; bytes that are not UTF-8 are replaced.
pub fn tail_lines(path: &Path, n: usize) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    // Newest first.
    let mut files = vec![path.to_path_buf()];
    let mut k = 1;
    loop {
        let rotated = rotated_path(path, k);
        if !rotated.exists() {
            break;
        }
        files.push(rotated);
        k += 1;
    }

    const BLOCK: u64 = 64 * 1024;
    let mut blocks: Vec<Vec<u8>> = Vec::new(); // newest first
    let mut newlines = 0usize;
    let mut seen_any = false;
    'files: for file_path in &files {
        let Ok(file) = File::open(file_path) else {
            continue;
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            continue;
        };
        let mut end = len;
        while end > 0 {
            let start = end.saturating_sub(BLOCK);
            let mut block = vec![0u8; (end - start) as usize];
            if file.read_exact_at(&mut block, start).is_err() {
                break;
            }
            let mut counted = &block[..];
            if !seen_any {
                // A newline that ends the whole stream does not start another line.
                if counted.last() == Some(&b'\n') {
                    counted = &counted[..counted.len() - 1];
                }
                seen_any = true;
            }
            newlines += counted.iter().filter(|&&b| b == b'\n').count();
            blocks.push(block);
            end = start;
            if newlines >= n {
                break 'files;
            }
        }
    }

    let mut stream = Vec::with_capacity(blocks.iter().map(Vec::len).sum());
    for block in blocks.iter().rev() {
        stream.extend_from_slice(block);
    }
    if stream.last() == Some(&b'\n') {
        stream.pop();
    }
    if stream.is_empty() && !seen_any {
        return Vec::new();
    }
    let lines: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    let skip = lines.len().saturating_sub(n);
    lines[skip..]
        .iter()
        .map(|line| String::from_utf8_lossy(line).into_owned())
        .collect()
}

#[cfg(test)]
mod tests;
