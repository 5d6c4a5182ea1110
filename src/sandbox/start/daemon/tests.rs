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
