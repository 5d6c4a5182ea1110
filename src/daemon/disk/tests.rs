use super::*;

const M: u64 = 1 << 20;
const G: u64 = 1 << 30;

fn space(free: u64, total: u64) -> Option<FsSpace> {
    Some(FsSpace { free, total })
}

#[test]
fn starts_wait_below_the_reserve_with_the_figures() {
    let fresh = Duration::from_secs(1);
    assert_eq!(
        reserve_hold(space(180 * M, 100 * G), fresh, Some(G)).as_deref(),
        Some("state filesystem: 180M free < disk_reserve 1G")
    );
    assert_eq!(reserve_hold(space(G, 100 * G), fresh, Some(G)), None);
    assert_eq!(reserve_hold(space(2 * G, 100 * G), fresh, Some(G)), None);
    // A reserve of 0: never held.
    assert_eq!(reserve_hold(space(0, 100 * G), fresh, Some(0)), None);
}

#[test]
fn the_default_reserve_is_a_gigabyte_or_a_twentieth_of_a_small_filesystem() {
    let fresh = Duration::ZERO;
    assert!(reserve_hold(space(G - 1, 100 * G), fresh, None).is_some());
    assert_eq!(reserve_hold(space(G, 100 * G), fresh, None), None);
    // 272 MiB: 13.6 MiB kept.
    let small = 272 * M;
    assert!(reserve_hold(space(13 * M, small), fresh, None).is_some());
    assert_eq!(reserve_hold(space(14 * M, small), fresh, None), None);
}

#[test]
fn no_figure_holds_nothing_and_a_stale_one_holds_everything() {
    assert_eq!(reserve_hold(None, Duration::from_secs(3600), Some(G)), None);
    let stale = reserve_hold(space(100 * G, 200 * G), STALE_AFTER, Some(G)).unwrap();
    assert!(stale.contains("statvfs has not answered"), "{stale}");
    assert_eq!(
        reserve_hold(
            space(100 * G, 200 * G),
            STALE_AFTER - Duration::from_millis(1),
            Some(G)
        ),
        None
    );
}

#[test]
fn a_budget_is_resources_disk_or_half_the_filesystem() {
    assert_eq!(budget_of(Some(20 * G), 100 * G), 20 * G);
    assert_eq!(budget_of(None, 100 * G), 50 * G);
    assert_eq!(budget_of(Some(200 * G), 100 * G), 200 * G);
}

#[test]
fn over_budget_says_by_how_much_and_whose_budget() {
    assert_eq!(over_budget(20 * G, 20 * G, true), None);
    assert_eq!(
        over_budget(20 * G + 1, 20 * G, true).as_deref(),
        Some("wrote 20.1G on the state filesystem, over resources.disk (20G)")
    );
    let default = over_budget(60 * G, 50 * G, false).unwrap();
    assert!(
        default.contains("the default resources.disk, half the state filesystem"),
        "{default}"
    );
}

#[test]
fn the_monitor_measures_the_state_filesystem_and_the_wanted_directories() {
    let dir = std::env::temp_dir().join(format!("keel-disk-monitor-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("task")).unwrap();
    std::fs::write(dir.join("task/file"), vec![7u8; 256 << 10]).unwrap();
    let monitor = DiskMonitor::start(&dir);
    let (space, age) = monitor.space();
    let space = space.unwrap();
    assert!(space.total > 0 && space.free <= space.total, "{space:?}");
    assert!(age < STALE_AFTER);
    monitor.measure(BTreeMap::from([("t".to_string(), dir.join("task"))]));
    let deadline = Instant::now() + Duration::from_secs(60);
    let written = loop {
        if let Some(written) = monitor.written("t") {
            break written;
        }
        assert!(Instant::now() < deadline, "never measured");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(written.0 >= 256 << 10, "{written:?}");
    // Forgotten once no longer wanted.
    monitor.measure(BTreeMap::new());
    assert_eq!(monitor.written("t"), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
