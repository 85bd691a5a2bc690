//! Packet index estimation (RFC 3711 §3.3.1, Appendix A), the replay window (§3.3.2) and the
//! small per-SSRC table that holds them.

use crate::Error;

/// Packets the replay window remembers behind the highest index (RFC 3711 §3.3.2 asks for at
/// least 64). 128 is one `u128`, and 2.5 s of 20 ms audio: reordering beyond it is rare.
pub const REPLAY_WINDOW: u64 = 128;

/// SSRCs one context follows at once. A call has one sender SSRC; a peer that changes it (a
/// re-INVITE, a transfer on its side) keeps working, and a few more make room for overlap. The
/// least recently used is forgotten beyond that: an attacker cannot trigger it, since only
/// authenticated packets enter the table.
pub const MAX_SSRCS: usize = 4;

/// The highest index seen and a bitmap of the [`REPLAY_WINDOW`] indexes below it (bit `d` set:
/// index `highest - d` seen).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplayWindow {
    highest: u64,
    seen: u128,
}

impl ReplayWindow {
    pub(crate) fn new(index: u64) -> Self {
        Self {
            highest: index,
            seen: 1,
        }
    }

    pub(crate) fn highest(&self) -> u64 {
        self.highest
    }

    /// May `index` be accepted? Checked before authentication (cheap), recorded after it.
    pub(crate) fn check(&self, index: u64) -> Result<(), Error> {
        if index > self.highest {
            return Ok(());
        }
        let behind = self.highest - index;
        if behind >= REPLAY_WINDOW {
            return Err(Error::TooOld);
        }
        if self.seen >> behind & 1 == 1 {
            return Err(Error::Replayed);
        }
        Ok(())
    }

    /// Record an authenticated `index` (which passed [`Self::check`]).
    pub(crate) fn accept(&mut self, index: u64) {
        if index > self.highest {
            let ahead = index - self.highest;
            self.seen = if ahead >= REPLAY_WINDOW {
                0
            } else {
                self.seen << ahead
            };
            self.seen |= 1;
            self.highest = index;
        } else {
            self.seen |= 1 << (self.highest - index);
        }
    }
}

/// RFC 3711 Appendix A: the 48-bit index of sequence number `seq`, guessed from the highest
/// index so far (its low 16 bits are `s_l`, the rest the rollover counter). The guess is the
/// rollover counter (ROC) − 1, ROC or ROC + 1, whichever puts `seq` nearest `s_l`.
pub(crate) fn estimate_index(highest: u64, seq: u16) -> Result<u64, Error> {
    let roc = highest >> 16;
    let s_l = i32::from(highest as u16);
    let seq32 = i32::from(seq);
    let v = if s_l < 32768 {
        if seq32 - s_l > 32768 {
            // A late packet from before the last rollover; none exists before the first.
            roc.checked_sub(1).ok_or(Error::TooOld)?
        } else {
            roc
        }
    } else if s_l - 32768 > seq32 {
        roc + 1
    } else {
        roc
    };
    // The rollover counter is 32 bits (§3.2.1): past it the key is spent.
    if v > u64::from(u32::MAX) {
        return Err(Error::IndexExhausted);
    }
    Ok(v << 16 | u64::from(seq))
}

#[derive(Debug, Clone, Copy)]
struct Entry<T> {
    ssrc: u32,
    /// 0: empty; else the table's clock when last used.
    used: u64,
    state: T,
}

/// Per-SSRC state in a fixed array: no allocation, ever.
#[derive(Debug, Clone)]
pub(crate) struct SsrcTable<T: Copy + Default> {
    entries: [Entry<T>; MAX_SSRCS],
    clock: u64,
}

impl<T: Copy + Default> Default for SsrcTable<T> {
    fn default() -> Self {
        Self {
            entries: [Entry {
                ssrc: 0,
                used: 0,
                state: T::default(),
            }; MAX_SSRCS],
            clock: 0,
        }
    }
}

impl<T: Copy + Default> SsrcTable<T> {
    pub(crate) fn get(&self, ssrc: u32) -> Option<&T> {
        self.entries
            .iter()
            .find(|e| e.used != 0 && e.ssrc == ssrc)
            .map(|e| &e.state)
    }

    /// The state of `ssrc`, made (default) in an empty or the least recently used slot if new.
    pub(crate) fn get_or_insert(&mut self, ssrc: u32) -> &mut T {
        self.clock += 1;
        let clock = self.clock;
        let slot = match self
            .entries
            .iter()
            .position(|e| e.used != 0 && e.ssrc == ssrc)
        {
            Some(i) => i,
            None => {
                // An empty slot has `used == 0`, so it is also the least recently used.
                let i = self
                    .entries
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| e.used)
                    .map_or(0, |(i, _)| i);
                self.entries[i] = Entry {
                    ssrc,
                    used: clock,
                    state: T::default(),
                };
                i
            }
        };
        let entry = &mut self.entries[slot];
        entry.used = clock;
        &mut entry.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_across_rollover() {
        // Near the top of a cycle, a small sequence number is the next cycle.
        assert_eq!(estimate_index(65_530, 2), Ok(65_536 + 2));
        // Just after the rollover, a large one is a late packet of the previous cycle.
        assert_eq!(estimate_index(65_536 + 2, 65_533), Ok(65_533));
        // In the first cycle there is no previous one.
        assert_eq!(estimate_index(5, 65_000), Err(Error::TooOld));
        assert_eq!(estimate_index(100, 101), Ok(101));
        assert_eq!(estimate_index(100, 99), Ok(99));
        assert_eq!(
            estimate_index(u64::from(u32::MAX) << 16 | 65_535, 0),
            Err(Error::IndexExhausted)
        );
    }

    #[test]
    fn window_accepts_each_index_once() {
        let mut w = ReplayWindow::new(1000);
        assert_eq!(w.check(1000), Err(Error::Replayed));
        assert_eq!(w.check(999), Ok(()));
        w.accept(999);
        assert_eq!(w.check(999), Err(Error::Replayed));
        w.accept(1005);
        assert_eq!(w.check(1000), Err(Error::Replayed));
        assert_eq!(w.check(1001), Ok(()));
        assert_eq!(w.check(1005 - 127), Ok(()));
        assert_eq!(w.check(1005 - 128), Err(Error::TooOld));
        w.accept(5000);
        assert_eq!(w.check(4999), Ok(()));
        assert_eq!(w.check(1005), Err(Error::TooOld));
    }

    #[test]
    fn table_evicts_least_recently_used() {
        let mut t = SsrcTable::<u32>::default();
        for ssrc in 1..=MAX_SSRCS as u32 {
            *t.get_or_insert(ssrc) = ssrc * 10;
        }
        *t.get_or_insert(1) += 1; // 1 is now the most recent; 2 the least
        *t.get_or_insert(99) = 990;
        assert_eq!(t.get(2), None);
        assert_eq!(t.get(1), Some(&11));
        assert_eq!(t.get(99), Some(&990));
    }
}
