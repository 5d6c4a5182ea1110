//! A recording [`CgroupFs`] for unit tests: it remembers every mutating operation, serves reads
//! from a table, and fails chosen paths with chosen errnos.

use super::CgroupFs;
use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One mutating operation, in the order it was asked for (failed ones included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Mkdir(PathBuf),
    Rmdir(PathBuf),
    Write(PathBuf, String),
    Kill(i32),
}

#[derive(Debug, Default)]
struct State {
    ops: Vec<Op>,
    files: HashMap<PathBuf, String>,
    dirs: BTreeSet<PathBuf>,
    /// errno for any operation on the path, and how many more times (None: always).
    failures: HashMap<PathBuf, (i32, Option<u32>)>,
}

#[derive(Debug, Default)]
pub(crate) struct RecordingFs {
    state: Mutex<State>,
}

impl RecordingFs {
    pub(crate) fn new() -> Arc<RecordingFs> {
        Arc::new(RecordingFs::default())
    }

    pub(crate) fn file(&self, path: impl Into<PathBuf>, content: &str) {
        let mut state = self.state.lock().unwrap();
        state.files.insert(path.into(), content.to_string());
    }

    pub(crate) fn dir(&self, path: impl Into<PathBuf>) {
        self.state.lock().unwrap().dirs.insert(path.into());
    }

    pub(crate) fn fail(&self, path: impl Into<PathBuf>, errno: i32) {
        let mut state = self.state.lock().unwrap();
        state.failures.insert(path.into(), (errno, None));
    }

    pub(crate) fn fail_once(&self, path: impl Into<PathBuf>, errno: i32) {
        let mut state = self.state.lock().unwrap();
        state.failures.insert(path.into(), (errno, Some(1)));
    }

    pub(crate) fn ops(&self) -> Vec<Op> {
        self.state.lock().unwrap().ops.clone()
    }

    pub(crate) fn clear_ops(&self) {
        self.state.lock().unwrap().ops.clear();
    }

    /// The writes only, as (path, value) strings.
    pub(crate) fn writes(&self) -> Vec<(String, String)> {
        self.ops()
            .into_iter()
            .filter_map(|op| match op {
                Op::Write(path, value) => Some((path.display().to_string(), value)),
                _ => None,
            })
            .collect()
    }

    fn failure(state: &mut State, path: &Path) -> io::Result<()> {
        let Some((errno, remaining)) = state.failures.get_mut(path) else {
            return Ok(());
        };
        let errno = *errno;
        match remaining {
            Some(0) => return Ok(()),
            Some(n) => *n -= 1,
            None => {}
        }
        Err(io::Error::from_raw_os_error(errno))
    }
}

fn enoent() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOENT)
}

impl CgroupFs for RecordingFs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock().unwrap();
        state.ops.push(Op::Mkdir(path.to_path_buf()));
        Self::failure(&mut state, path)?;
        if !state.dirs.insert(path.to_path_buf()) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        Ok(())
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock().unwrap();
        state.ops.push(Op::Rmdir(path.to_path_buf()));
        Self::failure(&mut state, path)?;
        if state.dirs.remove(path) {
            Ok(())
        } else {
            Err(enoent())
        }
    }

    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        let mut state = self.state.lock().unwrap();
        state
            .ops
            .push(Op::Write(path.to_path_buf(), value.to_string()));
        Self::failure(&mut state, path)?;
        // Model cgroup.subtree_control, whose content the tree reads back.
        if path
            .file_name()
            .is_some_and(|n| n == "cgroup.subtree_control")
        {
            let text = state.files.entry(path.to_path_buf()).or_default();
            let mut enabled: Vec<String> = text.split_whitespace().map(str::to_string).collect();
            if let Some(name) = value.strip_prefix('+') {
                if !enabled.iter().any(|c| c == name) {
                    enabled.push(name.to_string());
                }
            } else if let Some(name) = value.strip_prefix('-') {
                enabled.retain(|c| c != name);
            }
            *text = enabled.join(" ");
        }
        Ok(())
    }

    fn read(&self, path: &Path) -> io::Result<String> {
        let mut state = self.state.lock().unwrap();
        Self::failure(&mut state, path)?;
        state.files.get(path).cloned().ok_or_else(enoent)
    }

    fn subdirs(&self, path: &Path) -> io::Result<Vec<String>> {
        let state = self.state.lock().unwrap();
        if !state.dirs.contains(path) {
            return Err(enoent());
        }
        Ok(state
            .dirs
            .iter()
            .filter(|d| d.parent() == Some(path))
            .filter_map(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect())
    }

    fn sigkill(&self, pid: i32) -> io::Result<()> {
        self.state.lock().unwrap().ops.push(Op::Kill(pid));
        Ok(())
    }
}
