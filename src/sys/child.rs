//! Work done in a forked child of the (single-threaded) daemon, with a bounded wait for it:
//! building a sandbox template.

use super::fds::{pipe, wait_readable};
use super::process::{reset_signal_dispositions, MAX_REPORT_MESSAGE};
use super::wait::wait_for;
use super::{block_all_signals, restore_signal_mask};
use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Run `work` in a forked child of this (single-threaded) process and, once it succeeded and
/// while the child still lives, `then(child's pid)` here (to open its namespaces, say); the
/// child then exits. `work`'s error message comes back as the `Err`. Signals are blocked
/// across the fork and reset to default in the child, so no handler of ours runs there.
///
/// `deadline_ms`: how long the child may take to report; past it, it is killed and `Err`.
pub fn run_in_child<T>(
    work: &dyn Fn() -> Result<(), String>,
    then: &dyn Fn(i32) -> io::Result<T>,
    deadline_ms: u64,
) -> Result<T, String> {
    let (result_read, result_write) = pipe().map_err(|e| format!("pipe: {e}"))?;
    let (go_read, go_write) = pipe().map_err(|e| format!("pipe: {e}"))?;
    let max_signal = libc::SIGRTMAX();
    let old = block_all_signals().map_err(|e| format!("sigprocmask: {e}"))?;
    // SAFETY: the caller is single-threaded (keel's daemon is), so the child is a faithful
    // copy; it resets signal dispositions, runs `work` (ordinary code: no other thread can
    // hold a lock), reports and _exits without returning.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(result_read);
        drop(go_write);
        reset_signal_dispositions(max_signal, &[0; 8]);
        // A panic must not unwind into the caller's code (its destructors) in this child.
        let report = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
            Ok(Ok(())) => Vec::new(),
            Ok(Err(message)) => message.into_bytes(),
            Err(_) => b"panicked".to_vec(),
        };
        let mut byte = [0u8; 1];
        // SAFETY: writes of a live buffer to our pipe, a blocking read, then _exit.
        unsafe {
            libc::write(
                result_write.as_raw_fd(),
                [u8::from(!report.is_empty())].as_ptr().cast(),
                1,
            );
            libc::write(
                result_write.as_raw_fd(),
                report.as_ptr().cast(),
                report.len().min(MAX_REPORT_MESSAGE as usize),
            );
            drop(result_write);
            // Wait for the parent's `then` (EOF when it closes its end, or dies).
            libc::read(go_read.as_raw_fd(), byte.as_mut_ptr().cast(), 1);
            libc::_exit(0)
        }
    }
    restore_signal_mask(&old);
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    drop(result_write);
    drop(go_read);
    // Bounded: a host path that hangs (a dead NFS server) must not hang the caller's loop.
    let deadline = std::time::Duration::from_millis(deadline_ms);
    if !wait_readable(result_read.as_fd(), Some(deadline)) {
        // SAFETY: kill(2) of our own child; its zombie is reaped by whoever reaps ours.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        return Err(format!("no answer in {deadline_ms} ms (killed)"));
    }
    let mut text = Vec::new();
    {
        use std::io::Read;
        let _ = std::fs::File::from(result_read)
            .take(MAX_REPORT_MESSAGE + 1)
            .read_to_end(&mut text);
    }
    let outcome = match text.split_first() {
        Some((0, _)) => then(pid).map_err(|e| e.to_string()),
        Some((_, message)) => Err(String::from_utf8_lossy(message).into_owned()),
        None => Err("the child died before reporting".to_string()),
    };
    drop(go_write);
    let _ = wait_for(pid);
    outcome
}
