//! `keel logs [-f] [-n N] [--raw] UNIT`: the task's captured stdout/stderr, read straight from
//! `tasks/<unit>/run/` (works with the daemon down: the shim writes these files, not the
//! daemon). Into a pipe the output is the task's as it wrote it (tools read it); on a terminal
//! every control character but newline and tab, and every invisible format character, is
//! shown escaped ([`crate::fmt::printable`]) — what a task printed cannot retitle the
//! terminal, move its cursor or hide a line — unless `--raw` asks for the bytes.

use super::{CliError, CliResult};
use crate::fmt::{printable_bytes, printable_keeping};
use crate::sandbox::spec::output_log_path;
use std::borrow::Cow;
use std::io::{IsTerminal, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

pub struct Options {
    /// Only the last N lines (default: all; 10 with `-f`).
    pub lines: Option<usize>,
    pub follow: bool,
    /// `--raw`: the bytes as they are, even on a terminal.
    pub raw: bool,
}

/// What a terminal is shown of a log as it is: newlines and tabs lay it out.
const KEPT: [char; 2] = ['\n', '\t'];

pub fn run(state_dir: &Path, unit: &str, options: &Options) -> CliResult {
    let dirs = super::known_task(state_dir, unit)?;
    let path = output_log_path(&dirs.run_dir(unit));
    let wanted = options
        .lines
        .unwrap_or(if options.follow { 10 } else { usize::MAX });
    let stdout = std::io::stdout();
    let escape = !options.raw && stdout.is_terminal();
    let mut out = stdout.lock();
    for line in crate::sandbox::logs::tail_lines(&path, wanted) {
        let line = match escape {
            true => printable_keeping(&line, &KEPT),
            false => Cow::Borrowed(line.as_str()),
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(());
        }
    }
    let _ = out.flush();
    if options.follow {
        follow_file(&path, &mut Shown::new(escape), &mut out)?;
    }
    Ok(())
}

/// The followed log as written out: as it is, or escaped for a terminal. Escaped, a
/// character cut between two reads waits for its end (at most 3 bytes).
pub struct Shown {
    escape: bool,
    pending: Vec<u8>,
}

impl Shown {
    pub fn new(escape: bool) -> Self {
        Shown {
            escape,
            pending: Vec::new(),
        }
    }

    /// The bytes to write for `bytes`, read next from the log.
    pub fn bytes<'a>(&mut self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        if !self.escape {
            return Cow::Borrowed(bytes);
        }
        self.pending.extend_from_slice(bytes);
        let whole = self.pending.len() - incomplete_tail(&self.pending);
        let shown = printable_bytes(&self.pending[..whole], &KEPT);
        self.pending.drain(..whole);
        Cow::Owned(shown.into_bytes())
    }

    /// The log was rotated: a character cut at the end of the old file never ends.
    pub fn restart(&mut self) -> Vec<u8> {
        printable_bytes(&std::mem::take(&mut self.pending), &KEPT).into_bytes()
    }
}

/// How many bytes at the end of `bytes` begin a character that is not complete yet.
fn incomplete_tail(bytes: &[u8]) -> usize {
    let Some(last) = bytes.utf8_chunks().last() else {
        return 0;
    };
    match std::str::from_utf8(last.invalid()) {
        Err(e) if e.error_len().is_none() => last.invalid().len(),
        _ => 0,
    }
}

/// Print what is appended to `path`, following it across rotations (a new inode or a
/// shorter file means it was rotated: start again from the top of the new one).
pub fn follow_file(path: &Path, shown: &mut Shown, out: &mut impl Write) -> CliResult {
    follow_until(path, true, shown, out, &mut || false)
}

/// [`follow_file`] from the end of the file (`from_end`) or its start, until `done` says so
/// (asked between reads; what was written before it said so is printed first). A file not
/// there yet is read from its start once it is.
pub fn follow_until(
    path: &Path,
    from_end: bool,
    shown: &mut Shown,
    out: &mut impl Write,
    done: &mut dyn FnMut() -> bool,
) -> CliResult {
    let open = |p: &Path| std::fs::File::open(p).ok();
    let mut file = open(path);
    let mut position = match from_end {
        true => file.as_mut().and_then(|f| f.seek(SeekFrom::End(0)).ok()),
        false => None,
    }
    .unwrap_or(0);
    let mut inode = std::fs::metadata(path).map(|m| m.ino()).unwrap_or(0);
    let mut buf = vec![0u8; 64 * 1024];
    let closed = |_| CliError("output closed".into());
    loop {
        let last = done();
        if file.is_none() {
            file = open(path);
            inode = std::fs::metadata(path).map(|m| m.ino()).unwrap_or(0);
        }
        if let Some(f) = file.as_mut() {
            loop {
                match f.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        position += n as u64;
                        out.write_all(&shown.bytes(&buf[..n]))
                            .and_then(|_| out.flush())
                            .map_err(closed)?;
                    }
                }
            }
        }
        if last {
            out.write_all(&shown.restart()).map_err(closed)?;
            return out.flush().map_err(closed);
        }
        std::thread::sleep(Duration::from_millis(200));
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.ino() != inode || meta.len() < position {
                out.write_all(&shown.restart()).map_err(closed)?;
                inode = meta.ino();
                file = open(path);
                position = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests;
