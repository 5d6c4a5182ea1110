use super::*;

#[test]
fn sandbox_setup_errors_say_what_to_fix() {
    let alone = SandboxSetupError::MountNamespace {
        with_others: false,
        error: nix::errno::Errno::EPERM,
    };
    let text = alone.to_string();
    assert!(
        text.starts_with("cannot create the task's mount namespace (unshare: EPERM"),
        "{text}"
    );
    assert!(text.contains("run keel as root"), "{text}");
    let with_others = SandboxSetupError::MountNamespace {
        with_others: true,
        error: nix::errno::Errno::EPERM,
    };
    assert!(with_others
        .to_string()
        .contains("and its IPC, UTS (and network) ones"));
    let seccomp = SandboxSetupError::Seccomp(io::Error::from_raw_os_error(libc::EINVAL));
    assert!(seccomp.to_string().contains("CONFIG_SECCOMP_FILTER"));
}
