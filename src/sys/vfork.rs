//! A child that shares its parent's memory until it execs: clone(2) with `CLONE_VM |
//! CLONE_VFORK`, on a stack of its own — what glibc's and musl's posix_spawn do.
//!
//! Why: a fork copies the parent's page tables and every page either side writes afterwards
//! is copied again; the exec then tears that copy down. On the development hosts (a
//! paravirtualised VM where page-table updates trap) a fork of even a small process costs
//! ~220 µs, a vfork ~50 µs (measured: README, "Benchmarks"), and the agent's exec no longer has
//! a copied address space to unmap. The agent's child runs a few hundred microseconds of
//! sandbox set-up before its exec, with the parent suspended the whole time (`CLONE_VFORK`),
//! so sharing the memory is safe as long as the parent is single-threaded and does not rely on
//! the child leaving its heap as it was: the child's allocations stay allocated (the caller is
//! a process about to exec — the shim's clone — or the shim, which does not care), and a child
//! killed in the middle of `malloc` would leave the parent's allocator locked. Callers keep
//! their work after the call allocation-light for that reason.

use std::io;

/// The child's stack: enough for the sandbox set-up (mount plans, error messages); only the
/// pages it touches cost anything.
const CHILD_STACK_BYTES: usize = 2 << 20;

/// An anonymous mapping used as a child's stack, its lowest page a guard (a stack overflow
/// faults instead of writing below it). Unmapped on drop.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    fn new(len: usize) -> io::Result<Stack> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
        // existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the first page of the mapping just made, which nothing uses yet.
        if unsafe { libc::mprotect(base, page_size(), libc::PROT_NONE) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The highest address, 16-byte aligned: x86-64 stacks grow down.
    fn top(&self) -> *mut libc::c_void {
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

fn page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

/// Run `child` in a new process that shares this one's memory, and return its pid once it
/// has exec'd or exited: the caller is suspended until then (`CLONE_VFORK`). `child` must end
/// in execve(2) or _exit(2) and never unwind.
///
/// # Safety
/// The calling process must be single-threaded (no other thread may run on the shared memory
/// while the child does), and `child` must not rely on anything the suspended caller holds
/// (a lock taken before the call, say).
pub unsafe fn vfork_exec(child: &mut dyn FnMut() -> libc::c_int) -> io::Result<libc::pid_t> {
    let stack = Stack::new(CHILD_STACK_BYTES)?;
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
