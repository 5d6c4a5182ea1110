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
mod tests {
    use super::*;

    #[test]
    fn journal_lines_carry_the_priority_and_no_time() {
        let t = "2026-01-01T00:00:00.000Z";
        for (journal, level, line) in [
            (true, Level::Error, "<3>daemon error: m\n"),
            (true, Level::Warn, "<4>daemon warning: m\n"),
            (true, Level::Info, "<6>daemon info: m\n"),
            (true, Level::Debug, "<7>daemon debug: m\n"),
            (
                false,
                Level::Info,
                "2026-01-01T00:00:00.000Z daemon info: m\n",
            ),
        ] {
            assert_eq!(format_line(journal, t, "daemon", level, "m"), line);
        }
    }

    #[test]
    fn only_the_named_stream_is_the_journal() {
        // The test's stderr is not a journal stream; a JOURNAL_STREAM naming another file
        // (inherited from a parent whose stderr was the journal) does not make it one.
        let before = std::env::var_os("JOURNAL_STREAM");
        std::env::set_var("JOURNAL_STREAM", "1:1");
        assert!(!stderr_is_journal());
        let stat = nix::sys::stat::fstat(std::io::stderr()).unwrap();
        std::env::set_var("JOURNAL_STREAM", format!("{}:{}", stat.st_dev, stat.st_ino));
        assert!(stderr_is_journal());
        match before {
            Some(v) => std::env::set_var("JOURNAL_STREAM", v),
            None => std::env::remove_var("JOURNAL_STREAM"),
        }
    }
}
