//! Durable state: the state-directory layout, atomic files, the instance lock and the journal.
//!
//! Every state file is written whole to a temporary file in the same directory, fsynced,
//! renamed over the old one, and the directory fsynced (rename(2), fsync(2)): a crash at any
//! instant leaves the old or the new version, never a torn one.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Errors of this module carry the path they are about.
#[derive(Debug)]
pub enum StateError {
    Io { path: PathBuf, source: io::Error },
    Parse { path: PathBuf, message: String },
    Locked { path: PathBuf, holder: Option<i32> },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            StateError::Parse { path, message } => {
                write!(f, "{}: unreadable state file: {message}", path.display())
            }
            StateError::Locked { path, holder } => match holder {
                Some(pid) => write!(
                    f,
                    "another keel daemon (pid {pid}) already uses this state directory ({})",
                    path.parent().unwrap_or(path).display()
                ),
                None => write!(
                    f,
                    "another keel daemon already uses this state directory ({})",
                    path.parent().unwrap_or(path).display()
                ),
            },
        }
    }
}

impl std::error::Error for StateError {}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Milliseconds since the Unix epoch (wall clock: what survives a restart).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The layout of `state_dir` (DESIGN, "Durable state").
#[derive(Debug, Clone)]
pub struct StateDir {
    pub root: PathBuf,
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateDir { root: root.into() }
    }
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("lock")
    }
    pub fn socket_path(&self) -> PathBuf {
        self.root.join("keel.sock")
    }
    pub fn events_path(&self) -> PathBuf {
        self.root.join("events.jsonl")
    }
    /// Written by a daemon that exits on purpose, read by `keel init` (absent = a crash).
    pub fn exit_status_path(&self) -> PathBuf {
        self.root.join("exit-status")
    }
    /// A shutdown decided under `keel init`, finished by a respawned daemon.
    pub fn shutdown_marker_path(&self) -> PathBuf {
        self.root.join("shutdown.ron")
    }
    pub fn tasks_dir(&self) -> PathBuf {
        self.root.join("tasks")
    }
    pub fn task_dir(&self, unit: &str) -> PathBuf {
        self.tasks_dir().join(unit)
    }
    pub fn record_path(&self, unit: &str) -> PathBuf {
        self.task_dir(unit).join("state.ron")
    }
    pub fn accepted_unit_path(&self, unit: &str) -> PathBuf {
        self.task_dir(unit).join("unit.ron")
    }
    pub fn work_dir(&self, unit: &str) -> PathBuf {
        self.task_dir(unit).join("work")
    }
    pub fn checkpoint_dir(&self, unit: &str) -> PathBuf {
        self.task_dir(unit).join("checkpoint")
    }
    pub fn run_dir(&self, unit: &str) -> PathBuf {
        self.task_dir(unit).join("run")
    }

    /// Create the state directory itself (mode 0700: it holds the control socket and logs).
    pub fn create(&self) -> Result<(), StateError> {
        use std::os::unix::fs::DirBuilderExt;
        for dir in [self.root.clone(), self.tasks_dir()] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(io_err(&dir))?;
        }
        Ok(())
    }

    /// Create a task's directories (idempotent).
    pub fn create_task_dirs(&self, unit: &str) -> Result<(), StateError> {
        for dir in [
            self.task_dir(unit),
            self.work_dir(unit),
            self.checkpoint_dir(unit),
            self.run_dir(unit),
        ] {
            fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        }
        Ok(())
    }

    /// Names of the tasks that have a record.
    pub fn recorded_units(&self) -> Result<Vec<String>, StateError> {
        let dir = self.tasks_dir();
        let mut names = Vec::new();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(names),
            Err(e) => return Err(io_err(&dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_err(&dir))?;
            if let Some(name) = entry.file_name().to_str() {
                if entry.path().join("state.ron").exists() {
                    names.push(name.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }
}

/// Write `bytes` to `path` atomically: temp file, fsync, rename, fsync the directory.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    replace_file(path, bytes, true)
}

/// Write `bytes` to a temporary file beside `path` (`.<name>.tmp.<pid>`) and rename it over
/// `path`; `durable`: fsync the file before the rename and the directory after it.
fn replace_file(path: &Path, bytes: &[u8], durable: bool) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        if durable {
            file.sync_all()?;
            drop(file);
            crash_point("mid-write");
        }
        fs::rename(&tmp, path)?;
        if durable {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err(path))
}

/// Remove temporary files a crash left in `dir` (`.<name>.tmp.<pid>` of [`atomic_write`]).
/// Only for directories no live process writes to: the caller holds the instance lock.
pub fn remove_stale_temp_files(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.contains(".tmp.") {
            log::info!("removing {} left by a crash", entry.path().display());
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Serialize `value` and replace `path` with it by rename, without fsync: for records that
/// only matter while the process that wrote them is alive (a shim's identity, the spec it
/// reads at start). A power cut kills that process too, and the boot id then tells the next
/// daemon so; a process crash cannot tear them (rename is atomic). Saves two fsyncs on the
/// path of every start.
pub fn write_ron_volatile<T: Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    replace_file(path, to_ron(path, value)?.as_bytes(), false)
}

/// Serialize `value` as pretty RON and write it atomically.
pub fn write_ron<T: Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    atomic_write(path, to_ron(path, value)?.as_bytes())
}

fn to_ron<T: Serialize>(path: &Path, value: &T) -> Result<String, StateError> {
    ron::ser::to_string_pretty(value, ron::ser::PrettyConfig::default()).map_err(|e| {
        StateError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    })
}

/// Read a RON state file. `Ok(None)` when it does not exist.
pub fn read_ron<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StateError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    ron::from_str(&text)
        .map(Some)
        .map_err(|e| StateError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// Test hook (DESIGN: crash points): when `KEEL_CRASH_AT` names this point, die right here,
/// as a power cut would. `KEEL_CRASH_AT=name:N` dies the N-th time the point is reached (so a
/// test can interrupt an overwrite, not only the first write). Only for tests.
pub fn crash_point(name: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static REACHED: AtomicU32 = AtomicU32::new(0);
    let Ok(wanted) = std::env::var("KEEL_CRASH_AT") else {
        return;
    };
    let (point, nth) = match wanted.split_once(':') {
        Some((point, n)) => (point, n.parse().unwrap_or(1)),
        None => (wanted.as_str(), 1),
    };
    if point != name || REACHED.fetch_add(1, Ordering::SeqCst) + 1 != nth {
        return;
    }
    log::warn!("KEEL_CRASH_AT={wanted}: dying on purpose");
    // SIGKILL, not abort(): no unwinding, no flushing, no core file — a power cut.
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    std::process::abort();
}

/// `flock(LOCK_EX|LOCK_NB)` on `state_dir/lock`: one daemon per state directory. The holder's
/// pid is written into the file so a refused second daemon can name it. The lock dies with
/// the process (no stale pid file to be fooled by pid reuse).
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    pub fn acquire(path: &Path) -> Result<Self, StateError> {
        // A daemon killed an instant after forking a shim leaves the lock held by that child
        // until it execs (close-on-exec): when the recorded holder is dead, wait a little.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            match Self::try_acquire(path) {
                Err(StateError::Locked { holder, .. })
                    if holder.is_some_and(|pid| !pid_alive(pid))
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    fn try_acquire(path: &Path) -> Result<Self, StateError> {
        use std::io::{Read, Seek};
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(io_err(path))?;
        let locked = crate::sys::try_lock_exclusive(&file).map_err(io_err(path))?;
        if !locked {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(StateError::Locked {
                path: path.to_path_buf(),
                holder: text.trim().parse().ok(),
            });
        }
        file.set_len(0).map_err(io_err(path))?;
        file.rewind().map_err(io_err(path))?;
        writeln!(file, "{}", std::process::id()).map_err(io_err(path))?;
        file.sync_all().map_err(io_err(path))?;
        Ok(InstanceLock { _file: file })
    }
}

fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// One line of `events.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub ts_ms: u64,
    pub unit: String,
    pub attempt: u32,
    pub generation: u64,
    /// The transition or happening: `queued`, `starting`, `running`, `exited`, `backoff`, …
    pub event: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// The append-only journal of transitions.
pub struct Journal {
    path: PathBuf,
    file: File,
    dirty: bool,
    size: u64,
}

/// The journal is rotated to `events.jsonl.1` (replacing the previous one) past this size.
pub const JOURNAL_MAX_BYTES: u64 = 32 << 20;

/// The rotated journal beside `path`.
pub fn rotated_journal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

impl Journal {
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(io_err(path))?;
        // A line torn by a power cut must not swallow the next event: end it.
        if Self::ends_mid_line(&mut file).map_err(io_err(path))? {
            file.write_all(b"\n").map_err(io_err(path))?;
        }
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            dirty: false,
            size,
        })
    }

    fn ends_mid_line(file: &mut File) -> io::Result<bool> {
        use std::io::{Read, Seek, SeekFrom};
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(false);
        }
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        Ok(last[0] != b'\n')
    }

    /// Past [`JOURNAL_MAX_BYTES`], start a new file (the old one stays as `events.jsonl.1`).
    fn rotate_if_full(&mut self) -> Result<(), StateError> {
        if self.size < JOURNAL_MAX_BYTES {
            return Ok(());
        }
        let _ = self.file.sync_data();
        fs::rename(&self.path, rotated_journal_path(&self.path)).map_err(io_err(&self.path))?;
        *self = Journal::open(&self.path)?;
        Ok(())
    }

    /// Append one event as one line. [`Journal::sync`] makes it durable: the daemon syncs
    /// once per loop round, so a burst of transitions costs one fdatasync, not one each.
    pub fn append(&mut self, event: &Event) -> Result<(), StateError> {
        let mut line = serde_json::to_string(event).map_err(|e| StateError::Parse {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        line.push('\n');
        self.rotate_if_full()?;
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            // A line cut short (a full disk mid-write) would run into the next one: take it
            // back. Truncating frees space, so it works on a full disk.
            let _ = self.file.set_len(self.size);
            return Err(io_err(&self.path)(e));
        }
        self.size += line.len() as u64;
        self.dirty = true;
        Ok(())
    }

    /// fdatasync what was appended since the last sync.
    pub fn sync(&mut self) -> Result<(), StateError> {
        if !self.dirty {
            return Ok(());
        }
        self.dirty = false;
        self.file.sync_data().map_err(io_err(&self.path))
    }
}

/// Format unix milliseconds as RFC 3339 UTC (`2026-11-30T05:12:03.123Z`).
pub fn rfc3339(ts_ms: u64) -> String {
    let secs = ts_ms / 1000;
    let millis = ts_ms % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("keel-state-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn atomic_write_replaces_whole_and_leaves_no_temp() {
        let dir = scratch("atomic");
        let path = dir.join("state.ron");
        atomic_write(&path, b"old").unwrap();
        atomic_write(&path, b"new contents").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new contents");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "temp files left: {names:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn second_lock_names_the_holder() {
        let dir = scratch("lock");
        let path = dir.join("lock");
        let _held = InstanceLock::acquire(&path).unwrap();
        // flock locks belong to the open file description: a second open in the same process
        // conflicts just as another process would.
        match InstanceLock::acquire(&path) {
            Err(StateError::Locked { holder, .. }) => {
                assert_eq!(holder, Some(std::process::id() as i32))
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("second lock acquired"),
        }
        drop(_held);
        InstanceLock::acquire(&path).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_796_015_523_456), "2026-11-30T05:12:03.456Z");
    }

    #[test]
    fn a_torn_last_line_is_ended_before_the_next_event() {
        let dir = scratch("torn");
        let path = dir.join("events.jsonl");
        fs::write(&path, "{\"time\":\"x\",\"ts_").unwrap();
        let mut journal = Journal::open(&path).unwrap();
        journal
            .append(&Event {
                time: rfc3339(1),
                ts_ms: 1,
                unit: "a".into(),
                attempt: 1,
                generation: 1,
                event: "running".into(),
                detail: String::new(),
            })
            .unwrap();
        journal.sync().unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let last = text.lines().last().unwrap();
        assert_eq!(
            serde_json::from_str::<Event>(last).unwrap().event,
            "running"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn journal_lines_parse_back() {
        let dir = scratch("journal");
        let path = dir.join("events.jsonl");
        let mut journal = Journal::open(&path).unwrap();
        for n in 0..3 {
            journal
                .append(&Event {
                    time: rfc3339(n),
                    ts_ms: n,
                    unit: "a".into(),
                    attempt: n as u32,
                    generation: n,
                    event: "running".into(),
                    detail: String::new(),
                })
                .unwrap();
        }
        let text = fs::read_to_string(&path).unwrap();
        let events: Vec<Event> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(events.len(), 3);
        assert_eq!(events[2].attempt, 2);
        fs::remove_dir_all(&dir).unwrap();
    }
}
