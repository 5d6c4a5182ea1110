//! The pure mount planner: a [`SandboxLayout`] and the host's `/` in, ordered operations out.
//!
//! It keeps a model of the mounts it has planned (sandbox path → what shows there), so that
//! it can tell, for any path, whether it lies in one of keel's own tmpfs layers (where missing
//! directories may be created) or in something bound from the host (where they must not be:
//! a mkdir there would land on the host), and where a hidden host path shows up.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::error::Step;
pub(super) use work::{checkout_objects, checkout_repositories};

// The task's own files at `workdir`: the work directory, or its git checkout.
mod work;
use super::{MountAttrs, MountOp, RootEntry, RootEntryKind, SandboxLayout};

/// The root tmpfs holds only mountpoints and symlinks (`/dev` and `/run` included: they are
/// read-only like the rest of it, so a tmpfs of their own would only cost a mount each).
const ROOT_SIZE: u64 = 1 << 20;
/// Device nodes bound from the host's `/dev` (as bubblewrap's `--dev` does).
const DEV_NODES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
/// Symlinks of a minimal `/dev`: ptmx of the new devpts instance (devpts(5): "newinstance"),
/// and the fd links that udev would make.
const DEV_LINKS: [(&str, &str); 5] = [
    ("ptmx", "pts/ptmx"),
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];
/// Top-level names whose host content is never shown: keel mounts its own.
const SPECIAL: [&str; 4] = ["dev", "proc", "run", "tmp"];

/// What shows at a planned mount.
enum Layer {
    /// A tmpfs keel mounted: missing directories may be created in it.
    Tmpfs { made: BTreeSet<OsString> },
    /// Host content: the host path `source` shows here.
    Host { source: PathBuf },
    /// proc, devpts, a hiding tmpfs: nothing to create, nothing of the host.
    Opaque,
}

struct Mounted {
    at: PathBuf,
    depth: usize,
    layer: Layer,
}

pub(super) struct Planner<'a> {
    layout: &'a SandboxLayout,
    /// Host top-level symlinks carried into the sandbox: name → absolute target.
    links: BTreeMap<String, PathBuf>,
    /// Host top-level names not bound (keel's own mounts or hidden).
    skip: BTreeSet<String>,
    /// The visible mounts, in sandbox paths.
    mounts: Vec<Mounted>,
    steps: Vec<(Step, MountOp)>,
    /// After the read-only setattr: flags to clear again, per sandbox path.
    keep: Vec<(PathBuf, MountAttrs, Step)>,
}

/// `path` made absolute (relative to `/`) with `.` and `..` resolved lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The number of components below `/` of a normalized absolute path (`/` is 0).
fn depth(path: &Path) -> usize {
    let bytes = path.as_os_str().as_bytes();
    let slashes = bytes.iter().filter(|&&b| b == b'/').count();
    if bytes == b"/" {
        0
    } else {
        slashes
    }
}

/// Is `path` `base` or below it? Compared as bytes, which is exact on normalized paths (no
/// trailing `/`, no `.` or `..`): `Path::starts_with` parses both paths into components at
/// every call, and the planner asks this for every path against every mount.
/// Relative paths work too ("" is above every relative path).
pub(super) fn under(path: &Path, base: &Path) -> bool {
    let (path, base) = (path.as_os_str().as_bytes(), base.as_os_str().as_bytes());
    if base.is_empty() {
        return path.first() != Some(&b'/');
    }
    if base == b"/" {
        return path.first() == Some(&b'/');
    }
    path.starts_with(base) && (path.len() == base.len() || path[base.len()] == b'/')
}

/// The name of a path of exactly one component below `/`.
fn top_level_name(path: &Path) -> Option<String> {
    let path = normalize(path);
    let mut components = path.components().skip(1);
    match (components.next(), components.next()) {
        (Some(Component::Normal(name)), None) => name.to_str().map(str::to_string),
        _ => None,
    }
}

fn usable_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/')
}

impl<'a> Planner<'a> {
    pub(super) fn new(layout: &'a SandboxLayout, host_root: &[RootEntry]) -> Planner<'a> {
        let mut skip: BTreeSet<String> = SPECIAL.iter().map(|s| s.to_string()).collect();
        let user_paths = [&layout.workdir, &layout.home]
            .into_iter()
            .chain(&layout.writable)
            .chain(&layout.readonly)
            .chain(checkout_objects(layout))
            .chain(checkout_repositories(layout))
            .chain(&layout.hidden);
        skip.extend(user_paths.filter_map(|p| top_level_name(p)));
        let links = host_root
            .iter()
            .filter(|e| usable_name(&e.name) && !skip.contains(&e.name))
            .filter_map(|e| match &e.kind {
                RootEntryKind::Symlink(target) => Some((e.name.clone(), normalize(target))),
                _ => None,
            })
            .collect();
        Planner {
            layout,
            links,
            skip,
            mounts: Vec::new(),
            steps: Vec::new(),
            keep: Vec::new(),
        }
    }

    /// The path as the sandbox resolves it through the top-level symlinks it recreates
    /// (`/bin/sh` → `/usr/bin/sh`); deeper symlinks are resolved by the kernel mounter.
    pub(super) fn canon(&self, path: &Path) -> PathBuf {
        let mut path = normalize(path);
        for _ in 0..16 {
            let mut components = path.components().skip(1);
            let Some(Component::Normal(first)) = components.next() else {
                break;
            };
            let Some(target) = first.to_str().and_then(|name| self.links.get(name)) else {
                break;
            };
            let rest: PathBuf = components.collect();
            path = normalize(&target.join(rest));
        }
        path
    }

    /// The host path of sandbox path `path` before the pivot: under `new_root`.
    fn host(&self, path: &Path) -> PathBuf {
        let rel = path.as_os_str().as_bytes();
        let rel = rel.strip_prefix(b"/").unwrap_or(rel);
        if rel.is_empty() {
            self.layout.new_root.clone()
        } else {
            self.layout.new_root.join(OsStr::from_bytes(rel))
        }
    }

    fn push(&mut self, step: &Step, op: MountOp) {
        self.steps.push((step.clone(), op));
    }

    /// Record a mount at `at`: it covers every earlier mount at or below `at`.
    fn mounted(&mut self, at: &Path, layer: Layer) {
        self.mounts.retain(|m| !under(&m.at, at));
        self.mounts.push(Mounted {
            at: at.to_path_buf(),
            depth: depth(at),
            layer,
        });
    }

    /// The index of the mount that shows at `path`: the deepest one at or above it.
    fn covering(&self, path: &Path) -> usize {
        let mut best = 0;
        for (i, m) in self.mounts.iter().enumerate() {
            if m.depth >= self.mounts[best].depth && under(path, &m.at) {
                best = i;
            }
        }
        best
    }

    /// Note `path` as created in the keel tmpfs it lies in; false when it lies in something
    /// else (host content, proc) or was created already.
    fn claim(&mut self, path: &Path) -> bool {
        let i = self.covering(path);
        match &mut self.mounts[i].layer {
            Layer::Tmpfs { made } => made.insert(path.as_os_str().to_os_string()),
            _ => false,
        }
    }

    /// Make sure directory `path` exists: `mkdir -p` inside a keel tmpfs; nothing inside host
    /// content, where it must exist already (the mount then fails with ENOENT, named).
    fn ensure_dir(&mut self, step: &Step, path: &Path) {
        let i = self.covering(path);
        let start = self.mounts[i].at.as_os_str().len();
        let Layer::Tmpfs { made } = &mut self.mounts[i].layer else {
            return;
        };
        let bytes = path.as_os_str().as_bytes();
        // Each ancestor of `path` below the tmpfs's root, then `path`: no mount lies between
        // them and the tmpfs (it is the deepest mount above `path`).
        let ends = (start + 1..bytes.len())
            .filter(|&end| bytes[end] == b'/')
            .chain(std::iter::once(bytes.len()))
            .filter(|&end| end > start);
        let mut missing = Vec::new();
        for end in ends {
            let current = OsStr::from_bytes(&bytes[..end]);
            if made.insert(current.to_os_string()) {
                missing.push(PathBuf::from(current));
            }
        }
        for current in missing {
            let op = MountOp::Mkdir {
                path: self.host(&current),
                mode: 0o755,
            };
            self.push(step, op);
        }
    }

    /// Make `path` with `op` (a file or a symlink) if it lies in a keel tmpfs.
    fn ensure_leaf(&mut self, step: &Step, path: &Path, op: MountOp) {
        if let Some(parent) = path.parent() {
            self.ensure_dir(step, parent);
        }
        if self.claim(path) {
            self.push(step, op);
        }
    }

    fn tmpfs(&mut self, step: &Step, at: &Path, size: u64, mode: u32, noexec: bool) {
        self.ensure_dir(step, at);
        let target = self.host(at);
        self.push(step, tmpfs_op(target, size, mode, noexec, None));
        self.mounted(
            at,
            Layer::Tmpfs {
                made: BTreeSet::new(),
            },
        );
    }

    /// A bind of host `source` at sandbox path `at` (a directory, or a file when `file`).
    fn bind(&mut self, step: &Step, source: &Path, at: &Path, recursive: bool, file: bool) {
        if file {
            let op = MountOp::MkFile {
                path: self.host(at),
            };
            self.ensure_leaf(step, at, op);
        } else {
            self.ensure_dir(step, at);
        }
        let shown = self.canon(source);
        let (source, target) = (source.to_path_buf(), self.host(at));
        let op = if recursive {
            MountOp::BindRecursive { source, target }
        } else {
            MountOp::Bind { source, target }
        };
        self.push(step, op);
        self.mounted(at, Layer::Host { source: shown });
    }

    /// The new root: a tmpfs of mountpoints, each host top-level entry at its name.
    fn root(&mut self, host_root: &[RootEntry]) {
        self.push(&Step::PrivateMounts, MountOp::MakeRootPrivate);
        let root = self.layout.new_root.clone();
        let step = Step::RootTmpfs(root.clone());
        // noexec: it holds nothing to execute; what is bound on it keeps its own flags.
        self.push(&step, tmpfs_op(root.clone(), ROOT_SIZE, 0o755, true, None));
        self.push(&step, MountOp::MakeUnbindable { target: root });
        self.mounted(
            Path::new("/"),
            Layer::Tmpfs {
                made: BTreeSet::new(),
            },
        );

        let mut entries: Vec<&RootEntry> = host_root
            .iter()
            .filter(|e| usable_name(&e.name) && !self.skip.contains(&e.name))
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for entry in entries {
            let at = Path::new("/").join(&entry.name);
            let step = Step::HostBind(at.clone());
            match &entry.kind {
                // /sys without its submounts: the host's cgroup tree (other tasks' figures) and
                // tracefs stay out of sight, and a dozen mounts fewer make every start faster.
                // In a user namespace (rootless) a mount cannot be bound without the locked
                // ones below it (mount_namespaces(7)): there, the cgroup tree is hidden.
                RootEntryKind::Dir if entry.name == "sys" && self.layout.in_user_namespace => {
                    self.bind(&step, &at, &at, true, false);
                    let cgroups = at.join("fs/cgroup");
                    let target = self.host(&cgroups);
                    self.push(&Step::Hidden(cgroups.clone()), MountOp::Hide { target });
                    self.mounted(&cgroups, Layer::Opaque);
                }
                // A network namespace of its own: a sysfs of that namespace instead of the
                // host's (mounted by the attempt, which is in it; a template holds only the
                // directory).
                RootEntryKind::Dir if entry.name == "sys" && self.layout.own_network => {
                    self.ensure_dir(&step, &at);
                    let target = self.host(&at);
                    self.push(&step, MountOp::Sysfs { target });
                    self.mounted(&at, Layer::Opaque);
                }
                RootEntryKind::Dir => self.bind(&step, &at, &at, entry.name != "sys", false),
                RootEntryKind::File => self.bind(&step, &at, &at, false, true),
                RootEntryKind::Symlink(target) => {
                    let op = MountOp::Symlink {
                        target: target.clone(),
                        link: self.host(&at),
                    };
                    self.ensure_leaf(&step, &at, op);
                }
                RootEntryKind::Other => {}
            }
        }
    }

    /// A minimal `/dev` in the root tmpfs: the harmless nodes bound from the host, a new
    /// devpts instance, `/dev/shm`.
    fn dev(&mut self) {
        let dev = Path::new("/dev");
        for node in DEV_NODES {
            let path = dev.join(node);
            let step = Step::Dev(path.clone());
            self.bind(&step, &path, &path, false, true);
            // The recursive setattr sets nodev everywhere; a device node on a nodev mount
            // cannot be opened (mount(2), MS_NODEV).
            self.keep.push((path, MountAttrs::NODEV, step));
        }
        let pts = dev.join("pts");
        let step = Step::Dev(pts.clone());
        self.ensure_dir(&step, &pts);
        let target = self.host(&pts);
        self.push(&step, MountOp::Devpts { target });
        self.mounted(&pts, Layer::Opaque);
        let writable_dev = MountAttrs::RDONLY.union(MountAttrs::NODEV);
        self.keep.push((pts, writable_dev, step));

        let shm = dev.join("shm");
        let step = Step::Dev(shm.clone());
        self.tmpfs(&step, &shm, self.layout.tmp_size, 0o1777, true);
        self.keep.push((shm, MountAttrs::RDONLY, step));
        for (name, target) in DEV_LINKS {
            let link = dev.join(name);
            let op = MountOp::Symlink {
                target: PathBuf::from(target),
                link: self.host(&link),
            };
            self.ensure_leaf(&Step::Dev(link.clone()), &link, op);
        }
    }

    /// A fresh procfs: mounted before the pivot, by a process of the new PID namespace, so it
    /// shows that namespace (proc(5)).
    fn proc(&mut self) {
        let proc = Path::new("/proc");
        self.ensure_dir(&Step::Proc, proc);
        let target = self.host(proc);
        self.push(&Step::Proc, MountOp::Proc { target });
        self.mounted(proc, Layer::Opaque);
    }

    /// `/run` in the root tmpfs, holding `/run/keel/{progress,checkpoint}` only.
    fn run(&mut self) {
        let layout = self.layout;
        let progress = Path::new("/run/keel/progress");
        let step = Step::RunKeel(layout.progress_file.clone());
        self.bind(&step, &layout.progress_file, progress, false, true);
        self.keep.push((progress.into(), MountAttrs::RDONLY, step));
        let checkpoint = Path::new("/run/keel/checkpoint");
        let step = Step::RunKeel(layout.checkpoint_source.clone());
        self.bind(&step, &layout.checkpoint_source, checkpoint, false, false);
        self.keep
            .push((checkpoint.into(), MountAttrs::RDONLY, step));
    }

    fn tmp(&mut self) {
        let tmp = Path::new("/tmp");
        self.tmpfs(&Step::Tmp, tmp, self.layout.tmp_size, 0o1777, false);
        self.keep.push((tmp.into(), MountAttrs::RDONLY, Step::Tmp));
    }

    /// `$HOME`, the checkout, `sandbox.writable` and `readonly`, parents before children (a `workdir`
    /// inside `$HOME` must be bound after `$HOME`'s tmpfs, or the tmpfs would cover it).
    fn user_mounts(&mut self) {
        enum Kind {
            Home,
            Work,
            /// A repository the checkout borrows objects from (or a veiled path): covered, its
            /// objects bound back (deeper, so later).
            Repository(Step),
            /// A host path at its own path; writable for `sandbox.writable` only.
            Bound {
                path: PathBuf,
                step: Step,
            },
            /// A file of keel's shown over a host file (keel's resolv.conf).
            Over {
                source: PathBuf,
                step: Step,
            },
        }
        let layout = self.layout;
        let mut wanted = vec![
            (self.canon(&layout.home), Kind::Home),
            (self.canon(&layout.workdir), Kind::Work),
        ];
        let bound = (layout
            .writable
            .iter()
            .map(|p| (p, Step::Writable(p.clone()))))
        .chain(
            layout
                .readonly
                .iter()
                .map(|p| (p, Step::HostBind(p.clone()))),
        )
        .chain(checkout_objects(layout).map(|p| (p, Step::Objects(p.clone()))));
        for (path, step) in bound {
            let kind = Kind::Bound {
                path: path.clone(),
                step,
            };
            wanted.push((self.canon(path), kind));
        }
        for (source, target) in layout.resolver_file.iter().chain(&layout.ca_bundle) {
            let step = Step::HostBind(target.clone());
            let kind = Kind::Over {
                source: source.clone(),
                step,
            };
            wanted.push((self.canon(target), kind));
        }
        for path in checkout_repositories(layout) {
            let step = Step::Repository(path.clone());
            wanted.push((self.canon(path), Kind::Repository(step)));
        }
        for path in &layout.veiled {
            let step = Step::Hidden(path.clone());
            wanted.push((self.canon(path), Kind::Repository(step)));
        }
        wanted.sort_by_key(|(at, _)| depth(at));
        for (at, kind) in wanted {
            match kind {
                Kind::Home => {
                    let step = Step::Home(layout.home.clone());
                    self.ensure_dir(&step, &at);
                    let op = tmpfs_op(
                        self.host(&at),
                        layout.home_size,
                        0o700,
                        false,
                        layout.home_owner,
                    );
                    self.push(&step, op);
                    self.mounted(
                        &at,
                        Layer::Tmpfs {
                            made: BTreeSet::new(),
                        },
                    );
                    self.keep.push((at, MountAttrs::RDONLY, step));
                }
                Kind::Work => self.work(&at),
                Kind::Over { source, step } => {
                    let op = MountOp::Mountpoint {
                        path: self.host(&at),
                        like: source.clone(),
                    };
                    self.ensure_leaf(&step, &at, op);
                    let target = self.host(&at);
                    self.push(&step, MountOp::Bind { source, target });
                    self.mounted(&at, Layer::Opaque);
                }
                Kind::Repository(step) => self.veil(&at, step),
                Kind::Bound { path, step } => {
                    let writable = matches!(step, Step::Writable(_));
                    let op = MountOp::Mountpoint {
                        path: self.host(&at),
                        like: path.clone(),
                    };
                    self.ensure_leaf(&step, &at, op);
                    let target = self.host(&at);
                    self.push(
                        &step,
                        MountOp::BindRecursive {
                            source: path,
                            target,
                        },
                    );
                    self.mounted(&at, Layer::Host { source: at.clone() });
                    if writable {
                        self.keep.push((at, MountAttrs::RDONLY, step));
                    }
                }
            }
        }
    }

    /// Cover every place where a hidden host path shows: through a bind of one of its
    /// ancestors (the host's `/var` around `/var/lib/keel`, a writable path). A hidden path
    /// that only an ancestor of a bind source is (the state directory around the checkout)
    /// stays visible through that bind: that is the task's own.
    fn hide(&mut self) {
        let mut hidden: Vec<(PathBuf, &PathBuf)> = self
            .layout
            .hidden
            .iter()
            .map(|h| (self.canon(h), h))
            .collect();
        hidden.sort();
        hidden.dedup_by(|a, b| a.0 == b.0);
        let outer: Vec<PathBuf> = hidden.iter().map(|(h, _)| h.clone()).collect();
        hidden.retain(|(h, _)| !outer.iter().any(|o| o != h && under(h, o)));
        for (path, original) in hidden {
            let mut places = Vec::new();
            for (i, m) in self.mounts.iter().enumerate() {
                let Layer::Host { source } = &m.layer else {
                    continue;
                };
                let Ok(rel) = path.strip_prefix(source) else {
                    continue;
                };
                let place = normalize(&m.at.join(rel));
                if self.covering(&place) == i {
                    places.push(place);
                }
            }
            let step = Step::Hidden(original.clone());
            for place in places {
                let target = self.host(&place);
                self.push(&step, MountOp::Hide { target });
                self.mounted(&place, Layer::Opaque);
                // Whatever was to stay writable under it is gone from view.
                self.keep.retain(|(k, _, _)| !under(k, &place));
            }
        }
    }

    fn finish(mut self) -> Vec<(Step, MountOp)> {
        let new_root = self.layout.new_root.clone();
        let step = Step::PivotRoot(new_root.clone());
        self.push(&step, MountOp::PivotRoot { new_root });
        let everything = MountAttrs::RDONLY
            .union(MountAttrs::NOSUID)
            .union(MountAttrs::NODEV);
        let op = MountOp::SetAttrRecursive {
            target: PathBuf::from("/"),
            set: everything,
            clear: MountAttrs::NONE,
        };
        self.push(&Step::ReadOnly(PathBuf::from("/")), op);
        for (target, clear, _) in std::mem::take(&mut self.keep) {
            let step = Step::ReadOnly(target.clone());
            let op = MountOp::SetAttr {
                target,
                set: MountAttrs::NONE,
                clear,
            };
            self.push(&step, op);
        }
        self.steps
    }
}

fn tmpfs_op(
    target: PathBuf,
    size: u64,
    mode: u32,
    noexec: bool,
    owner: Option<(u32, u32)>,
) -> MountOp {
    MountOp::Tmpfs {
        target,
        size,
        mode,
        noexec,
        owner,
    }
}

/// The plan, each operation with the setup step it belongs to (for error messages).
pub(super) fn plan_steps(layout: &SandboxLayout, host_root: &[RootEntry]) -> Vec<(Step, MountOp)> {
    let mut planner = Planner::new(layout, host_root);
    planner.root(host_root);
    planner.dev();
    planner.proc();
    planner.run();
    planner.tmp();
    planner.user_mounts();
    planner.hide();
    planner.finish()
}
