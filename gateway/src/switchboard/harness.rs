//! The whole gateway on one simulated clock against a scripted SIP peer (quinn's `Pair`, str0m's
//! simulated network): the switchboard, each answered call's real `CallCore` with the stub agent
//! ([`SimCall`]), and the sender's real `TickEngine`. The peer is a second
//! `ontime_sip::Endpoint` playing the trunk — caller for inbound calls, callee for dial-outs —
//! and the harness plays the drivers: it carries messages both ways (dropping those a filter
//! names), answers the switchboard's route requests as the test says, runs each call as its task
//! would (the call's SIP requests go back to the switchboard, the switchboard's dialog events to
//! the call), serves the sender's slots, and records every action. Nothing here sleeps or binds
//! a SIP port; a flow of several simulated minutes runs in milliseconds. The only real resources
//! are the RTP ports admission binds, as a call's sockets.
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

use ontime_inference::InferenceEvent;
use ontime_sender::{Controller, EngineConfig, TickEngine};

use super::sim_call::SimCall;
use super::{Action, Setup, Switchboard};
use crate::admission::CallSlots;
use crate::agent::{Admission, CallInfo};
use crate::call::CallCommand;
use crate::config::{Config, PortRange};
use ontime_twilio::Verb;

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
    /// Every action but [`Action::StartCall`] (whose call [`Harness::live`] runs).
    pub actions: Vec<Action>,
    /// Every action, as text, in order.
    pub log: Vec<String>,
    pub wire: Vec<Seen>,
    pub drop: DropFilter,
    pub route: RouteMode,
    /// Routes held ([`RouteMode::Held`]), in order.
    pub held: Vec<(CallHandle, CallInfo)>,
    /// Calls started and not ended, each run as its task would (holding its slot).
    pub live: HashMap<CallHandle, SimCall>,
    /// Calls that ended, with what they sent and their end record.
    pub done: Vec<SimCall>,
    /// The sender's tick, shared by every call (time since `start`).
    pub engine: TickEngine,
    controller: Controller,
    /// The Unix time of `start`, in ms (the wall clock of records).
    epoch_unix_ms: u64,
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
            epoch: (start, EPOCH_UNIX_MS),
            seed: 7,
        };
        let board = Switchboard::new(Arc::new(config), slots.clone(), setup, start);
        let (engine, controller) = TickEngine::new(EngineConfig {
            metrics: false,
            ..EngineConfig::default()
        });
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
            done: Vec::new(),
            engine,
            controller,
            epoch_unix_ms: EPOCH_UNIX_MS,
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
        if let Action::SipStats(_) = action {
            // Metrics plumbing; the endpoint's own tests count its messages.
            return;
        }
        self.log.push(format!("{action:?}"));
        match action {
            Action::Route(call, info) => {
                match self.route {
                    RouteMode::Immediate => {
                        self.board
                            .routed(call, &info, Admission::Answer, Vec::new(), self.now)
                    }
                    RouteMode::Held => {
                        self.board.routing(call, self.now);
                        self.held.push((call, info.clone()));
                    }
                }
                self.actions.push(Action::Route(call, info));
            }
            Action::StartCall(start) => {
                let wall = std::time::UNIX_EPOCH
                    + Duration::from_millis(self.epoch_unix_ms)
                    + (self.now - self.start);
                let sim = SimCall::start(*start, self.now, wall);
                self.live.insert(sim.call, sim);
            }
            Action::ToCall(call, event) => {
                if let Some(sim) = self.live.get_mut(&call) {
                    sim.core.handle_dialog(event.clone(), self.now);
                }
                self.actions.push(Action::ToCall(call, event));
            }
            other => self.actions.push(other),
        }
    }

    /// Run every call's task until it is quiet: its SIP requests go to the switchboard; a call
    /// whose core has ended is done (its slot goes back).
    fn run_calls(&mut self) -> bool {
        let mut sip = Vec::new();
        for sim in self.live.values_mut() {
            sim.drain(self.now, &mut self.controller, &mut sip);
        }
        let any = !sip.is_empty();
        for (call, request) in sip {
            self.board.call_request(call, request, self.now);
        }
        let ended: Vec<CallHandle> = self
            .live
            .iter()
            .filter(|(_, s)| s.ended.is_some() && s.core.poll_timeout().is_none())
            .map(|(c, _)| *c)
            .collect();
        for call in ended {
            if let Some(mut sim) = self.live.remove(&call) {
                sim.finish();
                self.done.push(sim);
            }
        }
        any
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
            any |= self.run_calls();
            if !any {
                return;
            }
        }
        panic!("messages never stopped");
    }

    /// Advance simulated time by `by`, firing every timer on the way: the switchboard's and the
    /// trunk's, the sender's slots, each call's core and its caller's packets, in time order.
    pub(super) fn advance(&mut self, by: Duration) {
        let end = self.now + by;
        self.pump();
        loop {
            let engine_at = self.start + self.engine.poll_timeout();
            let next = [
                self.board.poll_timeout(),
                self.peer.poll_timeout(),
                Some(engine_at),
            ]
            .into_iter()
            .chain(self.live.values().map(|s| s.core.poll_timeout()))
            .chain(self.live.values().map(|s| s.caller_due()))
            .flatten()
            .min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    let now = self.now;
                    for sim in self.live.values_mut() {
                        sim.caller_sends(now);
                    }
                    if engine_at <= now {
                        let since = now - self.start;
                        self.engine.run_due(&mut || since);
                    }
                    for sim in self.live.values_mut() {
                        if sim.core.poll_timeout().is_some_and(|t| t <= now) {
                            sim.core.handle_timeout(now);
                        }
                    }
                    self.board.handle_timeout(now);
                    self.peer.handle_timeout(now);
                    self.pump();
                }
                _ => break,
            }
        }
        self.now = end;
        self.pump();
    }

    /// The one live call (the gateway's handle of it).
    pub(super) fn only_call(&self) -> CallHandle {
        assert_eq!(self.live.len(), 1, "one live call expected");
        *self.live.keys().next().expect("one call")
    }

    /// The caller of `call` speaks for `packets` packets from now.
    pub(super) fn caller_talks(&mut self, call: CallHandle, packets: usize) {
        let now = self.now;
        self.live
            .get_mut(&call)
            .expect("a live call")
            .caller_talks(packets, now);
    }

    /// The inference thread's verdict on `call`'s audio, now.
    pub(super) fn inference(&mut self, call: CallHandle, event: InferenceEvent) {
        let now = self.now;
        self.live
            .get_mut(&call)
            .expect("a live call")
            .core
            .handle_inference(event, now);
        self.pump();
    }

    /// Give the verdict of the oldest held route.
    pub(super) fn give_verdict(&mut self, admission: Admission) {
        self.give_verdict_with(admission, Vec::new());
    }

    /// The held route's verdict, with the TwiML the call runs.
    pub(super) fn give_verdict_with(&mut self, admission: Admission, program: Vec<Verb>) {
        let (call, info) = self.held.remove(0);
        self.board.routed(call, &info, admission, program, self.now);
        self.pump();
    }

    /// Tell the call task of `call` a command (as the registry would) and run to quiet.
    pub(super) fn command(&mut self, call: CallHandle, command: CallCommand) {
        if let Some(sim) = self.live.get_mut(&call) {
            sim.core.handle_command(command, self.now);
        }
        self.pump();
    }

    /// The trunk places a call to the gateway; its handle at the trunk.
    pub(super) fn call_in(&mut self) -> CallHandle {
        self.call_in_with(Vec::new())
    }

    /// [`Harness::call_in`] with these extra headers on the INVITE.
    pub(super) fn call_in_with(&mut self, headers: Vec<(String, String)>) -> CallHandle {
        let offer = sdp::build_offer(&LocalMedia::new(addr("127.0.0.1:40000"), 11));
        let call = self
            .peer
            .place_call(
                CallParams {
                    headers,
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

/// The Unix time of the harness's start, in ms (records carry it).
const EPOCH_UNIX_MS: u64 = 1_800_000_000_000;

/// Where the trunk's messages come from.
fn t_source() -> SocketAddr {
    addr(TRUNK)
}
