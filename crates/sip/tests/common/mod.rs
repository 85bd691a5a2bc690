//! A simulated network and clock for two endpoints: delivers every transmit to the endpoint at its
//! destination (or drops it when a filter says so) and records the first line of each message.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ontime_sip::sdp::{self, LocalMedia, SessionDescription};
use ontime_sip::{CallHandle, CallParams, Config, Endpoint, Event, Transmit, Transport};

pub const UAC_ADDR: &str = "10.0.0.1:5060";
pub const UAS_ADDR: &str = "10.0.0.2:5060";

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// One message seen on the simulated wire.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Duration,
    pub from_uac: bool,
    pub line: String,
    pub dropped: bool,
    pub payload: Vec<u8>,
}

pub type DropFilter = Box<dyn FnMut(bool, &str) -> bool>;

pub struct Net {
    pub uac: Endpoint,
    pub uas: Endpoint,
    pub start: Instant,
    pub now: Instant,
    pub wire: Vec<Seen>,
    pub uac_events: Vec<Event>,
    pub uas_events: Vec<Event>,
    /// `(from_uac, first line) -> drop?`
    pub drop: DropFilter,
    pub transport: Transport,
}

pub fn config(a: &str) -> Config {
    let mut c = Config::new(addr(a));
    c.rng_seed = Some(a.len() as u64 + u64::from(addr(a).ip().to_string().ends_with('1')));
    c
}

impl Net {
    pub fn new() -> Net {
        Net::with_configs(config(UAC_ADDR), config(UAS_ADDR))
    }

    pub fn with_configs(uac: Config, uas: Config) -> Net {
        let now = Instant::now();
        Net {
            uac: Endpoint::new(uac),
            uas: Endpoint::new(uas),
            start: now,
            now,
            wire: Vec::new(),
            uac_events: Vec::new(),
            uas_events: Vec::new(),
            drop: Box::new(|_, _| false),
            transport: Transport::Udp,
        }
    }

    fn deliver(&mut self, from_uac: bool, t: Transmit) {
        let line = first_line(&t.payload);
        let dropped = (self.drop)(from_uac, &line);
        self.wire.push(Seen {
            at: self.now - self.start,
            from_uac,
            line,
            dropped,
            payload: t.payload.clone(),
        });
        if dropped {
            return;
        }
        let (to, expect) = if from_uac {
            (&mut self.uas, UAS_ADDR)
        } else {
            (&mut self.uac, UAC_ADDR)
        };
        assert_eq!(
            t.destination,
            addr(expect),
            "sent to the wrong address: {}",
            first_line(&t.payload)
        );
        let source = if from_uac {
            addr(UAC_ADDR)
        } else {
            addr(UAS_ADDR)
        };
        to.handle_message(&t.payload, source, t.transport, self.now);
    }

    /// Delivers until both sides are quiet.
    pub fn pump(&mut self) {
        for _ in 0..1000 {
            let mut any = false;
            while let Some(t) = self.uac.poll_transmit() {
                any = true;
                self.deliver(true, t);
            }
            while let Some(t) = self.uas.poll_transmit() {
                any = true;
                self.deliver(false, t);
            }
            while let Some(e) = self.uac.poll_event() {
                self.uac_events.push(e);
            }
            while let Some(e) = self.uas.poll_event() {
                self.uas_events.push(e);
            }
            if !any {
                return;
            }
        }
        panic!("messages never stopped");
    }

    /// Advances simulated time to `until`, firing every timer on the way.
    pub fn run_until(&mut self, until: Duration) {
        let end = self.start + until;
        self.pump();
        loop {
            let next = [self.uac.poll_timeout(), self.uas.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.uac.handle_timeout(self.now);
                    self.uas.handle_timeout(self.now);
                    self.pump();
                }
                _ => break,
            }
        }
        self.now = end;
        self.pump();
    }

    pub fn advance(&mut self, by: Duration) {
        let until = self.now - self.start + by;
        self.run_until(until);
    }

    /// Start lines seen on the wire (not dropped ones), with direction arrows.
    pub fn lines(&self) -> Vec<String> {
        self.wire
            .iter()
            .map(|s| {
                format!(
                    "{}{}{}",
                    if s.from_uac { "> " } else { "< " },
                    s.line,
                    if s.dropped { " (dropped)" } else { "" }
                )
            })
            .collect()
    }

    /// Times at which messages whose first line starts with `prefix` were sent.
    pub fn times(&self, from_uac: bool, prefix: &str) -> Vec<Duration> {
        self.wire
            .iter()
            .filter(|s| s.from_uac == from_uac && s.line.starts_with(prefix))
            .map(|s| s.at)
            .collect()
    }

    pub fn count(&self, from_uac: bool, prefix: &str) -> usize {
        self.times(from_uac, prefix).len()
    }

    pub fn place_call(&mut self) -> CallHandle {
        let offer = sdp::build_offer(&LocalMedia::new(addr("10.0.0.1:40000"), 11));
        let call = self
            .uac
            .place_call(
                CallParams {
                    headers: Vec::new(),
                    target: "sip:bot@10.0.0.2:5060".into(),
                    from: None,
                    destination: addr(UAS_ADDR),
                    transport: self.transport,
                    offer,
                },
                self.now,
            )
            .unwrap();
        self.pump();
        call
    }

    /// The last IncomingCall at the UAS.
    pub fn incoming(&self) -> ontime_sip::IncomingCall {
        self.uas_events
            .iter()
            .rev()
            .find_map(|e| match e {
                Event::IncomingCall(c) => Some((**c).clone()),
                _ => None,
            })
            .expect("no IncomingCall")
    }

    pub fn uas_answer(
        &mut self,
        call: CallHandle,
        offer: &SessionDescription,
    ) -> SessionDescription {
        let (answer, _) =
            sdp::answer_offer(offer, &LocalMedia::new(addr("10.0.0.2:50000"), 22)).unwrap();
        self.uas.answer(call, &answer, self.now).unwrap();
        self.pump();
        answer
    }

    /// A connected call: UAC handle, UAS handle.
    pub fn connected_call(&mut self) -> (CallHandle, CallHandle) {
        let uac = self.place_call();
        let inc = self.incoming();
        self.uas_answer(inc.call, inc.offer.as_ref().unwrap());
        assert!(
            self.uas_events
                .contains(&Event::Established { call: inc.call }),
            "{:#?}",
            self.lines()
        );
        (uac, inc.call)
    }
}

pub fn first_line(p: &[u8]) -> String {
    let end = p.iter().position(|b| *b == b'\r').unwrap_or(p.len());
    String::from_utf8_lossy(&p[..end]).into_owned()
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn ended(events: &[Event], call: CallHandle) -> Option<ontime_sip::EndReason> {
    events.iter().find_map(|e| match e {
        Event::Ended { call: c, reason } if *c == call => Some(reason.clone()),
        _ => None,
    })
}

/// An endpoint on a real UDP socket, driven by hand: send what it has, read what came, fire
/// timers. Bounded by the socket read timeout.
pub struct UdpPeer {
    pub ep: Endpoint,
    pub sock: std::net::UdpSocket,
    pub events: Vec<Event>,
    pub sent_lines: Vec<String>,
    pub received_lines: Vec<String>,
}

impl UdpPeer {
    /// Binds 127.0.0.1:0 and builds an endpoint advertising the bound address.
    pub fn bind() -> UdpPeer {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(2)))
            .unwrap();
        let mut cfg = Config::new(sock.local_addr().unwrap());
        cfg.rng_seed = Some(u64::from(sock.local_addr().unwrap().port()));
        UdpPeer {
            ep: Endpoint::new(cfg),
            sock,
            events: Vec::new(),
            sent_lines: Vec::new(),
            received_lines: Vec::new(),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.sock.local_addr().unwrap()
    }

    /// One round: flush transmits, read at most a few datagrams, fire due timers, collect events.
    pub fn step(&mut self) {
        while let Some(t) = self.ep.poll_transmit() {
            self.sent_lines.push(first_line(&t.payload));
            self.sock.send_to(&t.payload, t.destination).unwrap();
        }
        let mut buf = [0u8; 65_535];
        for _ in 0..8 {
            match self.sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    self.received_lines.push(first_line(&buf[..n]));
                    self.ep.handle_datagram(&buf[..n], from, Instant::now());
                }
                Err(_) => break,
            }
        }
        if self.ep.poll_timeout().is_some_and(|t| t <= Instant::now()) {
            self.ep.handle_timeout(Instant::now());
        }
        while let Some(t) = self.ep.poll_transmit() {
            self.sent_lines.push(first_line(&t.payload));
            self.sock.send_to(&t.payload, t.destination).unwrap();
        }
        while let Some(e) = self.ep.poll_event() {
            self.events.push(e);
        }
    }
}

/// Steps both peers until `done` holds, for at most `limit`.
pub fn drive(
    a: &mut UdpPeer,
    b: &mut UdpPeer,
    limit: Duration,
    mut done: impl FnMut(&UdpPeer, &UdpPeer) -> bool,
) {
    let end = Instant::now() + limit;
    while !done(a, b) {
        assert!(
            Instant::now() < end,
            "timed out; a sent {:?} got {:?}; b sent {:?} got {:?}",
            a.sent_lines,
            a.received_lines,
            b.sent_lines,
            b.received_lines
        );
        a.step();
        b.step();
    }
}

/// Parses a message the endpoint sent.
pub fn parse(bytes: &[u8]) -> ontime_sip::Message {
    ontime_sip::parse_message(
        bytes,
        &ontime_sip::Limits::default(),
        ontime_sip::Framing::Datagram,
    )
    .unwrap_or_else(|e| panic!("{e:?}: {}", String::from_utf8_lossy(bytes)))
}

/// A response to `req` as a hand-written peer sends it: Via, From, Call-ID and CSeq copied, To
/// copied with `to_tag` added when it has none, then `extra` and the body.
pub fn response(
    req: &[u8],
    status: u16,
    to_tag: Option<&str>,
    extra: &[(&str, &str)],
    body: &str,
) -> Vec<u8> {
    let m = parse(req);
    let mut out = format!("SIP/2.0 {status} Whatever\r\n");
    for (n, v) in &m.headers {
        match n.as_str() {
            "Via" | "From" | "Call-ID" | "CSeq" => out.push_str(&format!("{n}: {v}\r\n")),
            "To" => match to_tag {
                Some(t) if !v.contains(";tag=") => out.push_str(&format!("To: {v};tag={t}\r\n")),
                _ => out.push_str(&format!("To: {v}\r\n")),
            },
            _ => {}
        }
    }
    for (n, v) in extra {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() {
        out.push_str("Content-Type: application/sdp\r\n");
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    out.into_bytes()
}

/// Every message the endpoint has to send now.
pub fn drain(ep: &mut Endpoint) -> Vec<Transmit> {
    std::iter::from_fn(|| ep.poll_transmit()).collect()
}

/// Every event the endpoint has now.
pub fn events(ep: &mut Endpoint) -> Vec<Event> {
    std::iter::from_fn(|| ep.poll_event()).collect()
}
