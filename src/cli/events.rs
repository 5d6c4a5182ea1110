//! `keel events [-f] [-n N] [--json] [UNIT]`: the journal of transitions (`events.jsonl`, and
//! the rotated `events.jsonl.1` before it), read straight from the state directory. Lines are
//! printed escaped (`--json`: the same JSON, its invisible characters as `\u` escapes).

use super::{CliError, CliResult};
use crate::state::{rotated_journal_path, Event, StateDir};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

pub struct Options<'a> {
    pub unit: Option<&'a str>,
    pub json: bool,
    pub follow: bool,
    /// Only the last N events (default: all; 10 with `-f`).
    pub lines: Option<usize>,
}

pub fn run(state_dir: &Path, options: &Options<'_>) -> CliResult {
    let path = StateDir::new(state_dir).events_path();
    if !path.exists() {
        return Err(CliError(format!(
            "no journal at {} (has a daemon ever run with this state directory?)",
            path.display()
        )));
    }
    let wanted = options
        .lines
        .unwrap_or(if options.follow { 10 } else { usize::MAX });
    let mut last: VecDeque<String> = VecDeque::new();
    for file in [rotated_journal_path(&path), path.clone()] {
        let Ok(f) = std::fs::File::open(&file) else {
            continue;
        };
        for line in BufReader::new(f).lines().map_while(Result::ok) {
            if let Some(text) = render(&line, options) {
                if last.len() == wanted {
                    last.pop_front();
                }
                if wanted > 0 {
                    last.push_back(text);
                }
            }
        }
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for text in last {
        if writeln!(out, "{text}").is_err() {
            return Ok(());
        }
    }
    let _ = out.flush();
    if options.follow {
        follow(&path, options, &mut out)?;
    }
    Ok(())
}

/// One journal line as printed, or `None` when filtered out or unreadable.
fn render(line: &str, options: &Options<'_>) -> Option<String> {
    let event = serde_json::from_str::<Event>(line.trim_end()).ok()?;
    if options.unit.is_some_and(|u| u != event.unit) {
        return None;
    }
    Some(if options.json {
        crate::cli::format::json_escaped(line.trim_end()).into_owned()
    } else {
        human(&event)
    })
}

/// Print events appended from now on, across rotations (a new inode: start the new file
/// from its top). A partial last line is the daemon mid-append: wait for its end.
fn follow(path: &Path, options: &Options<'_>, out: &mut impl Write) -> CliResult {
    let open = || -> Option<(BufReader<std::fs::File>, u64)> {
        let mut file = std::fs::File::open(path).ok()?;
        let inode = file.metadata().ok()?.ino();
        file.seek(SeekFrom::End(0)).ok()?;
        Some((BufReader::new(file), inode))
    };
    let mut current = open();
    let mut pending = String::new();
    loop {
        if let Some((reader, _)) = current.as_mut() {
            loop {
                match reader.read_line(&mut pending) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if pending.ends_with('\n') => {
                        if let Some(text) = render(&pending, options) {
                            writeln!(out, "{text}")
                                .and_then(|_| out.flush())
                                .map_err(|_| CliError("output closed".into()))?;
                        }
                        pending.clear();
                    }
                    Ok(_) => break,
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        let inode_now = std::fs::metadata(path).map(|m| m.ino()).ok();
        if inode_now != current.as_ref().map(|(_, inode)| *inode) {
            // Rotated: read the new file from its beginning.
            current = std::fs::File::open(path).ok().and_then(|file| {
                let inode = file.metadata().ok()?.ino();
                Some((BufReader::new(file), inode))
            });
            pending.clear();
        }
    }
}

/// `2026-11-30T05:12:03.123Z  flaky  #2  backoff  restart in 2.0s`; control and invisible
/// characters of the detail (a task's note, a path) escaped ([`crate::fmt::printable`]).
pub fn human(event: &Event) -> String {
    let unit = if event.unit.is_empty() {
        "-"
    } else {
        &event.unit
    };
    let mut text = format!(
        "{}  {:<20} #{:<3} {}",
        event.time, unit, event.attempt, event.event
    );
    if !event.detail.is_empty() {
        text.push_str("  ");
        text.push_str(&event.detail);
    }
    crate::fmt::printable(&text).into_owned()
}
