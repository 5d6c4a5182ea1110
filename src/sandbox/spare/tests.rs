use super::fits;
use crate::sys::pidns::NamespaceId;

fn ns(ino: u64) -> Option<NamespaceId> {
    Some(NamespaceId { dev: 4, ino })
}

#[test]
fn a_spare_serves_only_the_task_whose_user_namespace_owns_its_pid_namespace() {
    assert!(fits(ns(4026532177), ns(4026532177)));
    assert!(!fits(ns(4026532177), ns(4026532178)), "another task's");
    // The same inode on another nsfs device is another namespace.
    let other_dev = Some(NamespaceId {
        dev: 5,
        ino: 4026532177,
    });
    assert!(!fits(ns(4026532177), other_dev));
}

#[test]
fn a_spare_of_the_hosts_pid_namespace_serves_only_tasks_without_a_user_namespace() {
    assert!(fits(None, None));
    assert!(
        !fits(None, ns(4026532177)),
        "a task with one on a host-owned PID namespace"
    );
    assert!(
        !fits(ns(4026532177), None),
        "a task without one in another's namespaces"
    );
}
