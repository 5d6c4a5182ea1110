//! The host as a sandbox template's key sees it — the entries of `/`, the identity of each
//! path a sandbox hides or binds, the mount table — read again only when the kernel says
//! something there changed: inotify(7) on `/` and on every directory on the way to such a path,
//! poll(2) on `/proc/self/mountinfo` (proc(5)). Reading all of it at every start cost ~0.2 ms
//! (a readdir of `/` and some forty lstat(2)s).
//!
//! inotify reports a change to a watched directory whichever mount namespace it was made
//! through, but not one made by another client of a network filesystem: a host whose `/` or
//! `/etc` is shared over NFS and changed elsewhere should run with `KEEL_NO_SANDBOX_TEMPLATES=1`
//! (README, "The sandbox").

use crate::sandbox::mounts::template::host_state;
use crate::sandbox::mounts::{list_host_root, RootEntry, SandboxLayout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// The host's state for one sandbox layout ([`host_state`]), and its hash.
#[derive(Clone, Debug)]
pub struct HostState {
    pub text: Rc<str>,
    pub hash: u64,
}

/// Layouts whose host state is kept (a daemon's units come in a few shapes).
const KEPT_STATES: usize = 16;

pub struct HostView {
    /// `None` when inotify is unavailable: everything is read at every start, as before.
    watch: Option<DirWatch>,
    /// Bumped by every change seen; what was read in an earlier epoch is read again.
    epoch: u64,
    root: Option<(u64, Vec<RootEntry>)>,
    /// (key of the layout's paths and the root listing, epoch, state).
    states: Vec<(u64, u64, HostState)>,
    mounts: MountTable,
    /// How many times [`host_state`] was computed (tests).
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
        if let Some(watch) = self.watch.as_mut() {
            watch.reset();
        }
        self.epoch += 1;
    }

    /// Has anything been seen to change since the last look? Then whatever was read before
    /// is stale.
    fn refresh(&mut self) {
        let watched_change = self.watch.as_mut().is_some_and(DirWatch::changed);
        let mounts_change = self.mounts.refresh();
        if watched_change || mounts_change {
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
            .is_some_and(|w| w.watch_dir(Path::new("/")).is_ok());
        let entries = list_host_root()?;
        if watched {
            self.root = Some((self.epoch, entries.clone()));
        }
        Ok(entries)
    }

    /// The host's state for `layout` over `host_root` ([`host_state`]).
    pub fn state(&mut self, layout: &SandboxLayout, host_root: &[RootEntry]) -> HostState {
        self.refresh();
        let mut hasher = DefaultHasher::new();
        (
            &layout.hidden,
            &layout.writable,
            &layout.readonly,
            host_root,
        )
            .hash(&mut hasher);
        let key = hasher.finish();
        if let Some((_, _, state)) = self
            .states
            .iter()
            .find(|(k, epoch, _)| *k == key && *epoch == self.epoch)
        {
            return state.clone();
        }
        // Every directory the state depends on is watched before it is read.
        let listed = layout
            .hidden
            .iter()
            .chain(&layout.writable)
            .chain(&layout.readonly);
        let cacheable = match self.watch.as_mut() {
            Some(watch) => {
                let mut all = watch.watch_dir(Path::new("/")).is_ok();
                for path in listed {
                    all &= watch.watch_way_to(path);
                }
                all
            }
            None => false,
        };
        let text = host_state(layout, host_root, self.mounts.text());
        self.computed += 1;
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let state = HostState {
            hash: hasher.finish(),
            text: text.into(),
        };
        self.states
            .retain(|(k, epoch, _)| *k != key && *epoch == self.epoch);
        if cacheable {
            if self.states.len() >= KEPT_STATES {
                self.states.remove(0);
            }
            self.states.push((key, self.epoch, state.clone()));
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

    /// Drop every watch (a new instance: closing the old one removes them all, inotify(7)).
    fn reset(&mut self) {
        match DirWatch::new() {
            Ok(fresh) => *self = fresh,
            // Keep the old instance: its events still invalidate, and nothing is lost by
            // watching more than needed.
            Err(e) => log::warn!("cannot renew the host's inotify watches: {e}"),
        }
    }

    fn watch_dir(&mut self, dir: &Path) -> io::Result<()> {
        if self.watched.contains(dir) {
            return Ok(());
        }
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DONT_FOLLOW;
        self.inotify.add_watch(dir, flags)?;
        self.watched.insert(dir.to_path_buf());
        Ok(())
    }

    /// Watch every directory on the way to `path` (not `path` itself: its identity is an entry
    /// of its parent), down to the first that does not exist — its creation is an entry in the
    /// last one watched. `false` when the way cannot be watched: a symlink on it (what it points
    /// to may change where no watch sees it), a component that is not a plain name, a failed
    /// watch (fs.inotify.max_user_watches).
    fn watch_way_to(&mut self, path: &Path) -> bool {
        let Some(parent) = path.parent() else {
            return true;
        };
        let mut dir = PathBuf::from("/");
        if self.watch_dir(&dir).is_err() {
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
                    if self.watch_dir(&dir).is_err() {
                        return false;
                    }
                }
                // Missing, or not a directory: what replaces it is an entry of the last
                // directory watched.
                _ => return true,
            }
        }
        true
    }

    /// Did any watched directory change since the last call? Any event counts (an overflow,
    /// an unmount and a removed watch too); the watches are then renewed from scratch, since
    /// some may now watch directories that are no longer on the way.
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
        if any {
            self.reset();
        }
        any
    }
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DirWatch({:?}, {} dirs)",
            self.inotify.as_fd(),
            self.watched.len()
        )
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
#[path = "host_view_tests.rs"]
mod tests;
