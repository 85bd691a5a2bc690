//! The switchboard, sans-IO: every call the gateway has not handed to a call task yet, and the
//! signalling of those it has. It owns the SIP [`Endpoint`], the first look at each datagram
//! ([`SipGuard`]), trust and admission decisions, offer/answer, the ring, answer, ring-timeout
//! and drain timers, and the API's requests on calls (dial out, end a ringing call, BYE, REFER,
//! INFO from a call).
//!
//! Like `ontime-sip`'s endpoint (and quinn-proto), it reads no clock, opens no socket and spawns
//! nothing: it is fed datagrams, requests and `Instant`s, and the caller drains what it produced.
//! The call order, for a driver:
//!
//! 1. feed one input: [`Switchboard::handle_message`], [`Switchboard::handle_timeout`],
//!    [`Switchboard::call_request`], [`Switchboard::registry_request`],
//!    [`Switchboard::routing`]/[`Switchboard::routed`], [`Switchboard::drain`];
//! 2. drain [`Switchboard::poll_transmit`] (bytes to send) and [`Switchboard::poll_action`]
//!    (calls to start, events for call tasks, registry notes, records, counts) until empty;
//! 3. sleep until [`Switchboard::poll_timeout`] or the next input.
//!
//! The wall clock (CDR times) is an `Instant` → Unix ms mapping given at construction, and the
//! randomness (SSRCs, CallSids) a seeded RNG, so a test on simulated time is repeatable to the
//! byte. `gateway/src/sip_driver.rs` is the tokio driver; `harness` runs it on one simulated
//! clock against scripted SIP peers.

mod action;
mod offer;
mod timers;

#[cfg(test)]
mod harness;
#[cfg(test)]
mod sim_call;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ontime_sip::{
    CallHandle, Config as SipConfig, EndReason, Endpoint, Event, LocalMedia, Method,
    RegistrationHandle, SessionDescription, Transmit, Transport,
};
use ontime_twilio::{CallStatus, Direction as CallDirection, NewCall, Verb, XHeaders};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tracing::{info, warn};

pub(crate) use action::{Action, CallStart, Counted, RegistryNote};

use crate::admission::sip_guard::{SipGuard, Verdict};
use crate::admission::{AdmittedCall, CallSlots, RejectReason, RETRY_AFTER_SECS};
use crate::agent::{Admission, CallInfo};
use crate::call::{CallSettings, DialogEvent, SipRequest};
use crate::config::Config;
use crate::records::cdr::{CallDetailRecord, EndCause};
use crate::registry::RegistryRequest;
use timers::{Timer, Timers};

/// The header of our OPTIONS answers that says how many more calls we take (measured headroom
/// within `max_calls`).
pub const HEADROOM_HEADER: &str = "X-Ontime-Headroom";

/// Whether TwiML keeps its call ringing until a `<Dial>` bridges: it begins with
/// `<Dial answerOnBridge="true">` (its bridged leg answers the call).
fn answers_on_bridge(program: &[Verb]) -> bool {
    matches!(program.first(), Some(Verb::Dial(d)) if d.answer_on_bridge)
}

/// How long the gateway stays after the last call of a drain (RFC 3261 T4), absorbing
/// retransmitted BYEs and ACKs.
const LINGER: Duration = Duration::from_secs(5);

/// A registration to keep up, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    /// The address of record (`sip:user@provider`).
    pub aor: String,
    /// Where the REGISTERs go (the registrar, or the trunk as outbound proxy).
    pub destination: SocketAddr,
    /// Over what.
    pub transport: Transport,
}

/// What the switchboard is built from besides the configuration.
pub(crate) struct Setup {
    /// The UDP address the SIP socket is bound to (its port is advertised).
    pub sip_addr: SocketAddr,
    /// Addresses advertised for TCP and TLS, if they listen.
    pub tcp_addr: Option<SocketAddr>,
    /// See `tcp_addr`.
    pub tls_addr: Option<SocketAddr>,
    /// Registrations to keep up.
    pub registrations: Vec<Registration>,
    /// The trunk networks plus each registrar's address.
    pub trusted: Vec<ipnet::IpNet>,
    /// The sender's schedule origin (call settings carry it).
    pub sender_origin: Instant,
    /// `now` and the Unix time in ms at that instant: the wall clock of records.
    pub epoch: (Instant, u64),
    /// Seed of the RNG for SSRCs and CallSids.
    pub seed: u64,
}

/// A call admitted and ringing (inbound) or dialling (outbound).
struct PendingCall {
    /// Our answer (inbound) or offer (outbound) SDP.
    answer: SessionDescription,
    admitted: AdmittedCall,
    info: CallInfo,
    negotiated: ontime_sip::NegotiatedMedia,
    local: LocalMedia,
    span: tracing::Span,
    start_unix_ms: u64,
    /// The TwiML the call runs once answered.
    program: Vec<Verb>,
    /// SDES keys when the media is SRTP.
    srtp: Option<ontime_srtp::SdesKeys>,
    /// Inbound: the route's verdict, once it came.
    verdict: Option<Admission>,
    /// Inbound: the ring time is over (`answer_delay` since the INVITE).
    ring_over: bool,
    /// Outbound: the ring timeout passed (a 487 then means no answer).
    timed_out: bool,
    /// Outbound: an 18x came.
    rang: bool,
}

/// An answered call, as the switchboard keeps it: what re-offers are answered from.
struct LiveCall {
    local: LocalMedia,
    /// A call whose task started before its answer (`<Dial answerOnBridge>`): what to answer
    /// with when it asks, and what to count then.
    unanswered: Option<Unanswered>,
}

/// What an inbound call started unanswered keeps for its answer.
struct Unanswered {
    answer: SessionDescription,
    sid: String,
    transport: &'static str,
    media: &'static str,
}

/// A drain in progress.
#[derive(Debug, Clone, Copy)]
struct Drain {
    hung_up: bool,
    /// Since when no call is left (the linger runs from there).
    idle_since: Option<Instant>,
}

/// The switchboard.
pub(crate) struct Switchboard {
    endpoint: Endpoint,
    guard: SipGuard,
    config: Arc<Config>,
    slots: Arc<CallSlots>,
    sender_origin: Instant,
    epoch: (Instant, u64),
    rng: StdRng,
    trusted: Vec<ipnet::IpNet>,
    calls: HashMap<CallHandle, LiveCall>,
    /// Inbound calls ringing.
    pending: HashMap<CallHandle, PendingCall>,
    /// Outbound calls placed, not answered yet.
    dialing: HashMap<CallHandle, PendingCall>,
    /// CallSid → dialog, for the API's requests on calls not answered yet.
    sids: HashMap<String, CallHandle>,
    /// Registrations started, by handle, with their address of record.
    registered: HashMap<RegistrationHandle, String>,
    /// The headroom our OPTIONS answers last reported.
    advertised_headroom: Option<usize>,
    timers: Timers,
    drain: Option<Drain>,
    transmits: VecDeque<Transmit>,
    actions: VecDeque<Action>,
}

/// The user part of a SIP URI (`sip:alice@x` → `alice`).
fn uri_user(uri: &str) -> String {
    let rest = uri
        .trim()
        .trim_start_matches("sips:")
        .trim_start_matches("sip:");
    rest.split_once('@')
        .map(|(u, _)| u.to_string())
        .unwrap_or_default()
}

impl Switchboard {
    /// A switchboard for `config`, admitting calls into `slots`; registrations start now.
    pub(crate) fn new(
        config: Arc<Config>,
        slots: Arc<CallSlots>,
        setup: Setup,
        now: Instant,
    ) -> Switchboard {
        let advertised = SocketAddr::new(config.public_ip, setup.sip_addr.port());
        let mut sip_config = SipConfig::new(advertised);
        sip_config.tcp_addr = setup.tcp_addr;
        sip_config.tls_addr = setup.tls_addr;
        sip_config.user = "ontime".into();
        // Tags, branches and Call-IDs from the same seed: a run on simulated time repeats.
        sip_config.rng_seed = Some(setup.seed);
        // No version unless the operator writes one: a version tells a scanner what to try.
        sip_config.user_agent = config.sip_server_header.clone();
        // In-dialog requests are also accepted from every address of the trunk (a proxy in
        // front may send the BYE from another host than the INVITE).
        let trunk = setup.trusted.clone();
        sip_config.trusted_peer = Some(Arc::new(move |ip| trunk.iter().any(|n| n.contains(&ip))));
        if let Some(password) = &config.register_password {
            // Our REGISTERs, and requests of ours a trunk challenges (INVITE, REFER, BYE).
            let user = config
                .register_user
                .clone()
                .or_else(|| setup.registrations.first().map(|r| uri_user(&r.aor)))
                .unwrap_or_default();
            sip_config.credentials = Some(ontime_sip::Credentials::new(
                user,
                password.expose().to_string(),
            ));
        }
        sip_config.trunk_auth_algorithms = config.trunk_auth_algorithms.clone();
        if let Some((user, password)) = &config.trunk_auth {
            sip_config.trunk_auth = Some(ontime_sip::Credentials::new(
                user.clone(),
                password.expose().to_string(),
            ));
        }
        let guard = SipGuard::new(
            setup.trusted.clone(),
            config.untrusted_sip,
            config.sip_rate_limit,
            now,
        );
        let mut sb = Switchboard {
            endpoint: Endpoint::new(sip_config),
            guard,
            config,
            slots,
            sender_origin: setup.sender_origin,
            epoch: setup.epoch,
            // Not the endpoint's stream: SSRCs and CallSids need not repeat its tags.
            rng: StdRng::seed_from_u64(setup.seed.rotate_left(32) ^ 0x0a7e_5eed),
            trusted: setup.trusted,
            calls: HashMap::new(),
            pending: HashMap::new(),
            dialing: HashMap::new(),
            sids: HashMap::new(),
            registered: HashMap::new(),
            advertised_headroom: None,
            timers: Timers::default(),
            drain: None,
            transmits: VecDeque::new(),
            actions: VecDeque::new(),
        };
        for r in setup.registrations {
            sb.register(r, now);
        }
        sb.process(now);
        sb
    }

    // ---- inputs ----

    /// A message (a datagram, or one cut from a TCP/TLS stream): judged before the endpoint
    /// sees it, so strangers and floods create no transaction.
    pub(crate) fn handle_message(
        &mut self,
        bytes: &[u8],
        src: SocketAddr,
        transport: Transport,
        now: Instant,
    ) {
        match self.guard.check(src, bytes, now) {
            Verdict::Pass => {
                // The headroom changes outside the switchboard (the estimate, once a second):
                // answer from the readiness `/readyz` reports now, not from the last message's.
                self.sync_readiness();
                self.endpoint.handle_message(bytes, src, transport, now);
            }
            Verdict::Reject => {
                let server = self.config.sip_server_header.as_deref();
                if let Some(payload) = ontime_sip::stateless_response(bytes, 403, server) {
                    self.count(Counted::Untrusted);
                    self.transmits.push_back(Transmit {
                        destination: src,
                        transport,
                        payload,
                    });
                }
            }
            Verdict::Drop(reason) => self.count(Counted::Dropped(reason)),
        }
        self.process(now);
    }

    /// Time passed: the endpoint's timers and ours (ring over, ring timeout, drain deadline).
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if self.endpoint.poll_timeout().is_some_and(|t| t <= now) {
            self.endpoint.handle_timeout(now);
        }
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::RingOver(call) => {
                    if let Some(p) = self.pending.get_mut(&call) {
                        p.ring_over = true;
                        self.decide(call, now);
                    }
                }
                Timer::RingTimeout(call) => {
                    if let Some(p) = self.dialing.get_mut(&call) {
                        p.timed_out = true;
                        if let Err(e) = self.endpoint.cancel(call, now) {
                            warn!(error = %e, "CANCEL failed");
                        }
                    }
                }
                Timer::DrainDeadline => self.drain_deadline(now),
            }
        }
        self.process(now);
    }

    /// A call task asks for an in-dialog request.
    pub(crate) fn call_request(&mut self, call: CallHandle, request: SipRequest, now: Instant) {
        let result = match request {
            SipRequest::Hangup => self.endpoint.hangup(call, now),
            SipRequest::HangupWithReason(reason) => {
                let headers = [("Reason".to_string(), reason)];
                self.endpoint.hangup_with_headers(call, &headers, now)
            }
            SipRequest::Refer(target) => {
                let referred_by = format!(
                    "sip:{}@{}",
                    self.endpoint.config().user,
                    self.endpoint.config().local_addr
                );
                let r = self.endpoint.refer(call, &target, Some(&referred_by), now);
                if r.is_err() {
                    // Not sent: the call learns it as a refusal and stays up.
                    self.tell_call(call, DialogEvent::ReferResponse(500));
                }
                r
            }
            SipRequest::InfoDtmf(digit, tone) => {
                self.endpoint
                    .send_info_dtmf(call, digit, tone.as_millis() as u32, now)
            }
            SipRequest::Answer => {
                match self.calls.get_mut(&call).and_then(|c| c.unanswered.take()) {
                    Some(u) => {
                        let r = self.endpoint.answer(call, &u.answer, now);
                        if r.is_ok() {
                            info!("call answered on the bridge");
                            self.count(Counted::Answered {
                                transport: u.transport,
                                media: u.media,
                            });
                            self.actions
                                .push_back(Action::Registry(RegistryNote::Answered { sid: u.sid }));
                        }
                        r
                    }
                    None => Ok(()),
                }
            }
            SipRequest::Reject(status) => self.endpoint.reject(call, status, &[], now),
        };
        if let Err(e) = result {
            warn!(error = %e, "in-dialog request could not be sent");
        }
        self.process(now);
    }

    /// The call-control API asks: dial out, or end a call not answered yet.
    pub(crate) fn registry_request(&mut self, request: RegistryRequest, now: Instant) {
        match request {
            RegistryRequest::DialOut { sid, call } => self.dial_out(sid, *call, now),
            RegistryRequest::EndRinging { sid } => {
                if let Some(&call) = self.sids.get(&sid) {
                    if self.dialing.contains_key(&call) {
                        if let Err(e) = self.endpoint.cancel(call, now) {
                            warn!(error = %e, "CANCEL failed");
                        }
                    } else if let Some(p) = self.pending.remove(&call) {
                        // An inbound call the API ends before it is answered: declined.
                        let _enter = p.span.enter();
                        self.reject(call, RejectReason::Declined, None, now);
                        self.note_ended(&p.info.call_sid, CallStatus::Canceled, Some(603));
                        self.sids.remove(&sid);
                        // dropping `p` gives its slot back; the agent's preparation is released
                        // when the route's verdict finds the call gone (`routed`).
                    }
                }
            }
        }
        self.process(now);
    }

    /// The route of a ringing call has something to wait for (a webhook, a bot connecting):
    /// ring now, answer when its verdict comes and the ring time is over.
    pub(crate) fn routing(&mut self, call: CallHandle, now: Instant) {
        if self.pending.contains_key(&call) && self.config.answer_delay.is_zero() {
            // With a ring time the 180 went out with the INVITE already.
            if let Err(e) = self.endpoint.ring(call, now) {
                warn!(error = %e, "180 failed");
            }
        }
        self.process(now);
    }

    /// The route's verdict on a ringing call, and the TwiML it runs once answered.
    pub(crate) fn routed(
        &mut self,
        call: CallHandle,
        info: &CallInfo,
        admission: Admission,
        program: Vec<Verb>,
        now: Instant,
    ) {
        match self.pending.get_mut(&call) {
            Some(p) => {
                p.verdict = Some(admission);
                p.program = program;
                self.decide(call, now);
            }
            // The caller cancelled while the route decided: release what the agent holds.
            None => self.actions.push_back(Action::Abandon(info.clone())),
        }
        self.process(now);
    }

    /// Stop accepting new calls (OPTIONS and INVITEs get 503 from now on, registrations are
    /// taken away); calls still up at `deadline` are hung up.
    pub(crate) fn drain(&mut self, deadline: Instant, now: Instant) {
        if self.drain.is_some() {
            return;
        }
        self.drain = Some(Drain {
            hung_up: false,
            idle_since: None,
        });
        self.timers.set(deadline, Timer::DrainDeadline);
        self.slots.stop_accepting();
        self.endpoint.set_accepting(false);
        // RFC 3261 §10.2.2: take our bindings away, so the provider stops sending calls.
        for handle in self.registered.keys().copied().collect::<Vec<_>>() {
            if let Err(e) = self.endpoint.unregister(handle, now) {
                warn!(error = %e, "unregister failed");
            }
        }
        info!(calls = self.calls.len(), "draining: no new calls");
        self.process(now);
    }

    // ---- outputs ----

    /// Bytes to send.
    pub(crate) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next thing for the driver to do.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When to call [`Switchboard::handle_timeout`] next.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match (self.endpoint.poll_timeout(), self.timers.next()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A drain was asked for, every call has ended, and nothing is left to settle: the driver
    /// may stop. A transaction still unsettled (our BYE or un-REGISTER unanswered, a refusal
    /// unacknowledged) holds the switchboard up to [`LINGER`] after it became idle, so it is
    /// still answered; transactions that only absorb retransmissions of what is answered
    /// (Timer J keeps an answered OPTIONS 32 s) do not hold the SIP port: a restart must bind
    /// it at once.
    pub(crate) fn is_finished(&mut self, now: Instant) -> bool {
        let Some(drain) = self.drain.as_mut() else {
            return false;
        };
        if !(self.calls.is_empty() && self.pending.is_empty() && self.dialing.is_empty()) {
            drain.idle_since = None;
            return false;
        }
        let since = *drain.idle_since.get_or_insert(now);
        self.endpoint.unsettled_transactions() == 0
            || now.saturating_duration_since(since) >= LINGER
    }

    /// Calls answered and not ended.
    #[cfg(test)]
    pub(crate) fn live_calls(&self) -> usize {
        self.calls.len()
    }

    /// The SIP endpoint (for its counters and configuration).
    #[cfg(test)]
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    // ---- internals ----

    /// Hand the endpoint's output on, act on its events, then publish readiness.
    fn process(&mut self, now: Instant) {
        loop {
            while let Some(t) = self.endpoint.poll_transmit() {
                self.transmits.push_back(t);
            }
            let Some(event) = self.endpoint.poll_event() else {
                break;
            };
            self.event(event, now);
        }
        // After the transmits: the endpoint counts a message when it hands it out.
        if let Some(stats) = self.endpoint.poll_stats() {
            self.actions.push_back(Action::SipStats(Box::new(stats)));
        }
        self.slots
            .set_sip_overloaded(self.endpoint.budget_exhausted_since().is_some());
        self.sync_readiness();
    }

    /// Tell the endpoint what the admission state is now, so an OPTIONS (or INVITE) is answered
    /// from the same readiness `/readyz` reports.
    fn sync_readiness(&mut self) {
        self.endpoint.set_accepting(self.slots.ready());
        let headroom = self.slots.headroom();
        if self.advertised_headroom != Some(headroom) {
            // A front door probing with OPTIONS reads it (deploy/kamailio: no headroom, 503).
            self.advertised_headroom = Some(headroom);
            self.endpoint
                .set_options_headers(vec![(HEADROOM_HEADER.to_string(), headroom.to_string())]);
        }
    }

    fn count(&mut self, counted: Counted) {
        self.actions.push_back(Action::Count(counted));
    }

    fn record(&mut self, record: CallDetailRecord) {
        self.actions.push_back(Action::Record(Box::new(record)));
    }

    fn note_ended(&mut self, sid: &str, status: CallStatus, sip_status: Option<u16>) {
        self.actions
            .push_back(Action::Registry(RegistryNote::Ended {
                sid: sid.to_string(),
                status,
                sip_status,
            }));
    }

    fn unix_ms(&self, now: Instant) -> u64 {
        let (at, ms) = self.epoch;
        ms + now.saturating_duration_since(at).as_millis() as u64
    }

    fn new_call_sid(&mut self) -> String {
        format!("CA{:032x}", self.rng.random::<u128>())
    }

    fn register(&mut self, r: Registration, now: Instant) {
        let params = ontime_sip::RegistrationParams {
            registrar_uri: None,
            aor: r.aor.clone(),
            contact: None,
            destination: r.destination,
            transport: r.transport,
            expires: self.config.register_expires,
        };
        match self.endpoint.register(params, now) {
            Ok(handle) => {
                info!(aor = %r.aor, registrar = %r.destination, transport = r.transport.name(), "registering");
                self.count(Counted::Registration {
                    aor: r.aor.clone(),
                    up: false,
                });
                self.registered.insert(handle, r.aor);
            }
            Err(e) => warn!(aor = %r.aor, error = %e, "REGISTER could not be sent"),
        }
    }

    fn drain_deadline(&mut self, now: Instant) {
        let Some(drain) = self.drain.as_mut() else {
            return;
        };
        if !drain.hung_up {
            // Grace period over: hang up whoever is left, once.
            drain.hung_up = true;
            for call in self.calls.keys().copied().collect::<Vec<_>>() {
                self.actions
                    .push_back(Action::ToCall(call, DialogEvent::Hangup(EndCause::Drained)));
            }
        }
        for call in self.dialing.keys().copied().collect::<Vec<_>>() {
            let _ = self.endpoint.cancel(call, now);
        }
    }

    fn reject(
        &mut self,
        call: CallHandle,
        reason: RejectReason,
        warning: Option<&str>,
        now: Instant,
    ) {
        self.count(Counted::Rejected(reason));
        let mut headers = if reason.status() == 503 {
            vec![("Retry-After".to_string(), RETRY_AFTER_SECS.to_string())]
        } else {
            Vec::new()
        };
        // A media refusal carries a `Warning: 305` saying why (RFC 3261 §20.43: "incompatible
        // media format"), for the peer's logs and its operator.
        if let Some(text) = warning {
            let agent = self.endpoint.config().local_addr;
            headers.push((
                "Warning".to_string(),
                format!("305 {agent} \"{}\"", text.replace(['"', '\\'], "'")),
            ));
        }
        if let Err(e) = self.endpoint.reject(call, reason.status(), &headers, now) {
            warn!(error = %e, "reject failed");
        }
    }

    fn event(&mut self, event: Event, now: Instant) {
        match event {
            Event::IncomingCall(incoming) => self.incoming(*incoming, now),
            Event::Established { call } => self.tell_call(call, DialogEvent::Established),
            Event::OfferReceived {
                call,
                method,
                offer,
            } => self.reoffer(call, method, offer, now),
            Event::Dtmf { call, digit, .. } => self.tell_call(call, DialogEvent::Dtmf(digit)),
            Event::ReferResponse { call, status } => {
                self.tell_call(call, DialogEvent::ReferResponse(status))
            }
            Event::ReferProgress {
                call,
                status,
                terminated,
            } => self.tell_call(call, DialogEvent::ReferProgress { status, terminated }),
            Event::Progress { call, status, .. } => {
                if let Some(p) = self.dialing.get_mut(&call) {
                    if !p.rang && (180..=183).contains(&status) {
                        p.rang = true;
                        let sid = p.info.call_sid.clone();
                        self.actions
                            .push_back(Action::Registry(RegistryNote::Ringing { sid, status }));
                    }
                }
            }
            Event::Answered { call, answer } => self.outbound_answered(call, answer, now),
            Event::AckAnswer { call, answer } => self.late_answer(call, answer),
            Event::Registered { handle, expires } => {
                if let Some(aor) = self.registered.get(&handle).cloned() {
                    info!(%aor, expires_s = expires.as_secs(), "registered");
                    self.count(Counted::Registration { aor, up: true });
                }
            }
            Event::RegistrationFailed {
                handle,
                status,
                retry_in,
            } => {
                if let Some(aor) = self.registered.get(&handle).cloned() {
                    warn!(%aor, status, retry_in_s = retry_in.as_secs(), "registration failed");
                    self.count(Counted::Registration { aor, up: false });
                }
            }
            Event::Unregistered { handle } => {
                if let Some(aor) = self.registered.remove(&handle) {
                    info!(%aor, "unregistered");
                    self.count(Counted::Registration { aor, up: false });
                }
            }
            Event::Ended { call, reason } => {
                if let Some(p) = self.dialing.remove(&call) {
                    self.end_unanswered_outbound(p, reason);
                } else if let Some(p) = self.pending.remove(&call) {
                    self.end_unanswered(p, reason);
                } else if self.calls.remove(&call).is_some() {
                    let cause = match reason {
                        EndReason::RemoteHangup => EndCause::CallerBye,
                        EndReason::LocalHangup { .. } => EndCause::GatewayBye,
                        EndReason::Cancelled => EndCause::Cancelled,
                        EndReason::SessionExpired => EndCause::SessionExpired,
                        _ => EndCause::SignallingFailure,
                    };
                    self.actions
                        .push_back(Action::ToCall(call, DialogEvent::Ended(cause)));
                }
                self.sids.retain(|_, c| *c != call);
            }
            other => tracing::debug!(?other, "SIP event not used by the gateway"),
        }
    }

    fn tell_call(&mut self, call: CallHandle, event: DialogEvent) {
        if self.calls.contains_key(&call) {
            self.actions.push_back(Action::ToCall(call, event));
        }
    }

    fn local_media(&mut self, port: u16) -> LocalMedia {
        let ssrc = self.rng.random::<u32>();
        let mut local = LocalMedia::new(SocketAddr::new(self.config.public_ip, port), ssrc as u64);
        local.codecs = self.config.codecs.clone();
        local
    }

    fn incoming(&mut self, incoming: ontime_sip::IncomingCall, now: Instant) {
        let call = incoming.call;
        let span = tracing::info_span!("call", call_id = %incoming.call_id);
        let _enter = span.enter();
        if !self
            .trusted
            .iter()
            .any(|n| n.contains(&incoming.source.ip()))
        {
            warn!(source = %incoming.source, "INVITE from outside the trunk networks: 403");
            return self.reject(call, RejectReason::NotTrunk, None, now);
        }
        let admitted = match self.slots.admit(self.config.sip_listen.ip()) {
            Ok(a) => a,
            Err(reason) => return self.reject(call, reason, None, now),
        };
        let Some(port) = admitted.slot.port() else {
            return self.reject(call, RejectReason::NoRtpPort, None, now);
        };
        let local = self.local_media(port);
        let (answer, negotiated, srtp) = match incoming.offer.as_ref() {
            Some(offer) => match offer::answer_offer(offer, &local, self.config.srtp) {
                Ok(answered) => answered,
                Err((reason, why)) => return self.reject(call, reason, Some(why), now),
            },
            // Late offer (RFC 3261 §13.2.1): our offer goes in the 200, the answer comes in
            // the ACK (`Event::AckAnswer`); until then the call has no remote media.
            None if self.config.srtp == ontime_sip::SrtpPolicy::Required => {
                return self.reject(
                    call,
                    RejectReason::Srtp,
                    Some("SRTP required: an INVITE without SDP is answered with plain RTP only"),
                    now,
                );
            }
            None => {
                info!("late offer: our offer goes in the 200");
                (
                    ontime_sip::sdp::build_offer(&local),
                    offer::awaiting_answer(),
                    None,
                )
            }
        };
        let (x_headers, x_dropped) = XHeaders::from_inbound(&incoming.headers);
        if x_dropped > 0 {
            // Names only: a value may be a secret, and a trunk sending too many is the news.
            warn!(
                dropped = x_dropped,
                kept = %x_headers.names(),
                "X- headers past 16 or out of bounds are not passed on"
            );
            self.count(Counted::XHeadersDropped(x_dropped as u64));
        }
        let info = CallInfo {
            x_headers,
            call_sid: self.new_call_sid(),
            account_sid: self.config.api_account_sid.clone(),
            direction: CallDirection::Inbound,
            transport: incoming.transport,
            call_id: incoming.call_id.clone(),
            from: incoming.from.uri.clone(),
            to: incoming.to.uri.clone(),
            sip_headers: incoming.headers.clone(),
        };
        info!(from = %info.from, to = %info.to, call_sid = %info.call_sid, source = %incoming.source, codec = %negotiated.codec, rtp_port = port, "call admitted");
        self.actions
            .push_back(Action::Registry(RegistryNote::Inbound(info.clone())));
        self.sids.insert(info.call_sid.clone(), call);
        let start_unix_ms = self.unix_ms(now);
        // Written now, so a crash from here on still leaves a record of the call.
        self.record(CallDetailRecord::start(&info, start_unix_ms));
        let delay = self.config.answer_delay;
        if !delay.is_zero() {
            // Ring first (180), answer when the ring time is over; a CANCEL meanwhile gets 487.
            if let Err(e) = self.endpoint.ring(call, now) {
                warn!(error = %e, "180 failed");
            }
            self.timers.set(now + delay, Timer::RingOver(call));
        }
        self.actions.push_back(Action::Route(call, info.clone()));
        self.pending.insert(
            call,
            PendingCall {
                answer,
                admitted,
                info,
                negotiated,
                local,
                span: span.clone(),
                start_unix_ms,
                program: Vec::new(),
                srtp,
                verdict: None,
                ring_over: delay.is_zero(),
                timed_out: false,
                rang: false,
            },
        );
    }

    /// A ringing inbound call with its verdict in and its ring time over is answered or
    /// refused.
    fn decide(&mut self, call: CallHandle, now: Instant) {
        let ready = self
            .pending
            .get(&call)
            .is_some_and(|p| p.ring_over && p.verdict.is_some());
        if !ready {
            return;
        }
        let Some(p) = self.pending.remove(&call) else {
            return;
        };
        let span = p.span.clone();
        let _enter = span.enter();
        match p.verdict {
            Some(Admission::Answer) | None if answers_on_bridge(&p.program) => {
                self.start_unanswered(call, p, now)
            }
            Some(Admission::Answer) | None => self.answer(call, p, now),
            Some(Admission::Reject) => {
                info!("agent unavailable: 503");
                self.reject(call, RejectReason::AgentUnavailable, None, now);
                self.note_ended(&p.info.call_sid, CallStatus::Failed, Some(503));
                self.sids.remove(&p.info.call_sid);
                // dropping `p` gives its slot back
            }
            Some(Admission::Refuse { busy }) => {
                let reason = if busy {
                    RejectReason::Busy
                } else {
                    RejectReason::Declined
                };
                info!(
                    status = reason.status(),
                    "the voice route rejected the call"
                );
                self.reject(call, reason, None, now);
                let status = if busy {
                    CallStatus::Busy
                } else {
                    CallStatus::Canceled
                };
                self.note_ended(&p.info.call_sid, status, Some(reason.status()));
                self.sids.remove(&p.info.call_sid);
            }
        }
    }

    fn call_settings(&mut self) -> CallSettings {
        CallSettings {
            rng_seed: self.rng.random(),
            // 0 means no RTP timeout, not "hang up at once".
            rtp_timeout: self.config.rtp_timeout,
            interim_record_interval: self.config.interim_record_interval,
            max_call_duration: self.config.max_call_duration,
            barge_in: self.config.barge_in,
            barge_in_min_speech: self.config.barge_in_min_speech,
            echo_canceller: self.config.echo_canceller,
            dial_by_refer: self.config.dial_by_refer,
            hold_back: crate::call::hold_back::HoldBackConfig {
                enabled: self.config.reply_hold_back,
                unsure_hold: self.config.reply_hold_doubt,
                max_hold: self.config.reply_hold_max,
                final_fall: self
                    .config
                    .reply_hold_fall
                    .then_some(crate::call::hold_back::FINAL_FALL_ST),
                ..Default::default()
            },
            speech_stop_lag: ontime_inference::VadParams::default().stop,
            max_buffered: self.config.max_buffered,
            cname: format!("ontime@{}", self.config.public_ip),
            record: false,
            sender_origin: self.sender_origin,
            unanswered: false,
            transfer_domain: match &self.config.trunk_uri {
                Some(t) => t.host_port.clone(),
                None => self.endpoint.config().local_addr.to_string(),
            },
        }
    }

    fn answer(&mut self, call: CallHandle, p: PendingCall, now: Instant) {
        if let Err(e) = self.endpoint.answer(call, &p.answer, now) {
            warn!(error = %e, "answer failed");
            self.end_unanswered(p, EndReason::Rejected { status: 500 });
            return;
        }
        info!("call answered");
        self.start_call(call, p);
    }

    /// A call whose TwiML begins with `<Dial answerOnBridge="true">`: it rings (180, the
    /// caller's phone rings back) and its task starts now, unanswered; the task asks for the
    /// answer once a leg is bridged ([`SipRequest::Answer`]), or refuses the call with the
    /// `<Dial>`'s outcome ([`SipRequest::Reject`]).
    fn start_unanswered(&mut self, call: CallHandle, p: PendingCall, now: Instant) {
        if let Err(e) = self.endpoint.ring(call, now) {
            warn!(error = %e, "180 failed");
        }
        info!("answer on bridge: the call rings until its <Dial> bridges");
        let media = if p.srtp.is_some() { "srtp" } else { "rtp" };
        let unanswered = Unanswered {
            answer: p.answer.clone(),
            sid: p.info.call_sid.clone(),
            transport: p.info.transport.name(),
            media,
        };
        self.start_task(call, p, Some(unanswered));
    }

    /// Hand an answered call (either way) to its task.
    fn start_call(&mut self, call: CallHandle, p: PendingCall) {
        let media = if p.srtp.is_some() { "srtp" } else { "rtp" };
        self.count(Counted::Answered {
            transport: p.info.transport.name(),
            media,
        });
        self.start_task(call, p, None);
    }

    fn start_task(&mut self, call: CallHandle, p: PendingCall, unanswered: Option<Unanswered>) {
        let mut settings = self.call_settings();
        settings.unanswered = unanswered.is_some();
        self.calls.insert(
            call,
            LiveCall {
                local: p.local,
                unanswered,
            },
        );
        let start = CallStart {
            call,
            info: p.info,
            admitted: p.admitted,
            negotiated: p.negotiated,
            start_unix_ms: p.start_unix_ms,
            settings,
            program: p.program,
            srtp: p.srtp,
            span: p.span,
        };
        self.actions.push_back(Action::StartCall(Box::new(start)));
    }

    fn fail_outbound(&mut self, sid: &str, status: CallStatus) {
        self.count(Counted::Outbound(status.as_str()));
        self.note_ended(sid, status, None);
    }

    /// Place an outbound call for the API through the trunk.
    fn dial_out(&mut self, sid: String, call: NewCall, now: Instant) {
        let Some(trunk) = self.config.trunk_uri.clone() else {
            return self.fail_outbound(&sid, CallStatus::Failed);
        };
        let span = tracing::info_span!("call", call_sid = %sid);
        let _enter = span.enter();
        let admitted = match self.slots.admit(self.config.sip_listen.ip()) {
            Ok(a) => a,
            Err(reason) => {
                info!(reason = reason.label(), "outbound call refused");
                return self.fail_outbound(&sid, CallStatus::Failed);
            }
        };
        let Some(port) = admitted.slot.port() else {
            return self.fail_outbound(&sid, CallStatus::Failed);
        };
        let local = self.local_media(port);
        let offer = ontime_sip::sdp::build_offer(&local);
        let uri = |who: &str, host: &str| {
            if who.starts_with("sip:") || who.starts_with("sips:") {
                who.to_string()
            } else {
                format!("sip:{who}@{host}")
            }
        };
        let target = uri(&call.to, &trunk.host_port);
        let from = uri(&call.from, &self.config.public_ip.to_string());
        let params = ontime_sip::CallParams {
            target: target.clone(),
            from: Some(from.clone()),
            destination: trunk.addr,
            transport: trunk.transport,
            offer: offer.clone(),
            // `To`'s X- headers, checked by the API (`ontime_twilio::sip_headers`).
            headers: call.sip_headers.pairs().to_vec(),
        };
        let handle = match self.endpoint.place_call(params, now) {
            Ok(h) => h,
            Err(e) => {
                warn!(error = %e, "INVITE could not be sent");
                return self.fail_outbound(&sid, CallStatus::Failed);
            }
        };
        let call_id = self
            .endpoint
            .call_id(handle)
            .unwrap_or_default()
            .to_string();
        info!(to = %target, from = %from, trunk = %trunk.addr, rtp_port = port, x_headers = %call.sip_headers.names(), "dialling out");
        self.actions
            .push_back(Action::Registry(RegistryNote::Initiated {
                sid: sid.clone(),
                call_id: call_id.clone(),
            }));
        let info = CallInfo {
            call_id,
            call_sid: sid.clone(),
            account_sid: self.config.api_account_sid.clone(),
            direction: CallDirection::OutboundApi,
            transport: trunk.transport,
            from,
            to: target,
            sip_headers: Vec::new(),
            x_headers: Default::default(),
        };
        let start_unix_ms = self.unix_ms(now);
        self.record(CallDetailRecord::start(&info, start_unix_ms));
        self.sids.insert(sid, handle);
        self.timers
            .set(now + call.timeout, Timer::RingTimeout(handle));
        self.dialing.insert(
            handle,
            PendingCall {
                answer: offer,
                admitted,
                info,
                // Negotiated for real from the answer; this placeholder never reaches a call.
                negotiated: offer::awaiting_answer(),
                local,
                span: span.clone(),
                start_unix_ms,
                program: call.twiml,
                srtp: None,
                verdict: None,
                ring_over: false,
                timed_out: false,
                rang: false,
            },
        );
    }

    /// The answer to our late offer arrived in the ACK: the call's media starts.
    fn late_answer(&mut self, call: CallHandle, answer: SessionDescription) {
        let Some(live) = self.calls.get(&call) else {
            return;
        };
        let event = match ontime_sip::sdp::read_answer(&answer, &live.local) {
            Ok(n) => {
                info!(codec = ?n.codec, "late offer answered in the ACK");
                DialogEvent::Media(n)
            }
            Err(e) => {
                warn!(error = %e, "the ACK's answer is unusable: hanging up");
                DialogEvent::Hangup(EndCause::SignallingFailure)
            }
        };
        self.actions.push_back(Action::ToCall(call, event));
    }

    fn outbound_answered(
        &mut self,
        call: CallHandle,
        answer: Option<SessionDescription>,
        now: Instant,
    ) {
        let Some(mut p) = self.dialing.remove(&call) else {
            return;
        };
        let span = p.span.clone();
        let _enter = span.enter();
        let negotiated = answer
            .as_ref()
            .ok_or_else(|| "the 200 had no SDP".to_string())
            .and_then(|a| ontime_sip::sdp::read_answer(a, &p.local).map_err(|e| e.to_string()));
        match negotiated {
            Ok(n) => {
                self.count(Counted::Outbound("answered"));
                info!(codec = ?n.codec, "outbound call answered");
                p.negotiated = n;
                self.start_call(call, p);
            }
            Err(why) => {
                warn!(%why, "outbound call answered without usable media: hanging up");
                let _ = self.endpoint.hangup(call, now);
                self.count(Counted::Outbound("failed"));
                self.note_ended(&p.info.call_sid, CallStatus::Failed, Some(200));
                self.record(CallDetailRecord::unanswered(
                    &p.info,
                    p.start_unix_ms,
                    EndCause::SignallingFailure,
                ));
            }
        }
    }

    /// An outbound call that ended before an answer: busy, no answer, cancelled, failed.
    fn end_unanswered_outbound(&mut self, p: PendingCall, reason: EndReason) {
        let _enter = p.span.enter();
        let (status, sip_status) = match &reason {
            EndReason::Refused { status, .. } => match status {
                486 | 600 => (CallStatus::Busy, Some(*status)),
                408 | 480 => (CallStatus::NoAnswer, Some(*status)),
                487 if p.timed_out => (CallStatus::NoAnswer, Some(487)),
                487 => (CallStatus::Canceled, Some(487)),
                s => (CallStatus::Failed, Some(*s)),
            },
            EndReason::Cancelled if p.timed_out => (CallStatus::NoAnswer, None),
            EndReason::Cancelled => (CallStatus::Canceled, None),
            EndReason::Timeout => (CallStatus::Failed, Some(408)),
            _ => (CallStatus::Failed, None),
        };
        info!(
            status = status.as_str(),
            ?reason,
            "outbound call not answered"
        );
        self.count(Counted::Outbound(status.as_str()));
        self.note_ended(&p.info.call_sid, status, sip_status);
        self.sids.retain(|s, _| *s != p.info.call_sid);
        let cause = if status == CallStatus::Canceled {
            EndCause::Cancelled
        } else {
            EndCause::SignallingFailure
        };
        self.record(CallDetailRecord::unanswered(
            &p.info,
            p.start_unix_ms,
            cause,
        ));
        // dropping `p` gives its slot back
    }

    /// A call that ended before it was answered (CANCEL while ringing): free it and record it.
    fn end_unanswered(&mut self, p: PendingCall, reason: EndReason) {
        let _enter = p.span.enter();
        let cause = if reason == EndReason::Cancelled {
            EndCause::Cancelled
        } else {
            EndCause::SignallingFailure
        };
        // Whatever the agent prepared for it (a bot connection) will not be used.
        self.actions.push_back(Action::Abandon(p.info.clone()));
        self.note_ended(&p.info.call_sid, CallStatus::Canceled, None);
        self.sids.retain(|s, _| *s != p.info.call_sid);
        self.count(Counted::EndedUnanswered(cause.result_label()));
        self.record(CallDetailRecord::unanswered(
            &p.info,
            p.start_unix_ms,
            cause,
        ));
        // dropping `p` gives its slot back
    }

    fn reoffer(
        &mut self,
        call: CallHandle,
        method: Method,
        offer: SessionDescription,
        now: Instant,
    ) {
        let Some(live) = self.calls.get_mut(&call) else {
            return;
        };
        live.local.session_version += 1;
        match ontime_sip::sdp::answer_offer(&offer, &live.local) {
            Ok((answer, negotiated)) => {
                if let Err(e) = self.endpoint.answer_update(call, &answer, now) {
                    warn!(error = %e, ?method, "answering the new offer failed");
                    return;
                }
                self.actions
                    .push_back(Action::ToCall(call, DialogEvent::Media(negotiated)));
            }
            Err(e) => {
                info!(error = %e, ?method, "new offer has no common codec: 488, session unchanged");
                let _ = self.endpoint.reject_update(call, 488, now);
            }
        }
    }
}
