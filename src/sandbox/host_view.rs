//! The host as a sandbox template's key sees it — the entries of `/`, the identity of each
//! path a sandbox hides or binds, the mount table — read again only when the kernel says
//! something there changed: inotify(7) on `/` and on every directory on the way to such a path,
//! poll(2) on `/proc/self/mountinfo` (proc(5)). Reading all of it at every start cost ~0.2 ms
//! (a readdir of `/` and some forty lstat(2)s).
//!
//! inotify reports a change to a watched directory whichever mount namespace it was made
//! through, but not one made by another client of a network filesystem, by a FUSE server, or by
//! the kernel in sysfs or procfs: a directory on any filesystem but the local disk and memory
//! ones of [`LOCAL_FILESYSTEMS`] is never trusted, and what depends on it is read at every
//! start, as before. So is a path that is itself a symlink, or has one on its way. A mount or
//! unmount anywhere renews every watch (a watch is on an inode, and a mount hides it).

use crate::sandbox::mounts::template::host_state_with;
use crate::sandbox::mounts::{list_host_root, RootEntry, SandboxLayout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// The host's state for one sandbox layout ([`host_state_with`]), and its hash.
#[derive(Clone, Debug)]
pub struct HostState {
    pub text: Rc<str>,
    pub hash: u64,
}

/// Layouts whose host state is kept (a daemon's units come in a few shapes).
const KEPT_STATES: usize = 16;

/// Filesystems (statfs(2) `f_type`, linux/magic.h) where every change to a directory is made by
/// this kernel and so reaches inotify: ext2/3/4, xfs, btrfs, f2fs, tmpfs, ramfs, overlayfs (a
/// container's `/`, changed through the overlay), squashfs and iso9660 (read-only), zfs, bcachefs.
pub const LOCAL_FILESYSTEMS: [i64; 11] = [
    0xEF53,
    0x5846_5342,
    0x9123_683E,
    0xF2F5_2010,
    0x0102_1994,
    0x8584_58F6,
    0x794C_7630,
    0x7371_7368,
    0x9660,
    0x2FC1_2FC1,
    0xCA45_1A4E,
];

/// The paths a layout's host state depends on, and the listing of `/` it was read over: the
/// cache's key, compared whole.
#[derive(PartialEq, Eq)]
struct StateKey {
    hidden: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    readonly: Vec<PathBuf>,
    root: Vec<RootEntry>,
}

impl StateKey {
    fn of(layout: &SandboxLayout, root: &[RootEntry]) -> StateKey {
        StateKey {
            hidden: layout.hidden.clone(),
            writable: layout.writable.clone(),
            readonly: layout.readonly.clone(),
            root: root.to_vec(),
        }
    }

    fn matches(&self, layout: &SandboxLayout, root: &[RootEntry]) -> bool {
        self.hidden == layout.hidden
            && self.writable == layout.writable
            && self.readonly == layout.readonly
            && self.root == root
    }
}

pub struct HostView {
    /// `None` when inotify is unavailable: everything is read at every start, as before.
    watch: Option<DirWatch>,
    /// Bumped by every change seen; what was read in an earlier epoch is read again.
    epoch: u64,
    root: Option<(u64, Vec<RootEntry>)>,
    /// (what the state depends on, epoch, state).
    states: Vec<(StateKey, u64, HostState)>,
    mounts: MountTable,
    /// How many times [`host_state_with`] was computed (tests).
    computed: u64,
}

impl HostView {
    pub fn new() -> HostView {
        let watch = DirWatch::new()
            .map_err(|e| {
                log::info!("no inotify for the host's view ({e}): it is read at every start")
            })
            .ok();
        HostView {
            watch,
            epoch: 0,
            root: None,
            states: Vec::new(),
            mounts: MountTable::new(),
            computed: 0,
        }
    }

    /// Forget everything (the daemon has no task running: nothing stays watched).
    pub fn clear(&mut self) {
        self.root = None;
        self.states.clear();
        self.renew_watches();
        self.epoch += 1;
    }

    /// Drop every watch, to be set again on the inodes the paths name now. Without a new
    /// inotify instance, nothing is cached any more.
    fn renew_watches(&mut self) {
        if let Some(watch) = self.watch.take() {
            // The old instance goes first: the new one may need its slot
            // (fs.inotify.max_user_instances).
            drop(watch);
            match DirWatch::new() {
                Ok(fresh) => self.watch = Some(fresh),
                Err(e) => log::warn!(
                    "cannot renew the host's inotify watches ({e}): the host's view is read at every start"
                ),
            }
        }
    }

    /// Has anything been seen to change since the last look? Then whatever was read before
    /// is stale, and every watch is renewed: a watched directory may have been replaced, or
    /// mounted over (the watch is on the inode underneath).
    fn refresh(&mut self) {
        if self.watch.is_none() {
            // Lost to a failed renewal (or never had): try again, a failing syscall is cheap.
            self.watch = DirWatch::new().ok();
        }
        let watched_change = self.watch.as_mut().is_some_and(DirWatch::changed);
        let mounts_change = self.mounts.refresh();
        if watched_change || mounts_change {
            self.renew_watches();
            self.epoch += 1;
        }
    }

    /// The entries of the host's `/` ([`list_host_root`]).
    pub fn root(&mut self) -> io::Result<Vec<RootEntry>> {
        self.refresh();
        if let Some((epoch, entries)) = &self.root {
            if *epoch == self.epoch {
                return Ok(entries.clone());
            }
        }
        // Watched before it is read: a change after the read is then seen.
        let watched = self
            .watch
            .as_mut()
            .is_some_and(|w| w.watch_dir(Path::new("/")));
        let entries = list_host_root()?;
        if watched {
            self.root = Some((self.epoch, entries.clone()));
        }
        Ok(entries)
    }

    /// The host's state for `layout` over `host_root` ([`host_state_with`]), the lines of the
    /// paths in `given` as a worker read them for this start (not watched, not read here, and
    /// a state with any is not kept: the next start's worker reads them again).
    pub fn state(
        &mut self,
        layout: &SandboxLayout,
        host_root: &[RootEntry],
        given: &BTreeMap<PathBuf, String>,
    ) -> HostState {
        self.refresh();
        let epoch = self.epoch;
        if let Some((_, _, state)) = self
            .states
            .iter()
            .find(|(key, at, _)| *at == epoch && given.is_empty() && key.matches(layout, host_root))
        {
            return state.clone();
        }
        // Every directory the state depends on is watched before it is read.
        let listed = layout
            .hidden
            .iter()
            .chain(&layout.writable)
            .chain(&layout.readonly)
            .filter(|path| !given.contains_key(*path));
        let cacheable = match self.watch.as_mut() {
            Some(_) if !given.is_empty() => false,
            Some(watch) => {
                let mut all = watch.watch_dir(Path::new("/"));
                for path in listed {
                    all &= watch.watch_way_to(path);
                }
                all
            }
            None => false,
        };
        let text = host_state_with(layout, host_root, self.mounts.text(), given);
        self.computed += 1;
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let state = HostState {
            hash: hasher.finish(),
            text: text.into(),
        };
        self.states
            .retain(|(key, at, _)| *at == epoch && !key.matches(layout, host_root));
        if cacheable {
            if self.states.len() >= KEPT_STATES {
                self.states.remove(0);
            }
            self.states
                .push((StateKey::of(layout, host_root), epoch, state.clone()));
        }
        state
    }

    /// How many times the host's state was read in full (tests).
    pub fn computed(&self) -> u64 {
        self.computed
    }
}

impl Default for HostView {
    fn default() -> Self {
        HostView::new()
    }
}

/// inotify watches on directories: entries created, removed or renamed in them, and their own
/// removal or rename.
struct DirWatch {
    inotify: Inotify,
    watched: HashSet<PathBuf>,
}

impl DirWatch {
    fn new() -> io::Result<DirWatch> {
        Ok(DirWatch {
            inotify: Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?,
            watched: HashSet::new(),
        })
    }

    /// Watch `dir`; `false` when it cannot be (gone, not a directory, out of watches) or must
    /// not be trusted (not on a [`LOCAL_FILESYSTEMS`] filesystem).
    fn watch_dir(&mut self, dir: &Path) -> bool {
        if self.watched.contains(dir) {
            return true;
        }
        // The magic's type is the libc's (`__fsword_t` in glibc, `unsigned long` in musl).
        #[allow(clippy::unnecessary_cast)]
        let local = nix::sys::statfs::statfs(dir)
            .is_ok_and(|fs| LOCAL_FILESYSTEMS.contains(&(fs.filesystem_type().0 as i64)));
        if !local {
            return false;
        }
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DONT_FOLLOW;
        if self.inotify.add_watch(dir, flags).is_err() {
            return false;
        }
        self.watched.insert(dir.to_path_buf());
        true
    }

    /// Watch every directory on the way to `path` (not `path` itself: its identity is an entry
    /// of its parent), down to the first that does not exist — its creation is an entry in the
    /// last one watched. `false` when the way cannot be watched: a symlink on it or at its end
    /// (what it points to may change where no watch sees it — and hiding a symlink hides its
    /// target), a component that is not a plain name, a directory [`DirWatch::watch_dir`]
    /// refuses.
    fn watch_way_to(&mut self, path: &Path) -> bool {
        let Some(parent) = path.parent() else {
            return true;
        };
        let mut dir = PathBuf::from("/");
        if !self.watch_dir(&dir) {
            return false;
        }
        for component in parent.components() {
            match component {
                Component::RootDir => continue,
                Component::Normal(name) => dir.push(name),
                _ => return false,
            }
            match std::fs::symlink_metadata(&dir) {
                Ok(meta) if meta.file_type().is_symlink() => return false,
                Ok(meta) if meta.is_dir() => {
                    if !self.watch_dir(&dir) {
                        return false;
                    }
                }
                // Missing, or not a directory: what replaces it is an entry of the last
                // directory watched.
                _ => return true,
            }
        }
        if path.file_name().is_none() {
            return false;
        }
        !std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink())
    }

    /// Did any watched directory change since the last call? Any event counts (an overflow,
    /// an unmount and a removed watch too).
    fn changed(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.inotify.read_events() {
                Ok(events) if !events.is_empty() => any = true,
                Ok(_) => break,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                // Cannot tell: assume a change.
                Err(_) => {
                    any = true;
                    break;
                }
            }
        }
        any
    }
}

/// The daemon's mount table, read again only when the kernel marks it changed (poll(2) on
/// `/proc/self/mountinfo`, proc(5)) — not at every start, where reading it cost ~0.1 ms.
struct MountTable {
    file: Option<std::fs::File>,
    text: String,
}

impl MountTable {
    fn new() -> MountTable {
        MountTable {
            file: None,
            text: String::new(),
        }
    }

    /// Read the table again if the kernel says it changed (or it was never read); `true` then.
    fn refresh(&mut self) -> bool {
        use std::io::{Read, Seek};
        let unchanged = self
            .file
            .as_ref()
            .is_some_and(|file| !crate::sys::fds::mount_table_changed(file.as_fd()));
        if unchanged {
            return false;
        }
        // Opened before it is read: a change after the read marks this descriptor.
        if self.file.is_none() {
            self.file = std::fs::File::open("/proc/self/mountinfo").ok();
        }
        self.text.clear();
        let read = self.file.as_mut().map(|file| {
            file.rewind()
                .and_then(|()| file.read_to_string(&mut self.text))
        });
        if !matches!(read, Some(Ok(_))) {
            // Unreadable (no /proc?): an empty table, and no cache — try again next time.
            self.file = None;
            self.text.clear();
        }
        true
    }

    fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests;
