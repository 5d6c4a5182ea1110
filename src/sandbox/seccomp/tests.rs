use super::*;

const EPERM: u32 = SECCOMP_RET_ERRNO | libc::EPERM as u32;

#[test]
fn denies_what_it_lists_and_allows_the_rest() {
    let p = program();
    let x86 = AUDIT_ARCH_X86_64;
    for &nr in DENIED {
        assert_eq!(run(&p, x86, nr as u32, 0), EPERM, "syscall {nr}");
    }
    for nr in [
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_execve,
        libc::SYS_openat,
        libc::SYS_wait4,
    ] {
        assert_eq!(
            run(&p, x86, nr as u32, 0),
            SECCOMP_RET_ALLOW,
            "syscall {nr}"
        );
    }
    assert_eq!(
        run(&p, x86, libc::SYS_clone3 as u32, 0),
        SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    );
}

#[test]
fn user_namespaces_are_denied_other_clones_allowed() {
    let p = program();
    let x86 = AUDIT_ARCH_X86_64;
    let newuser = libc::CLONE_NEWUSER as u32;
    let fork_like = libc::SIGCHLD as u32;
    for nr in [libc::SYS_clone, libc::SYS_unshare] {
        assert_eq!(run(&p, x86, nr as u32, newuser | fork_like), EPERM);
        assert_eq!(run(&p, x86, nr as u32, fork_like), SECCOMP_RET_ALLOW);
    }
    assert_eq!(
        run(&p, x86, libc::SYS_unshare as u32, libc::CLONE_NEWNS as u32),
        SECCOMP_RET_ALLOW,
        "other namespaces need capabilities the agent lacks anyway"
    );
}

#[test]
fn set_id_bits_are_never_set() {
    let p = program();
    let x86 = AUDIT_ARCH_X86_64;
    let nr = |n: libc::c_long| n as u32;
    assert_eq!(
        run_args(&p, x86, nr(libc::SYS_chmod), [0, 0o4755, 0, 0]),
        EPERM
    );
    assert_eq!(
        run_args(&p, x86, nr(libc::SYS_chmod), [0, 0o2755, 0, 0]),
        EPERM
    );
    assert_eq!(
        run_args(&p, x86, nr(libc::SYS_chmod), [0, 0o755, 0, 0]),
        SECCOMP_RET_ALLOW
    );
    assert_eq!(
        run_args(&p, x86, nr(libc::SYS_fchmodat), [0, 0, 0o4700, 0]),
        EPERM
    );
    assert_eq!(
        run_args(&p, x86, nr(libc::SYS_fchmodat), [0, 0, 0o644, 0]),
        SECCOMP_RET_ALLOW
    );
    let creat = libc::O_CREAT as u32 | libc::O_WRONLY as u32;
    assert_eq!(
        run_args(&p, x86, nr(libc::SYS_openat), [0, 0, creat, 0o4755]),
        EPERM
    );
    assert_eq!(
        run_args(&p, x86, nr(libc::SYS_openat), [0, 0, creat, 0o644]),
        SECCOMP_RET_ALLOW
    );
    assert_eq!(
        run_args(&p, x86, nr(libc::SYS_creat), [0, 0o6755, 0, 0]),
        EPERM
    );
    assert_eq!(
        run(&p, x86, nr(libc::SYS_openat2), 0),
        SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    );
}

/// What the filter must answer, from the rules' plain meaning.
fn expected(nr: u32, args: [u32; 4]) -> u32 {
    match rules().iter().find(|(n, _)| *n == nr) {
        None => SECCOMP_RET_ALLOW,
        Some((_, Rule::Errno(errno))) => SECCOMP_RET_ERRNO | *errno as u32,
        Some((_, Rule::DenyBits { arg, bits })) if args[*arg as usize] & bits != 0 => EPERM,
        Some(_) => SECCOMP_RET_ALLOW,
    }
}

/// The filter as it was before the search: one comparison after the other. A frozen copy,
/// its table of argument checks included on purpose: an oracle sharing `rules()` would
/// agree with a wrong entry.
fn linear_program() -> Vec<Instruction> {
    let mut p = vec![
        stmt(BPF_LD_W_ABS, OFFSET_ARCH),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        deny(libc::EPERM),
        stmt(BPF_LD_W_ABS, OFFSET_NR),
        jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        deny(libc::EPERM),
    ];
    for &nr in DENIED {
        p.push(jump(BPF_JMP_JEQ_K, nr as u32, 0, 1));
        p.push(deny(libc::EPERM));
    }
    for nr in [libc::SYS_clone3, libc::SYS_openat2] {
        p.push(jump(BPF_JMP_JEQ_K, nr as u32, 0, 1));
        p.push(deny(libc::ENOSYS));
    }
    let newuser = libc::CLONE_NEWUSER as u32;
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
    for (nr, arg, bits) in checks {
        p.push(jump(BPF_JMP_JEQ_K, nr as u32, 0, 4));
        p.push(stmt(BPF_LD_W_ABS, offset_arg(arg)));
        p.push(jump(BPF_JMP_JSET_K, bits, 0, 1));
        p.push(deny(libc::EPERM));
        p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    }
    p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    p
}

#[test]
fn the_search_gives_every_verdict_the_list_gave() {
    let (search, list) = (program(), linear_program());
    let numbers = (0..2048).chain([0x3fff_ffff, X32_SYSCALL_BIT, X32_SYSCALL_BIT | 1, u32::MAX]);
    let args = [
        [0; 4],
        [u32::MAX; 4],
        [0o4755; 4],
        [libc::CLONE_NEWUSER as u32; 4],
    ];
    for nr in numbers {
        for arch in [AUDIT_ARCH_X86_64, 0x4000_0003] {
            for a in args {
                assert_eq!(
                    run_args(&search, arch, nr, a),
                    run_args(&list, arch, nr, a),
                    "syscall {nr:#x}, arch {arch:#x}, args {a:?}"
                );
            }
        }
    }
}

#[test]
fn the_search_answers_every_syscall_as_its_rule_says_in_a_few_steps() {
    let p = program();
    let x86 = AUDIT_ARCH_X86_64;
    let set_id = SET_ID_BITS | libc::CLONE_NEWUSER as u32;
    let mut longest = 0;
    for nr in 0..1024 {
        for args in [[0; 4], [set_id; 4], [0o644, 0o755, 0o644, 0o644]] {
            let (action, steps) = run_counted(&p, x86, nr, args);
            assert_eq!(action, expected(nr, args), "syscall {nr} with {args:?}");
            longest = longest.max(steps);
        }
    }
    // The kernel emulates the filter for each number when it is installed (its action
    // cache): a search keeps that to 14 instructions at most where a list took fifty.
    assert!(longest <= 20, "{longest} instructions for one syscall");
    let mut numbers: Vec<u32> = rules().iter().map(|(nr, _)| *nr).collect();
    numbers.dedup();
    assert_eq!(
        numbers.len(),
        DENIED.len() + 11,
        "one rule per syscall, none lost"
    );
}

#[test]
fn foreign_abis_are_denied() {
    let p = program();
    assert_eq!(
        run(&p, 0x4000_0003, libc::SYS_read as u32, 0),
        EPERM,
        "i386"
    );
    assert_eq!(run(&p, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT, 0), EPERM, "x32");
}
