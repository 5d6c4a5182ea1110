//! Where everything lives under the state directory (DESIGN, "Durable state").

use super::{create_private_dir, io_err, StateError};
use std::fs;
use std::io;
use std::path::PathBuf;

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
    /// The base trees shared by checkouts (`crate::checkout`).
    pub fn bases_dir(&self) -> PathBuf {
        self.root.join("bases")
    }
    /// What `keel rm` took away, renamed here at once (the same filesystem) and deleted by a
    /// worker: the loop never walks an agent's files.
    pub fn trash_dir(&self) -> PathBuf {
        self.root.join("trash")
    }
    /// The sandbox templates' build directories (`crate::sandbox::templates`).
    pub fn templates_dir(&self) -> PathBuf {
        self.root.join("templates")
    }
    /// The units directory when `--units` names none.
    pub fn default_units_dir(&self) -> PathBuf {
        self.root.join("units")
    }

    /// Create the state directory (mode 0700 when keel makes it; one the operator made keeps
    /// its mode) and keel's own directories in it, mode 0700 whatever the umask
    /// ([`super::private`]).
    pub fn create(&self) -> Result<(), StateError> {
        for dir in [self.root.clone(), self.tasks_dir(), self.templates_dir()] {
            create_private_dir(&dir).map_err(io_err(&dir))?;
        }
        Ok(())
    }

    /// Create a task's directories (idempotent). The task's own directory and its `run/`
    /// are keel's (0700); `work/` and `checkpoint/` are the agent's (mounted in its sandbox,
    /// given to `sandbox.user` by the shim), private by the task's directory around them.
    pub fn create_task_dirs(&self, unit: &str) -> Result<(), StateError> {
        for dir in [self.task_dir(unit), self.run_dir(unit)] {
            create_private_dir(&dir).map_err(io_err(&dir))?;
        }
        for dir in [self.work_dir(unit), self.checkpoint_dir(unit)] {
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
