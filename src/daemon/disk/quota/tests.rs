use super::*;

const M: u64 = 1 << 20;

#[test]
fn a_task_keeps_its_project_id() {
    assert_eq!(
        project_for(Some(PROJECT_BASE + 7), []),
        Some(PROJECT_BASE + 7)
    );
    // Even when another record (wrongly) holds it too: its own is what it has on disk.
    assert_eq!(
        project_for(Some(PROJECT_BASE + 7), [PROJECT_BASE + 7]),
        Some(PROJECT_BASE + 7)
    );
}

#[test]
fn a_new_id_is_the_lowest_free_one_never_another_tasks() {
    assert_eq!(project_for(None, []), Some(PROJECT_BASE));
    assert_eq!(
        project_for(None, [PROJECT_BASE, PROJECT_BASE + 1]),
        Some(PROJECT_BASE + 2)
    );
    // A hole (a removed task's id) is reused.
    assert_eq!(
        project_for(None, [PROJECT_BASE + 2, PROJECT_BASE, PROJECT_BASE]),
        Some(PROJECT_BASE + 1)
    );
    // Ids outside keel's range are the operator's: neither kept nor counted.
    assert_eq!(project_for(Some(5), [5, 6]), Some(PROJECT_BASE));
}

#[test]
fn ids_survive_a_restart_as_the_records_hold_them() {
    // A daemon restart: the records are read back, each task keeps its id, a new task gets
    // one none holds.
    let records = [Some(PROJECT_BASE), Some(PROJECT_BASE + 1), None];
    let taken: Vec<u32> = records.iter().flatten().copied().collect();
    let after: Vec<Option<u32>> = records
        .iter()
        .map(|own| project_for(*own, taken.iter().copied()))
        .collect();
    assert_eq!(
        after,
        [
            Some(PROJECT_BASE),
            Some(PROJECT_BASE + 1),
            Some(PROJECT_BASE + 2)
        ]
    );
}

#[test]
fn the_range_can_run_out() {
    let all = PROJECT_BASE..PROJECT_BASE + PROJECT_SLOTS;
    assert_eq!(project_for(None, all), None);
}

#[test]
fn the_hard_limit_is_the_budget_the_soft_nine_tenths() {
    assert_eq!(limits(20 * M), (20 * M, 18 * M));
}

const ENFORCED: ProjectQuotas = ProjectQuotas {
    accounted: true,
    enforced: true,
};

#[test]
fn kernel_quotas_need_project_quotas_and_cap_sys_resource() {
    let on = Probe::of(Ok(ENFORCED), Ok(1 << 24));
    assert_eq!(decide(Some(&on)), Enforcement::Kernel);
    assert_eq!(decide(Some(&on)).to_string(), "kernel quotas");
    let no_cap = Probe::of(Ok(ENFORCED), Ok(!(1 << 24)));
    let why = decide(Some(&no_cap)).to_string();
    assert!(
        why.starts_with("measured (") && why.contains("CAP_SYS_RESOURCE"),
        "{why}"
    );
    let caps_unknown = Probe::of(
        Ok(ENFORCED),
        Err(io::Error::from_raw_os_error(libc::EINVAL)),
    );
    assert!(matches!(
        decide(Some(&caps_unknown)),
        Enforcement::Measured(_)
    ));
}

#[test]
fn each_missing_piece_has_its_reason() {
    let off = |errno| {
        decide(Some(&Probe::of(
            Err(io::Error::from_raw_os_error(errno)),
            Ok(!0),
        )))
    };
    let said = |e: Enforcement| match e {
        Enforcement::Measured(why) => why,
        Enforcement::Kernel => panic!("kernel quotas without quotas"),
    };
    assert!(said(off(libc::ENOSYS)).contains("CONFIG_QUOTA"));
    let counted = ProjectQuotas {
        accounted: true,
        enforced: false,
    };
    let counted = decide(Some(&Probe::of(Ok(counted), Ok(!0))));
    assert!(said(counted).contains("does not enforce them: mount it with prjquota"));
    let none = ProjectQuotas {
        accounted: false,
        enforced: false,
    };
    let none = decide(Some(&Probe::of(Ok(none), Ok(!0))));
    assert!(said(none).contains("tune2fs -O project,quota"));
    assert!(said(off(libc::ESRCH)).contains("mount it with prjquota"));
    assert!(said(off(libc::EPERM)).contains("CAP_SYS_RESOURCE is missing"));
    assert!(said(off(libc::ENOTTY)).contains("ext4 or xfs"));
    assert!(said(decide(None)).contains("not looked at yet"));
    let unreadable = Probe::Unreadable("EACCES".to_string());
    assert!(said(decide(Some(&unreadable))).contains("cannot open the state directory"));
}

#[test]
fn past_quota_only_beyond_the_margin_above_the_hard_limit() {
    assert!(!past_quota(0, 0));
    assert!(!past_quota(16 * M, 16 * M));
    assert!(!past_quota(17 * M, 16 * M)); // within 1 MiB: a write in flight
    assert!(past_quota(17 * M + 1, 16 * M));
    assert!(past_quota(40 * M, 16 * M));
}

#[test]
fn at_quota_within_a_margin_of_the_hard_limit() {
    assert!(!at_quota(0, 0)); // no limit
    assert!(!at_quota(10 * M, 16 * M));
    assert!(at_quota(16 * M - 4096, 16 * M));
    assert!(at_quota(16 * M, 16 * M));
    assert!(!at_quota(19 * M, 20 * G));
    const G: u64 = 1 << 30;
    assert!(at_quota(20 * G - M / 2, 20 * G));
}
