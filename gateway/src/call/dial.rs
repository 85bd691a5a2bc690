//! A bridged `<Dial>`, sans-IO: the second leg the call waits on, the ringback the caller
//! hears meanwhile, the leg's time limit, and what the call learns when the leg is over
//! (Twilio's `DialCallStatus` and friends, for the `action` or the next verb).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ontime_rtp::SAMPLE_RATE_HZ;
use ontime_twilio::{CallStatus, Dial};

/// How a `<Dial>`'s leg ended, as the registry saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DialEnd {
    /// The leg's CallSid (none if it could not even be placed).
    pub call_sid: Option<String>,
    /// Its final status: completed, busy, no-answer, failed or canceled.
    pub status: CallStatus,
    /// The SIP response that decided it, if one did.
    pub sip_status: Option<u16>,
    /// Whole seconds it was up.
    pub duration_secs: u64,
}

/// The `<Dial>` a call is waiting on: one leg per noun, all placed at once; the first to
/// answer is bridged (the registry ends the others), and the `<Dial>` is over when that leg
/// ends, or when every leg ended without one answering.
#[derive(Debug)]
pub struct DialLeg {
    dial: Dial,
    /// The legs placed, by CallSid.
    placed: Vec<String>,
    /// How the legs that ended unbridged ended (placed or not).
    unbridged_ends: Vec<DialEnd>,
    /// The leg bridged, and since when.
    bridged: Option<(String, Instant)>,
    limit_passed: bool,
}

impl DialLeg {
    /// A `<Dial>` asked for at `dial`.
    pub fn new(dial: Dial) -> DialLeg {
        DialLeg {
            dial,
            placed: Vec::new(),
            unbridged_ends: Vec::new(),
            bridged: None,
            limit_passed: false,
        }
    }

    /// A leg was placed as `call_sid`.
    pub fn placed(&mut self, call_sid: String) {
        self.placed.push(call_sid);
    }

    /// The leg `call_sid` answered and is bridged from `now` (the first to answer; later
    /// ones are not bridged, and the registry ends them).
    pub fn answered(&mut self, call_sid: String, now: Instant) {
        if self.bridged.is_none() {
            self.bridged = Some((call_sid, now));
        }
    }

    /// Whether a leg is bridged.
    pub fn is_bridged(&self) -> bool {
        self.bridged.is_some()
    }

    /// The legs placed that may still be up: the bridged one, or all while none is.
    pub fn live_legs(&self) -> Vec<&str> {
        match &self.bridged {
            Some((sid, _)) => vec![sid.as_str()],
            None => self
                .placed
                .iter()
                .filter(|sid| {
                    !self
                        .unbridged_ends
                        .iter()
                        .any(|e| e.call_sid.as_deref() == Some(sid.as_str()))
                })
                .map(String::as_str)
                .collect(),
        }
    }

    /// The bridged leg's CallSid.
    pub fn bridged_sid(&self) -> Option<&str> {
        self.bridged.as_ref().map(|(sid, _)| sid.as_str())
    }

    /// A leg ended: the `<Dial>`'s outcome if that ends it. The bridged leg's end ends it;
    /// before any is bridged, the last leg's end does, with the outcome of them all: a party
    /// that rang out (`no-answer`) before one that was busy, before one that failed. A leg
    /// that ends after another was bridged changes nothing.
    pub fn leg_ended(&mut self, end: DialEnd) -> Option<DialEnd> {
        // A leg of an earlier `<Dial>` of the call, ending late, is none of this one's.
        if let Some(sid) = &end.call_sid {
            if !self.placed.contains(sid) {
                return None;
            }
        }
        if let Some((sid, _)) = &self.bridged {
            return (end.call_sid.as_deref() == Some(sid.as_str())).then_some(end);
        }
        self.unbridged_ends.push(end);
        if self.unbridged_ends.len() < self.dial.nouns.len() {
            return None;
        }
        let rank = |s: CallStatus| match s {
            CallStatus::NoAnswer => 0,
            CallStatus::Busy => 1,
            CallStatus::Canceled => 2,
            CallStatus::Completed => 3,
            _ => 4,
        };
        self.unbridged_ends
            .iter()
            .min_by_key(|e| rank(e.status))
            .cloned()
    }

    /// When the bridge reaches its `timeLimit`, once bridged (and not yet passed).
    pub fn time_limit_at(&self) -> Option<Instant> {
        if self.limit_passed {
            return None;
        }
        self.bridged
            .as_ref()
            .map(|(_, t)| *t + self.dial.time_limit)
    }

    /// The time limit passed and the leg was asked to end.
    pub fn time_limit_passed(&mut self) {
        self.limit_passed = true;
    }

    /// The `action` to fetch once the leg is over (URL, GET?), if the `<Dial>` had one.
    pub fn action(&self) -> Option<(&str, bool)> {
        self.dial
            .action
            .as_deref()
            .map(|url| (url, self.dial.action_get))
    }

    /// Twilio's `Dial*` parameters for the `action` request.
    pub fn action_params(&self, end: &DialEnd) -> Vec<(String, String)> {
        let mut params = vec![
            (
                "DialCallStatus".to_string(),
                end.status.as_str().to_string(),
            ),
            (
                "DialCallDuration".to_string(),
                end.duration_secs.to_string(),
            ),
        ];
        if let Some(sid) = end.call_sid.as_deref().or(self.bridged_sid()) {
            params.push(("DialCallSid".to_string(), sid.to_string()));
        }
        if let Some(status) = end.sip_status {
            params.push(("DialSipResponseCode".to_string(), status.to_string()));
        }
        params
    }
}

/// The ringback the caller hears while the leg rings: North American ringback (ITU-T E.180
/// lists it: 440 + 480 Hz, 2 s on, 4 s off), at about −19 dBm0 per tone. One 6 s cycle,
/// generated once per process and queued again while it is short.
pub fn ringback_cycle() -> Arc<[i16]> {
    static CYCLE: OnceLock<Arc<[i16]>> = OnceLock::new();
    CYCLE
        .get_or_init(|| {
            let rate = SAMPLE_RATE_HZ as usize;
            let on = 2 * rate;
            (0..6 * rate)
                .map(|i| {
                    if i >= on {
                        return 0;
                    }
                    let t = i as f32 / SAMPLE_RATE_HZ as f32;
                    let tau = std::f32::consts::TAU;
                    let v = (tau * 440.0 * t).sin() + (tau * 480.0 * t).sin();
                    (v * 2600.0) as i16
                })
                .collect::<Vec<i16>>()
                .into()
        })
        .clone()
}

/// Ringback queued ahead of the sender below this much is topped up with another cycle.
pub const RINGBACK_LOW_WATER: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_twilio::{DialNoun, DialTarget};

    fn dial_to(parties: usize) -> Dial {
        Dial {
            nouns: (0..parties)
                .map(|i| DialNoun {
                    target: DialTarget::Sip(format!("sip:desk{i}@pbx")),
                    whisper: None,
                })
                .collect(),
            timeout: Duration::from_secs(20),
            caller_id: None,
            action: Some("https://bot/after".into()),
            action_get: true,
            time_limit: Duration::from_secs(60),
            answer_on_bridge: false,
        }
    }

    fn dial() -> Dial {
        dial_to(1)
    }

    fn end(sid: &str, status: CallStatus, sip_status: Option<u16>) -> DialEnd {
        DialEnd {
            call_sid: Some(sid.into()),
            status,
            sip_status,
            duration_secs: 0,
        }
    }

    #[test]
    fn the_first_leg_to_answer_is_bridged_and_its_end_ends_the_dial() {
        let t0 = Instant::now();
        let mut leg = DialLeg::new(dial_to(3));
        for sid in ["CA1", "CA2", "CA3"] {
            leg.placed(sid.into());
        }
        assert_eq!(leg.leg_ended(end("CA1", CallStatus::Busy, Some(486))), None);
        assert_eq!(leg.live_legs(), vec!["CA2", "CA3"]);
        leg.answered("CA3".into(), t0);
        leg.answered("CA2".into(), t0);
        assert_eq!(leg.bridged_sid(), Some("CA3"));
        assert_eq!(leg.live_legs(), vec!["CA3"]);
        // The loser, hung up by the registry, changes nothing; the winner's end ends it.
        assert_eq!(leg.leg_ended(end("CA2", CallStatus::Completed, None)), None);
        let last = end("CA3", CallStatus::Completed, None);
        assert_eq!(leg.leg_ended(last.clone()), Some(last));
    }

    #[test]
    fn with_no_leg_answering_the_dial_ends_with_the_best_outcome_of_all() {
        let mut leg = DialLeg::new(dial_to(3));
        for sid in ["CA1", "CA2"] {
            leg.placed(sid.into());
        }
        // The third could not be placed at all.
        let unplaced = DialEnd {
            call_sid: None,
            status: CallStatus::Failed,
            sip_status: None,
            duration_secs: 0,
        };
        assert_eq!(leg.leg_ended(unplaced), None);
        assert_eq!(leg.leg_ended(end("CA1", CallStatus::Busy, Some(486))), None);
        let rang_out = end("CA2", CallStatus::NoAnswer, Some(487));
        assert_eq!(leg.leg_ended(end("CA9", CallStatus::Busy, None)), None);
        assert_eq!(leg.leg_ended(rang_out.clone()), Some(rang_out));
    }

    #[test]
    fn the_leg_reports_twilios_dial_parameters_and_its_time_limit() {
        let t0 = Instant::now();
        let mut leg = DialLeg::new(dial());
        assert_eq!(leg.time_limit_at(), None);
        leg.placed("CA01".into());
        leg.answered("CA01".into(), t0);
        leg.answered("CA01".into(), t0 + Duration::from_secs(5));
        assert!(leg.is_bridged());
        assert_eq!(leg.time_limit_at(), Some(t0 + Duration::from_secs(60)));
        assert_eq!(leg.action(), Some(("https://bot/after", true)));
        let end = DialEnd {
            call_sid: None,
            status: CallStatus::Busy,
            sip_status: Some(486),
            duration_secs: 0,
        };
        assert_eq!(
            leg.action_params(&end),
            vec![
                ("DialCallStatus".to_string(), "busy".to_string()),
                ("DialCallDuration".to_string(), "0".to_string()),
                ("DialCallSid".to_string(), "CA01".to_string()),
                ("DialSipResponseCode".to_string(), "486".to_string()),
            ]
        );
    }

    #[test]
    fn ringback_is_two_seconds_of_tone_then_four_of_silence() {
        let cycle = ringback_cycle();
        let rate = SAMPLE_RATE_HZ as usize;
        assert_eq!(cycle.len(), 6 * rate);
        let rms = |x: &[i16]| {
            (x.iter().map(|s| f64::from(*s).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
        };
        assert!(rms(&cycle[..2 * rate]) > 2000.0);
        assert_eq!(rms(&cycle[2 * rate..]), 0.0);
    }
}
