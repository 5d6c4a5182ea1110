use super::*;

#[test]
fn removal_wins_and_a_shutdown_does_not_undo_a_users_stop() {
    use Intent::*;
    assert_eq!(merge_intent(Remove, Restart), Remove);
    assert_eq!(merge_intent(Stop, Remove), Remove);
    assert_eq!(merge_intent(Forget, Restart), Forget);
    assert_eq!(merge_intent(Forget, Remove), Remove);
    assert_eq!(merge_intent(Stop, Interrupt), Stop);
    assert_eq!(merge_intent(Stop, Restart), Restart);
    assert_eq!(merge_intent(Restart, Stop), Stop);
    assert_eq!(merge_intent(Restart, Interrupt), Interrupt);
    assert_eq!(merge_intent(None, Stop), Stop);
}
