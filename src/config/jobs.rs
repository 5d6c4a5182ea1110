//! `jobs: Jobs(...)` and `harvest_limits: HarvestLimits(...)` of `keel.ron`: how keel's
//! workers (`keel worker`, [`crate::worker`]) are bounded.
//!
//! ```ron
//! jobs: Jobs(workers: 2, memory: "1G", deadline: "10m",
//!            preparation_deadline: "1h", preparation_idle: "2m"),
//! harvest_limits: HarvestLimits(max_object_bytes: 104857600, max_pack_bytes: 1073741824),
//! ```

use crate::unit::{Dur, FieldPath, Size};
use serde::Deserialize;
use std::time::Duration;

/// `jobs: Jobs(...)` as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, rename = "Jobs")]
pub struct RawJobs {
    #[serde(default, deserialize_with = "super::written")]
    pub workers: Option<usize>,
    #[serde(default, deserialize_with = "super::written")]
    pub memory: Option<Size>,
    #[serde(default, deserialize_with = "super::written")]
    pub deadline: Option<Dur>,
    #[serde(default, deserialize_with = "super::written")]
    pub preparation_deadline: Option<Dur>,
    #[serde(default, deserialize_with = "super::written")]
    pub preparation_idle: Option<Dur>,
}

/// How keel's workers are bounded, every default filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jobs {
    /// At most this many workers at once (the rest wait in their queues).
    pub workers: usize,
    /// The memory all workers together may use (`<keel tree>/workers`'s limit; without
    /// cgroups, each worker's address space).
    pub memory: u64,
    /// Every job but a checkout's preparation is killed after this long.
    pub deadline: Duration,
    /// A checkout's preparation (base tree, checkout) is killed after this long in all...
    pub preparation_deadline: Duration,
    /// ...or once its base tree build has reported no progress for this long.
    pub preparation_idle: Duration,
}

pub const DEFAULT_WORKERS: usize = 2;
pub const DEFAULT_MEMORY: u64 = 1 << 30;
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);
pub const DEFAULT_PREPARATION_DEADLINE: Duration = Duration::from_secs(3600);
pub const DEFAULT_PREPARATION_IDLE: Duration = Duration::from_secs(120);
/// Below this a worker cannot even load (libgit2 and keel's own binary).
pub const MIN_WORKER_MEMORY: u64 = 64 << 20;

impl Default for Jobs {
    fn default() -> Self {
        resolve(&RawJobs::default())
    }
}

pub fn resolve(raw: &RawJobs) -> Jobs {
    Jobs {
        workers: raw.workers.unwrap_or(DEFAULT_WORKERS),
        memory: raw.memory.map_or(DEFAULT_MEMORY, |s| s.0),
        deadline: raw.deadline.map_or(DEFAULT_DEADLINE, |d| d.0),
        preparation_deadline: raw
            .preparation_deadline
            .map_or(DEFAULT_PREPARATION_DEADLINE, |d| d.0),
        preparation_idle: raw
            .preparation_idle
            .map_or(DEFAULT_PREPARATION_IDLE, |d| d.0),
    }
}

/// Values that parse but cannot be meant.
pub(super) fn check(raw: &RawJobs) -> Vec<(FieldPath, String)> {
    let at = FieldPath::default().field("jobs");
    let mut problems = Vec::new();
    if raw.workers == Some(0) {
        problems.push((
            at.field("workers"),
            "0 workers would never run a job (no checkout would ever be made): write 1 or more"
                .to_string(),
        ));
    }
    if let Some(Size(memory)) = raw.memory {
        if memory < MIN_WORKER_MEMORY {
            problems.push((
                at.field("memory"),
                format!(
                    "{} is too little for a worker (at least {}): write e.g. \"1G\"",
                    crate::fmt::format_bytes(memory, false),
                    crate::fmt::format_bytes(MIN_WORKER_MEMORY, false)
                ),
            ));
        }
    }
    for (name, value) in [
        ("deadline", raw.deadline),
        ("preparation_deadline", raw.preparation_deadline),
        ("preparation_idle", raw.preparation_idle),
    ] {
        if value.is_some_and(|d| d.0.is_zero()) {
            problems.push((
                at.field(name),
                "0 would kill every job at once: write e.g. \"10m\"".to_string(),
            ));
        }
    }
    problems
}
