//! RFC 4475 (SIP torture tests) and RFC 5118 (IPv6 torture tests), read from
//! `../shared/testdata/sip-torture` next to the workspace. Skips with a printed reason when absent.
//!
//! Each message goes to a fresh endpoint as a UDP datagram; the table says what must come back:
//! the valid ones parse to the right values and get the response a UA owes them (a call, 200,
//! 405/501 for methods we don't serve, 416, 420...), the invalid ones 400 (505 for a bad
//! version) or silence for responses.

use std::path::PathBuf;
use std::time::Instant;

use ontime_sip::message::{parse_message, Framing, Limits, Method};
use ontime_sip::{Config, Endpoint, Event};

fn dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/sip-torture");
    if d.is_dir() {
        Some(d)
    } else {
        println!(
            "skipped: {} is missing (the shared test data sits beside the workspace)",
            d.display()
        );
        None
    }
}

/// What the endpoint must do with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// A new call: 100 Trying and an IncomingCall event.
    Call,
    /// A response with this status.
    Status(u16),
    /// Nothing sent (responses with no transaction, or unreadable ones).
    Silence,
}
use Outcome::*;

/// RFC 4475 section, file, outcome. INVITEs whose To already carries a tag are mid-dialog
/// requests for a dialog this fresh endpoint does not have: 481 (RFC 3261 §12.2.2).
const RFC4475: [(&str, &str, Outcome); 49] = [
    ("3.1.1.1", "wsinv", Status(481)),
    ("3.1.1.2", "intmeth", Status(501)),
    ("3.1.1.3", "esc01", Call),
    ("3.1.1.4", "escnull", Status(405)),
    ("3.1.1.5", "esc02", Status(501)),
    ("3.1.1.6", "lwsdisp", Status(200)),
    ("3.1.1.7", "longreq", Call),
    ("3.1.1.8", "dblreq", Status(405)),
    ("3.1.1.9", "semiuri", Status(200)),
    ("3.1.1.10", "transports", Status(200)),
    ("3.1.1.11", "mpart01", Status(405)),
    ("3.1.1.12", "unreason", Silence),
    ("3.1.1.13", "noreason", Silence),
    ("3.1.2.1", "badinv01", Status(400)),
    ("3.1.2.2", "clerr", Status(400)),
    ("3.1.2.3", "ncl", Status(400)),
    ("3.1.2.4", "scalar02", Status(400)),
    ("3.1.2.5", "scalarlg", Silence),
    ("3.1.2.6", "quotbal", Status(400)),
    ("3.1.2.7", "ltgtruri", Status(400)),
    ("3.1.2.8", "lwsruri", Status(400)),
    ("3.1.2.9", "lwsstart", Status(400)),
    ("3.1.2.10", "trws", Status(400)),
    ("3.1.2.11", "escruri", Status(400)),
    ("3.1.2.12", "baddate", Status(400)),
    ("3.1.2.13", "regbadct", Status(400)),
    ("3.1.2.14", "badaspec", Status(400)),
    ("3.1.2.15", "baddn", Status(400)),
    ("3.1.2.16", "badvers", Status(505)),
    ("3.1.2.17", "mismatch01", Status(400)),
    ("3.1.2.18", "mismatch02", Status(400)),
    ("3.1.2.19", "bigcode", Silence),
    ("3.2.1", "badbranch", Status(200)),
    ("3.3.1", "insuf", Status(400)),
    ("3.3.2", "unkscm", Status(416)),
    ("3.3.3", "novelsc", Status(416)),
    ("3.3.4", "unksm2", Status(405)),
    ("3.3.5", "bext01", Status(420)),
    ("3.3.6", "invut", Status(415)),
    ("3.3.7", "regaut01", Status(405)),
    ("3.3.8", "multi01", Status(400)),
    ("3.3.9", "mcl01", Status(400)),
    ("3.3.10", "bcast", Silence),
    ("3.3.11", "zeromf", Status(200)),
    ("3.3.12", "cparam01", Status(405)),
    ("3.3.13", "cparam02", Status(405)),
    ("3.3.14", "regescrt", Status(405)),
    ("3.3.15", "sdp01", Status(406)),
    ("3.4.1", "inv2543", Call),
];

fn status_of(payload: &[u8]) -> Option<u16> {
    let line = payload.split(|b| *b == b'\r').next()?;
    let s = std::str::from_utf8(line).ok()?;
    s.strip_prefix("SIP/2.0 ")?.get(..3)?.parse().ok()
}

fn run(bytes: &[u8]) -> (Outcome, Vec<String>) {
    let mut ep = Endpoint::new(Config::new("192.0.2.200:5060".parse().unwrap()));
    ep.handle_datagram(bytes, "192.0.2.1:5060".parse().unwrap(), Instant::now());
    let mut sent = Vec::new();
    while let Some(t) = ep.poll_transmit() {
        sent.push(t.payload);
    }
    let mut events = Vec::new();
    let mut call = false;
    while let Some(e) = ep.poll_event() {
        call |= matches!(e, Event::IncomingCall(_));
        events.push(format!("{e:?}"));
    }
    let outcome = if call {
        Call
    } else {
        match sent.first() {
            Some(p) => Status(status_of(p).unwrap_or(0)),
            None => Silence,
        }
    };
    let text = sent
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    (outcome, text)
}

#[test]
fn rfc4475_torture_table() {
    let Some(d) = dir() else { return };
    let mut failures = Vec::new();
    let mut rsip_rejects = Vec::new();
    for (section, name, want) in RFC4475 {
        let bytes = std::fs::read(d.join("rfc4475").join(format!("{name}.dat"))).unwrap();
        // For the record (docs/sip.md): what rsip 0.4 alone makes of the same bytes.
        if rsip::SipMessage::try_from(bytes.as_slice()).is_err() {
            rsip_rejects.push(name);
        }
        let (got, sent) = run(&bytes);
        if got != want {
            failures.push(format!(
                "{section} {name}: want {want:?}, got {got:?}\n{}",
                sent.join("\n---\n")
            ));
        }
        // Every 400 names its reason in a Warning (RFC 3261 §21.4.1, §20.43).
        if got == Status(400) && !sent[0].contains("Warning: 399 ") {
            failures.push(format!("{section} {name}: 400 without a Warning"));
        }
    }
    println!(
        "rsip::SipMessage::try_from alone rejects {} of 49: {rsip_rejects:?}",
        rsip_rejects.len()
    );
    assert!(
        failures.is_empty(),
        "{} of 49 differ:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

fn parse(d: &std::path::Path, name: &str) -> ontime_sip::Message {
    let bytes = std::fs::read(d.join("rfc4475").join(format!("{name}.dat"))).unwrap();
    parse_message(&bytes, &Limits::default(), Framing::Datagram)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn rfc4475_valid_messages_parse_to_the_right_values() {
    let Some(d) = dir() else { return };
    // 3.1.1.1 wsinv: folding and LWS everywhere.
    let m = parse(&d, "wsinv");
    assert_eq!(m.method(), Some(&Method::Invite));
    assert_eq!(
        m.request_uri(),
        Some("sip:vivekg@chair-dnrc.example.com;unknownparam")
    );
    let to = m.to().unwrap();
    assert_eq!(to.uri, "sip:vivekg@chair-dnrc.example.com");
    assert_eq!(to.tag(), Some("1918181833n"));
    let from = m.from().unwrap();
    assert_eq!(from.display_name.as_deref(), Some(r#"J Rosenberg \\\""#));
    assert_eq!(from.tag(), Some("98asjd8"));
    assert_eq!(m.header("Max-Forwards"), Some("0068"));
    assert_eq!(m.cseq(), (9, Method::Invite));
    assert_eq!(
        m.header("NewFangledHeader"),
        Some("newfangled value continued newfangled value")
    );
    let vias = m.vias();
    assert_eq!(vias.len(), 3);
    assert_eq!(
        (
            vias[0].transport.as_str(),
            vias[0].host.as_str(),
            vias[0].branch()
        ),
        ("UDP", "192.0.2.2", Some("390skdjuw"))
    );
    assert_eq!(
        (vias[1].transport.as_str(), vias[1].branch()),
        ("TCP", Some("z9hG4bK9ikj8"))
    );
    assert_eq!(
        (vias[2].host.as_str(), vias[2].branch()),
        ("192.168.255.111", Some("z9hG4bK30239"))
    );
    assert_eq!(m.header("Subject"), Some(""));
    assert_eq!(
        m.contact().unwrap().display_name.as_deref(),
        Some(r#"Quoted string \"\""#)
    );
    assert_eq!(m.body.len(), 150);

    // 3.1.1.2 intmeth: an extension method made of every token character.
    let m = parse(&d, "intmeth");
    assert_eq!(
        m.method().map(Method::as_str),
        Some("!interesting-Method0123456789_*+`.%indeed'~")
    );
    assert_eq!(
        m.cseq().1.as_str(),
        "!interesting-Method0123456789_*+`.%indeed'~"
    );

    // 3.1.1.5 esc02: escapes in a method are not decoded: RE%47IST%45R is not REGISTER.
    let m = parse(&d, "esc02");
    assert_eq!(m.method().map(Method::as_str), Some("RE%47IST%45R"));
    assert_eq!(m.headers_named("Contact").count(), 2);
    assert_eq!(
        m.header("C%6Fntact"),
        Some("<sip:alias2@host2.example.com>")
    );

    // 3.1.1.7 longreq: long values survive whole.
    let m = parse(&d, "longreq");
    let long_call_id = format!("longreq.one{}longcallid", "really".repeat(20));
    assert_eq!(m.call_id(), long_call_id);
    assert_eq!(m.vias().len(), 34);
    assert_eq!(m.header("Content-Type"), Some("application/sdp"));

    // 3.1.1.8 dblreq: the second message in the datagram is ignored (Content-Length 0).
    let m = parse(&d, "dblreq");
    assert_eq!(m.method(), Some(&Method::Register));
    assert!(m.body.is_empty());

    // 3.1.1.9 semiuri: a ';' inside the user part.
    let m = parse(&d, "semiuri");
    assert_eq!(
        m.request_uri(),
        Some("sip:user;par=u%40example.net@example.com")
    );

    // 3.1.1.11 mpart01: the binary multipart body is kept byte for byte.
    let m = parse(&d, "mpart01");
    assert_eq!(
        m.body.len(),
        m.header("Content-Length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
    );

    // 3.1.1.12/13: UTF-8 and empty reason phrases.
    let m = parse(&d, "unreason");
    assert_eq!(m.status(), Some(200));
    assert!(
        matches!(&m.start, ontime_sip::message::StartLine::Response { reason, .. }
        if reason == "= 2**3 * 5**2 но сто девяносто девять - простое")
    );
    let m = parse(&d, "noreason");
    assert_eq!(m.status(), Some(100));
    assert!(
        matches!(&m.start, ontime_sip::message::StartLine::Response { reason, .. } if reason.is_empty())
    );

    // 3.4.1 inv2543: no branch, no Content-Length: the body runs to the end of the datagram.
    let m = parse(&d, "inv2543");
    assert!(!m.top_via().unwrap().has_rfc3261_branch());
    assert!(!m.body.is_empty());
}

/// RFC 5118's archive has bare LF line ends and, in §4.6 and §4.8, a Content-Length a few bytes
/// longer than the body (see the README beside it): those two are re-read with the length fixed.
fn fix_content_length(bytes: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let (head, body) = text.split_once("\n\n").unwrap();
    let head: Vec<String> = head
        .lines()
        .map(|l| {
            if l.starts_with("Content-Length") {
                format!("Content-Length: {}", body.len())
            } else {
                l.to_string()
            }
        })
        .collect();
    format!("{}\n\n{body}", head.join("\n")).into_bytes()
}

#[test]
fn rfc5118_ipv6_torture() {
    let Some(d) = dir() else { return };
    let d = d.join("rfc5118/archive-lf");
    let mut names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(names.len(), 12);
    for name in &names {
        let bytes = std::fs::read(d.join(format!("{name}.dat"))).unwrap();
        let mut parsed = parse_message(&bytes, &Limits::default(), Framing::Datagram);
        if matches!(name.as_str(), "ipv6-in-sdp" | "mult-ip-in-sdp") {
            let e = parsed.expect_err("the archive's Content-Length exceeds the body");
            assert!(e.reason.contains("Content-Length"), "{name}: {e}");
            parsed = parse_message(
                &fix_content_length(&bytes),
                &Limits::default(),
                Framing::Datagram,
            );
        }
        match name.as_str() {
            // §4.2: an IPv6 reference without brackets in the Request-URI.
            "ipv6-bad" => assert_eq!(parsed.unwrap_err().status, Some(400), "{name}"),
            _ => {
                let m = parsed.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(!m.vias().is_empty(), "{name}");
            }
        }
    }
    // Values: IPv6 sent-by with and without port, received with and without brackets.
    let read = |n: &str| {
        let bytes = std::fs::read(d.join(format!("{n}.dat"))).unwrap();
        parse_message(&bytes, &Limits::default(), Framing::Datagram).unwrap()
    };
    let vias = read("mult-ip-in-header").vias();
    assert_eq!(
        (vias[0].host.as_str(), vias[0].port),
        ("[2001:db8::9:1]", Some(6050))
    );
    assert_eq!(
        (
            vias[2].transport.as_str(),
            vias[2].host.as_str(),
            vias[2].port
        ),
        ("TCP", "[2001:db8::9:255]", None)
    );
    assert_eq!(
        read("port-unambiguous").request_uri(),
        Some("sip:[2001:db8::10]:5070")
    );
    assert_eq!(
        read("port-ambiguous").request_uri(),
        Some("sip:[2001:db8::10:5070]")
    );
    assert_eq!(
        ontime_sip::message::uri_socket_addr("sip:[2001:db8::10]:5070"),
        Some("[2001:db8::10]:5070".parse().unwrap())
    );
    let via = read("via-received-param-no-delim").top_via().unwrap();
    assert_eq!(
        via.params
            .iter()
            .find(|(n, _)| n == "received")
            .unwrap()
            .1
            .as_deref(),
        Some("2001:db8::9:255")
    );
    // §4.6: the IPv6 SDP is read (its G.726 audio has no codec in common with us: 488).
    let bytes = fix_content_length(&std::fs::read(d.join("ipv6-in-sdp.dat")).unwrap());
    let m = parse_message(&bytes, &Limits::default(), Framing::Datagram).unwrap();
    let offer = ontime_sip::SessionDescription::parse(&m.body).unwrap();
    let audio = offer.audio().unwrap();
    assert_eq!(
        offer.rtp_address(audio),
        Some("[2001:db8::20]:6000".parse().unwrap())
    );
    let local = ontime_sip::LocalMedia::new("[2001:db8::2]:50000".parse().unwrap(), 1);
    assert_eq!(
        ontime_sip::sdp::answer_offer(&offer, &local).unwrap_err(),
        ontime_sip::Error::NoCommonCodec
    );
}
