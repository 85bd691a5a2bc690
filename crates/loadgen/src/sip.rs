//! The callers' SIP user agent: one sans-IO `ontime_sip::Endpoint` on one UDP socket, driven by
//! one tokio task; callers place and hang up calls through a [`SipClient`] and get their call's
//! events back on their own channel.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use ontime_sip::{CallHandle, CallParams, Config, EndReason, Endpoint, Event, SessionDescription};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

use crate::{Error, Result};

/// What a caller learns about its call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    /// A provisional response (180 ...).
    Progress(u16),
    /// 200 OK (ACK sent), with the answer SDP.
    Answered(Option<SessionDescription>),
    /// The call is over.
    Ended(EndReason),
}

enum Command {
    Place {
        params: Box<CallParams>,
        events: mpsc::UnboundedSender<CallEvent>,
        reply: oneshot::Sender<Result<CallHandle>>,
    },
    Hangup(CallHandle),
}

/// A handle on the SIP task; cheap to clone.
#[derive(Debug, Clone)]
pub struct SipClient {
    commands: mpsc::UnboundedSender<Command>,
    local: SocketAddr,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Place { params, .. } => write!(f, "Place({})", params.target),
            Command::Hangup(c) => write!(f, "Hangup({c:?})"),
        }
    }
}

impl SipClient {
    /// Bind `local` (port 0 for any) and start the SIP task on the current runtime.
    pub async fn start(local: SocketAddr) -> Result<SipClient> {
        let socket = UdpSocket::bind(local).await.map_err(|source| Error::Os {
            action: "bind the callers' SIP socket",
            source,
        })?;
        let local = socket.local_addr().map_err(|source| Error::Os {
            action: "read the SIP socket's address",
            source,
        })?;
        let mut config = Config::new(local);
        config.user = "ontime-load".into();
        config.user_agent = Some(concat!("ontime-load/", env!("CARGO_PKG_VERSION")).into());
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(drive(socket, Endpoint::new(config), rx));
        Ok(SipClient {
            commands: tx,
            local,
        })
    }

    /// The SIP socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Send an INVITE; the call's events arrive on `events`.
    pub async fn place_call(
        &self,
        params: CallParams,
        events: mpsc::UnboundedSender<CallEvent>,
    ) -> Result<CallHandle> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Place {
                params: Box::new(params),
                events,
                reply,
            })
            .map_err(|_| Error::Gateway("the SIP task has stopped".into()))?;
        answer
            .await
            .map_err(|_| Error::Gateway("the SIP task has stopped".into()))?
    }

    /// Send BYE (or CANCEL before the answer); `Ended` follows on the call's channel.
    pub fn hangup(&self, call: CallHandle) {
        let _ = self.commands.send(Command::Hangup(call));
    }
}

async fn drive(
    socket: UdpSocket,
    mut ep: Endpoint,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut routes: HashMap<CallHandle, mpsc::UnboundedSender<CallEvent>> = HashMap::new();
    let mut buf = vec![0u8; 65_536];
    let mut open = true;
    loop {
        while let Some(t) = ep.poll_transmit() {
            if let Err(e) = socket.send_to(&t.payload, t.destination).await {
                tracing::warn!(error = %e, to = %t.destination, "SIP send failed");
            }
        }
        while let Some(event) = ep.poll_event() {
            let (call, event) = match event {
                Event::Progress { call, status, .. } => (call, CallEvent::Progress(status)),
                Event::Answered { call, answer } => (call, CallEvent::Answered(answer)),
                Event::Ended { call, reason } => (call, CallEvent::Ended(reason)),
                Event::IncomingCall(c) => {
                    let _ = ep.reject(c.call, 603, &[], Instant::now());
                    continue;
                }
                Event::OfferReceived { call, .. } => {
                    // The callers never change their media; refuse session changes (RFC 3261
                    // §14.2: the old session stays).
                    let _ = ep.reject_update(call, 488, Instant::now());
                    continue;
                }
                _ => continue,
            };
            let ended = matches!(event, CallEvent::Ended(_));
            if let Some(route) = routes.get(&call) {
                let _ = route.send(event);
            }
            if ended {
                routes.remove(&call);
            }
        }
        if !open && ep.active_calls() == 0 && ep.active_transactions() == 0 {
            return;
        }
        let deadline = ep
            .poll_timeout()
            .unwrap_or_else(|| Instant::now() + std::time::Duration::from_secs(1));
        tokio::select! {
            received = socket.recv_from(&mut buf) => match received {
                Ok((n, from)) => ep.handle_datagram(&buf[..n], from, Instant::now()),
                Err(e) => tracing::debug!(error = %e, "SIP receive error"),
            },
            command = commands.recv(), if open => match command {
                Some(Command::Place { params, events, reply }) => {
                    let placed = ep.place_call(*params, Instant::now()).map_err(Error::from);
                    if let Ok(call) = &placed {
                        routes.insert(*call, events);
                    }
                    let _ = reply.send(placed);
                }
                Some(Command::Hangup(call)) => {
                    let _ = ep.hangup(call, Instant::now());
                }
                None => open = false,
            },
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {
                ep.handle_timeout(Instant::now());
            }
        }
    }
}
