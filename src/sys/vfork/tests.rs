use super::*;

fn wait_status(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

fn current_mask() -> libc::sigset_t {
    let mut mask = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: a NULL new set only reads the mask into `mask`.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, std::ptr::null(), mask.as_mut_ptr()) };
    // SAFETY: written just above.
    unsafe { mask.assume_init() }
}

/// Each check in a process of its own, forked here: the test harness runs tests on threads
/// and `vfork_exec` wants a single-threaded caller. The check's failure is its exit code.
fn in_forked_process(check: fn() -> i32) -> i32 {
    // SAFETY: the child runs `check` and _exits without returning into the harness.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = std::panic::catch_unwind(check).unwrap_or(99);
        // SAFETY: leave the copy of the harness without running its cleanup.
        unsafe { libc::_exit(code) };
    }
    let status = wait_status(pid);
    assert!(
        libc::WIFEXITED(status),
        "the check process died: {status:#x}"
    );
    libc::WEXITSTATUS(status)
}

#[test]
fn the_child_shares_memory_and_runs_before_the_parent_resumes() {
    let code = in_forked_process(|| {
        let mask_before = current_mask();
        let mut seen = 0u8;
        // SAFETY: single-threaded (a fresh fork); the child ends in _exit.
        let pid = unsafe {
            vfork_exec(&mut || {
                // Signals are blocked here (SIGTERM among them).
                let blocked = libc::sigismember(&current_mask(), libc::SIGTERM) == 1;
                let heap = vec![7u8; 100_000];
                seen = heap[99_999] + u8::from(blocked);
                libc::_exit(7)
            })
        };
        let Ok(pid) = pid else { return 1 };
        let status = wait_status(pid);
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 7 {
            return 2;
        }
        // Written by the child into our memory before we resumed.
        if seen != 8 {
            return 3;
        }
        // Our mask is as it was, and our heap still works.
        let after = current_mask();
        for signal in 1..32 {
            // SAFETY: both sets were filled by sigprocmask.
            let same = unsafe {
                libc::sigismember(&after, signal) == libc::sigismember(&mask_before, signal)
            };
            if !same {
                return 4;
            }
        }
        if vec![1u8; 1 << 20]
            .iter()
            .map(|&b| b as usize)
            .sum::<usize>()
            != 1 << 20
        {
            return 5;
        }
        0
    });
    assert_eq!(code, 0, "check {code} failed");
}

#[test]
fn the_child_execs_and_an_abort_in_it_spares_the_parent() {
    let code = in_forked_process(|| {
        let path = c"/bin/true";
        let argv = [path.as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null()];
        // SAFETY: single-threaded; the child execs or _exits.
        let pid = unsafe {
            vfork_exec(&mut || {
                libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                libc::_exit(127)
            })
        };
        let Ok(pid) = pid else { return 1 };
        if wait_status(pid) != 0 {
            return 2;
        }
        // abort() in the child: it dies of a signal, we do not. (glibc's abort kills it
        // with SIGABRT; musl's signals our thread id first — that SIGABRT is discarded
        // before our mask comes back — then ends the child with a crash instruction.)
        // SAFETY: as above; abort never returns.
        let pid = unsafe { vfork_exec(&mut || libc::abort()) };
        let Ok(pid) = pid else { return 3 };
        let status = wait_status(pid);
        if !libc::WIFSIGNALED(status) {
            return 4;
        }
        0
    });
    assert_eq!(code, 0, "check {code} failed");
}
