//! Work in a network namespace other than the caller's, without moving the caller: a socket
//! belongs to the network namespace it was created in, wherever its descriptor goes next, so a
//! process outside a task's namespace can hold listeners inside it — made by a short-lived
//! thread that joins the namespace (setns(2) with `CLONE_NEWNET` changes the calling thread
//! only, and needs `CAP_SYS_ADMIN` over the namespace's owner and the caller's own user
//! namespace) and ends.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Run `work` on a thread in the network namespace `ns` and return what it returned.
pub fn run_in<T: Send + 'static>(
    ns: BorrowedFd<'_>,
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let ns = ns.try_clone_to_owned()?;
    std::thread::Builder::new()
        .name("netns".into())
        .spawn(move || {
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(io::Error::from)?;
            work()
        })?
        .join()
        .map_err(|_| io::Error::other("the network namespace's thread panicked"))?
}

/// A new network namespace (only `lo`, down), held by the returned descriptor.
pub fn create() -> io::Result<OwnedFd> {
    std::thread::Builder::new()
        .name("netns-new".into())
        .spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
            let ns = std::fs::File::open("/proc/thread-self/ns/net")?;
            Ok(OwnedFd::from(ns))
        })?
        .join()
        .map_err(|_| io::Error::other("the new network namespace's thread panicked"))?
}

/// A new network namespace (only `lo`, down) owned by the user namespace `userns` (a task's),
/// or by the caller's when `None`. The caller must hold `CAP_SYS_ADMIN` over `userns`.
pub fn create_in(userns: Option<BorrowedFd<'_>>) -> io::Result<OwnedFd> {
    match userns {
        Some(userns) => super::pidns::namespace_in(userns, super::pidns::Kind::Net),
        None => create(),
    }
}

/// The identity of a network namespace (the device and inode of its nsfs file).
pub fn id_of(ns: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let stat = nix::sys::stat::fstat(ns)?;
    Ok((stat.st_dev, stat.st_ino))
}
