use super::*;

fn task(name: &str) -> Owner {
    Owner::Task(name.to_string())
}

#[test]
fn a_task_runs_one_job_at_a_time_in_the_order_submitted() {
    let mut queue = JobQueue::default();
    queue.submit(task("a"), "harvest 1");
    queue.submit(task("a"), "prepare 2");
    let (_, owner, first) = queue.next(4).unwrap();
    assert_eq!((owner.clone(), first), (task("a"), "harvest 1"));
    // Its next job waits for the first, whatever the free workers.
    assert!(queue.next(4).is_none());
    queue.finished(&owner);
    assert_eq!(queue.next(4).unwrap().2, "prepare 2");
    assert!(queue.next(4).is_none());
}

#[test]
fn owners_run_side_by_side_up_to_the_worker_cap_oldest_first() {
    let mut queue = JobQueue::default();
    queue.submit(task("b"), "b1");
    queue.submit(task("c"), "c1");
    queue.submit(task("a"), "a1");
    assert_eq!(queue.next(2).unwrap().2, "b1");
    assert_eq!(queue.next(2).unwrap().2, "c1");
    // Two workers busy: a1 waits for one of them.
    assert!(queue.next(2).is_none());
    queue.finished(&task("c"));
    assert_eq!(queue.next(2).unwrap().2, "a1");
    assert!(!queue.is_idle());
    queue.finished(&task("a"));
    queue.finished(&task("b"));
    assert!(queue.is_idle());
}

#[test]
fn the_daemons_jobs_run_alone_and_hold_back_what_came_after_them() {
    let mut queue = JobQueue::default();
    queue.submit(task("a"), "a1");
    queue.submit(Owner::Daemon, "prune");
    queue.submit(task("b"), "b1");
    assert_eq!(queue.next(4).unwrap().2, "a1");
    // The prune waits for a1, and b1 (submitted after it) waits for the prune.
    assert!(queue.next(4).is_none());
    queue.finished(&task("a"));
    assert_eq!(queue.next(4).unwrap().2, "prune");
    assert!(queue.next(4).is_none());
    queue.finished(&Owner::Daemon);
    assert_eq!(queue.next(4).unwrap().2, "b1");
}

#[test]
fn unwanted_jobs_leave_the_queue_and_the_rest_keep_their_order() {
    let mut queue = JobQueue::default();
    let first = queue.submit(task("a"), ("prepare", 1));
    let second = queue.submit(task("a"), ("harvest", 1));
    queue.submit(task("a"), ("prepare", 2));
    assert!(first < second);
    let dropped =
        queue.drain_unwanted(|_, (kind, generation)| *kind == "prepare" && *generation < 2);
    assert_eq!(dropped, [("prepare", 1)]);
    assert_eq!(queue.queued().count(), 2);
    assert_eq!(queue.next(1).unwrap().2, ("harvest", 1));
}

#[test]
fn a_result_of_an_older_generation_is_fenced() {
    assert!(applies(7, Some(7)));
    assert!(!applies(6, Some(7)));
    // The task is gone.
    assert!(!applies(7, None));
}
