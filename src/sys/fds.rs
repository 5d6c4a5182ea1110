//! Descriptor chores of the shim and the launcher: close-on-exec, non-blocking pipes, waiting
//! for a pipe's writers to go.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// Mark `fd` close-on-exec if it is open (fcntl(2) F_SETFD); a closed fd is left alone.
pub fn set_cloexec(fd: RawFd) {
    // SAFETY: fcntl(F_GETFD/F_SETFD) take integers; on a closed fd they fail with EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags >= 0 {
        // SAFETY: as above, on an fd that is open.
        unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    }
}

/// Clear close-on-exec on `fd` if it is open (fcntl(2) F_SETFD).
pub fn clear_cloexec(fd: RawFd) {
    // SAFETY: fcntl(F_GETFD/F_SETFD) take integers; on a closed fd they fail with EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags >= 0 {
        // SAFETY: as above, on an fd that is open.
        unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) };
    }
}

/// Leave at once with `code`: no destructors, no atexit handlers, no buffered output flushed
/// (a clone of the daemon must run none of the daemon's cleanup). _exit(2).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and runs nothing of ours.
    unsafe { libc::_exit(code) }
}

/// Make `fd` non-blocking (the read end of the output pipe: never the agent's write end).
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Grow a pipe's buffer (best effort; the kernel caps it at `fs.pipe-max-size` for non-root).
/// Returns the capacity in effect.
pub fn grow_pipe(fd: BorrowedFd<'_>, bytes: i32) -> usize {
    use nix::fcntl::{fcntl, FcntlArg};
    let _ = fcntl(fd, FcntlArg::F_SETPIPE_SZ(bytes));
    fcntl(fd, FcntlArg::F_GETPIPE_SZ)
        .map(|n| n.max(0) as usize)
        .unwrap_or(65536)
}

/// Wait until `fd` is readable or its writers are gone (poll(2) `POLLIN`; hang-up counts),
/// at most `timeout` (`None`: for ever); nothing is read. An interrupted wait is resumed with
/// what is left of the timeout. `false`: the time ran out (or poll failed).
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<std::time::Duration>) -> bool {
    let end = timeout.map(|t| std::time::Instant::now() + t);
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        let left_ms = end.map_or(-1, |end| {
            let left = end.saturating_duration_since(std::time::Instant::now());
            i32::try_from(left.as_millis()).unwrap_or(i32::MAX)
        });
        // SAFETY: one pollfd on our stack, for the duration of the call.
        let rc = unsafe { libc::poll(&mut poll, 1, left_ms) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return rc > 0;
        }
    }
}

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// `/dev/null` opened read-only, close-on-exec (the agent's stdin).
pub fn open_dev_null() -> io::Result<OwnedFd> {
    let file = std::fs::File::open("/dev/null")?;
    Ok(OwnedFd::from(file))
}

/// Has the mount table behind `mountinfo` (an open `/proc/PID/mountinfo`) changed since the
/// last call that said so? proc(5): a mount, unmount or change of a mount in the namespace
/// marks the file with `POLLPRI | POLLERR`, and poll(2) clears the mark as it reports it.
/// `true` on a failed poll too (the caller reads the table again).
pub fn mount_table_changed(mountinfo: BorrowedFd<'_>) -> bool {
    let mut poll = libc::pollfd {
        fd: mountinfo.as_raw_fd(),
        events: libc::POLLPRI,
        revents: 0,
    };
    // SAFETY: one pollfd on our stack, for the duration of the call; no waiting (timeout 0).
    // Only POLLPRI was asked for: any event reported (or a failure) means "read it again".
    unsafe { libc::poll(&mut poll, 1, 0) != 0 }
}

/// A connected pair of `SOCK_SEQPACKET` sockets (message boundaries kept), close-on-exec.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)
}

/// Most descriptors one message carries.
pub const MAX_MESSAGE_FDS: usize = 8;

/// sendmsg(2) of one message with `fds` (`SCM_RIGHTS`, unix(7)): the receiver gets copies.
pub fn send_with_fds(socket: BorrowedFd<'_>, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let iov = [io::IoSlice::new(bytes)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    loop {
        match sendmsg::<()>(
            socket.as_raw_fd(),
            &iov,
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(n) if n < bytes.len() => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "message cut short",
                ))
            }
            Ok(_) => return Ok(()),
        }
    }
}

/// recvmsg(2) of one message into `buffer`, its descriptors (close-on-exec) with it:
/// `Ok(None)` at end of file (the peer closed). A message or a descriptor list that did not
/// fit is an error (what came of it is closed).
pub fn receive_with_fds(
    socket: BorrowedFd<'_>,
    buffer: &mut [u8],
) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::FromRawFd;
    let mut space = nix::cmsg_space!([RawFd; MAX_MESSAGE_FDS]);
    let mut iov = [io::IoSliceMut::new(buffer)];
    let (bytes, flags, raw) = loop {
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(message) => {
                let mut raw = Vec::new();
                for cmsg in message.cmsgs().map_err(io::Error::from)? {
                    if let ControlMessageOwned::ScmRights(list) = cmsg {
                        raw.extend(list);
                    }
                }
                break (message.bytes, message.flags, raw);
            }
        }
    };
    // SAFETY: SCM_RIGHTS descriptors are new in this process and owned by nobody else.
    let fds: Vec<OwnedFd> = raw
        .into_iter()
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a message larger than the buffer",
        ));
    }
    if bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some((bytes, fds)))
}

/// `SO_PEERPIDFD` (Linux 6.5, asm-generic/socket.h; mips, sparc, parisc and alpha number their
/// socket options apart and are not handled here).
#[cfg(not(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
const SO_PEERPIDFD: libc::c_int = 77;

/// A pidfd of the process that connected a Unix socket (`getsockopt(SO_PEERPIDFD)`, Linux
/// 6.5): with it, what was read of `/proc/<pid>` can be proven to be that process's (it is
/// still alive, so its pid was never reused). ENOPROTOOPT on older kernels; ESRCH when the
/// peer has already been reaped.
#[cfg(not(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
pub fn peer_pidfd(socket: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` and `len` are live locals of the sizes passed; the kernel writes at most
    // `len` bytes (one int) into `fd`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just installed this fd for us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
pub fn peer_pidfd(_socket: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT))
}
