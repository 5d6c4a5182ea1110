//! The progress files: their inotify events, read at most once per
//! [`super::PROGRESS_EVENTS_WINDOW`] (the caller takes the descriptor out of the loop in
//! between), and the files inotify refused to watch, looked at on a timer instead.

use super::{fingerprint, mono_ms, mono_of_wall, unix_ms, Watches, CPU_SAMPLE_GAP};
use crate::daemon::event_loop;
use crate::daemon::progress_cap::{self, Capped};
use crate::daemon::slices::Slices;
use crate::liveness::Ms;
use crate::sandbox::spec;
use crate::state::{now_ms, StateDir};
use nix::sys::inotify::{AddWatchFlags, WatchDescriptor};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// The progress files' events read at once: which units were written (and whether a write,
/// IN_MODIFY, was among their events), and since when (the previous read: every one of these
/// writes came after it).
pub(crate) struct Drained {
    pub touched: BTreeMap<String, bool>,
    pub after: Ms,
    /// Whether any event at all was read.
    pub any: bool,
}

/// When a write seen between `after` and `now` happened: the file's mtime (`written`, on the
/// monotonic clock) when it falls in between, else the nearer bound — a wall clock stepped
/// since cannot move a heartbeat out of the instants it could have been. Without an mtime
/// (the file is gone), `now`.
pub(crate) fn heartbeat_at(written: Option<Ms>, after: Ms, now: Ms) -> Ms {
    written.unwrap_or(now).clamp(after.min(now), now)
}

/// Keep the progress file's disk use under its cap ([`progress_cap`]); the mtime keel's punch
/// leaves is not taken for the agent's write.
fn cap_progress_file(unit: &str, path: &Path, watch: &mut super::Watch) {
    match progress_cap::cap(path) {
        Ok(Capped::Within) => {}
        Ok(Capped::Punched(_, mtime) | Capped::Truncated(mtime)) => {
            if watch.capped_mtime.is_none() {
                log::info!(
                    "{unit}: progress file over {} KiB on disk: its head is dropped (it is a \
                     status line, not a log; said once an attempt)",
                    progress_cap::PROGRESS_CAP >> 10
                );
            }
            watch.capped_mtime = mtime;
            watch.progress_mtime = mtime;
        }
        Err(e) => log::warn!("{unit}: cannot cap its progress file: {e}"),
    }
}

impl Watches {
    /// inotify on a progress file (or the test hook's refusal, `KEEL_TEST_REFUSE_WATCH`).
    pub(super) fn add_watch(&mut self, path: &Path) -> std::io::Result<WatchDescriptor> {
        if let Some(e) = crate::state::refused_watch("progress") {
            return Err(e);
        }
        let flags = AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_ATTRIB;
        self.inotify.add_watch(path, flags).map_err(Into::into)
    }

    /// Read every queued inotify event. A storm's writes cost one event here: the kernel
    /// merges an event identical to the last one queued while nobody reads.
    pub fn drain_events(&mut self) -> Drained {
        let after = std::mem::replace(&mut self.drained_at, mono_ms());
        let mut drained = Drained {
            touched: BTreeMap::new(),
            after,
            any: false,
        };
        while let Ok(events) = self.inotify.read_events() {
            if events.is_empty() {
                break;
            }
            drained.any = true;
            for event in events {
                self.note_event(event.wd, event.mask, &mut drained.touched);
            }
        }
        drained
    }

    fn note_event(
        &mut self,
        wd: WatchDescriptor,
        mask: AddWatchFlags,
        touched: &mut BTreeMap<String, bool>,
    ) {
        if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            // Events were lost: look at every progress file (a write moved its mtime). An
            // agent can overflow the queue every window: said once a minute.
            let due = self
                .overflow_logged
                .is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(60));
            if due {
                log::warn!(
                    "inotify queue overflow: checking every progress file (said once a minute)"
                );
                self.overflow_logged = Some(Instant::now());
            }
            for unit in self.tasks.keys() {
                touched.entry(unit.clone()).or_default();
            }
            return;
        }
        if mask.contains(AddWatchFlags::IN_IGNORED) {
            // The file is gone (or we removed the watch): nothing more comes from it.
            if let Some(unit) = self.by_wd.remove(&wd) {
                if let Some(watch) = self.tasks.get_mut(&unit) {
                    if watch.wd == Some(wd) {
                        watch.wd = None;
                        log::warn!("{unit}: progress file removed: heartbeats are no longer seen this attempt");
                    }
                }
            }
            return;
        }
        if let Some(unit) = self.by_wd.get(&wd) {
            *touched.entry(unit.clone()).or_default() |= mask.contains(AddWatchFlags::IN_MODIFY);
        }
    }

    /// The progress file of `unit` was written after `after` (monotonic): a heartbeat at its
    /// mtime ([`heartbeat_at`]), maybe progress. False when the unit is not watched or the
    /// event was no write (nothing to judge).
    pub fn progress_written(
        &mut self,
        unit: &str,
        modified: bool,
        after: Ms,
        dirs: &StateDir,
        slices: &Slices,
    ) -> bool {
        let path = spec::progress_path(&dirs.run_dir(unit));
        let Some(watch) = self.tasks.get_mut(unit) else {
            return false;
        };
        let mtime = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let (now, now_wall) = (mono_ms(), now_ms());
        // A chown or chmod is not a write; `touch` is (it moves the mtime).
        if (!modified && mtime == watch.progress_mtime)
            || (mtime.is_some() && mtime == watch.capped_mtime)
        {
            return false;
        }
        watch.progress_mtime = mtime;
        let written = mtime.map(|t| mono_of_wall(unix_ms(t), now, now_wall));
        let at = heartbeat_at(written, after, now);
        watch.evidence.heartbeat = watch.evidence.heartbeat.max(Some(at));
        let fingerprint = fingerprint(&path);
        watch.reads += 1;
        cap_progress_file(unit, &path, watch);
        // Empty is the instant between `>`'s truncation and its write (a rewrite with the same
        // words must not look like two changes), never a progress message: not compared.
        let emptied = fingerprint.is_some_and(|(len, _)| len == 0);
        if !emptied && fingerprint != watch.fingerprint {
            watch.fingerprint = fingerprint;
            watch.evidence.progress = watch.evidence.progress.max(Some(at));
        }
        let sample = watch.settings.cpu
            && watch
                .cpu
                .is_none_or(|(_, at)| now.saturating_sub(at) >= CPU_SAMPLE_GAP);
        if sample {
            // The CPU baseline moves with the heartbeats: after the last one, only what the
            // task uses from then on can keep it `running`.
            self.sample_cpu(unit, slices, now);
        }
        true
    }

    /// Whether any progress file is looked at on a timer.
    pub fn has_refused(&self) -> bool {
        self.polled_count > 0
    }

    /// The timer of refused watches: try again to watch the files whose retry is due (said in
    /// the log when inotify allows), and look at every file still (or until now) unwatched.
    /// Returns the units whose file was written, to be judged.
    pub fn refused_due(&mut self, dirs: &StateDir, slices: &Slices) -> Vec<String> {
        let now = Instant::now();
        let units: Vec<String> = (self.tasks.iter())
            .filter(|(_, w)| w.polled.is_some())
            .map(|(unit, _)| unit.clone())
            .collect();
        let mut written = Vec::new();
        for unit in units {
            let path = spec::progress_path(&dirs.run_dir(&unit));
            let retry = (self.tasks.get(&unit))
                .and_then(|w| w.polled.as_ref())
                .is_some_and(|(fallback, _)| fallback.retry_due(now));
            if retry {
                let added = self.add_watch(&path);
                let Some(watch) = self.tasks.get_mut(&unit) else {
                    continue;
                };
                match added {
                    Ok(wd) => {
                        log::info!("{unit}: its progress file is watched again");
                        watch.wd = Some(wd);
                        self.by_wd.insert(wd, unit.clone());
                    }
                    Err(e) => {
                        if let Some((fallback, _)) = watch.polled.as_mut() {
                            fallback.refused_again(event_loop::refusal("inotify", &e), now);
                        }
                    }
                }
            }
            // Once more after a recovery: a write between the last look and the watch.
            if self.look_at_polled(&unit, dirs, slices) {
                written.push(unit.clone());
            }
            if let Some(watch) = self.tasks.get_mut(&unit) {
                if watch.wd.is_some() && watch.polled.take().is_some() {
                    self.polled_count -= 1;
                }
            }
        }
        written
    }

    /// Look at the progress file of `unit` if inotify does not watch it: a moved mtime or
    /// length is a write (a heartbeat at that mtime). True when it was written.
    pub fn look_at_polled(&mut self, unit: &str, dirs: &StateDir, slices: &Slices) -> bool {
        let path = spec::progress_path(&dirs.run_dir(unit));
        let Some(watch) = self.tasks.get_mut(unit) else {
            return false;
        };
        let Some((_, looked_at)) = watch.polled.as_mut() else {
            return false;
        };
        let after = std::mem::replace(looked_at, mono_ms());
        let meta = std::fs::metadata(&path).ok();
        let mtime = meta.as_ref().and_then(|m| m.modified().ok());
        let len = meta.as_ref().map(|m| m.len());
        let moved = mtime != watch.progress_mtime
            || len.zip(watch.fingerprint).is_some_and(|(l, (f, _))| l != f);
        moved && self.progress_written(unit, true, after, dirs, slices)
    }

    /// For `keel status`: how the progress file of `unit` is watched, when not by inotify.
    pub fn note(&self, unit: &str) -> Option<String> {
        let watch = self.tasks.get(unit)?;
        let file = (watch.polled.as_ref())
            .map(|(fallback, _)| event_loop::polled_note("progress file", fallback));
        let events = (self.resume_refused.as_ref()).map(|fallback| {
            format!(
                "progress events: read every {}ms ({})",
                super::PROGRESS_EVENTS_WINDOW.as_millis(),
                fallback.why
            )
        });
        let notes: Vec<String> = file.into_iter().chain(events).collect();
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}

#[cfg(test)]
mod tests;
