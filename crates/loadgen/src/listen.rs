//! What one caller hears of the agent, sans-IO: received packets (sequence number, silent or
//! not, arrival time) in; agent utterances, their first packet's arrival and their underruns out.
//!
//! An agent utterance runs from its first non-silent packet to its last one; it is over once
//! [`AGENT_HANGOVER`] of silence (by sequence number, or by time when packets stop) follows. When
//! it ends, its packets are replayed against the caller's fixed playout buffer
//! ([`crate::CALLER_PLAYOUT_DEPTH`], via `ontime_jitter::replay_fixed`): every run of frames that
//! were not there at their playout time is one underrun, because that is a gap the caller hears.

use std::time::Duration;

use ontime_jitter::{replay_fixed, PacketOutcome, SeqExtender};
use ontime_rtp::FRAME;

use crate::CALLER_PLAYOUT_DEPTH;

/// Silence that ends an agent utterance: longer than the pauses inside the stub's espeak reply
/// (at most 320 ms) and shorter than the caller's 0.5 s minimum pause.
pub const AGENT_HANGOVER: Duration = Duration::from_millis(500);

const HANGOVER_FRAMES: u64 = (AGENT_HANGOVER.as_millis() / FRAME.as_millis()) as u64;

/// One finished agent utterance as the caller heard it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentUtterance {
    /// Arrival of its first non-silent packet.
    pub started: Duration,
    /// When the listener saw it was over.
    pub ended: Duration,
    /// Length in frames, first to last non-silent packet inclusive.
    pub frames: u64,
    /// Times the playout buffer ran dry inside it.
    pub underruns: u64,
    /// Frames missing at their playout time (late or never arrived).
    pub missing_frames: u64,
}

impl AgentUtterance {
    /// Its length as audio.
    pub fn audio(&self) -> Duration {
        FRAME * u32::try_from(self.frames).unwrap_or(u32::MAX)
    }
}

/// What a packet or a timer told the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// The agent started speaking: this is the arrival of its first audio packet.
    AgentStarted {
        /// Arrival time.
        arrival: Duration,
    },
    /// The agent's utterance is over.
    AgentEnded(AgentUtterance),
}

#[derive(Debug)]
struct Current {
    first_seq: u64,
    last_voiced_seq: u64,
    last_voiced_arrival: Duration,
    started: Duration,
    arrivals: Vec<(u64, Duration)>,
}

/// The caller's ear. Feed every received agent packet with [`AgentListener::on_packet`] and call
/// [`AgentListener::on_time`] now and then so an utterance ends even when packets stop.
#[derive(Debug, Default)]
pub struct AgentListener {
    seq: SeqExtender,
    current: Option<Current>,
}

impl AgentListener {
    /// A listener that has heard nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The agent is speaking (an utterance has started and not ended).
    pub fn agent_speaking(&self) -> bool {
        self.current.is_some()
    }

    /// One received packet. Returns at most one event; an utterance that ends and a new one that
    /// starts on the same packet report the end (the new start follows with the next packet).
    pub fn on_packet(
        &mut self,
        sequence_number: u16,
        silent: bool,
        arrival: Duration,
    ) -> Option<Heard> {
        let seq = self.seq.extend(sequence_number);
        match &mut self.current {
            None if silent => None,
            None => {
                self.current = Some(Current {
                    first_seq: seq,
                    last_voiced_seq: seq,
                    last_voiced_arrival: arrival,
                    started: arrival,
                    arrivals: vec![(seq, arrival)],
                });
                Some(Heard::AgentStarted { arrival })
            }
            Some(cur) => {
                if seq < cur.first_seq {
                    // Reordered from before the utterance began: not part of it.
                    return None;
                }
                if seq > cur.last_voiced_seq.saturating_add(HANGOVER_FRAMES) {
                    return self.finish(arrival).map(Heard::AgentEnded);
                }
                cur.arrivals.push((seq, arrival));
                if !silent && seq > cur.last_voiced_seq {
                    cur.last_voiced_seq = seq;
                    cur.last_voiced_arrival = arrival;
                }
                None
            }
        }
    }

    /// Time passes without packets: past the hangover plus the playout depth after the last
    /// voiced packet, the utterance is over.
    pub fn on_time(&mut self, now: Duration) -> Option<Heard> {
        let cur = self.current.as_ref()?;
        (now > cur.last_voiced_arrival + AGENT_HANGOVER + CALLER_PLAYOUT_DEPTH)
            .then(|| self.finish(now).map(Heard::AgentEnded))
            .flatten()
    }

    /// End the current utterance now (the call ends) and report it.
    pub fn finish(&mut self, now: Duration) -> Option<AgentUtterance> {
        let cur = self.current.take()?;
        let last = cur.last_voiced_seq;
        let arrivals: Vec<(u64, Duration)> = cur
            .arrivals
            .into_iter()
            .filter(|(s, _)| *s <= last)
            .collect();
        let frames = last - cur.first_seq + 1;
        let report = replay_fixed(CALLER_PLAYOUT_DEPTH, &arrivals);
        // Which frames of [first, last] were there at their playout time.
        let mut played = vec![false; usize::try_from(frames).unwrap_or(0)];
        for (seq, outcome) in &report.outcomes {
            if *outcome == PacketOutcome::Played {
                if let Some(slot) = played.get_mut((seq - cur.first_seq) as usize) {
                    *slot = true;
                }
            }
        }
        let (underruns, missing_frames) = count_dry_runs(&played);
        Some(AgentUtterance {
            started: cur.started,
            ended: now,
            frames,
            underruns,
            missing_frames,
        })
    }
}

/// Runs of frames not there at their playout time (each one an underrun), and those frames.
pub fn count_dry_runs(played: &[bool]) -> (u64, u64) {
    let mut runs = 0;
    let mut missing = 0;
    let mut in_run = false;
    for &p in played {
        if p {
            in_run = false;
        } else {
            missing += 1;
            if !in_run {
                runs += 1;
                in_run = true;
            }
        }
    }
    (runs, missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Feed `voiced` voiced packets then 30 silent ones, packet i arriving at `arrival(i)`.
    fn hear(voiced: u16, arrival: impl Fn(u16) -> Duration) -> Vec<Heard> {
        let mut l = AgentListener::new();
        let mut out = Vec::new();
        for i in 0..voiced + 30 {
            out.extend(l.on_packet(i.wrapping_add(65_500), i >= voiced, arrival(i)));
        }
        out
    }

    fn ended(events: &[Heard]) -> AgentUtterance {
        events
            .iter()
            .find_map(|e| match e {
                Heard::AgentEnded(u) => Some(*u),
                _ => None,
            })
            .expect("utterance ended")
    }

    #[test]
    fn on_time_audio_has_no_underrun() {
        let ev = hear(100, |i| MS(1000 + 20 * u64::from(i)));
        assert_eq!(ev[0], Heard::AgentStarted { arrival: MS(1000) });
        let u = ended(&ev);
        assert_eq!((u.frames, u.underruns, u.missing_frames), (100, 0, 0));
        assert_eq!(u.audio(), MS(2000));
    }

    #[test]
    fn a_stall_longer_than_the_buffer_is_one_underrun() {
        // Packets 50.. are held 140 ms then arrive together (sender catch-up): 60 ms of buffer
        // covers 3 frames, so a run of frames misses its time once.
        let ev = hear(100, |i| {
            let t = 1000 + 20 * u64::from(i);
            MS(if (50..57).contains(&i) {
                1000 + 20 * 57
            } else {
                t
            })
        });
        let u = ended(&ev);
        assert_eq!(u.underruns, 1);
        // Frame 50 is due at 2060 ms (60 ms of buffer); it and the three after it find
        // nothing before the held packets come at 2140 ms.
        assert_eq!(u.missing_frames, 4, "{u:?}");
    }

    #[test]
    fn jitter_within_the_buffer_is_heard_cleanly() {
        let ev = hear(100, |i| {
            MS(1000 + 20 * u64::from(i) + u64::from(i % 3) * 19)
        });
        assert_eq!(ended(&ev).underruns, 0);
    }

    #[test]
    fn packets_stopping_end_the_utterance_by_time() {
        let mut l = AgentListener::new();
        for i in 0..10u16 {
            l.on_packet(i, false, MS(20 * u64::from(i)));
        }
        assert!(l.agent_speaking());
        assert_eq!(l.on_time(MS(500)), None);
        let Some(Heard::AgentEnded(u)) = l.on_time(MS(800)) else {
            panic!("not ended")
        };
        assert_eq!((u.frames, u.underruns), (10, 0));
        assert!(!l.agent_speaking());
    }

    #[test]
    fn lost_packets_are_underruns() {
        let mut l = AgentListener::new();
        for i in (0..40u16).filter(|i| !(10..13).contains(i) && *i != 20) {
            l.on_packet(i, false, MS(20 * u64::from(i)));
        }
        let u = l.finish(MS(1000)).unwrap();
        assert_eq!((u.frames, u.underruns, u.missing_frames), (40, 2, 4));
    }

    proptest! {
        #[test]
        fn accounting_is_consistent(
            lateness in proptest::collection::vec(0u64..300, 1..300),
            silent in proptest::collection::vec(any::<bool>(), 1..300),
        ) {
            let mut l = AgentListener::new();
            let mut started = 0u64;
            let mut utterances = Vec::new();
            for (i, late) in lateness.iter().enumerate() {
                let quiet = silent.get(i).copied().unwrap_or(true);
                let at = MS(20 * i as u64 + late);
                match l.on_packet(i as u16, quiet, at) {
                    Some(Heard::AgentStarted { .. }) => started += 1,
                    Some(Heard::AgentEnded(u)) => utterances.push(u),
                    None => {}
                }
            }
            utterances.extend(l.finish(MS(100_000)));
            prop_assert!(utterances.len() as u64 == started);
            for u in &utterances {
                prop_assert!(u.missing_frames <= u.frames);
                prop_assert!(u.underruns <= u.missing_frames);
                prop_assert!(u.underruns <= u.frames.div_ceil(2));
                prop_assert!(u.frames >= 1);
            }
        }

        #[test]
        fn dry_runs_count(played in proptest::collection::vec(any::<bool>(), 0..200)) {
            let (runs, missing) = count_dry_runs(&played);
            prop_assert_eq!(missing as usize, played.iter().filter(|p| !**p).count());
            let starts = played.iter().enumerate()
                .filter(|(i, p)| !**p && (*i == 0 || played[i - 1])).count();
            prop_assert_eq!(runs as usize, starts);
        }
    }
}
