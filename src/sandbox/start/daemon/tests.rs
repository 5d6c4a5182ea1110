use super::*;

#[test]
fn home_is_roots_or_the_users_existing_home() {
    let passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:n:/nonexistent:/bin/false\nme:x:1000:1000::/usr:/bin/sh\ntmp:x:1001:1001::/tmp:/bin/sh\n";
    assert_eq!(home_for(None, passwd), Path::new("/root"));
    assert_eq!(home_for(Some(65534), passwd), Path::new("/root"));
    assert_eq!(home_for(Some(1000), passwd), Path::new("/usr"));
    assert_eq!(home_for(Some(1001), passwd), Path::new("/root"));
    assert_eq!(home_for(Some(4242), passwd), Path::new("/root"));
}

#[test]
fn a_user_outside_the_tasks_ids_is_refused_with_the_ids_to_choose() {
    let block = IdBlock {
        first: 200_000,
        count: 65_536,
    };
    assert_eq!(host_ids(block, (1000, 1000)).unwrap(), (201_000, 201_000));
    let text = host_ids(block, (70_000, 0)).unwrap_err().to_string();
    assert!(
        text.starts_with("sandbox: sandbox.user 70000:0 is outside the task's user namespace"),
        "{text}"
    );
    assert!(
        text.contains("0–65535") && text.contains("below 65536"),
        "{text}"
    );
}

#[test]
fn cap_net_admin_without_a_user_namespace_is_refused_before_anything_is_done() {
    let spec = SandboxSpec {
        workdir: "/work".into(),
        work_source: "/nonexistent/work".into(),
        checkout: None,
        new_root: "/nonexistent/root".into(),
        progress_file: "/nonexistent/progress".into(),
        checkpoint_source: "/nonexistent/checkpoint".into(),
        hidden: vec![],
        veiled: vec![],
        writable: vec![],
        capabilities: vec!["CAP_NET_ADMIN".into()],
        user: None,
        network: SandboxNetwork::None,
        tmp_size: 1 << 20,
        home_size: 1 << 20,
        keel_dirs: Default::default(),
        id_block: None,
        findings: None,
        secrets: vec![],
    };
    let listed = std::cell::Cell::new(false);
    let refused = prepare(&spec, || {
        listed.set(true);
        Ok(Vec::new())
    });
    let Err(e) = refused else {
        panic!("CAP_NET_ADMIN without a user namespace was allowed");
    };
    assert!(
        e.to_string()
            .contains("CAP_NET_ADMIN needs the task's own user namespace"),
        "{e}"
    );
    assert!(!listed.get(), "refused before the host's / was listed");
}

#[test]
fn a_user_or_group_this_host_lacks_is_the_hosts_with_the_fix() {
    let passwd = "root:x:0:0:root:/root:/bin/sh\nme:x:1000:1000::/home/me:/bin/sh\n";
    let group = "root:x:0:\nme:x:1000:\n";
    let why = missing_user("agent", passwd, group).unwrap();
    assert!(
        why.starts_with("no such user \"agent\" on this host"),
        "{why}"
    );
    assert!(why.contains("useradd --create-home agent"), "{why}");
    assert!(why.contains("user: None"), "{why}");
    let why = missing_user("me:agents", passwd, group).unwrap();
    assert!(
        why.starts_with("no such group \"agents\" on this host"),
        "{why}"
    );
    let why = missing_user("agent:me", passwd, group).unwrap();
    assert!(why.starts_with("no such user \"agent\""), "{why}");
    // There, numeric, or malformed (validation's to say): not a missing account.
    for there in [
        "me",
        "1000",
        "1000:1000",
        "me:me",
        "4242",
        "-1",
        "a:b:c",
        "",
    ] {
        assert_eq!(missing_user(there, passwd, group), None, "{there}");
    }
}

#[test]
fn the_hosts_refusals_of_a_start_are_told_from_the_units() {
    use crate::sandbox::privileges::PrivilegeError;
    let missing = privileges::plan(&[], Some("agent"), false, "", "").unwrap_err();
    assert!(ResolveError::Privileges(missing).refused_by_host());
    assert!(ResolveError::Privileges(PrivilegeError::NotHeld(1 << 12)).refused_by_host());
    assert!(ResolveError::UnmappedUser { uid: 1, gid: 1 }.refused_by_host());
    assert!(ResolveError::NetAdminWithoutUserNamespace.refused_by_host());
    assert!(
        ResolveError::ListHostRoot(std::io::Error::from_raw_os_error(libc::EIO)).refused_by_host()
    );
    let give = |error| ResolveError::GiveToUser {
        path: "/s/tasks/a/work".into(),
        uid: 1000,
        error,
    };
    assert!(give(nix::errno::Errno::EPERM).refused_by_host());
    assert!(give(nix::errno::Errno::ENOSPC).refused_by_host());
    assert!(!give(nix::errno::Errno::ENOENT).refused_by_host());
    let malformed = privileges::plan(&[], Some("1000:"), false, "", "").unwrap_err();
    assert!(!ResolveError::Privileges(malformed).refused_by_host());
    let capability = privileges::plan(&["CAP_NOPE".into()], None, false, "", "").unwrap_err();
    assert!(!ResolveError::Privileges(capability).refused_by_host());
    assert!(!ResolveError::Command("the command is empty".into()).refused_by_host());
    assert!(!ResolveError::Writable("covers the state directory".into()).refused_by_host());
}
