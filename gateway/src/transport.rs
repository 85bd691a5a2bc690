//! SIP over TCP and TLS (RFC 3261 §18): listeners, one task per connection, and the table the
//! SIP driver sends through. UDP stays on the SIP driver's own socket.
//!
//! A connection task cuts whole messages out of its stream (`ontime_sip::StreamFramer`) and
//! hands them to the SIP driver with the peer's address and transport; it answers through
//! [`StreamTransports::send`], which finds the connection a request came in on (responses go
//! back on it, §18.2.2), reuses a connection to the peer's address for requests we send, and
//! opens one (TLS verified against the client roots) when there is none.
//!
//! Bounds, because a public SIP port is scanned within minutes: connections from sources
//! outside the trunk networks are closed at accept; at most [`MAX_PER_SOURCE`] connections per
//! source address and [`MAX_CONNECTIONS`] in all; a TLS handshake gets [`HANDSHAKE_TIMEOUT`];
//! a message started must complete within [`MESSAGE_TIMEOUT`] (a Content-Length that never
//! arrives); a connection idle for [`IDLE_TIMEOUT`] is closed; the framer's limits bound what
//! one message may hold. RFC 5626 keep-alive pings (CRLFCRLF) are answered with a CRLF pong.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use metrics::{counter, gauge};
use ontime_sip::{Limits, StreamFramer, Transport};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tracing::{debug, info, warn};

use crate::ops::metrics as m;

/// Connections open at once, both ways.
pub const MAX_CONNECTIONS: usize = 1024;
/// Connections open at once from (or to) one IP address.
pub const MAX_PER_SOURCE: usize = 16;
/// Longest TLS handshake (either side) and TCP connect.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest time a message may take to arrive whole once its first byte came.
pub const MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with nothing on it this long is closed (RFC 5626 flows send a keep-alive at
/// least every 2 minutes or so).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Messages queued for one connection before more are dropped (the peer reads too slowly).
const SEND_QUEUE: usize = 64;

/// A whole SIP message from a stream connection.
#[derive(Debug)]
pub struct StreamMessage {
    /// The message.
    pub bytes: Vec<u8>,
    /// The peer's address (the connection's remote end).
    pub source: SocketAddr,
    /// `Tcp` or `Tls`.
    pub transport: Transport,
}

#[derive(Clone)]
struct Connection {
    id: u64,
    tx: mpsc::Sender<Vec<u8>>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    by_peer: HashMap<(Transport, SocketAddr), Connection>,
}

impl Table {
    fn count_ip(&self, ip: IpAddr) -> usize {
        self.by_peer.keys().filter(|(_, a)| a.ip() == ip).count()
    }
}

/// The stream transports: listeners, connections, and the way out.
#[derive(Clone)]
pub struct StreamTransports {
    table: Arc<Mutex<Table>>,
    incoming: mpsc::Sender<StreamMessage>,
    connector: Option<TlsConnector>,
    limits: Limits,
    trusted: Arc<dyn Fn(IpAddr) -> bool + Send + Sync>,
    /// Host names of the addresses we dial over TLS (the trunk's, the registrars'): the
    /// certificate must name the host the operator wrote, not the address it resolved to.
    names: Arc<HashMap<IpAddr, String>>,
}

impl StreamTransports {
    /// Transports that deliver messages to `incoming`; `trusted` decides which sources may
    /// connect; `connector` (None: no TLS client) opens TLS connections we originate.
    pub fn new(
        incoming: mpsc::Sender<StreamMessage>,
        connector: Option<TlsConnector>,
        trusted: Arc<dyn Fn(IpAddr) -> bool + Send + Sync>,
        names: HashMap<IpAddr, String>,
    ) -> StreamTransports {
        StreamTransports {
            table: Arc::new(Mutex::new(Table::default())),
            incoming,
            connector,
            limits: Limits::default(),
            trusted,
            names: Arc::new(names),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Accept connections on `listener` (TLS when `acceptor` is given) until the task is
    /// aborted.
    pub fn listen(
        &self,
        listener: TcpListener,
        acceptor: Option<TlsAcceptor>,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(a) => a,
                    Err(e) => {
                        warn!(error = %e, "SIP stream accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                this.accepted(stream, peer, acceptor.clone());
            }
        })
    }

    fn accepted(&self, stream: TcpStream, peer: SocketAddr, acceptor: Option<TlsAcceptor>) {
        let transport = if acceptor.is_some() {
            Transport::Tls
        } else {
            Transport::Tcp
        };
        if !(self.trusted)(peer.ip()) {
            // Closed before a byte is read: a scanner learns only that the port is open.
            counter!(m::SIP_DROPPED_TOTAL, "reason" => "untrusted").increment(1);
            return;
        }
        let Some((conn, rx)) = self.register(transport, peer) else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            match acceptor {
                None => this.run(stream, peer, transport, conn, rx).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => this.run(tls, peer, transport, conn, rx).await,
                        Ok(Err(e)) => {
                            counter!(m::SIP_TLS_HANDSHAKE_FAILURES_TOTAL, "side" => "server")
                                .increment(1);
                            info!(%peer, error = %e, "TLS handshake failed");
                            this.unregister(transport, peer, conn.id);
                        }
                        Err(_) => {
                            counter!(m::SIP_TLS_HANDSHAKE_FAILURES_TOTAL, "side" => "server")
                                .increment(1);
                            info!(%peer, "TLS handshake timed out");
                            this.unregister(transport, peer, conn.id);
                        }
                    }
                }
            }
        });
    }

    /// A table entry for a new connection, within the bounds.
    fn register(
        &self,
        transport: Transport,
        peer: SocketAddr,
    ) -> Option<(Connection, mpsc::Receiver<Vec<u8>>)> {
        let mut table = self.lock();
        if table.by_peer.len() >= MAX_CONNECTIONS || table.count_ip(peer.ip()) >= MAX_PER_SOURCE {
            counter!(m::SIP_CONNECTIONS_REFUSED_TOTAL).increment(1);
            debug!(%peer, "SIP connection refused: too many");
            return None;
        }
        table.next_id += 1;
        let (tx, rx) = mpsc::channel(SEND_QUEUE);
        let conn = Connection {
            id: table.next_id,
            tx,
        };
        table.by_peer.insert((transport, peer), conn.clone());
        gauge!(m::SIP_CONNECTIONS, "transport" => transport.name()).set(
            table
                .by_peer
                .keys()
                .filter(|(t, _)| *t == transport)
                .count() as f64,
        );
        Some((conn, rx))
    }

    fn unregister(&self, transport: Transport, peer: SocketAddr, id: u64) {
        let mut table = self.lock();
        if table
            .by_peer
            .get(&(transport, peer))
            .is_some_and(|c| c.id == id)
        {
            table.by_peer.remove(&(transport, peer));
        }
        gauge!(m::SIP_CONNECTIONS, "transport" => transport.name()).set(
            table
                .by_peer
                .keys()
                .filter(|(t, _)| *t == transport)
                .count() as f64,
        );
    }

    /// Send a message over `transport` to `destination`: on the connection with that peer, or
    /// any connection with its IP (a peer's requests come from an ephemeral port, ours go to
    /// its listening port: RFC 3261 §18 lets us reuse the connection), or a new one.
    pub fn send(&self, transport: Transport, destination: SocketAddr, payload: Vec<u8>) {
        let existing = {
            let table = self.lock();
            table
                .by_peer
                .get(&(transport, destination))
                .or_else(|| {
                    table
                        .by_peer
                        .iter()
                        .find(|((t, a), _)| *t == transport && a.ip() == destination.ip())
                        .map(|(_, c)| c)
                })
                .cloned()
        };
        let conn = match existing {
            Some(c) => c,
            None => match self.connect(transport, destination) {
                Some(c) => c,
                None => return,
            },
        };
        if conn.tx.try_send(payload).is_err() {
            counter!(m::SIP_STREAM_SEND_DROPPED_TOTAL).increment(1);
            warn!(%destination, "SIP connection backed up: message dropped");
        }
    }

    /// Open a connection to `destination`; messages queue until it is up.
    fn connect(&self, transport: Transport, destination: SocketAddr) -> Option<Connection> {
        let connector = match transport {
            Transport::Tls => match &self.connector {
                Some(c) => Some(c.clone()),
                None => {
                    warn!(%destination, "no TLS client configured: message dropped");
                    return None;
                }
            },
            _ => None,
        };
        let (conn, rx) = self.register(transport, destination)?;
        let this = self.clone();
        let ret = conn.clone();
        tokio::spawn(async move {
            let tcp = match tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(destination))
                .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    info!(%destination, error = %e, "SIP connection failed");
                    return this.unregister(transport, destination, conn.id);
                }
                Err(_) => {
                    info!(%destination, "SIP connection timed out");
                    return this.unregister(transport, destination, conn.id);
                }
            };
            let _ = tcp.set_nodelay(true);
            match connector {
                None => this.run(tcp, destination, transport, conn, rx).await,
                Some(connector) => {
                    // The host name the operator configured for this address, else the
                    // address itself (the certificate must then name that IP).
                    let name = this
                        .names
                        .get(&destination.ip())
                        .and_then(|h| ServerName::try_from(h.clone()).ok())
                        .unwrap_or_else(|| ServerName::IpAddress(destination.ip().into()));
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, tcp))
                        .await
                    {
                        Ok(Ok(tls)) => this.run(tls, destination, transport, conn, rx).await,
                        _ => {
                            counter!(m::SIP_TLS_HANDSHAKE_FAILURES_TOTAL, "side" => "client")
                                .increment(1);
                            info!(%destination, "TLS handshake to the peer failed");
                            this.unregister(transport, destination, conn.id);
                        }
                    }
                }
            }
        });
        Some(ret)
    }

    /// One connection's life: read and frame, write what is queued, until either side ends
    /// it or a bound is crossed.
    async fn run<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
        peer: SocketAddr,
        transport: Transport,
        conn: Connection,
        mut outgoing: mpsc::Receiver<Vec<u8>>,
    ) {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let mut framer = StreamFramer::new();
        let mut buf = vec![0u8; 16 * 1024];
        let mut message_started: Option<tokio::time::Instant> = None;
        let why = loop {
            let deadline = match message_started {
                Some(t) => t + MESSAGE_TIMEOUT,
                None => tokio::time::Instant::now() + IDLE_TIMEOUT,
            };
            tokio::select! {
                r = reader.read(&mut buf) => {
                    let n = match r {
                        Ok(0) => break "closed by the peer",
                        Ok(n) => n,
                        Err(_) => break "read error",
                    };
                    let chunk = &buf[..n];
                    if framer.buffered_bytes() == 0 && chunk.starts_with(b"\r\n\r\n") {
                        // RFC 5626 §4.4.1 keep-alive ping: pong with one CRLF.
                        if writer.write_all(b"\r\n").await.is_err() {
                            break "write error";
                        }
                    }
                    framer.push(chunk);
                    loop {
                        match framer.next_message(&self.limits) {
                            Ok(Some(bytes)) => {
                                let msg = StreamMessage { bytes, source: peer, transport };
                                if self.incoming.send(msg).await.is_err() {
                                    return self.unregister(transport, peer, conn.id);
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                counter!(m::SIP_INVALID_MESSAGES_TOTAL).increment(1);
                                info!(%peer, error = %e, "SIP stream unframeable: closing");
                                return self.unregister(transport, peer, conn.id);
                            }
                        }
                    }
                    message_started = (framer.buffered_bytes() > 0)
                        .then(|| message_started.unwrap_or_else(tokio::time::Instant::now));
                }
                out = outgoing.recv() => match out {
                    Some(bytes) => {
                        if writer.write_all(&bytes).await.is_err() {
                            break "write error";
                        }
                    }
                    None => break "shut down",
                },
                _ = tokio::time::sleep_until(deadline) => {
                    break if message_started.is_some() {
                        counter!(m::SIP_DROPPED_TOTAL, "reason" => "slow_message").increment(1);
                        "message incomplete too long"
                    } else {
                        "idle"
                    };
                }
            }
        };
        debug!(%peer, transport = transport.name(), why, "SIP connection closed");
        let _ = writer.shutdown().await;
        self.unregister(transport, peer, conn.id);
    }
}
