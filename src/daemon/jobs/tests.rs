use super::deadline::Overrun;
use super::*;
use crate::worker::protocol::RepoRef;

fn prepare(repo: &str) -> Job {
    Job::Prepare {
        unit: "t".into(),
        repo: Some(RepoRef {
            path: repo.into(),
            base: "main".into(),
            branch: None,
        }),
        owner: None,
        paths: Default::default(),
        quota: None,
    }
}

#[test]
fn a_deadline_message_names_the_step_the_path_the_limit_and_how_far_it_came() {
    let progress = Progress {
        step: "base tree".into(),
        done: 24_600,
        total: 60_000,
    };
    let message = overrun_message(
        &prepare("/repo"),
        Some(&progress),
        &Overrun::Total(Duration::from_secs(600)),
    );
    assert_eq!(
        message,
        format!(
            "checkout preparation of /repo (base tree) took longer than {}; 24,600 of 60,000 files written",
            crate::fmt::duration_precise(Duration::from_secs(600))
        )
    );
}

#[test]
fn a_deadline_message_without_progress_says_what_it_was_doing() {
    let message = overrun_message(
        &prepare("/srv/repo"),
        None,
        &Overrun::Total(Duration::from_secs(2)),
    );
    assert!(
        message.starts_with("checkout preparation of /srv/repo took longer than"),
        "{message}"
    );
    assert!(!message.contains(';'), "{message}");
}

#[test]
fn preparation_follows_its_progress_and_other_jobs_have_a_fixed_deadline() {
    let jobs = Jobs::new(
        PathBuf::from("/nonexistent"),
        JobSettings::default(),
        Err("none".into()),
    );
    let build = jobs.deadline_of(&prepare("/repo"));
    assert_eq!(build.idle, Some(jobs.settings.preparation_idle));
    assert_eq!(build.total, jobs.settings.preparation_deadline);
    let harvest = jobs.deadline_of(&Job::DiskUse {
        unit: "t".into(),
        work: false,
    });
    assert_eq!(harvest.idle, None);
    assert_eq!(harvest.total, jobs.settings.deadline);
}

/// A running job's bookkeeping around no real worker (its pidfd is /dev/null: a kill fails).
fn running() -> Running {
    let null = || std::fs::File::open("/dev/null").unwrap();
    Running {
        owner: Owner::Task("t".into()),
        pending: Pending {
            generation: 1,
            job: prepare("/repo"),
            then: Then::Start,
        },
        pid: 0,
        pidfd: OwnedFd::from(null()),
        stdout: null(),
        token: Token(0),
        lines: LineBuffer::default(),
        started: Instant::now(),
        deadline: Deadline {
            total: Duration::from_secs(60),
            idle: Some(Duration::from_secs(5)),
        },
        progress: None,
        advanced: None,
        done: None,
        killed: None,
        killed_at: None,
        grace_armed: false,
        cancelled: false,
        eof: false,
        status: None,
        oom_kills_before: None,
    }
}

fn progress(step: &str, done: u64, total: u64) -> Result<WorkerLine, String> {
    Ok(WorkerLine::Progress(Progress {
        step: step.into(),
        done,
        total,
    }))
}

#[test]
fn only_counted_progress_that_moves_keeps_a_preparation_alive() {
    let mut job = running();
    job.take_line(progress("checkout", 0, 0));
    assert_eq!(
        job.advanced, None,
        "an uncounted step is no evidence of progress"
    );
    job.take_line(progress("base tree", 10, 100));
    let first = job.advanced.expect("counted progress");
    std::thread::sleep(Duration::from_millis(5));
    job.take_line(progress("base tree", 10, 100));
    assert_eq!(
        job.advanced,
        Some(first),
        "the same count again is not progress"
    );
    job.take_line(progress("base tree", 11, 100));
    assert!(job.advanced.unwrap() > first);
    assert_eq!(job.progress.as_ref().unwrap().done, 11);
    // Once counted progress ran, a step of its own moves it too: the index and the sync
    // after the last file say nothing more, and must not be taken for a hang.
    let counted = job.advanced.unwrap();
    std::thread::sleep(Duration::from_millis(5));
    job.take_line(progress("base tree: index and sync", 100, 100));
    assert!(job.advanced.unwrap() > counted);
}

#[test]
fn a_second_result_or_a_foreign_line_fails_the_job_and_the_first_reason_stays() {
    let mut job = running();
    let done = || {
        Ok(WorkerLine::Done(Ok(JobResult::Harvested {
            detail: "x".into(),
        })))
    };
    job.take_line(done());
    assert!(job.done.is_some() && job.killed.is_none());
    job.take_line(done());
    assert_eq!(
        job.killed,
        Some(JobError::Worker("the worker wrote two results".into()))
    );
    let killed_at = job.killed_at.expect("the kill starts the grace");
    job.take_line(Err("garbage".into()));
    assert_eq!(
        job.killed,
        Some(JobError::Worker("the worker wrote two results".into()))
    );
    assert_eq!(
        job.killed_at,
        Some(killed_at),
        "the first kill's instant stays"
    );
}

#[test]
fn a_path_check_past_its_deadline_names_the_path_it_was_at() {
    let job = Job::Prepare {
        unit: "t".into(),
        repo: None,
        owner: None,
        paths: crate::worker::protocol::StartPaths {
            hidden: vec!["/var/lib/keel".into()],
            writable: vec!["/srv/cache".into(), "/mnt/nfs/data".into()],
            keel_dirs: Default::default(),
            secret_files: vec![],
        },
        quota: None,
    };
    let progress = Progress {
        step: "check paths".into(),
        done: 2,
        total: 3,
    };
    let message = overrun_message(
        &job,
        Some(&progress),
        &Overrun::Total(Duration::from_secs(5)),
    );
    assert!(
        message.starts_with(
            "the check of the sandbox's paths (check paths) at /mnt/nfs/data took longer than"
        ),
        "{message}"
    );
    assert!(message.ends_with("; 2 of 3 paths checked"), "{message}");
}
