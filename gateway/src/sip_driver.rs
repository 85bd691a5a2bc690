//! The tokio driver of the [`Switchboard`]: it owns the SIP socket and the stream transports,
//! reads the clock, feeds the switchboard what arrives and carries out what it asks (send bytes,
//! start call tasks, ask the voice route, tell the registry, write records, count). No decision
//! is made here; see `switchboard` for them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::counter;
use ontime_sip::{CallHandle, Transport};
use ontime_twilio::Verb;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tracing::warn;

use crate::admission::CallSlots;
use crate::agent::{Admission, CallInfo};
use crate::call::DialogEvent;
use crate::call_driver::{self, CallServices, SipCall};
use crate::config::Config;
use crate::ops::metrics as m;
use crate::records::cdr::unix_ms_now;
use crate::registry::RegistryRequest;
use crate::routing::VoiceRoute;
use crate::switchboard::{Action, Counted, RegistryNote, Setup, Switchboard};
use crate::transport::{StreamMessage, StreamTransports};

pub(crate) use crate::switchboard::Registration;

/// How often a draining driver looks whether it may stop, besides its deadlines.
const DRAIN_POLL: Duration = Duration::from_millis(200);

/// What the driver is asked to do: by calls (BYE, REFER, INFO) and by the registry (dial out,
/// end a ringing call).
pub(crate) struct Requests {
    /// From call tasks.
    pub calls: mpsc::UnboundedReceiver<SipCall>,
    /// From the call registry.
    pub registry: mpsc::UnboundedReceiver<RegistryRequest>,
}

/// The stream transports and where their messages arrive.
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

/// A voice route's verdict, back from its task.
struct Routed {
    call: CallHandle,
    info: CallInfo,
    admission: Admission,
    program: Vec<Verb>,
}

/// The driver's state.
pub(crate) struct SipDriver {
    socket: UdpSocket,
    board: Switchboard,
    services: CallServices,
    route: VoiceRoute,
    requests: Requests,
    streams: StreamTransports,
    stream_messages: mpsc::Receiver<StreamMessage>,
    routed_tx: mpsc::UnboundedSender<Routed>,
    routed_rx: mpsc::UnboundedReceiver<Routed>,
    /// Each live call's dialog channel.
    calls: HashMap<CallHandle, mpsc::UnboundedSender<DialogEvent>>,
    tasks: tokio::task::JoinSet<()>,
}

impl SipDriver {
    /// Build the driver around a bound socket.
    pub(crate) fn new(
        socket: UdpSocket,
        config: Arc<Config>,
        slots: Arc<CallSlots>,
        services: CallServices,
        requests: Requests,
        route: VoiceRoute,
        streams: Streams,
    ) -> std::io::Result<SipDriver> {
        let now = Instant::now();
        let setup = Setup {
            sip_addr: socket.local_addr()?,
            tcp_addr: streams.tcp_addr,
            tls_addr: streams.tls_addr,
            registrations: streams.registrations,
            trusted: streams.trusted,
            sender_origin: services.sender.origin(),
            epoch: (now, unix_ms_now()),
            seed: rand::random(),
        };
        let board = Switchboard::new(config, slots, setup, now);
        let (routed_tx, routed_rx) = mpsc::unbounded_channel();
        Ok(SipDriver {
            socket,
            board,
            services,
            route,
            requests,
            streams: streams.transports,
            stream_messages: streams.messages,
            routed_tx,
            routed_rx,
            calls: HashMap::new(),
            tasks: tokio::task::JoinSet::new(),
        })
    }

    /// Run until a drain has been asked for (`drain` gets its deadline) and every call has
    /// ended.
    pub(crate) async fn run(mut self, mut drain: tokio::sync::watch::Receiver<Option<Instant>>) {
        let mut buf = vec![0u8; 65_536];
        let mut draining = false;
        self.flush().await;
        loop {
            let timeout = self.board.poll_timeout();
            let sleep = async {
                match timeout {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = self.socket.recv_from(&mut buf) => match r {
                    Ok((n, src)) => {
                        self.board.handle_message(&buf[..n], src, Transport::Udp, Instant::now())
                    }
                    Err(e) => warn!(error = %e, "SIP socket receive failed"),
                },
                Some(m) = self.stream_messages.recv() => {
                    self.board.handle_message(&m.bytes, m.source, m.transport, Instant::now())
                }
                _ = sleep => self.board.handle_timeout(Instant::now()),
                Some(r) = self.routed_rx.recv() => {
                    self.board.routed(r.call, &r.info, r.admission, r.program, Instant::now())
                }
                Some(req) = self.requests.calls.recv() => {
                    self.board.call_request(req.call, req.request, Instant::now())
                }
                Some(req) = self.requests.registry.recv() => {
                    self.board.registry_request(req, Instant::now())
                }
                changed = drain.changed(), if !draining => {
                    if changed.is_ok() {
                        if let Some(deadline) = *drain.borrow() {
                            draining = true;
                            self.board.drain(deadline, Instant::now());
                        }
                    }
                }
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
                _ = tokio::time::sleep(DRAIN_POLL), if draining => {}
            }
            self.flush().await;
            if self.board.is_finished(Instant::now()) {
                break;
            }
        }
        while self.tasks.join_next().await.is_some() {}
        tracing::info!("SIP driver stopped");
    }

    /// Carry out everything the switchboard produced.
    async fn flush(&mut self) {
        loop {
            while let Some(t) = self.board.poll_transmit() {
                self.send(t.transport, t.destination, t.payload).await;
            }
            let Some(action) = self.board.poll_action() else {
                break;
            };
            self.act(action);
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

    fn act(&mut self, action: Action) {
        match action {
            Action::StartCall(start) => {
                let (dialog_tx, dialog_rx) = mpsc::unbounded_channel();
                let (control_tx, control_rx) = mpsc::unbounded_channel();
                self.calls.insert(start.call, dialog_tx);
                // A call started unanswered (`<Dial answerOnBridge>`) takes commands at once
                // and counts as answered when it is (`RegistryNote::Answered`).
                if start.settings.unanswered {
                    self.services
                        .registry
                        .attach(&start.info.call_sid, control_tx);
                } else {
                    self.services
                        .registry
                        .answered(&start.info.call_sid, control_tx);
                }
                let span = start.span.clone();
                self.tasks.spawn(tracing::Instrument::instrument(
                    call_driver::run(self.services.clone(), *start, dialog_rx, control_rx),
                    span,
                ));
            }
            Action::ToCall(call, event) => {
                let ended = matches!(event, DialogEvent::Ended(_));
                if let Some(tx) = self.calls.get(&call) {
                    let _ = tx.send(event);
                }
                if ended {
                    self.calls.remove(&call);
                }
            }
            Action::Route(call, info) => {
                match self.route.prepare(&info, self.services.agent.clone()) {
                    // Nothing to wait for: answer when the ring time allows.
                    None => self.board.routed(
                        call,
                        &info,
                        Admission::Answer,
                        Vec::new(),
                        Instant::now(),
                    ),
                    Some(ready) => {
                        self.board.routing(call, Instant::now());
                        let tx = self.routed_tx.clone();
                        tokio::spawn(async move {
                            let (admission, program) = ready.await;
                            let _ = tx.send(Routed {
                                call,
                                info,
                                admission,
                                program,
                            });
                        });
                    }
                }
            }
            Action::Abandon(info) => self.services.agent.abandon_call(&info),
            Action::Registry(note) => {
                let registry = &self.services.registry;
                match note {
                    RegistryNote::Inbound(info) => registry.inbound(&info),
                    RegistryNote::Initiated { sid, call_id } => registry.initiated(&sid, &call_id),
                    RegistryNote::Ringing { sid, status } => registry.ringing(&sid, status),
                    RegistryNote::Answered { sid } => registry.mark_answered(&sid),
                    RegistryNote::Ended {
                        sid,
                        status,
                        sip_status,
                    } => registry.ended(&sid, status, sip_status),
                }
            }
            Action::Record(record) => record.log(),
            Action::Count(counted) => count(counted),
            Action::SipStats(stats) => crate::ops::sip_stats::record(&stats),
        }
    }
}

/// Record a count the switchboard reported in its metric.
fn count(counted: Counted) {
    match counted {
        Counted::Rejected(reason) => {
            counter!(m::CALLS_REJECTED_TOTAL, "reason" => reason.label()).increment(1)
        }
        Counted::Untrusted => counter!(m::SIP_UNTRUSTED_REJECTED_TOTAL).increment(1),
        Counted::XHeadersDropped(n) => counter!(m::SIP_X_HEADERS_DROPPED_TOTAL).increment(n),
        Counted::Dropped(reason) => counter!(m::SIP_DROPPED_TOTAL, "reason" => reason).increment(1),
        Counted::Answered { transport, media } => {
            counter!(m::CALLS_ANSWERED_TOTAL, "transport" => transport, "media" => media)
                .increment(1)
        }
        Counted::Outbound(result) => {
            counter!(m::OUTBOUND_CALLS_TOTAL, "result" => result).increment(1)
        }
        Counted::EndedUnanswered(result) => {
            counter!(m::CALLS_TOTAL, "result" => result).increment(1)
        }
        Counted::Registration { aor, up } => {
            metrics::gauge!(m::REGISTRATION_UP, "registrar" => aor).set(if up { 1.0 } else { 0.0 })
        }
    }
}
