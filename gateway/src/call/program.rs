//! What the call-control API and the agent ask a call to do besides talking, sans-IO: the
//! TwiML verbs a call runs one after another ([`Program`]) and the blind transfer by REFER in
//! flight ([`PendingTransfer`]). The call core feeds them the time and the dialog's answers and
//! turns their [`Step`]s into SIP requests and sender work.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ontime_twilio::{Dial, DialTarget, Verb};

use crate::agent::TransferResult;

/// `Reason` of the BYE when the API or TwiML hangs up (Twilio's `Status=completed`, `<Hangup/>`):
/// Q.850 cause 16, normal call clearing.
pub const REASON_NORMAL_CLEARING: &str = "Q.850;cause=16;text=\"Normal call clearing\"";
/// `Reason` of the BYE for `<Reject>` on a call already answered: Q.850 cause 21, call rejected.
pub const REASON_CALL_REJECTED: &str = "Q.850;cause=21;text=\"Call rejected\"";

/// Spacing of digits sent by SIP INFO (the caller offered no telephone-event): one digit per
/// tone-and-gap of the RTP path, so both paths play a sequence in the same time.
pub const INFO_DIGIT_SPACING: Duration = Duration::from_millis(200);
/// Tone length written into an INFO's `Duration=`.
pub const INFO_DIGIT_TONE: Duration = Duration::from_millis(100);
/// `w` in `<Play digits>`: half a second, as Twilio defines it.
pub const DIGIT_PAUSE: Duration = Duration::from_millis(500);

/// How long an accepted REFER may take to report its outcome (the target rings meanwhile)
/// before the transfer counts as failed and the call stays with the bot.
pub const TRANSFER_WAIT: Duration = Duration::from_secs(60);

/// One thing a program asks the call to do now.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send BYE with this `Reason`; the program is over.
    Hangup(&'static str),
    /// Queue these digits on the sender as RFC 4733 events; answer with
    /// [`Program::digits_queued`].
    SendDigits(String),
    /// Send this digit by SIP INFO.
    InfoDigit(char),
    /// Transfer the caller: send REFER; answer with [`Program::transfer_done`].
    Transfer(DialTarget),
    /// Call someone and bridge the caller to them; answer with [`Program::dial_ended`] or
    /// [`Program::await_action`].
    Dial(Dial),
    /// Bridge the call to this bot instead of the current agent; the program is over.
    Connect {
        /// `ws://` or `wss://`.
        url: String,
        /// `customParameters`.
        parameters: Vec<(String, String)>,
        /// Its audio format.
        audio: ontime_twilio::StreamAudio,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Ready,
    Until(Instant),
    /// The sender has been asked to queue digits; it says how long they take.
    DigitsQueued,
    /// A REFER is in flight.
    Transfer,
    /// A `<Dial>`'s leg rings or is bridged.
    Dial,
    /// The `<Dial>`'s `action` TwiML is being fetched.
    Action,
}

/// The verbs a call runs, one at a time.
#[derive(Debug)]
pub struct Program {
    verbs: VecDeque<Verb>,
    wait: Wait,
    /// Digits of a `<Play digits>` going out by SIP INFO, one per [`INFO_DIGIT_SPACING`].
    info_digits: VecDeque<char>,
    /// `<Dial>` transfers by REFER instead of bridging (`--dial-by-refer`).
    dial_by_refer: bool,
}

impl Default for Program {
    fn default() -> Self {
        Program {
            verbs: VecDeque::new(),
            wait: Wait::Ready,
            info_digits: VecDeque::new(),
            dial_by_refer: false,
        }
    }
}

impl Program {
    /// Run these verbs from now on instead of whatever ran (Twilio's redirect). A transfer
    /// already in flight keeps being followed; its outcome no longer resumes anything.
    pub fn replace(&mut self, verbs: Vec<Verb>) {
        self.verbs = verbs.into();
        self.info_digits.clear();
        self.wait = Wait::Ready;
    }

    /// `<Dial>` becomes a blind transfer by REFER (its attributes, which describe a bridged
    /// leg, then do not apply).
    pub fn set_dial_by_refer(&mut self, by_refer: bool) {
        self.dial_by_refer = by_refer;
    }

    /// Run this verb after what is queued (the agent's own requests).
    pub fn push(&mut self, verb: Verb) {
        self.verbs.push_back(verb);
    }

    /// Whether nothing is left to run or waited on.
    pub fn is_idle(&self) -> bool {
        self.verbs.is_empty() && self.info_digits.is_empty() && self.wait == Wait::Ready
    }

    /// When the program wants to be polled again, if it waits for time.
    pub fn wake_at(&self) -> Option<Instant> {
        match self.wait {
            Wait::Until(t) => Some(t),
            _ => None,
        }
    }

    /// The next step due at `now`, if any. `rtp_digits`: the caller negotiated
    /// telephone-event and a stream is sending (else digits go by SIP INFO).
    pub fn poll(&mut self, now: Instant, rtp_digits: bool) -> Option<Step> {
        loop {
            match self.wait {
                Wait::Until(t) if now < t => return None,
                Wait::DigitsQueued | Wait::Transfer | Wait::Dial | Wait::Action => return None,
                Wait::Until(_) | Wait::Ready => self.wait = Wait::Ready,
            }
            if let Some(d) = self.info_digits.pop_front() {
                if d.eq_ignore_ascii_case(&'w') {
                    self.wait = Wait::Until(now + DIGIT_PAUSE);
                    continue;
                }
                self.wait = Wait::Until(now + INFO_DIGIT_SPACING);
                return Some(Step::InfoDigit(d.to_ascii_uppercase()));
            }
            match self.verbs.pop_front()? {
                Verb::Hangup => {
                    self.verbs.clear();
                    return Some(Step::Hangup(REASON_NORMAL_CLEARING));
                }
                Verb::Reject { .. } => {
                    // Answered already: rejecting means hanging up.
                    self.verbs.clear();
                    return Some(Step::Hangup(REASON_CALL_REJECTED));
                }
                Verb::Pause(d) => self.wait = Wait::Until(now + d),
                Verb::PlayDigits(digits) if rtp_digits => {
                    self.wait = Wait::DigitsQueued;
                    return Some(Step::SendDigits(digits));
                }
                Verb::PlayDigits(digits) => self.info_digits = digits.chars().collect(),
                Verb::Transfer(target) => {
                    self.wait = Wait::Transfer;
                    return Some(Step::Transfer(target));
                }
                // A REFER names one target: the `<Dial>`'s first party (the parser gives it at
                // least one).
                Verb::Dial(dial) if self.dial_by_refer => {
                    if let Some(first) = dial.nouns.into_iter().next() {
                        self.wait = Wait::Transfer;
                        return Some(Step::Transfer(first.target));
                    }
                }
                Verb::Dial(dial) => {
                    self.wait = Wait::Dial;
                    return Some(Step::Dial(dial));
                }
                Verb::ConnectStream {
                    url,
                    parameters,
                    audio,
                } => {
                    self.verbs.clear();
                    return Some(Step::Connect {
                        url,
                        parameters,
                        audio,
                    });
                }
            }
        }
    }

    /// The sender queued the digits of [`Step::SendDigits`] and they play for `took` (None:
    /// it refused them; the program goes on).
    pub fn digits_queued(&mut self, took: Option<Duration>, now: Instant) {
        if self.wait == Wait::DigitsQueued {
            self.wait = match took {
                Some(d) => Wait::Until(now + d),
                None => Wait::Ready,
            };
        }
    }

    /// The leg of [`Step::Dial`] is over and the `<Dial>` had no `action`: the next verb runs,
    /// and the call ends after the last (as Twilio's: the agent the call had before the
    /// `<Dial>` was let go of when it began).
    pub fn dial_ended(&mut self) {
        if self.wait == Wait::Dial {
            self.wait = Wait::Ready;
            self.verbs.push_back(Verb::Hangup);
        }
    }

    /// The leg of [`Step::Dial`] is over and its `action` is being fetched: nothing runs
    /// until [`Program::run_action`].
    pub fn await_action(&mut self) {
        if self.wait == Wait::Dial {
            self.wait = Wait::Action;
        }
    }

    /// The `action`'s TwiML: it replaces what was left, and the call ends after it.
    pub fn run_action(&mut self, verbs: Vec<Verb>) {
        if self.wait == Wait::Action {
            self.replace(verbs);
            self.verbs.push_back(Verb::Hangup);
        }
    }

    /// The transfer of [`Step::Transfer`] failed or was refused: the program goes on.
    pub fn transfer_done(&mut self) {
        if self.wait == Wait::Transfer {
            self.wait = Wait::Ready;
        }
    }
}

/// The outcome of a transfer, for the agent, the status callback and the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferOutcome {
    /// The Refer-To URI, without the X- headers it may carry.
    pub target: String,
    /// What happened.
    pub result: TransferResult,
    /// The SIP status that decided it (the REFER's final response, or the sipfrag's), if any.
    pub sip_status: Option<u16>,
}

/// A REFER in flight (RFC 3515): its 2xx says the trunk took the job; the NOTIFYs' sipfrag
/// says how the new call went.
#[derive(Debug)]
pub struct PendingTransfer {
    target: String,
    give_up_at: Instant,
}

impl PendingTransfer {
    /// A REFER to `target` sent at `now`.
    pub fn new(target: String, now: Instant) -> PendingTransfer {
        PendingTransfer {
            target,
            give_up_at: now + TRANSFER_WAIT,
        }
    }

    fn outcome(&self, result: TransferResult, sip_status: Option<u16>) -> TransferOutcome {
        TransferOutcome {
            target: self.target.clone(),
            result,
            sip_status,
        }
    }

    /// The REFER's final response: a refusal decides; an acceptance waits for the NOTIFYs.
    pub fn on_response(&self, status: u16) -> Option<TransferOutcome> {
        (status >= 300).then(|| self.outcome(TransferResult::Rejected, Some(status)))
    }

    /// A NOTIFY's sipfrag status: a final one decides; the subscription ending without one
    /// is a failure.
    pub fn on_progress(&self, status: u16, terminated: bool) -> Option<TransferOutcome> {
        match status {
            200..=299 => Some(self.outcome(TransferResult::Completed, Some(status))),
            300.. => Some(self.outcome(TransferResult::Failed, Some(status))),
            _ if terminated => Some(self.outcome(TransferResult::Failed, Some(status))),
            _ => None,
        }
    }

    /// Time passed: no outcome in [`TRANSFER_WAIT`] is a failure.
    pub fn on_timeout(&self, now: Instant) -> Option<TransferOutcome> {
        (now >= self.give_up_at).then(|| self.outcome(TransferResult::Failed, None))
    }
}

/// The Refer-To URI of a `<Dial>` target: a SIP URI as written; a number at the trunk's host
/// (`domain`), where the provider routes it.
pub fn refer_to(target: &DialTarget, domain: &str) -> String {
    match target {
        DialTarget::Sip(uri) => uri.trim().to_string(),
        DialTarget::Number(n) => format!("sip:{}@{domain}", n.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_run_in_order_with_their_waits() {
        let t0 = Instant::now();
        let mut p = Program::default();
        p.replace(vec![
            Verb::Pause(Duration::from_secs(1)),
            Verb::PlayDigits("1w2".into()),
            Verb::Hangup,
        ]);
        assert_eq!(p.poll(t0, false), None);
        assert_eq!(p.wake_at(), Some(t0 + Duration::from_secs(1)));
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(p.poll(t1, false), Some(Step::InfoDigit('1')));
        assert_eq!(p.poll(t1 + INFO_DIGIT_SPACING, false), None); // the `w`
        let t2 = t1 + INFO_DIGIT_SPACING + DIGIT_PAUSE;
        assert_eq!(p.poll(t2, false), Some(Step::InfoDigit('2')));
        assert_eq!(
            p.poll(t2 + INFO_DIGIT_SPACING, false),
            Some(Step::Hangup(REASON_NORMAL_CLEARING))
        );
        assert_eq!(p.poll(t2 + Duration::from_secs(9), false), None);
    }

    #[test]
    fn rtp_digits_wait_for_the_sender_and_transfers_for_their_outcome() {
        let t0 = Instant::now();
        let mut p = Program::default();
        p.replace(vec![
            Verb::PlayDigits("9#".into()),
            Verb::Transfer(DialTarget::Number("+15550100".into())),
            Verb::Hangup,
        ]);
        assert_eq!(p.poll(t0, true), Some(Step::SendDigits("9#".into())));
        assert_eq!(p.poll(t0 + Duration::from_secs(5), true), None);
        p.digits_queued(Some(Duration::from_millis(400)), t0);
        assert_eq!(p.poll(t0 + Duration::from_millis(399), true), None);
        let t1 = t0 + Duration::from_millis(400);
        let Some(Step::Transfer(target)) = p.poll(t1, true) else {
            panic!("transfer expected");
        };
        assert_eq!(
            refer_to(&target, "trunk.example:5060"),
            "sip:+15550100@trunk.example:5060"
        );
        assert_eq!(p.poll(t1 + Duration::from_secs(100), true), None);
        p.transfer_done();
        assert_eq!(p.poll(t1, true), Some(Step::Hangup(REASON_NORMAL_CLEARING)));
    }

    #[test]
    fn connect_ends_the_program_and_replace_cancels_waits() {
        let t0 = Instant::now();
        let mut p = Program::default();
        p.replace(vec![Verb::Pause(Duration::from_secs(60))]);
        assert_eq!(p.poll(t0, true), None);
        p.replace(vec![
            Verb::ConnectStream {
                url: "ws://bot".into(),
                parameters: vec![("a".into(), "b".into())],
                audio: Default::default(),
            },
            Verb::Hangup,
        ]);
        assert!(matches!(p.poll(t0, true), Some(Step::Connect { .. })));
        assert_eq!(p.poll(t0, true), None);
    }

    fn dial(action: Option<&str>) -> Dial {
        Dial {
            nouns: vec![ontime_twilio::DialNoun {
                target: DialTarget::Number("+15550100".into()),
                whisper: None,
            }],
            timeout: Duration::from_secs(30),
            caller_id: None,
            action: action.map(str::to_string),
            action_get: false,
            time_limit: Duration::from_secs(3600),
            answer_on_bridge: false,
        }
    }

    #[test]
    fn a_dial_waits_for_its_leg_then_runs_on_and_hangs_up_after_the_last_verb() {
        let t0 = Instant::now();
        let mut p = Program::default();
        p.replace(vec![Verb::Dial(dial(None)), Verb::PlayDigits("1".into())]);
        assert_eq!(p.poll(t0, true), Some(Step::Dial(dial(None))));
        assert_eq!(p.poll(t0 + Duration::from_secs(600), true), None);
        p.dial_ended();
        assert_eq!(p.poll(t0, true), Some(Step::SendDigits("1".into())));
        p.digits_queued(None, t0);
        assert_eq!(p.poll(t0, true), Some(Step::Hangup(REASON_NORMAL_CLEARING)));
        assert_eq!(p.poll(t0, true), None);
    }

    #[test]
    fn a_dials_action_replaces_what_was_left_and_by_refer_it_transfers() {
        let t0 = Instant::now();
        let mut p = Program::default();
        p.replace(vec![
            Verb::Dial(dial(Some("https://a/after"))),
            Verb::Pause(Duration::from_secs(5)),
        ]);
        assert!(matches!(p.poll(t0, true), Some(Step::Dial(_))));
        p.await_action();
        assert_eq!(p.poll(t0, true), None);
        // Nothing but the action's TwiML runs, then the call ends.
        p.run_action(vec![Verb::PlayDigits("9".into())]);
        assert_eq!(p.poll(t0, true), Some(Step::SendDigits("9".into())));
        p.digits_queued(None, t0);
        assert_eq!(p.poll(t0, true), Some(Step::Hangup(REASON_NORMAL_CLEARING)));

        let mut p = Program::default();
        p.set_dial_by_refer(true);
        p.replace(vec![Verb::Dial(dial(None))]);
        assert_eq!(
            p.poll(t0, true),
            Some(Step::Transfer(DialTarget::Number("+15550100".into())))
        );
    }

    #[test]
    fn transfer_outcomes_follow_rfc_3515() {
        let t0 = Instant::now();
        let t = PendingTransfer::new("sip:agent@192.0.2.55".into(), t0);
        assert_eq!(t.on_response(202), None);
        let declined = t.on_response(603).unwrap();
        assert_eq!(declined.result, TransferResult::Rejected);
        assert_eq!(declined.sip_status, Some(603));
        assert_eq!(t.on_progress(100, false), None);
        assert_eq!(t.on_progress(180, false), None);
        assert_eq!(
            t.on_progress(200, true).unwrap().result,
            TransferResult::Completed
        );
        assert_eq!(
            t.on_progress(486, true).unwrap().result,
            TransferResult::Failed
        );
        assert_eq!(
            t.on_progress(100, true).unwrap().result,
            TransferResult::Failed
        );
        assert_eq!(
            t.on_timeout(t0 + TRANSFER_WAIT - Duration::from_millis(1)),
            None
        );
        assert_eq!(
            t.on_timeout(t0 + TRANSFER_WAIT).unwrap().result,
            TransferResult::Failed
        );
    }
}
