//! Installing a seccomp filter (seccomp(2)); the program itself is built in
//! `src/sandbox/seccomp.rs`.

use std::io;

/// One classic-BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// `program` as the kernel's `struct sock_filter`s.
pub(super) fn sock_filters(program: &[Instruction]) -> Vec<libc::sock_filter> {
    (program.iter())
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// The `struct sock_fprog` of `filters` (which must outlive its use).
pub(super) fn sock_fprog(filters: &[libc::sock_filter]) -> libc::sock_fprog {
    libc::sock_fprog {
        len: filters.len() as libc::c_ushort,
        filter: filters.as_ptr() as *mut libc::sock_filter,
    }
}

/// Install a seccomp filter on this thread (seccomp(2), `SECCOMP_SET_MODE_FILTER`). Requires
/// no_new_privs (or CAP_SYS_ADMIN); inherited by every child, kept across execve.
pub fn install_seccomp_filter(program: &[Instruction]) -> io::Result<()> {
    let filters = sock_filters(program);
    let fprog = sock_fprog(&filters);
    // SAFETY: `fprog` points at `filters`, both alive for the call; the kernel copies the
    // program and does not keep the pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
