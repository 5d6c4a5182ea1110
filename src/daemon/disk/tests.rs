use super::*;

const M: u64 = 1 << 20;
const G: u64 = 1 << 30;

fn space(free: u64, total: u64) -> Option<FsSpace> {
    Some(FsSpace { free, total })
}

#[test]
fn starts_wait_below_the_reserve_with_the_figures() {
    assert_eq!(
        reserve_hold(space(180 * M, 100 * G), Some(G)).as_deref(),
        Some("state filesystem: 180M free < disk_reserve 1G")
    );
    assert_eq!(reserve_hold(space(G, 100 * G), Some(G)), None);
    assert_eq!(reserve_hold(space(2 * G, 100 * G), Some(G)), None);
    // A reserve of 0: never held.
    assert_eq!(reserve_hold(space(0, 100 * G), Some(0)), None);
}

#[test]
fn the_default_reserve_is_a_gigabyte_or_a_twentieth_of_a_small_filesystem() {
    assert!(reserve_hold(space(G - 1, 100 * G), None).is_some());
    assert_eq!(reserve_hold(space(G, 100 * G), None), None);
    // 272 MiB: 13.6 MiB kept.
    let small = 272 * M;
    assert!(reserve_hold(space(13 * M, small), None).is_some());
    assert_eq!(reserve_hold(space(14 * M, small), None), None);
}

#[test]
fn no_figure_holds_nothing() {
    assert_eq!(reserve_hold(None, Some(G)), None);
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
fn a_look_reads_the_filesystem_of_a_path() {
    let mut look = DiskLook::default();
    look.look(&std::env::temp_dir());
    let space = look.space.unwrap();
    assert!(space.total > 0 && space.free <= space.total, "{space:?}");
    look.look(std::path::Path::new("/nonexistent/keel-disk-look"));
    assert_eq!(look.space, None);
}
