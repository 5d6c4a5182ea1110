//! The restart policy: what happens after an attempt ends. A pure function of the unit's
//! settings, the task's history and the time — unit-tested without a kernel.

use super::record::{Intent, LastExit};
use crate::unit::{Backoff, RestartLimit, RestartPolicy};
use std::time::Duration;

/// The part of a task's record the policy reads and updates.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct History {
    /// Unix ms of restarts counted against the limit.
    pub restarts: Vec<u64>,
    pub consecutive_failures: u32,
}

/// What to do with a task whose attempt just ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Succeeded,
    Failed {
        reason: String,
    },
    /// Start again after `delay` (zero for a user's restart).
    Restart {
        delay: Duration,
    },
    Stopped,
    Remove,
    /// Stopped for a daemon shutdown: queued again, resumed at the next start.
    Interrupted,
}

/// The unit settings the policy depends on.
pub struct Policy<'a> {
    pub restart: RestartPolicy,
    pub backoff: &'a Backoff,
    pub limit: &'a RestartLimit,
}

/// Decide after an exit. `ran_for` is how long the attempt ran; `jitter` is a number in
/// [0, 1) that spreads restarts of many tasks failing together (±10% of the delay).
pub fn decide(
    policy: &Policy<'_>,
    history: &History,
    intent: Intent,
    exit: LastExit,
    ran_for: Duration,
    now_ms: u64,
    jitter: f64,
) -> (Decision, History) {
    match intent {
        Intent::Stop => return (Decision::Stopped, history.clone()),
        Intent::Remove | Intent::Forget => return (Decision::Remove, history.clone()),
        Intent::Interrupt => return (Decision::Interrupted, history.clone()),
        Intent::Restart => {
            return (
                Decision::Restart {
                    delay: Duration::ZERO,
                },
                History::default(),
            )
        }
        Intent::None => {}
    }
    let wants_restart = match policy.restart {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => !exit.success(),
        RestartPolicy::Never => false,
    };
    if !wants_restart {
        let decision = if exit.success() {
            Decision::Succeeded
        } else {
            Decision::Failed {
                reason: format!("exited with {exit}; restart policy {:?}", policy.restart),
            }
        };
        return (decision, history.clone());
    }

    let mut next = history.clone();
    // A long healthy run forgives earlier failures: the backoff starts over, and the restarts
    // before it no longer count against the limit (an `Always` agent that works for hours
    // between exits is not crash-looping).
    if ran_for >= policy.backoff.reset_after.0 {
        next.consecutive_failures = 0;
        next.restarts.clear();
    }
    let window_ms = policy.limit.within.0.as_millis() as u64;
    next.restarts
        .retain(|&at| now_ms.saturating_sub(at) < window_ms);
    if next.restarts.len() as u64 >= u64::from(policy.limit.count) {
        let reason = format!(
            "restart limit reached: {} restarts within {}; last exit {exit}",
            next.restarts.len(),
            crate::fmt::duration(policy.limit.within.0)
        );
        return (Decision::Failed { reason }, next);
    }
    next.restarts.push(now_ms);
    let delay = backoff_delay(policy.backoff, next.consecutive_failures, jitter);
    next.consecutive_failures = next.consecutive_failures.saturating_add(1);
    (Decision::Restart { delay }, next)
}

/// `initial × factor^failures`, capped at `max`, spread by ±10% (never beyond `max`).
pub fn backoff_delay(backoff: &Backoff, failures: u32, jitter: f64) -> Duration {
    let initial = backoff.initial.0.as_secs_f64();
    let max = backoff.max.0.as_secs_f64();
    let exponent = failures.min(1_000) as i32;
    let base = (initial * backoff.factor.powi(exponent)).min(max);
    let spread = 1.0 + 0.2 * (jitter.clamp(0.0, 1.0) - 0.5);
    Duration::from_secs_f64((base * spread).min(max).max(0.0))
}

#[cfg(test)]
mod tests;
