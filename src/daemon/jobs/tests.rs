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
        check_paths: vec![],
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
    let harvest = jobs.deadline_of(&Job::DiskUse { unit: "t".into() });
    assert_eq!(harvest.idle, None);
    assert_eq!(harvest.total, jobs.settings.deadline);
}
