//! Unit tests of the daemon's network side: the journal of refusals from relay reports.

use super::*;
use crate::network::relay_protocol::RefusedCount;

fn refused(destination: &str, count: u64) -> RefusedCount {
    RefusedCount {
        destination: destination.into(),
        reason: format!("{destination}: not listed"),
        count,
        first_ms: 1,
        last_ms: 2,
    }
}

#[test]
fn refusals_are_journaled_once_per_new_count_coalesced_per_destination() {
    let mut journaled = BTreeMap::new();
    let mut report = RelayReport {
        refused: vec![refused("example.com", 1), refused("10.1.2.3:80", 3)],
        ..RelayReport::default()
    };
    assert_eq!(
        refusals_since(&report, &mut journaled),
        [
            "example.com: not listed",
            "10.1.2.3:80: not listed (\u{d7}3)"
        ]
    );
    // Nothing new: nothing journaled.
    assert!(refusals_since(&report, &mut journaled).is_empty());
    report.refused[1].count = 5;
    assert_eq!(
        refusals_since(&report, &mut journaled),
        ["10.1.2.3:80: not listed (\u{d7}2)"]
    );
    // A relay started again with a fresh count (below the journaled one): counted anew.
    report.refused[0].count = 0;
    report.refused[1].count = 1;
    assert_eq!(
        refusals_since(&report, &mut journaled),
        ["10.1.2.3:80: not listed"]
    );
}

#[test]
fn a_look_journals_a_bounded_number_of_destinations_and_sums_up_the_rest() {
    let mut journaled = BTreeMap::new();
    let report = RelayReport {
        refused: (0..100)
            .map(|n| refused(&format!("n{n:03}.example.com"), 2))
            .collect(),
        ..RelayReport::default()
    };
    let lines = refusals_since(&report, &mut journaled);
    assert_eq!(lines.len(), JOURNALED_PER_LOOK + 1, "{lines:#?}");
    assert_eq!(
        lines.last().unwrap(),
        "and 80 more destinations (\u{d7}160): keel status UNIT --json"
    );
    // All of them counted as journaled: the next look has nothing to say.
    assert!(refusals_since(&report, &mut journaled).is_empty());
}

#[test]
fn misdirected_placeholders_are_journaled_once_per_new_count_without_the_placeholder() {
    use crate::network::relay_protocol::MisdirectedCount;
    let mut journaled = BTreeMap::new();
    let mut report = RelayReport {
        misdirected: vec![MisdirectedCount {
            secret: "API_KEY".into(),
            destination: "evil.example:80".into(),
            count: 1,
            first_ms: 1,
            last_ms: 1,
        }],
        ..RelayReport::default()
    };
    let lines = misdirected_since(&report, &mut journaled);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with(
            "API_KEY's placeholder sent to evil.example:80, which is not one of its hosts"
        ),
        "{lines:?}"
    );
    assert!(misdirected_since(&report, &mut journaled).is_empty());
    report.misdirected[0].count = 4;
    let lines = misdirected_since(&report, &mut journaled);
    assert!(lines[0].contains("(\u{d7}3)"), "{lines:?}");
}
