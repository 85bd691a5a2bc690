//! The form parameters of the requests Twilio makes to a bot's server, and so ontime too:
//! TwiML fetches (a `Url=`, a voice URL) and status callbacks. Signed with
//! [`crate::signature`]; sending them is the embedder's HTTP client's job.

use std::time::{Duration, SystemTime};

use crate::call::{CallView, StatusCallbackEvent};
use crate::date::rfc2822;

/// The API version every request names (`ApiVersion`), as Twilio's do.
pub const API_VERSION: &str = "2010-04-01";

/// Twilio's parameters describing a call, sent with every TwiML fetch and status callback.
pub fn call_params(call: &CallView) -> Vec<(String, String)> {
    let p = |k: &str, v: &str| (k.to_string(), v.to_string());
    vec![
        p("AccountSid", &call.account_sid),
        p("ApiVersion", API_VERSION),
        p("CallSid", &call.sid),
        p("CallStatus", call.status.as_str()),
        p("Called", &call.to),
        p("Caller", &call.from),
        p("Direction", call.direction.as_str()),
        p("From", &call.from),
        p("To", &call.to),
    ]
}

/// The parameters of one status callback sent at `at`: [`call_params`] with `CallStatus` as
/// the event reports it, plus `Timestamp`, `SequenceNumber`, `CallbackSource`, `CallDuration`
/// (on `completed`), `SipResponseCode` (when known) and `AnsweredBy` (once answering-machine
/// detection has decided).
pub fn status_params(
    call: &CallView,
    event: StatusCallbackEvent,
    sequence: u32,
    sip_response_code: Option<u16>,
    at: SystemTime,
) -> Vec<(String, String)> {
    let status = match event {
        StatusCallbackEvent::Initiated => "initiated",
        StatusCallbackEvent::Ringing => "ringing",
        StatusCallbackEvent::Answered => "in-progress",
        // Twilio's `completed` event carries the final status (busy, no-answer, ...).
        StatusCallbackEvent::Completed => call.status.as_str(),
    };
    let mut params = call_params(call);
    for (k, v) in params.iter_mut() {
        if k == "CallStatus" {
            *v = status.to_string();
        }
    }
    params.push(("CallbackSource".into(), "call-progress-events".into()));
    params.push(("SequenceNumber".into(), sequence.to_string()));
    params.push(("Timestamp".into(), rfc2822(at)));
    if event == StatusCallbackEvent::Completed {
        params.push((
            "CallDuration".into(),
            call.duration_secs.unwrap_or(0).to_string(),
        ));
    }
    if let Some(code) = sip_response_code {
        params.push(("SipResponseCode".into(), code.to_string()));
    }
    if let Some(answered_by) = &call.answered_by {
        params.push(("AnsweredBy".into(), answered_by.clone()));
    }
    params
}

/// The parameters carrying an answering-machine verdict: [`call_params`] plus `AnsweredBy`
/// (`human`, `machine_start`, …) and `MachineDetectionDuration` (milliseconds from the answer
/// to the verdict). The TwiML fetch of a call whose detection is not asynchronous carries them,
/// and so does the `AsyncAmdStatusCallback` of one whose detection is.
pub fn amd_params(call: &CallView, answered_by: &str, took: Duration) -> Vec<(String, String)> {
    let mut params = call_params(call);
    params.push(("AnsweredBy".into(), answered_by.to_string()));
    params.push((
        "MachineDetectionDuration".into(),
        took.as_millis().to_string(),
    ));
    params
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::call::{CallStatus, Direction};

    #[test]
    fn a_completed_event_carries_the_final_status_and_duration() {
        let t = UNIX_EPOCH + Duration::from_secs(1_283_286_988);
        let call = CallView {
            sid: "CA1".into(),
            account_sid: "AC1".into(),
            from: "+1".into(),
            to: "+2".into(),
            status: CallStatus::Busy,
            direction: Direction::OutboundApi,
            date_created: t,
            date_updated: t,
            start_time: None,
            end_time: Some(t),
            duration_secs: None,
            sip_call_id: "x".into(),
            answered_by: None,
            parent_call_sid: None,
        };
        let p = status_params(&call, StatusCallbackEvent::Completed, 3, Some(486), t);
        let get = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CallStatus"), Some("busy"));
        assert_eq!(get("CallDuration"), Some("0"));
        assert_eq!(get("SequenceNumber"), Some("3"));
        assert_eq!(get("SipResponseCode"), Some("486"));
        assert_eq!(get("Timestamp"), Some("Tue, 31 Aug 2010 20:36:28 +0000"));
        let p = status_params(&call, StatusCallbackEvent::Answered, 0, None, t);
        let get = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CallStatus"), Some("in-progress"));
        assert_eq!(get("CallDuration"), None);
        assert_eq!(get("AnsweredBy"), None);
        let mut detected = call.clone();
        detected.answered_by = Some("human".into());
        let p = status_params(&detected, StatusCallbackEvent::Completed, 4, None, t);
        assert_eq!(
            p.iter()
                .filter(|(k, v)| k == "AnsweredBy" && v == "human")
                .count(),
            1
        );
        let p = amd_params(&call, "machine_end_beep", Duration::from_millis(4321));
        let get = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("AnsweredBy"), Some("machine_end_beep"));
        assert_eq!(get("MachineDetectionDuration"), Some("4321"));
        assert_eq!(get("CallSid"), Some("CA1"));
        assert_eq!(get("AccountSid"), Some("AC1"));
    }
}
