//! What the relay let through and refused, counted per destination and kept in
//! `spec.report` for the daemon (`keel status`, the journal's `net-denied`): written when it
//! changed, at most twice a second, crash-consistently; read back by a relay started again.

use crate::network::relay_protocol::{AllowedCount, MisdirectedCount, RefusedCount, RelayReport};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The most destinations counted apart, allowed and refused each (an agent can make up any
/// number of names); past it, the rest are counted together under [`OTHERS`].
pub const MAX_DESTINATIONS: usize = 1024;
/// Where destinations past [`MAX_DESTINATIONS`] are counted.
pub const OTHERS: &str = "(other destinations)";

/// The least time between two writes of the report.
pub const WRITE_PERIOD: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
pub struct Counts {
    allowed: BTreeMap<String, AllowedCount>,
    refused: BTreeMap<String, RefusedCount>,
    /// Per (secret, destination).
    misdirected: BTreeMap<(String, String), MisdirectedCount>,
    open: u64,
    dirty: bool,
    /// A change that must reach the daemon now, not after [`WRITE_PERIOD`] (a misdirected
    /// placeholder: the agent may end right after, and the relay with it).
    urgent: bool,
    written: Option<Instant>,
}

impl Counts {
    /// Counting goes on from `report` (a relay's last, or an empty one).
    pub fn from_report(report: RelayReport) -> Counts {
        Counts {
            allowed: report
                .allowed
                .into_iter()
                .map(|a| (a.destination.clone(), a))
                .collect(),
            refused: report
                .refused
                .into_iter()
                .map(|r| (r.destination.clone(), r))
                .collect(),
            misdirected: report
                .misdirected
                .into_iter()
                .map(|m| ((m.secret.clone(), m.destination.clone()), m))
                .collect(),
            // The connections counted open were the last relay's: gone with it.
            open: 0,
            dirty: true,
            urgent: false,
            written: None,
        }
    }

    fn allowed_entry(&mut self, destination: &str) -> &mut AllowedCount {
        let destination = match self.allowed.len() >= MAX_DESTINATIONS
            && !self.allowed.contains_key(destination)
        {
            true => OTHERS,
            false => destination,
        };
        self.allowed
            .entry(destination.to_string())
            .or_insert_with(|| AllowedCount {
                destination: destination.to_string(),
                ..AllowedCount::default()
            })
    }

    /// A connection to `destination` was let through and is open now.
    pub fn opened(&mut self, destination: &str, now_ms: u64) {
        let entry = self.allowed_entry(destination);
        entry.connections += 1;
        entry.last_ms = now_ms;
        self.open += 1;
        self.dirty = true;
    }

    pub fn closed(&mut self) {
        self.open = self.open.saturating_sub(1);
        self.dirty = true;
    }

    /// Bytes moved to (`out`) and from (`in_`) `destination`.
    pub fn bytes(&mut self, destination: &str, out: u64, in_: u64, now_ms: u64) {
        if out == 0 && in_ == 0 {
            return;
        }
        let entry = self.allowed_entry(destination);
        entry.bytes_out += out;
        entry.bytes_in += in_;
        entry.last_ms = now_ms;
        self.dirty = true;
    }

    /// A refusal, coalesced with the earlier ones of `destination` (the latest reason kept).
    /// `true` for the first of its destination: the one the relay's log says (an agent that
    /// asks the same thing again and again fills no disk).
    pub fn refused(&mut self, destination: &str, reason: &str, now_ms: u64) -> bool {
        let destination = match self.refused.len() >= MAX_DESTINATIONS
            && !self.refused.contains_key(destination)
        {
            true => OTHERS,
            false => destination,
        };
        let entry = self
            .refused
            .entry(destination.to_string())
            .or_insert_with(|| RefusedCount {
                destination: destination.to_string(),
                first_ms: now_ms,
                ..RefusedCount::default()
            });
        entry.count += 1;
        entry.last_ms = now_ms;
        if entry.reason != reason {
            entry.reason = reason.to_string();
        }
        self.dirty = true;
        entry.count == 1
    }

    /// The placeholder of `secret` was seen on its way to `destination`, not one of its
    /// hosts. `true` for the first of the pair (the relay's log says it once).
    pub fn misdirected(&mut self, secret: &str, destination: &str, now_ms: u64) -> bool {
        let destination = match self.misdirected.len() >= MAX_DESTINATIONS
            && !self
                .misdirected
                .contains_key(&(secret.to_string(), destination.to_string()))
        {
            true => OTHERS,
            false => destination,
        };
        let entry = self
            .misdirected
            .entry((secret.to_string(), destination.to_string()))
            .or_insert_with(|| MisdirectedCount {
                secret: secret.to_string(),
                destination: destination.to_string(),
                first_ms: now_ms,
                ..MisdirectedCount::default()
            });
        entry.count += 1;
        entry.last_ms = now_ms;
        self.dirty = true;
        self.urgent = true;
        entry.count == 1
    }

    /// The report as it stands.
    pub fn report(&self, pid: u32, now_ms: u64) -> RelayReport {
        RelayReport {
            pid,
            updated_ms: now_ms,
            allowed: self.allowed.values().cloned().collect(),
            refused: self.refused.values().cloned().collect(),
            open_connections: self.open,
            misdirected: self.misdirected.values().cloned().collect(),
        }
    }

    /// When the report should next be written (`None`: nothing changed).
    pub fn due(&self) -> Option<Instant> {
        if !self.dirty {
            return None;
        }
        if self.urgent {
            return Some(Instant::now());
        }
        Some(
            self.written
                .map_or_else(Instant::now, |at| at + WRITE_PERIOD),
        )
    }

    /// The report was written at `now`.
    pub fn mark_written(&mut self, now: Instant) {
        self.dirty = false;
        self.urgent = false;
        self.written = Some(now);
    }
}

/// The last report at `path`, if there is a readable one.
pub fn read_report(path: &Path) -> Option<RelayReport> {
    let text = std::fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Write `report` to `path` (temp file, fsync, rename, directory fsync).
pub fn write_report(path: &Path, report: &RelayReport) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(report).map_err(|e| e.to_string())?;
    crate::state::atomic_write(path, &bytes).map_err(|e| e.to_string())
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
