//! The scheduler: which queued tasks start now. A pure function of the queue and what runs.
//!
//! Order is priority (higher first), then submission time. Resource reservations and the
//! daemon's capacity come with cgroup slices; until then `max_running` is the only limit.

/// A queued task as the scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub unit: String,
    pub priority: i32,
    pub submitted_ms: u64,
}

/// The queued tasks to start now, in start order.
pub fn pick_startable(
    queued: &[Candidate],
    running: usize,
    max_running: Option<usize>,
) -> Vec<String> {
    let mut order: Vec<&Candidate> = queued.iter().collect();
    order.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.submitted_ms.cmp(&b.submitted_ms))
            .then(a.unit.cmp(&b.unit))
    });
    let free = match max_running {
        Some(max) => max.saturating_sub(running),
        None => usize::MAX,
    };
    order
        .into_iter()
        .take(free)
        .map(|c| c.unit.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(unit: &str, priority: i32, submitted_ms: u64) -> Candidate {
        Candidate {
            unit: unit.into(),
            priority,
            submitted_ms,
        }
    }

    #[test]
    fn priority_then_submission_order() {
        let queued = [c("late", 0, 20), c("early", 0, 10), c("urgent", 5, 30)];
        assert_eq!(
            pick_startable(&queued, 0, None),
            ["urgent", "early", "late"]
        );
    }

    #[test]
    fn max_running_limits_starts() {
        let queued = [c("a", 0, 1), c("b", 0, 2), c("c", 0, 3)];
        assert_eq!(pick_startable(&queued, 1, Some(2)), ["a"]);
        assert!(pick_startable(&queued, 2, Some(2)).is_empty());
        assert!(pick_startable(&queued, 5, Some(2)).is_empty());
    }
}
