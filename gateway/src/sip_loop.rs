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
};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::admission::sip_guard::{SipGuard, Verdict};
use crate::admission::{AdmittedCall, CallSlots, RejectReason, RETRY_AFTER_SECS};
use crate::agent::{Admission, CallInfo};
use crate::call::driver::{self, CallServices, CallStart, SipCall};
use crate::call::{CallSettings, DialogEvent, SipRequest};
use crate::config::Config;
use crate::ops::metrics as m;
use crate::records::cdr::{CallDetailRecord, EndCause};

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
    admitted: AdmittedCall,
    info: CallInfo,
    negotiated: ontime_sip::NegotiatedMedia,
    local: LocalMedia,
    span: tracing::Span,
    start_unix_ms: u64,
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
    pending: HashMap<ontime_sip::CallHandle, PendingCall>,
    tasks: tokio::task::JoinSet<()>,
}

impl SipLoop {
    /// Build the loop around a bound socket.
    pub(crate) fn new(
        socket: UdpSocket,
        config: Arc<Config>,
        slots: Arc<CallSlots>,
        services: CallServices,
        call_requests: mpsc::UnboundedReceiver<SipCall>,
    ) -> std::io::Result<SipLoop> {
        let local = socket.local_addr()?;
        let advertised = SocketAddr::new(config.public_ip, local.port());
        let mut sip_config = SipConfig::new(advertised);
        sip_config.user = "ontime".into();
        // No version unless the operator writes one: a version tells a scanner what to try.
        sip_config.user_agent = config.sip_server_header.clone();
        // In-dialog requests are also accepted from every address of the trunk (a proxy in
        // front may send the BYE from another host than the INVITE).
        let trunk = config.trunk_cidrs.clone();
        sip_config.trusted_peer = Some(Arc::new(move |ip| trunk.iter().any(|n| n.contains(&ip))));
        let guard = SipGuard::new(
            config.trunk_cidrs.clone(),
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
            tasks: tokio::task::JoinSet::new(),
        })
    }

    /// Run until a drain has been asked for (`drain` gets its deadline) and every call has
    /// ended.
    pub(crate) async fn run(mut self, mut drain: tokio::sync::watch::Receiver<Option<Instant>>) {
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
                    Ok((n, src)) => self.datagram(&buf[..n], src).await,
                    Err(e) => warn!(error = %e, "SIP socket receive failed"),
                },
                _ = sleep => self.endpoint.handle_timeout(Instant::now()),
                Some(cmd) = self.commands.recv() => self.command(cmd),
                Some(req) = self.call_requests.recv() => self.call_request(req),
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

    /// A datagram on the SIP socket: judged before the endpoint sees it, so strangers and
    /// floods create no transaction.
    async fn datagram(&mut self, bytes: &[u8], src: SocketAddr) {
        let now = Instant::now();
        match self.guard.check(src, bytes, now) {
            // The endpoint counts what it reads and sends (`ontime_sip_*`).
            Verdict::Pass => self.endpoint.handle_datagram(bytes, src, now),
            Verdict::Reject => {
                let server = self.config.sip_server_header.as_deref();
                if let Some(response) = ontime_sip::stateless_response(bytes, 403, server) {
                    counter!(m::SIP_UNTRUSTED_REJECTED_TOTAL).increment(1);
                    let _ = self.socket.send_to(&response, src).await;
                }
            }
            Verdict::Drop(reason) => {
                counter!(m::SIP_DROPPED_TOTAL, "reason" => reason).increment(1);
            }
        }
    }

    fn call_request(&mut self, req: SipCall) {
        let result = match req.request {
            SipRequest::Hangup => self.endpoint.hangup(req.call, Instant::now()),
            SipRequest::HangupWithReason(reason) => {
                let headers = [("Reason".to_string(), reason)];
                self.endpoint
                    .hangup_with_headers(req.call, &headers, Instant::now())
            }
        };
        if let Err(e) = result {
            warn!(error = %e, "BYE could not be sent");
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
            } => match (self.pending.remove(&call), admission) {
                (Some(p), Admission::Answer) => self.answer(call, p),
                (Some(p), Admission::Reject) => {
                    let _enter = p.span.enter();
                    info!("agent unavailable: 503");
                    self.reject(call, RejectReason::AgentUnavailable);
                    // dropping `p` gives its slot back
                }
                // The caller cancelled while the agent prepared: let it release what it holds.
                (None, _) => self.services.agent.abandon_call(&info),
            },
            SipCommand::StopAccepting => {
                self.slots.stop_accepting();
                self.endpoint.set_accepting(false);
                info!(calls = self.calls.len(), "draining: no new calls");
            }
        }
    }

    async fn flush(&mut self) {
        loop {
            while let Some(t) = self.endpoint.poll_transmit() {
                if let Err(e) = self.socket.send_to(&t.payload, t.destination).await {
                    warn!(error = %e, to = %t.destination, "SIP send failed");
                }
            }
            let Some(event) = self.endpoint.poll_event() else {
                break;
            };
            self.event(event);
        }
        self.slots
            .set_sip_overloaded(self.endpoint.budget_exhausted_since().is_some());
        self.endpoint.set_accepting(self.slots.ready());
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
            Event::Established { call } => self.to_call(call, DialogEvent::Established),
            Event::OfferReceived {
                call,
                method,
                offer,
            } => self.reoffer(call, method, offer),
            Event::Dtmf { call, digit, .. } => self.to_call(call, DialogEvent::Dtmf(digit)),
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
                    let _ = e.dialog.send(DialogEvent::Ended(cause));
                }
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
        if !self.config.is_trunk(incoming.source.ip()) {
            warn!(source = %incoming.source, "INVITE from outside the trunk networks: 403");
            return self.reject(call, RejectReason::NotTrunk);
        }
        let admitted = match self.slots.admit(self.config.sip_listen.ip()) {
            Ok(a) => a,
            Err(reason) => return self.reject(call, reason),
        };
        let Some(offer) = incoming.offer.clone() else {
            // Late offer (INVITE without SDP) is not supported: trunks send an offer.
            return self.reject(call, RejectReason::NoCommonCodec);
        };
        let Some(port) = admitted.slot.port() else {
            return self.reject(call, RejectReason::NoRtpPort);
        };
        let local = self.local_media(port);
        let (answer, negotiated) = match ontime_sip::sdp::answer_offer(&offer, &local) {
            Ok(ok) => ok,
            Err(e) => {
                info!(error = %e, "no common codec: 488");
                return self.reject(call, RejectReason::NoCommonCodec);
            }
        };
        let info = CallInfo {
            call_id: incoming.call_id.clone(),
            from: incoming.from.uri.clone(),
            to: incoming.to.uri.clone(),
            sip_headers: incoming.headers.clone(),
        };
        info!(from = %info.from, to = %info.to, source = %incoming.source, codec = ?negotiated.codec, rtp_port = port, "call admitted");
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
        };
        let delay = self.config.answer_delay;
        if let Some(prepared) = self.services.agent.prepare_call(&pending.info) {
            // Ring while the agent gets ready (e.g. connects to its bot) and the ring time
            // passes, then answer or refuse: the SIP loop never waits for it.
            if let Err(e) = self.endpoint.ring(call, Instant::now()) {
                warn!(error = %e, "180 failed");
            }
            let info = pending.info.clone();
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
        let (dialog_tx, dialog_rx) = mpsc::unbounded_channel();
        self.calls.insert(
            call,
            CallEntry {
                dialog: dialog_tx,
                local: p.local,
            },
        );
        let start = CallStart {
            call,
            info: p.info,
            admitted: p.admitted,
            negotiated: p.negotiated,
            start_unix_ms: p.start_unix_ms,
            settings: self.call_settings(),
        };
        self.tasks.spawn(tracing::Instrument::instrument(
            driver::run(self.services.clone(), start, dialog_rx),
            span.clone(),
        ));
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
