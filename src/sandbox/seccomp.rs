//! A small deny-list seccomp filter for the agent (seccomp(2), `SECCOMP_MODE_FILTER`): the
//! kernel interfaces a coding agent never needs and that have been the way out of sandboxes —
//! user namespaces (their root can reach code paths unprivileged users cannot), BPF, keyrings,
//! userfaultfd, io_uring, perf, module and kexec loading, mount calls, foreign syscall ABIs.
//! Denied calls fail with EPERM (clone3 with ENOSYS, so that libc falls back to clone(2), whose
//! flags a filter can see). Setting the set-user-ID or set-group-ID bit on a file is denied too:
//! the agent's files live on the host, where a setuid-root file it left in `/work` would be one
//! (chmod, fchmod, fchmodat, fchmodat2, and the mode of open, openat and creat; openat2, whose
//! mode a filter cannot read, gets ENOSYS and libc's fallback). Everything else is allowed:
//! this is a fence, not a profile.
//!
//! The program is built by a pure function and tested here; `src/sys/seccomp.rs` installs it.

use crate::sys::seccomp::Instruction;

// linux/bpf_common.h (BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, …), linux/seccomp.h,
// linux/audit.h.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_JMP_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// x32 syscalls carry this bit in their number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
// struct seccomp_data: nr at 0, arch at 4, args[i] (low half on little-endian) at 16 + 8 i.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARG0: u32 = 16;
const fn offset_arg(index: u32) -> u32 {
    OFFSET_ARG0 + 8 * index
}
/// S_ISUID | S_ISGID.
const SET_ID_BITS: u32 = 0o6000;

/// Syscalls an agent never needs (x86_64 numbers).
#[cfg(target_arch = "x86_64")]
pub const DENIED: &[libc::c_long] = &[
    libc::SYS_bpf,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_reboot,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_mount_setattr,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_quotactl,
    libc::SYS_vhangup,
];

fn stmt(code: u16, k: u32) -> Instruction {
    Instruction {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Instruction {
    Instruction { code, jt, jf, k }
}

fn deny(errno: i32) -> Instruction {
    stmt(BPF_RET_K, SECCOMP_RET_ERRNO | (errno as u32 & 0xffff))
}

/// What the filter does with one syscall number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Fail with this errno.
    Errno(i32),
    /// Fail with EPERM when the low half of argument `arg` has any of `bits`, else allow.
    DenyBits { arg: u32, bits: u32 },
}

/// Every syscall the filter does not simply allow, sorted by number.
#[cfg(target_arch = "x86_64")]
fn rules() -> Vec<(u32, Rule)> {
    let newuser = libc::CLONE_NEWUSER as u32;
    let mut rules: Vec<(u32, Rule)> = DENIED
        .iter()
        .map(|&nr| (nr as u32, Rule::Errno(libc::EPERM)))
        .collect();
    for nr in [libc::SYS_clone3, libc::SYS_openat2] {
        rules.push((nr as u32, Rule::Errno(libc::ENOSYS)));
    }
    let checks: [(libc::c_long, u32, u32); 9] = [
        (libc::SYS_unshare, 0, newuser),
        (libc::SYS_clone, 0, newuser),
        (libc::SYS_chmod, 1, SET_ID_BITS),
        (libc::SYS_fchmod, 1, SET_ID_BITS),
        (libc::SYS_fchmodat, 2, SET_ID_BITS),
        (libc::SYS_fchmodat2, 2, SET_ID_BITS),
        (libc::SYS_open, 2, SET_ID_BITS),
        (libc::SYS_openat, 3, SET_ID_BITS),
        (libc::SYS_creat, 1, SET_ID_BITS),
    ];
    rules.extend(
        checks
            .iter()
            .map(|&(nr, arg, bits)| (nr as u32, Rule::DenyBits { arg, bits })),
    );
    rules.sort_by_key(|&(nr, _)| nr);
    rules
}

/// Up to this many rules are matched one after the other; more are split in two by number.
const LEAF_RULES: usize = 4;

/// The instructions deciding `rules` (sorted) with the syscall number in the accumulator:
/// a binary search on the number down to leaves of at most [`LEAF_RULES`] comparisons. Every
/// path ends in a return.
///
/// Why a search and not a list: when a filter is installed, the kernel runs it for every
/// syscall number to find the ones it always allows (seccomp's action cache) — with a list of
/// fifty comparisons, ~23,000 emulated instructions, 145–195 µs to install on the development
/// hosts; with the search, at most 14 per number, 108–119 µs (docs/benchmarks.md).
fn decide(rules: &[(u32, Rule)]) -> Vec<Instruction> {
    if rules.len() <= LEAF_RULES {
        let mut p = Vec::new();
        for &(nr, rule) in rules {
            let body = match rule {
                Rule::Errno(errno) => vec![deny(errno)],
                Rule::DenyBits { arg, bits } => vec![
                    // The accumulator is reloaded: this branch decides and returns.
                    stmt(BPF_LD_W_ABS, offset_arg(arg)),
                    jump(BPF_JMP_JSET_K, bits, 0, 1),
                    deny(libc::EPERM),
                    stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
                ],
            };
            p.push(jump(BPF_JMP_JEQ_K, nr, 0, body.len() as u8));
            p.extend(body);
        }
        p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
        return p;
    }
    let (low, high) = rules.split_at(rules.len() / 2);
    let low = decide(low);
    let skip = u8::try_from(low.len()).expect("a seccomp jump of at most 255 instructions");
    let mut p = vec![jump(BPF_JMP_JGE_K, high[0].0, skip, 0)];
    p.extend(low);
    p.extend(decide(high));
    p
}

/// [`program`], built once per process: the daemon builds it before its first clone, and
/// the agent's child (which shares its parent's memory and should allocate little) reads it.
#[cfg(target_arch = "x86_64")]
pub fn filter() -> &'static [Instruction] {
    static FILTER: std::sync::OnceLock<Vec<Instruction>> = std::sync::OnceLock::new();
    FILTER.get_or_init(program)
}

/// The filter: foreign architectures and x32 denied, the listed calls denied, clone3 answered
/// ENOSYS, `clone`/`unshare` with CLONE_NEWUSER denied, everything else allowed.
#[cfg(target_arch = "x86_64")]
pub fn program() -> Vec<Instruction> {
    let mut p = vec![
        stmt(BPF_LD_W_ABS, OFFSET_ARCH),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        deny(libc::EPERM),
        stmt(BPF_LD_W_ABS, OFFSET_NR),
        jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        deny(libc::EPERM),
    ];
    p.extend(decide(&rules()));
    p
}

/// Run `program` the way the kernel would, for one call: the action it returns.
#[cfg(test)]
fn run(program: &[Instruction], arch: u32, nr: u32, arg0: u32) -> u32 {
    run_args(program, arch, nr, [arg0, 0, 0, 0])
}

#[cfg(test)]
fn run_args(program: &[Instruction], arch: u32, nr: u32, args: [u32; 4]) -> u32 {
    run_counted(program, arch, nr, args).0
}

/// [`run_args`], and how many instructions ran.
#[cfg(test)]
fn run_counted(program: &[Instruction], arch: u32, nr: u32, args: [u32; 4]) -> (u32, usize) {
    let mut acc = 0u32;
    let mut pc = 0usize;
    let mut steps = 0;
    loop {
        steps += 1;
        let i = program[pc];
        match i.code {
            BPF_LD_W_ABS => {
                acc = match i.k {
                    OFFSET_NR => nr,
                    OFFSET_ARCH => arch,
                    k if k >= OFFSET_ARG0 && (k - OFFSET_ARG0).is_multiple_of(8) => {
                        args[((k - OFFSET_ARG0) / 8) as usize]
                    }
                    other => panic!("load of offset {other}"),
                };
                pc += 1;
            }
            BPF_RET_K => return (i.k, steps),
            code => {
                let taken = match code {
                    BPF_JMP_JEQ_K => acc == i.k,
                    BPF_JMP_JGE_K => acc >= i.k,
                    BPF_JMP_JSET_K => acc & i.k != 0,
                    other => panic!("opcode {other:#x}"),
                };
                pc += 1 + usize::from(if taken { i.jt } else { i.jf });
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
