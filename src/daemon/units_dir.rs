//! The units directory: one `.ron` file per task. A file that appears is queued, a file that
//! changes takes effect at the task's next start, a file that disappears removes its task, and
//! a file that does not parse is reported without harming anything else.

use super::record::{Intent, TaskRecord, TaskState};
use super::{Daemon, Task};
use crate::state::now_ms;
use crate::unit::{load_unit_file, unit_name_of};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Files in the units directory that are unit files (`*.ron`, not hidden, not editor temps).
pub fn unit_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.starts_with('.') && p.extension().is_some_and(|e| e == "ron") && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}

impl Daemon {
    /// Compare the units directory with the tasks and act on the differences.
    pub(crate) fn scan_units(&mut self) {
        let files = match unit_files(&self.units_dir) {
            Ok(files) => files,
            Err(e) => {
                log::error!(
                    "cannot read units directory {}: {e}",
                    self.units_dir.display()
                );
                return;
            }
        };
        let mut seen: BTreeMap<String, ()> = BTreeMap::new();
        let mut invalid = BTreeMap::new();
        for path in files {
            let file_name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            match load_unit_file(&path) {
                Ok((name, unit, text)) => {
                    seen.insert(name.clone(), ());
                    self.accept_unit(&name, unit, text);
                }
                Err(e) => {
                    if let Some(name) = unit_name_of(&path) {
                        // A broken edit of a known unit does not remove the task.
                        seen.insert(name, ());
                    }
                    let message = e.to_string();
                    if self.invalid_units.get(&file_name) != Some(&message) {
                        log::error!("invalid unit: {message}");
                        self.journal_event(&file_name, 0, 0, "invalid-unit", &message);
                    }
                    invalid.insert(file_name, message);
                }
            }
        }
        self.invalid_units = invalid;
        let gone: Vec<String> = self
            .tasks
            .keys()
            .filter(|name| !seen.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            log::info!("{name}: unit file removed: removing the task");
            if let Some(task) = self.tasks.get_mut(&name) {
                task.unit = None;
                task.unit_text = None;
            }
            self.stop_task(&name, Intent::Remove);
        }
        self.schedule_pending = true;
    }

    /// A valid unit file: queue a new task, or note an edit for the next start.
    pub(crate) fn accept_unit(&mut self, name: &str, unit: crate::unit::Unit, text: String) {
        match self.tasks.get_mut(name) {
            Some(task) => {
                if task.unit_text.as_deref() != Some(text.as_str()) {
                    let running = task.record.state.has_attempt();
                    task.unit = Some(unit);
                    task.unit_text = Some(text);
                    let (attempt, generation) = (task.record.attempt, task.record.generation);
                    let detail = if running {
                        "takes effect at the next start (keel restart applies it now)"
                    } else {
                        ""
                    };
                    self.journal_event(name, attempt, generation, "unit-changed", detail);
                    log::info!("{name}: unit file changed");
                }
            }
            None => {
                let record = TaskRecord::new(name, now_ms());
                self.tasks.insert(
                    name.to_string(),
                    Task {
                        name: name.to_string(),
                        record,
                        unit: Some(unit),
                        unit_text: Some(text),
                        accepted_text: None,
                        shim: None,
                        started_at: None,
                    },
                );
                if let Err(e) = self.dirs.create_task_dirs(name) {
                    log::error!("{name}: {e}");
                }
                self.transition(name, TaskState::Queued, "new unit");
            }
        }
    }
}
