//! The merged view of an overlay checkout, outside any sandbox: for the daemon's own look at
//! it (is overlayfs usable here, is the checkout clean).
//!
//! The overlay is mounted in a mount namespace of its own, made by a short-lived thread with
//! unshare(CLONE_NEWNS) — which a thread of a multi-threaded process may do (it takes a
//! private copy of the filesystem context, CLONE_FS, along) — so that the mount is never
//! visible on the host, and it is unmounted before the thread ends: the namespace would take
//! it down too, but only after the thread is reported finished, and the next mount of the
//! same upper layer (the task's next start) must find it free.

use std::io;
use std::path::Path;

use nix::mount::MsFlags;

use crate::sandbox::mounts::overlay_data;
use crate::sys::mount as sys;

/// Mount the overlay (`lower`, `upper`, `work`) at `mountpoint` (an existing directory) in a
/// private mount namespace, run `f` on it, unmount. `f` runs in another thread: whatever
/// it opens under `mountpoint` must be closed when it returns.
pub(crate) fn with_overlay<T: Send>(
    lower: &Path,
    upper: &Path,
    work: &Path,
    mountpoint: &Path,
    f: impl FnOnce(&Path) -> T + Send,
) -> io::Result<T> {
    let data = overlay_data(lower, upper, work)
        .map_err(|problem| io::Error::new(io::ErrorKind::InvalidInput, problem))?;
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| -> io::Result<T> {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(io::Error::from)?;
            // Nothing mounted here may propagate back to the host's namespace.
            sys::set_propagation(Path::new("/"), MsFlags::MS_REC | MsFlags::MS_PRIVATE)?;
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
            sys::mount_fs("overlay", mountpoint, "overlay", flags, Some(&data))?;
            let result = f(mountpoint);
            if sys::unmount(mountpoint, false).is_err() {
                // Still busy (a descriptor left open by `f`): detached, it goes when closed.
                let _ = sys::unmount(mountpoint, true);
            }
            Ok(result)
        });
        match thread.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
