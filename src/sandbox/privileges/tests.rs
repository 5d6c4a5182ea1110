use super::*;

const PASSWD: &str = "\
root:x:0:0:root:/root:/bin/bash
# a comment, then a blank line

daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bob:x:1000:100:Bob,,,:/home/bob:/bin/bash
broken:x:12ab:100::/:/bin/false
nogid:x:1001
+nisuser::::::
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
alice:x:1002:1002::/home/alice:/bin/sh\r
";

const GROUP: &str = "\
root:x:0:
users:x:100:bob
staff:x:50:
badgroup:x:nope:
nogroup:x:65534:
";

fn user(spec: &str) -> Result<Option<(u32, u32)>, String> {
    plan(&[], Some(spec), false, PASSWD, GROUP)
        .map(|plan| plan.user)
        .map_err(|e| e.to_string())
}

fn caps(names: &[&str]) -> Result<u64, String> {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    plan(&names, None, false, PASSWD, GROUP)
        .map(|plan| plan.keep)
        .map_err(|e| e.to_string())
}

#[test]
fn defaults_keep_nothing_and_stay_root() {
    let plan = plan(&[], None, false, "", "").unwrap();
    assert_eq!(plan, PrivilegePlan::default());
    assert!(super::plan(&[], None, true, "", "").unwrap().loopback_up);
}

#[test]
fn user_names_resolve_through_passwd() {
    assert_eq!(user("bob"), Ok(Some((1000, 100))));
    assert_eq!(user("root"), Ok(Some((0, 0))));
    assert_eq!(user("nobody"), Ok(Some((65534, 65534))));
    // CRLF files still resolve.
    assert_eq!(user("alice"), Ok(Some((1002, 1002))));
    assert_eq!(user(" bob "), Ok(Some((1000, 100))));
}

#[test]
fn uid_and_gid_pairs_need_no_database() {
    assert_eq!(
        plan(&[], Some("1234:5678"), false, "", "").unwrap().user,
        Some((1234, 5678))
    );
    assert_eq!(user("65534:65534"), Ok(Some((65534, 65534))));
    assert_eq!(user("0:0"), Ok(Some((0, 0))));
    // Either side may be a name.
    assert_eq!(user("bob:staff"), Ok(Some((1000, 50))));
    assert_eq!(user("1000:users"), Ok(Some((1000, 100))));
    assert_eq!(user("bob:7"), Ok(Some((1000, 7))));
}

#[test]
fn a_bare_uid_takes_its_primary_group_or_itself() {
    assert_eq!(user("1000"), Ok(Some((1000, 100))));
    assert_eq!(user("4242"), Ok(Some((4242, 4242))));
    assert_eq!(
        plan(&[], Some("77"), false, "", "").unwrap().user,
        Some((77, 77))
    );
}

#[test]
fn unknown_users_and_groups_say_what_to_write() {
    let error = user("carol").unwrap_err();
    assert_eq!(
        error,
        "sandbox.user \"carol\": no such user in /etc/passwd; give uid:gid"
    );
    let error = user("bob:wheel").unwrap_err();
    assert!(
        error.contains("no such group \"wheel\" in /etc/group"),
        "{error}"
    );
    assert!(error.contains("give a numeric gid"), "{error}");
    // Comment and NIS lines are not users.
    assert!(user("+nisuser").is_err());
    assert!(user("# a comment, then a blank line").is_err());
}

#[test]
fn malformed_entries_are_named_with_their_line() {
    let error = user("broken").unwrap_err();
    assert!(error.contains("/etc/passwd line 6 is malformed"), "{error}");
    assert!(error.contains("uid \"12ab\""), "{error}");
    let error = user("nogid").unwrap_err();
    assert!(error.contains("/etc/passwd line 7 is malformed"), "{error}");
    assert!(error.contains("gid \"\""), "{error}");
    let error = user("bob:badgroup").unwrap_err();
    assert!(error.contains("/etc/group line 4 is malformed"), "{error}");
    // An entry whose uid does not parse belongs to no uid: a lookup by number passes over
    // it; one whose uid matches but whose gid is broken is reported.
    assert_eq!(user("12"), Ok(Some((12, 12))));
    let error = user("1001").unwrap_err();
    assert!(error.contains("/etc/passwd line 7 is malformed"), "{error}");
}

#[test]
fn malformed_specs_are_refused() {
    for spec in ["", "  ", ":", "1000:", ":1000", "1:2:3", "bob:"] {
        let error = user(spec).expect_err(spec);
        assert!(error.starts_with("sandbox.user"), "{spec:?}: {error}");
        assert!(
            error.contains("give \"uid:gid\"") || error.contains("is empty"),
            "{spec:?}: {error}"
        );
    }
    let error = user("-1").unwrap_err();
    assert!(error.contains("negative"), "{error}");
    let error = user("4294967295:0").unwrap_err();
    assert!(error.contains("leave unchanged"), "{error}");
    let error = user("0:4294967295").unwrap_err();
    assert!(error.contains("gid 4294967295"), "{error}");
    let error = user("99999999999").unwrap_err();
    assert!(error.contains("out of range"), "{error}");
}

#[test]
fn capability_names_become_bits() {
    assert_eq!(caps(&[]), Ok(0));
    assert_eq!(caps(&["CAP_NET_BIND_SERVICE"]), Ok(1 << 10));
    assert_eq!(caps(&["net_admin", "CAP_CHOWN"]), Ok((1 << 12) | 1));
    assert_eq!(caps(&["CAP_CHECKPOINT_RESTORE"]), Ok(1 << 40));
    assert_eq!(caps(&["NET_ADMIN", "CAP_NET_ADMIN"]), Ok(1 << 12));
}

#[test]
fn an_unknown_capability_is_named() {
    let error = caps(&["CAP_CHOWN", "CAP_NET_ADMN"]).unwrap_err();
    assert!(error.starts_with("sandbox.capabilities: "), "{error}");
    assert!(error.contains("\"CAP_NET_ADMN\""), "{error}");
    assert!(error.contains("CAP_NET_ADMIN"), "{error}");
}

#[test]
fn step_errors_say_what_to_do() {
    let eperm = || io::Error::from_raw_os_error(libc::EPERM);
    let error = PrivilegeError::BoundingSet(0, eperm()).to_string();
    assert!(error.contains("CAP_SETPCAP (run as root)"), "{error}");
    let error = PrivilegeError::Uid(1000, eperm()).to_string();
    assert!(error.starts_with("cannot switch to uid 1000: "), "{error}");
    let error = PrivilegeError::NotHeld(1 << 24 | 1 << 10).to_string();
    assert!(error.contains("capabilities 10, 24"), "{error}");
    let error = PrivilegeError::Capset(0, eperm()).to_string();
    assert!(error.contains("to no capability"), "{error}");
}

#[test]
fn cap_last_cap_is_parsed_defensively() {
    assert_eq!(parse_last_cap("40\n"), Some(40));
    assert_eq!(parse_last_cap("63"), Some(63));
    assert_eq!(parse_last_cap("64"), None);
    assert_eq!(parse_last_cap("x"), None);
    let (last, _) = last_cap();
    assert!(last >= 31, "{last}");
}

#[test]
fn an_account_has_its_home_and_every_group_that_lists_it() {
    let group = format!("{GROUP}\nwheel:x:10:alice,bob\ndocker:x:999: bob \nsolo:x:77:alice\n");
    let bob = account(PASSWD, &group, "bob")
        .unwrap()
        .expect("bob is listed");
    assert_eq!((bob.uid, bob.gid), (1000, 100));
    assert_eq!(bob.home, std::path::PathBuf::from("/home/bob"));
    // Primary first; `users` lists bob too but is his primary group: not twice.
    assert_eq!(bob.groups, vec![100, 10, 999]);
    assert_eq!(account(PASSWD, &group, "carol"), Ok(None));
    let error = account(PASSWD, &group, "broken").unwrap_err();
    assert!(error.contains("/etc/passwd line 6 is malformed"), "{error}");
}
