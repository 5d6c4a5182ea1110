use super::*;

#[test]
fn a_start_deferred_again_and_again_waits_longer_up_to_five_minutes() {
    assert_eq!(deferral_delay(0), Duration::from_secs(5));
    assert_eq!(deferral_delay(1), Duration::from_secs(10));
    assert_eq!(deferral_delay(3), Duration::from_secs(40));
    assert_eq!(deferral_delay(6), Duration::from_secs(300));
    assert_eq!(deferral_delay(40), Duration::from_secs(300));
    assert_eq!(deferral_delay(u32::MAX), Duration::from_secs(300));
}

#[test]
fn a_unit_with_a_secret_file_has_its_file_checked_by_the_preparation_job() {
    let text = r#"Unit(command: ["a"], sandbox: Sandbox(network: Allow(["a.com"])),
        secrets: {"TOKEN": Secret(file: "/etc/keel/secrets/t", hosts: ["a.com"]),
                  "OTHER": Secret(env: "KEEL_SECRET_OTHER", hosts: ["a.com"])})"#;
    let unit = crate::unit::parse_unit(std::path::Path::new("t.ron"), text).unwrap();
    let dirs = crate::state::StateDir::new("/s");
    let ctx = spawn::AttemptContext {
        unit_name: "t",
        attempt: 1,
        generation: 1,
        last_exit: None,
        last_progress: None,
        network_lists: &Default::default(),
    };
    let spec = spawn::attempt_spec(&dirs, &unit, &ctx);
    let job = preparation_job("t", &unit, spec.sandbox.as_ref()).unwrap();
    let Some(Job::Prepare { paths, .. }) = job else {
        panic!("expected a preparation job, got {job:?}");
    };
    assert_eq!(
        paths.secret_files,
        [("TOKEN".to_string(), "/etc/keel/secrets/t".into())]
    );
    // Only env secrets: nothing on a disk to read, no job.
    let text = r#"Unit(command: ["a"], sandbox: Sandbox(network: Allow(["a.com"])),
        secrets: {"OTHER": Secret(env: "KEEL_SECRET_OTHER", hosts: ["a.com"])})"#;
    let unit = crate::unit::parse_unit(std::path::Path::new("t.ron"), text).unwrap();
    let spec = spawn::attempt_spec(&dirs, &unit, &ctx);
    assert_eq!(preparation_job("t", &unit, spec.sandbox.as_ref()), Ok(None));
}
