//! Call flows between a UAC and a UAS endpoint on simulated time (tests/common).

mod common;

use common::*;
use ontime_sip::sdp::{self, Direction, LocalMedia};
use ontime_sip::{EndReason, Event, Method};

#[test]
fn full_call_invite_ring_answer_ack_hold_resume_bye() {
    let mut net = Net::new();
    let uac = net.place_call();
    let inc = net.incoming();
    assert_eq!(inc.request_uri, "sip:bot@10.0.0.2:5060");
    let offer = inc.offer.clone().unwrap();
    net.uas.ring(inc.call, net.now).unwrap();
    net.pump();
    assert!(net
        .uac_events
        .iter()
        .any(|e| matches!(e, Event::Progress { call, status: 180, .. } if *call == uac)));
    let answer = net.uas_answer(inc.call, &offer);
    let got = net.uac_events.iter().find_map(|e| match e {
        Event::Answered { call, answer } if *call == uac => answer.clone(),
        _ => None,
    });
    assert_eq!(got.as_ref(), Some(&answer));
    let media =
        sdp::read_answer(&got.unwrap(), &LocalMedia::new(addr("10.0.0.1:40000"), 11)).unwrap();
    assert_eq!(media.remote_rtp, Some(addr("10.0.0.2:50000")));
    assert!(net
        .uas_events
        .contains(&Event::Established { call: inc.call }));
    assert_eq!(
        net.lines(),
        [
            "> INVITE sip:bot@10.0.0.2:5060 SIP/2.0",
            "< SIP/2.0 100 Trying",
            "< SIP/2.0 180 Ringing",
            "< SIP/2.0 200 OK",
            "> ACK sip:ontime@10.0.0.2:5060 SIP/2.0",
        ]
    );

    // Hold: the UAC re-INVITEs with sendonly; the UAS answers recvonly.
    let mut hold = LocalMedia::new(addr("10.0.0.1:40000"), 11);
    hold.direction = Direction::SendOnly;
    hold.session_version = 2;
    net.uac
        .reinvite(uac, &sdp::build_offer(&hold), net.now)
        .unwrap();
    net.pump();
    let (method, offer) = net
        .uas_events
        .iter()
        .find_map(|e| match e {
            Event::OfferReceived {
                call,
                method,
                offer,
            } if *call == inc.call => Some((method.clone(), offer.clone())),
            _ => None,
        })
        .expect("re-INVITE offer reached the UAS");
    assert_eq!(method, Method::Invite);
    let (answer, media) =
        sdp::answer_offer(&offer, &LocalMedia::new(addr("10.0.0.2:50000"), 22)).unwrap();
    assert_eq!(media.local_direction, Direction::RecvOnly);
    net.uas.answer_update(inc.call, &answer, net.now).unwrap();
    net.pump();
    let held = net.uac_events.iter().find_map(|e| match e {
        Event::UpdateAnswered { call, answer } if *call == uac => answer.clone(),
        _ => None,
    });
    assert_eq!(held.unwrap().media[0].direction, Some(Direction::RecvOnly));
    assert_eq!(net.count(true, "ACK"), 2, "{:#?}", net.lines());

    // BYE from the caller.
    net.uac.hangup(uac, net.now).unwrap();
    net.pump();
    assert_eq!(
        ended(&net.uas_events, inc.call),
        Some(EndReason::RemoteHangup)
    );
    assert_eq!(
        ended(&net.uac_events, uac),
        Some(EndReason::LocalHangup { confirmed: true })
    );
    assert_eq!(net.uac.active_calls() + net.uas.active_calls(), 0);
    // Every transaction winds down after its wait timers (K, L, M, J).
    net.advance(ms(40_000));
    assert_eq!(
        net.uac.active_transactions() + net.uas.active_transactions(),
        0
    );
    assert!(net.uac.poll_timeout().is_none() && net.uas.poll_timeout().is_none());
}

#[test]
fn called_side_hangs_up() {
    let mut net = Net::new();
    let (uac, uas) = net.connected_call();
    net.uas.hangup(uas, net.now).unwrap();
    net.pump();
    assert_eq!(ended(&net.uac_events, uac), Some(EndReason::RemoteHangup));
    assert_eq!(
        ended(&net.uas_events, uas),
        Some(EndReason::LocalHangup { confirmed: true })
    );
    let bye = net.wire.iter().find(|s| s.line.starts_with("BYE")).unwrap();
    assert!(!bye.from_uac);
    // The BYE goes to the caller's Contact, From/To swapped, the caller's tag in To.
    assert_eq!(bye.line, "BYE sip:ontime@10.0.0.1:5060 SIP/2.0");
}

#[test]
fn cancelled_call_gets_200_and_487() {
    let mut net = Net::new();
    let uac = net.place_call();
    let inc = net.incoming();
    net.uas.ring(inc.call, net.now).unwrap();
    net.pump();
    net.uac.cancel(uac, net.now).unwrap();
    net.pump();
    assert_eq!(
        net.lines(),
        [
            "> INVITE sip:bot@10.0.0.2:5060 SIP/2.0",
            "< SIP/2.0 100 Trying",
            "< SIP/2.0 180 Ringing",
            "> CANCEL sip:bot@10.0.0.2:5060 SIP/2.0",
            "< SIP/2.0 200 OK",
            "< SIP/2.0 487 Request Terminated",
            "> ACK sip:bot@10.0.0.2:5060 SIP/2.0",
        ]
    );
    assert_eq!(ended(&net.uas_events, inc.call), Some(EndReason::Cancelled));
    assert_eq!(ended(&net.uac_events, uac), Some(EndReason::Cancelled));
    // The ACK for the 487 is in the INVITE transaction: same branch as the INVITE.
    let branch = |p: &[u8]| {
        let s = String::from_utf8_lossy(p).into_owned();
        s.split("branch=")
            .nth(1)
            .unwrap()
            .split([';', '\r'])
            .next()
            .unwrap()
            .to_string()
    };
    let inv = &net.wire[0].payload;
    let ack = &net.wire.last().unwrap().payload;
    assert_eq!(branch(inv), branch(ack));
    net.advance(ms(40_000));
    assert_eq!(
        net.uac.active_transactions() + net.uas.active_transactions(),
        0
    );
}

#[test]
fn cancel_before_any_provisional_waits_for_one() {
    let mut net = Net::new();
    // Drop the 100 Trying so the UAC has seen no provisional yet (RFC 3261 §9.1).
    net.drop = Box::new(|from_uac, line| !from_uac && line.contains(" 100 "));
    let uac = net.place_call();
    net.uac.cancel(uac, net.now).unwrap();
    net.pump();
    assert_eq!(net.count(true, "CANCEL"), 0);
    let inc = net.incoming();
    net.uas.ring(inc.call, net.now).unwrap();
    net.pump();
    assert_eq!(net.count(true, "CANCEL"), 1);
    assert_eq!(ended(&net.uac_events, uac), Some(EndReason::Cancelled));
}

#[test]
fn rejected_call_with_retry_after() {
    let mut net = Net::new();
    let uac = net.place_call();
    let inc = net.incoming();
    net.uas
        .reject(
            inc.call,
            503,
            &[("Retry-After".into(), "30".into())],
            net.now,
        )
        .unwrap();
    net.pump();
    let resp = net.wire.iter().find(|s| s.line.contains(" 503 ")).unwrap();
    assert!(String::from_utf8_lossy(&resp.payload).contains("\r\nRetry-After: 30\r\n"));
    assert!(matches!(
        ended(&net.uac_events, uac),
        Some(EndReason::Refused { status: 503, .. })
    ));
    assert_eq!(
        ended(&net.uas_events, inc.call),
        Some(EndReason::Rejected { status: 503 })
    );
    assert_eq!(net.count(true, "ACK"), 1);
}

#[test]
fn no_common_codec_is_answered_488() {
    let mut net = Net::new();
    let mut offer_media = LocalMedia::new(addr("10.0.0.1:40000"), 11);
    offer_media.codecs = vec![ontime_sip::Codec::Pcma];
    let offer = sdp::build_offer(&offer_media);
    let uac = net
        .uac
        .place_call(
            ontime_sip::CallParams {
                headers: Vec::new(),
                target: "sip:bot@10.0.0.2:5060".into(),
                from: None,
                destination: addr(UAS_ADDR),
                transport: ontime_sip::Transport::Udp,
                offer,
            },
            net.now,
        )
        .unwrap();
    net.pump();
    let inc = net.incoming();
    let mut only_pcmu = LocalMedia::new(addr("10.0.0.2:50000"), 22);
    only_pcmu.codecs = vec![ontime_sip::Codec::Pcmu];
    let err = sdp::answer_offer(inc.offer.as_ref().unwrap(), &only_pcmu).unwrap_err();
    assert_eq!(err, ontime_sip::Error::NoCommonCodec);
    net.uas.reject(inc.call, 488, &[], net.now).unwrap();
    net.pump();
    assert!(matches!(
        ended(&net.uac_events, uac),
        Some(EndReason::Refused { status: 488, .. })
    ));
}

#[test]
fn reinvite_from_the_called_side_holds_the_caller() {
    let mut net = Net::new();
    let (_uac, uas) = net.connected_call();
    // The UAS (e.g. the gateway) puts the caller on hold with a re-INVITE: inactive.
    let mut hold = LocalMedia::new(addr("10.0.0.2:50000"), 22);
    hold.direction = Direction::Inactive;
    hold.session_version = 5;
    net.uas
        .reinvite(uas, &sdp::build_offer(&hold), net.now)
        .unwrap();
    net.pump();
    let (call, offer) = net
        .uac_events
        .iter()
        .find_map(|e| match e {
            Event::OfferReceived { call, offer, .. } => Some((*call, offer.clone())),
            _ => None,
        })
        .unwrap();
    let (answer, media) =
        sdp::answer_offer(&offer, &LocalMedia::new(addr("10.0.0.1:40000"), 11)).unwrap();
    assert_eq!(media.local_direction, Direction::Inactive);
    net.uac.answer_update(call, &answer, net.now).unwrap();
    net.pump();
    assert!(net
        .uas_events
        .iter()
        .any(|e| matches!(e, Event::UpdateAnswered { .. })));
    // The caller's re-INVITE answer is acknowledged by the UAS, in the dialog.
    assert_eq!(net.count(false, "ACK"), 1, "{:#?}", net.lines());
}

#[test]
fn unchanged_offer_is_a_refresh_answered_without_the_application() {
    let mut net = Net::new();
    let (uac, _uas) = net.connected_call();
    let same = sdp::build_offer(&LocalMedia::new(addr("10.0.0.1:40000"), 11));
    net.uac.reinvite(uac, &same, net.now).unwrap();
    net.pump();
    assert!(!net
        .uas_events
        .iter()
        .any(|e| matches!(e, Event::OfferReceived { .. })));
    assert!(net
        .uac_events
        .iter()
        .any(|e| matches!(e, Event::UpdateAnswered { .. })));
}

#[test]
fn info_dtmf_becomes_an_event() {
    let mut net = Net::new();
    let (uac, uas) = net.connected_call();
    for d in ['5', '#'] {
        net.uac.send_info_dtmf(uac, d, 160, net.now).unwrap();
        net.pump();
    }
    let digits: Vec<char> = net
        .uas_events
        .iter()
        .filter_map(|e| match e {
            Event::Dtmf {
                call,
                digit,
                duration_ms: Some(160),
            } if *call == uas => Some(*digit),
            _ => None,
        })
        .collect();
    assert_eq!(digits, ['5', '#']);
    assert_eq!(net.count(false, "SIP/2.0 200"), 3);
}

#[test]
fn options_in_and_out_of_dialog() {
    let mut net = Net::new();
    let req = net
        .uac
        .send_options(
            "sip:10.0.0.2:5060",
            addr(UAS_ADDR),
            ontime_sip::Transport::Udp,
            net.now,
        )
        .unwrap();
    net.pump();
    assert!(net.uac_events.contains(&Event::OptionsResponse {
        request: req,
        status: 200
    }));
    let resp = net
        .wire
        .iter()
        .find(|s| s.line.starts_with("SIP/2.0 200"))
        .unwrap();
    let text = String::from_utf8_lossy(&resp.payload);
    assert!(
        text.contains("Allow: INVITE, ACK, BYE, CANCEL, OPTIONS, UPDATE, INFO"),
        "{text}"
    );
    net.uas.set_accepting(false);
    let req = net
        .uac
        .send_options(
            "sip:10.0.0.2:5060",
            addr(UAS_ADDR),
            ontime_sip::Transport::Udp,
            net.now,
        )
        .unwrap();
    net.pump();
    assert!(net.uac_events.contains(&Event::OptionsResponse {
        request: req,
        status: 503
    }));
    net.uas.set_accepting(true);
    let (uac, _) = net.connected_call();
    net.uac.send_options_in_dialog(uac, net.now).unwrap();
    net.pump();
    assert_eq!(net.wire.last().unwrap().line, "SIP/2.0 200 OK");
}

#[test]
fn reinvite_glare_gets_491() {
    let mut net = Net::new();
    let (uac, uas) = net.connected_call();
    // Hold both re-INVITEs in flight: drop nothing, but send both before pumping.
    let a = sdp::build_offer(&LocalMedia {
        session_version: 9,
        ..LocalMedia::new(addr("10.0.0.1:40000"), 11)
    });
    let b = sdp::build_offer(&LocalMedia {
        session_version: 9,
        ..LocalMedia::new(addr("10.0.0.2:50000"), 22)
    });
    net.uac.reinvite(uac, &a, net.now).unwrap();
    net.uas.reinvite(uas, &b, net.now).unwrap();
    net.pump();
    assert_eq!(net.count(false, "SIP/2.0 491"), 1, "{:#?}", net.lines());
    assert_eq!(net.count(true, "SIP/2.0 491"), 1, "{:#?}", net.lines());
    assert!(net
        .uac_events
        .iter()
        .any(|e| matches!(e, Event::UpdateFailed { status: 491, .. })));
}

#[test]
fn commands_check_state() {
    let mut net = Net::new();
    let (uac, uas) = net.connected_call();
    let answer = sdp::build_offer(&LocalMedia::new(addr("10.0.0.2:50000"), 22));
    assert!(net.uas.answer(uas, &answer, net.now).is_err());
    assert!(net.uas.reject(uas, 486, &[], net.now).is_err());
    assert!(net.uac.cancel(uac, net.now).is_err());
    assert!(net
        .uas
        .reject(ontime_sip::CallHandle(999), 486, &[], net.now)
        .is_err());
    assert!(net.uas.ring(uas, net.now).is_err());
    let inc = {
        net.place_call();
        net.incoming()
    };
    assert!(net.uas.reject(inc.call, 200, &[], net.now).is_err());
    assert!(net.uas.provisional(inc.call, 200, net.now).is_err());
}

#[test]
fn answer_racing_a_cancel_is_acked_then_byed() {
    let mut net = Net::new();
    let uac = net.place_call();
    let inc = net.incoming();
    net.uas.ring(inc.call, net.now).unwrap();
    net.pump();
    // Both leave before either arrives.
    net.uac.cancel(uac, net.now).unwrap();
    let (answer, _) = sdp::answer_offer(
        inc.offer.as_ref().unwrap(),
        &LocalMedia::new(addr("10.0.0.2:50000"), 22),
    )
    .unwrap();
    net.uas.answer(inc.call, &answer, net.now).unwrap();
    net.pump();
    let from_uac: Vec<String> = net
        .wire
        .iter()
        .filter(|s| s.from_uac)
        .map(|s| s.line.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(
        from_uac,
        ["INVITE", "CANCEL", "ACK", "BYE"],
        "{:#?}",
        net.lines()
    );
    assert_eq!(ended(&net.uac_events, uac), Some(EndReason::Cancelled));
    assert_eq!(
        ended(&net.uas_events, inc.call),
        Some(EndReason::RemoteHangup)
    );
    assert!(!net
        .uac_events
        .iter()
        .any(|e| matches!(e, Event::Answered { .. })));
}

#[test]
fn bye_before_the_answer_ends_the_invite_with_487() {
    let mut net = Net::new();
    net.place_call();
    let inc = net.incoming();
    net.uas.ring(inc.call, net.now).unwrap();
    net.pump();
    // The UAS's dialog tag, from its 180.
    let ringing = net.wire.iter().find(|s| s.line.contains(" 180 ")).unwrap();
    let text = String::from_utf8_lossy(&ringing.payload).into_owned();
    let uas_tag = text
        .split("To: <sip:bot@10.0.0.2:5060>;tag=")
        .nth(1)
        .unwrap()
        .split("\r\n")
        .next()
        .unwrap()
        .to_string();
    // RFC 3261 §15.1.2 lets a caller BYE an early dialog: build one from the INVITE.
    let invite = String::from_utf8_lossy(&net.wire[0].payload).into_owned();
    let head = invite.split("Content-Type").next().unwrap();
    let bye = head
        .replacen("INVITE sip:", "BYE sip:", 1)
        .replace("CSeq: 1 INVITE", "CSeq: 2 BYE")
        .replace(
            "To: <sip:bot@10.0.0.2:5060>",
            &format!("To: <sip:bot@10.0.0.2:5060>;tag={uas_tag}"),
        )
        .replace("branch=z9hG4bK", "branch=z9hG4bKbye")
        + "Content-Length: 0\r\n\r\n";
    net.uas
        .handle_datagram(bye.as_bytes(), addr(UAC_ADDR), net.now);
    net.pump();
    let lines = net.lines();
    assert!(
        lines.contains(&"< SIP/2.0 487 Request Terminated".to_string()),
        "{lines:#?}"
    );
    assert_eq!(
        ended(&net.uas_events, inc.call),
        Some(EndReason::RemoteHangup)
    );
}

#[test]
fn update_with_an_offer_reaches_the_application_and_gets_the_answer() {
    let mut net = Net::new();
    let (_uac, uas) = net.connected_call();
    let invite = String::from_utf8_lossy(&net.wire[0].payload).into_owned();
    let ok = net
        .wire
        .iter()
        .find(|s| s.line == "SIP/2.0 200 OK")
        .unwrap();
    let ok = String::from_utf8_lossy(&ok.payload).into_owned();
    let header = |text: &str, name: &str| {
        text.split("\r\n")
            .find(|l| l.starts_with(name))
            .unwrap()
            .to_string()
    };
    let mut hold = LocalMedia::new(addr("10.0.0.1:40000"), 11);
    hold.direction = Direction::SendOnly;
    hold.session_version = 3;
    let body = sdp::build_offer(&hold).to_sdp_string();
    let update = format!(
        "UPDATE sip:ontime@10.0.0.2:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKupd\r\n\
Max-Forwards: 70\r\n{}\r\n{}\r\n{}\r\nCSeq: 5 UPDATE\r\nContact: <sip:ontime@10.0.0.1:5060>\r\n\
Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        header(&invite, "From:"),
        header(&ok, "To:"),
        header(&invite, "Call-ID:"),
        body.len()
    );
    net.uas
        .handle_datagram(update.as_bytes(), addr(UAC_ADDR), net.now);
    net.pump();
    let offer = net
        .uas_events
        .iter()
        .find_map(|e| match e {
            Event::OfferReceived {
                call,
                method: Method::Update,
                offer,
            } if *call == uas => Some(offer.clone()),
            _ => None,
        })
        .expect("UPDATE offer reached the application");
    let (answer, media) =
        sdp::answer_offer(&offer, &LocalMedia::new(addr("10.0.0.2:50000"), 22)).unwrap();
    assert_eq!(media.local_direction, Direction::RecvOnly);
    net.uas.answer_update(uas, &answer, net.now).unwrap();
    net.pump();
    let resp = net.wire.last().unwrap();
    assert_eq!(resp.line, "SIP/2.0 200 OK");
    let text = String::from_utf8_lossy(&resp.payload);
    assert!(
        text.contains("CSeq: 5 UPDATE") && text.contains("a=recvonly"),
        "{text}"
    );
    // An UPDATE is not acknowledged: no 2xx retransmission follows.
    let before = net.wire.len();
    net.advance(ms(5_000));
    assert_eq!(net.wire.len(), before, "{:#?}", net.lines());
}

#[test]
fn hangup_with_a_reason_header() {
    let mut net = Net::new();
    let (_uac, uas) = net.connected_call();
    let reason = [("Reason".to_string(), "Q.850;cause=16".to_string())];
    net.uas.hangup_with_headers(uas, &reason, net.now).unwrap();
    net.pump();
    let bye = net.wire.iter().find(|s| s.line.starts_with("BYE")).unwrap();
    assert!(String::from_utf8_lossy(&bye.payload).contains("\r\nReason: Q.850;cause=16\r\n"));
    // An unanswered incoming call gets 480 with the headers.
    net.place_call();
    let inc = net.incoming();
    net.uas
        .hangup_with_headers(inc.call, &reason, net.now)
        .unwrap();
    net.pump();
    let resp = net.wire.iter().find(|s| s.line.contains(" 480 ")).unwrap();
    assert!(String::from_utf8_lossy(&resp.payload).contains("\r\nReason: Q.850;cause=16\r\n"));
}
