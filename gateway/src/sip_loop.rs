//! The SIP loop: one tokio task owning the sans-IO [`ontime_sip::Endpoint`] and its socket. It
//! admits or refuses INVITEs ([`crate::admission`]), rings, answers, starts one call task per
//! answered call ([`crate::call::driver`]) and relays dialog events to it and its requests back.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::counter;
use ontime_sip::{
    Codec, Config as SipConfig, EndReason, Endpoint, Event, LocalMedia, Method, SessionDescription,
    Transport,
};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::admission::sip_guard::{SipGuard, Verdict};
use crate::admission::{AdmittedCall, CallSlots, RejectReason, RETRY_AFTER_SECS};
use crate::agent::{Admission, CallInfo};
use crate::api::{CallStatus, Direction as CallDirection, NewCall, Verb};
use crate::call::driver::{self, CallServices, CallStart, SipCall};
use crate::call::{CallSettings, DialogEvent, SipRequest};
use crate::config::Config;
use crate::ops::metrics as m;
use crate::records::cdr::{CallDetailRecord, EndCause};
use crate::registry::RegistryRequest;
use crate::routing::VoiceRoute;
use crate::transport::{StreamMessage, StreamTransports};

/// The header of our OPTIONS answers that says how many more calls we take (measured headroom
/// within `max_calls`).
pub const HEADROOM_HEADER: &str = "X-Ontime-Headroom";

/// How long the SIP loop stays after the last call of a drain (RFC 3261 T4), absorbing
/// retransmissions.
const LINGER: Duration = Duration::from_secs(5);

/// Messages from call tasks (and the drain) to the SIP loop.
#[derive(Debug)]
pub(crate) enum SipCommand {
    /// Stop accepting; OPTIONS and INVITEs get 503 from now on.
    StopAccepting,
    /// The ring time of a call is over: answer it.
    Answer(ontime_sip::CallHandle),
    /// The agent prepared a ringing call ([`Agent::prepare_call`]) and the voice route
    /// answered: answer or refuse it.
    AgentReady {
        /// The call.
        call: ontime_sip::CallHandle,
        /// Its facts (to release the agent's preparation if the call is gone).
        info: CallInfo,
        /// The verdict.
        admission: Admission,
        /// The TwiML the call runs once answered.
        program: Vec<Verb>,
    },
    /// An outbound call rang for its `Timeout` without an answer: cancel it.
    RingTimeout(ontime_sip::CallHandle),
}

/// A call admitted and ringing, answered after `answer_delay`.
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
    /// An outbound call's state: the ring timeout passed, the API cancelled it.
    timed_out: bool,
    rang: bool,
}

struct CallEntry {
    dialog: mpsc::UnboundedSender<DialogEvent>,
    local: LocalMedia,
}

/// The SIP loop's state.
pub(crate) struct SipLoop {
    socket: UdpSocket,
    endpoint: Endpoint,
    guard: SipGuard,
    config: Arc<Config>,
    slots: Arc<CallSlots>,
    services: CallServices,
    commands: mpsc::UnboundedReceiver<SipCommand>,
    command_tx: mpsc::UnboundedSender<SipCommand>,
    call_requests: mpsc::UnboundedReceiver<SipCall>,
    calls: HashMap<ontime_sip::CallHandle, CallEntry>,
    /// Inbound calls ringing.
    pending: HashMap<ontime_sip::CallHandle, PendingCall>,
    /// Outbound calls placed, not answered yet.
    dialing: HashMap<ontime_sip::CallHandle, PendingCall>,
    /// CallSid → dialog, for the API's requests on calls not answered yet.
    sids: HashMap<String, ontime_sip::CallHandle>,
    registry_requests: mpsc::UnboundedReceiver<RegistryRequest>,
    route: VoiceRoute,
    /// SIP over TCP and TLS, if either listens (or we dial over them).
    streams: StreamTransports,
    stream_messages: mpsc::Receiver<StreamMessage>,
    /// The trunk networks and the registrars' addresses.
    trusted: Vec<ipnet::IpNet>,
    /// Registrations to start.
    registrations: Vec<Registration>,
    /// Registrations started, with the registrar label of their gauge.
    registered: HashMap<ontime_sip::RegistrationHandle, String>,
    /// The headroom our OPTIONS answers last reported.
    advertised_headroom: Option<usize>,
    tasks: tokio::task::JoinSet<()>,
}

/// The media of a call whose offer is ours and whose answer has not come yet: no remote
/// address, so nothing is sent until [`DialogEvent::Media`] brings the answer.
fn awaiting_answer() -> ontime_sip::NegotiatedMedia {
    ontime_sip::NegotiatedMedia {
        remote_rtp: None,
        codec: Codec::Pcmu,
        payload_type: 0,
        telephone_event_pt: None,
        remote_ptime_ms: None,
        remote_maxptime_ms: None,
        local_direction: ontime_sip::Direction::SendRecv,
        srtp: false,
    }
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

/// What the SIP loop is asked to do: by calls (BYE, REFER, INFO) and by the registry (dial out,
/// end a ringing call).
pub(crate) struct Requests {
    /// From call tasks.
    pub calls: mpsc::UnboundedReceiver<SipCall>,
    /// From the call registry.
    pub registry: mpsc::UnboundedReceiver<RegistryRequest>,
}

/// A registration the SIP loop keeps up, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    /// The address of record (`sip:user@provider`).
    pub aor: String,
    /// Where the REGISTERs go (the registrar, or the trunk as outbound proxy).
    pub destination: SocketAddr,
    /// Over what.
    pub transport: Transport,
}

/// The SIP loop's stream transports and where their messages arrive.
pub(crate) struct Streams {
    /// The transports.
    pub transports: StreamTransports,
    /// Their messages.
    pub messages: mpsc::Receiver<StreamMessage>,
    /// Addresses advertised for TCP and TLS (port of each listener, the public IP).
    pub tcp_addr: Option<SocketAddr>,
    /// See `tcp_addr`.
    pub tls_addr: Option<SocketAddr>,
    /// Registrations to keep up.
    pub registrations: Vec<Registration>,
    /// Sources trusted like the trunk networks: the trunk networks plus each registrar's
    /// address (calls arriving over a registration come from there).
    pub trusted: Vec<ipnet::IpNet>,
}

impl SipLoop {
    /// Build the loop around a bound socket.
    pub(crate) fn new(
        socket: UdpSocket,
        config: Arc<Config>,
        slots: Arc<CallSlots>,
        services: CallServices,
        requests: Requests,
        route: VoiceRoute,
        streams: Streams,
    ) -> std::io::Result<SipLoop> {
        let Requests {
            calls: call_requests,
            registry: registry_requests,
        } = requests;
        let local = socket.local_addr()?;
        let advertised = SocketAddr::new(config.public_ip, local.port());
        let mut sip_config = SipConfig::new(advertised);
        sip_config.tcp_addr = streams.tcp_addr;
        sip_config.tls_addr = streams.tls_addr;
        sip_config.user = "ontime".into();
        // No version unless the operator writes one: a version tells a scanner what to try.
        sip_config.user_agent = config.sip_server_header.clone();
        // In-dialog requests are also accepted from every address of the trunk (a proxy in
        // front may send the BYE from another host than the INVITE).
        let trunk = streams.trusted.clone();
        sip_config.trusted_peer = Some(Arc::new(move |ip| trunk.iter().any(|n| n.contains(&ip))));
        if let Some(password) = &config.register_password {
            // Our REGISTERs, and requests of ours a trunk challenges (INVITE, REFER, BYE).
            let user = config
                .register_user
                .clone()
                .or_else(|| streams.registrations.first().map(|r| uri_user(&r.aor)))
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
            streams.trusted.clone(),
            config.untrusted_sip,
            config.sip_rate_limit,
            Instant::now(),
        );
        let (command_tx, commands) = mpsc::unbounded_channel();
        Ok(SipLoop {
            socket,
            endpoint: Endpoint::new(sip_config),
            guard,
            config,
            slots,
            services,
            commands,
            command_tx,
            call_requests,
            calls: HashMap::new(),
            pending: HashMap::new(),
            dialing: HashMap::new(),
            sids: HashMap::new(),
            registry_requests,
            route,
            streams: streams.transports,
            stream_messages: streams.messages,
            trusted: streams.trusted,
            registrations: streams.registrations,
            registered: HashMap::new(),
            advertised_headroom: None,
            tasks: tokio::task::JoinSet::new(),
        })
    }

    /// Run until a drain has been asked for (`drain` gets its deadline) and every call has
    /// ended.
    pub(crate) async fn run(mut self, mut drain: tokio::sync::watch::Receiver<Option<Instant>>) {
        self.start_registrations();
        self.flush().await;
        let mut buf = vec![0u8; 65_536];
        let mut drain_deadline: Option<Instant> = None;
        let mut hung_up = false;
        let mut idle_since: Option<Instant> = None;
        loop {
            let timeout = self.endpoint.poll_timeout();
            let sleep = async {
                match timeout {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = self.socket.recv_from(&mut buf) => match r {
                    Ok((n, src)) => self.message(&buf[..n], src, Transport::Udp).await,
                    Err(e) => warn!(error = %e, "SIP socket receive failed"),
                },
                Some(m) = self.stream_messages.recv() => {
                    self.message(&m.bytes, m.source, m.transport).await
                }
                _ = sleep => self.endpoint.handle_timeout(Instant::now()),
                Some(cmd) = self.commands.recv() => self.command(cmd),
                Some(req) = self.call_requests.recv() => self.call_request(req),
                Some(req) = self.registry_requests.recv() => self.registry_request(req),
                changed = drain.changed(), if drain_deadline.is_none() => {
                    if changed.is_ok() {
                        if let Some(deadline) = *drain.borrow() {
                            drain_deadline = Some(deadline);
                            self.command(SipCommand::StopAccepting);
                        }
                    }
                }
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)), if drain_deadline.is_some() => {}
            }
            self.flush().await;
            if let Some(deadline) = drain_deadline {
                let now = Instant::now();
                if now >= deadline && !hung_up {
                    // Grace period over: hang up whoever is left, once.
                    hung_up = true;
                    for entry in self.calls.values() {
                        let _ = entry.dialog.send(DialogEvent::Hangup(EndCause::Drained));
                    }
                }
                if now >= deadline {
                    for call in self.dialing.keys().copied().collect::<Vec<_>>() {
                        let _ = self.endpoint.cancel(call, now);
                    }
                }
                if self.calls.is_empty() && self.pending.is_empty() && self.dialing.is_empty() {
                    // Linger up to T4 so retransmitted BYEs/ACKs are still answered, then go
                    // (an INVITE server transaction may sit in RFC 6026's Accepted state longer).
                    let since = *idle_since.get_or_insert(now);
                    if self.endpoint.active_transactions() == 0
                        || now.duration_since(since) >= LINGER
                    {
                        break;
                    }
                }
            }
        }
        while self.tasks.join_next().await.is_some() {}
        info!("SIP loop stopped");
    }

    /// A message (a datagram, or one cut from a TCP/TLS stream): judged before the endpoint
    /// sees it, so strangers and floods create no transaction.
    async fn message(&mut self, bytes: &[u8], src: SocketAddr, transport: Transport) {
        let now = Instant::now();
        match self.guard.check(src, bytes, now) {
            // The endpoint counts what it reads and sends (`ontime_sip_*`).
            Verdict::Pass => self.endpoint.handle_message(bytes, src, transport, now),
            Verdict::Reject => {
                let server = self.config.sip_server_header.as_deref();
                if let Some(response) = ontime_sip::stateless_response(bytes, 403, server) {
                    counter!(m::SIP_UNTRUSTED_REJECTED_TOTAL).increment(1);
                    self.send(transport, src, response).await;
                }
            }
            Verdict::Drop(reason) => {
                counter!(m::SIP_DROPPED_TOTAL, "reason" => reason).increment(1);
            }
        }
    }

    fn call_request(&mut self, req: SipCall) {
        let now = Instant::now();
        let result = match req.request {
            SipRequest::Hangup => self.endpoint.hangup(req.call, now),
            SipRequest::HangupWithReason(reason) => {
                let headers = [("Reason".to_string(), reason)];
                self.endpoint.hangup_with_headers(req.call, &headers, now)
            }
            SipRequest::Refer(target) => {
                let referred_by = format!(
                    "sip:{}@{}",
                    self.endpoint.config().user,
                    self.endpoint.config().local_addr
                );
                let r = self
                    .endpoint
                    .refer(req.call, &target, Some(&referred_by), now);
                if r.is_err() {
                    // Not sent: the call learns it as a refusal and stays up.
                    self.to_call(req.call, DialogEvent::ReferResponse(500));
                }
                r
            }
            SipRequest::InfoDtmf(digit, tone) => {
                self.endpoint
                    .send_info_dtmf(req.call, digit, tone.as_millis() as u32, now)
            }
        };
        if let Err(e) = result {
            warn!(error = %e, "in-dialog request could not be sent");
        }
    }

    fn start_registrations(&mut self) {
        for r in std::mem::take(&mut self.registrations) {
            let params = ontime_sip::RegistrationParams {
                registrar_uri: None,
                aor: r.aor.clone(),
                contact: None,
                destination: r.destination,
                transport: r.transport,
                expires: self.config.register_expires,
            };
            match self.endpoint.register(params, Instant::now()) {
                Ok(handle) => {
                    info!(aor = %r.aor, registrar = %r.destination, transport = r.transport.name(), "registering");
                    metrics::gauge!(m::REGISTRATION_UP, "registrar" => r.aor.clone()).set(0.0);
                    self.registered.insert(handle, r.aor);
                }
                Err(e) => warn!(aor = %r.aor, error = %e, "REGISTER could not be sent"),
            }
        }
    }

    fn registry_request(&mut self, req: RegistryRequest) {
        match req {
            RegistryRequest::DialOut { sid, call } => self.dial_out(sid, call),
            RegistryRequest::EndRinging { sid } => {
                let Some(&call) = self.sids.get(&sid) else {
                    return;
                };
                if self.dialing.contains_key(&call) {
                    if let Err(e) = self.endpoint.cancel(call, Instant::now()) {
                        warn!(error = %e, "CANCEL failed");
                    }
                } else if self.pending.remove(&call).is_some() {
                    // An inbound call the API ends before it is answered: declined.
                    self.reject(call, RejectReason::Declined);
                    self.services
                        .registry
                        .ended(&sid, CallStatus::Canceled, Some(603));
                }
            }
        }
    }

    fn command(&mut self, cmd: SipCommand) {
        match cmd {
            SipCommand::Answer(call) => {
                if let Some(p) = self.pending.remove(&call) {
                    self.answer(call, p);
                }
            }
            SipCommand::AgentReady {
                call,
                info,
                admission,
                program,
            } => match (self.pending.remove(&call), admission) {
                (Some(mut p), Admission::Answer) => {
                    p.program = program;
                    self.answer(call, p)
                }
                (Some(p), Admission::Reject) => {
                    let _enter = p.span.enter();
                    info!("agent unavailable: 503");
                    self.reject(call, RejectReason::AgentUnavailable);
                    self.services
                        .registry
                        .ended(&p.info.call_sid, CallStatus::Failed, Some(503));
                    // dropping `p` gives its slot back
                }
                (Some(p), Admission::Refuse { busy }) => {
                    let _enter = p.span.enter();
                    let reason = if busy {
                        RejectReason::Busy
                    } else {
                        RejectReason::Declined
                    };
                    info!(
                        status = reason.status(),
                        "the voice route rejected the call"
                    );
                    self.reject(call, reason);
                    let status = if busy {
                        CallStatus::Busy
                    } else {
                        CallStatus::Canceled
                    };
                    self.services
                        .registry
                        .ended(&p.info.call_sid, status, Some(reason.status()));
                }
                // The caller cancelled while the agent prepared: let it release what it holds.
                (None, _) => self.services.agent.abandon_call(&info),
            },
            SipCommand::RingTimeout(call) => {
                if let Some(p) = self.dialing.get_mut(&call) {
                    p.timed_out = true;
                    if let Err(e) = self.endpoint.cancel(call, Instant::now()) {
                        warn!(error = %e, "CANCEL failed");
                    }
                }
            }
            SipCommand::StopAccepting => {
                self.slots.stop_accepting();
                self.endpoint.set_accepting(false);
                // RFC 3261 §10.2.2: take our bindings away, so the provider stops sending calls.
                for handle in self.registered.keys().copied().collect::<Vec<_>>() {
                    if let Err(e) = self.endpoint.unregister(handle, Instant::now()) {
                        warn!(error = %e, "unregister failed");
                    }
                }
                info!(calls = self.calls.len(), "draining: no new calls");
            }
        }
    }

    async fn flush(&mut self) {
        loop {
            while let Some(t) = self.endpoint.poll_transmit() {
                self.send(t.transport, t.destination, t.payload).await;
            }
            let Some(event) = self.endpoint.poll_event() else {
                break;
            };
            self.event(event);
        }
        // After the transmits: the endpoint counts a message when it hands it out.
        if let Some(stats) = self.endpoint.poll_stats() {
            crate::ops::sip_stats::record(&stats);
        }
        self.slots
            .set_sip_overloaded(self.endpoint.budget_exhausted_since().is_some());
        self.endpoint.set_accepting(self.slots.ready());
        let headroom = self.slots.headroom();
        if self.advertised_headroom != Some(headroom) {
            // A front door probing with OPTIONS reads it (deploy/kamailio: no headroom, 503).
            self.advertised_headroom = Some(headroom);
            self.endpoint
                .set_options_headers(vec![(HEADROOM_HEADER.to_string(), headroom.to_string())]);
        }
    }

    /// Send on `transport`: UDP from the SIP socket, TCP/TLS through the connections.
    async fn send(&mut self, transport: Transport, destination: SocketAddr, payload: Vec<u8>) {
        if transport == Transport::Udp {
            if let Err(e) = self.socket.send_to(&payload, destination).await {
                warn!(error = %e, to = %destination, "SIP send failed");
            }
        } else {
            self.streams.send(transport, destination, payload);
        }
    }

    fn reject(&mut self, call: ontime_sip::CallHandle, reason: RejectReason) {
        self.reject_with(call, reason, None)
    }

    /// Refuse a call; a media refusal carries a `Warning: 305` saying why (RFC 3261 §20.43:
    /// "incompatible media format"), for the peer's logs and its operator.
    fn reject_with(
        &mut self,
        call: ontime_sip::CallHandle,
        reason: RejectReason,
        warning: Option<&str>,
    ) {
        counter!(m::CALLS_REJECTED_TOTAL, "reason" => reason.label()).increment(1);
        let mut headers = if reason.status() == 503 {
            vec![("Retry-After".to_string(), RETRY_AFTER_SECS.to_string())]
        } else {
            Vec::new()
        };
        if let Some(text) = warning {
            let agent = self.endpoint.config().local_addr;
            headers.push((
                "Warning".to_string(),
                format!("305 {agent} \"{}\"", text.replace(['"', '\\'], "'")),
            ));
        }
        if let Err(e) = self
            .endpoint
            .reject(call, reason.status(), &headers, Instant::now())
        {
            warn!(error = %e, "reject failed");
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::IncomingCall(incoming) => self.incoming(*incoming),
            Event::Established { call } => self.to_call(call, DialogEvent::Established),
            Event::OfferReceived {
                call,
                method,
                offer,
            } => self.reoffer(call, method, offer),
            Event::Dtmf { call, digit, .. } => self.to_call(call, DialogEvent::Dtmf(digit)),
            Event::ReferResponse { call, status } => {
                self.to_call(call, DialogEvent::ReferResponse(status))
            }
            Event::ReferProgress {
                call,
                status,
                terminated,
            } => self.to_call(call, DialogEvent::ReferProgress { status, terminated }),
            Event::Progress { call, status, .. } => {
                if let Some(p) = self.dialing.get_mut(&call) {
                    if !p.rang && (180..=183).contains(&status) {
                        p.rang = true;
                        self.services.registry.ringing(&p.info.call_sid, status);
                    }
                }
            }
            Event::Answered { call, answer } => self.outbound_answered(call, answer),
            Event::AckAnswer { call, answer } => self.late_answer(call, answer),
            Event::Registered { handle, expires } => {
                if let Some(aor) = self.registered.get(&handle) {
                    info!(%aor, expires_s = expires.as_secs(), "registered");
                    metrics::gauge!(m::REGISTRATION_UP, "registrar" => aor.clone()).set(1.0);
                }
            }
            Event::RegistrationFailed {
                handle,
                status,
                retry_in,
            } => {
                if let Some(aor) = self.registered.get(&handle) {
                    warn!(%aor, status, retry_in_s = retry_in.as_secs(), "registration failed");
                    metrics::gauge!(m::REGISTRATION_UP, "registrar" => aor.clone()).set(0.0);
                }
            }
            Event::Unregistered { handle } => {
                if let Some(aor) = self.registered.remove(&handle) {
                    info!(%aor, "unregistered");
                    metrics::gauge!(m::REGISTRATION_UP, "registrar" => aor).set(0.0);
                }
            }
            Event::Ended { call, reason } => {
                if let Some(p) = self.dialing.remove(&call) {
                    self.end_unanswered_outbound(p, reason);
                } else if let Some(p) = self.pending.remove(&call) {
                    self.end_unanswered(p, reason);
                } else if let Some(e) = self.calls.remove(&call) {
                    let cause = match reason {
                        EndReason::RemoteHangup => EndCause::CallerBye,
                        EndReason::LocalHangup { .. } => EndCause::GatewayBye,
                        EndReason::Cancelled => EndCause::Cancelled,
                        EndReason::SessionExpired => EndCause::SessionExpired,
                        _ => EndCause::SignallingFailure,
                    };
                    let _ = e.dialog.send(DialogEvent::Ended(cause));
                }
                self.sids.retain(|_, c| *c != call);
            }
            other => tracing::debug!(?other, "SIP event not used by the gateway"),
        }
    }

    fn to_call(&self, call: ontime_sip::CallHandle, event: DialogEvent) {
        if let Some(e) = self.calls.get(&call) {
            let _ = e.dialog.send(event);
        }
    }

    fn local_media(&self, port: u16) -> LocalMedia {
        let mut local = LocalMedia::new(
            SocketAddr::new(self.config.public_ip, port),
            rand::random::<u32>() as u64,
        );
        local.codecs = vec![Codec::Pcmu, Codec::Pcma];
        local
    }

    fn incoming(&mut self, incoming: ontime_sip::IncomingCall) {
        let call = incoming.call;
        let span = tracing::info_span!("call", call_id = %incoming.call_id);
        let _enter = span.enter();
        if !self
            .trusted
            .iter()
            .any(|n| n.contains(&incoming.source.ip()))
        {
            warn!(source = %incoming.source, "INVITE from outside the trunk networks: 403");
            return self.reject(call, RejectReason::NotTrunk);
        }
        let admitted = match self.slots.admit(self.config.sip_listen.ip()) {
            Ok(a) => a,
            Err(reason) => return self.reject(call, reason),
        };
        let Some(port) = admitted.slot.port() else {
            return self.reject(call, RejectReason::NoRtpPort);
        };
        let local = self.local_media(port);
        let (answer, negotiated, srtp) = match incoming.offer.as_ref() {
            Some(offer) => match self.answer_offer(offer, &local) {
                Ok(answered) => answered,
                Err((reason, why)) => return self.reject_with(call, reason, Some(why)),
            },
            // Late offer (RFC 3261 §13.2.1): our offer goes in the 200, the answer comes in
            // the ACK (`Event::AckAnswer`); until then the call has no remote media.
            None if self.config.srtp == ontime_sip::SrtpPolicy::Required => {
                return self.reject_with(
                    call,
                    RejectReason::Srtp,
                    Some("SRTP required: an INVITE without SDP is answered with plain RTP only"),
                );
            }
            None => {
                info!("late offer: our offer goes in the 200");
                (
                    ontime_sip::sdp::build_offer(&local),
                    awaiting_answer(),
                    None,
                )
            }
        };
        let info = CallInfo {
            call_sid: crate::call::new_call_sid(),
            account_sid: self.config.api_account_sid.clone(),
            direction: CallDirection::Inbound,
            transport: incoming.transport,
            call_id: incoming.call_id.clone(),
            from: incoming.from.uri.clone(),
            to: incoming.to.uri.clone(),
            sip_headers: incoming.headers.clone(),
        };
        info!(from = %info.from, to = %info.to, call_sid = %info.call_sid, source = %incoming.source, codec = ?negotiated.codec, rtp_port = port, "call admitted");
        self.services.registry.inbound(&info);
        self.sids.insert(info.call_sid.clone(), call);
        let start_unix_ms = crate::records::cdr::unix_ms_now();
        // Written now, so a crash from here on still leaves a record of the call.
        CallDetailRecord::start(&info, start_unix_ms).log();
        let pending = PendingCall {
            answer,
            admitted,
            info,
            negotiated,
            local,
            span: span.clone(),
            start_unix_ms,
            program: Vec::new(),
            srtp,
            timed_out: false,
            rang: false,
        };
        let delay = self.config.answer_delay;
        if let Some(ready) = self
            .route
            .prepare(&pending.info, self.services.agent.clone())
        {
            // Ring while the voice route answers and the agent gets ready (e.g. connects to
            // its bot) and the ring time passes, then answer or refuse: the SIP loop never
            // waits for it.
            if let Err(e) = self.endpoint.ring(call, Instant::now()) {
                warn!(error = %e, "180 failed");
            }
            let info = pending.info.clone();
            self.pending.insert(call, pending);
            let tx = self.command_tx.clone();
            tokio::spawn(async move {
                let ((admission, program), ()) = tokio::join!(ready, tokio::time::sleep(delay));
                let _ = tx.send(SipCommand::AgentReady {
                    call,
                    info,
                    admission,
                    program,
                });
            });
        } else if delay.is_zero() {
            self.answer(call, pending);
        } else {
            // Ring first (180), answer when the ring time is over; a CANCEL meanwhile gets 487.
            if let Err(e) = self.endpoint.ring(call, Instant::now()) {
                warn!(error = %e, "180 failed");
            }
            self.pending.insert(call, pending);
            let tx = self.command_tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = tx.send(SipCommand::Answer(call));
            });
        }
    }

    fn call_settings(&self) -> CallSettings {
        CallSettings {
            // 0 means no RTP timeout, not "hang up at once".
            rtp_timeout: self.config.rtp_timeout,
            interim_record_interval: self.config.interim_record_interval,
            max_call_duration: self.config.max_call_duration,
            barge_in: self.config.barge_in,
            max_buffered: self.config.max_buffered,
            cname: format!("ontime@{}", self.config.public_ip),
            record: false,
            sender_origin: self.services.sender.origin(),
            transfer_domain: match &self.config.trunk_uri {
                Some(t) => t.host_port.clone(),
                None => self.endpoint.config().local_addr.to_string(),
            },
        }
    }

    fn answer(&mut self, call: ontime_sip::CallHandle, p: PendingCall) {
        let span = p.span.clone();
        let _enter = span.enter();
        if let Err(e) = self.endpoint.answer(call, &p.answer, Instant::now()) {
            warn!(error = %e, "answer failed");
            self.end_unanswered(p, EndReason::Rejected { status: 500 });
            return;
        }
        info!("call answered");
        self.start_call(call, p);
    }

    /// Start the task of an answered call (either way).
    fn start_call(&mut self, call: ontime_sip::CallHandle, p: PendingCall) {
        let (dialog_tx, dialog_rx) = mpsc::unbounded_channel();
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        self.calls.insert(
            call,
            CallEntry {
                dialog: dialog_tx,
                local: p.local,
            },
        );
        self.services
            .registry
            .answered(&p.info.call_sid, control_tx);
        let media = if p.srtp.is_some() { "srtp" } else { "rtp" };
        counter!(m::CALLS_ANSWERED_TOTAL, "transport" => p.info.transport.name(), "media" => media)
            .increment(1);
        let start = CallStart {
            call,
            info: p.info,
            admitted: p.admitted,
            negotiated: p.negotiated,
            start_unix_ms: p.start_unix_ms,
            settings: self.call_settings(),
            program: p.program,
            srtp: p.srtp,
        };
        self.tasks.spawn(tracing::Instrument::instrument(
            driver::run(self.services.clone(), start, dialog_rx, control_rx),
            p.span,
        ));
    }

    /// Place an outbound call for the API through the trunk.
    fn dial_out(&mut self, sid: String, call: NewCall) {
        let registry = self.services.registry.clone();
        let fail = |status: CallStatus| {
            counter!(m::OUTBOUND_CALLS_TOTAL, "result" => status.as_str()).increment(1);
            registry.ended(&sid, status, None);
        };
        let Some(trunk) = self.config.trunk_uri.clone() else {
            return fail(CallStatus::Failed);
        };
        let span = tracing::info_span!("call", call_sid = %sid);
        let _enter = span.enter();
        let admitted = match self.slots.admit(self.config.sip_listen.ip()) {
            Ok(a) => a,
            Err(reason) => {
                info!(reason = reason.label(), "outbound call refused");
                return fail(CallStatus::Failed);
            }
        };
        let Some(port) = admitted.slot.port() else {
            return fail(CallStatus::Failed);
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
        };
        let handle = match self.endpoint.place_call(params, Instant::now()) {
            Ok(h) => h,
            Err(e) => {
                warn!(error = %e, "INVITE could not be sent");
                return fail(CallStatus::Failed);
            }
        };
        let call_id = self
            .endpoint
            .call_id(handle)
            .unwrap_or_default()
            .to_string();
        info!(to = %target, from = %from, trunk = %trunk.addr, rtp_port = port, "dialling out");
        registry.initiated(&sid, &call_id);
        let info = CallInfo {
            call_id,
            call_sid: sid.clone(),
            account_sid: self.config.api_account_sid.clone(),
            direction: CallDirection::OutboundApi,
            transport: trunk.transport,
            from,
            to: target,
            sip_headers: Vec::new(),
        };
        let start_unix_ms = crate::records::cdr::unix_ms_now();
        CallDetailRecord::start(&info, start_unix_ms).log();
        self.sids.insert(sid, handle);
        // Negotiated for real from the answer; this placeholder never reaches a call.
        let negotiated = awaiting_answer();
        self.dialing.insert(
            handle,
            PendingCall {
                answer: offer,
                admitted,
                info,
                negotiated,
                local,
                span: span.clone(),
                start_unix_ms,
                program: call.twiml,
                srtp: None,
                timed_out: false,
                rang: false,
            },
        );
        let tx = self.command_tx.clone();
        let timeout = call.timeout;
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            let _ = tx.send(SipCommand::RingTimeout(handle));
        });
    }

    /// Our answer to an offer under the SRTP policy, the media, and the SDES keys if SRTP;
    /// or why not (the refusal and its Warning text).
    fn answer_offer(
        &self,
        offer: &SessionDescription,
        local: &LocalMedia,
    ) -> Result<
        (
            SessionDescription,
            ontime_sip::NegotiatedMedia,
            Option<ontime_srtp::SdesKeys>,
        ),
        (RejectReason, &'static str),
    > {
        let mut keys = None;
        let answered = ontime_sip::sdp::answer_offer_srtp(
            offer,
            local,
            self.config.srtp,
            &mut |_, section| match ontime_srtp::answer_offer(section.attribute_values("crypto")) {
                Ok(k) => {
                    let line = k.local.to_string();
                    keys = Some(k);
                    Some(line)
                }
                Err(e) => {
                    info!(reason = e.reason(), "offered crypto lines unusable");
                    None
                }
            },
        );
        match answered {
            // Only the chosen section's keys count (the closure may have seen others first).
            Ok((answer, negotiated)) => Ok((answer, negotiated, keys.filter(|_| negotiated.srtp))),
            Err(ontime_sip::Error::Srtp(why)) => {
                info!(why, "SRTP policy refused the offer: 488");
                Err((RejectReason::Srtp, why))
            }
            Err(e) => {
                info!(error = %e, "no common codec: 488");
                Err((
                    RejectReason::NoCommonCodec,
                    "no common codec: PCMU or PCMA at 8000 Hz",
                ))
            }
        }
    }

    /// The answer to our late offer arrived in the ACK: the call's media starts.
    fn late_answer(&mut self, call: ontime_sip::CallHandle, answer: SessionDescription) {
        let Some(entry) = self.calls.get(&call) else {
            return;
        };
        match ontime_sip::sdp::read_answer(&answer, &entry.local) {
            Ok(n) => {
                info!(codec = ?n.codec, "late offer answered in the ACK");
                let _ = entry.dialog.send(DialogEvent::Media(n));
            }
            Err(e) => {
                warn!(error = %e, "the ACK's answer is unusable: hanging up");
                let _ = entry
                    .dialog
                    .send(DialogEvent::Hangup(EndCause::SignallingFailure));
            }
        }
    }

    fn outbound_answered(
        &mut self,
        call: ontime_sip::CallHandle,
        answer: Option<SessionDescription>,
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
                counter!(m::OUTBOUND_CALLS_TOTAL, "result" => "answered").increment(1);
                info!(codec = ?n.codec, "outbound call answered");
                p.negotiated = n;
                self.start_call(call, p);
            }
            Err(why) => {
                warn!(%why, "outbound call answered without usable media: hanging up");
                let _ = self.endpoint.hangup(call, Instant::now());
                counter!(m::OUTBOUND_CALLS_TOTAL, "result" => "failed").increment(1);
                self.services
                    .registry
                    .ended(&p.info.call_sid, CallStatus::Failed, Some(200));
                CallDetailRecord::unanswered(&p.info, p.start_unix_ms, EndCause::SignallingFailure)
                    .log();
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
        counter!(m::OUTBOUND_CALLS_TOTAL, "result" => status.as_str()).increment(1);
        self.services
            .registry
            .ended(&p.info.call_sid, status, sip_status);
        self.sids.retain(|s, _| *s != p.info.call_sid);
        let cause = if status == CallStatus::Canceled {
            EndCause::Cancelled
        } else {
            EndCause::SignallingFailure
        };
        CallDetailRecord::unanswered(&p.info, p.start_unix_ms, cause).log();
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
        self.services.agent.abandon_call(&p.info);
        self.services
            .registry
            .ended(&p.info.call_sid, CallStatus::Canceled, None);
        self.sids.retain(|s, _| *s != p.info.call_sid);
        counter!(m::CALLS_TOTAL, "result" => cause.result_label()).increment(1);
        CallDetailRecord::unanswered(&p.info, p.start_unix_ms, cause).log();
        // dropping `p` gives its slot back
    }

    fn reoffer(&mut self, call: ontime_sip::CallHandle, method: Method, offer: SessionDescription) {
        let Some(entry) = self.calls.get_mut(&call) else {
            return;
        };
        entry.local.session_version += 1;
        match ontime_sip::sdp::answer_offer(&offer, &entry.local) {
            Ok((answer, negotiated)) => {
                if let Err(e) = self.endpoint.answer_update(call, &answer, Instant::now()) {
                    warn!(error = %e, ?method, "answering the new offer failed");
                    return;
                }
                let _ = entry.dialog.send(DialogEvent::Media(negotiated));
            }
            Err(e) => {
                info!(error = %e, ?method, "new offer has no common codec: 488, session unchanged");
                let _ = self.endpoint.reject_update(call, 488, Instant::now());
            }
        }
    }
}
