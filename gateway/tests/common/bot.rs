//! A Twilio-Media-Streams bot for the WebSocket agent's tests, written from the protocol alone: a
//! tokio-tungstenite server on loopback that logs every message it receives (with its arrival
//! time) and plays a script per connection — media of any length in one burst, marks, clears,
//! junk, a close. Runs on its own thread and runtime; dropping it stops both.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// One step of a bot's script, run in order on each connection.
#[derive(Debug, Clone)]
pub enum Step {
    /// Wait until this many `media` messages have arrived on this connection (bounded: 60 s).
    WaitMedia(usize),
    /// Wait.
    Sleep(Duration),
    /// Wait until this many messages with this `event` have arrived on this connection
    /// (bounded: 60 s).
    WaitEvent(&'static str, usize),
    /// Send µ-law audio as `media` messages of `chunk` bytes each, back to back (one burst).
    Media { ulaw: Arc<Vec<u8>>, chunk: usize },
    /// Send a `mark`.
    Mark(String),
    /// Send a `clear`.
    Clear,
    /// Send this text as is (junk, unknown events, oversized messages).
    Text(String),
    /// Send a binary message.
    Binary(Vec<u8>),
    /// Close the connection (a close frame without a status code).
    Close,
    /// Close the connection with status 1000 (normal closure): the bot hangs up.
    CloseNormal,
}

/// What the bot saw and did on one connection.
#[derive(Debug, Default, Clone)]
pub struct Connection {
    /// Text messages received, parsed, with arrival times.
    pub received: Vec<(Instant, Value)>,
    /// Times each step finished, by index.
    pub steps_done: Vec<(usize, Instant)>,
    /// Messages that were not JSON.
    pub not_json: usize,
    /// The status code of the close frame the gateway sent (`Some(None)`: a frame without one).
    pub close_code: Option<Option<u16>>,
}

impl Connection {
    /// Received messages with this `event`.
    pub fn events(&self, event: &str) -> Vec<&(Instant, Value)> {
        self.received
            .iter()
            .filter(|(_, v)| v["event"] == event)
            .collect()
    }
    /// When step `i` finished.
    pub fn step_done(&self, i: usize) -> Option<Instant> {
        self.steps_done
            .iter()
            .find(|(s, _)| *s == i)
            .map(|(_, t)| *t)
    }
    /// The `mark` messages received with this name (arrival times).
    pub fn marks_named(&self, name: &str) -> Vec<Instant> {
        self.events("mark")
            .iter()
            .filter(|(_, v)| v["mark"]["name"] == name)
            .map(|(t, _)| *t)
            .collect()
    }
}

/// The bot server.
pub struct TestBot {
    pub addr: SocketAddr,
    pub connections: Arc<Mutex<Vec<Arc<Mutex<Connection>>>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestBot {
    /// Start a bot that runs `script` on every connection.
    pub fn start(script: Vec<Step>) -> TestBot {
        Self::start_with(script, None)
    }

    /// The same bot behind TLS (`wss://`) with this PEM certificate and key (rustls, like the
    /// gateway).
    pub fn start_tls(script: Vec<Step>, cert: &std::path::Path, key: &std::path::Path) -> TestBot {
        use rustls_pki_types::pem::PemObject;
        let chain = rustls_pki_types::CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls_pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("TLS server config");
        Self::start_with(
            script,
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
        )
    }

    fn start_with(script: Vec<Step>, tls: Option<tokio_rustls::TlsAcceptor>) -> TestBot {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let connections: Arc<Mutex<Vec<Arc<Mutex<Connection>>>>> = Arc::default();
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel();
        let conns = connections.clone();
        let script = Arc::new(script);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stop_rx => break,
                        r = listener.accept() => {
                            let Ok((tcp, _)) = r else { continue };
                            let conn = Arc::new(Mutex::new(Connection::default()));
                            conns.lock().unwrap().push(conn.clone());
                            let script = script.clone();
                            match tls.clone() {
                                None => {
                                    tokio::spawn(serve(tcp, conn, script));
                                }
                                Some(acceptor) => {
                                    tokio::spawn(async move {
                                        if let Ok(stream) = acceptor.accept(tcp).await {
                                            serve(stream, conn, script).await;
                                        }
                                    });
                                }
                            }
                        }
                    }
                }
            });
        });
        TestBot {
            addr,
            connections,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// The bot's URL.
    pub fn url(&self) -> String {
        format!("ws://{}/media-stream", self.addr)
    }

    /// A snapshot of connection `i`.
    pub fn connection(&self, i: usize) -> Option<Connection> {
        let list = self.connections.lock().unwrap();
        list.get(i).map(|c| c.lock().unwrap().clone())
    }

    /// Connections accepted so far.
    pub fn connection_count(&self) -> usize {
        self.connections.lock().unwrap().len()
    }
}

impl Drop for TestBot {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve<S>(tcp: S, conn: Arc<Mutex<Connection>>, script: Arc<Vec<Step>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    let (mut sink, mut stream) = ws.split();
    let media_count = Arc::new(AtomicUsize::new(0));
    let notify = Arc::new(tokio::sync::Notify::new());
    let mut reader = {
        let conn = conn.clone();
        let media_count = media_count.clone();
        let notify = notify.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                if let Message::Close(frame) = &msg {
                    conn.lock().unwrap().close_code =
                        Some(frame.as_ref().map(|f| u16::from(f.code)));
                }
                if let Message::Text(t) = msg {
                    let now = Instant::now();
                    match serde_json::from_str::<Value>(t.as_str()) {
                        Ok(v) => {
                            if v["event"] == "media" {
                                media_count.fetch_add(1, Ordering::SeqCst);
                                notify.notify_waiters();
                            }
                            conn.lock().unwrap().received.push((now, v));
                        }
                        Err(_) => conn.lock().unwrap().not_json += 1,
                    }
                }
            }
        })
    };
    for (i, step) in script.iter().enumerate() {
        let ok = match step {
            Step::WaitMedia(n) => {
                let until = Instant::now() + Duration::from_secs(60);
                while media_count.load(Ordering::SeqCst) < *n && Instant::now() < until {
                    let _ =
                        tokio::time::timeout(Duration::from_millis(50), notify.notified()).await;
                }
                true
            }
            Step::WaitEvent(event, n) => {
                let until = Instant::now() + Duration::from_secs(60);
                let count = || {
                    let c = conn.lock().unwrap();
                    c.received
                        .iter()
                        .filter(|(_, v)| v["event"] == *event)
                        .count()
                };
                while count() < *n && Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                true
            }
            Step::Sleep(d) => {
                tokio::time::sleep(*d).await;
                true
            }
            Step::Media { ulaw, chunk } => {
                let mut ok = true;
                for c in ulaw.chunks((*chunk).max(1)) {
                    let text = json!({"event": "media", "streamSid": "MZbot",
                        "media": {"payload": base64::engine::general_purpose::STANDARD.encode(c)}})
                    .to_string();
                    // feed, not send: one burst, flushed once at the end.
                    ok &= sink.feed(Message::Text(text.into())).await.is_ok();
                }
                ok && sink.flush().await.is_ok()
            }
            Step::Mark(name) => sink
                .send(Message::Text(
                    json!({"event": "mark", "streamSid": "MZbot", "mark": {"name": name}})
                        .to_string()
                        .into(),
                ))
                .await
                .is_ok(),
            Step::Clear => sink
                .send(Message::Text(
                    json!({"event": "clear", "streamSid": "MZbot"})
                        .to_string()
                        .into(),
                ))
                .await
                .is_ok(),
            Step::Text(t) => sink.send(Message::Text(t.clone().into())).await.is_ok(),
            Step::Binary(b) => sink.send(Message::Binary(b.clone().into())).await.is_ok(),
            Step::Close => {
                let _ = sink.close().await;
                false
            }
            Step::CloseNormal => {
                use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
                use tokio_tungstenite::tungstenite::protocol::CloseFrame;
                let frame = CloseFrame {
                    code: CloseCode::Normal,
                    reason: "goodbye".into(),
                };
                let _ = sink.send(Message::Close(Some(frame))).await;
                // Wait (bounded) for the gateway's reply, which the reader records.
                let _ = tokio::time::timeout(Duration::from_secs(3), &mut reader).await;
                return;
            }
        };
        conn.lock().unwrap().steps_done.push((i, Instant::now()));
        if !ok {
            reader.abort();
            return;
        }
    }
    let _ = reader.await;
}

/// A TCP listener that accepts connections and never answers the WebSocket upgrade.
pub struct SilentListener {
    pub addr: SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SilentListener {
    pub fn start() -> SilentListener {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(Ordering::SeqCst) {
                if let Ok((tcp, _)) = listener.accept() {
                    held.push(tcp);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        SilentListener {
            addr,
            stop,
            thread: Some(thread),
        }
    }
    pub fn url(&self) -> String {
        format!("ws://{}/media-stream", self.addr)
    }
}

impl Drop for SilentListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The stub's reply sentence (espeak-ng, 8 kHz) as µ-law: the bot's "TTS".
pub fn reply_ulaw() -> Vec<u8> {
    let path = crate::common::workspace().join("gateway/assets/stub_reply.wav");
    let pcm: Vec<i16> = hound::WavReader::open(path)
        .unwrap()
        .into_samples::<i16>()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut ulaw = vec![0u8; pcm.len()];
    ontime_rtp::g711::Law::Ulaw.encode_slice(&pcm, &mut ulaw);
    ulaw
}

/// Unix time (seconds, as tshark prints it) of an `Instant` taken in this process.
pub fn epoch_of(t: Instant) -> f64 {
    let now_i = Instant::now();
    let now_e = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    if t <= now_i {
        now_e - (now_i - t).as_secs_f64()
    } else {
        now_e + (t - now_i).as_secs_f64()
    }
}
