//! keel's own subtree: `<base>/<name>/{supervisor,tasks}` in every hierarchy it uses (`units`
//! instead of `tasks` on v1, see [`V1_TASKS`]).

use super::fs::{mkdir_or_existing, rmdir_or_gone};
use super::{check_name, CgroupError, CgroupFs, Layout, Mode, RealFs, TaskCgroup, CONTROLLERS};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directory of task cgroups in the v2 hierarchy (DESIGN, "cgroups").
pub const V2_TASKS: &str = "tasks";

/// The same on v1, where every cgroup already has an interface file called `tasks` (the thread
/// ids; cgroup-v1/cgroups.rst, "1.3 How are cgroups implemented?"), so `mkdir tasks` fails with
/// EEXIST there.
pub const V1_TASKS: &str = "units";

/// keel's cgroup tree, set up once by the daemon.
#[derive(Debug)]
pub struct Tree {
    fs: Arc<dyn CgroupFs>,
    layout: Layout,
    name: String,
    /// The process that lives in `supervisor/` (the daemon).
    pid: i32,
    /// Controllers this tree enabled in `<v2 base>/cgroup.subtree_control`: the ones teardown
    /// disables again (those enabled before belong to someone else).
    enabled_in_base: Vec<&'static str>,
    /// `<v2 base>/<name>` existed already: the tree of an earlier daemon, adopted — whether
    /// this daemon started in its `supervisor/` ([`Layout::adopted`]) or, respawned by
    /// `keel init`, in init's cgroup.
    found: bool,
}

/// The controllers listed in a `cgroup.subtree_control` (missing file: none).
fn enabled_controllers(fs: &dyn CgroupFs, dir: &Path) -> Vec<&'static str> {
    let text = fs
        .read(&dir.join("cgroup.subtree_control"))
        .unwrap_or_default();
    CONTROLLERS
        .into_iter()
        .filter(|c| text.split_whitespace().any(|w| w == *c))
        .collect()
}

impl Tree {
    /// Create the tree under each base of `layout` and move the calling process into
    /// `supervisor/`.
    pub fn setup(layout: Layout, name: &str) -> Result<Tree, CgroupError> {
        Self::setup_pid(layout, name, std::process::id() as i32)
    }

    /// [`Tree::setup`], moving `pid` (a process of the caller's cgroups) instead of the caller:
    /// tests move a helper child rather than the test runner.
    pub fn setup_pid(layout: Layout, name: &str, pid: i32) -> Result<Tree, CgroupError> {
        Self::setup_with(Arc::new(RealFs), layout, name, pid)
    }

    /// [`Tree::setup_pid`] through any [`CgroupFs`].
    pub fn setup_with(
        fs: Arc<dyn CgroupFs>,
        layout: Layout,
        name: &str,
        pid: i32,
    ) -> Result<Tree, CgroupError> {
        check_name(name)?;
        let mut tree = Tree {
            fs,
            layout,
            name: name.to_string(),
            pid,
            enabled_in_base: Vec::new(),
            found: false,
        };
        let fs = tree.fs.as_ref();
        let v2_root = tree.v2_root();
        for (root, tasks) in tree.roots() {
            for dir in [root.clone(), root.join("supervisor"), tasks] {
                // An existing directory is the tree of an earlier run: reuse it. An existing
                // file (an interface file of that name) is not.
                let made = mkdir_or_existing(fs, &dir).and_then(|created| {
                    if created {
                        Ok(())
                    } else {
                        if dir == v2_root {
                            tree.found = true;
                        }
                        fs.subdirs(&dir).map(drop)
                    }
                });
                made.map_err(|source| CgroupError::CreateTree { path: dir, source })?;
            }
        }
        // Into the leaf first: on v2 a cgroup that enables controllers for its children may not
        // hold processes itself (cgroup-v2.rst, "No Internal Process Constraint"), so the base
        // must be left before its subtree_control is written.
        // A daemon that stays in its service's cgroup ([`Layout::daemon_stays_in`]) moves
        // nowhere; its `supervisor/` stays empty (it still marks the tree as keel's for the
        // control socket's peer check).
        if tree.layout.daemon_stays_in.is_none() {
            for base in tree.layout.bases() {
                move_into(fs, &base.join(name).join("supervisor"), pid)?;
            }
        }
        if tree.layout.mode == Mode::V2 {
            // Top-down: a controller can be enabled in a cgroup only if its parent enabled it
            // (cgroup-v2.rst, "Top-down Constraint").
            let base = tree.layout.v2_base.clone();
            let root = base.join(name);
            tree.enabled_in_base = enable(fs, &base)?;
            enable(fs, &root)?;
            enable(fs, &root.join(V2_TASKS))?;
        }
        Ok(tree)
    }

    /// `(<base>/<name>, its task directory)` for each hierarchy, v2 first.
    fn roots(&self) -> Vec<(PathBuf, PathBuf)> {
        let v2 = self.layout.v2_base.join(&self.name);
        let mut roots = vec![(v2.clone(), v2.join(V2_TASKS))];
        for base in self.layout.v1_bases() {
            let root = base.join(&self.name);
            roots.push((root.clone(), root.join(V1_TASKS)));
        }
        roots
    }

    pub fn mode(&self) -> Mode {
        self.layout.mode
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `<v2 base>/<name>`: the whole tree in the v2 hierarchy.
    pub fn v2_root(&self) -> PathBuf {
        self.layout.v2_base.join(&self.name)
    }

    /// A task's cgroups (paths only, no I/O). Fails only for a unit name that is not a single
    /// path component, which could otherwise address a cgroup outside the tree.
    pub fn task(&self, unit: &str) -> Result<TaskCgroup, CgroupError> {
        check_name(unit)?;
        let at = |base: &Path, tasks: &str| base.join(&self.name).join(tasks).join(unit);
        Ok(TaskCgroup::new(
            self.fs.clone(),
            self.layout.mode,
            unit,
            (
                at(&self.layout.v2_base, V2_TASKS),
                at(&self.layout.v2_base_cgroup, V2_TASKS),
            ),
            self.layout
                .v1
                .iter()
                .map(|(controller, base)| (*controller, at(base, V1_TASKS)))
                .collect(),
        ))
    }

    /// The pressure (PSI) of keel's tasks: `tasks/*.pressure` in the v2 hierarchy, each
    /// from `/proc/pressure` where the tree's file cannot be read (see `pressure.rs`).
    pub fn pressure(&self) -> super::TreePressure {
        self.pressure_with_host(Path::new(super::HOST_PRESSURE_DIR))
    }

    /// [`Tree::pressure`] with the host-wide figures read from `host_dir`.
    pub fn pressure_with_host(&self, host_dir: &Path) -> super::TreePressure {
        super::pressure::read(self.fs.as_ref(), &self.v2_root().join(V2_TASKS), host_dir)
    }

    /// The task cgroups that exist in any hierarchy (reconcile after a crash), sorted.
    pub fn tasks_present(&self) -> Vec<String> {
        let mut units: Vec<String> = self
            .roots()
            .into_iter()
            .flat_map(|(_, tasks)| self.fs.subdirs(&tasks).unwrap_or_default())
            .collect();
        units.sort();
        units.dedup();
        units
    }

    /// Undo [`Tree::setup`] (`keel shutdown`): move the daemon back to its base and remove
    /// `supervisor`, `tasks` and `<name>`. Refuses, changing nothing, while task cgroups remain.
    pub fn teardown(&self) -> Result<(), CgroupError> {
        let fs = self.fs.as_ref();
        let tasks_dir = self.v2_root().join(V2_TASKS);
        let units = self.tasks_present();
        if !units.is_empty() {
            return Err(CgroupError::TasksRemain {
                path: tasks_dir,
                units,
            });
        }
        for (_, tasks) in self.roots() {
            rmdir_or_gone(fs, &tasks).map_err(|source| {
                if source.raw_os_error() == Some(libc::EBUSY) {
                    CgroupError::TasksRemain {
                        path: tasks.clone(),
                        units: Vec::new(),
                    }
                } else {
                    CgroupError::Remove {
                        path: tasks.clone(),
                        source,
                    }
                }
            })?;
        }
        if self.layout.mode == Mode::V2 {
            self.disable_controllers()?;
        }
        let bases = if self.layout.daemon_stays_in.is_some() {
            Vec::new()
        } else {
            self.layout.bases()
        };
        for base in bases {
            let procs = base.join("cgroup.procs");
            match fs.write(&procs, &self.pid.to_string()) {
                // The process is gone: nothing to move.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(source) => {
                    return Err(CgroupError::MoveBack {
                        path: procs,
                        pid: self.pid,
                        source,
                    })
                }
                Ok(()) => {}
            }
        }
        for (root, _) in self.roots() {
            for dir in [root.join("supervisor"), root] {
                rmdir_or_gone(fs, &dir)
                    .map_err(|source| CgroupError::Remove { path: dir, source })?;
            }
        }
        Ok(())
    }

    /// v2: the base may take the daemon back only once it enables no controllers for its
    /// children (cgroup-v2.rst, "No Internal Process Constraint"; the root is exempt). A
    /// controller can be disabled only when no child enables it (else EBUSY), so `<name>` first.
    fn disable_controllers(&self) -> Result<(), CgroupError> {
        let fs = self.fs.as_ref();
        let base = &self.layout.v2_base;
        let root = self.v2_root();
        disable(fs, &root, &enabled_controllers(fs, &root))?;
        if self.layout.daemon_stays_in.is_some() {
            // The base is the hierarchy's root, shared with systemd's slices: what is enabled
            // there stays (a controller the root's other children use cannot go anyway).
            return Ok(());
        }
        let mut ours = self.enabled_in_base.clone();
        // An adopted tree (a restarted daemon) does not know who enabled the base's
        // controllers; when keel's tree is the base's only child, nothing else uses them.
        // keel init's leaf beside the tree is keel's too.
        let alone = |children: Vec<String>| {
            let others: Vec<String> = children
                .into_iter()
                .filter(|c| c != super::INIT_LEAF)
                .collect();
            others == [self.name.clone()]
        };
        if (self.layout.adopted || self.found) && fs.subdirs(base).is_ok_and(alone) {
            ours = CONTROLLERS.to_vec();
        }
        let present = enabled_controllers(fs, base);
        let to_disable: Vec<&'static str> =
            ours.into_iter().filter(|c| present.contains(c)).collect();
        disable(fs, base, &to_disable)
    }
}

/// keel init on v2 in a non-root cgroup: move `pid` into `<base>/keel-init` (see
/// [`super::INIT_LEAF`]); `Ok(None)` when nothing needs moving (hybrid, the root).
pub fn enter_init_leaf(
    fs: &dyn CgroupFs,
    layout: &Layout,
    pid: i32,
) -> Result<Option<PathBuf>, CgroupError> {
    let base = &layout.v2_base;
    let has_type = fs.read(&base.join("cgroup.type")).is_ok();
    if !super::init_needs_leaf(layout.mode, has_type) {
        return Ok(None);
    }
    let leaf = base.join(super::INIT_LEAF);
    mkdir_or_existing(fs, &leaf).map_err(|source| CgroupError::CreateTree {
        path: leaf.clone(),
        source,
    })?;
    move_into(fs, &leaf, pid)?;
    Ok(Some(leaf))
}

/// Move `pid` into the cgroup `dir` (its `cgroup.procs`).
fn move_into(fs: &dyn CgroupFs, dir: &Path, pid: i32) -> Result<(), CgroupError> {
    let procs = dir.join("cgroup.procs");
    fs.write(&procs, &pid.to_string())
        .map_err(|source| CgroupError::MoveIn {
            path: procs,
            pid,
            source,
        })
}

/// Write `+controller` for each of cpu, memory, pids not yet enabled in `dir`; return the ones
/// written. One controller a write, so that an error names it.
fn enable(fs: &dyn CgroupFs, dir: &Path) -> Result<Vec<&'static str>, CgroupError> {
    let present = enabled_controllers(fs, dir);
    let path = dir.join("cgroup.subtree_control");
    let mut enabled = Vec::new();
    for controller in CONTROLLERS {
        if present.contains(&controller) {
            continue;
        }
        fs.write(&path, &format!("+{controller}"))
            .map_err(|source| CgroupError::EnableController {
                path: path.clone(),
                controller,
                source,
            })?;
        enabled.push(controller);
    }
    Ok(enabled)
}

fn disable(fs: &dyn CgroupFs, dir: &Path, controllers: &[&'static str]) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.subtree_control");
    // Reverse order of enabling.
    for controller in controllers.iter().rev() {
        fs.write(&path, &format!("-{controller}"))
            .map_err(|source| CgroupError::DisableController {
                path: path.clone(),
                controller,
                source,
            })?;
    }
    Ok(())
}
