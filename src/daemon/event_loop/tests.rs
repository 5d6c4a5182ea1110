//! Reads from a peer that never stops writing end within bounds.

use super::*;

/// A peer that always has more to give, counting what was taken.
struct Flood {
    given: usize,
}

impl std::io::Read for Flood {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(b'x');
        self.given += buf.len();
        Ok(buf.len())
    }
}

#[test]
fn a_flooding_peer_is_read_only_up_to_the_discard_budget() {
    let mut flood = Flood { given: 0 };
    assert!(!read_available(&mut flood, None, usize::MAX));
    assert!(flood.given >= DISCARD_BUDGET, "{}", flood.given);
    assert!(flood.given <= DISCARD_BUDGET + 8192, "{}", flood.given);
}

#[test]
fn what_is_kept_stops_just_past_its_limit() {
    let mut flood = Flood { given: 0 };
    let mut input = Vec::new();
    assert!(!read_available(&mut flood, Some(&mut input), 10_000));
    assert!(
        input.len() > 10_000 && input.len() <= 10_000 + 8192,
        "{}",
        input.len()
    );
}

#[test]
fn a_closed_peer_is_said_to_be_closed() {
    let mut empty: &[u8] = &[];
    assert!(read_available(&mut empty, None, 100));
    let mut short: &[u8] = b"GET / HTTP/1.1\r\n";
    let mut input = Vec::new();
    assert!(read_available(&mut short, Some(&mut input), 100));
    assert_eq!(input, b"GET / HTTP/1.1\r\n");
}
