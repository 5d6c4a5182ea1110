//! Burst coalescing (pure, kernel-free): per key (a hook, a unit, an event) the first event
//! goes at once; those that follow within the key's window are held, and when the window
//! ends the latest of them goes, carrying how many it stands for. A key is sent at most once
//! per window, so a unit that fails a hundred times a second runs each hook a few times a
//! minute, and the counts add up to the events.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What an event is coalesced by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    pub hook: usize,
    pub unit: String,
    pub event: &'static str,
}

/// Per key: when it was last sent, and what is held since.
#[derive(Debug)]
struct Entry<E> {
    sent_at: Instant,
    window: Duration,
    held: u64,
    latest: Option<E>,
}

/// An event to send now, standing for `count` events (itself and those held before it).
#[derive(Debug, PartialEq)]
pub(crate) struct Send<E> {
    pub key: Key,
    pub event: E,
    pub count: u64,
}

#[derive(Debug)]
pub(crate) struct Coalescer<E> {
    entries: BTreeMap<Key, Entry<E>>,
}

impl<E> Default for Coalescer<E> {
    fn default() -> Self {
        Coalescer {
            entries: BTreeMap::new(),
        }
    }
}

impl<E> Coalescer<E> {
    /// An event of `key` at `now`: sent at once when the key's last send is a `window` or
    /// more ago (or it has none), else held until its window ends.
    pub fn offer(&mut self, key: Key, event: E, window: Duration, now: Instant) -> Option<Send<E>> {
        match self.entries.get_mut(&key) {
            Some(entry) if now < entry.sent_at + entry.window => {
                entry.held += 1;
                entry.latest = Some(event);
                None
            }
            Some(entry) => {
                // The window is over, and `due` has not flushed it yet: what it held goes
                // with this one.
                let count = entry.held + 1;
                entry.sent_at = now;
                entry.window = window;
                entry.held = 0;
                entry.latest = None;
                Some(Send { key, event, count })
            }
            None => {
                self.entries.insert(
                    key.clone(),
                    Entry {
                        sent_at: now,
                        window,
                        held: 0,
                        latest: None,
                    },
                );
                Some(Send {
                    key,
                    event,
                    count: 1,
                })
            }
        }
    }

    /// The held events whose window has ended by `now`, to send; keys with nothing held and
    /// their window over are forgotten.
    pub fn due(&mut self, now: Instant) -> Vec<Send<E>> {
        let mut sends = Vec::new();
        self.entries.retain(|key, entry| {
            if now < entry.sent_at + entry.window {
                return true;
            }
            match entry.latest.take() {
                Some(event) => {
                    sends.push(Send {
                        key: key.clone(),
                        event,
                        count: entry.held,
                    });
                    // A send opens a window of its own.
                    entry.sent_at = now;
                    entry.held = 0;
                    true
                }
                None => false,
            }
        });
        sends
    }

    /// When [`Coalescer::due`] next has something to send, if anything is held.
    pub fn next_due(&self) -> Option<Instant> {
        self.entries
            .values()
            .filter(|e| e.latest.is_some())
            .map(|e| e.sent_at + e.window)
            .min()
    }

    /// How many events are held, over every key.
    pub fn held_count(&self) -> u64 {
        self.entries.values().map(|e| e.held).sum()
    }

    #[cfg(test)]
    /// How many keys are remembered (bounded: a key is forgotten a window after its last send).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Forget everything (the hooks were reconfigured).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests;
