//! The units directory: one `.ron` file per task. A file that appears is queued, a file that
//! changes takes effect at the task's next start, a file that stays gone (two scans 0.5 s
//! apart: editors and `git checkout` remove and rewrite files) removes its task, and a
//! file that does not parse is reported without harming anything else.

use super::record::{Intent, TaskRecord, TaskState};
use super::store::transition;
use super::timers::Timer;
use super::{Daemon, DaemonError, Task};
use crate::state::now_ms;
use crate::unit::{load_unit_file_with, network_list_problems, unit_name_of};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long after the last change in the units directory to rescan it (editors write files in
/// several steps; each new event pushes the rescan back).
const RESCAN_DEBOUNCE: Duration = Duration::from_millis(150);
const RESCAN_MAX_DELAY: Duration = Duration::from_millis(400);
/// A unit file must be missing for this long (over two scans) before its task is removed:
/// long enough for an editor's rename-and-rewrite, short enough that with the debounce a
/// removal is acted on within a second.
const REMOVAL_CONFIRMATION: Duration = Duration::from_millis(500);
/// A scan that failed (EMFILE, the directory briefly gone) is retried after this.
const SCAN_RETRY: Duration = Duration::from_secs(1);

/// The units directory: where it is, its watch, what did not parse, and the pending rescan.
pub(crate) struct UnitsDir {
    pub dir: PathBuf,
    watch: UnitsWatch,
    /// Unit files that failed to parse: file name → `file:line:col: message`.
    pub invalid: BTreeMap<String, String>,
    /// The units directory changed: rescan at this instant (pushed back by each new event).
    rescan_at: Option<Instant>,
    /// The first event of the current burst (bounds how long a rescan can be pushed back).
    rescan_first: Option<Instant>,
}

impl UnitsDir {
    /// Create (the default) or check (`--units`: it must exist, a typo or an unmounted
    /// filesystem must not look like "every unit was removed") the directory, and watch it.
    pub fn open(dir: PathBuf, explicit: bool) -> Result<Self, DaemonError> {
        if explicit && !dir.is_dir() {
            return Err(DaemonError::Config(format!(
                "units directory {} does not exist: create it, or fix --units",
                dir.display()
            )));
        }
        crate::state::create_private_dir(&dir)
            .map_err(super::setup("create the units directory"))?;
        let watch = UnitsWatch::new(&dir)?;
        Ok(UnitsDir {
            dir,
            watch,
            invalid: BTreeMap::new(),
            rescan_at: None,
            rescan_first: None,
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.watch.raw_fd()
    }

    /// The unit file of `unit`.
    pub fn file_of(&self, unit: &str) -> PathBuf {
        self.dir.join(format!("{unit}.ron"))
    }
}

/// inotify on the units directory, re-established when the directory itself is replaced.
struct UnitsWatch {
    inotify: Inotify,
    dir: PathBuf,
    watch: Option<WatchDescriptor>,
}

impl UnitsWatch {
    pub fn new(dir: &Path) -> Result<Self, DaemonError> {
        let inotify =
            Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(|e| {
                DaemonError::Setup {
                    what: "initialise inotify (raise fs.inotify.max_user_instances?)",
                    source: e.into(),
                }
            })?;
        let mut watch = UnitsWatch {
            inotify,
            dir: dir.to_path_buf(),
            watch: None,
        };
        watch.add().map_err(|source| DaemonError::Setup {
            what: "watch the units directory (raise fs.inotify.max_user_watches?)",
            source,
        })?;
        Ok(watch)
    }

    fn add(&mut self) -> std::io::Result<()> {
        let flags = AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF;
        self.watch = Some(self.inotify.add_watch(&self.dir, flags)?);
        Ok(())
    }

    pub fn raw_fd(&self) -> RawFd {
        self.inotify.as_fd().as_raw_fd()
    }

    /// Drain the events: `(changed, watch lost)`.
    fn drain(&mut self) -> (bool, bool) {
        let mut changed = false;
        let mut lost = false;
        while let Ok(events) = self.inotify.read_events() {
            if events.is_empty() {
                break;
            }
            changed = true;
            for event in events {
                if event.mask.intersects(
                    AddWatchFlags::IN_DELETE_SELF
                        | AddWatchFlags::IN_MOVE_SELF
                        | AddWatchFlags::IN_IGNORED,
                ) {
                    lost = true;
                }
            }
        }
        if lost {
            if let Some(wd) = self.watch.take() {
                let _ = self.inotify.rm_watch(wd);
            }
        }
        (changed, lost)
    }
}

/// Files in the units directory that are unit files (`*.ron`, not hidden, not editor temps).
/// Symlinks to unit files count.
pub fn unit_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.starts_with('.') && p.extension().is_some_and(|e| e == "ron")
        })
        .collect();
    files.sort();
    Ok(files)
}

impl Daemon {
    pub(super) fn on_units_dir_event(&mut self) {
        let (changed, lost) = self.units.watch.drain();
        if lost {
            log::warn!(
                "units directory {} was moved or removed: watching for it again",
                self.units.dir.display()
            );
            self.events
                .timers
                .add_after(Duration::ZERO, Timer::WatchUnits);
        }
        if changed {
            self.request_rescan();
        }
    }

    /// Rescan once the current burst of changes is over — but never later than
    /// `RESCAN_MAX_DELAY` after its first event (a file rewritten every 100 ms in the units
    /// directory must not hold back the units beside it).
    pub(crate) fn request_rescan(&mut self) {
        let now = Instant::now();
        let first = *self.units.rescan_first.get_or_insert(now);
        let at = (now + RESCAN_DEBOUNCE).min(first + RESCAN_MAX_DELAY);
        if self.units.rescan_at.is_none() {
            self.events.timers.add(at, Timer::RescanUnits);
        }
        self.units.rescan_at = Some(at);
    }

    pub(super) fn on_rescan_due(&mut self) {
        match self.units.rescan_at {
            Some(at) if at > Instant::now() => self.events.timers.add(at, Timer::RescanUnits),
            Some(_) => {
                self.units.rescan_at = None;
                self.units.rescan_first = None;
                self.scan_units();
            }
            None => {}
        }
    }

    /// The units directory was moved or removed: watched again once it is back. It is not
    /// made here (an operator replacing it — `mv units units.old; mkdir units`, or `mv new
    /// units` — would find an empty one in the way, and its emptiness read as every unit
    /// removed); until it is back, the tasks run as they are, and it is looked for every
    /// [`SCAN_RETRY`].
    pub(super) fn rewatch_units_dir(&mut self) {
        match self.units.watch.add() {
            Ok(()) => {
                log::info!("watching {} again", self.units.dir.display());
                self.scan_units();
                // Starts that waited for it go now.
                self.retry_waiting_starts();
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    log::warn!("cannot watch {}: {e}; retrying", self.units.dir.display());
                }
                self.events.timers.add_after(SCAN_RETRY, Timer::WatchUnits);
            }
        }
    }

    /// Compare the units directory with the tasks and act on the differences.
    pub(crate) fn scan_units(&mut self) {
        let files = match unit_files(&self.units.dir) {
            Ok(files) => files,
            // Moved away or removed: looked for by rewatch_units_dir, which scans once it is
            // back; the tasks run on meanwhile.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound && self.units.watch.watch.is_none() =>
            {
                return;
            }
            Err(e) => {
                log::error!(
                    "cannot read units directory {}: {e}; retrying",
                    self.units.dir.display()
                );
                self.events.timers.add_after(SCAN_RETRY, Timer::RescanUnits);
                self.units.rescan_at = Some(Instant::now() + SCAN_RETRY);
                return;
            }
        };
        let mut present: BTreeSet<String> = BTreeSet::new();
        let mut invalid = BTreeMap::new();
        for path in files {
            let file_name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            // A unit's "@name" entries need keel.ron's lists: checked here, where units are
            // accepted, and again whenever keel.ron's lists change (`reload_config`).
            let lists = &self.settings.config.network.lists;
            match load_unit_file_with(&path, |unit| network_list_problems(unit, lists)) {
                Ok((name, unit, text)) => {
                    present.insert(name.clone());
                    self.accept_unit(&name, unit, text);
                }
                Err(e) => {
                    if let Some(name) = unit_name_of(&path) {
                        // A broken edit of a known unit does not remove the task.
                        present.insert(name);
                    }
                    let message = e.to_string();
                    if self.units.invalid.get(&file_name) != Some(&message) {
                        log::error!("invalid unit: {message}");
                        self.store.event(&file_name, 0, 0, "invalid-unit", &message);
                    }
                    invalid.insert(file_name, message);
                }
            }
        }
        self.units.invalid = invalid;
        self.note_missing_units(&present);
        self.store.queue_changed = true;
    }

    /// Tasks whose file is gone: removed once two scans 0.5 s apart agree.
    fn note_missing_units(&mut self, present: &BTreeSet<String>) {
        let now = Instant::now();
        let mut confirmed = Vec::new();
        for task in self.tasks.values_mut() {
            let name = &task.name;
            if present.contains(name) {
                task.missing_since = None;
                continue;
            }
            if !task.seen_file {
                continue;
            }
            match task.missing_since {
                None => {
                    task.missing_since = Some(now);
                    self.events
                        .timers
                        .add_after(REMOVAL_CONFIRMATION, Timer::RescanUnits);
                    self.units.rescan_at = Some(now + REMOVAL_CONFIRMATION);
                }
                Some(since) if now.duration_since(since) >= REMOVAL_CONFIRMATION => {
                    confirmed.push(name.clone());
                }
                Some(_) => {}
            }
        }
        for name in confirmed {
            log::info!("{name}: unit file removed: removing the task");
            if let Some(task) = self.tasks.get_mut(&name) {
                task.unit = None;
                task.unit_text = None;
            }
            self.stop_task(&name, Intent::Forget);
        }
    }

    /// A valid unit file: queue a new task, or note an edit for the next start.
    pub(crate) fn accept_unit(&mut self, name: &str, unit: crate::unit::Unit, text: String) {
        match self.tasks.get_mut(name) {
            Some(task) => {
                task.missing_since = None;
                task.seen_file = true;
                if task.record.intent == Intent::Forget {
                    // The file came back while its task was being stopped for its absence:
                    // start it again once it has stopped.
                    task.record.intent = Intent::Restart;
                    let _ = self.store.persist(task);
                }
                if task.unit_text.as_deref() != Some(text.as_str()) {
                    let running = task.record.state.has_attempt();
                    task.unit = Some(unit);
                    task.unit_text = Some(text);
                    let detail = if running {
                        "takes effect at the next start (keel restart applies it now)"
                    } else {
                        ""
                    };
                    self.store.task_event(task, "unit-changed", detail);
                    log::info!("{name}: unit file changed");
                }
            }
            None => {
                let record = TaskRecord::new(name, now_ms());
                let mut task = Task {
                    seen_file: true,
                    ..Task::new(name, record, Some(unit), Some(text))
                };
                if let Err(e) = self.store.dirs.create_task_dirs(name) {
                    log::error!("{name}: {e}");
                }
                transition(&mut task, TaskState::Queued, "new unit", &mut self.store);
                self.tasks.insert(task);
            }
        }
    }
}
