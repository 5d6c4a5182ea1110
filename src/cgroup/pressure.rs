//! Pressure stall information (PSI, Documentation/accounting/psi.rst): the share of the last
//! 10 s in which some of keel's tasks were stalled for want of CPU, memory or I/O — what the
//! queue's admission reads ([`crate::daemon::queue`]).
//!
//! Read from keel's `tasks/` directory in the v2 hierarchy (`cpu.pressure`, `memory.pressure`,
//! `io.pressure`), on pure v2 hosts and on hybrid hosts alike: PSI accounts each task to its
//! cgroup in the unified hierarchy whether or not a controller is enabled there, so the v2
//! mount of a hybrid host has the tree's own figures (measured on a hybrid host, kernel 6.18:
//! three busy loops outside the tree left its `cpu.pressure` at 0.00 while the host's read
//! 52.80; three inside it on the 2 CPUs raised it to 71.24 in 8 s). They count keel's tasks
//! stalled, whatever stalls them: the host's other work included. Only where
//! the tree's file is missing or unreadable (a kernel without cgroup PSI, `cgroup.pressure`
//! turned off) the host-wide `/proc/pressure/<resource>` stands in, and says so
//! ([`PressureSource::Host`]).
//!
//! Each read is one small procfs/cgroupfs file: cheap enough for the daemon's loop.

use super::CgroupFs;
use std::path::Path;

/// The host-wide figures, where the tree's are missing.
pub const HOST_PRESSURE_DIR: &str = "/proc/pressure";

/// Where a figure was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PressureSource {
    /// keel's `tasks/` in the v2 hierarchy: its own tasks only.
    Tree,
    /// `/proc/pressure`: the whole host.
    Host,
}

/// One resource's `some avg10`, in hundredths of a percent (63.12% → 6312).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PressureReading {
    pub some_avg10: u32,
    pub source: PressureSource,
}

/// The three figures; `None` for one that could be read from neither place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreePressure {
    pub cpu: Option<PressureReading>,
    pub memory: Option<PressureReading>,
    pub io: Option<PressureReading>,
}

/// `some avg10` of a PSI file (`some avg10=63.12 avg60=… total=…`), in hundredths of a
/// percent. Decimal arithmetic: the kernel prints two decimals.
pub fn parse_some_avg10(text: &str) -> Option<u32> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let value = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("avg10="))?;
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    if whole.is_empty() || fraction.len() > 2 {
        return None;
    }
    let whole: u32 = whole.parse().ok()?;
    let hundredths: u32 = match fraction.len() {
        0 => 0,
        1 => fraction.parse::<u32>().ok()? * 10,
        _ => fraction.parse().ok()?,
    };
    let centi = whole.checked_mul(100)?.checked_add(hundredths)?;
    (centi <= 10_000).then_some(centi)
}

/// The figures of `tasks_dir` (keel's `tasks/` in the v2 hierarchy), each from
/// `host_dir` (`/proc/pressure`) where the tree's file cannot be read.
pub(super) fn read(fs: &dyn CgroupFs, tasks_dir: &Path, host_dir: &Path) -> TreePressure {
    let one = |resource: &str| {
        let from = |path: &Path, source| {
            let text = fs.read(path).ok()?;
            Some(PressureReading {
                some_avg10: parse_some_avg10(&text)?,
                source,
            })
        };
        from(
            &tasks_dir.join(format!("{resource}.pressure")),
            PressureSource::Tree,
        )
        .or_else(|| from(&host_dir.join(resource), PressureSource::Host))
    };
    TreePressure {
        cpu: one("cpu"),
        memory: one("memory"),
        io: one("io"),
    }
}
