//! A plain stderr logger for the `log` crate: one line per event, no colours, no noise.
//! `KEEL_LOG=debug|info|warn|error` sets the level (default info). When stderr is systemd's
//! journal (`JOURNAL_STREAM` names it), each line starts with its syslog priority (`<3>` …)
//! instead of a time stamp: the journal keeps its own, and `journalctl -p warning` works.

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

struct StderrLogger {
    prefix: &'static str,
}

/// Whether stderr is the journal: read at [`init`], again at [`stderr_replaced`].
static JOURNAL: AtomicBool = AtomicBool::new(false);

/// Say that fd 2 is another file now (a spare shim's stderr becomes `run/shim.log`): lines
/// take the form that file wants.
pub fn stderr_replaced() {
    JOURNAL.store(stderr_is_journal(), Ordering::Relaxed);
}

/// One log line: `<priority>prefix level: message` for the journal, else with a time stamp.
fn format_line(journal: bool, time: &str, prefix: &str, level: Level, message: &str) -> String {
    let (name, priority) = match level {
        Level::Error => ("error", 3),
        Level::Warn => ("warning", 4),
        Level::Info => ("info", 6),
        Level::Debug => ("debug", 7),
        Level::Trace => ("trace", 7),
    };
    if journal {
        format!("<{priority}>{prefix} {name}: {message}\n")
    } else {
        format!("{time} {prefix} {name}: {message}\n")
    }
}

/// Is stderr the journal stream systemd set up (`JOURNAL_STREAM=<dev>:<inode>`, systemd.exec(5))?
fn stderr_is_journal() -> bool {
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(stat) = nix::sys::stat::fstat(std::io::stderr()) else {
        return false;
    };
    stream == format!("{}:{}", stat.st_dev, stat.st_ino)
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let time = crate::state::rfc3339(crate::state::now_ms());
        // One write per line so lines from several processes sharing a file do not interleave.
        let line = format_line(
            JOURNAL.load(Ordering::Relaxed),
            &time,
            self.prefix,
            record.level(),
            &record.args().to_string(),
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Install the logger; `prefix` names the process kind (`daemon`, `shim`, `init`).
pub fn init(prefix: &'static str) {
    let level = match std::env::var("KEEL_LOG").as_deref() {
        Ok("debug") => LevelFilter::Debug,
        Ok("trace") => LevelFilter::Trace,
        Ok("warn") => LevelFilter::Warn,
        Ok("error") => LevelFilter::Error,
        Ok("off") => LevelFilter::Off,
        _ => LevelFilter::Info,
    };
    stderr_replaced();
    let logger = Box::leak(Box::new(StderrLogger { prefix }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}

#[cfg(test)]
mod tests;
