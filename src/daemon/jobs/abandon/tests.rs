use super::*;

#[test]
fn the_state_of_a_live_process_is_read() {
    let state = kernel_state(std::process::id() as i32);
    assert!(state.starts_with("state "), "{state}");
}

#[test]
fn the_state_of_no_process_says_so() {
    // Above the largest pid_max (2^22).
    assert_eq!(kernel_state(5_000_000), "its state cannot be read");
}

#[test]
fn an_abandoned_deadline_keeps_its_reason_and_says_it_did_not_exit() {
    let why = super::super::JobError::Deadline("x took longer than 2s".into());
    let out = outcome(
        Some(why),
        "state D (uninterruptible sleep) in __refrigerator",
    );
    assert_eq!(
        out,
        super::super::JobError::Deadline(
            "x took longer than 2s; killed, but it did not exit (stuck in the kernel: \
             state D (uninterruptible sleep) in __refrigerator)"
                .into()
        )
    );
}
