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

/// The `<Dial>` a call is waiting on.
#[derive(Debug)]
pub struct DialLeg {
    dial: Dial,
    call_sid: Option<String>,
    answered_at: Option<Instant>,
    limit_passed: bool,
}

impl DialLeg {
    /// A leg asked for at `dial`.
    pub fn new(dial: Dial) -> DialLeg {
        DialLeg {
            dial,
            call_sid: None,
            answered_at: None,
            limit_passed: false,
        }
    }

    /// The leg was placed as `call_sid`.
    pub fn placed(&mut self, call_sid: String) {
        self.call_sid = Some(call_sid);
    }

    /// The leg answered and is bridged from `now`.
    pub fn answered(&mut self, now: Instant) {
        self.answered_at.get_or_insert(now);
    }

    /// Whether the leg is bridged.
    pub fn is_bridged(&self) -> bool {
        self.answered_at.is_some()
    }

    /// The leg's CallSid, once placed.
    pub fn call_sid(&self) -> Option<&str> {
        self.call_sid.as_deref()
    }

    /// When the bridge reaches its `timeLimit`, once bridged (and not yet passed).
    pub fn time_limit_at(&self) -> Option<Instant> {
        if self.limit_passed {
            return None;
        }
        self.answered_at.map(|t| t + self.dial.time_limit)
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
        if let Some(sid) = end.call_sid.as_ref().or(self.call_sid.as_ref()) {
            params.push(("DialCallSid".to_string(), sid.clone()));
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
    use ontime_twilio::DialTarget;

    fn dial() -> Dial {
        Dial {
            target: DialTarget::Sip("sip:desk@pbx".into()),
            timeout: Duration::from_secs(20),
            caller_id: None,
            action: Some("https://bot/after".into()),
            action_get: true,
            time_limit: Duration::from_secs(60),
            whisper: None,
        }
    }

    #[test]
    fn the_leg_reports_twilios_dial_parameters_and_its_time_limit() {
        let t0 = Instant::now();
        let mut leg = DialLeg::new(dial());
        assert_eq!(leg.time_limit_at(), None);
        leg.placed("CA01".into());
        leg.answered(t0);
        leg.answered(t0 + Duration::from_secs(5));
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
