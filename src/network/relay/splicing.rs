//! One direction of a relayed connection: the bytes go from one socket into a pipe and from
//! the pipe into the other socket with splice(2), never through the relay's memory; bytes
//! the relay itself must send first (a proxy's rewritten request, its `200`) go before them.
//! Every call is non-blocking: a direction stops where the kernel says EAGAIN and goes on at
//! the next readiness event. At the source's end of file the destination is shut for writing
//! (half-close), once the pipe is empty.
//!
//! A direction whose bytes are plain text of a task with secrets is *scanned* instead
//! ([`Flow::scan`]): read into the relay's memory, looked through for the task's
//! placeholders (`crate::secrets::PlaceholderScanner`: one on its way to a host that is not
//! its secret's is journaled as `secret-misdirected`), written on unchanged. TLS is never
//! scanned (it is opaque, and the placeholder in it worthless).
//!
//! A direction's pipe starts at the kernel's default (64 KiB) and grows to [`BULK_PIPE`] once
//! the direction has carried [`BULK_AFTER`] (a bulk transfer): fewer splice calls and
//! wake-ups per byte
//! (examples/relay_bench.rs measured 1 GiB one way on 2 cores, interleaved: see
//! docs/benchmarks.md). An idle or small connection keeps the small pipe (its slot array is
//! kernel memory, and the per-user pipe budget, `fs.pipe-user-pages-soft`, is shared).

use crate::sys::splice::splice_nonblocking;
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag};
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsFd, OwnedFd};

/// A pipe's size until it first fills (the kernel's default).
const SMALL_PIPE: usize = 1 << 16;
/// What a bulk direction's pipe grows to (`fs.pipe-max-size`'s default: no privilege
/// needed).
pub const BULK_PIPE: usize = 1 << 20;
/// The bytes after which a direction is a bulk one.
pub const BULK_AFTER: u64 = 1 << 18;
/// Rounds of one direction per readiness event before the others get their turn.
const ROUNDS: usize = 8;

pub struct Flow {
    pipe_read: OwnedFd,
    pipe_write: OwnedFd,
    /// Bytes in the pipe, not yet in the destination.
    pending: usize,
    /// What the pipe holds; what one splice(2) into it asks to move.
    capacity: usize,
    /// Bytes spliced into the pipe so far, until it grows.
    carried: u64,
    /// It was grown (or the kernel refused to: not asked again).
    grown: bool,
    /// Bytes to write to the destination before any spliced one.
    head: Vec<u8>,
    /// The source said end of file.
    eof: bool,
    /// The destination was shut for writing.
    shut: bool,
    /// Scanned plain text: the bytes go through here.
    scan: Option<Box<Scan>>,
}

/// A scanned direction's state.
struct Scan {
    scanner: crate::secrets::PlaceholderScanner,
    /// Read, not yet written: `buffer[start..]`.
    buffer: Vec<u8>,
    start: usize,
    /// Placeholders seen since the caller last took them.
    found: Vec<String>,
}

/// What a scanned direction reads at a time.
const SCAN_CHUNK: usize = 16 << 10;

/// What one turn of a direction did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Turn {
    /// Bytes that reached the destination.
    pub moved: u64,
    /// It stopped before the kernel said EAGAIN: give it another turn soon.
    pub more: bool,
}

impl Flow {
    /// A direction with its pipe (non-blocking both ends); `head` goes first.
    pub fn new(head: Vec<u8>) -> io::Result<Flow> {
        let (pipe_read, pipe_write) =
            nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        Ok(Flow {
            pipe_read,
            pipe_write,
            pending: 0,
            capacity: SMALL_PIPE,
            carried: 0,
            grown: false,
            head,
            eof: false,
            shut: false,
            scan: None,
        })
    }

    /// From now on the bytes go through the relay's memory and are looked through for
    /// placeholders (its head too, which has not gone yet).
    pub fn scan(&mut self) {
        let mut scan = Box::new(Scan {
            scanner: crate::secrets::PlaceholderScanner::new(),
            buffer: Vec::new(),
            start: 0,
            found: Vec::new(),
        });
        let Scan { scanner, found, .. } = &mut *scan;
        scanner.feed(&self.head, found);
        self.scan = Some(scan);
    }

    /// The placeholders seen since the last call (a scanned direction's).
    pub fn take_found(&mut self) -> Vec<String> {
        match &mut self.scan {
            Some(scan) => std::mem::take(&mut scan.found),
            None => Vec::new(),
        }
    }

    /// The bytes the relay itself must still send first.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// Nothing moved through the pipe yet (or still in it): the connection can be handed on.
    pub fn untouched(&self) -> bool {
        self.carried == 0 && self.pending == 0 && self.scan.is_none()
    }

    /// Whether all of it is done: the source ended and everything reached the destination.
    pub fn finished(&self) -> bool {
        self.shut
    }

    /// Move what can be moved now from `src` to `dst`. An error: the connection is broken
    /// (a reset, a closed peer).
    pub fn pump(&mut self, src: &impl AsFd, dst: &(impl AsFd + Shut)) -> io::Result<Turn> {
        if self.scan.is_some() {
            return self.pump_scanned(src, dst);
        }
        let mut turn = Turn::default();
        for _ in 0..ROUNDS {
            if !write_head(&mut self.head, dst)? {
                return Ok(turn);
            }
            let mut progress = false;
            if self.pending > 0 {
                match splice_nonblocking(self.pipe_read.as_fd(), dst.as_fd(), self.pending) {
                    Ok(n) => {
                        self.pending -= n;
                        turn.moved += n as u64;
                        progress |= n > 0;
                    }
                    Err(e) if transient(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            if !self.eof {
                match splice_nonblocking(src.as_fd(), self.pipe_write.as_fd(), self.capacity) {
                    Ok(0) => {
                        self.eof = true;
                        progress = true;
                    }
                    Ok(n) => {
                        self.pending += n;
                        progress = true;
                        if !self.grown {
                            self.carried += n as u64;
                            if self.carried >= BULK_AFTER {
                                self.grow();
                            }
                        }
                    }
                    Err(e) if transient(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            if self.eof && self.pending == 0 && !self.shut {
                self.shut = true;
                dst.shut_write();
            }
            if !progress {
                return Ok(turn);
            }
        }
        turn.more = !self.shut;
        Ok(turn)
    }
}

impl Flow {
    /// [`Flow::pump`] of a scanned direction: read, looked through, written.
    fn pump_scanned(&mut self, src: &impl AsFd, dst: &(impl AsFd + Shut)) -> io::Result<Turn> {
        let mut turn = Turn::default();
        let Some(scan) = self.scan.as_deref_mut() else {
            return Ok(turn);
        };
        for _ in 0..ROUNDS {
            if !write_head(&mut self.head, dst)? {
                return Ok(turn);
            }
            let mut progress = false;
            while scan.start < scan.buffer.len() {
                match nix::unistd::write(dst.as_fd(), &scan.buffer[scan.start..]) {
                    Ok(n) => {
                        scan.start += n;
                        turn.moved += n as u64;
                        progress = true;
                    }
                    Err(Errno::EAGAIN) => return Ok(turn),
                    Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if !self.eof {
                scan.buffer.resize(SCAN_CHUNK, 0);
                match nix::unistd::read(src.as_fd(), &mut scan.buffer) {
                    Ok(0) => {
                        self.eof = true;
                        progress = true;
                        scan.buffer.clear();
                    }
                    Ok(n) => {
                        scan.buffer.truncate(n);
                        scan.scanner.feed(&scan.buffer, &mut scan.found);
                        progress = true;
                    }
                    Err(Errno::EAGAIN) | Err(Errno::EINTR) => scan.buffer.clear(),
                    Err(e) => return Err(e.into()),
                }
                scan.start = 0;
            }
            if self.eof && scan.start >= scan.buffer.len() && !self.shut {
                self.shut = true;
                dst.shut_write();
            }
            if !progress {
                return Ok(turn);
            }
        }
        turn.more = !self.shut;
        Ok(turn)
    }

    /// The pipe made [`BULK_PIPE`] large (once; a refusal — the user's pipe budget spent —
    /// leaves it as it is).
    fn grow(&mut self) {
        self.grown = true;
        let size = BULK_PIPE as libc::c_int;
        match nix::fcntl::fcntl(&self.pipe_write, FcntlArg::F_SETPIPE_SZ(size)) {
            Ok(now) => self.capacity = now.max(1) as usize,
            Err(e) => log::debug!("relay: a pipe of {BULK_PIPE} bytes: {e}"),
        }
    }
}

/// Write what `head` holds to `dst` without blocking: `false` when the kernel said EAGAIN
/// first (what is left stays in `head`).
fn write_head(head: &mut Vec<u8>, dst: &impl AsFd) -> io::Result<bool> {
    while !head.is_empty() {
        match nix::unistd::write(dst.as_fd(), head) {
            Ok(written) => {
                head.drain(..written);
            }
            Err(Errno::EAGAIN) => return Ok(false),
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// A socket that can be shut for writing (the half-close passed on).
pub trait Shut {
    fn shut_write(&self);
}

impl Shut for mio::net::TcpStream {
    fn shut_write(&self) {
        // ENOTCONN: the peer is gone already; the other direction finds out.
        let _ = self.shutdown(Shutdown::Write);
    }
}
