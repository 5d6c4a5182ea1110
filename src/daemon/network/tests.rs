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
