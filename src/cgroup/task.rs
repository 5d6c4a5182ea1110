//! One task's cgroups: `<base>/<name>/tasks/<unit>` in v2 and, on hybrid hosts, in the v1 cpu,
//! cpuacct, memory and pids hierarchies.

use super::fs::{mkdir_or_existing, rmdir_or_gone};
use super::{
    keyed_value, CgroupError, CgroupFs, Limits, Mode, OomWatch, Removal, Stats, V1Controller,
    CPU_PERIOD_US,
};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A task's cgroup directories. Creating it is [`TaskCgroup::create`]; everything else reads or
/// writes files inside those directories only.
#[derive(Debug, Clone)]
pub struct TaskCgroup {
    fs: Arc<dyn CgroupFs>,
    mode: Mode,
    unit: String,
    v2: PathBuf,
    /// `v2` as `/proc/<pid>/cgroup` names it (relative to our cgroup namespace's root).
    v2_cgroup: PathBuf,
    /// Hybrid: one entry per v1 controller; co-mounted controllers share a path.
    v1: Vec<(V1Controller, PathBuf)>,
}

fn errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
}

impl TaskCgroup {
    pub(super) fn new(
        fs: Arc<dyn CgroupFs>,
        mode: Mode,
        unit: &str,
        (v2, v2_cgroup): (PathBuf, PathBuf),
        v1: Vec<(V1Controller, PathBuf)>,
    ) -> TaskCgroup {
        TaskCgroup {
            fs,
            mode,
            unit: unit.to_string(),
            v2,
            v2_cgroup,
            v1,
        }
    }

    pub fn unit(&self) -> &str {
        &self.unit
    }

    /// The task's directory in the v2 hierarchy (both modes).
    pub fn v2_path(&self) -> &Path {
        &self.v2
    }

    /// The task's cgroup as `/proc/<pid>/cgroup` names it on its `0::` line: what a process
    /// in this cgroup, and only such a process, shows there.
    pub fn v2_cgroup(&self) -> &Path {
        &self.v2_cgroup
    }

    /// The task's directory in a v1 hierarchy (hybrid only).
    pub fn v1_path(&self, controller: V1Controller) -> Option<&Path> {
        self.v1
            .iter()
            .find(|(c, _)| *c == controller)
            .map(|(_, p)| p.as_path())
    }

    /// Every distinct v1 directory (co-mounted controllers once).
    fn v1_dirs(&self) -> Vec<&Path> {
        let mut dirs: Vec<&Path> = Vec::new();
        for (_, path) in &self.v1 {
            if !dirs.contains(&path.as_path()) {
                dirs.push(path);
            }
        }
        dirs
    }

    /// Create the directories (an existing one without processes is reused) and write the
    /// limits.
    pub fn create(&self, limits: &Limits) -> Result<(), CgroupError> {
        // v2 first: it is where the task is spawned (CLONE_INTO_CGROUP).
        let mut dirs = vec![self.v2.as_path()];
        dirs.extend(self.v1_dirs());
        for dir in dirs {
            self.make_dir(dir)?;
        }
        match self.mode {
            Mode::V2 => self.limits_v2(limits),
            Mode::Hybrid => self.limits_v1(limits),
        }
    }

    fn make_dir(&self, dir: &Path) -> Result<(), CgroupError> {
        let fs = self.fs.as_ref();
        let created = mkdir_or_existing(fs, dir).map_err(|source| CgroupError::CreateTask {
            path: dir.to_path_buf(),
            source,
        })?;
        if created {
            return Ok(());
        }
        // EEXIST: reuse a leftover cgroup of an earlier attempt if it is empty; a name taken by
        // an interface file (a unit called "cpu.max") has no cgroup.procs.
        match fs.read(&dir.join("cgroup.procs")) {
            Ok(procs) if procs.trim().is_empty() => Ok(()),
            Ok(_) => Err(CgroupError::TaskInUse {
                path: dir.to_path_buf(),
            }),
            Err(_) => Err(CgroupError::CreateTask {
                path: dir.to_path_buf(),
                source: io::Error::from_raw_os_error(libc::EEXIST),
            }),
        }
    }

    /// Write a limit; a missing file means the controller is not enabled here.
    fn set(
        &self,
        dir: &Path,
        file: &str,
        controller: &'static str,
        value: String,
    ) -> Result<(), CgroupError> {
        let path = dir.join(file);
        self.fs
            .write(&path, &value)
            .map_err(|source| CgroupError::SetLimit {
                path,
                controller,
                value,
                source,
            })
    }

    /// Write a limit that only some kernels have; a missing file is skipped.
    fn set_if_present(
        &self,
        dir: &Path,
        file: &str,
        controller: &'static str,
        value: String,
    ) -> Result<(), CgroupError> {
        match self.set(dir, file, controller, value) {
            Err(e) if e.io_error().and_then(errno) == Some(libc::ENOENT) => Ok(()),
            other => other,
        }
    }

    /// v2 (cgroup-v2.rst, "CPU Interface Files", "Memory Interface Files", "PID Interface
    /// Files").
    fn limits_v2(&self, limits: &Limits) -> Result<(), CgroupError> {
        let dir = &self.v2;
        // The request is the weight among the tasks (siblings under `tasks/`); only a CPU
        // limit caps (cpu.max "max": none).
        self.set(dir, "cpu.weight", "cpu", limits.cpu_weight().to_string())?;
        self.set(dir, "cpu.max", "cpu", limits.cpu_max())?;
        self.set(dir, "memory.max", "memory", limits.memory_limit.to_string())?;
        self.set(
            dir,
            "memory.high",
            "memory",
            limits.memory_high().to_string(),
        )?;
        // No swap: a task over its limit is OOM-killed rather than thrashing the host's swap.
        // The file is absent without swap accounting (CONFIG_SWAP off, swapaccount=0).
        self.set_if_present(dir, "memory.swap.max", "memory", "0".into())?;
        self.set(dir, "pids.max", "pids", limits.pids.to_string())
    }

    /// v1 (cgroup-v1/sched-bwc.rst, cgroup-v1/memory.rst, cgroup-v1/pids.rst).
    fn limits_v1(&self, limits: &Limits) -> Result<(), CgroupError> {
        if let Some(dir) = self.v1_path(V1Controller::Cpu) {
            self.set(dir, "cpu.shares", "cpu", limits.cpu_shares().to_string())?;
            self.set(dir, "cpu.cfs_period_us", "cpu", CPU_PERIOD_US.to_string())?;
            self.set(dir, "cpu.cfs_quota_us", "cpu", limits.cfs_quota_us())?;
        }
        if let Some(dir) = self.v1_path(V1Controller::Memory) {
            let bytes = limits.memory_limit.to_string();
            // memory.memsw.limit_in_bytes (memory + swap, cgroup-v1/memory.rst "2.4 Swap
            // Extension") may never be below memory.limit_in_bytes: the kernel refuses either
            // write with EINVAL if it would be. A reused cgroup whose memsw limit is below the
            // new limit refuses the first write, so raise memsw first there.
            match self.set(dir, "memory.limit_in_bytes", "memory", bytes.clone()) {
                Err(e) if e.io_error().and_then(errno) == Some(libc::EINVAL) => {
                    self.set_if_present(
                        dir,
                        "memory.memsw.limit_in_bytes",
                        "memory",
                        bytes.clone(),
                    )?;
                    self.set(dir, "memory.limit_in_bytes", "memory", bytes)?;
                }
                Err(e) => return Err(e),
                Ok(()) => {
                    // Same figure: swap off for the task (absent without swap accounting).
                    self.set_if_present(dir, "memory.memsw.limit_in_bytes", "memory", bytes)?;
                }
            }
            // Best effort: memory.rst refuses swappiness changes in some configurations.
            let _ = self.fs.write(&dir.join("memory.swappiness"), "0");
            // Above its request a task's pages are reclaimed first when the host runs short
            // (memory.rst "7. Soft limits"). Best effort too: PREEMPT_RT kernels refuse it.
            let soft = limits.memory_request.min(limits.memory_limit).to_string();
            let _ = self
                .fs
                .write(&dir.join("memory.soft_limit_in_bytes"), &soft);
        }
        if let Some(dir) = self.v1_path(V1Controller::Pids) {
            self.set(dir, "pids.max", "pids", limits.pids.to_string())?;
        }
        Ok(())
    }

    /// A descriptor of the v2 directory for `clone3(CLONE_INTO_CGROUP)`, close-on-exec. Opened
    /// O_RDONLY|O_DIRECTORY: clone(2) documents O_RDONLY or O_PATH, and a real descriptor also
    /// serves `fstat`/`openat` should the caller want them. Only a v2 directory works: a v1 one
    /// gives EBADF (KERNEL-NOTES).
    pub fn open_v2_dir(&self) -> Result<OwnedFd, CgroupError> {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&self.v2)
            .map(OwnedFd::from)
            .map_err(|source| CgroupError::OpenDir {
                path: self.v2.clone(),
                source,
            })
    }

    /// The v1 `cgroup.procs` files the shim writes "0" into before it starts the agent
    /// (`CLONE_INTO_CGROUP` takes only a v2 directory; KERNEL-NOTES). Empty on v2.
    pub fn v1_procs_files(&self) -> Vec<PathBuf> {
        self.v1_dirs()
            .into_iter()
            .map(|dir| dir.join("cgroup.procs"))
            .collect()
    }

    fn read(&self, path: PathBuf) -> Result<String, CgroupError> {
        self.fs
            .read(&path)
            .map_err(|source| CgroupError::Read { path, source })
    }

    fn read_number(&self, path: PathBuf) -> Result<u64, CgroupError> {
        let text = self.read(path.clone())?;
        text.trim().parse().map_err(|_| CgroupError::Parse {
            path,
            content: text,
        })
    }

    fn read_keyed(&self, path: PathBuf, key: &str) -> Result<u64, CgroupError> {
        let text = self.read(path.clone())?;
        keyed_value(&text, key).ok_or(CgroupError::Parse {
            path,
            content: text,
        })
    }

    /// Whether any process is left in the task (v2 `cgroup.events`, "populated").
    pub fn populated(&self) -> Result<bool, CgroupError> {
        Ok(self.read_keyed(self.v2.join("cgroup.events"), "populated")? != 0)
    }

    /// The processes of the task (v2 `cgroup.procs`).
    pub fn pids(&self) -> Result<Vec<i32>, CgroupError> {
        let path = self.v2.join("cgroup.procs");
        let text = self.read(path.clone())?;
        text.split_whitespace()
            .map(|p| p.parse())
            .collect::<Result<_, _>>()
            .map_err(|_| CgroupError::Parse {
                path,
                content: text,
            })
    }

    pub fn stats(&self) -> Result<Stats, CgroupError> {
        match self.mode {
            Mode::V2 => self.stats_v2(),
            Mode::Hybrid => self.stats_v1(),
        }
    }

    /// CPU time used by the task so far (µs): one file, for liveness checks that need nothing
    /// else.
    pub fn cpu_usage_usec(&self) -> Result<u64, CgroupError> {
        let unified = self.read_keyed(self.v2.join("cpu.stat"), "usage_usec");
        match (self.mode, unified) {
            (_, Ok(usec)) => Ok(usec),
            (Mode::V2, Err(e)) => Err(e),
            // The unified cgroup's cpu.stat exists without the cpu controller (usage_usec
            // comes from the cgroup core's rstat); cpuacct.usage (nanoseconds) where it does
            // not.
            (Mode::Hybrid, Err(unified)) => match self.v1_path(V1Controller::Cpuacct) {
                Some(dir) => Ok(self.read_number(dir.join("cpuacct.usage"))? / 1000),
                None => Err(unified),
            },
        }
    }

    fn stats_v2(&self) -> Result<Stats, CgroupError> {
        let dir = &self.v2;
        let peak = match self.fs.read(&dir.join("memory.peak")) {
            Ok(text) => text.trim().parse().ok(),
            Err(_) => None,
        };
        Ok(Stats {
            cpu_usage_usec: self.read_keyed(dir.join("cpu.stat"), "usage_usec")?,
            memory_current: self.read_number(dir.join("memory.current"))?,
            memory_peak: peak,
            pids_current: self.read_number(dir.join("pids.current"))?,
            oom_kills: self.read_keyed(dir.join("memory.events"), "oom_kill")?,
        })
    }

    fn stats_v1(&self) -> Result<Stats, CgroupError> {
        let missing = |controller: V1Controller| CgroupError::Read {
            path: self.v2.clone(),
            source: io::Error::new(
                io::ErrorKind::NotFound,
                format!("no v1 {controller} hierarchy"),
            ),
        };
        let cpu = self.cpu_usage_usec()?;
        let memory = self
            .v1_path(V1Controller::Memory)
            .ok_or_else(|| missing(V1Controller::Memory))?;
        let pids = self
            .v1_path(V1Controller::Pids)
            .ok_or_else(|| missing(V1Controller::Pids))?;
        Ok(Stats {
            cpu_usage_usec: cpu,
            memory_current: self.read_number(memory.join("memory.usage_in_bytes"))?,
            memory_peak: Some(self.read_number(memory.join("memory.max_usage_in_bytes"))?),
            pids_current: self.read_number(pids.join("pids.current"))?,
            oom_kills: self.read_keyed(memory.join("memory.oom_control"), "oom_kill")?,
        })
    }

    /// Kill every process of the task, `setsid` escapees included: `cgroup.kill` (Linux ≥ 5.14;
    /// cgroup-v2.rst, "cgroup.kill": "deal[s] with concurrent forks appropriately and is
    /// protected against migrations"). Returns at once; the processes are gone when
    /// [`TaskCgroup::populated`] turns false (`cgroup.events` fires). A cgroup that no longer
    /// exists has nothing to kill: `Ok`.
    pub fn kill(&self) -> Result<(), CgroupError> {
        let path = self.v2.join("cgroup.kill");
        match self.fs.write(&path, "1") {
            Ok(()) => Ok(()),
            Err(e) if errno(&e) == Some(libc::ENOENT) => {
                match self.fs.read(&self.v2.join("cgroup.procs")) {
                    // A kernel before 5.14: the cgroup is there, its cgroup.kill is not.
                    Ok(_) => self.freeze_and_kill(),
                    // The cgroup itself is gone: nothing is left to kill.
                    Err(e) if errno(&e) == Some(libc::ENOENT) => Ok(()),
                    Err(source) => Err(CgroupError::Kill { path, source }),
                }
            }
            Err(source) => Err(CgroupError::Kill { path, source }),
        }
    }

    /// Before `cgroup.kill`: freeze the cgroup so nothing forks while we read `cgroup.procs`
    /// (cgroup-v2.rst, "cgroup.freeze"; frozen tasks still die of SIGKILL), kill every pid of
    /// it and its descendants, thaw.
    fn freeze_and_kill(&self) -> Result<(), CgroupError> {
        let freeze = self.v2.join("cgroup.freeze");
        self.fs
            .write(&freeze, "1")
            .map_err(|source| CgroupError::Kill {
                path: freeze.clone(),
                source,
            })?;
        let mut result = Ok(());
        let mut dirs = vec![self.v2.clone()];
        while let Some(dir) = dirs.pop() {
            for child in self.fs.subdirs(&dir).unwrap_or_default() {
                dirs.push(dir.join(child));
            }
            let procs = dir.join("cgroup.procs");
            let text = match self.fs.read(&procs) {
                Ok(text) => text,
                Err(e) if errno(&e) == Some(libc::ENOENT) => continue,
                Err(source) => {
                    result = Err(CgroupError::Kill {
                        path: procs,
                        source,
                    });
                    continue;
                }
            };
            for pid in text
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                match self.fs.sigkill(pid) {
                    Err(e) if errno(&e) != Some(libc::ESRCH) && result.is_ok() => {
                        result = Err(CgroupError::Kill {
                            path: procs.clone(),
                            source: e,
                        });
                    }
                    _ => {}
                }
            }
        }
        // Thaw even after an error, so that nothing stays frozen forever.
        if let Err(source) = self.fs.write(&freeze, "0") {
            result = result.and(Err(CgroupError::Kill {
                path: freeze,
                source,
            }));
        }
        result
    }

    /// Remove the task's directories (rmdir(2) of a cgroup without processes), without
    /// waiting: `Busy` while killed processes have not exited yet, so the daemon retries from its
    /// timer.
    pub fn try_remove(&self) -> Result<Removal, CgroupError> {
        let mut dirs = vec![self.v2.as_path()];
        dirs.extend(self.v1_dirs());
        for dir in dirs {
            match rmdir_or_gone(self.fs.as_ref(), dir) {
                Ok(()) => {}
                Err(e) if errno(&e) == Some(libc::EBUSY) => return Ok(Removal::Busy),
                Err(source) => {
                    return Err(CgroupError::Remove {
                        path: dir.to_path_buf(),
                        source,
                    })
                }
            }
        }
        Ok(Removal::Removed)
    }

    /// [`TaskCgroup::try_remove`] until it succeeds or `timeout` passes, with short sleeps: for
    /// tests and shutdown, never the daemon's loop.
    pub fn remove_blocking(&self, timeout: Duration) -> Result<(), CgroupError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.try_remove()? == Removal::Removed {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(CgroupError::Busy {
                    path: self.v2.clone(),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Arm the OOM notification for this task, to be registered with the event loop.
    pub fn oom_watch(&self) -> Result<OomWatch, CgroupError> {
        match self.mode {
            Mode::V2 => OomWatch::v2(&self.v2.join("memory.events")),
            Mode::Hybrid => {
                let dir =
                    self.v1_path(V1Controller::Memory)
                        .ok_or_else(|| CgroupError::OomWatch {
                            path: self.v2.clone(),
                            source: io::Error::new(
                                io::ErrorKind::NotFound,
                                "no v1 memory hierarchy",
                            ),
                        })?;
                OomWatch::v1(dir)
            }
        }
    }
}

/// Join the task's v1 cgroups: write "0" (the writing process) to each `cgroup.procs` of
/// [`TaskCgroup::v1_procs_files`]. What the shim calls before it starts the agent on a hybrid
/// host. It allocates nothing on success for paths under 384 bytes (std builds their C string
/// on the stack), so it may run between fork and exec.
pub fn join_v1(files: &[PathBuf]) -> Result<(), CgroupError> {
    for path in files {
        super::RealFs
            .write(path, "0")
            .map_err(|source| CgroupError::Join {
                path: path.clone(),
                source,
            })?;
    }
    Ok(())
}
