//! Every RFC 3261 §17 timer (and RFC 6026's, and the 2xx retransmission of §13.3.1.4) and the
//! RFC 4028 session timer, on injected time: T1 = 500 ms, T2 = 4 s, T4 = 5 s.

mod common;

use std::time::Duration;

use common::*;
use ontime_sip::sdp::{self, LocalMedia};
use ontime_sip::{EndReason, Event, Transport};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn offsets(times: &[Duration]) -> Vec<f64> {
    times.iter().map(|d| d.as_secs_f64()).collect()
}

#[test]
fn timer_a_doubles_and_timer_b_ends_the_call_at_64_t1() {
    let mut net = Net::new();
    net.drop = Box::new(|from_uac, _| from_uac); // nothing reaches the UAS
    let call = net.place_call();
    net.run_until(secs(40.0));
    // Sent at 0, then A = 0.5, 1, 2, 4, 8, 16 s after each; B fires at 32 s.
    assert_eq!(
        offsets(&net.times(true, "INVITE")),
        [0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5]
    );
    assert_eq!(ended(&net.uac_events, call), Some(EndReason::Timeout));
    assert_eq!(net.uac.active_transactions(), 0);
}

#[test]
fn timer_a_stops_on_a_provisional_response() {
    let mut net = Net::new();
    net.place_call();
    net.run_until(secs(10.0));
    assert_eq!(net.count(true, "INVITE"), 1, "{:#?}", net.lines());
}

#[test]
fn timers_are_configurable() {
    let mut uac = config(UAC_ADDR);
    uac.timers.t1 = Duration::from_millis(100);
    let mut net = Net::with_configs(uac, config(UAS_ADDR));
    net.drop = Box::new(|from_uac, _| from_uac);
    let call = net.place_call();
    net.run_until(secs(10.0));
    assert_eq!(
        offsets(&net.times(true, "INVITE")),
        [0.0, 0.1, 0.3, 0.7, 1.5, 3.1, 6.3]
    );
    assert_eq!(net.uac_events.len(), 1);
    assert_eq!(ended(&net.uac_events, call), Some(EndReason::Timeout));
}

#[test]
fn timer_e_caps_at_t2_and_timer_f_reports_408() {
    let mut net = Net::new();
    net.drop = Box::new(|from_uac, _| from_uac);
    let req = net
        .uac
        .send_options("sip:10.0.0.2", addr(UAS_ADDR), Transport::Udp, net.now)
        .unwrap();
    net.run_until(secs(40.0));
    assert_eq!(
        offsets(&net.times(true, "OPTIONS")),
        [0.0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5, 23.5, 27.5, 31.5]
    );
    assert_eq!(
        net.uac_events,
        [Event::OptionsResponse {
            request: req,
            status: 408
        }]
    );
    assert_eq!(net.uac.active_transactions(), 0);
}

#[test]
fn timer_e_caps_in_dialog_requests_at_t2() {
    let mut net = Net::new();
    // An in-dialog INFO whose 200s are all lost.
    let (uac, _) = net.connected_call();
    let start = net.now - net.start;
    net.drop = Box::new(|from_uac, line| !from_uac && line.starts_with("SIP/2.0 200"));
    net.uac.send_info_dtmf(uac, '1', 100, net.now).unwrap();
    net.advance(secs(12.0));
    let t: Vec<f64> = net
        .times(true, "INFO")
        .iter()
        .map(|d| (*d - start).as_secs_f64())
        .collect();
    assert_eq!(t, [0.0, 0.5, 1.5, 3.5, 7.5, 11.5]);
}

#[test]
fn timer_k_keeps_the_transaction_for_t4_to_absorb_retransmitted_responses() {
    let mut net = Net::new();
    net.uac
        .send_options("sip:10.0.0.2", addr(UAS_ADDR), Transport::Udp, net.now)
        .unwrap();
    net.pump();
    assert_eq!(net.uac.active_transactions(), 1);
    net.advance(secs(4.9));
    assert_eq!(net.uac.active_transactions(), 1);
    net.advance(secs(0.2));
    assert_eq!(net.uac.active_transactions(), 0);
}

#[test]
fn timer_j_answers_retransmitted_requests_for_64_t1() {
    let mut net = Net::new();
    // The UAS's 200 to OPTIONS is lost: the UAC retransmits, the UAS repeats its 200 from the
    // transaction (no second processing), and forgets it after 64·T1.
    let mut lost = 0;
    net.drop = Box::new(move |from_uac, line| {
        if !from_uac && line.starts_with("SIP/2.0 200") && lost < 2 {
            lost += 1;
            return true;
        }
        false
    });
    let req = net
        .uac
        .send_options("sip:10.0.0.2", addr(UAS_ADDR), Transport::Udp, net.now)
        .unwrap();
    net.run_until(secs(2.0));
    assert_eq!(net.count(false, "SIP/2.0 200"), 3);
    assert_eq!(
        net.uac_events,
        [Event::OptionsResponse {
            request: req,
            status: 200
        }]
    );
    assert_eq!(net.uas.active_transactions(), 1);
    net.run_until(secs(32.1));
    assert_eq!(net.uas.active_transactions(), 0);
}

#[test]
fn only_transactions_still_waited_on_are_unsettled() {
    let mut net = Net::new();
    // An OPTIONS: the UAC waits for its answer; once answered, both sides' transactions only
    // absorb retransmissions (Timers K and J) and are settled.
    net.uac
        .send_options("sip:10.0.0.2", addr(UAS_ADDR), Transport::Udp, net.now)
        .unwrap();
    assert_eq!(net.uac.unsettled_transactions(), 1);
    net.pump();
    assert_eq!(
        (
            net.uac.active_transactions(),
            net.uac.unsettled_transactions()
        ),
        (1, 0)
    );
    assert_eq!(
        (
            net.uas.active_transactions(),
            net.uas.unsettled_transactions()
        ),
        (1, 0)
    );
    // A refused INVITE whose ACKs are lost: the UAS resends its 486 until the ACK, so its
    // transaction is unsettled until Timer H gives up.
    net.drop = Box::new(|from_uac, line| from_uac && line.starts_with("ACK"));
    net.place_call();
    let inc = net.incoming();
    assert_eq!(
        net.uas.unsettled_transactions(),
        1,
        "an INVITE not answered yet"
    );
    net.uas.reject(inc.call, 486, &[], net.now).unwrap();
    net.run_until(secs(10.0));
    assert_eq!(
        net.uas.unsettled_transactions(),
        1,
        "a 486 not acknowledged"
    );
    assert_eq!(
        net.uac.unsettled_transactions(),
        0,
        "the UAC has its answer"
    );
    net.run_until(secs(40.0));
    assert_eq!(net.uas.unsettled_transactions(), 0);
}

#[test]
fn timer_g_retransmits_the_final_response_and_timer_h_gives_up() {
    let mut net = Net::new();
    net.drop = Box::new(|from_uac, line| from_uac && line.starts_with("ACK"));
    net.place_call();
    let inc = net.incoming();
    net.uas.reject(inc.call, 486, &[], net.now).unwrap();
    net.run_until(secs(40.0));
    // 486 at 0, G = 0.5, 1, 2, 4, 4, ... (capped at T2) until H at 32 s. Every copy is ACKed by
    // the UAC's INVITE transaction (timer D keeps it for 32 s), and every ACK is lost.
    assert_eq!(
        offsets(&net.times(false, "SIP/2.0 486")),
        [0.0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5, 23.5, 27.5, 31.5]
    );
    assert_eq!(net.count(true, "ACK"), 11);
    assert_eq!(net.uas.active_transactions(), 0);
    assert_eq!(net.uac.active_transactions(), 0);
}

#[test]
fn timer_i_absorbs_acks_for_t4_after_confirmation() {
    let mut net = Net::new();
    net.place_call();
    let inc = net.incoming();
    net.uas.reject(inc.call, 486, &[], net.now).unwrap();
    net.pump();
    assert_eq!(net.count(false, "SIP/2.0 486"), 1);
    // The UAC's INVITE transaction (timer D, 32 s) and the UAS's (timer I, 5 s) remain.
    assert_eq!(net.uas.active_transactions(), 1);
    net.advance(secs(4.9));
    assert_eq!(net.uas.active_transactions(), 1);
    net.advance(secs(0.2));
    assert_eq!(net.uas.active_transactions(), 0);
    assert_eq!(
        net.count(false, "SIP/2.0 486"),
        1,
        "no retransmission once confirmed"
    );
    // Timer D: 32 s.
    assert_eq!(net.uac.active_transactions(), 1);
    net.run_until(secs(32.1));
    assert_eq!(net.uac.active_transactions(), 0);
}

#[test]
fn timer_d_resends_the_ack_for_a_retransmitted_final_response() {
    let mut net = Net::new();
    let mut first = true;
    net.drop = Box::new(move |from_uac, line| {
        if from_uac && line.starts_with("ACK") && first {
            first = false;
            return true;
        }
        false
    });
    net.place_call();
    let inc = net.incoming();
    net.uas.reject(inc.call, 603, &[], net.now).unwrap();
    net.run_until(secs(1.0));
    assert_eq!(net.count(false, "SIP/2.0 603"), 2);
    assert_eq!(net.count(true, "ACK"), 2);
    assert_eq!(
        net.uac_events
            .iter()
            .filter(|e| matches!(e, Event::Ended { .. }))
            .count(),
        1
    );
}

#[test]
fn the_2xx_is_retransmitted_until_the_ack_and_the_call_ends_without_one() {
    let mut net = Net::new();
    net.drop = Box::new(|from_uac, line| from_uac && line.starts_with("ACK"));
    let uac = net.place_call();
    let inc = net.incoming();
    net.uas_answer(inc.call, inc.offer.as_ref().unwrap());
    net.run_until(secs(40.0));
    assert_eq!(
        offsets(&net.times(false, "SIP/2.0 200")),
        [0.0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5, 23.5, 27.5, 31.5],
        "{:#?}",
        net.lines()
    );
    // Each retransmitted 2xx is re-ACKed by the UAC (RFC 3261 §13.2.2.4) — all lost here. At
    // 64·T1 the UAS gives up and sends BYE (RFC 3261 §13.3.1.4), which the UAC answers.
    assert_eq!(net.count(true, "ACK"), 11);
    assert_eq!(offsets(&net.times(false, "BYE")), [32.0]);
    assert_eq!(offsets(&net.times(true, "SIP/2.0 200")), [32.0]);
    assert_eq!(ended(&net.uas_events, inc.call), Some(EndReason::NoAck));
    assert_eq!(ended(&net.uac_events, uac), Some(EndReason::RemoteHangup));
}

#[test]
fn the_2xx_retransmission_stops_at_the_ack() {
    let mut net = Net::new();
    let mut acks = 0;
    net.drop = Box::new(move |from_uac, line| {
        if from_uac && line.starts_with("ACK") {
            acks += 1;
            return acks <= 2;
        }
        false
    });
    net.place_call();
    let inc = net.incoming();
    net.uas_answer(inc.call, inc.offer.as_ref().unwrap());
    net.run_until(secs(20.0));
    assert_eq!(offsets(&net.times(false, "SIP/2.0 200")), [0.0, 0.5, 1.5]);
    assert!(net
        .uas_events
        .contains(&Event::Established { call: inc.call }));
}

#[test]
fn retransmitted_invite_is_absorbed() {
    let mut net = Net::new();
    net.drop = Box::new(|from_uac, line| !from_uac && line.contains(" 100 "));
    net.place_call();
    net.run_until(secs(2.0));
    assert_eq!(net.count(true, "INVITE"), 3);
    let calls = net
        .uas_events
        .iter()
        .filter(|e| matches!(e, Event::IncomingCall(_)))
        .count();
    assert_eq!(calls, 1);
    // Each retransmission got the last response again (RFC 3261 §17.2.1).
    assert_eq!(net.count(false, "SIP/2.0 100"), 3);
    // After the answer, Accepted (RFC 6026 timer L) absorbs INVITE copies without a reply.
    let inc = net.incoming();
    net.drop = Box::new(|_, _| false);
    net.uas_answer(inc.call, inc.offer.as_ref().unwrap());
    let before = net.wire.len();
    let invite = net.wire[0].payload.clone();
    net.uas.handle_datagram(&invite, addr(UAC_ADDR), net.now);
    net.pump();
    assert_eq!(net.wire.len(), before);
}

#[test]
fn tcp_has_no_retransmissions_and_no_waits() {
    let mut net = Net::new();
    net.transport = Transport::Tcp;
    net.drop = Box::new(|from_uac, line| from_uac && line.starts_with("ACK"));
    let call = net.place_call();
    let inc = net.incoming();
    net.uas_answer(inc.call, inc.offer.as_ref().unwrap());
    net.run_until(secs(31.0));
    assert_eq!(net.count(false, "SIP/2.0 200"), 1);
    assert!(String::from_utf8_lossy(&net.wire[0].payload).contains("SIP/2.0/TCP 10.0.0.1:5060"));
    net.run_until(secs(33.0));
    assert_eq!(ended(&net.uas_events, inc.call), Some(EndReason::NoAck));
    assert_eq!(ended(&net.uac_events, call), Some(EndReason::RemoteHangup));
    // Timers J, K are zero on TCP: the BYE transactions are gone at once.
    assert_eq!(
        net.uas.active_transactions() + net.uac.active_transactions(),
        0
    );
}

fn session_invite(se: &str) -> Vec<u8> {
    let body = sdp::build_offer(&LocalMedia::new(addr("10.0.0.1:40000"), 1)).to_sdp_string();
    format!(
        "INVITE sip:bot@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKse1\r\n\
Max-Forwards: 70\r\nFrom: <sip:trunk@10.0.0.1>;tag=t1\r\nTo: <sip:bot@10.0.0.2>\r\nCall-ID: se-1\r\n\
CSeq: 1 INVITE\r\nContact: <sip:trunk@10.0.0.1:5060>\r\nSupported: timer\r\n{se}\
Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Feeds a raw INVITE to the UAS of `net` as if from the UAC's address; the UAC endpoint sees
/// the responses (and ignores them: no transaction).
fn raw_call(net: &mut Net, se: &str) -> ontime_sip::CallHandle {
    let invite = session_invite(se);
    net.uas.handle_datagram(&invite, addr(UAC_ADDR), net.now);
    net.pump();
    let inc = net.incoming();
    let (answer, _) = sdp::answer_offer(
        inc.offer.as_ref().unwrap(),
        &LocalMedia::new(addr("10.0.0.2:50000"), 2),
    )
    .unwrap();
    net.uas.answer(inc.call, &answer, net.now).unwrap();
    net.pump();
    let ack = "ACK sip:ontime@10.0.0.2:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKse2\r\n\
Max-Forwards: 70\r\nFrom: <sip:trunk@10.0.0.1>;tag=t1\r\nTo: <sip:bot@10.0.0.2>;tag=TAG\r\nCall-ID: se-1\r\n\
CSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n";
    let ok = net
        .wire
        .iter()
        .rev()
        .find(|s| s.line.starts_with("SIP/2.0 200"))
        .unwrap();
    let text = String::from_utf8_lossy(&ok.payload).into_owned();
    let tag = text
        .split("To: <sip:bot@10.0.0.2>;tag=")
        .nth(1)
        .unwrap()
        .split("\r\n")
        .next()
        .unwrap()
        .to_string();
    net.uas
        .handle_datagram(ack.replace("TAG", &tag).as_bytes(), addr(UAC_ADDR), net.now);
    net.pump();
    assert!(net
        .uas_events
        .contains(&Event::Established { call: inc.call }));
    inc.call
}

#[test]
fn session_timer_refresher_uas_sends_reinvite_at_half_interval() {
    let mut net = Net::new();
    raw_call(&mut net, "Session-Expires: 120;refresher=uas\r\n");
    let ok = net
        .wire
        .iter()
        .find(|s| s.line.starts_with("SIP/2.0 200"))
        .unwrap();
    let text = String::from_utf8_lossy(&ok.payload);
    assert!(
        text.contains("Session-Expires: 120;refresher=uas\r\n"),
        "{text}"
    );
    assert!(text.contains("Require: timer\r\n"));
    net.drop = Box::new(|_, _| true);
    net.run_until(secs(59.9));
    assert_eq!(net.count(false, "INVITE"), 0);
    net.run_until(secs(60.1));
    assert_eq!(
        net.count(false, "INVITE sip:trunk@10.0.0.1:5060"),
        1,
        "{:#?}",
        net.lines()
    );
}

#[test]
fn session_timer_refresher_uac_silence_ends_with_bye() {
    let mut net = Net::new();
    let call = raw_call(&mut net, "Session-Expires: 120;refresher=uac\r\n");
    // RFC 4028 §10: BYE at 120 − min(32, 120/3) = 88 s without a refresh.
    net.run_until(secs(87.9));
    assert_eq!(net.count(false, "BYE"), 0);
    net.run_until(secs(88.1));
    assert_eq!(net.count(false, "BYE"), 1);
    assert_eq!(
        ended(&net.uas_events, call),
        Some(EndReason::SessionExpired)
    );
}

#[test]
fn session_timer_is_reset_by_a_refresh() {
    let mut net = Net::new();
    let call = raw_call(&mut net, "Session-Expires: 120;refresher=uac\r\n");
    net.run_until(secs(60.0));
    let ok = net
        .wire
        .iter()
        .find(|s| s.line.starts_with("SIP/2.0 200"))
        .unwrap();
    let text = String::from_utf8_lossy(&ok.payload).into_owned();
    let tag = text
        .split("To: <sip:bot@10.0.0.2>;tag=")
        .nth(1)
        .unwrap()
        .split("\r\n")
        .next()
        .unwrap()
        .to_string();
    let update = format!(
        "UPDATE sip:ontime@10.0.0.2:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKup1\r\n\
Max-Forwards: 70\r\nFrom: <sip:trunk@10.0.0.1>;tag=t1\r\nTo: <sip:bot@10.0.0.2>;tag={tag}\r\nCall-ID: se-1\r\n\
CSeq: 2 UPDATE\r\nSession-Expires: 120;refresher=uac\r\nContent-Length: 0\r\n\r\n"
    );
    net.uas
        .handle_datagram(update.as_bytes(), addr(UAC_ADDR), net.now);
    net.pump();
    assert_eq!(net.wire.last().unwrap().line, "SIP/2.0 200 OK");
    net.run_until(secs(147.9));
    assert_eq!(ended(&net.uas_events, call), None);
    net.run_until(secs(148.1));
    assert_eq!(
        ended(&net.uas_events, call),
        Some(EndReason::SessionExpired)
    );
}

#[test]
fn too_small_session_interval_gets_422_with_min_se() {
    let mut net = Net::new();
    net.uas.handle_datagram(
        &session_invite("Session-Expires: 30\r\n"),
        addr(UAC_ADDR),
        net.now,
    );
    net.pump();
    let resp = net.wire.last().unwrap();
    assert_eq!(resp.line, "SIP/2.0 422 Session Interval Too Small");
    assert!(String::from_utf8_lossy(&resp.payload).contains("Min-SE: 90\r\n"));
    assert!(net.uas_events.is_empty());
}

#[test]
fn caller_asking_nothing_but_supporting_timers_gets_our_interval() {
    let mut net = Net::new();
    raw_call(&mut net, "");
    let ok = net
        .wire
        .iter()
        .find(|s| s.line.starts_with("SIP/2.0 200"))
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ok.payload).contains("Session-Expires: 1800;refresher=uas\r\n")
    );
}

#[test]
fn a_call_may_ring_longer_than_timer_b() {
    let mut net = Net::new();
    let uac = net.place_call();
    let inc = net.incoming();
    net.uas.ring(inc.call, net.now).unwrap();
    net.run_until(secs(90.0));
    assert_eq!(ended(&net.uac_events, uac), None, "{:#?}", net.lines());
    net.uas_answer(inc.call, inc.offer.as_ref().unwrap());
    assert!(net
        .uac_events
        .iter()
        .any(|e| matches!(e, Event::Answered { .. })));
}

#[test]
fn bye_while_an_offer_waits_for_the_application_answers_it_487() {
    let mut net = Net::new();
    let (uac, uas) = net.connected_call();
    let mut hold = LocalMedia::new(addr("10.0.0.1:40000"), 11);
    hold.session_version = 7;
    net.uac
        .reinvite(uac, &sdp::build_offer(&hold), net.now)
        .unwrap();
    net.pump();
    assert!(net
        .uas_events
        .iter()
        .any(|e| matches!(e, Event::OfferReceived { .. })));
    // The re-INVITE got a 100 at once, so the caller does not retransmit while we decide.
    assert_eq!(net.count(false, "SIP/2.0 100"), 2, "{:#?}", net.lines());
    net.advance(secs(2.0));
    assert_eq!(net.count(true, "INVITE"), 2);
    net.uas.hangup(uas, net.now).unwrap();
    net.pump();
    assert_eq!(net.count(false, "SIP/2.0 487"), 1, "{:#?}", net.lines());
    assert!(net
        .uac_events
        .iter()
        .any(|e| matches!(e, Event::UpdateFailed { status: 487, .. })));
    net.advance(secs(40.0));
    assert_eq!(
        net.uac.active_transactions() + net.uas.active_transactions(),
        0
    );
    assert_eq!(net.uac.active_calls() + net.uas.active_calls(), 0);
}

#[test]
fn both_sides_keep_a_long_call_alive_with_session_refreshes() {
    let mut net = Net::new();
    let (uac, uas) = net.connected_call();
    // The caller asked for 1800 s without naming a refresher; the called side took the job.
    let ok = net
        .wire
        .iter()
        .find(|s| s.line == "SIP/2.0 200 OK")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ok.payload).contains("Session-Expires: 1800;refresher=uas\r\n")
    );
    let t0 = net.now - net.start;
    net.run_until(t0 + secs(3700.0));
    let refreshes: Vec<f64> = net
        .times(false, "INVITE")
        .iter()
        .map(|d| (*d - t0).as_secs_f64())
        .collect();
    assert_eq!(
        refreshes,
        [900.0, 1800.0, 2700.0, 3600.0],
        "{:#?}",
        net.lines()
    );
    assert_eq!(
        (ended(&net.uac_events, uac), ended(&net.uas_events, uas)),
        (None, None)
    );
    // A refresh that times out ends the call from the refresher's side (RFC 4028 §10), and a
    // caller that hears nothing gives up at 1800 − 32 s after the last refresh.
    net.drop = Box::new(|from_uac, _| !from_uac);
    net.run_until(t0 + secs(3600.0 + 1767.9));
    assert_eq!(
        ended(&net.uas_events, uas),
        Some(EndReason::DialogGone { status: 408 })
    );
    assert_eq!(ended(&net.uac_events, uac), None);
    net.run_until(t0 + secs(3600.0 + 1768.1));
    assert_eq!(ended(&net.uac_events, uac), Some(EndReason::SessionExpired));
}
