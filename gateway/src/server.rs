//! The running gateway: the SIP loop (one tokio task owning the sans-IO [`ontime_sip::Endpoint`]),
//! admission (trunk networks, max calls, RTP ports, drain), and the per-call media tasks of
//! [`crate::call`]. The real-time sender and the inference pool are shared by every call.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::counter;
use ontime_inference::InferencePool;
use ontime_sender::Sender;
use ontime_sip::{
    Codec, Config as SipConfig, Direction, EndReason, Endpoint, Event, LocalMedia, Method,
    SessionDescription,
};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::agent::{Admission, Agent, CallInfo};
use crate::call::{self, CallControl, CallMedia};
use crate::cdr::EndCause;
use crate::config::Config;
use crate::metrics as m;
use crate::ports::PortPool;

/// How long the SIP loop stays after the last call of a drain (RFC 3261 T4), absorbing
/// retransmissions.
const LINGER: Duration = Duration::from_secs(5);

/// Seconds a refused caller is asked to wait (`Retry-After`).
pub const RETRY_AFTER_SECS: u32 = 5;

/// Counted reasons for refusing an INVITE (label values of `ontime_calls_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The INVITE came from outside the trunk networks: 403.
    NotTrunk,
    /// At `max_calls`: 503 with Retry-After.
    MaxCalls,
    /// No RTP port pair free: 503 with Retry-After.
    NoRtpPort,
    /// Draining for shutdown: 503 with Retry-After.
    Draining,
    /// No codec in common (or no offer): 488.
    NoCommonCodec,
    /// The agent could not serve the call (e.g. its bot is unreachable): 503 with Retry-After,
    /// sent after ringing.
    AgentUnavailable,
}

impl RejectReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            RejectReason::NotTrunk => "not_trunk",
            RejectReason::MaxCalls => "max_calls",
            RejectReason::NoRtpPort => "no_rtp_port",
            RejectReason::Draining => "draining",
            RejectReason::NoCommonCodec => "no_common_codec",
            RejectReason::AgentUnavailable => "agent_unavailable",
        }
    }
    /// The SIP status sent.
    pub fn status(self) -> u16 {
        match self {
            RejectReason::NotTrunk => 403,
            RejectReason::NoCommonCodec => 488,
            _ => 503,
        }
    }
}

/// State shared by the SIP loop, the call tasks and the ops endpoint.
#[derive(Debug)]
pub struct Shared {
    /// Accepting new calls (false while draining).
    pub accepting: AtomicBool,
    /// Calls in progress.
    pub active_calls: AtomicUsize,
    /// Admission limit.
    pub max_calls: usize,
    /// Free RTP ports (locked only at call set-up and tear-down).
    pub ports: Mutex<PortPool>,
}

impl Shared {
    /// Whether a new call would be admitted now (for `/readyz` and OPTIONS).
    pub fn ready(&self) -> bool {
        self.accepting.load(Ordering::Relaxed)
            && self.active_calls.load(Ordering::Relaxed) < self.max_calls
    }
}

/// Messages from call tasks (and the drain) to the SIP loop.
#[derive(Debug)]
pub enum SipCommand {
    /// Hang up this call with BYE.
    Hangup(ontime_sip::CallHandle),
    /// Stop accepting; OPTIONS and INVITEs get 503 from now on.
    StopAccepting,
    /// The ring time of a call is over: answer it.
    Answer(ontime_sip::CallHandle),
    /// Hang up this call with a BYE carrying this RFC 3326 `Reason` header value.
    HangupWithReason(ontime_sip::CallHandle, String),
    /// The agent prepared a ringing call ([`Agent::prepare_call`]): answer or refuse it.
    AgentReady {
        /// The call.
        call: ontime_sip::CallHandle,
        /// Its facts (to release the agent's preparation if the call is gone).
        info: CallInfo,
        /// The agent's verdict.
        admission: Admission,
    },
}

/// A call admitted and ringing, answered after `answer_delay`.
struct PendingCall {
    answer: SessionDescription,
    media: CallMedia,
    local: LocalMedia,
    span: tracing::Span,
    start_unix_ms: u64,
}

struct CallEntry {
    control: mpsc::UnboundedSender<CallControl>,
    local: LocalMedia,
}

/// What the SIP loop needs.
pub struct SipLoop {
    pub(crate) socket: UdpSocket,
    pub(crate) endpoint: Endpoint,
    pub(crate) config: Arc<Config>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) sender: Arc<Sender>,
    pub(crate) pool: Arc<InferencePool>,
    pub(crate) agent: Arc<dyn Agent>,
    pub(crate) commands: mpsc::UnboundedReceiver<SipCommand>,
    pub(crate) command_tx: mpsc::UnboundedSender<SipCommand>,
    calls: HashMap<ontime_sip::CallHandle, CallEntry>,
    pending: HashMap<ontime_sip::CallHandle, PendingCall>,
    tasks: tokio::task::JoinSet<()>,
}

fn method_label(payload: &[u8]) -> &'static str {
    // Label outgoing/incoming messages for `ontime_sip_messages_total` without a second parse:
    // the start line says it all.
    let line = payload.split(|b| *b == b'\r').next().unwrap_or(&[]);
    if let Some(rest) = line.strip_prefix(b"SIP/2.0 ") {
        return match rest.first() {
            Some(b'1') => "1xx",
            Some(b'2') => "2xx",
            Some(b'3') => "3xx",
            Some(b'4') => "4xx",
            Some(b'5') => "5xx",
            Some(b'6') => "6xx",
            _ => "other",
        };
    }
    for m in [
        "INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "INFO", "UPDATE",
    ] {
        if line.starts_with(m.as_bytes()) && line.get(m.len()) == Some(&b' ') {
            return m;
        }
    }
    "other"
}

impl SipLoop {
    /// Build the loop around a bound socket.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        socket: UdpSocket,
        config: Arc<Config>,
        shared: Arc<Shared>,
        sender: Arc<Sender>,
        pool: Arc<InferencePool>,
        agent: Arc<dyn Agent>,
    ) -> std::io::Result<SipLoop> {
        let local = socket.local_addr()?;
        let advertised = SocketAddr::new(config.public_ip, local.port());
        let mut sip_config = SipConfig::new(advertised);
        sip_config.user = "ontime".into();
        sip_config.user_agent = concat!("ontime-gateway/", env!("CARGO_PKG_VERSION")).into();
        let (command_tx, commands) = mpsc::unbounded_channel();
        Ok(SipLoop {
            socket,
            endpoint: Endpoint::new(sip_config),
            config,
            shared,
            sender,
            pool,
            agent,
            commands,
            command_tx,
            calls: HashMap::new(),
            pending: HashMap::new(),
            tasks: tokio::task::JoinSet::new(),
        })
    }

    /// A handle to send commands to the loop.
    pub fn command_sender(&self) -> mpsc::UnboundedSender<SipCommand> {
        self.command_tx.clone()
    }

    /// Run until `stop` resolves and every call has ended.
    pub async fn run(mut self, mut drain: tokio::sync::watch::Receiver<Option<Instant>>) {
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
                    Ok((n, src)) => {
                        let bytes = &buf[..n];
                        counter!(m::SIP_MESSAGES_TOTAL, "method" => method_label(bytes), "direction" => "in").increment(1);
                        let before = self.endpoint.invalid_messages();
                        self.endpoint.handle_datagram(bytes, src, Instant::now());
                        let invalid = self.endpoint.invalid_messages() - before;
                        if invalid > 0 {
                            counter!(m::SIP_INVALID_MESSAGES_TOTAL).increment(invalid);
                        }
                    }
                    Err(e) => warn!(error = %e, "SIP socket receive failed"),
                },
                _ = sleep => self.endpoint.handle_timeout(Instant::now()),
                Some(cmd) = self.commands.recv() => self.command(cmd),
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
                        let _ = entry.control.send(CallControl::Hangup(EndCause::Drained));
                    }
                }
                if self.calls.is_empty() && self.pending.is_empty() {
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

    fn command(&mut self, cmd: SipCommand) {
        match cmd {
            SipCommand::Hangup(call) => {
                if let Err(e) = self.endpoint.hangup(call, Instant::now()) {
                    warn!(error = %e, "BYE could not be sent");
                }
            }
            SipCommand::Answer(call) => {
                if let Some(p) = self.pending.remove(&call) {
                    self.answer(call, p);
                }
            }
            SipCommand::HangupWithReason(call, reason) => {
                let headers = [("Reason".to_string(), reason)];
                if let Err(e) = self
                    .endpoint
                    .hangup_with_headers(call, &headers, Instant::now())
                {
                    warn!(error = %e, "BYE could not be sent");
                }
            }
            SipCommand::AgentReady {
                call,
                info,
                admission,
            } => match (self.pending.remove(&call), admission) {
                (Some(p), Admission::Answer) => self.answer(call, p),
                (Some(p), Admission::Reject) => {
                    let span = p.span.clone();
                    let _enter = span.enter();
                    info!("agent unavailable: 503");
                    self.reject(call, RejectReason::AgentUnavailable);
                    if let Ok(mut ports) = self.shared.ports.lock() {
                        ports.release(p.media.port);
                    }
                    self.shared.active_calls.fetch_sub(1, Ordering::Relaxed);
                }
                // The caller cancelled while the agent prepared: let it release what it holds.
                (None, _) => self.agent.abandon_call(&info),
            },
            SipCommand::StopAccepting => {
                self.shared.accepting.store(false, Ordering::Relaxed);
                self.endpoint.set_accepting(false);
                info!(calls = self.calls.len(), "draining: no new calls");
            }
        }
    }

    async fn flush(&mut self) {
        loop {
            while let Some(t) = self.endpoint.poll_transmit() {
                counter!(m::SIP_MESSAGES_TOTAL, "method" => method_label(&t.payload), "direction" => "out").increment(1);
                if let Err(e) = self.socket.send_to(&t.payload, t.destination).await {
                    warn!(error = %e, to = %t.destination, "SIP send failed");
                }
            }
            let Some(event) = self.endpoint.poll_event() else {
                break;
            };
            self.event(event);
        }
        self.endpoint.set_accepting(self.shared.ready());
    }

    fn reject(&mut self, call: ontime_sip::CallHandle, reason: RejectReason) {
        counter!(m::CALLS_REJECTED_TOTAL, "reason" => reason.label()).increment(1);
        let headers = if reason.status() == 503 {
            vec![("Retry-After".to_string(), RETRY_AFTER_SECS.to_string())]
        } else {
            Vec::new()
        };
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
            Event::Established { call } => {
                if let Some(e) = self.calls.get(&call) {
                    let _ = e.control.send(CallControl::Established);
                }
            }
            Event::OfferReceived {
                call,
                method,
                offer,
            } => self.reoffer(call, method, offer),
            Event::Dtmf { call, digit, .. } => {
                if let Some(e) = self.calls.get(&call) {
                    let _ = e.control.send(CallControl::Dtmf(digit));
                }
            }
            Event::Ended { call, reason } => {
                if let Some(p) = self.pending.remove(&call) {
                    self.end_unanswered(p, reason);
                } else if let Some(e) = self.calls.remove(&call) {
                    let cause = match reason {
                        EndReason::RemoteHangup => EndCause::CallerBye,
                        EndReason::LocalHangup { .. } => EndCause::GatewayBye,
                        EndReason::Cancelled => EndCause::Cancelled,
                        EndReason::SessionExpired => EndCause::SessionExpired,
                        _ => EndCause::SignallingFailure,
                    };
                    let _ = e.control.send(CallControl::Ended(cause));
                }
            }
            other => tracing::debug!(?other, "SIP event not used by the gateway"),
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
        if !self.config.is_trunk(incoming.source.ip()) {
            warn!(source = %incoming.source, "INVITE from outside the trunk networks: 403");
            return self.reject(call, RejectReason::NotTrunk);
        }
        if !self.shared.accepting.load(Ordering::Relaxed) {
            return self.reject(call, RejectReason::Draining);
        }
        if self.shared.active_calls.load(Ordering::Relaxed) >= self.shared.max_calls {
            return self.reject(call, RejectReason::MaxCalls);
        }
        let Some(offer) = incoming.offer.clone() else {
            // Late offer (INVITE without SDP) is not supported: trunks send an offer.
            return self.reject(call, RejectReason::NoCommonCodec);
        };
        // Try free ports until one binds (another process may hold a port of the range).
        let mut sockets = None;
        for _ in 0..8 {
            let port = match self.shared.ports.lock() {
                Ok(mut p) => p.allocate(),
                Err(_) => None,
            };
            let Some(port) = port else { break };
            match bind_pair(self.config.sip_listen.ip(), port) {
                Ok(pair) => {
                    sockets = Some((port, pair));
                    break;
                }
                Err(e) => {
                    warn!(port, error = %e, "RTP port busy, trying the next");
                    if let Ok(mut p) = self.shared.ports.lock() {
                        p.release(port);
                    }
                }
            }
        }
        let Some((port, (rtp, rtcp))) = sockets else {
            return self.reject(call, RejectReason::NoRtpPort);
        };
        let local = self.local_media(port);
        let (answer, negotiated) = match ontime_sip::sdp::answer_offer(&offer, &local) {
            Ok(ok) => ok,
            Err(e) => {
                info!(error = %e, "no common codec: 488");
                if let Ok(mut p) = self.shared.ports.lock() {
                    p.release(port);
                }
                return self.reject(call, RejectReason::NoCommonCodec);
            }
        };
        self.shared.active_calls.fetch_add(1, Ordering::Relaxed);
        let info = CallInfo {
            call_id: incoming.call_id.clone(),
            from: incoming.from.uri.clone(),
            to: incoming.to.uri.clone(),
            sip_headers: incoming.headers.clone(),
        };
        info!(from = %info.from, to = %info.to, source = %incoming.source, codec = ?negotiated.codec, rtp_port = port, "call admitted");
        let media = CallMedia {
            call,
            info,
            rtp,
            rtcp,
            port,
            negotiated,
            sdp_remote_ip: negotiated.remote_rtp.map(|a| a.ip()),
        };
        let pending = PendingCall {
            answer,
            media,
            local,
            span: span.clone(),
            start_unix_ms: crate::cdr::unix_ms_now(),
        };
        let delay = self.config.answer_delay;
        if let Some(prepared) = self.agent.prepare_call(&pending.media.info) {
            // Ring while the agent gets ready (e.g. connects to its bot) and the ring time
            // passes, then answer or refuse: the SIP loop never waits for it.
            if let Err(e) = self.endpoint.ring(call, Instant::now()) {
                warn!(error = %e, "180 failed");
            }
            let info = pending.media.info.clone();
            self.pending.insert(call, pending);
            let tx = self.command_tx.clone();
            tokio::spawn(async move {
                let (admission, ()) = tokio::join!(prepared, tokio::time::sleep(delay));
                let _ = tx.send(SipCommand::AgentReady {
                    call,
                    info,
                    admission,
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

    fn answer(&mut self, call: ontime_sip::CallHandle, p: PendingCall) {
        let span = p.span.clone();
        let _enter = span.enter();
        if let Err(e) = self.endpoint.answer(call, &p.answer, Instant::now()) {
            warn!(error = %e, "answer failed");
            self.end_unanswered(p, EndReason::Rejected { status: 500 });
            return;
        }
        info!("call answered");
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let ctx = call::CallContext {
            config: self.config.clone(),
            shared: self.shared.clone(),
            sender: self.sender.clone(),
            pool: self.pool.clone(),
            agent: self.agent.clone(),
            sip: self.command_tx.clone(),
        };
        self.calls.insert(
            call,
            CallEntry {
                control: control_tx,
                local: p.local,
            },
        );
        self.tasks.spawn(
            call::run(ctx, p.media, p.start_unix_ms, control_rx).instrument_span(p.span.clone()),
        );
    }

    /// A call that ended before it was answered (CANCEL while ringing): free it and record it.
    fn end_unanswered(&mut self, p: PendingCall, reason: EndReason) {
        let span = p.span.clone();
        let _enter = span.enter();
        let cause = if reason == EndReason::Cancelled {
            EndCause::Cancelled
        } else {
            EndCause::SignallingFailure
        };
        // Whatever the agent prepared for it (a bot connection) will not be used.
        self.agent.abandon_call(&p.media.info);
        if let Ok(mut ports) = self.shared.ports.lock() {
            ports.release(p.media.port);
        }
        self.shared.active_calls.fetch_sub(1, Ordering::Relaxed);
        counter!(m::CALLS_TOTAL, "result" => cause.result_label()).increment(1);
        crate::cdr::CallDetailRecord::unanswered(&p.media.info, p.start_unix_ms, cause).log();
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
                let _ = entry.control.send(CallControl::Media(negotiated));
            }
            Err(e) => {
                info!(error = %e, ?method, "new offer has no common codec: 488, session unchanged");
                let _ = self.endpoint.reject_update(call, 488, Instant::now());
            }
        }
    }
}

/// Bind the RTP socket on an even port and RTCP on the port above (RFC 3550 §11).
fn bind_pair(ip: std::net::IpAddr, port: u16) -> std::io::Result<(StdUdpSocket, StdUdpSocket)> {
    let rtp = StdUdpSocket::bind(SocketAddr::new(ip, port))?;
    let rtcp = StdUdpSocket::bind(SocketAddr::new(ip, port + 1))?;
    rtp.set_nonblocking(true)?;
    rtcp.set_nonblocking(true)?;
    Ok((rtp, rtcp))
}

/// Whether a direction lets us send.
pub fn may_send(direction: Direction) -> bool {
    matches!(direction, Direction::SendRecv | Direction::SendOnly)
}

trait InstrumentExt: Sized {
    fn instrument_span(self, span: tracing::Span) -> tracing::instrument::Instrumented<Self>;
}

impl<F: std::future::Future> InstrumentExt for F {
    fn instrument_span(self, span: tracing::Span) -> tracing::instrument::Instrumented<Self> {
        tracing::Instrument::instrument(self, span)
    }
}
