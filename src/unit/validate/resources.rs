//! The rules of `resources` (see `unit::resources`), each problem at its field: requests are
//! positive, a limit is never below its request.

use super::{FieldPath, Problem};
use crate::unit::values::format_size;
use crate::unit::{Resources, Size, MIN_DISK, MIN_MEMORY};

/// Every problem of `resources`, in field order.
pub(super) fn resource_problems(resources: &Resources) -> Vec<Problem> {
    let at = FieldPath::default().field("resources");
    let mut problems = Vec::new();
    let mut add = |path: FieldPath, also: Vec<FieldPath>, message: String| {
        problems.push(Problem {
            path,
            message,
            also,
        })
    };
    let cpu_valid = resources.cpu.is_finite() && resources.cpu > 0.0;
    if !cpu_valid {
        add(
            at.field("cpu"),
            Vec::new(),
            format!(
                "{} is not a positive number of CPU cores: use e.g. 0.25 or 2.0",
                resources.cpu
            ),
        );
    }
    if resources.memory.0 < MIN_MEMORY {
        add(
            at.field("memory"),
            Vec::new(),
            format!(
                "\"{}\" is below the minimum of \"4M\": use e.g. \"512M\" or \"4G\"",
                format_size(resources.memory.0)
            ),
        );
    }
    if resources.pids == 0 {
        add(
            at.field("pids"),
            Vec::new(),
            "is 0: the agent itself is a process; use e.g. 1024".to_string(),
        );
    }
    if let Some(limit) = resources.cpu_limit {
        if !(limit.is_finite() && limit > 0.0) {
            add(
                at.field("cpu_limit"),
                Vec::new(),
                format!(
                    "Some({limit}) is not a positive number of CPU cores: use e.g. Some(4.0), or None for no cap"
                ),
            );
        } else if cpu_valid && limit < resources.cpu {
            add(
                at.field("cpu_limit"),
                vec![at.field("cpu")],
                format!(
                    "Some({limit}) is below the request (cpu: {}): the task could never use what \
                     it reserves; raise cpu_limit, lower cpu, or write None for no cap",
                    resources.cpu
                ),
            );
        }
    }
    if let Some(limit) = resources.memory_limit {
        if limit.0 < MIN_MEMORY {
            add(
                at.field("memory_limit"),
                Vec::new(),
                format!(
                    "Some(\"{}\") is below the minimum of \"4M\": use e.g. Some(\"4G\"), or None \
                     for the default",
                    format_size(limit.0)
                ),
            );
        } else if limit < resources.memory {
            add(
                at.field("memory_limit"),
                vec![at.field("memory")],
                format!(
                    "Some(\"{}\") is below the request (memory: \"{}\"): the task would be \
                     killed before it used what it reserves; raise memory_limit or lower memory",
                    format_size(limit.0),
                    format_size(resources.memory.0)
                ),
            );
        }
    }
    if let Some(Size(disk)) = resources.disk {
        if disk < MIN_DISK {
            add(
                at.field("disk"),
                Vec::new(),
                format!(
                    "\"{}\" is below the minimum of \"{}\" (a checkout alone takes more): use \
                     e.g. \"20G\", or leave it out for half the state filesystem",
                    format_size(disk),
                    format_size(MIN_DISK)
                ),
            );
        }
    }
    problems
}
