//! REGISTER (RFC 3261 §10) against a hand-written registrar on simulated time: digest, granted
//! expiry, refresh at half of it, 423, back-off, timeouts and the unregistration.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ontime_sip::digest::DigestResponse;
use ontime_sip::{
    Credentials, Endpoint, Error, Event, Message, RegistrationHandle, RegistrationParams, Transport,
};

const REGISTRAR: &str = "10.0.0.9:5060";
const CHALLENGE: &str =
    "Digest realm=\"provider.test\", nonce=\"abc\", algorithm=SHA-256, qop=\"auth\"";

struct Registrar {
    ua: Endpoint,
    start: Instant,
    now: Instant,
    /// Sent, not yet looked at.
    pending: Vec<ontime_sip::Transmit>,
}

impl Registrar {
    fn new(credentials: Option<Credentials>) -> Registrar {
        let mut cfg = config(UAC_ADDR);
        cfg.credentials = credentials;
        let now = Instant::now();
        Registrar {
            ua: Endpoint::new(cfg),
            start: now,
            now,
            pending: Vec::new(),
        }
    }

    fn register(&mut self, expires: u64) -> RegistrationHandle {
        self.ua
            .register(
                RegistrationParams {
                    registrar_uri: None,
                    aor: "sip:alice@provider.test".into(),
                    contact: None,
                    destination: addr(REGISTRAR),
                    transport: Transport::Udp,
                    expires: Duration::from_secs(expires),
                },
                self.now,
            )
            .unwrap()
    }

    /// The one REGISTER waiting to be answered.
    fn request(&mut self) -> (Message, Vec<u8>) {
        let mut out = std::mem::take(&mut self.pending);
        out.extend(drain(&mut self.ua));
        assert_eq!(
            out.len(),
            1,
            "{:?}",
            out.iter()
                .map(|t| first_line(&t.payload))
                .collect::<Vec<_>>()
        );
        assert_eq!(out[0].destination, addr(REGISTRAR));
        (parse(&out[0].payload), out[0].payload.clone())
    }

    /// Answers the waiting REGISTER; returns it and the events that follow.
    fn answer(&mut self, status: u16, extra: &[(&str, &str)]) -> (Message, Vec<Event>) {
        let (m, bytes) = self.request();
        let resp = response(&bytes, status, Some("reg"), extra, "");
        self.ua.handle_datagram(&resp, addr(REGISTRAR), self.now);
        (m, events(&mut self.ua))
    }

    /// Advances to the endpoint's next deadline; returns how long that was from the start.
    fn next_timer(&mut self) -> Duration {
        let at = self.ua.poll_timeout().expect("a timer");
        self.now = self.now.max(at);
        self.ua.handle_timeout(self.now);
        self.now - self.start
    }

    /// Fires timers until the endpoint sends something (the next REGISTER); returns when.
    fn wait_register(&mut self) -> Duration {
        loop {
            let t = self.next_timer();
            let out = drain(&mut self.ua);
            if !out.is_empty() {
                assert!(out
                    .iter()
                    .all(|o| first_line(&o.payload).starts_with("REGISTER")));
                self.pending = out;
                return t;
            }
        }
    }

    /// Fires timers until an event comes; returns when, dropping what is sent meanwhile.
    fn wait_event(&mut self) -> (Duration, Vec<Event>) {
        loop {
            let t = self.next_timer();
            drain(&mut self.ua);
            let evs = events(&mut self.ua);
            if !evs.is_empty() {
                return (t, evs);
            }
        }
    }

    /// Fires every timer left: nothing may be sent.
    fn run_out(&mut self) {
        while self.ua.poll_timeout().is_some() {
            self.next_timer();
            assert!(drain(&mut self.ua).is_empty());
        }
    }
}

#[test]
fn registers_with_digest_and_refreshes_at_half_the_granted_expiry() {
    let mut r = Registrar::new(Some(Credentials::new("alice", "pw")));
    let handle = r.register(3600);
    let (first, evs) = r.answer(401, &[("WWW-Authenticate", CHALLENGE)]);
    assert!(evs.is_empty());
    assert_eq!(first.request_uri(), Some("sip:provider.test"));
    assert_eq!(first.header("To"), Some("<sip:alice@provider.test>"));
    assert!(first
        .header("From")
        .unwrap()
        .starts_with("<sip:alice@provider.test>;tag="));
    assert_eq!(first.header("Contact"), Some("<sip:ontime@10.0.0.1:5060>"));
    assert_eq!(first.header("Expires"), Some("3600"));
    assert_eq!(first.cseq().0, 1);
    assert!(first.header("Authorization").is_none());

    // The registrar grants 120 s to our contact (and lists another binding).
    let contact = "<sip:other@192.0.2.1>;expires=3000, <sip:ontime@10.0.0.1:5060>;expires=120";
    let (second, evs) = r.answer(200, &[("Contact", contact), ("Expires", "600")]);
    assert_eq!(
        evs,
        [Event::Registered {
            handle,
            expires: Duration::from_secs(120)
        }]
    );
    assert_eq!(second.call_id(), first.call_id());
    assert_eq!(second.header("From"), first.header("From"));
    assert_eq!(second.cseq().0, 2);
    let auth = DigestResponse::parse(second.header("Authorization").unwrap()).unwrap();
    assert_eq!((auth.uri.as_str(), auth.nc), ("sip:provider.test", Some(1)));
    assert!(auth.verify("REGISTER", "alice", &"pw".into()));

    // Refresh at 60 s, signed at once with the same nonce, next count.
    assert_eq!(r.wait_register(), Duration::from_secs(60));
    let (third, evs) = r.answer(200, &[("Expires", "100")]);
    assert_eq!(third.call_id(), first.call_id());
    assert_eq!(third.cseq().0, 3);
    let auth = DigestResponse::parse(third.header("Authorization").unwrap()).unwrap();
    assert_eq!(auth.nc, Some(2));
    assert!(auth.verify("REGISTER", "alice", &"pw".into()));
    assert_eq!(
        evs,
        [Event::Registered {
            handle,
            expires: Duration::from_secs(100)
        }]
    );
    assert_eq!(r.wait_register(), Duration::from_secs(110));
    // The registrar's nonce went stale: answered once more without a failure.
    let (_, evs) = r.answer(
        401,
        &[(
            "WWW-Authenticate",
            &format!("{}, stale=true", CHALLENGE.replace("abc", "def")),
        )],
    );
    assert!(evs.is_empty());
    let (fifth, evs) = r.answer(200, &[]);
    assert!(fifth
        .header("Authorization")
        .unwrap()
        .contains("nonce=\"def\""));
    assert_eq!(fifth.cseq().0, 5);
    assert_eq!(
        evs,
        [Event::Registered {
            handle,
            expires: Duration::from_secs(3600)
        }],
        "no Contact or Expires: what we asked for"
    );

    // Unregister: Expires: 0, then the handle is gone.
    r.ua.unregister(handle, r.now).unwrap();
    let (last, evs) = r.answer(200, &[]);
    assert_eq!(last.header("Expires"), Some("0"));
    assert_eq!(last.cseq().0, 6);
    assert!(last.header("Authorization").is_some());
    assert_eq!(evs, [Event::Unregistered { handle }]);
    assert_eq!(r.ua.active_registrations(), 0);
    r.run_out();
    assert_eq!(
        r.ua.unregister(handle, r.now),
        Err(Error::UnknownRegistration(handle.0))
    );
}

#[test]
fn interval_too_brief_then_failures_back_off() {
    let mut r = Registrar::new(None);
    let handle = r.register(60);
    let (_, evs) = r.answer(423, &[("Min-Expires", "1800")]);
    assert!(evs.is_empty());
    let (again, evs) = r.answer(503, &[]);
    assert_eq!(again.header("Expires"), Some("1800"));
    assert_eq!(
        evs,
        [Event::RegistrationFailed {
            handle,
            status: 503,
            retry_in: Duration::from_secs(30)
        }]
    );
    assert_eq!(r.wait_register(), Duration::from_secs(30));
    let (_, evs) = r.answer(401, &[("WWW-Authenticate", CHALLENGE)]);
    assert_eq!(
        evs,
        [Event::RegistrationFailed {
            handle,
            status: 401,
            retry_in: Duration::from_secs(60)
        }],
        "no credentials: the challenge is a failure"
    );
    assert_eq!(r.wait_register(), Duration::from_secs(90));
    // No answer at all: timer F (64·T1 = 32 s) gives 408.
    r.request();
    let (t, evs) = r.wait_event();
    assert_eq!(t, Duration::from_secs(122));
    assert_eq!(
        evs,
        [Event::RegistrationFailed {
            handle,
            status: 408,
            retry_in: Duration::from_secs(120)
        }]
    );
    // A 423 that does not raise the expiry is a failure like any other.
    assert_eq!(r.wait_register(), Duration::from_secs(242));
    let (_, evs) = r.answer(423, &[("Min-Expires", "1800")]);
    assert!(matches!(
        evs[..],
        [Event::RegistrationFailed { status: 423, .. }]
    ));
    // Success resets the back-off.
    assert_eq!(r.wait_register(), Duration::from_secs(482));
    let (_, evs) = r.answer(200, &[]);
    assert!(matches!(evs[..], [Event::Registered { .. }]));
    let failed_at = r.wait_register();
    let (_, evs) = r.answer(500, &[]);
    assert!(matches!(
        evs[..],
        [Event::RegistrationFailed { retry_in, .. }] if retry_in == Duration::from_secs(30)
    ));
    assert_eq!(failed_at, Duration::from_secs(242 + 240 + 900));
    // Final results counted exactly, one per REGISTER answered (a challenge answered with
    // credentials would not be one): the two 423s, 503, the unanswerable 401, 408 and 500
    // failed, one 200 ok.
    let stats = r.ua.stats();
    assert_eq!((stats.registrations_ok, stats.registrations_failed), (1, 6));
    assert_eq!((stats.challenges_answered, stats.challenges_failed), (0, 1));
}

#[test]
fn wrong_credentials_fail_and_unregister_waits_for_the_request_in_flight() {
    let mut r = Registrar::new(Some(Credentials::new("alice", "wrong")));
    let handle = r.register(3600);
    r.answer(401, &[("WWW-Authenticate", CHALLENGE)]);
    let (_, evs) = r.answer(401, &[("WWW-Authenticate", CHALLENGE)]);
    assert!(matches!(
        evs[..],
        [Event::RegistrationFailed { status: 401, .. }]
    ));
    r.wait_register();
    let (req, bytes) = r.request();
    assert!(
        req.header("Authorization").is_some(),
        "the kept challenge signs the retry"
    );
    // Unregister while that REGISTER is unanswered: the Expires: 0 goes after its answer.
    r.ua.unregister(handle, r.now).unwrap();
    assert!(drain(&mut r.ua).is_empty());
    let resp = response(&bytes, 200, Some("reg"), &[], "");
    r.ua.handle_datagram(&resp, addr(REGISTRAR), r.now);
    assert!(events(&mut r.ua).is_empty());
    let (unreg, evs) = r.answer(500, &[]);
    assert_eq!(unreg.header("Expires"), Some("0"));
    assert_eq!(evs, [Event::Unregistered { handle }]);
    r.run_out();
}

#[test]
fn arguments_are_checked() {
    let mut r = Registrar::new(None);
    let base = RegistrationParams {
        registrar_uri: None,
        aor: "sip:alice@provider.test".into(),
        contact: None,
        destination: addr(REGISTRAR),
        transport: Transport::Tcp,
        expires: Duration::from_secs(60),
    };
    for bad in [
        RegistrationParams {
            aor: "alice".into(),
            ..base.clone()
        },
        RegistrationParams {
            registrar_uri: Some("sip:a b".into()),
            ..base.clone()
        },
        RegistrationParams {
            contact: Some("<sip:x@y>".into()),
            ..base.clone()
        },
    ] {
        assert!(matches!(
            r.ua.register(bad, r.now),
            Err(Error::InvalidUri(_))
        ));
    }
    let zero = RegistrationParams {
        expires: Duration::ZERO,
        ..base.clone()
    };
    assert!(matches!(r.ua.register(zero, r.now), Err(Error::Message(_))));
    assert!(drain(&mut r.ua).is_empty());
    let explicit = RegistrationParams {
        registrar_uri: Some("sip:registrar.provider.test;transport=tcp".into()),
        contact: Some("sip:bot@203.0.113.5:5080;transport=tcp".into()),
        ..base
    };
    r.ua.register(explicit, r.now).unwrap();
    let (m, _) = r.request();
    assert_eq!(
        m.request_uri(),
        Some("sip:registrar.provider.test;transport=tcp")
    );
    assert_eq!(
        m.header("Contact"),
        Some("<sip:bot@203.0.113.5:5080;transport=tcp>")
    );
    assert!(m.header("Via").unwrap().starts_with("SIP/2.0/TCP "));
}
