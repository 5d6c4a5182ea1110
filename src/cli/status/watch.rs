//! `keel status --watch [SECS]`: the status redrawn in place every SECS. On a terminal each
//! frame is built whole, then written at once: cursor home, each line cleared to its end, the
//! rest of the screen cleared — nothing scrolls, nothing flickers; the cursor is hidden and
//! given back at the end. Into a pipe, frames follow each other, a blank line apart. A daemon
//! that is down is one line in the frame, and the next frame finds it again when it is back.
//! Ctrl-C (or SIGTERM, SIGHUP) ends it after the current frame; a second one at once.

use super::report::{fetch_report, render};
use crate::cli::format::{fit_visible, paint, Tone};
use crate::cli::{CliError, CliResult};
use crate::fmt::printable;
use crate::state::{now_ms, rfc3339};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A hung daemon must not freeze the screen for long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

const HIDE_CURSOR: &str = "\x1b[?25l";
const SHOW_CURSOR: &str = "\x1b[?25h";

pub fn run(
    state_dir: &Path,
    unit: Option<&str>,
    every: Duration,
    colour: bool,
    terminal: bool,
) -> CliResult {
    // An unknown unit is a mistake to say once, not a frame to redraw forever.
    if let Ok(Err(refused)) = fetch_report(state_dir, unit, REQUEST_TIMEOUT) {
        return Err(CliError(refused));
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // The first signal asks for a clean end; a second one while it is pending exits now.
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&stop))
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&stop)))
            .map_err(|e| CliError(format!("cannot handle signal {signal}: {e}")))?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if terminal {
        let _ = write!(out, "{HIDE_CURSOR}\x1b[2J");
    }
    let command = match unit {
        Some(unit) => format!("keel status {}", printable(unit)),
        None => "keel status".to_string(),
    };
    while !stop.load(Ordering::Relaxed) {
        let now = now_ms();
        // Messages name paths and units: escaped, as the report is by `render`.
        let body = match fetch_report(state_dir, unit, REQUEST_TIMEOUT) {
            Ok(Ok(report)) => render(&report, now, colour),
            Ok(Err(refused)) => format!("{}\n", paint(&printable(&refused), Tone::Bad, colour)),
            // What to do comes last in the message; the retry first, so a cut keeps it.
            Err(down) => format!(
                "trying again every {}: {}\n",
                crate::fmt::duration_precise(every),
                paint(&printable(&down.0), Tone::Bad, colour)
            ),
        };
        let header = format!(
            "{command} every {} · {} UTC · Ctrl-C quits",
            crate::fmt::duration_precise(every),
            &rfc3339(now)[11..19]
        );
        let screen = if terminal {
            use std::os::fd::AsFd;
            crate::sys::term::window_size(std::io::stdout().as_fd()).or(Some((24, 80)))
        } else {
            None
        };
        let frame = compose(&header, &body, screen);
        // The reader is gone (a closed pipe): nothing more to show.
        if out
            .write_all(frame.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            break;
        }
        sleep_unless(&stop, every);
    }
    if terminal {
        let _ = writeln!(out, "{SHOW_CURSOR}");
        let _ = out.flush();
    }
    Ok(())
}

/// Sleep for `period`, waking early when `stop` is set.
fn sleep_unless(stop: &AtomicBool, period: Duration) {
    let until = Instant::now() + period;
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// One frame. On a terminal of `(rows, columns)`: drawn from the top-left corner, each line cut
/// to the width and cleared to its end, at most `rows - 1` lines (the last row stays free so
/// that nothing scrolls; a cut frame says how much is hidden), the rest of the screen
/// cleared. Elsewhere (`None`): the lines, then a blank line.
pub fn compose(header: &str, body: &str, screen: Option<(usize, usize)>) -> String {
    let lines: Vec<&str> = std::iter::once(header).chain(body.lines()).collect();
    let Some((rows, columns)) = screen else {
        return format!("{}\n\n", lines.join("\n"));
    };
    let room = rows.saturating_sub(1).max(1);
    let mut frame = String::from("\x1b[H");
    let shown = if lines.len() > room {
        room.saturating_sub(1)
    } else {
        lines.len()
    };
    for line in &lines[..shown] {
        frame.push_str(&fit_visible(line, columns));
        frame.push_str("\x1b[K\n");
    }
    if shown < lines.len() {
        let more = format!(
            "… {} more lines (a taller window shows them)",
            lines.len() - shown
        );
        frame.push_str(&fit_visible(&more, columns));
        frame.push_str("\x1b[K\n");
    }
    frame.push_str("\x1b[J");
    frame
}

#[cfg(test)]
mod tests;
