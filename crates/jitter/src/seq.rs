//! Sequence-number extension: 16-bit RTP sequence numbers to 64-bit indices (RFC 3550 A.1).

/// Largest forward jump still taken as the same sequence space (RFC 3550 A.1 `MAX_DROPOUT`).
pub const MAX_DROPOUT: u16 = 3000;
/// Largest backward step still taken as reordering (RFC 3550 A.1 `MAX_MISORDER`).
pub const MAX_MISORDER: u16 = 100;

/// Offset of the first extended index, so that packets reordered before the first one seen still
/// get a non-negative index.
const FIRST_CYCLE_OFFSET: u64 = 1 << 16;

/// Extends 16-bit sequence numbers to monotone 64-bit indices, relative to the highest seen.
///
/// A value within ±32767 of the highest extended index is placed on the nearest side of it, so
/// wrap-around (65535 → 0) continues counting up and reordering across the wrap counts down. The
/// first value gets index `seq + 65536`, leaving room for packets reordered before it.
#[derive(Debug, Clone, Default)]
pub struct SeqExtender {
    highest: Option<u64>,
}

impl SeqExtender {
    /// A fresh extender; the next value seen becomes the reference.
    pub fn new() -> Self {
        Self::default()
    }

    /// The 64-bit index of `seq`; updates the highest index when it moves forward.
    pub fn extend(&mut self, seq: u16) -> u64 {
        let ext = self.peek(seq);
        if self.highest.is_none_or(|h| ext > h) {
            self.highest = Some(ext);
        }
        ext
    }

    /// The 64-bit index `seq` would get, without updating the reference.
    pub fn peek(&self, seq: u16) -> u64 {
        match self.highest {
            None => u64::from(seq) + FIRST_CYCLE_OFFSET,
            Some(h) => {
                // RFC 3550 A.1: the signed 16-bit distance decides forward (wrap) or backward.
                let delta = i64::from(seq.wrapping_sub(h as u16) as i16);
                // ok: h >= FIRST_CYCLE_OFFSET - 32768 after any backward step; saturate anyway.
                h.saturating_add_signed(delta)
            }
        }
    }

    /// Highest index seen so far.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }
}

/// Extends a trace's 16-bit sequence column (in file order) to 64-bit indices starting near 0.
///
/// Values are unwrapped with [`SeqExtender`] and then shifted so the smallest index is
/// `min(seq)` of the first cycle, i.e. a trace that never wraps keeps its own numbers.
pub fn extend_sequence_numbers(seqs: &[u16]) -> Vec<u64> {
    let mut ext = SeqExtender::new();
    let raw: Vec<u64> = seqs.iter().map(|&s| ext.extend(s)).collect();
    let Some(&min) = raw.iter().min() else {
        return raw;
    };
    // Shift whole cycles only, so `seq` keeps its low 16 bits.
    let shift = (min >> 16) << 16;
    raw.into_iter().map(|e| e - shift).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_forward_and_back() {
        let mut e = SeqExtender::new();
        let a = e.extend(65534);
        assert_eq!(e.extend(65535), a + 1);
        assert_eq!(e.extend(0), a + 2);
        assert_eq!(e.extend(1), a + 3);
        // A straggler from before the wrap is placed behind, not a cycle ahead.
        assert_eq!(e.extend(65535), a + 1);
        assert_eq!(e.highest(), Some(a + 3));
    }

    #[test]
    fn trace_without_wrap_keeps_numbers() {
        assert_eq!(extend_sequence_numbers(&[0, 1, 3, 2]), vec![0, 1, 3, 2]);
    }

    #[test]
    fn trace_with_wrap_counts_on() {
        assert_eq!(
            extend_sequence_numbers(&[65534, 65535, 0, 1]),
            vec![65534, 65535, 65536, 65537]
        );
        // Reordered before the first packet, across the wrap.
        assert_eq!(
            extend_sequence_numbers(&[0, 65535, 1]),
            vec![65536, 65535, 65537]
        );
    }
}
