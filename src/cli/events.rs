//! `keel events [-f] [--json] [UNIT]`: the journal of transitions (`events.jsonl`), read
//! straight from the state directory.

use super::{CliError, CliResult};
use crate::state::{Event, StateDir};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::Duration;

pub fn run(state_dir: &Path, unit: Option<&str>, json: bool, follow: bool) -> CliResult {
    let path = StateDir::new(state_dir).events_path();
    let file = std::fs::File::open(&path).map_err(|e| {
        CliError(format!(
            "cannot read the journal {}: {e} (has a daemon ever run with this state directory?)",
            path.display()
        ))
    })?;
    let mut reader = BufReader::new(file);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| CliError(format!("{}: {e}", path.display())))?;
        if n == 0 || !line.ends_with('\n') {
            if !follow {
                return Ok(());
            }
            // A partial line is the writer mid-append: wait for the rest of it.
            if n > 0 {
                let mut rest = String::new();
                while !rest.ends_with('\n') {
                    std::thread::sleep(Duration::from_millis(100));
                    let _ = reader.read_line(&mut rest);
                }
                line.push_str(&rest);
            } else {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        }
        let Ok(event) = serde_json::from_str::<Event>(line.trim_end()) else {
            continue;
        };
        if unit.is_some_and(|u| u != event.unit) {
            continue;
        }
        let text = if json {
            line.trim_end().to_string()
        } else {
            human(&event)
        };
        if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
            return Ok(());
        }
    }
}

/// `2026-11-30T05:12:03.123Z  flaky  #2  backoff  restart in 2.0s`
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
    text
}
