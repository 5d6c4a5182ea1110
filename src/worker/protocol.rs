//! What the daemon and a worker say to each other: one [`JobRequest`] as a JSON document on
//! the worker's stdin, then JSON lines on its stdout: any number of `{"progress":{...}}` and
//! one final `{"done":{...}}`.

use crate::checkout::HarvestLimits;
use crate::sandbox::spec::{CheckoutMounts, KeelDirs, PathFindings};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The longest line the daemon reads from a worker: a longer one fails the job.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Everything a worker needs: where keel's state is, how to bound itself, and its job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    pub state_dir: PathBuf,
    /// The daemon's pid: a worker whose parent is already another process exits at once.
    pub parent: i32,
    /// Hybrid hosts: the v1 `cgroup.procs` files of keel's workers cgroup, joined first.
    pub v1_procs: Vec<PathBuf>,
    /// Without a cgroup to bound its memory: RLIMIT_AS in bytes (see docs/operations.md).
    pub address_space_limit: Option<u64>,
    pub job: Job,
}

/// One job: the slow step of a task (or of the daemon) that must not run in the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Job {
    /// Before an attempt: check the user-named paths answer, then make or reuse the checkout.
    Prepare {
        unit: String,
        repo: Option<RepoRef>,
        owner: Option<(u32, u32)>,
        paths: StartPaths,
        /// Kernel quotas: the project id and limits to give the task's directories.
        #[serde(default)]
        quota: Option<Box<QuotaAsk>>,
    },
    /// After an attempt (or `keel harvest`): bring the task's branch home.
    Harvest {
        unit: String,
        attempt: u32,
        limits: HarvestLimits,
    },
    /// `keel rm [--force]`: remove the checkout (harvested first, within `limits`).
    Remove {
        unit: String,
        attempt: u32,
        force: bool,
        limits: HarvestLimits,
    },
    /// `keel prune`: the checkouts of these finished tasks (unit, attempt), harvested first
    /// within `limits`, and unused bases.
    Prune {
        finished: Vec<(String, u32)>,
        limits: HarvestLimits,
    },
    /// `keel status`'s figures: the checkout's disk use and the kept branches; with `work`
    /// (asked only of a finished task: a start's preparation then waits behind the job, so
    /// the checkout's files are mounted by nobody else meanwhile), its work as well.
    DiskUse {
        unit: String,
        #[serde(default)]
        work: bool,
    },
    /// `resources.disk`: what the task's directory (`tasks/<unit>`) holds on disk.
    TaskDiskUse {
        unit: String,
        /// An attempt under kernel quotas: the project's usage is read (`Q_GETQUOTA`), not
        /// the directory walked.
        #[serde(default)]
        project: Option<u32>,
    },
    /// Delete a tree the daemon renamed into its trash (`keel rm`'s files).
    Delete { path: PathBuf },
}

/// The paths a start's sandbox names, which the preparation job reads so that the loop need
/// not ([`PathFindings`]): hidden (keel's, the host's defaults, the unit's) and writable, and
/// keel's own directories, which no writable path may be.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartPaths {
    pub hidden: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    pub keel_dirs: KeelDirs,
    /// The unit's secret files (name, path), checked as keel would read them
    /// (`crate::secrets::check_file`): a file on a disk is read here, never in the loop.
    #[serde(default)]
    pub secret_files: Vec<(String, PathBuf)>,
}

/// Kernel quotas for a task: its project id, and the block limits in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaAsk {
    pub project: u32,
    pub hard: u64,
    pub soft: u64,
}

/// A unit's `repo`, as the worker needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoRef {
    pub path: String,
    pub base: String,
    pub branch: Option<String>,
}

impl Job {
    /// The job's kind, as logs, test hooks (`KEEL_TEST_WORKER_HANG`) and messages name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Job::Prepare { .. } => "checkout",
            Job::Harvest { .. } => "harvest",
            Job::Remove { .. } => "remove",
            Job::Prune { .. } => "prune",
            Job::DiskUse { .. } => "disk-use",
            Job::TaskDiskUse { .. } => "task-disk-use",
            Job::Delete { .. } => "delete",
        }
    }

    /// What it does, for a person: "checkout preparation of /repo".
    pub fn describe(&self) -> String {
        match self {
            Job::Prepare {
                repo: Some(repo), ..
            } => format!("checkout preparation of {}", repo.path),
            Job::Prepare { .. } => "the check of the sandbox's paths".to_string(),
            Job::Harvest { unit, .. } => format!("the harvest of {unit}'s checkout"),
            Job::Remove { unit, .. } => format!("the removal of {unit}'s checkout"),
            Job::Prune { .. } => "keel prune".to_string(),
            Job::DiskUse { unit, .. } => format!("the disk use of {unit}'s checkout"),
            Job::TaskDiskUse { unit, .. } => format!("the disk use of {unit}'s directory"),
            Job::Delete { path } => format!("the deletion of {}", path.display()),
        }
    }
}

/// How far a job has come: its current step ("check paths", "checkout", "base tree") and, for
/// a counted step, `done` of `total`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    pub step: String,
    #[serde(default)]
    pub done: u64,
    #[serde(default)]
    pub total: u64,
}

/// What a job produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum JobResult {
    /// The checkout is ready (`None`: the unit has no repo; only its paths were checked).
    Prepared {
        checkout: Option<Box<PreparedCheckout>>,
        findings: PathFindings,
        /// The job's [`QuotaAsk`], if it had one: `Ok` when the directories carry the project
        /// id and its limits are set, or why not (the attempt is then measured).
        #[serde(default)]
        quota: Option<Result<(), String>>,
    },
    /// The harvest's summary.
    Harvested { detail: String },
    /// The checkout is gone (`note`: what was freed, harvested, kept), or there was none.
    Removed { note: String },
    /// `keel prune`'s answer, and the checkouts it removed (unit, attempt).
    Pruned {
        message: String,
        removed: Vec<(String, u32)>,
    },
    /// The checkout's own disk use (`None`: no checkout) and the kept branches.
    DiskUse {
        bytes: Option<u64>,
        kept_branches: Vec<String>,
        /// A stopped task's work, for `keel status`'s unreviewed mark (`None`: running, or
        /// no checkout).
        #[serde(default)]
        work: Option<WorkFacts>,
    },
    /// The task directory's disk use (allocated bytes).
    TaskDiskUse {
        bytes: u64,
        /// Read from the kernel's quota: the project's hard limit (bytes; 0: none).
        #[serde(default)]
        quota_hard: Option<u64>,
    },
    /// The tree is gone.
    Deleted,
}

/// [`crate::checkout::Prepared`], as it crosses the pipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreparedCheckout {
    pub mounts: CheckoutMounts,
    pub branch: String,
    pub base_commit: String,
    pub created: bool,
    pub base_built: bool,
    pub full_reason: Option<String>,
}

/// Why a job failed, as the worker saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFailure {
    pub message: String,
    /// The failure is the unit's (a base that does not exist, a path it named): the attempt
    /// fails. Otherwise the host's (a disk, a repository keel could not read): retried.
    pub unit_mistake: bool,
}

/// One line a worker writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkerLine {
    Progress(Progress),
    Done(Result<JobResult, JobFailure>),
}

impl WorkerLine {
    /// The line as written (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parse one line a worker wrote (without its newline).
    pub fn parse(line: &[u8]) -> Result<WorkerLine, String> {
        if line.len() > MAX_LINE_BYTES {
            return Err(format!(
                "the worker wrote a line of {} bytes (at most {MAX_LINE_BYTES})",
                line.len()
            ));
        }
        serde_json::from_slice(line).map_err(|e| {
            let shown = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
            format!(
                "the worker wrote a line that is not one of its own ({e}): {}",
                crate::fmt::printable(&shown)
            )
        })
    }
}

/// What a worker's stdout holds so far, cut into lines as they complete.
#[derive(Debug, Default)]
pub struct LineBuffer {
    pending: Vec<u8>,
}

impl LineBuffer {
    /// Add what was read; return the complete lines, parsed. A partial line longer than
    /// [`MAX_LINE_BYTES`] is an error at once (never buffered without bound).
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Result<WorkerLine, String>> {
        self.pending.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = &line[..line.len() - 1];
            if !line.iter().all(u8::is_ascii_whitespace) {
                lines.push(WorkerLine::parse(line));
            }
        }
        if self.pending.len() > MAX_LINE_BYTES {
            lines.push(Err(format!(
                "the worker wrote more than {MAX_LINE_BYTES} bytes without a newline"
            )));
            self.pending.clear();
        }
        lines
    }

    /// Bytes of an unfinished line (at the worker's end: it died mid-line).
    pub fn unfinished(&self) -> usize {
        self.pending.len()
    }
}

/// A stopped task's work as `keel diff` would show it: its fingerprint, whether there is any,
/// and the fingerprint a person last reviewed (`tasks/<unit>/reviewed.ron`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkFacts {
    pub fingerprint: String,
    pub has_work: bool,
    pub reviewed: Option<String>,
}

impl WorkFacts {
    pub fn unreviewed(&self) -> bool {
        self.has_work && self.reviewed.as_deref() != Some(self.fingerprint.as_str())
    }
}

#[cfg(test)]
mod tests;
