//! The terminal's size, for `keel status --watch` (a frame taller or wider than the screen
//! would scroll instead of redrawing in place).

use std::os::fd::{AsRawFd, BorrowedFd};

/// Rows and columns of the terminal `fd` is, or `None` (not a terminal, or a size of zero).
pub fn window_size(fd: BorrowedFd<'_>) -> Option<(usize, usize)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct passed, which lives across the
    // call; the fd is borrowed, so it is open.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_row > 0 && ws.ws_col > 0)
        .then_some((usize::from(ws.ws_row), usize::from(ws.ws_col)))
}

#[cfg(test)]
mod tests;
