//! When a job is abandoned (pure, kernel-free). Every job has an overall deadline; a checkout
//! preparation that reports a counted step (a base tree's files) is also abandoned once that
//! step has not advanced for `idle` — a build that writes files goes on as long as it needs
//! (up to its cap), one stuck on a FIFO or a dead NFS server does not.

use std::time::{Duration, Instant};

/// A job's deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    /// Killed after this long in all.
    pub total: Duration,
    /// Killed after this long without progress, once it has reported any.
    pub idle: Option<Duration>,
}

/// Which deadline was passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overrun {
    /// Running longer than `total`.
    Total(Duration),
    /// No progress for `idle`.
    Idle(Duration),
}

/// The verdict at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within both: look again at this instant (unless it ends first).
    Within {
        recheck_at: Instant,
    },
    Past(Overrun),
}

impl Deadline {
    /// The verdict at `now` for a job started at `started` whose progress last advanced at
    /// `advanced` (`None`: it has reported none).
    pub fn judge(&self, started: Instant, advanced: Option<Instant>, now: Instant) -> Verdict {
        let total_at = started + self.total;
        if now >= total_at {
            return Verdict::Past(Overrun::Total(self.total));
        }
        let idle_at = self
            .idle
            .zip(advanced)
            .map(|(idle, at)| at.max(started) + idle);
        if let Some(idle_at) = idle_at {
            if now >= idle_at {
                return Verdict::Past(Overrun::Idle(self.idle.unwrap_or_default()));
            }
        }
        Verdict::Within {
            recheck_at: idle_at.map_or(total_at, |at| at.min(total_at)),
        }
    }
}

impl Overrun {
    /// "took longer than 10m", "made no progress for 2m".
    pub fn describe(&self) -> String {
        match self {
            Overrun::Total(limit) => {
                format!("took longer than {}", crate::fmt::duration_precise(*limit))
            }
            Overrun::Idle(limit) => format!(
                "made no progress for {}",
                crate::fmt::duration_precise(*limit)
            ),
        }
    }
}

#[cfg(test)]
mod tests;
