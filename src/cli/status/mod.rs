//! `keel status [UNIT] [--json] [--watch [SECS]] [--color WHEN]`: one line a task, read at a
//! glance (a state's colour says whether it needs a person); with UNIT, that task in full
//! ([`detail`]); `--watch` redraws it ([`watch`]); `--json` is the stable [`crate::protocol::StatusReport`].
//! What a task wrote is shown escaped ([`printable`]): it cannot act on the terminal.
//!
//! The views depend one way: `watch` → `report` (fetch and render) → `detail`, `table`,
//! `printable`; `detail` → `table` (its width and tones).

pub mod detail;
pub mod printable;
pub mod report;
pub mod table;
pub mod watch;

pub use report::{fetch, fetch_report, render};

use super::{CliError, CliResult};
use crate::state::now_ms;
use std::path::Path;
use std::time::Duration;

pub struct Options<'a> {
    pub unit: Option<&'a str>,
    pub json: bool,
    /// `--watch`: redraw every this often.
    pub watch: Option<Duration>,
    /// `--color`: `always`, `never` or `auto`.
    pub colour: &'a str,
}

pub fn run(state_dir: &Path, options: &Options<'_>) -> CliResult {
    use std::io::IsTerminal;
    let terminal = std::io::stdout().is_terminal();
    let colour = super::format::use_colour(
        options.colour,
        terminal,
        std::env::var_os("NO_COLOR").as_deref(),
    );
    if let Some(every) = options.watch {
        return watch::run(state_dir, options.unit, every, colour, terminal);
    }
    let report = fetch(state_dir, options.unit, Duration::from_secs(30))?;
    if options.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| CliError(e.to_string()))?;
        println!("{}", super::format::json_escaped(&json));
    } else {
        print!("{}", render(&report, now_ms(), colour));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
