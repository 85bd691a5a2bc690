//! Blind transfer (RFC 3515): our REFER inside an answered call, its final response, and the
//! NOTIFYs in which the peer reports the transfer, against a peer written by hand, on simulated
//! time.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ontime_sip::sdp::{self, LocalMedia};
use ontime_sip::{CallHandle, EndReason, Endpoint, Error, Event, Transmit};

/// The record-routing proxy every message of the call goes through.
const PROXY: &str = "10.0.0.5:5060";
const SDP: &str = "v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
                   m=audio 4000 RTP/AVP 0\r\n";
const TRANSFER_TO: &str = "sip:agent@10.0.0.7";

/// Our endpoint in a call it answered, and the caller's side of the dialog.
struct Call {
    ep: Endpoint,
    now: Instant,
    call: CallHandle,
    /// Our To tag.
    tag: String,
    /// The caller's last CSeq.
    cseq: u32,
}

/// A request from the caller (tag `a1`) through the proxy.
fn request(method: &str, cseq: u32, to_tag: &str, headers: &str, body: &str) -> String {
    format!(
        "{method} sip:bot@10.0.0.2 SIP/2.0\r\n\
         Via: SIP/2.0/UDP 10.0.0.5:5060;branch=z9hG4bKp{method}{cseq}\r\n\
         Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKa{method}{cseq}\r\n\
         Max-Forwards: 69\r\nFrom: <sip:alice@10.0.0.1>;tag=a1\r\nTo: <sip:bot@10.0.0.2>{to_tag}\r\n\
         Call-ID: refer-1\r\nCSeq: {cseq} {method}\r\nContact: <sip:alice@10.0.0.1:5060>\r\n\
         {headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A NOTIFY body and headers reporting `frag` with `state` as Subscription-State.
fn notify_headers(event: &str, state: &str) -> String {
    format!("Event: {event}\r\nSubscription-State: {state}\r\nContent-Type: message/sipfrag\r\n")
}

/// The header lines of a message, without the start line.
fn header_lines(t: &Transmit) -> Vec<String> {
    let text = String::from_utf8_lossy(&t.payload).into_owned();
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    head.split("\r\n").skip(1).map(str::to_string).collect()
}

fn header(t: &Transmit, name: &str) -> String {
    let prefix = format!("{name}: ");
    header_lines(t)
        .iter()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .unwrap_or_else(|| panic!("no {name} in {}", first_line(&t.payload)))
}

impl Call {
    /// The caller's INVITE with a Record-Route of two proxies, answered and ACKed.
    fn answered() -> Call {
        let mut ep = Endpoint::new(config(UAS_ADDR));
        let now = Instant::now();
        let rr = "Record-Route: <sip:10.0.0.5;lr>, <sip:10.0.0.6;lr>\r\n\
                  Content-Type: application/sdp\r\n";
        let invite = request("INVITE", 1, "", rr, SDP);
        ep.handle_datagram(invite.as_bytes(), addr(PROXY), now);
        let Some(Event::IncomingCall(inc)) = ep.poll_event() else {
            panic!("no call")
        };
        let local = LocalMedia::new(addr("10.0.0.2:50000"), 2);
        let (answer, _) = sdp::answer_offer(inc.offer.as_ref().unwrap(), &local).unwrap();
        ep.answer(inc.call, &answer, now).unwrap();
        let mut out = Vec::new();
        while let Some(t) = ep.poll_transmit() {
            out.push(t);
        }
        let to = header(out.last().unwrap(), "To");
        let tag = to.split(";tag=").nth(1).unwrap().to_string();
        let mut call = Call {
            ep,
            now,
            call: inc.call,
            tag,
            cseq: 1,
        };
        let ack = request("ACK", 1, &call.to_tag(), "", "");
        let (lines, events) = call.feed(&ack);
        assert!(lines.is_empty());
        assert_eq!(events, [Event::Established { call: call.call }]);
        call
    }

    /// An answered call in which we just sent a REFER, and that REFER.
    fn referred() -> (Call, Transmit) {
        let mut call = Call::answered();
        let refer = call.refer();
        (call, refer)
    }

    fn to_tag(&self) -> String {
        format!(";tag={}", self.tag)
    }

    /// A NOTIFY in the dialog with a fresh CSeq.
    fn notify(&mut self, headers: &str, body: &str) -> String {
        self.cseq += 1;
        request("NOTIFY", self.cseq, &self.to_tag(), headers, body)
    }

    /// Feeds a NOTIFY of package `event` with Subscription-State `state` and body `frag`.
    fn report(&mut self, event: &str, state: &str, frag: &str) -> (Vec<String>, Vec<Event>) {
        let notify = self.notify(&notify_headers(event, state), frag);
        self.feed(&notify)
    }

    /// A NOTIFY of our REFER with `frag`, reporting `status`: answered 200, reported once.
    fn assert_reported(&mut self, state: &str, frag: &str, status: u16) {
        let terminated = state.starts_with("terminated");
        let expected = (
            vec![OK.to_string()],
            vec![self.progress(status, terminated)],
        );
        assert_eq!(self.report("refer", state, frag), expected, "{frag}");
    }

    /// A NOTIFY of `event` that matches no subscription: 481 and no event.
    fn assert_no_subscription(&mut self, event: &str) {
        let (lines, events) = self.report(event, "active", "SIP/2.0 100 Trying\r\n");
        assert_eq!(lines, [NO_SUCH], "{event}");
        assert!(events.is_empty());
    }

    /// Feeds `msg` from the proxy: the first lines of what went out, and the events.
    fn feed(&mut self, msg: &str) -> (Vec<String>, Vec<Event>) {
        self.ep
            .handle_datagram(msg.as_bytes(), addr(PROXY), self.now);
        let lines = self
            .transmits()
            .iter()
            .map(|t| first_line(&t.payload))
            .collect();
        (lines, self.events())
    }

    fn transmits(&mut self) -> Vec<Transmit> {
        let mut out = Vec::new();
        while let Some(t) = self.ep.poll_transmit() {
            out.push(t);
        }
        out
    }

    fn events(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(e) = self.ep.poll_event() {
            out.push(e);
        }
        out
    }

    /// Sends a REFER to [`TRANSFER_TO`]; the one message that went out.
    fn refer(&mut self) -> Transmit {
        self.ep
            .refer(self.call, TRANSFER_TO, Some("sip:bot@10.0.0.2"), self.now)
            .unwrap();
        let mut out = self.transmits();
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    /// The peer's response to our `request` with `status_line` (e.g. `202 Accepted`).
    fn respond(&mut self, request: &Transmit, status_line: &str) -> (Vec<String>, Vec<Event>) {
        let copied: String = header_lines(request)
            .iter()
            .filter(|l| {
                ["Via: ", "From: ", "To: ", "Call-ID: ", "CSeq: "]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .map(|l| format!("{l}\r\n"))
            .collect();
        let resp = format!("SIP/2.0 {status_line}\r\n{copied}Content-Length: 0\r\n\r\n");
        self.feed(&resp)
    }

    fn progress(&self, status: u16, terminated: bool) -> Event {
        Event::ReferProgress {
            call: self.call,
            status,
            terminated,
        }
    }

    fn refer_response(&self, status: u16) -> Event {
        Event::ReferResponse {
            call: self.call,
            status,
        }
    }
}

fn cseq_number(t: &Transmit) -> u32 {
    header(t, "CSeq")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

const OK: &str = "SIP/2.0 200 OK";
const NO_SUCH: &str = "SIP/2.0 481 Call/Transaction Does Not Exist";

#[test]
fn refer_goes_in_the_dialog_and_202_then_two_notifies_report_the_transfer() {
    let (mut c, refer) = Call::referred();
    // Loose routing (RFC 3261 §12.2.1.1): to the first route, the Contact as Request-URI.
    assert_eq!(refer.destination, addr(PROXY));
    assert_eq!(
        first_line(&refer.payload),
        "REFER sip:alice@10.0.0.1:5060 SIP/2.0"
    );
    let lines = header_lines(&refer);
    let routes: Vec<&String> = lines.iter().filter(|l| l.starts_with("Route: ")).collect();
    assert_eq!(
        routes,
        ["Route: <sip:10.0.0.5;lr>", "Route: <sip:10.0.0.6;lr>"]
    );
    assert_eq!(
        header(&refer, "From"),
        format!("<sip:bot@10.0.0.2>{}", c.to_tag())
    );
    assert_eq!(header(&refer, "To"), "<sip:alice@10.0.0.1>;tag=a1");
    assert_eq!(header(&refer, "Call-ID"), "refer-1");
    assert_eq!(header(&refer, "Refer-To"), format!("<{TRANSFER_TO}>"));
    assert_eq!(header(&refer, "Referred-By"), "<sip:bot@10.0.0.2>");
    assert_eq!(header(&refer, "Contact"), "<sip:ontime@10.0.0.2:5060>");
    let cseq = cseq_number(&refer);
    assert_eq!(header(&refer, "CSeq"), format!("{cseq} REFER"));

    let (lines, events) = c.respond(&refer, "202 Accepted");
    assert!(lines.is_empty());
    assert_eq!(events, [c.refer_response(202)]);

    c.assert_reported("active;expires=60", "SIP/2.0 100 Trying\r\n", 100);
    c.assert_reported("terminated;reason=noresource", "SIP/2.0 200 OK\r\n", 200);
    // The subscription is over: another report of it has nothing to match.
    c.assert_no_subscription("refer");

    // The next in-dialog request takes the next CSeq.
    let again = c.refer();
    assert_eq!(cseq_number(&again), cseq + 1);
    assert_eq!(c.ep.active_calls(), 1);
}

#[test]
fn a_refused_refer_is_reported_and_another_may_follow() {
    let (mut c, refer) = Call::referred();
    let (lines, events) = c.respond(&refer, "603 Decline");
    assert!(lines.is_empty());
    assert_eq!(events, [c.refer_response(603)]);
    // No subscription came of it.
    c.assert_no_subscription("refer");
    c.refer();
    assert_eq!(c.ep.active_calls(), 1);
}

#[test]
fn a_notify_may_come_before_the_202() {
    let (mut c, refer) = Call::referred();
    c.assert_reported("active", "SIP/2.0 100 Trying\r\n", 100);
    c.assert_reported("terminated", "SIP/2.0 486 Busy Here\r\n", 486);
    // Still no second REFER while the first waits for its final response.
    assert!(matches!(
        c.ep.refer(c.call, TRANSFER_TO, None, c.now),
        Err(Error::InvalidState { .. })
    ));
    assert_eq!(c.respond(&refer, "202 Accepted").1, [c.refer_response(202)]);
    // The terminated subscription stays terminated after the 202.
    c.assert_no_subscription("refer");
}

#[test]
fn a_retransmitted_notify_is_answered_again_without_a_second_event() {
    let (mut c, refer) = Call::referred();
    c.respond(&refer, "202 Accepted");
    let ringing = c.notify(
        &notify_headers("refer", "active"),
        "SIP/2.0 180 Ringing\r\n",
    );
    let first = c.feed(&ringing);
    assert_eq!(first, (vec![OK.to_string()], vec![c.progress(180, false)]));
    assert_eq!(c.feed(&ringing), (vec![OK.to_string()], vec![]));
}

#[test]
fn notify_with_an_id_names_the_refer_by_its_cseq() {
    let (mut c, refer) = Call::referred();
    let cseq = cseq_number(&refer);
    c.respond(&refer, "202 Accepted");
    c.assert_no_subscription(&format!("refer;id={}", cseq + 7));
    let ours = c.notify(
        &notify_headers(&format!("refer;id={cseq}"), "terminated"),
        "SIP/2.0 200 OK\r\n",
    );
    assert_eq!(
        c.feed(&ours),
        (vec![OK.to_string()], vec![c.progress(200, true)])
    );
}

#[test]
fn unreadable_notifies_get_400_415_or_489_and_no_event() {
    let (mut c, refer) = Call::referred();
    c.respond(&refer, "202 Accepted");
    let state = "Subscription-State: active\r\n";
    let cases = [
        (
            notify_headers("refer", "active"),
            "garbage\r\n",
            "SIP/2.0 400 Bad Request",
        ),
        (
            notify_headers("refer", "active"),
            "",
            "SIP/2.0 400 Bad Request",
        ),
        (
            format!("Event: refer\r\n{state}Content-Type: text/plain\r\n"),
            "SIP/2.0 200 OK\r\n",
            "SIP/2.0 415 Unsupported Media Type",
        ),
        (
            notify_headers("presence", "active"),
            "SIP/2.0 200 OK\r\n",
            "SIP/2.0 489 Bad Event",
        ),
        (
            format!("{state}Content-Type: message/sipfrag\r\n"),
            "SIP/2.0 200 OK\r\n",
            "SIP/2.0 400 Bad Request",
        ),
    ];
    for (headers, body, status) in cases {
        let notify = c.notify(&headers, body);
        c.ep.handle_datagram(notify.as_bytes(), addr(PROXY), c.now);
        let out = c.transmits();
        assert_eq!(out.len(), 1, "{headers}{body}");
        assert_eq!(first_line(&out[0].payload), status, "{headers}{body}");
        if status.contains("489") {
            assert_eq!(header(&out[0], "Allow-Events"), "refer");
        }
        assert!(c.events().is_empty(), "{headers}{body}");
    }
    // Only the two unreadable sipfrag bodies count as invalid.
    assert_eq!(c.ep.invalid_messages(), 2);
    // The subscription survived them all.
    c.assert_reported("terminated", "SIP/2.0 603 Declined\r\n", 603);
}

#[test]
fn notify_outside_a_dialog_or_without_a_refer_gets_481() {
    let mut c = Call::answered();
    let headers = notify_headers("refer", "active");
    for to_tag in ["", ";tag=unknown"] {
        let notify = request("NOTIFY", 9, to_tag, &headers, "SIP/2.0 100 Trying\r\n");
        let (lines, events) = c.feed(&notify);
        assert_eq!(lines, [NO_SUCH], "{to_tag}");
        assert!(events.is_empty());
    }
    // In the dialog, but we never sent a REFER.
    c.assert_no_subscription("refer");
}

#[test]
fn a_refer_without_response_times_out_with_408_and_ends_the_call() {
    let mut c = Call::answered();
    c.refer();
    let start = c.now;
    let mut refers = 1;
    while let Some(t) = c.ep.poll_timeout() {
        if t > start + Duration::from_secs(40) {
            break;
        }
        c.now = t;
        c.ep.handle_timeout(t);
        refers += c
            .transmits()
            .iter()
            .filter(|t| first_line(&t.payload).starts_with("REFER"))
            .count();
        let events = c.events();
        if !events.is_empty() {
            // Timer F at 64·T1 (RFC 3261 §17.1.2.2), then the dialog is gone (§12.2.1.2).
            assert_eq!(c.now - start, Duration::from_secs(32));
            let ended = Event::Ended {
                call: c.call,
                reason: EndReason::DialogGone { status: 408 },
            };
            assert_eq!(events, [c.refer_response(408), ended]);
            break;
        }
    }
    assert_eq!(refers, 11);
    assert_eq!(c.ep.active_calls(), 0);
}

#[test]
fn a_481_to_the_refer_ends_the_call() {
    let (mut c, refer) = Call::referred();
    let (lines, events) = c.respond(&refer, "481 Call/Transaction Does Not Exist");
    // The BYE RFC 3261 §12.2.1.2 sends after a 481, in case the peer is still there.
    assert_eq!(lines.len(), 1);
    assert!(lines[0].starts_with("BYE "), "{lines:?}");
    let ended = Event::Ended {
        call: c.call,
        reason: EndReason::DialogGone { status: 481 },
    };
    assert_eq!(events, [c.refer_response(481), ended]);
}

#[test]
fn refer_checks_its_arguments_and_the_call() {
    let mut c = Call::answered();
    for bad in [
        "agent@10.0.0.7",
        "sip:a@10.0.0.7>",
        "sip:a b@10.0.0.7",
        "tel:+1 555",
    ] {
        assert_eq!(
            c.ep.refer(c.call, bad, None, c.now),
            Err(Error::InvalidUri(bad.to_string()))
        );
        assert_eq!(
            c.ep.refer(c.call, TRANSFER_TO, Some(bad), c.now),
            Err(Error::InvalidUri(bad.to_string()))
        );
    }
    assert_eq!(
        c.ep.refer(CallHandle(999), TRANSFER_TO, None, c.now),
        Err(Error::UnknownCall(999))
    );
    assert!(c.transmits().is_empty());
    // A tel: URI is a target a gateway can dial.
    c.ep.refer(c.call, "tel:+15550100", None, c.now).unwrap();
    let refer = c.transmits().remove(0);
    assert_eq!(header(&refer, "Refer-To"), "<tel:+15550100>");
    assert!(!header_lines(&refer)
        .iter()
        .any(|l| l.starts_with("Referred-By")));
    assert_eq!(
        c.ep.refer(c.call, TRANSFER_TO, None, c.now)
            .unwrap_err()
            .to_string(),
        "cannot transfer a call that is already transferring"
    );
}

#[test]
fn a_refer_from_the_peer_gets_405_with_allow() {
    let mut c = Call::answered();
    c.cseq += 1;
    let refer = request(
        "REFER",
        c.cseq,
        &c.to_tag(),
        "Refer-To: <sip:x@10.0.0.9>\r\n",
        "",
    );
    c.ep.handle_datagram(refer.as_bytes(), addr(PROXY), c.now);
    let out = c.transmits();
    assert_eq!(
        first_line(&out[0].payload),
        "SIP/2.0 405 Method Not Allowed"
    );
    assert_eq!(
        header(&out[0], "Allow"),
        "INVITE, ACK, BYE, CANCEL, OPTIONS, UPDATE, INFO, NOTIFY"
    );
}

#[test]
fn the_caller_may_refer_too_and_learns_a_refusal() {
    // Our UAC refers our UAS, which serves no REFER: the UAC side of the dialog and the 405.
    let mut net = Net::new();
    let (uac, uas) = net.connected_call();
    net.uac.refer(uac, TRANSFER_TO, None, net.now).unwrap();
    net.pump();
    let refer = net
        .wire
        .iter()
        .find(|s| s.line.starts_with("REFER"))
        .unwrap();
    assert!(refer.from_uac);
    assert_eq!(refer.line, "REFER sip:ontime@10.0.0.2:5060 SIP/2.0");
    let refused = Event::ReferResponse {
        call: uac,
        status: 405,
    };
    assert_eq!(net.uac_events.iter().filter(|e| **e == refused).count(), 1);
    assert!(!net
        .uas_events
        .iter()
        .any(|e| matches!(e, Event::Ended { call, .. } if *call == uas)));
}
