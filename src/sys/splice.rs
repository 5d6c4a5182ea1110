//! splice(2), for the network relay: bytes from a socket into a pipe and from the pipe into
//! another socket without passing through user space (nix wraps it only behind a feature
//! keel does not build).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Move up to `len` bytes from `from` to `to`, one of which is a pipe, without blocking
/// (`SPLICE_F_NONBLOCK | SPLICE_F_MOVE`; the sockets themselves are non-blocking too).
/// `Ok(0)`: `from` is at its end of file.
pub fn splice_nonblocking(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    len: usize,
) -> io::Result<usize> {
    // SAFETY: both descriptors are borrowed open ones; the offsets are NULL (no memory of
    // ours is handed to the kernel), so the call touches only the two files.
    let moved = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
        )
    };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(moved as usize)
}
