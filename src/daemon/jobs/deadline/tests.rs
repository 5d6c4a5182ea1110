use super::*;

const S: Duration = Duration::from_secs(1);

#[test]
fn a_job_within_its_deadline_is_looked_at_again_when_it_would_pass_it() {
    let start = Instant::now();
    let fixed = Deadline {
        total: 10 * S,
        idle: None,
    };
    assert_eq!(
        fixed.judge(start, None, start + 3 * S),
        Verdict::Within {
            recheck_at: start + 10 * S
        }
    );
    assert_eq!(
        fixed.judge(start, Some(start + 9 * S), start + 10 * S),
        Verdict::Past(Overrun::Total(10 * S))
    );
}

#[test]
fn a_build_that_advances_goes_on_and_one_that_stalls_is_abandoned() {
    let start = Instant::now();
    let build = Deadline {
        total: 100 * S,
        idle: Some(5 * S),
    };
    // No progress reported yet: only the cap applies.
    assert_eq!(
        build.judge(start, None, start + 30 * S),
        Verdict::Within {
            recheck_at: start + 100 * S
        }
    );
    // Advancing: rechecked when the idle window would close.
    assert_eq!(
        build.judge(start, Some(start + 30 * S), start + 32 * S),
        Verdict::Within {
            recheck_at: start + 35 * S
        }
    );
    assert_eq!(
        build.judge(start, Some(start + 30 * S), start + 35 * S),
        Verdict::Past(Overrun::Idle(5 * S))
    );
    // Near the cap, the cap comes first.
    assert_eq!(
        build.judge(start, Some(start + 98 * S), start + 99 * S),
        Verdict::Within {
            recheck_at: start + 100 * S
        }
    );
    assert_eq!(
        build.judge(start, Some(start + 99 * S), start + 100 * S),
        Verdict::Past(Overrun::Total(100 * S))
    );
}

#[test]
fn overruns_say_what_was_passed() {
    assert_eq!(
        Overrun::Total(Duration::from_secs(600)).describe(),
        format!(
            "took longer than {}",
            crate::fmt::duration_precise(Duration::from_secs(600))
        )
    );
    assert!(Overrun::Idle(2 * S)
        .describe()
        .starts_with("made no progress for"));
}
