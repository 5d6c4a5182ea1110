//! `pressure: Pressure(...)` of `keel.ron`: the pressure (PSI `some avg10`, the share of the
//! last 10 s in which some of keel's tasks were stalled for want of the resource) above which
//! queued tasks wait, whatever their requests ([`crate::daemon::queue`]).
//!
//! ```ron
//! pressure: Pressure(cpu: 40.0, memory: 10.0, io: 40.0,    // percent; or pressure: Off
//!                    settle: "5s"),                       // pacing near them; "0s": none
//! ```
//!
//! The defaults: CPU 40% — keel's tasks wait for a CPU 40% of the time when more of them want
//! to run than there are CPUs for a good part of the last 10 s (builds overlapping), while
//! agents that think, and one build alone, stay far below it; memory 10% — a tenth of the
//! time stalled in reclaim is a machine already thrashing, and a new agent would add ~350 MB
//! to it; I/O 40%, as for CPU.
//!
//! `settle`: while a figure is above half its threshold (and something of keel's runs), at
//! most one task starts per `settle` window ([`crate::daemon::queue`], "pacing"): `avg10`
//! lags what a start adds by seconds, so one reading near the threshold cannot tell how many
//! more the machine takes. 5 s by default: half of `avg10`'s 10 s window, by which a new
//! task's stalls show at about 40% of their weight; `"0s"` turns pacing off.

use crate::unit::{Dur, FieldPath};
use serde::Deserialize;

/// The defaults, in hundredths of a percent.
pub const DEFAULT_CPU: u32 = 40_00;
pub const DEFAULT_MEMORY: u32 = 10_00;
pub const DEFAULT_IO: u32 = 40_00;
/// The default `settle` window, milliseconds.
pub const DEFAULT_SETTLE_MS: u64 = 5_000;

/// `pressure: Pressure(cpu: 40.0, memory: 10.0, io: 40.0)` or `pressure: Off`, as written
/// (each field of `Pressure(...)` may be left out).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum RawPressure {
    Off,
    Pressure {
        #[serde(default, deserialize_with = "super::written")]
        cpu: Option<f64>,
        #[serde(default, deserialize_with = "super::written")]
        memory: Option<f64>,
        #[serde(default, deserialize_with = "super::written")]
        io: Option<f64>,
        #[serde(default, deserialize_with = "super::written")]
        settle: Option<Dur>,
    },
}

/// The thresholds in force, in hundredths of a percent (40% → 4000): a queued task waits while
/// a figure is above its threshold; and the pacing window near them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PressureThresholds {
    pub cpu: u32,
    pub memory: u32,
    pub io: u32,
    /// `settle`, milliseconds: while a figure is above half its threshold, at most one start
    /// per window (0: no pacing).
    pub settle_ms: u64,
}

impl Default for PressureThresholds {
    fn default() -> Self {
        PressureThresholds {
            cpu: DEFAULT_CPU,
            memory: DEFAULT_MEMORY,
            io: DEFAULT_IO,
            settle_ms: DEFAULT_SETTLE_MS,
        }
    }
}

/// A percentage as hundredths (checked to be within 0–100 first).
fn hundredths(percent: f64) -> u32 {
    (percent * 100.0).round().clamp(0.0, 10_000.0) as u32
}

/// The thresholds in force: `None` for `Off`.
pub fn resolve(raw: Option<&RawPressure>) -> Option<PressureThresholds> {
    let defaults = PressureThresholds::default();
    match raw {
        Some(RawPressure::Off) => None,
        None => Some(defaults),
        Some(RawPressure::Pressure {
            cpu,
            memory,
            io,
            settle,
        }) => Some(PressureThresholds {
            cpu: cpu.map_or(defaults.cpu, hundredths),
            memory: memory.map_or(defaults.memory, hundredths),
            io: io.map_or(defaults.io, hundredths),
            settle_ms: settle.map_or(defaults.settle_ms, |d| {
                u64::try_from(d.0.as_millis()).unwrap_or(u64::MAX)
            }),
        }),
    }
}

/// Values that parse but cannot be meant: a threshold is a percentage above 0.
pub(super) fn check(raw: Option<&RawPressure>) -> Vec<(FieldPath, String)> {
    let Some(RawPressure::Pressure {
        cpu, memory, io, ..
    }) = raw
    else {
        return Vec::new();
    };
    let at = FieldPath::default().field("pressure");
    let mut problems = Vec::new();
    for (name, value) in [("cpu", cpu), ("memory", memory), ("io", io)] {
        let Some(value) = *value else {
            continue;
        };
        if !(value.is_finite() && value > 0.0 && value <= 100.0) {
            problems.push((
                at.field(name),
                format!(
                    "{value} is not a percentage above 0: write e.g. {name}: 40.0 (a task waits \
                     while the pressure is above it; 100.0 never holds one back), or pressure: \
                     Off"
                ),
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests;
