//! A child that shares its parent's memory until it execs: clone(2) with `CLONE_VM |
//! CLONE_VFORK`, on a stack of its own — what glibc's and musl's posix_spawn do.
//!
//! Why: a fork copies the parent's page tables and every page either side writes afterwards
//! is copied again; the exec then tears that copy down. On the development hosts (a
//! paravirtualised VM where page-table updates trap) a fork of even a small process costs
//! ~220 µs, a vfork ~50 µs (docs/benchmarks.md), and the agent's exec no longer has a copied
//! address space to unmap.
//!
//! What sharing the memory asks of the caller and the child:
//! - the parent is single-threaded and suspended while the child runs (`CLONE_VFORK`), so
//!   the child's allocations and the parent's never race. The child's allocations stay in the
//!   parent's heap: a leak of a few kilobytes in a process that is about to exec (the shim's
//!   clone) or runs one attempt (the standalone shim);
//! - every signal is blocked in both across the call (the child unblocks just before its
//!   execve), so that no signal stops the child in the middle of `malloc` — which would leave
//!   the parent's allocator inconsistent — and no handler of the parent's runs in the child;
//!   only SIGKILL or a fault can end it there (a SIGKILL of the task's cgroup ends the parent
//!   as well; the OOM killer kills every process of a shared address space together);
//! - the child shares the parent's thread pointer: musl's `abort()` signals the thread id
//!   stored there, the parent's. A SIGABRT the child aimed at itself is left pending in the
//!   parent (blocked) and discarded here before the mask is restored.
use std::io;

/// The child's stack: as much as a main thread's (the sandbox set-up used to run on one); only
/// the pages it touches cost anything.
const CHILD_STACK_BYTES: usize = 8 << 20;
/// Below it, a guard a frame cannot jump over without touching it (C code built without
/// stack-clash probes skips at most a page per probe).
const GUARD_BYTES: usize = 64 << 10;

/// An anonymous mapping used as a child's stack, its lowest [`GUARD_BYTES`] a guard (a stack
/// overflow faults instead of writing below it). Unmapped on drop.
pub(super) struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    pub(super) fn new(len: usize) -> io::Result<Stack> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
        // existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest part of the mapping just made, which nothing uses yet.
        if unsafe { libc::mprotect(base, GUARD_BYTES, libc::PROT_NONE) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The highest address, 16-byte aligned: x86-64 stacks grow down.
    pub(super) fn top(&self) -> *mut libc::c_void {
        let top = self.base as usize + self.len;
        (top & !15) as *mut libc::c_void
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; the child that used it has exec'd
        // or exited (CLONE_VFORK), so nothing runs on it any more.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Run `child` in a new process that shares this one's memory, and return its pid once it
/// has exec'd or exited: the caller is suspended until then (`CLONE_VFORK`). `child` starts
/// with every signal blocked, must end in execve(2) or _exit(2) and never unwind.
///
/// # Safety
/// The calling process must be single-threaded (no other thread may run on the shared memory
/// while the child does), and `child` must not rely on anything the suspended caller holds
/// (a lock taken before the call, say).
pub unsafe fn vfork_exec(child: &mut dyn FnMut() -> libc::c_int) -> io::Result<libc::pid_t> {
    let stack = Stack::new(CHILD_STACK_BYTES)?;
    let old_mask = super::block_all_signals()?;
    // SAFETY: our caller's contract (single-threaded, `child` ends in execve or _exit).
    let pid = unsafe { clone_on(&stack, child) };
    discard_pending_abort();
    super::restore_signal_mask(&old_mask);
    pid
}

/// A SIGABRT pending for this thread, taken off without being acted on (sigtimedwait(2) with
/// a zero timeout; it is blocked here). See the module's notes on musl's `abort()`.
fn discard_pending_abort() {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: sigemptyset/sigaddset initialise the set on our stack; sigtimedwait reads it and
    // the timeout, and writes no siginfo (NULL). EAGAIN when nothing is pending.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGABRT);
        libc::sigtimedwait(set.as_ptr(), std::ptr::null_mut(), &zero);
    }
}

/// # Safety
/// As [`vfork_exec`]'s.
unsafe fn clone_on(
    stack: &Stack,
    child: &mut dyn FnMut() -> libc::c_int,
) -> io::Result<libc::pid_t> {
    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&mut &mut dyn FnMut` passed to clone below, alive in the
        // suspended caller's frame for as long as the child runs.
        let child = unsafe { &mut *(arg as *mut &mut dyn FnMut() -> libc::c_int) };
        child()
    }
    let mut child: &mut dyn FnMut() -> libc::c_int = child;
    // SAFETY: clone(2) runs `trampoline` on `stack` in a child sharing our memory; we are
    // suspended until it execs or exits (CLONE_VFORK), so `child` and `stack` outlive its use
    // of them. SIGCHLD: the parent is told of its end like a forked child's.
    let pid = unsafe {
        libc::clone(
            trampoline,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &mut child as *mut &mut dyn FnMut() -> libc::c_int as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

#[cfg(test)]
mod tests;
