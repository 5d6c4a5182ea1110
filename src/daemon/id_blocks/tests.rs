//! Tests of the id blocks: allocation, the host files' judge, the kernel's judge, and the check
//! at start on files of the test's own.

use super::*;

const DEFAULT: IdRange = IdRange {
    first_id: 0x7000_0000,
    blocks: 1024,
};

fn block(first: u32) -> IdBlock {
    IdBlock {
        first,
        count: ID_BLOCK_SIZE,
    }
}

#[test]
fn blocks_of_a_range() {
    assert_eq!(block_at(&DEFAULT, 0), block(0x7000_0000));
    assert_eq!(block_at(&DEFAULT, 1), block(0x7001_0000));
    assert_eq!(block_at(&DEFAULT, 1023), block(0x73FF_0000));
    assert!(is_block_of(&DEFAULT, block(0x7000_0000)));
    assert!(is_block_of(&DEFAULT, block(0x73FF_0000)));
    // Past the end, before the start, off the grid, or not a whole block: not ours.
    assert!(!is_block_of(&DEFAULT, block(0x7400_0000)));
    assert!(!is_block_of(&DEFAULT, block(0x6FFF_0000)));
    assert!(!is_block_of(&DEFAULT, block(0x7000_8000)));
    assert!(!is_block_of(
        &DEFAULT,
        IdBlock {
            first: 0x7000_0000,
            count: 1000
        }
    ));
}

#[test]
fn the_lowest_free_block_is_chosen() {
    assert_eq!(lowest_free(&DEFAULT, []), Some(block(0x7000_0000)));
    assert_eq!(
        lowest_free(&DEFAULT, [block(0x7000_0000), block(0x7001_0000)]),
        Some(block(0x7002_0000))
    );
    // A hole left by a removed task is filled first.
    assert_eq!(
        lowest_free(&DEFAULT, [block(0x7000_0000), block(0x7002_0000)]),
        Some(block(0x7001_0000))
    );
    // Blocks outside the range hold nothing of it; one of an older range straddling two of
    // ours holds both.
    assert_eq!(
        lowest_free(&DEFAULT, [block(0x6000_0000), block(0x7400_0000)]),
        Some(block(0x7000_0000))
    );
    assert_eq!(
        lowest_free(&DEFAULT, [block(0x7000_8000)]),
        Some(block(0x7002_0000))
    );
    let small = IdRange {
        first_id: 100_000,
        blocks: 2,
    };
    assert_eq!(lowest_free(&small, [block(100_000), block(165_536)]), None);
}

#[test]
fn a_task_keeps_its_block_across_attempts_and_restarts() {
    // The record read back after a restart holds what was persisted at the first start.
    let mut record = crate::daemon::record::TaskRecord::new("a", 1);
    let others = [block(0x7000_0000)];
    let chosen = block_for_start(&DEFAULT, record.id_block, &others).unwrap();
    assert_eq!(chosen, block(0x7001_0000));
    record.id_block = Some(chosen);
    let text = ron::to_string(&record).unwrap();
    let back: crate::daemon::record::TaskRecord = ron::from_str(&text).unwrap();
    // The lower block freed meanwhile: the task still keeps its own.
    assert_eq!(block_for_start(&DEFAULT, back.id_block, &[]), Ok(chosen));
    assert_eq!(
        block_for_start(&DEFAULT, back.id_block, &[block(0x7005_0000)]),
        Ok(chosen)
    );
}

#[test]
fn a_block_not_of_the_range_or_shared_is_chosen_again() {
    // keel.ron's range changed since the block was chosen.
    assert_eq!(
        block_for_start(&DEFAULT, Some(block(100_000)), &[]),
        Ok(block(0x7000_0000))
    );
    // Another task holds it (a hand-edited record): the lowest free instead.
    assert_eq!(
        block_for_start(
            &DEFAULT,
            Some(block(0x7001_0000)),
            &[block(0x7000_0000), block(0x7001_0000)]
        ),
        Ok(block(0x7002_0000))
    );
}

#[test]
fn every_block_held_defers_with_what_to_do() {
    let range = IdRange {
        first_id: 0x7000_0000,
        blocks: 2,
    };
    let held = [block(0x7000_0000), block(0x7001_0000)];
    let exhausted = block_for_start(&range, None, &held).unwrap_err();
    assert_eq!(
        exhausted,
        Exhausted {
            range,
            elsewhere: 0
        }
    );
    let message = exhausted.to_string();
    for needle in ["all 2 blocks", "keel rm", "raise blocks", "from 1879048192"] {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }
    let one = IdRange { blocks: 1, ..range };
    let message = block_for_start(&one, None, &held).unwrap_err().to_string();
    assert!(
        message.starts_with("the only block of host ids is held"),
        "{message}"
    );
    // A task already holding one of the range never waits for another.
    assert_eq!(
        block_for_start(&range, Some(held[1]), &held[..1]),
        Ok(held[1])
    );
}

const SUBUID: &str = "\
# comment
alice:100000:65536

bob:165536:65536
broken:1:
carol:1879048192:65536
";

#[test]
fn host_files_parse() {
    let subuid = parse_subordinate(Path::new("/etc/subuid"), EntryKind::SubUids, SUBUID);
    let lines: Vec<(usize, &str, u64, u64)> = subuid
        .iter()
        .map(|e| (e.line, e.name.as_str(), e.first, e.count))
        .collect();
    assert_eq!(
        lines,
        [
            (2, "alice", 100_000, 65536),
            (4, "bob", 165_536, 65536),
            (6, "carol", 1_879_048_192, 65536)
        ]
    );
    let passwd = "root:x:0:0:root:/root:/bin/bash\n+::::::\nnobody:x:65534:65534::/:/usr/sbin/nologin\nbad:x:abc:1::/:\n";
    let users = parse_id_database(Path::new("/etc/passwd"), EntryKind::User, passwd);
    let ids: Vec<(usize, &str, u64)> = users
        .iter()
        .map(|e| (e.line, e.name.as_str(), e.first))
        .collect();
    assert_eq!(ids, [(1, "root", 0), (3, "nobody", 65534)]);
    let group = "root:x:0:\nstaff:x:1879048200:alice,bob\n";
    let groups = parse_id_database(Path::new("/etc/group"), EntryKind::Group, group);
    assert_eq!(groups[1].first, 1_879_048_200);
    assert_eq!(
        groups[1].to_string(),
        "/etc/group:2: group staff (gid 1879048200)"
    );
}

#[test]
fn an_overlap_is_refused_naming_the_entry_and_the_fix() {
    let entries = parse_subordinate(Path::new("/etc/subuid"), EntryKind::SubUids, SUBUID);
    let error = judge_range(&DEFAULT, &entries, Path::new("/var/lib/keel/keel.ron")).unwrap_err();
    for needle in [
        "/etc/subuid:6: carol's subordinate uids 1879048192-1879113727",
        "1879048192-1946157055",
        "Set user_namespaces: UserNamespaces(first_id: 1879113728, blocks: 1024) in /var/lib/keel/keel.ron",
    ] {
        assert!(error.contains(needle), "{needle:?} not in {error}");
    }
    // The suggestion is clear of every entry.
    let suggested = IdRange {
        first_id: clear_first_id(&DEFAULT, &entries).unwrap(),
        blocks: 1024,
    };
    assert!(overlapping(&suggested, &entries).is_empty());
    assert_eq!(
        judge_range(&suggested, &entries, Path::new("keel.ron")),
        Ok(())
    );
    // Ranges that only touch an entry's ends do not overlap it.
    let below = IdRange {
        first_id: 1_879_048_192 - 2 * 65536,
        blocks: 2,
    };
    let above = IdRange {
        first_id: 1_879_113_728,
        blocks: 1,
    };
    assert_eq!(judge_range(&below, &entries, Path::new("k")), Ok(()));
    assert_eq!(judge_range(&above, &entries, Path::new("k")), Ok(()));
}

#[test]
fn a_single_user_or_group_inside_the_range_is_an_overlap() {
    let users = parse_id_database(
        Path::new("/etc/passwd"),
        EntryKind::User,
        "root:x:0:0::/:\nsvc:x:1946157055:1::/:\n",
    );
    let error = judge_range(&DEFAULT, &users, Path::new("keel.ron")).unwrap_err();
    assert!(
        error.contains("/etc/passwd:2: user svc (uid 1946157055)"),
        "{error}"
    );
    // The last id of the range is hit: the next clear range starts past it.
    assert_eq!(clear_first_id(&DEFAULT, &users), Some(1_946_157_056));
    // Several hits: the first is named, the rest counted.
    let mut entries = users.clone();
    entries.extend(parse_subordinate(
        Path::new("/etc/subgid"),
        EntryKind::SubGids,
        "a:1879048192:10\nb:1879048292:10\n",
    ));
    let error = judge_range(&DEFAULT, &entries, Path::new("keel.ron")).unwrap_err();
    assert!(
        error.contains("user svc") && error.contains("(and 2 more entries)"),
        "{error}"
    );
}

#[test]
fn no_clear_range_says_so() {
    // An entry covering 65536..2^31 leaves no room anywhere.
    let entries = parse_subordinate(
        Path::new("/etc/subuid"),
        EntryKind::SubUids,
        "all:65536:2147418112\n",
    );
    assert_eq!(clear_first_id(&DEFAULT, &entries), None);
    let error = judge_range(&DEFAULT, &entries, Path::new("keel.ron")).unwrap_err();
    assert!(error.contains("No 1024 blocks fit"), "{error}");
    // Room below the configured first id only: found from 65536 up.
    let entries = parse_subordinate(
        Path::new("/etc/subuid"),
        EntryKind::SubUids,
        "high:1879048192:268435456\n",
    );
    assert_eq!(clear_first_id(&DEFAULT, &entries), Some(65536));
}

fn sysctls(max: Option<u64>, clone: Option<u64>, apparmor: Option<u64>) -> UsernsSysctls {
    UsernsSysctls {
        kernel_has_userns: true,
        max_user_namespaces: max,
        unprivileged_userns_clone: clone,
        apparmor_restrict_unprivileged_userns: apparmor,
    }
}

#[test]
fn the_kernels_settings_are_judged() {
    // A usual host: nothing to say.
    assert_eq!(
        judge_userns(&sysctls(Some(96365), None, None), true, 1024),
        Ok(None)
    );
    // Turned off: refused for root too, naming the sysctl.
    let error = judge_userns(&sysctls(Some(0), None, None), true, 1024).unwrap_err();
    assert!(
        error.contains("sysctl user.max_user_namespaces="),
        "{error}"
    );
    assert!(error.contains("user_namespaces: Off"), "{error}");
    // Debian's and AppArmor's switches bind only a daemon without CAP_SYS_ADMIN.
    let debian = sysctls(Some(96365), Some(0), None);
    assert_eq!(judge_userns(&debian, true, 1024), Ok(None));
    let error = judge_userns(&debian, false, 1024).unwrap_err();
    assert!(
        error.contains("kernel.unprivileged_userns_clone=1"),
        "{error}"
    );
    let ubuntu = sysctls(Some(96365), Some(1), Some(1));
    assert_eq!(judge_userns(&ubuntu, true, 1024), Ok(None));
    let error = judge_userns(&ubuntu, false, 1024).unwrap_err();
    assert!(
        error.contains("kernel.apparmor_restrict_unprivileged_userns=0"),
        "{error}"
    );
    assert_eq!(
        judge_userns(&sysctls(Some(96365), Some(1), Some(0)), false, 1024),
        Ok(None)
    );
    // A kernel without user namespaces at all.
    let none = UsernsSysctls::default();
    assert!(judge_userns(&none, true, 1)
        .unwrap_err()
        .contains("CONFIG_USER_NS"));
    // Fewer namespaces allowed than blocks: a warning, not a refusal.
    let warning = judge_userns(&sysctls(Some(100), None, None), true, 1024)
        .unwrap()
        .expect("a warning");
    assert!(
        warning.contains("user.max_user_namespaces is 100"),
        "{warning}"
    );
}

/// A directory of the test's own holding a `proc` tree and the four host files.
struct FakeHost {
    dir: PathBuf,
}

impl FakeHost {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("keel-id-blocks-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("proc/sys/user")).unwrap();
        std::fs::create_dir_all(dir.join("proc/sys/kernel")).unwrap();
        std::fs::create_dir_all(dir.join("proc/self/ns")).unwrap();
        std::fs::write(dir.join("proc/self/ns/user"), "").unwrap();
        std::fs::write(dir.join("proc/sys/user/max_user_namespaces"), "63000\n").unwrap();
        std::fs::write(dir.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        std::fs::write(dir.join("group"), "root:x:0:\n").unwrap();
        FakeHost { dir }
    }

    fn write(&self, path: &str, text: &str) {
        std::fs::write(self.dir.join(path), text).unwrap();
    }

    fn probe(&self, privileged: bool) -> HostProbe {
        HostProbe {
            proc: self.dir.join("proc"),
            files: HostIdFiles {
                subuid: self.dir.join("subuid"),
                subgid: self.dir.join("subgid"),
                passwd: self.dir.join("passwd"),
                group: self.dir.join("group"),
            },
            privileged,
        }
    }
}

impl Drop for FakeHost {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn the_check_at_start_reads_the_files_it_is_given() {
    let host = FakeHost::new("start");
    let on = UserNamespaces::On(DEFAULT);
    let config = Path::new("/var/lib/keel/keel.ron");
    // No /etc/subuid or /etc/subgid (no Podman): nothing overlaps.
    assert_eq!(check_host(&on, &host.probe(true), config), Ok(vec![]));
    // Podman's usual entry, from 100000: clear of the default range.
    host.write("subuid", "alice:100000:65536\n");
    host.write("subgid", "alice:100000:65536\n");
    assert_eq!(check_host(&on, &host.probe(true), config), Ok(vec![]));
    // An entry inside the range: refused with the file and line.
    host.write("subgid", "alice:100000:65536\nbob:1879179264:65536\n");
    let error = check_host(&on, &host.probe(true), config).unwrap_err();
    let subgid = host.dir.join("subgid");
    assert!(
        error.contains(&format!("{}:2: bob's subordinate gids", subgid.display())),
        "{error}"
    );
    assert!(error.contains("first_id: 1879244800"), "{error}");
    // Off: nothing is checked, and what it gives up is said.
    let warnings = check_host(&UserNamespaces::Off, &host.probe(true), config).unwrap();
    assert!(warnings[0].contains("host's root"), "{warnings:?}");
    host.write("subgid", "");
    // The kernel's switches, read from the proc tree.
    host.write("proc/sys/kernel/unprivileged_userns_clone", "0\n");
    assert_eq!(check_host(&on, &host.probe(true), config), Ok(vec![]));
    let error = check_host(&on, &host.probe(false), config).unwrap_err();
    assert!(
        error.contains("kernel.unprivileged_userns_clone"),
        "{error}"
    );
    host.write("proc/sys/user/max_user_namespaces", "0\n");
    let error = check_host(&on, &host.probe(true), config).unwrap_err();
    assert!(error.contains("user.max_user_namespaces is 0"), "{error}");
}

#[test]
fn an_unreadable_host_file_stops_the_check() {
    let host = FakeHost::new("unreadable");
    // A directory where the file should be: it cannot be read, so it cannot be judged.
    std::fs::create_dir(host.dir.join("subuid")).unwrap();
    let error = check_host(
        &UserNamespaces::On(DEFAULT),
        &host.probe(true),
        Path::new("keel.ron"),
    )
    .unwrap_err();
    assert!(
        error.contains("cannot read") && error.contains("subuid"),
        "{error}"
    );
}

#[test]
fn blocks_claimed_elsewhere_on_the_host_are_skipped() {
    let range = IdRange {
        first_id: 0x7000_0000,
        blocks: 4,
    };
    // Another daemon's tasks hold the first two.
    let elsewhere = [block(0x7000_0000), block(0x7001_0000)];
    let mut tried = Vec::new();
    let chosen = choose_block(&range, None, &[block(0x7002_0000)], |b| {
        tried.push(b.first);
        !elsewhere.contains(&b)
    });
    // Not this daemon's other task's block either: the fourth; the third was never tried.
    assert_eq!(chosen, Ok(block(0x7003_0000)));
    assert_eq!(tried, [0x7000_0000, 0x7001_0000, 0x7003_0000]);
    // A kept block claimed elsewhere: the lowest claimable instead.
    let chosen = choose_block(&range, Some(block(0x7001_0000)), &[], |b| {
        !elsewhere.contains(&b)
    });
    assert_eq!(chosen, Ok(block(0x7002_0000)));
    // A kept block still claimable is kept, even with a lower one free.
    let chosen = choose_block(&range, Some(block(0x7003_0000)), &[], |_| true);
    assert_eq!(chosen, Ok(block(0x7003_0000)));
    // Every block held, some by this daemon's tasks, some elsewhere: the message says so.
    let exhausted = choose_block(&range, None, &[block(0x7003_0000)], |b| {
        b.first == 0x7004_0000
    })
    .unwrap_err();
    assert_eq!(exhausted.elsewhere, 3);
    let message = exhausted.to_string();
    assert!(
        message.starts_with("all 4 blocks of host ids are held (3 by other keel daemons"),
        "{message}"
    );
    assert!(message.contains("a range of its own"), "{message}");
}
