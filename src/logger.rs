//! A plain stderr logger for the `log` crate: one line per event, no colours, no noise.
//! `KEEL_LOG=debug|info|warn|error` sets the level (default info).

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::Write;

struct StderrLogger {
    prefix: &'static str,
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        };
        let time = crate::state::rfc3339(crate::state::now_ms());
        // One write per line so lines from several processes sharing a file do not interleave.
        let line = format!("{time} {} {level}: {}\n", self.prefix, record.args());
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
    let logger = Box::leak(Box::new(StderrLogger { prefix }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}
