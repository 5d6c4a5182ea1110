use super::*;

#[test]
fn progress_and_done_lines_round_trip_in_their_documented_shape() {
    let progress = WorkerLine::Progress(Progress {
        step: "base tree".into(),
        done: 24_600,
        total: 60_000,
    });
    let line = progress.to_line();
    assert_eq!(
        line,
        r#"{"progress":{"step":"base tree","done":24600,"total":60000}}"#
    );
    assert_eq!(WorkerLine::parse(line.as_bytes()).unwrap(), progress);
    let done = WorkerLine::Done(Ok(JobResult::Harvested {
        detail: "fast-forwarded".into(),
    }));
    let line = done.to_line();
    assert!(line.starts_with(r#"{"done":"#), "{line}");
    assert_eq!(WorkerLine::parse(line.as_bytes()).unwrap(), done);
}

#[test]
fn lines_are_cut_where_their_newline_is_whatever_the_reads() {
    let mut buffer = LineBuffer::default();
    let line = WorkerLine::Progress(Progress {
        step: "checkout".into(),
        done: 0,
        total: 0,
    })
    .to_line();
    let (head, tail) = line.split_at(10);
    assert!(buffer.push(head.as_bytes()).is_empty());
    assert_eq!(buffer.unfinished(), 10);
    let both = format!("{tail}\n\n{line}\n");
    let parsed = buffer.push(both.as_bytes());
    assert_eq!(parsed.len(), 2, "{parsed:?}");
    assert!(parsed.iter().all(Result::is_ok));
    assert_eq!(buffer.unfinished(), 0);
}

#[test]
fn a_foreign_line_fails_with_what_it_said_escaped() {
    let error = WorkerLine::parse(b"panicked at \x1b[31mboom").unwrap_err();
    assert!(error.contains("not one of its own"), "{error}");
    assert!(!error.contains('\x1b'), "{error:?}");
}

#[test]
fn a_line_past_the_bound_fails_even_before_its_newline() {
    let mut buffer = LineBuffer::default();
    let chunk = vec![b'x'; MAX_LINE_BYTES / 2 + 1];
    assert!(buffer.push(&chunk).is_empty());
    let parsed = buffer.push(&chunk);
    assert_eq!(parsed.len(), 1);
    assert!(parsed[0]
        .as_ref()
        .unwrap_err()
        .contains("without a newline"));
    let mut long = vec![b'x'; MAX_LINE_BYTES + 1];
    long.push(b'\n');
    let parsed = LineBuffer::default().push(&long);
    assert!(
        parsed[0].as_ref().unwrap_err().contains("at most"),
        "{parsed:?}"
    );
}

#[test]
fn every_job_kind_names_itself_for_the_test_hook() {
    let kinds: Vec<&str> = [
        Job::Prepare {
            unit: "u".into(),
            repo: None,
            owner: None,
            paths: Default::default(),
            quota: None,
        },
        Job::Harvest {
            unit: "u".into(),
            attempt: 1,
            limits: HarvestLimits::default(),
        },
        Job::Remove {
            unit: "u".into(),
            attempt: 1,
            force: false,
            limits: HarvestLimits::default(),
        },
        Job::Prune {
            finished: vec![],
            limits: HarvestLimits::default(),
        },
        Job::DiskUse {
            unit: "u".into(),
            work: true,
        },
        Job::TaskDiskUse {
            unit: "u".into(),
            project: None,
        },
    ]
    .iter()
    .map(Job::kind)
    .collect();
    assert_eq!(
        kinds,
        [
            "checkout",
            "harvest",
            "remove",
            "prune",
            "disk-use",
            "task-disk-use"
        ]
    );
}
