//! The switchboard on one simulated clock against a scripted SIP peer (quinn's `Pair`, str0m's
//! simulated network): the peer is a second `ontime_sip::Endpoint` playing the trunk — caller
//! for inbound calls, callee for dial-outs — and the harness plays the driver: it carries
//! messages both ways (dropping those a filter names), answers the switchboard's route requests
//! as the test says, keeps each started call's slot until the call ends, and records every
//! action. Nothing here sleeps or binds a SIP port; a flow of several simulated minutes runs in
//! milliseconds. The only real resources are the RTP ports admission binds, as a call's sockets.
//!
//! To add a flow test: build a [`Harness`] (tweak [`Harness::config`] first if needed), script
//! the peer through `h.peer` and the helpers, then `h.pump()` / `h.advance(..)` and assert on
//! [`Harness::lines`], [`Harness::log`] (every action as text), [`Harness::actions`] and
//! `h.peer_events`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ontime_sip::sdp::{self, LocalMedia};
use ontime_sip::{CallHandle, CallParams, Endpoint, Event, Transmit, Transport};

use super::{Action, CallStart, Setup, Switchboard};
use crate::admission::CallSlots;
use crate::agent::{Admission, CallInfo};
use crate::call::DialogEvent;
use crate::config::{Config, PortRange};

/// The gateway's SIP address on the simulated network (admission binds RTP on its IP).
pub(super) const GATEWAY: &str = "127.0.0.1:5060";
/// The trunk's.
pub(super) const TRUNK: &str = "127.0.0.1:5070";

pub(super) fn addr(s: &str) -> SocketAddr {
    s.parse().expect("a literal address")
}

/// How the harness, as driver, answers [`Action::Route`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RouteMode {
    /// The route has nothing to wait for (the built-in agent): answer at once.
    Immediate,
    /// The route waits (a webhook, a bot connecting): ring, and hold the verdict until the test
    /// gives it with [`Harness::give_verdict`].
    Held,
}

/// One message on the simulated wire.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    /// Simulated time since the start.
    pub at: Duration,
    /// Sent by the gateway (else by the trunk).
    pub from_gateway: bool,
    /// Its first line.
    pub line: String,
    /// The whole message.
    pub text: String,
    /// Dropped by the filter.
    pub dropped: bool,
}

/// `(from_gateway, first line) -> drop?`
pub(super) type DropFilter = Box<dyn FnMut(bool, &str) -> bool>;

/// The switchboard, its peer and the clock.
pub(super) struct Harness {
    /// The RTP ports admission hands out.
    pub rtp_ports: PortRange,
    pub start: Instant,
    pub now: Instant,
    pub board: Switchboard,
    pub slots: Arc<CallSlots>,
    pub peer: Endpoint,
    pub peer_events: Vec<Event>,
    /// Every action but [`Action::StartCall`] (whose start [`Harness::live`] keeps).
    pub actions: Vec<Action>,
    /// Every action, as text, in order.
    pub log: Vec<String>,
    pub wire: Vec<Seen>,
    pub drop: DropFilter,
    pub route: RouteMode,
    /// Routes held ([`RouteMode::Held`]), in order.
    pub held: Vec<(CallHandle, CallInfo)>,
    /// Calls started and not ended: their start (holding the slot), as a call task would.
    pub live: HashMap<CallHandle, CallStart>,
}

impl Harness {
    /// A gateway configuration for the harness: SIP on [`GATEWAY`], RTP on free loopback
    /// ports, answered at once, no reserve (the headroom is set by the test).
    pub(super) fn config() -> Config {
        Config {
            sip_listen: addr(GATEWAY),
            public_ip: addr(GATEWAY).ip(),
            rtp_ports: crate::admission::tests::free_range(8),
            admission_reserve: 0,
            ..Config::default()
        }
    }

    /// The switchboard on `config`, its trunk at [`TRUNK`], with headroom for 10 calls.
    pub(super) fn new(config: Config) -> Harness {
        let start = Instant::now();
        let rtp_ports = config.rtp_ports;
        let slots =
            CallSlots::with_reserve(config.max_calls, config.rtp_ports, config.admission_reserve);
        slots.set_headroom(10);
        let setup = Setup {
            sip_addr: addr(GATEWAY),
            tcp_addr: None,
            tls_addr: None,
            registrations: Vec::new(),
            trusted: config.trunk_cidrs.clone(),
            sender_origin: start,
            epoch: (start, 1_800_000_000_000),
            seed: 7,
        };
        let board = Switchboard::new(Arc::new(config), slots.clone(), setup, start);
        let mut peer_config = ontime_sip::Config::new(addr(TRUNK));
        peer_config.rng_seed = Some(11);
        let mut h = Harness {
            rtp_ports,
            start,
            now: start,
            board,
            slots,
            peer: Endpoint::new(peer_config),
            peer_events: Vec::new(),
            actions: Vec::new(),
            log: Vec::new(),
            wire: Vec::new(),
            drop: Box::new(|_, _| false),
            route: RouteMode::Immediate,
            held: Vec::new(),
            live: HashMap::new(),
        };
        h.pump();
        h
    }

    fn deliver(&mut self, from_gateway: bool, t: Transmit) {
        let text = String::from_utf8_lossy(&t.payload).into_owned();
        let line = text.lines().next().unwrap_or_default().to_string();
        let dropped = (self.drop)(from_gateway, &line);
        self.wire.push(Seen {
            at: self.now - self.start,
            from_gateway,
            line,
            text,
            dropped,
        });
        if dropped {
            return;
        }
        if from_gateway {
            assert_eq!(t.destination, addr(TRUNK), "the gateway sent elsewhere");
            self.peer
                .handle_message(&t.payload, addr(GATEWAY), t.transport, self.now);
        } else {
            assert_eq!(t.destination, addr(GATEWAY), "the trunk sent elsewhere");
            self.board
                .handle_message(&t.payload, t_source(), t.transport, self.now);
        }
    }

    /// Carry out one action as the driver would, and keep it.
    fn act(&mut self, action: Action) {
        match &action {
            Action::Route(call, info) => match self.route {
                RouteMode::Immediate => {
                    self.board
                        .routed(*call, info, Admission::Answer, Vec::new(), self.now)
                }
                RouteMode::Held => {
                    self.board.routing(*call, self.now);
                    self.held.push((*call, info.clone()));
                }
            },
            Action::ToCall(call, DialogEvent::Ended(_)) => {
                // The call task ends: its slot goes back.
                self.live.remove(call);
            }
            _ => {}
        }
        self.log.push(format!("{action:?}"));
        match action {
            Action::StartCall(start) => {
                self.live.insert(start.call, *start);
            }
            other => self.actions.push(other),
        }
    }

    /// Deliver messages and carry out actions until both sides are quiet.
    pub(super) fn pump(&mut self) {
        for _ in 0..1000 {
            let mut any = false;
            while let Some(t) = self.board.poll_transmit() {
                any = true;
                self.deliver(true, t);
            }
            while let Some(t) = self.peer.poll_transmit() {
                any = true;
                self.deliver(false, t);
            }
            while let Some(a) = self.board.poll_action() {
                any = true;
                self.act(a);
            }
            while let Some(e) = self.peer.poll_event() {
                self.peer_events.push(e);
            }
            if !any {
                return;
            }
        }
        panic!("messages never stopped");
    }

    /// Advance simulated time by `by`, firing every timer on the way.
    pub(super) fn advance(&mut self, by: Duration) {
        let end = self.now + by;
        self.pump();
        loop {
            let next = [self.board.poll_timeout(), self.peer.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.board.handle_timeout(self.now);
                    self.peer.handle_timeout(self.now);
                    self.pump();
                }
                _ => break,
            }
        }
        self.now = end;
        self.pump();
    }

    /// Give the verdict of the oldest held route.
    pub(super) fn give_verdict(&mut self, admission: Admission) {
        let (call, info) = self.held.remove(0);
        self.board
            .routed(call, &info, admission, Vec::new(), self.now);
        self.pump();
    }

    /// The trunk places a call to the gateway; its handle at the trunk.
    pub(super) fn call_in(&mut self) -> CallHandle {
        let offer = sdp::build_offer(&LocalMedia::new(addr("127.0.0.1:40000"), 11));
        let call = self
            .peer
            .place_call(
                CallParams {
                    target: format!("sip:bot@{GATEWAY}"),
                    from: Some("sip:+15550001111@127.0.0.1".into()),
                    destination: addr(GATEWAY),
                    transport: Transport::Udp,
                    offer,
                },
                self.now,
            )
            .expect("the trunk places a call");
        self.pump();
        call
    }

    /// Start lines on the wire, `>` from the gateway, `<` from the trunk.
    pub(super) fn lines(&self) -> Vec<String> {
        self.wire
            .iter()
            .map(|s| {
                format!(
                    "{}{}{}",
                    if s.from_gateway { "> " } else { "< " },
                    s.line,
                    if s.dropped { " (dropped)" } else { "" }
                )
            })
            .collect()
    }

    /// Messages from the gateway (or the trunk) whose first line starts with `prefix`.
    pub(super) fn count(&self, from_gateway: bool, prefix: &str) -> usize {
        self.wire
            .iter()
            .filter(|s| s.from_gateway == from_gateway && s.line.starts_with(prefix))
            .count()
    }
}

/// Where the trunk's messages come from.
fn t_source() -> SocketAddr {
    addr(TRUNK)
}
