use super::*;

const S: Ms = 1_000;

/// heartbeat_timeout 10 s, progress_timeout 60 s, grace 5 s, every signal counted.
fn settings() -> Settings {
    Settings {
        heartbeat_timeout: 10 * S,
        progress_timeout: 60 * S,
        startup_grace: 5 * S,
        heartbeat: true,
        output: true,
        cpu: true,
    }
}

/// An attempt started at 100 s, watched from its start.
fn started() -> Evidence {
    Evidence {
        started: 100 * S,
        watched_since: 100 * S,
        ..Evidence::default()
    }
}

fn verdict_at(s: &Settings, e: &Evidence, now: Ms) -> Verdict {
    judge(s, e, now).verdict
}

#[test]
fn a_silent_task_is_running_through_its_grace_and_stalled_a_timeout_after_it() {
    let (s, e) = (settings(), started());
    // Stalled at start + grace + timeout = 115 s, to the millisecond.
    let j = judge(&s, &e, 100 * S);
    assert_eq!(j.verdict, Verdict::Running);
    assert_eq!(j.next_check, Some(115 * S));
    assert_eq!(j.stall_at, 115 * S);
    assert_eq!(verdict_at(&s, &e, 115 * S - 1), Verdict::Running);
    assert_eq!(verdict_at(&s, &e, 115 * S), Verdict::Stalled);
}

#[test]
fn a_fresh_heartbeat_keeps_it_running_and_moves_the_deadline() {
    let s = settings();
    let e = Evidence {
        heartbeat: Some(130 * S),
        ..started()
    };
    let j = judge(&s, &e, 135 * S);
    assert_eq!(j.verdict, Verdict::Running);
    assert_eq!(j.stall_at, 140 * S);
    assert_eq!(verdict_at(&s, &e, 140 * S), Verdict::Stalled);
}

#[test]
fn evidence_during_the_grace_does_not_shorten_it() {
    let s = settings();
    let e = Evidence {
        output: Some(101 * S),
        ..started()
    };
    // The grace ends at 105 s; the output at 101 s does not pull the deadline before 115 s.
    assert_eq!(judge(&s, &e, 102 * S).stall_at, 115 * S);
}

#[test]
fn each_signal_counts_only_when_listed() {
    let at = 130 * S;
    let now = 135 * S;
    let only = |heartbeat, output, cpu| Settings {
        heartbeat,
        output,
        cpu,
        ..settings()
    };
    let cases = [
        (
            Evidence {
                heartbeat: Some(at),
                ..started()
            },
            only(true, false, false),
            only(false, true, true),
        ),
        (
            Evidence {
                output: Some(at),
                ..started()
            },
            only(false, true, false),
            only(true, false, true),
        ),
        (
            Evidence {
                cpu: Some(at),
                ..started()
            },
            only(false, false, true),
            only(true, true, false),
        ),
    ];
    for (evidence, counted, not_counted) in cases {
        assert_eq!(verdict_at(&counted, &evidence, now), Verdict::Running);
        assert_eq!(
            verdict_at(&not_counted, &evidence, now),
            Verdict::Stalled,
            "{evidence:?} must not count under {not_counted:?}"
        );
    }
}

#[test]
fn the_freshest_counted_signal_decides() {
    let s = settings();
    let e = Evidence {
        heartbeat: Some(110 * S),
        output: Some(120 * S),
        cpu: Some(125 * S),
        ..started()
    };
    assert_eq!(judge(&s, &e, 126 * S).stall_at, 135 * S);
    assert_eq!(last_activity(&s, &e), Some((125 * S, Activity::Cpu)));
    let no_cpu = Settings {
        cpu: false,
        ..settings()
    };
    assert_eq!(judge(&no_cpu, &e, 126 * S).stall_at, 130 * S);
    assert_eq!(
        last_activity(&no_cpu, &e),
        Some((120 * S, Activity::Output))
    );
}

#[test]
fn heartbeats_with_unchanged_content_end_in_no_progress() {
    let s = settings();
    // Heartbeats every second, content last changed at 120 s.
    let at = |now: Ms| Evidence {
        heartbeat: Some(now - S),
        progress: Some(120 * S),
        ..started()
    };
    let j = judge(&s, &at(150 * S), 150 * S);
    assert_eq!(j.verdict, Verdict::Running);
    assert_eq!(j.no_progress_at, Some(180 * S));
    assert_eq!(
        j.next_check,
        Some(159 * S),
        "the stall deadline comes first"
    );
    assert_eq!(verdict_at(&s, &at(180 * S), 180 * S - 1), Verdict::Running);
    let j = judge(&s, &at(180 * S), 180 * S);
    assert_eq!(j.verdict, Verdict::NoProgress);
    assert_eq!(j.next_check, Some(189 * S), "it can still stall");
}

#[test]
fn a_task_that_never_changed_its_content_is_judged_from_the_grace() {
    let s = settings();
    let e = Evidence {
        heartbeat: Some(160 * S),
        ..started()
    };
    // Grace ends at 105 s; no change since: no progress at 165 s.
    assert_eq!(judge(&s, &e, 161 * S).no_progress_at, Some(165 * S));
    assert_eq!(verdict_at(&s, &e, 165 * S), Verdict::NoProgress);
}

#[test]
fn progress_is_not_judged_for_agents_that_never_wrote_the_file() {
    let s = settings();
    // Output only, for hours: an agent that knows nothing of keel.
    let e = Evidence {
        output: Some(9_999 * S),
        ..started()
    };
    let j = judge(&s, &e, 10_000 * S);
    assert_eq!(j.verdict, Verdict::Running);
    assert_eq!(j.no_progress_at, None);
    assert_eq!(j.next_check, Some(10_009 * S));
}

#[test]
fn progress_is_not_judged_when_heartbeats_do_not_count() {
    let s = Settings {
        heartbeat: false,
        ..settings()
    };
    let e = Evidence {
        heartbeat: Some(900 * S),
        output: Some(999 * S),
        ..started()
    };
    assert_eq!(judge(&s, &e, 1_000 * S).verdict, Verdict::Running);
    assert_eq!(judge(&s, &e, 1_000 * S).no_progress_at, None);
}

#[test]
fn stalled_wins_over_no_progress() {
    let s = settings();
    let e = Evidence {
        heartbeat: Some(200 * S),
        progress: Some(110 * S),
        ..started()
    };
    assert_eq!(verdict_at(&s, &e, 209 * S), Verdict::NoProgress);
    assert_eq!(verdict_at(&s, &e, 210 * S), Verdict::Stalled);
}

#[test]
fn a_new_heartbeat_or_change_takes_the_verdict_back() {
    let s = settings();
    let stalled = Evidence {
        heartbeat: Some(110 * S),
        progress: Some(110 * S),
        ..started()
    };
    assert_eq!(verdict_at(&s, &stalled, 300 * S), Verdict::Stalled);
    let heartbeat = Evidence {
        heartbeat: Some(300 * S),
        ..stalled
    };
    assert_eq!(verdict_at(&s, &heartbeat, 300 * S), Verdict::NoProgress);
    let progress = Evidence {
        progress: Some(300 * S),
        ..heartbeat
    };
    assert_eq!(verdict_at(&s, &progress, 300 * S), Verdict::Running);
}

#[test]
fn a_stalled_task_is_rechecked_only_for_sampled_evidence() {
    let e = started();
    let all = settings();
    assert_eq!(judge(&all, &e, 200 * S).next_check, Some(210 * S));
    let heartbeat_only = Settings {
        output: false,
        cpu: false,
        ..settings()
    };
    assert_eq!(
        judge(&heartbeat_only, &e, 200 * S).next_check,
        None,
        "heartbeats are pushed: nothing to look at"
    );
    let short = Settings {
        heartbeat_timeout: 100,
        ..settings()
    };
    assert_eq!(judge(&short, &e, 200 * S).next_check, Some(201 * S));
    let long = Settings {
        heartbeat_timeout: 3_600 * S,
        ..settings()
    };
    assert_eq!(judge(&long, &e, 9_000 * S).next_check, Some(9_060 * S));
}

#[test]
fn an_adopted_attempt_gets_one_timeout_from_the_adoption_and_no_second_grace() {
    let s = settings();
    // Started at 100 s (grace over at 105 s), adopted at 1000 s, last heartbeat at 500 s.
    let e = Evidence {
        watched_since: 1_000 * S,
        heartbeat: Some(500 * S),
        ..started()
    };
    let j = judge(&s, &e, 1_000 * S);
    assert_eq!(j.verdict, Verdict::Running);
    assert_eq!(
        j.stall_at,
        1_010 * S,
        "not 1005 + 10 (grace again), not 510"
    );
    assert_eq!(
        j.no_progress_at,
        Some(1_060 * S),
        "the progress clock restarts"
    );
    // Adopted during its grace: the grace still runs out when it would have.
    let early = Evidence {
        watched_since: 102 * S,
        ..started()
    };
    assert_eq!(judge(&s, &early, 102 * S).stall_at, 115 * S);
}

#[test]
fn the_verdict_holds_until_next_check_and_changes_there() {
    // A sweep over many evidence sets: the verdict is constant on [now, next_check) and,
    // for a running task, different at next_check. (An LCG: no RNG dependency.)
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = |bound: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % bound
    };
    for _ in 0..2_000 {
        let s = Settings {
            heartbeat_timeout: 1 + next(20 * S),
            progress_timeout: 1 + next(60 * S),
            startup_grace: next(10 * S),
            heartbeat: next(2) == 0,
            output: next(2) == 0,
            cpu: next(2) == 0,
        };
        let started = next(10 * S);
        let watched_since = started + next(2) * next(30 * S);
        let mut seen = [None; 3];
        for slot in &mut seen {
            if next(3) > 0 {
                *slot = Some(started + next(60 * S));
            }
        }
        let [heartbeat, output, cpu] = seen;
        // Content changes are heartbeats too: at or before the last one.
        let progress = match heartbeat {
            Some(h) if next(2) == 0 => Some(h.saturating_sub(next(h + 1))),
            _ => None,
        };
        let e = Evidence {
            started,
            watched_since,
            heartbeat,
            progress,
            output,
            cpu,
        };
        let now = started + next(100 * S);
        let j = judge(&s, &e, now);
        let Some(at) = j.next_check else {
            assert_eq!(j.verdict, Verdict::Stalled);
            continue;
        };
        assert!(at > now, "{s:?} {e:?} {now}: next check {at} not after now");
        for probe in [now, (now + at) / 2, at - 1] {
            assert_eq!(
                verdict_at(&s, &e, probe),
                j.verdict,
                "{s:?} {e:?} at {probe}"
            );
        }
        if j.verdict != Verdict::Stalled {
            assert_ne!(verdict_at(&s, &e, at), j.verdict, "{s:?} {e:?} at {at}");
        }
    }
}

#[test]
fn cpu_counts_from_two_percent_of_a_core() {
    // 1 s interval: 20 ms of CPU is busy, 19 ms is not (a shell forking `sleep`).
    assert!(cpu_busy(20_000, 1_000));
    assert!(!cpu_busy(19_999, 1_000));
    assert!(cpu_busy(500_000, 1_000));
    assert!(!cpu_busy(0, 1_000));
    assert!(!cpu_busy(0, 0));
    // Too short to tell: 10 ms in 50 ms is one scheduler tick, not a trend.
    assert!(!cpu_busy(10_000, 50));
    assert!(cpu_busy(2_000, CPU_MIN_INTERVAL));
}

#[test]
fn last_activity_tells_a_change_from_a_heartbeat() {
    let s = settings();
    let e = Evidence {
        heartbeat: Some(130 * S),
        progress: Some(130 * S),
        ..started()
    };
    assert_eq!(last_activity(&s, &e), Some((130 * S, Activity::Progress)));
    let e = Evidence {
        progress: Some(120 * S),
        ..e
    };
    assert_eq!(last_activity(&s, &e), Some((130 * S, Activity::Heartbeat)));
    let tie = Evidence {
        output: Some(130 * S),
        cpu: Some(130 * S),
        ..e
    };
    assert_eq!(
        last_activity(&s, &tie),
        Some((130 * S, Activity::Heartbeat))
    );
    assert_eq!(last_activity(&s, &started()), None);
}

#[test]
fn descriptions_name_the_counted_signals_and_the_last_evidence() {
    let s = settings();
    let e = Evidence {
        heartbeat: Some(130 * S),
        ..started()
    };
    assert_eq!(
        describe(&s, &e, Verdict::Stalled, 140 * S),
        "no heartbeat, output or CPU use for 10.0s (last heartbeat 10.0s ago)"
    );
    let heartbeat_only = Settings {
        output: false,
        cpu: false,
        ..settings()
    };
    assert_eq!(
        describe(&heartbeat_only, &started(), Verdict::Stalled, 115 * S),
        "no heartbeat for 10.0s (none seen this attempt)"
    );
    assert_eq!(
        describe(&s, &e, Verdict::NoProgress, 165 * S),
        "progress file unchanged for 1m0s (last heartbeat 35.0s ago)"
    );
    assert_eq!(
        describe(&s, &e, Verdict::Running, 131 * S),
        "activity again (last heartbeat 1.0s ago)"
    );
}

#[test]
fn settings_come_from_the_unit() {
    let unit = crate::unit::parse_unit(
        std::path::Path::new("t.ron"),
        r#"Unit(command: ["a"], liveness: Liveness(heartbeat_timeout: "1s", progress_timeout: "250ms", startup_grace: "0s", signals: [Heartbeat]))"#,
    )
    .unwrap();
    assert_eq!(
        Settings::of(&unit.liveness),
        Settings {
            heartbeat_timeout: 1_000,
            progress_timeout: 250,
            startup_grace: 0,
            heartbeat: true,
            output: false,
            cpu: false,
        }
    );
    let default =
        crate::unit::parse_unit(std::path::Path::new("t.ron"), r#"Unit(command: ["a"])"#).unwrap();
    let d = Settings::of(&default.liveness);
    assert!(d.heartbeat && d.output && d.cpu);
    assert_eq!(d.heartbeat_timeout, 300_000);
}
