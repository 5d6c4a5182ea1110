//! The daemon's side of liveness: what it observes of each live attempt ([`Watches`], this
//! file) and what it does about the verdicts of [`crate::liveness`] (`verdicts.rs`). Nothing
//! here polls, unless the kernel refuses a watch:
//!
//! - heartbeats and progress: inotify on the task's progress file (the host side of the bind
//!   mount at `/run/keel/progress`). A write (IN_MODIFY, or IN_ATTRIB that moved the mtime:
//!   `touch`) is a heartbeat; a change of its content (length + hash of its last 4 KiB) is
//!   progress. What an agent's writes cost keel is bounded (`progress.rs`): after the queue
//!   is read, the inotify descriptor leaves the loop for [`PROGRESS_EVENTS_WINDOW`] (the
//!   kernel merges a storm's identical events meanwhile), so each progress file is read at
//!   most a few times a second whatever the write rate; a heartbeat still counts at the
//!   file's mtime (within the window), not when it was read. A progress file inotify refuses
//!   to watch (ENOSPC on `max_user_watches`) is looked at every second instead (its mtime),
//!   and watched again when the kernel allows.
//! - output: the mtime of `run/output.log` (or `output.log.1` just after a rotation), read when
//!   a deadline is due and for `keel status`: exact, without a wake-up per write of the shim.
//! - CPU: the slice's `usage_usec`, read when a deadline is due and at heartbeats (at most
//!   every 250 ms); a sample that finds [`liveness::cpu_busy`] counts as activity at that
//!   instant, so a task that stops computing is noticed within two `heartbeat_timeout`s.
//!
//! Each watched task has one timer, at the instant its verdict could next change. Evidence only
//! moves that instant later, so heartbeats never re-arm it: the timer fires, finds the fresher
//! evidence, and arms itself again — one wake-up per `heartbeat_timeout` for a healthy task.
//!
//! An attempt adopted by a restarted daemon is watched from the adoption (DESIGN, "Durable
//! state"): the clocks start then at the earliest — its startup grace is not granted again
//! (it still runs out when it would have), and nothing it did or failed to do while no daemon
//! watched is held against it. The progress file's size and mtime tell whether the agent uses
//! the progress protocol at all.

mod progress;
mod verdicts;

pub(crate) use verdicts::check_liveness;

use super::event_loop::Fallback;
use super::record::Ending;
use super::record::{LastExit, StallStop, TaskRecord, TaskState};
use super::slices::{self, Slices};
use super::timers::{Timer, Timers};
use super::Task;
use crate::liveness::{self, Evidence, Ms, Settings, Verdict};
use crate::sandbox::spec;
use crate::state::now_ms;
use crate::state::StateDir;
use crate::unit::OnStall;
use nix::sys::inotify::{InitFlags, Inotify, WatchDescriptor};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// CPU is sampled at heartbeats at most this often (each sample is a cgroup file read).
const CPU_SAMPLE_GAP: Ms = 250;
/// Only the tail of the progress file is compared: agents may append to it for days.
const FINGERPRINT_TAIL: u64 = 4096;
/// After the progress files' events are read, the next are read this much later at the
/// earliest: each progress file is read at most ~4 times a second, whatever the write rate.
pub(crate) const PROGRESS_EVENTS_WINDOW: Duration = Duration::from_millis(250);

/// inotify on every watched progress file, and what is known of each live attempt.
pub(crate) struct Watches {
    inotify: Inotify,
    tasks: HashMap<String, Watch>,
    by_wd: HashMap<WatchDescriptor, String>,
    /// When the inotify queue was last read (monotonic): the events read next came after.
    drained_at: Ms,
    /// When the last inotify queue overflow was logged.
    overflow_logged: Option<Instant>,
    /// The inotify descriptor is out of the loop until the window ends
    /// ([`PROGRESS_EVENTS_WINDOW`]): its events wait in the kernel's queue.
    pub paused: bool,
    /// The loop refused the descriptor back at the end of a window: the queue is read on the
    /// window's timer alone until it takes it again.
    pub resume_refused: Option<Fallback>,
    /// How many watched progress files are looked at on a timer (`Watch::polled`): the loop
    /// asks at every round.
    polled_count: usize,
}

struct Watch {
    generation: u64,
    settings: Settings,
    on_stall: OnStall,
    evidence: Evidence,
    /// The attempt's start (unix ms): file times before it belong to earlier attempts.
    started_wall: u64,
    wd: Option<WatchDescriptor>,
    progress_mtime: Option<SystemTime>,
    /// The mtime keel's own cap of the file left (`crate::daemon::progress_cap`): an event
    /// that finds it is keel's punch, not the agent's write.
    capped_mtime: Option<SystemTime>,
    fingerprint: Option<(u64, u64)>,
    /// The last CPU sample: usage (µs) and when.
    cpu: Option<(u64, Ms)>,
    verdict: Verdict,
    /// The instant the timer is set for (earlier timers in the queue are stale).
    armed: Option<Ms>,
    /// How many times the progress file was read (fingerprinted) during this attempt: what
    /// the agent's writes cost keel, shown by `keel status UNIT --json`.
    reads: u64,
    /// inotify refused to watch the file: it is looked at on a timer instead (since when it
    /// was last looked at, monotonic), and watched again when the kernel allows.
    polled: Option<(Fallback, Ms)>,
}

/// What `keel status` shows of a live attempt's liveness.
pub(crate) struct LivenessView {
    /// Unix ms of the last counted evidence, and its kind.
    pub last_activity: Option<(u64, &'static str)>,
    pub verdict: &'static str,
    /// Unix ms of the last change of the progress file during this attempt.
    pub progress_changed_ms: Option<u64>,
    /// Each signal: its name, whether it counts, its last evidence (unix ms).
    pub signals: [(&'static str, bool, Option<u64>); 4],
    pub settings: Settings,
    pub on_stall: OnStall,
    /// When the verdict turns stalled / no-progress if nothing more is seen (unix ms).
    pub stall_at_ms: u64,
    pub no_progress_at_ms: Option<u64>,
    /// Reads of the progress file during this attempt.
    pub progress_reads: u64,
}

impl Watches {
    pub fn new() -> std::io::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        Ok(Watches {
            inotify,
            tasks: HashMap::new(),
            by_wd: HashMap::new(),
            drained_at: mono_ms(),
            overflow_logged: None,
            paused: false,
            resume_refused: None,
            polled_count: 0,
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.inotify.as_fd().as_raw_fd()
    }

    pub fn unwatch(&mut self, unit: &str) {
        let Some(watch) = self.tasks.remove(unit) else {
            return;
        };
        if watch.polled.is_some() {
            self.polled_count -= 1;
        }
        if let Some(wd) = watch.wd {
            self.by_wd.remove(&wd);
            let _ = self.inotify.rm_watch(wd);
        }
    }
}

/// Milliseconds on CLOCK_MONOTONIC: the clock of `Instant` and of the loop's timeouts, which
/// neither NTP steps nor a changed wall clock move.
fn mono_ms() -> Ms {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        (t.tv_sec() as u64).saturating_mul(1000) + t.tv_nsec() as u64 / 1_000_000
    })
}

/// A wall-clock time (a file's mtime, a recorded start) on the monotonic clock; never later
/// than now. The wall clock ran on while the host slept, the monotonic one did not: the time
/// slept since `wall_ms` is not age (`super::host_sleep`).
fn mono_of_wall(wall_ms: u64, now: Ms, now_wall: u64) -> Ms {
    let age =
        (now_wall.saturating_sub(wall_ms)).saturating_sub(super::host_sleep::slept_since(wall_ms));
    now.saturating_sub(age)
}

/// A monotonic instant on the wall clock, past or future.
fn wall_of_mono(at: Ms, now: Ms, now_wall: u64) -> u64 {
    now_wall.saturating_add(at).saturating_sub(now)
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How many times a read that found the file between a rewrite's truncation and its write
/// (empty, or shorter than its length said) is tried again at once: an agent that rewrites
/// its file in a tight loop leaves it empty most of the time (measured: 4 reads in 5), and a
/// few more reads of a file of some bytes cost microseconds.
const TORN_READ_RETRIES: usize = 8;

/// Length and FNV-1a hash of the last [`FINGERPRINT_TAIL`] bytes: a rewrite with the same
/// words is a heartbeat, anything else is progress. A read that finds the file empty or torn
/// (truncated under it) is tried again, [`TORN_READ_RETRIES`] times at most: the last answer
/// is empty only when the file was empty every time.
fn fingerprint(path: &Path) -> Option<(u64, u64)> {
    let mut read = read_fingerprint(path)?;
    for _ in 0..TORN_READ_RETRIES {
        match read {
            Read::Whole(len, hash) if len > 0 => return Some((len, hash)),
            _ => read = read_fingerprint(path)?,
        }
    }
    Some(match read {
        Read::Whole(len, hash) => (len, hash),
        // Torn every time: as empty (never compared as progress).
        Read::Torn => (0, fnv1a(&[])),
    })
}

enum Read {
    Whole(u64, u64),
    /// Fewer bytes than the length fstat gave: truncated while it was read.
    Torn,
}

fn read_fingerprint(path: &Path) -> Option<Read> {
    use std::io::{Read as _, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(FINGERPRINT_TAIL);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::with_capacity(FINGERPRINT_TAIL as usize);
    file.take(FINGERPRINT_TAIL).read_to_end(&mut tail).ok()?;
    if (tail.len() as u64) < len - start {
        return Some(Read::Torn);
    }
    Some(Read::Whole(len, fnv1a(&tail)))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// When the task last wrote output during this attempt (unix ms): the current log's mtime, or
/// the rotated one's while the shim is between the rename and the new file.
fn output_time(run_dir: &Path, started_wall: u64) -> Option<u64> {
    let log = spec::output_log_path(run_dir);
    [log.clone(), crate::sandbox::logs::rotated_path(&log, 1)]
        .iter()
        .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .map(unix_ms)
        .filter(|&at| at >= started_wall)
        .max()
}

/// The attempt was stopped by the liveness watch: it ends as `stalled`, and the note says why.
/// An agent that ended on its own before the stop was sent keeps its own exit.
pub(crate) fn take_stall(record: &mut TaskRecord, ending: &mut Ending) -> Option<StallStop> {
    let stall = record.stall.take()?;
    if let (Some(ended), Some(stop)) = (ending.ended_ms, record.stop_started_ms) {
        if ended < stop {
            return None;
        }
    }
    ending.exit = LastExit::Stalled;
    if !stall.kill && ending.note.is_none() {
        // Shown while the task waits out its backoff, and in the `exited` entry.
        ending.note = Some(stall.reason.clone());
    }
    Some(stall)
}

impl Watches {
    /// Begin watching a live attempt: just started (`adopted: false`) or re-adopted by this
    /// daemon after a restart.
    pub fn watch(&mut self, task: &Task, dirs: &StateDir, slices: &Slices, adopted: bool) {
        let unit = task.name.as_str();
        self.unwatch(unit);
        let Some(def) = task.unit.as_ref() else {
            return;
        };
        let (settings, on_stall) = (Settings::of(&def.liveness), def.liveness.on_stall);
        let generation = task.record.generation;
        let (now, now_wall) = (mono_ms(), now_ms());
        let started_wall = task.record.started_ms.unwrap_or(now_wall);
        let progress = spec::progress_path(&dirs.run_dir(unit));
        let (wd, polled) = match self.add_watch(&progress) {
            Ok(wd) => (Some(wd), None),
            Err(e) => {
                let fallback =
                    Fallback::new(super::event_loop::refusal("inotify", &e), Instant::now());
                log::warn!(
                    "{unit}: cannot watch its progress file {} ({}; raise \
                     fs.inotify.max_user_watches?): looking at it every {}s instead, and \
                     watching again when the kernel allows",
                    progress.display(),
                    fallback.why,
                    super::event_loop::POLL_EVERY.as_secs()
                );
                (None, Some((fallback, now)))
            }
        };
        let meta = std::fs::metadata(&progress).ok();
        let progress_mtime = meta.as_ref().and_then(|m| m.modified().ok());
        let mut evidence = Evidence {
            started: mono_of_wall(started_wall, now, now_wall),
            watched_since: now,
            ..Evidence::default()
        };
        if adopted {
            // Written during this attempt while no daemon watched (an empty file is keel's
            // own, never written): the agent uses the progress protocol.
            if let (Some(meta), Some(mtime)) = (&meta, progress_mtime) {
                if meta.len() > 0 && unix_ms(mtime) >= started_wall {
                    evidence.heartbeat = Some(mono_of_wall(unix_ms(mtime), now, now_wall));
                }
            }
        }
        let watch = Watch {
            generation,
            settings,
            on_stall,
            evidence,
            started_wall,
            wd,
            progress_mtime,
            capped_mtime: None,
            fingerprint: fingerprint(&progress),
            cpu: None,
            verdict: Verdict::Running,
            armed: None,
            reads: 1,
            polled,
        };
        if let Some(wd) = wd {
            self.by_wd.insert(wd, unit.to_string());
        }
        self.polled_count += usize::from(watch.polled.is_some());
        self.tasks.insert(unit.to_string(), watch);
        if settings.cpu {
            self.sample_cpu(unit, slices, now);
        }
    }

    /// The task's timer fired: sample the evidence that is read rather than watched (output,
    /// CPU). False when the timer is stale (another attempt, or armed again since).
    pub fn timer_due(
        &mut self,
        unit: &str,
        generation: u64,
        dirs: &StateDir,
        slices: &Slices,
    ) -> bool {
        let now = mono_ms();
        let Some(watch) = self.tasks.get_mut(unit) else {
            return false;
        };
        // Timers are never removed: only the one armed last counts.
        if watch.generation != generation || watch.armed.is_none_or(|at| at > now) {
            return false;
        }
        watch.armed = None;
        let (output, cpu) = (watch.settings.output, watch.settings.cpu);
        if output {
            if let Some(at) = output_time(&dirs.run_dir(unit), watch.started_wall) {
                let at = mono_of_wall(at, now, now_ms());
                watch.evidence.output = watch.evidence.output.max(Some(at));
            }
        }
        if cpu {
            self.sample_cpu(unit, slices, now);
        }
        true
    }

    fn sample_cpu(&mut self, unit: &str, slices: &Slices, now: Ms) {
        let Some(Ok(usage)) = slices::slice_of(slices, unit).map(|s| s.cpu_usage_usec()) else {
            return;
        };
        let Some(watch) = self.tasks.get_mut(unit) else {
            return;
        };
        if let Some((before, at)) = watch.cpu {
            let interval = now.saturating_sub(at);
            if interval < liveness::CPU_MIN_INTERVAL {
                return;
            }
            if liveness::cpu_busy(usage.saturating_sub(before), interval) {
                watch.evidence.cpu = Some(now);
            }
        }
        watch.cpu = Some((usage, now));
    }

    /// Judge a live attempt now and arm the timer for the next instant the verdict could
    /// change. `Some` when the verdict changed: the new verdict, what the unit does about it,
    /// and the words for it.
    fn judge(&mut self, task: &Task, timers: &mut Timers) -> Option<(Verdict, OnStall, String)> {
        let now = mono_ms();
        // A paused (frozen) attempt is not judged: its clocks start again at the resume.
        let judged = task.shim.is_some()
            && task.record.paused.is_none()
            && matches!(task.record.state, TaskState::Running | TaskState::Stalled);
        let watch = self.tasks.get_mut(&task.name).filter(|_| judged)?;
        let judgement = liveness::judge(&watch.settings, &watch.evidence, now);
        let previous = std::mem::replace(&mut watch.verdict, judgement.verdict);
        let changed = (judgement.verdict != previous).then(|| {
            let detail =
                liveness::describe(&watch.settings, &watch.evidence, judgement.verdict, now);
            (judgement.verdict, watch.on_stall, detail)
        });
        if let Some(at) = judgement.next_check {
            self.arm(&task.name, at, now, timers);
        }
        changed
    }

    /// Set the task's timer for `at`, unless it is already set for no later.
    fn arm(&mut self, unit: &str, at: Ms, now: Ms, timers: &mut Timers) {
        let Some(watch) = self.tasks.get_mut(unit) else {
            return;
        };
        if watch.armed.is_some_and(|armed| armed <= at) {
            return;
        }
        watch.armed = Some(at);
        let timer = Timer::Liveness {
            unit: unit.to_string(),
            generation: watch.generation,
        };
        timers.add(
            Instant::now() + Duration::from_millis(at.saturating_sub(now)),
            timer,
        );
    }

    /// The attempt was resumed after `frozen` paused: nothing it did not do while frozen is
    /// held against it. Its clocks run again from now, as for an adoption (`watched_since`),
    /// and its startup grace keeps what was left of it (its start moves by the frozen time).
    pub fn resumed(&mut self, unit: &str, frozen: Duration) {
        let Some(watch) = self.tasks.get_mut(unit) else {
            return;
        };
        let frozen = frozen.as_millis().min(u128::from(u64::MAX / 4)) as Ms;
        let now = mono_ms();
        watch.evidence.started = watch.evidence.started.saturating_add(frozen).min(now);
        watch.evidence.watched_since = now;
        // The CPU used across the pause is no sample of work: the next one starts afresh.
        watch.cpu = None;
        watch.armed = None;
    }

    /// A stop for a stall could not be recorded: judge again shortly, from `running`.
    fn recheck_soon(&mut self, unit: &str, timers: &mut Timers) {
        let now = mono_ms();
        if let Some(watch) = self.tasks.get_mut(unit) {
            watch.verdict = Verdict::Running;
            watch.armed = None;
        }
        self.arm(unit, now + liveness::RECHECK_MIN, now, timers);
    }

    /// For `keel status`: the last counted evidence (output looked at now) and the verdict.
    pub(crate) fn view(&self, task: &Task, dirs: &StateDir) -> Option<LivenessView> {
        if !matches!(task.record.state, TaskState::Running | TaskState::Stalled) {
            return None;
        }
        let watch = self.tasks.get(&task.name)?;
        let (now, now_wall) = (mono_ms(), now_ms());
        let mut evidence = watch.evidence;
        if watch.settings.output {
            let seen = output_time(&dirs.run_dir(&task.name), watch.started_wall)
                .map(|at| mono_of_wall(at, now, now_wall));
            evidence.output = evidence.output.max(seen);
        }
        let last = liveness::last_activity(&watch.settings, &evidence);
        let wall = |at: Ms| wall_of_mono(at, now, now_wall);
        let (s, judged) = (
            watch.settings,
            liveness::judge(&watch.settings, &evidence, now),
        );
        Some(LivenessView {
            last_activity: last.map(|(at, kind)| (wall(at), kind.as_str())),
            verdict: match task.record.paused {
                Some(_) => "paused",
                None => watch.verdict.as_str(),
            },
            progress_changed_ms: evidence.progress.map(wall),
            signals: [
                ("heartbeat", s.heartbeat, evidence.heartbeat.map(wall)),
                ("progress", s.heartbeat, evidence.progress.map(wall)),
                ("output", s.output, evidence.output.map(wall)),
                ("cpu", s.cpu, evidence.cpu.map(wall)),
            ],
            settings: s,
            on_stall: watch.on_stall,
            stall_at_ms: wall(judged.stall_at),
            no_progress_at_ms: judged.no_progress_at.map(wall),
            progress_reads: watch.reads,
        })
    }
}

#[cfg(test)]
mod tests;
