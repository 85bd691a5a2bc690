//! A UAC and a UAS from this crate over real loopback UDP sockets: a full call (INVITE → 180 →
//! 200 → ACK → re-INVITE hold → BYE) and a cancelled call.

mod common;

use std::time::Duration;

use common::*;
use ontime_sip::sdp::{self, Direction, LocalMedia};
use ontime_sip::{CallParams, EndReason, Event, Transport};

fn call_params(uas: &UdpPeer, offer_port: u16) -> CallParams {
    CallParams {
        headers: Vec::new(),
        target: format!("sip:bot@{}", uas.addr()),
        from: None,
        destination: uas.addr(),
        transport: Transport::Udp,
        offer: sdp::build_offer(&LocalMedia::new(
            addr(&format!("127.0.0.1:{offer_port}")),
            1,
        )),
    }
}

fn incoming(p: &UdpPeer) -> Option<ontime_sip::IncomingCall> {
    p.events.iter().find_map(|e| match e {
        Event::IncomingCall(c) => Some((**c).clone()),
        _ => None,
    })
}

#[test]
fn full_call_over_loopback_udp() {
    let (mut uac, mut uas) = (UdpPeer::bind(), UdpPeer::bind());
    let limit = Duration::from_secs(5);
    let call = uac
        .ep
        .place_call(call_params(&uas, 40_000), std::time::Instant::now())
        .unwrap();
    drive(&mut uac, &mut uas, limit, |_, b| incoming(b).is_some());
    let inc = incoming(&uas).unwrap();
    assert_eq!(inc.source, uac.addr());
    let now = std::time::Instant::now();
    uas.ep.ring(inc.call, now).unwrap();
    let local = LocalMedia::new(addr("127.0.0.1:50000"), 2);
    let (answer, media) = sdp::answer_offer(inc.offer.as_ref().unwrap(), &local).unwrap();
    assert_eq!(media.remote_rtp, Some(addr("127.0.0.1:40000")));
    uas.ep.answer(inc.call, &answer, now).unwrap();
    drive(&mut uac, &mut uas, limit, |a, b| {
        b.events.contains(&Event::Established { call: inc.call })
            && a.events.iter().any(|e| matches!(e, Event::Answered { .. }))
    });
    assert!(uac
        .events
        .iter()
        .any(|e| matches!(e, Event::Progress { status: 180, .. })));

    // Hold from the caller.
    let mut hold = LocalMedia::new(addr("127.0.0.1:40000"), 1);
    hold.direction = Direction::SendOnly;
    hold.session_version = 2;
    uac.ep
        .reinvite(call, &sdp::build_offer(&hold), std::time::Instant::now())
        .unwrap();
    drive(&mut uac, &mut uas, limit, |_, b| {
        b.events
            .iter()
            .any(|e| matches!(e, Event::OfferReceived { .. }))
    });
    let offer = uas
        .events
        .iter()
        .find_map(|e| match e {
            Event::OfferReceived { offer, .. } => Some(offer.clone()),
            _ => None,
        })
        .unwrap();
    let (answer, media) = sdp::answer_offer(&offer, &local).unwrap();
    assert_eq!(media.local_direction, Direction::RecvOnly);
    uas.ep
        .answer_update(inc.call, &answer, std::time::Instant::now())
        .unwrap();
    drive(&mut uac, &mut uas, limit, |a, _| {
        a.events
            .iter()
            .any(|e| matches!(e, Event::UpdateAnswered { .. }))
    });

    uac.ep.hangup(call, std::time::Instant::now()).unwrap();
    drive(&mut uac, &mut uas, limit, |a, b| {
        a.events.iter().any(|e| matches!(e, Event::Ended { .. }))
            && b.events.iter().any(|e| matches!(e, Event::Ended { .. }))
    });
    assert!(uac.events.contains(&Event::Ended {
        call,
        reason: EndReason::LocalHangup { confirmed: true }
    }));
    assert!(uas.events.contains(&Event::Ended {
        call: inc.call,
        reason: EndReason::RemoteHangup
    }));
    assert_eq!(
        uac.sent_lines
            .iter()
            .map(|l| l.split(' ').next().unwrap())
            .collect::<Vec<_>>(),
        ["INVITE", "ACK", "INVITE", "ACK", "BYE"]
    );
}

#[test]
fn cancelled_call_over_loopback_udp() {
    let (mut uac, mut uas) = (UdpPeer::bind(), UdpPeer::bind());
    let limit = Duration::from_secs(5);
    let call = uac
        .ep
        .place_call(call_params(&uas, 40_002), std::time::Instant::now())
        .unwrap();
    drive(&mut uac, &mut uas, limit, |a, b| {
        incoming(b).is_some() && a.received_lines.iter().any(|l| l.contains(" 100 "))
    });
    let inc = incoming(&uas).unwrap();
    uas.ep.ring(inc.call, std::time::Instant::now()).unwrap();
    drive(&mut uac, &mut uas, limit, |a, _| {
        a.events.iter().any(|e| matches!(e, Event::Progress { .. }))
    });
    uac.ep.cancel(call, std::time::Instant::now()).unwrap();
    drive(&mut uac, &mut uas, limit, |a, b| {
        a.events.iter().any(|e| matches!(e, Event::Ended { .. }))
            && b.events.iter().any(|e| matches!(e, Event::Ended { .. }))
    });
    assert!(uac.events.contains(&Event::Ended {
        call,
        reason: EndReason::Cancelled
    }));
    assert!(uas.events.contains(&Event::Ended {
        call: inc.call,
        reason: EndReason::Cancelled
    }));
    assert_eq!(
        uas.sent_lines,
        [
            "SIP/2.0 100 Trying",
            "SIP/2.0 180 Ringing",
            "SIP/2.0 200 OK",
            "SIP/2.0 487 Request Terminated"
        ]
    );
    // The ACK for the 487 reaches the UAS.
    drive(&mut uac, &mut uas, limit, |_, b| {
        b.received_lines.iter().any(|l| l.starts_with("ACK"))
    });
}
