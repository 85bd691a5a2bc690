//! How a call's audio is handed to the inference thread, and how far the thread has judged it.
//!
//! The thread judges whole 32 ms chunks, and every send to it is a wake: a futex call on the
//! call's side and, on the thread's, a switch back in with its caches cold. At small N those
//! wakes, not the model rows, are much of what a call costs. So a call's handle
//! ([`crate::CallInference`]) sends only what completes a chunk, and holds back complete chunks
//! whose judgment the thread has said cannot decide anything yet.
//!
//! After each chunk it decides, the thread publishes one word per call (a [`Progress`]): how many
//! chunks it has judged and the [`Handoff`] its state allows for the next ones. The handle reads
//! it when a push completes a chunk. A hold is taken only when the thread has judged every chunk
//! sent: its state then cannot change until more audio comes, so the word is current.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::speech::VAD_CHUNK_SAMPLES;
use crate::vad::is_quiet_chunk;

/// What the thread's state allows the handle to do with the call's next complete chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// Send each chunk as it completes: its probability may start or stop a speech, count a
    /// stop, end a turn early or time an incomplete turn out.
    Now,
    /// The call is quiet between turns and the quiet guard is on: a chunk below the guard's peak
    /// is non-speech without a model run, and in that state it decides nothing (the thread only
    /// keeps it for the replay). Such chunks may wait and go together with the next chunk that
    /// is not quiet, or when [`MAX_QUIET_HOLD_CHUNKS`] are held.
    Quiet,
}

impl Handoff {
    fn bits(self) -> u64 {
        match self {
            Handoff::Now => 0,
            Handoff::Quiet => 1,
        }
    }

    fn from_bits(bits: u64) -> Self {
        if bits & 1 == 1 {
            Handoff::Quiet
        } else {
            Handoff::Now
        }
    }
}

/// The most quiet chunks a handle holds back (≈ 1 s): a quiet call wakes the thread about once
/// a second instead of 31 times. The bound keeps the burst the thread takes at once, and what a
/// call holds, small; the thread's 5 s state reset sees the same chunks in the same order.
pub(crate) const MAX_QUIET_HOLD_CHUNKS: u64 = 31;

/// One call's published progress: chunks judged and the [`Handoff`] for the next, in one word so
/// a reader never pairs one chunk count with another's handoff.
#[derive(Debug, Default)]
pub(crate) struct Progress(AtomicU64);

impl Progress {
    /// Stored by the thread after the chunk's events were sent to the call's sink.
    pub(crate) fn store(&self, chunks: u64, handoff: Handoff) {
        self.0
            .store((chunks << 1) | handoff.bits(), Ordering::Release);
    }

    /// Chunks judged, and what the thread allows for the next.
    pub(crate) fn load(&self) -> (u64, Handoff) {
        let word = self.0.load(Ordering::Acquire);
        (word >> 1, Handoff::from_bits(word))
    }
}

/// Audio pushed but not yet sent to the inference thread. A 20 ms frame that completes no chunk
/// would wake the thread for nothing, so it waits here: a call wakes the thread at most 31 times
/// a second instead of 50, and a chunk goes the moment its last sample is pushed unless the
/// thread said it may wait ([`Handoff`]).
#[derive(Debug, Default)]
pub(crate) struct HeldAudio {
    pub(crate) narrow: Vec<i16>,
    pub(crate) wide: Vec<i16>,
    /// 8 kHz samples sent so far: where the thread's chunk boundaries fall.
    pub(crate) sent: u64,
    /// Complete chunks held under [`Handoff::Quiet`]: judged non-speech already, so the
    /// handle's progress counts them.
    quiet_chunks: u64,
}

impl HeldAudio {
    /// Chunks whose last sample is held (the thread has not seen them complete).
    fn complete_chunks(&self) -> u64 {
        let chunk = VAD_CHUNK_SAMPLES as u64;
        (self.sent + self.narrow.len() as u64) / chunk - self.sent / chunk
    }

    /// After a push: how many of the held 8 kHz samples to send now (up to the last chunk
    /// boundary), or `None` to hold them. `progress` is the thread's word, `quiet_peak` the
    /// quiet guard's (`None`: off, so nothing is held back past its chunk).
    pub(crate) fn decide_send(
        &mut self,
        progress: (u64, Handoff),
        quiet_peak: Option<i16>,
    ) -> Option<usize> {
        let complete = self.complete_chunks();
        if complete == self.quiet_chunks {
            // No chunk completed since the last decision: the thread could not judge this push
            // yet, and what is held stays held.
            return None;
        }
        let chunk = VAD_CHUNK_SAMPLES as u64;
        let aligned = self.sent.is_multiple_of(chunk);
        let (judged, handoff) = progress;
        if aligned && judged == self.sent / chunk && handoff == Handoff::Quiet {
            // Only the newest chunk is new: the ones before it were held as quiet when they
            // completed (anything else was sent).
            let newest = (complete - 1) as usize * VAD_CHUNK_SAMPLES;
            let quiet = quiet_peak.is_some_and(|peak| {
                is_quiet_chunk(
                    self.narrow[newest..newest + VAD_CHUNK_SAMPLES]
                        .iter()
                        .copied(),
                    peak,
                )
            });
            if quiet && self.quiet_chunks + 1 == complete && complete <= MAX_QUIET_HOLD_CHUNKS {
                self.quiet_chunks = complete;
                return None;
            }
        }
        self.quiet_chunks = 0;
        Some((complete * chunk - self.sent % chunk) as usize)
    }

    /// Chunks the call has had judged: the thread's count, and the quiet chunks held back
    /// (non-speech by the guard, deciding nothing).
    pub(crate) fn judged_chunks(&self, thread_judged: u64) -> u64 {
        if self.quiet_chunks == 0 {
            return thread_judged;
        }
        thread_judged.max(self.sent / VAD_CHUNK_SAMPLES as u64 + self.quiet_chunks)
    }

    /// The first `narrow` held samples (and their 16 kHz twins) out, to be sent; the rest stays.
    pub(crate) fn split_to_send(
        &mut self,
        narrow: usize,
        wide_factor: usize,
    ) -> (Vec<i16>, Vec<i16>) {
        self.quiet_chunks = 0;
        let rest = self.narrow.split_off(narrow.min(self.narrow.len()));
        let out = std::mem::replace(&mut self.narrow, rest);
        let wide_n = if self.wide.is_empty() {
            0
        } else {
            (wide_factor * narrow).min(self.wide.len())
        };
        let wide_rest = self.wide.split_off(wide_n);
        let wide = std::mem::replace(&mut self.wide, wide_rest);
        (out, wide)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: usize = VAD_CHUNK_SAMPLES;

    fn push(h: &mut HeldAudio, pcm: &[i16]) {
        h.narrow.extend_from_slice(pcm);
    }

    #[test]
    fn the_word_carries_the_count_and_the_handoff_together() {
        let p = Progress::default();
        assert_eq!(p.load(), (0, Handoff::Now));
        p.store(157, Handoff::Quiet);
        assert_eq!(p.load(), (157, Handoff::Quiet));
        p.store(158, Handoff::Now);
        assert_eq!(p.load(), (158, Handoff::Now));
    }

    #[test]
    fn a_chunk_goes_when_it_completes_unless_the_thread_says_quiet() {
        let mut h = HeldAudio::default();
        push(&mut h, &[0; 160]);
        assert_eq!(
            h.decide_send((0, Handoff::Quiet), Some(64)),
            None,
            "no chunk yet"
        );
        push(&mut h, &[0; 160]);
        // Now: the complete chunk goes, the 64 samples past its end stay.
        assert_eq!(h.decide_send((0, Handoff::Now), Some(64)), Some(C));
        let (out, wide) = h.split_to_send(C, 2);
        assert_eq!((out.len(), wide.len(), h.narrow.len()), (C, 0, 64));
    }

    #[test]
    fn quiet_chunks_wait_for_the_first_audible_one_and_count_as_judged() {
        let mut h = HeldAudio::default();
        let mut sends = Vec::new();
        // Three quiet chunks, then one with a sample at the guard's peak.
        let mut pcm = vec![63i16; 3 * C];
        pcm.extend(std::iter::repeat_n(-64i16, C));
        for frame in pcm.chunks(160) {
            push(&mut h, frame);
            if let Some(n) = h.decide_send((0, Handoff::Quiet), Some(64)) {
                sends.push(n);
                h.split_to_send(n, 2);
                h.sent += n as u64;
            }
            if sends.is_empty() && h.complete_chunks() > 0 {
                assert_eq!(h.judged_chunks(0), h.complete_chunks());
            }
        }
        assert_eq!(sends, vec![4 * C]);
        assert_eq!(
            h.judged_chunks(0),
            0,
            "sent now: the thread's count is what counts"
        );
        assert_eq!(h.judged_chunks(4), 4);
    }

    #[test]
    fn nothing_is_held_while_the_thread_has_chunks_to_judge_or_the_guard_is_off() {
        let mut h = HeldAudio::default();
        push(&mut h, &[0; C]);
        assert_eq!(h.decide_send((0, Handoff::Now), Some(64)), Some(C));
        h.split_to_send(C, 2);
        h.sent += C as u64; // sent, not yet judged
        push(&mut h, &[0; C]);
        assert_eq!(
            h.decide_send((0, Handoff::Quiet), Some(64)),
            Some(C),
            "behind by one"
        );
        h.split_to_send(C, 2);
        h.sent += C as u64;
        push(&mut h, &[0; C]);
        assert_eq!(
            h.decide_send((2, Handoff::Quiet), None),
            Some(C),
            "guard off"
        );
        h.split_to_send(C, 2);
        h.sent += C as u64;
        push(&mut h, &[0; C]);
        assert_eq!(h.decide_send((3, Handoff::Now), Some(64)), Some(C));
    }

    #[test]
    fn a_push_that_completes_no_chunk_sends_nothing_held() {
        let mut h = HeldAudio::default();
        push(&mut h, &[0; C]);
        assert_eq!(h.decide_send((0, Handoff::Quiet), Some(64)), None);
        push(&mut h, &[0; 100]);
        assert_eq!(h.decide_send((0, Handoff::Quiet), Some(64)), None);
        assert_eq!(h.judged_chunks(0), 1);
        push(&mut h, &[0; 100]);
        assert_eq!(h.decide_send((0, Handoff::Quiet), Some(64)), None);
        push(&mut h, &[200; 100]);
        // The second chunk completes loud: both go, and the 44 samples after them stay.
        assert_eq!(h.decide_send((0, Handoff::Quiet), Some(64)), Some(2 * C));
    }

    #[test]
    fn a_long_quiet_goes_once_per_bound() {
        let mut h = HeldAudio::default();
        let mut sends = Vec::new();
        let mut judged = 0u64;
        for _ in 0..(100 * C / 160) {
            push(&mut h, &[0; 160]);
            if let Some(n) = h.decide_send((judged, Handoff::Quiet), Some(64)) {
                sends.push(n / C);
                h.split_to_send(n, 2);
                h.sent += n as u64;
                judged += (n / C) as u64; // the thread caught up at once
            }
        }
        // 100 chunks: three sends of 32 (31 held, the 32nd completes past the bound).
        assert_eq!(sends, vec![32, 32, 32]);
        // The last four are held, and judged as far as the handle is concerned.
        assert_eq!(h.judged_chunks(judged), 100);
    }

    #[test]
    fn after_an_unaligned_send_nothing_is_held_until_the_boundary_is_back() {
        let mut h = HeldAudio {
            sent: 160,
            ..HeldAudio::default()
        };
        push(&mut h, &[0; 160]);
        // 96 samples complete the thread's first chunk: they go, the 64 after stay.
        assert_eq!(h.decide_send((0, Handoff::Quiet), Some(64)), Some(96));
        let (out, _) = h.split_to_send(96, 2);
        h.sent += out.len() as u64;
        assert_eq!((h.sent, h.narrow.len()), (256, 64));
        push(&mut h, &[0; 192]);
        assert_eq!(h.decide_send((1, Handoff::Quiet), Some(64)), None);
    }

    #[test]
    fn wideband_twins_split_with_their_narrow_samples() {
        let mut h = HeldAudio::default();
        h.narrow.extend_from_slice(&[1; 320]);
        h.wide.extend_from_slice(&[2; 640]);
        let (n, w) = h.split_to_send(C, 2);
        assert_eq!(
            (n.len(), w.len(), h.narrow.len(), h.wide.len()),
            (C, 2 * C, 64, 128)
        );
    }
}
