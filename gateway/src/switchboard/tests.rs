//! Flows through the switchboard on simulated time ([`super::harness`]): each runs in
//! milliseconds what takes seconds to minutes against the real binary.

use std::time::Duration;

use ontime_sip::sdp::{self, Direction, LocalMedia};
use ontime_sip::{EndReason, Event, Transport};
use ontime_twilio::{CallStatus, NewCall, Verb, XHeaders};

use super::harness::{addr, Harness, RouteMode, GATEWAY, TRUNK};
use super::{Action, Counted, RegistryNote, LINGER};
use crate::admission::RejectReason;
use crate::agent::Admission;
use crate::call::tests::{speech_started, speech_stopped, turn_ended};
use crate::call::AgentNotice;
use crate::call::{CallCommand, DialogEvent, SipRequest};
use crate::config::{Config, TrunkUri, UntrustedSip};
use crate::records::cdr::EndCause;
use crate::registry::RegistryRequest;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn with(f: impl FnOnce(&mut Config)) -> Harness {
    let mut c = Harness::config();
    f(&mut c);
    Harness::new(c)
}

/// The gateway's answer to the trunk's INVITE (the SDP of its 200).
fn answered(h: &Harness) -> Option<sdp::SessionDescription> {
    h.peer_events.iter().find_map(|e| match e {
        Event::Answered { answer, .. } => answer.clone(),
        _ => None,
    })
}

fn ended(h: &Harness) -> Option<EndReason> {
    h.peer_events.iter().find_map(|e| match e {
        Event::Ended { reason, .. } => Some(reason.clone()),
        _ => None,
    })
}

fn count_of(h: &Harness, counted: &Counted) -> usize {
    h.actions
        .iter()
        .filter(|a| matches!(a, Action::Count(c) if c == counted))
        .count()
}

fn registry_ended(h: &Harness) -> Vec<(CallStatus, Option<u16>)> {
    h.actions
        .iter()
        .filter_map(|a| match a {
            Action::Registry(RegistryNote::Ended {
                status, sip_status, ..
            }) => Some((*status, *sip_status)),
            _ => None,
        })
        .collect()
}

fn to_call(h: &Harness) -> Vec<DialogEvent> {
    h.actions
        .iter()
        .filter_map(|a| match a {
            Action::ToCall(_, e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// The wire of an inbound call answered at once.
fn answered_lines() -> Vec<String> {
    vec![
        format!("< INVITE sip:bot@{GATEWAY} SIP/2.0"),
        "> SIP/2.0 100 Trying".into(),
        "> SIP/2.0 200 OK".into(),
        "< ACK sip:ontime@127.0.0.1:5060 SIP/2.0".into(),
    ]
}

#[test]
fn inbound_call_is_answered_and_ends_on_the_callers_bye() {
    let mut h = Harness::new(Harness::config());
    let call = h.call_in();
    assert_eq!(h.lines(), answered_lines());
    let answer = answered(&h).expect("an SDP answer in the 200");
    let media = sdp::read_answer(&answer, &LocalMedia::new(addr("127.0.0.1:40000"), 11))
        .expect("a usable answer");
    let port = media.remote_rtp.expect("an RTP address").port();
    assert!(
        (h.rtp_ports.first..=h.rtp_ports.last).contains(&port) && port.is_multiple_of(2),
        "{port}"
    );
    assert_eq!(h.live.len(), 1);
    assert_eq!(h.slots.active(), 1);
    let want = [
        "Registry(Inbound(",
        "Record(Start)",
        "Route(",
        "Count(Answered { transport: \"udp\", media: \"rtp\" })",
        "StartCall(",
        "ToCall(",
    ];
    assert_eq!(h.log.len(), want.len(), "{:#?}", h.log);
    for (got, want) in h.log.iter().zip(want) {
        assert!(got.starts_with(want), "{got} is not {want}: {:#?}", h.log);
    }
    assert_eq!(to_call(&h), [DialogEvent::Established]);

    h.peer.hangup(call, h.now).unwrap();
    h.pump();
    assert_eq!(
        to_call(&h).last(),
        Some(&DialogEvent::Ended(EndCause::CallerBye))
    );
    assert!(h.live.is_empty());
    assert_eq!(h.slots.active(), 0, "the ended call's slot is back");
    assert_eq!(h.board.live_calls(), 0);
}

#[test]
fn ring_time_rings_first_and_answers_when_it_is_over() {
    let mut h = with(|c| c.answer_delay = ms(2000));
    h.call_in();
    assert_eq!(h.count(true, "SIP/2.0 180"), 1);
    assert_eq!(h.count(true, "SIP/2.0 200"), 0);
    h.advance(ms(1999));
    assert_eq!(h.count(true, "SIP/2.0 200"), 0);
    h.advance(ms(1));
    let ok: Vec<Duration> = h
        .wire
        .iter()
        .filter(|s| s.from_gateway && s.line.starts_with("SIP/2.0 200"))
        .map(|s| s.at)
        .collect();
    assert_eq!(ok, [ms(2000)]);
    assert_eq!(h.live.len(), 1);
}

#[test]
fn cancel_while_ringing_gets_487_frees_the_slot_and_records_the_call() {
    let mut h = with(|c| c.answer_delay = ms(5000));
    let call = h.call_in();
    assert_eq!(h.slots.active(), 1);
    h.advance(ms(1000));
    h.peer.cancel(call, h.now).unwrap();
    h.pump();
    assert_eq!(h.count(true, "SIP/2.0 487"), 1, "{:#?}", h.lines());
    assert_eq!(ended(&h), Some(EndReason::Cancelled));
    assert_eq!(h.slots.active(), 0);
    assert_eq!(registry_ended(&h), [(CallStatus::Canceled, None)]);
    assert_eq!(count_of(&h, &Counted::EndedUnanswered("cancelled")), 1);
    assert_eq!(
        h.actions
            .iter()
            .filter(|a| matches!(a, Action::Abandon(_)))
            .count(),
        1
    );
    // The ring timer fires into nothing: no answer, no call.
    h.advance(ms(10_000));
    assert_eq!(h.count(true, "SIP/2.0 200 OK"), 1, "only the CANCEL's 200");
    assert!(h.live.is_empty());
}

#[test]
fn a_route_that_waits_rings_then_answers_on_its_verdict() {
    let mut h = Harness::new(Harness::config());
    h.route = RouteMode::Held;
    h.call_in();
    assert_eq!(h.count(true, "SIP/2.0 180"), 1);
    h.advance(ms(3000));
    assert_eq!(h.count(true, "SIP/2.0 200"), 0);
    h.give_verdict(Admission::Answer);
    assert_eq!(h.count(true, "SIP/2.0 200"), 1);
    assert_eq!(h.live.len(), 1);
}

#[test]
fn a_route_that_says_busy_gets_486_and_frees_the_slot() {
    let mut h = Harness::new(Harness::config());
    h.route = RouteMode::Held;
    h.call_in();
    h.give_verdict(Admission::Refuse { busy: true });
    assert_eq!(h.count(true, "SIP/2.0 486"), 1, "{:#?}", h.lines());
    assert_eq!(registry_ended(&h), [(CallStatus::Busy, Some(486))]);
    assert_eq!(count_of(&h, &Counted::Rejected(RejectReason::Busy)), 1);
    assert_eq!(h.slots.active(), 0);
}

#[test]
fn the_callers_cancel_before_the_verdict_releases_the_agent_once_more_when_it_comes() {
    let mut h = Harness::new(Harness::config());
    h.route = RouteMode::Held;
    let call = h.call_in();
    h.peer.cancel(call, h.now).unwrap();
    h.pump();
    h.give_verdict(Admission::Answer);
    assert_eq!(h.count(true, "SIP/2.0 200 OK"), 1, "only the CANCEL's 200");
    let abandons = h
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Abandon(_)))
        .count();
    // One when the call ended, one when the verdict found it gone (the agent may have
    // prepared between the two).
    assert_eq!(abandons, 2);
    assert!(h.live.is_empty());
}

#[test]
fn at_max_calls_an_invite_gets_503_with_retry_after() {
    let mut h = with(|c| c.max_calls = 1);
    h.call_in();
    h.call_in();
    assert_eq!(h.count(true, "SIP/2.0 503"), 1, "{:#?}", h.lines());
    let refusal = h
        .wire
        .iter()
        .find(|s| s.line.starts_with("SIP/2.0 503"))
        .unwrap();
    assert!(
        refusal.text.contains("\r\nRetry-After: 5\r\n"),
        "{}",
        refusal.text
    );
    assert_eq!(count_of(&h, &Counted::Rejected(RejectReason::MaxCalls)), 1);
    assert_eq!(h.live.len(), 1);
    assert_eq!(h.slots.active(), 1);
}

/// The first OPTIONS after a change of headroom made outside the switchboard (the estimate
/// runs on its own task) is answered from the new state: a gateway answered its first ping from
/// the state at its start, and a front door took it out.
#[test]
fn options_are_answered_from_the_headroom_of_the_moment() {
    let mut h = with(|c| c.admission_reserve = 1);
    let options = |h: &mut Harness| {
        let target = format!("sip:{GATEWAY}");
        h.peer
            .send_options(&target, addr(GATEWAY), Transport::Udp, h.now)
            .unwrap();
        h.pump();
        let last = h
            .wire
            .iter()
            .rev()
            .find(|s| s.from_gateway)
            .unwrap()
            .clone();
        let headroom = last
            .text
            .lines()
            .find_map(|l| l.strip_prefix("X-Ontime-Headroom: "))
            .map(str::to_string);
        (last.line, headroom)
    };
    h.slots.set_headroom(0);
    assert_eq!(
        options(&mut h),
        ("SIP/2.0 503 Service Unavailable".into(), Some("0".into()))
    );
    h.slots.set_headroom(4);
    assert_eq!(options(&mut h), ("SIP/2.0 200 OK".into(), Some("4".into())));
    h.slots.set_headroom(0);
    h.call_in();
    assert_eq!(
        count_of(&h, &Counted::Rejected(RejectReason::NoHeadroom)),
        1
    );
}

#[test]
fn strangers_are_dropped_by_default_and_get_one_403_when_asked() {
    let mut h = with(|c| c.trunk_cidrs = vec!["10.0.0.0/8".parse().unwrap()]);
    h.call_in();
    assert_eq!(h.count(true, "SIP/2.0"), 0, "{:#?}", h.lines());
    assert_eq!(count_of(&h, &Counted::Dropped("untrusted")), 1);
    let mut h = with(|c| {
        c.trunk_cidrs = vec!["10.0.0.0/8".parse().unwrap()];
        c.untrusted_sip = UntrustedSip::Reject;
    });
    h.call_in();
    assert_eq!(h.count(true, "SIP/2.0 403"), 1, "{:#?}", h.lines());
    assert_eq!(count_of(&h, &Counted::Untrusted), 1);
    assert_eq!(h.slots.active(), 0);
}

#[test]
fn a_lost_200_is_retransmitted_and_the_call_is_established_once() {
    let mut h = Harness::new(Harness::config());
    let mut dropped = false;
    h.drop = Box::new(move |from_gateway, line| {
        if from_gateway && line.starts_with("SIP/2.0 200") && !dropped {
            dropped = true;
            return true;
        }
        false
    });
    h.call_in();
    assert_eq!(h.count(true, "SIP/2.0 200"), 1);
    assert!(to_call(&h).is_empty());
    // RFC 3261 §13.3.1.4: the 200 again after T1 (500 ms).
    h.advance(ms(500));
    assert_eq!(h.count(true, "SIP/2.0 200"), 2, "{:#?}", h.lines());
    assert_eq!(to_call(&h), [DialogEvent::Established]);
    h.advance(ms(10_000));
    assert_eq!(h.count(true, "SIP/2.0 200"), 2, "{:#?}", h.lines());
}

#[test]
fn hold_and_resume_reach_the_call_as_new_media() {
    let mut h = Harness::new(Harness::config());
    let call = h.call_in();
    let mut hold = LocalMedia::new(addr("127.0.0.1:40000"), 11);
    hold.direction = Direction::SendOnly;
    hold.session_version = 2;
    h.peer
        .reinvite(call, &sdp::build_offer(&hold), h.now)
        .unwrap();
    h.pump();
    let mut resume = LocalMedia::new(addr("127.0.0.1:40000"), 11);
    resume.session_version = 3;
    h.peer
        .reinvite(call, &sdp::build_offer(&resume), h.now)
        .unwrap();
    h.pump();
    let directions: Vec<Direction> = to_call(&h)
        .into_iter()
        .filter_map(|e| match e {
            DialogEvent::Media(m) => Some(m.local_direction),
            _ => None,
        })
        .collect();
    assert_eq!(directions, [Direction::RecvOnly, Direction::SendRecv]);
    assert_eq!(h.count(true, "SIP/2.0 200"), 3);
}

#[test]
fn a_refer_from_the_call_goes_out_and_its_answer_comes_back() {
    let mut h = Harness::new(Harness::config());
    h.call_in();
    let call = *h.live.keys().next().unwrap();
    h.board.call_request(
        call,
        SipRequest::Refer(format!("sip:+15557654321@{TRUNK}")),
        h.now,
    );
    h.pump();
    assert_eq!(h.count(true, "REFER "), 1, "{:#?}", h.lines());
    let responses: Vec<u16> = to_call(&h)
        .into_iter()
        .filter_map(|e| match e {
            DialogEvent::ReferResponse(s) => Some(s),
            _ => None,
        })
        .collect();
    // The scripted trunk does not take transfers: its 405 reaches the call, which stays up.
    assert_eq!(responses, [405], "{:#?}", h.lines());
    assert!(h.live.contains_key(&call));
}

fn trunk_config(c: &mut Config) {
    c.trunk_uri = Some(TrunkUri {
        host_port: TRUNK.into(),
        addr: addr(TRUNK),
        transport: Transport::Udp,
    });
}

fn dial(h: &mut Harness, sid: &str, timeout: Duration) {
    dial_to(h, sid, "+15557654321", XHeaders::default(), timeout);
}

fn dial_to(h: &mut Harness, sid: &str, to: &str, sip_headers: XHeaders, timeout: Duration) {
    let call = NewCall {
        to: to.into(),
        sip_headers,
        from: "+15550001111".into(),
        twiml: Vec::new(),
        twiml_url: None,
        machine_detection: None,
        timeout,
        status_callback: None,
    };
    h.board.registry_request(
        RegistryRequest::DialOut {
            sid: sid.into(),
            call: Box::new(call),
        },
        h.now,
    );
    h.pump();
}

/// The trunk's handle of the call the gateway placed.
fn incoming_at_trunk(h: &Harness) -> (ontime_sip::CallHandle, sdp::SessionDescription) {
    h.peer_events
        .iter()
        .find_map(|e| match e {
            Event::IncomingCall(i) => Some((i.call, i.offer.clone().unwrap())),
            _ => None,
        })
        .expect("the INVITE reached the trunk")
}

#[test]
fn dial_out_rings_then_is_answered_and_started() {
    let mut h = with(trunk_config);
    dial(&mut h, "CA1", Duration::from_secs(30));
    assert_eq!(
        h.lines()[0],
        format!("> INVITE sip:+15557654321@{TRUNK} SIP/2.0")
    );
    let (call, offer) = incoming_at_trunk(&h);
    h.peer.ring(call, h.now).unwrap();
    h.pump();
    assert!(h.actions.iter().any(|a| matches!(
        a,
        Action::Registry(RegistryNote::Ringing { status: 180, .. })
    )));
    h.advance(ms(4000));
    let (answer, _) =
        sdp::answer_offer(&offer, &LocalMedia::new(addr("127.0.0.1:41000"), 5)).unwrap();
    h.peer.answer(call, &answer, h.now).unwrap();
    h.pump();
    assert_eq!(count_of(&h, &Counted::Outbound("answered")), 1);
    assert_eq!(h.live.len(), 1);
    let start = h.live.values().next().unwrap();
    assert_eq!(start.info.call_sid, "CA1");
    assert_eq!(start.negotiated.remote_rtp, Some(addr("127.0.0.1:41000")));
    // The ring timeout of an answered call fires into nothing; the callee sends no RTP, so
    // the call's RTP timeout (30 s) hangs it up with a BYE through the switchboard.
    h.advance(Duration::from_secs(29));
    assert_eq!(h.count(true, "CANCEL"), 0);
    assert_eq!(h.live.len(), 1);
    h.advance(Duration::from_secs(2));
    assert_eq!(h.count(true, "BYE "), 1, "{:#?}", h.lines());
    assert!(h.live.is_empty());
    let cdr = h.done[0].ended.as_ref().expect("an end record");
    assert_eq!(cdr.cause, Some(EndCause::RtpTimeout));
    assert_eq!(cdr.call_sid, "CA1");
    assert_eq!(h.slots.active(), 0);
}

#[test]
fn dial_out_puts_the_x_headers_of_to_on_the_invite_once() {
    let mut h = with(trunk_config);
    let target =
        ontime_twilio::SipTarget::parse(&format!("sip:bob@{TRUNK}?X-Campaign=7&X-Note=a%20b"))
            .unwrap();
    dial_to(
        &mut h,
        "CA9",
        &target.uri,
        target.headers,
        Duration::from_secs(30),
    );
    // RFC 3261 §19.1.5: the headers are on the request, not in its Request-URI or To.
    assert_eq!(h.lines()[0], format!("> INVITE sip:bob@{TRUNK} SIP/2.0"));
    let invite = h
        .peer_events
        .iter()
        .find_map(|e| match e {
            Event::IncomingCall(i) => Some(i.clone()),
            _ => None,
        })
        .expect("the INVITE reached the trunk");
    let x: Vec<(&str, &str)> = invite
        .headers
        .iter()
        .filter(|(n, _)| n.starts_with("X-"))
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(x, [("X-Campaign", "7"), ("X-Note", "a b")]);
    assert_eq!(invite.to.uri, format!("sip:bob@{TRUNK}"));
}

#[test]
fn inbound_x_headers_reach_the_route_bounded_and_the_rest_are_counted() {
    let mut h = with(|_| {});
    let mut headers: Vec<(String, String)> = (0..18)
        .map(|i| (format!("X-H{i}"), i.to_string()))
        .collect();
    headers.insert(0, ("P-Tenant".into(), "acme".into()));
    h.call_in_with(headers);
    let info = h
        .actions
        .iter()
        .find_map(|a| match a {
            Action::Route(_, info) => Some(info.clone()),
            _ => None,
        })
        .expect("routed");
    assert_eq!(info.x_headers.len(), 16);
    assert_eq!(count_of(&h, &Counted::XHeadersDropped(2)), 1);
    let params = crate::routing::webhook_params(&info);
    let sip: Vec<&(String, String)> = params
        .iter()
        .filter(|(k, _)| k.starts_with("SipHeader_"))
        .collect();
    assert_eq!(sip.len(), 16);
    assert_eq!(sip[0], &("SipHeader_X-H0".to_string(), "0".to_string()));
    assert_eq!(sip[15], &("SipHeader_X-H15".to_string(), "15".to_string()));
}

#[test]
fn dial_out_to_a_busy_callee_ends_busy_with_486() {
    let mut h = with(trunk_config);
    dial(&mut h, "CA2", Duration::from_secs(30));
    let (call, _) = incoming_at_trunk(&h);
    h.peer.reject(call, 486, &[], h.now).unwrap();
    h.pump();
    assert_eq!(registry_ended(&h), [(CallStatus::Busy, Some(486))]);
    assert_eq!(count_of(&h, &Counted::Outbound("busy")), 1);
    assert_eq!(h.slots.active(), 0);
}

#[test]
fn dial_out_unanswered_is_cancelled_at_its_timeout_as_no_answer() {
    let mut h = with(trunk_config);
    dial(&mut h, "CA3", Duration::from_secs(20));
    let (call, _) = incoming_at_trunk(&h);
    h.peer.ring(call, h.now).unwrap();
    h.advance(ms(19_999));
    assert_eq!(h.count(true, "CANCEL"), 0);
    h.advance(ms(1));
    assert_eq!(h.count(true, "CANCEL"), 1, "{:#?}", h.lines());
    h.advance(ms(1000));
    // The endpoint reports its own CANCEL's 487 as `Cancelled`; after the timeout that is
    // Twilio's no-answer.
    assert_eq!(registry_ended(&h), [(CallStatus::NoAnswer, None)]);
    assert_eq!(h.slots.active(), 0);
}

#[test]
fn dial_out_without_a_trunk_fails_at_once() {
    let mut h = Harness::new(Harness::config());
    dial(&mut h, "CA4", Duration::from_secs(20));
    assert!(h.wire.is_empty());
    assert_eq!(registry_ended(&h), [(CallStatus::Failed, None)]);
}

#[test]
fn a_drain_refuses_new_calls_hangs_up_at_its_deadline_and_lingers_after_the_last_bye() {
    let mut h = Harness::new(Harness::config());
    h.call_in();
    let call = *h.live.keys().next().unwrap();
    h.board.drain(h.now + Duration::from_secs(10), h.now);
    h.pump();
    h.call_in();
    assert_eq!(h.count(true, "SIP/2.0 503"), 1, "{:#?}", h.lines());
    assert_eq!(count_of(&h, &Counted::Rejected(RejectReason::Draining)), 1);
    assert!(!h.board.is_finished(h.now));
    h.advance(ms(9_999));
    assert!(!to_call(&h).contains(&DialogEvent::Hangup(EndCause::Drained)));
    h.advance(ms(1));
    let hangups = to_call(&h)
        .into_iter()
        .filter(|e| *e == DialogEvent::Hangup(EndCause::Drained))
        .count();
    assert_eq!(hangups, 1);
    // The call hangs up as told: its BYE goes out through the switchboard, and its record
    // says why.
    assert_eq!(h.count(true, "BYE "), 1, "{:#?}", h.lines());
    assert_eq!(
        to_call(&h).last(),
        Some(&DialogEvent::Ended(EndCause::GatewayBye))
    );
    let cdr = h.done[0].ended.as_ref().expect("an end record");
    assert_eq!(cdr.cause, Some(EndCause::Drained));
    assert!(!h.live.contains_key(&call));
    // Its BYE answered, nothing is left to settle: done at once.
    assert!(h.board.is_finished(h.now));
}

/// A refusal whose ACK never comes stays unsettled (its 503 is retransmitted): a drained
/// switchboard waits for it at most LINGER after the last call ended.
#[test]
fn a_drain_lingers_for_an_unacknowledged_refusal_at_most_linger() {
    let mut h = Harness::new(Harness::config());
    h.drop = Box::new(|from_gateway, line| !from_gateway && line.starts_with("ACK"));
    h.board.drain(h.now + Duration::from_secs(30), h.now);
    h.pump();
    h.call_in();
    assert_eq!(h.count(true, "SIP/2.0 503"), 1, "{:#?}", h.lines());
    assert!(!h.board.is_finished(h.now), "the refusal is unsettled");
    h.advance(LINGER - ms(1));
    // RFC 3261 Timer G: the 503 again 0.5, 1.5 and 3.5 s after the first.
    assert_eq!(h.count(true, "SIP/2.0 503"), 4, "{:#?}", h.lines());
    assert!(!h.board.is_finished(h.now));
    h.advance(ms(1));
    assert!(h.board.is_finished(h.now));
}

/// A gateway stopped with no call ends at once, whatever transactions pings left open: it must
/// give its SIP port back for a restart.
#[test]
fn a_drain_with_no_call_finishes_at_once() {
    let mut h = Harness::new(Harness::config());
    h.peer
        .send_options(
            &format!("sip:{GATEWAY}"),
            addr(GATEWAY),
            Transport::Udp,
            h.now,
        )
        .unwrap();
    h.pump();
    assert_eq!(h.board.endpoint().active_transactions(), 1);
    h.board.drain(h.now + Duration::from_secs(30), h.now);
    assert!(h.board.is_finished(h.now));
}

/// Two runs from the same seed put the same bytes on the wire: tags, branches, Call-IDs,
/// SSRCs and CallSids come from the seeded RNG, times from the simulated clock.
#[test]
fn a_flow_repeats_to_the_byte() {
    let run = || {
        let mut h = with(|c| c.answer_delay = ms(1000));
        let call = h.call_in();
        h.advance(ms(1500));
        h.peer.hangup(call, h.now).unwrap();
        h.advance(ms(40_000));
        (
            h.wire
                .iter()
                .map(|s| (s.at, s.text.clone()))
                .collect::<Vec<_>>(),
            h.log.clone(),
        )
    };
    let (a, b) = (run(), run());
    assert_eq!(a.0.len(), b.0.len());
    // The RTP port may differ between runs (a free range is picked each time); compare the
    // rest.
    let scrub = |t: &str| {
        t.lines()
            .filter(|l| !l.starts_with("m=audio") && !l.starts_with("Content-Length"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for ((ta, xa), (tb, xb)) in a.0.iter().zip(b.0.iter()) {
        assert_eq!(ta, tb);
        assert_eq!(scrub(xa), scrub(xb));
    }
    assert_eq!(a.1, b.1);
}

fn stub_reply_packets() -> usize {
    crate::agent::StubAgent::built_in()
        .expect("the built-in reply decodes")
        .reply_samples()
        .div_ceil(160)
}

/// The stub's reply as the caller should get it: µ-law frames of 160 samples (the last padded
/// with silence), the silent ones left out.
fn stub_reply_voiced_frames() -> Vec<Vec<u8>> {
    let pcm = crate::agent::StubAgent::built_in().unwrap().reply();
    let mut ulaw = vec![0xFFu8; pcm.len().div_ceil(160) * 160];
    ontime_rtp::g711::Law::Ulaw.encode_slice(&pcm, &mut ulaw[..pcm.len()]);
    ulaw.chunks(160)
        .filter(|f| super::sim_call::is_voiced(f))
        .map(<[u8]>::to_vec)
        .collect()
}

/// The whole gateway on one clock: an inbound call is answered, the caller speaks for a second,
/// the inference thread ends the turn, the stub agent's reply is played by the sender's tick to
/// its last packet, the caller hangs up, and the call's record counts all of it.
#[test]
fn a_call_turn_reply_bye_and_record_on_one_clock() {
    let mut h = Harness::new(Harness::config());
    let trunk_call = h.call_in();
    let call = h.only_call();
    h.caller_talks(call, 50);
    h.advance(ms(100));
    h.inference(call, speech_started());
    h.advance(ms(1000));
    h.inference(call, speech_stopped());
    h.inference(call, turn_ended(true));
    let reply = Duration::from_millis(stub_reply_packets() as u64 * 20);
    // Once the caller's packets stop, the timer's ticks run 5 ms behind their phase (the
    // slack a packet gets to run the tick in its own wake): the 5 ms let the last one in.
    h.advance(reply + ms(500) + ms(5));
    let sim = &h.live[&call];
    // The VAD hears the caller's line every 20 ms, silence included, from one frame after
    // its first packet (at the answer; the jitter buffer's depth on a clean path) to now.
    let ticks = (h.now - h.start).as_millis() as usize / 20;
    assert_eq!(sim.inference_frames, ticks);
    let marks: Vec<&AgentNotice> = sim
        .notices
        .iter()
        .filter(|n| matches!(n, AgentNotice::MarkPlayed(_)))
        .collect();
    assert_eq!(marks, [&AgentNotice::MarkPlayed("reply-1".into())]);
    // The reply went out whole and in order, byte for byte.
    let want = stub_reply_voiced_frames();
    let got = sim.voiced_payloads_sent();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the caller got other audio than the reply");
    let sent = sim.packets_sent();

    h.peer.hangup(trunk_call, h.now).unwrap();
    h.pump();
    assert!(h.live.is_empty());
    assert_eq!(h.slots.active(), 0);
    let cdr = h.done[0].ended.as_ref().expect("an end record");
    assert_eq!(cdr.cause, Some(EndCause::CallerBye));
    assert_eq!(cdr.turns, 1);
    assert_eq!(cdr.barge_ins, 0);
    assert_eq!(cdr.packets_in, 50);
    assert_eq!(cdr.packets_out, sent as u64);
    assert_eq!(cdr.late_ticks, 0);
    // The wall clock of records is the harness's: answered at once.
    assert_eq!(cdr.answer_unix_ms, Some(cdr.start_unix_ms));
    let mut want = answered_lines();
    want.push("< BYE sip:ontime@127.0.0.1:5060 SIP/2.0".into());
    want.push("> SIP/2.0 200 OK".into());
    assert_eq!(h.lines(), want);
}

/// A caller who talks over the reply stops it (local barge-in): the rest of the reply is never
/// sent, and the record counts the barge-in. (Barging in at the onset: the backchannel window
/// is `call::tests`' subject.)
#[test]
fn a_barge_in_cuts_the_reply_on_one_clock() {
    let mut h = Harness::new(Config {
        barge_in_min_speech: Duration::ZERO,
        echo_canceller: false,
        ..Harness::config()
    });
    let trunk_call = h.call_in();
    let call = h.only_call();
    h.caller_talks(call, 25);
    h.inference(call, speech_started());
    h.advance(ms(500));
    h.inference(call, speech_stopped());
    h.inference(call, turn_ended(true));
    h.advance(ms(1000));
    let before = h.live[&call].voiced_packets_sent();
    h.caller_talks(call, 25);
    h.inference(call, speech_started());
    h.advance(ms(3000));
    let after = h.live[&call].voiced_packets_sent();
    // Nothing of the reply after the onset: what was sent before it is all the caller gets.
    assert_eq!(after, before, "{after} of {}", stub_reply_packets());
    assert!(after < stub_reply_packets());
    h.peer.hangup(trunk_call, h.now).unwrap();
    h.pump();
    let cdr = h.done[0].ended.as_ref().unwrap();
    assert_eq!(cdr.barge_ins, 1);
    assert_eq!(cdr.turns, 1);
}

/// TwiML that dials one party with `answerOnBridge="true"`.
fn dial_on_bridge() -> Vec<Verb> {
    vec![Verb::Dial(ontime_twilio::Dial {
        nouns: vec![ontime_twilio::DialNoun {
            target: ontime_twilio::DialTarget::Sip(format!("sip:desk@{TRUNK}")),
            whisper: None,
        }],
        timeout: Duration::from_secs(30),
        caller_id: None,
        action: None,
        action_get: false,
        time_limit: Duration::from_secs(3600),
        answer_on_bridge: true,
    })]
}

/// An inbound call routed to `<Dial answerOnBridge>`, its task started and its leg placed.
/// The harness, the gateway's handle of the call and the trunk's.
fn ringing_on_bridge() -> (Harness, ontime_sip::CallHandle, ontime_sip::CallHandle) {
    let mut h = Harness::new(Harness::config());
    h.route = RouteMode::Held;
    let at_trunk = h.call_in();
    h.give_verdict_with(Admission::Answer, dial_on_bridge());
    let call = h.only_call();
    h.command(call, CallCommand::DialPlaced("CAleg".into()));
    (h, call, at_trunk)
}

/// `<Dial answerOnBridge>`: the call rings (180) while its task runs the `<Dial>`; the INVITE
/// is answered (200, counted, noted for the registry) only when the leg is bridged.
#[test]
fn answer_on_bridge_rings_until_the_leg_answers() {
    let (mut h, call, _) = ringing_on_bridge();
    h.advance(ms(5000));
    assert_eq!(h.count(true, "SIP/2.0 200"), 0, "{:#?}", h.lines());
    assert_eq!(h.count(true, "SIP/2.0 180"), 2, "{:#?}", h.lines());
    let answered_counts = |h: &Harness| {
        h.actions
            .iter()
            .filter(|a| matches!(a, Action::Count(Counted::Answered { .. })))
            .count()
    };
    assert_eq!(answered_counts(&h), 0);
    h.command(call, CallCommand::DialAnswered("CAleg".into()));
    h.advance(ms(100));
    assert_eq!(h.count(true, "SIP/2.0 200"), 1, "{:#?}", h.lines());
    assert_eq!(answered_counts(&h), 1);
    let noted = h
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Registry(RegistryNote::Answered { .. })))
        .count();
    assert_eq!(noted, 1);
    assert!(answered(&h).is_some());
}

/// `<Dial answerOnBridge>` whose party is busy, nothing after it: the INVITE gets 486, never a
/// 200, and the call's slot is free again.
#[test]
fn answer_on_bridge_refuses_the_invite_with_the_dials_outcome() {
    let (mut h, call, _) = ringing_on_bridge();
    h.advance(ms(1000));
    h.command(
        call,
        CallCommand::DialEnded(crate::call::dial::DialEnd {
            call_sid: Some("CAleg".into()),
            status: CallStatus::Busy,
            sip_status: Some(486),
            duration_secs: 0,
        }),
    );
    h.advance(ms(1000));
    assert_eq!(h.count(true, "SIP/2.0 486"), 1, "{:#?}", h.lines());
    assert_eq!(h.count(true, "SIP/2.0 200"), 0, "{:#?}", h.lines());
    assert!(
        matches!(ended(&h), Some(EndReason::Refused { status: 486, .. })),
        "{:?}",
        ended(&h)
    );
    assert!(h.live.is_empty());
    assert_eq!(h.slots.active(), 0);
}

/// The caller gives up while an `answerOnBridge` call rings: CANCEL gets 487 and the call's
/// task learns its end (and ends its `<Dial>`).
#[test]
fn answer_on_bridge_caller_cancel_ends_the_task() {
    let (mut h, _, at_trunk) = ringing_on_bridge();
    h.advance(ms(1000));
    h.peer.cancel(at_trunk, h.now).unwrap();
    h.pump();
    h.advance(ms(500));
    assert_eq!(h.count(true, "SIP/2.0 487"), 1, "{:#?}", h.lines());
    assert!(to_call(&h).contains(&DialogEvent::Ended(EndCause::Cancelled)));
    assert!(h.live.is_empty());
    assert_eq!(h.slots.active(), 0);
}
