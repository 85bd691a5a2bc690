//! What a call counts, reported out of the core instead of written to global metrics: the core
//! adds to a [`CallStats`] as things happen, and its driver takes it after each input and adds
//! it to the gateway's metrics (str0m's way: the state machine owns its numbers, the edge
//! publishes them). Tests read the same numbers without a metrics recorder.

use std::time::Duration;

/// Counts by a label value (reasons and results: a handful of `&'static str`s per call).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally(Vec<(&'static str, u64)>);

impl Tally {
    /// Count `n` more under `label`.
    pub fn add(&mut self, label: &'static str, n: u64) {
        match self.0.iter_mut().find(|(l, _)| *l == label) {
            Some((_, count)) => *count += n,
            None => self.0.push((label, n)),
        }
    }

    /// The count under `label` (the tests' view; the driver reads the whole tally).
    #[cfg(test)]
    pub fn get(&self, label: &str) -> u64 {
        self.0
            .iter()
            .find(|(l, _)| *l == label)
            .map_or(0, |(_, n)| *n)
    }

    /// Every label counted, with its count.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.0.iter().copied()
    }
}

/// The caller's last RTCP report block about our stream.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct PeerReport {
    /// Round-trip time, when the report let us compute it (RFC 3550 §6.4.1).
    pub rtt: Option<Duration>,
    /// The fraction of our packets the caller lost (0..1).
    pub fraction_lost: f64,
    /// Interarrival jitter the caller measured.
    pub jitter: Duration,
}

/// A call's counts since they were last taken ([`crate::call::CallCore::take_stats`]).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CallStats {
    /// Caller RTP packets taken (audio and telephone-events).
    pub rtp_received: u64,
    /// RTP and RTCP datagrams dropped, by reason (the parser's, `stun`, `wrong_source`, …).
    pub rtp_invalid: Tally,
    /// SRTP/SRTCP packets that failed authentication or replay checks (or could not be
    /// protected), by reason.
    pub srtp_dropped: Tally,
    /// RTCP report blocks about our stream received.
    pub rtcp_reports_received: u64,
    /// The latest of them.
    pub peer_report: Option<PeerReport>,
    /// Packets the jitter buffer discarded (late, duplicate) and concealed as lost.
    pub jitter_discarded: u64,
    /// See `jitter_discarded`.
    pub jitter_lost: u64,
    /// DTMF digits received, and sent (RFC 4733 or SIP INFO).
    pub dtmf_digits: u64,
    /// See `dtmf_digits`.
    pub dtmf_sent: u64,
    /// Caller turns answered, and barge-ins.
    pub turns: u64,
    /// See `turns`.
    pub barge_ins: u64,
    /// Caller speech over the reply too short to barge in (backchannels).
    pub backchannels: u64,
    /// Replies held back after a turn end, by why (`doubt`, `habit`, `words`).
    pub replies_held: Tally,
    /// Habit or doubt waits lifted at the verdict, by what lifted them (`fall`, `words`).
    pub holds_lifted: Tally,
    /// Transcripts the bot sent, by their cue (`incomplete`, `complete`, `unknown`).
    pub transcripts: Tally,
    /// Turn ends the caller resumed after before the reply was heard.
    pub turns_resumed: u64,
    /// Of those, ends whose reply had arrived and was dropped unheard (false ends caught).
    pub held_replies_dropped: u64,
    /// Caller frames the echo canceller silenced as the line's echo of the reply.
    pub echo_frames_gated: u64,
    /// Runs of audible echo it kept from the VAD (barge-ins on the bot's own voice avoided).
    pub echo_bursts_gated: u64,
    /// At the call's end, what the echo canceller found of the line (when it found the echo).
    pub echo_found: Option<ontime_echo::EchoReport>,
    /// Agent audio frames dropped: cut by a barge-in, or beyond `max_buffered`.
    pub agent_audio_cut_frames: u64,
    /// See `agent_audio_cut_frames`.
    pub agent_audio_dropped_frames: u64,
    /// Agent audio queued after each play, in seconds (histogram samples).
    pub agent_buffered_seconds: Vec<f64>,
    /// Transfers ended, by result.
    pub transfers: Tally,
    /// RTP timeouts (the caller went silent on the wire).
    pub rtp_timeouts: u64,
    /// The call ended, with this result label.
    pub ended: Option<&'static str>,
    /// The codec it ended on (with `ended`), as the SDP names it.
    pub ended_codec: Option<&'static str>,
    /// Answering-machine detection gave this verdict (Twilio's `AnsweredBy`).
    pub amd_verdict: Option<&'static str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_each_label_on_its_own() {
        let mut t = Tally::default();
        t.add("stun", 1);
        t.add("wrong_source", 2);
        t.add("stun", 3);
        assert_eq!(t.get("stun"), 4);
        assert_eq!(t.get("wrong_source"), 2);
        assert_eq!(t.get("other"), 0);
        assert_eq!(t.iter().count(), 2);
    }
}
