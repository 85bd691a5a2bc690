//! The WebSocket agent: any bot that speaks the Twilio Media Streams protocol, one WebSocket
//! connection per call (`--agent ws://HOST:PORT/PATH` or `wss://`).
//!
//! To the bot, exactly as Twilio sends them: `connected`, `start` (with the media format and
//! `customParameters`), `media` every 20 ms (base64 of 160 µ-law bytes), `dtmf`, `mark` when a
//! mark the bot queued has been played, `stop`. From the bot: `media` (base64 µ-law of any
//! length), `mark`, `clear`. With `ws_ontime_events` on, ontime's own turn-taking events go too,
//! as extra `event` names (`ontime.speech_started`, ...) a bot may ignore.
//!
//! The bot may send a whole reply at once: the call task queues it and the real-time sender paces
//! it at 20 ms, and a mark comes back when the last frame before it has been *sent*, not when it
//! arrived. The connection is made before the call is answered ([`Agent::prepare_call`]), so an
//! unreachable bot can be answered with 503 (or a fallback message, by configuration).
//!
//! Layout: [`protocol`] is sans-IO (JSON in and out, sequence numbers, mark bookkeeping) and
//! carries the unit and property tests; [`WsAgent`] and the per-call connection task are the thin
//! tokio layer. The call task never waits on the bot: caller audio goes through a bounded queue
//! (full: the frame is dropped and counted), and a bot that stops reading only stalls its own
//! connection task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use metrics::{counter, histogram};
use ontime_rtp::g711::Law;
use ontime_rtp::resample::Upsampler;
use ontime_rtp::{FRAME_BYTES, WIDEBAND_SAMPLES_PER_FRAME};
use ontime_twilio::StreamAudio;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tracing::{info, warn};

use crate::agent::{
    Admission, AdmissionFuture, Agent, AgentAction, AgentCall, AgentEvent, AgentOutput, CallInfo,
};
use crate::config::{AgentUnreachable, Config};
use crate::ops::ws_metrics::*;

pub use protocol::{BotMessage, PendingMarks, TwilioEncoder};

/// Event names to the bot (label values of [`WS_MESSAGES_SENT_TOTAL`]).
pub const SENT_EVENTS: &[&str] = &[
    "connected",
    "start",
    "media",
    "dtmf",
    "mark",
    "stop",
    protocol::EVENT_SPEECH_STARTED,
    protocol::EVENT_SPEECH_STOPPED,
    protocol::EVENT_TURN_ENDED,
    protocol::EVENT_BARGE_IN,
    protocol::EVENT_BACKCHANNEL,
    protocol::EVENT_TRANSFER,
    protocol::EVENT_AMD,
];

/// The Reason header (RFC 3326) of the BYE sent when the bot goes away mid-call: Q.850 cause 41,
/// "temporary failure".
pub const REASON_BOT_DISCONNECTED: &str = "Q.850;cause=41;text=\"agent disconnected\"";
/// The Reason header of the BYE when the bot closed its WebSocket normally (code 1000): the bot
/// hung up. Q.850 cause 16, "normal call clearing".
pub const REASON_BOT_HUNG_UP: &str = "Q.850;cause=16;text=\"agent hung up\"";

/// How a bot's connection ended while its call was up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BotGone {
    /// A close frame, with its status code if it had one.
    Closed(Option<u16>),
    /// The connection failed or ended without a close frame.
    Lost,
}

impl BotGone {
    /// The label of [`WS_DISCONNECTS_TOTAL`] and the BYE's Reason header: a close with 1000
    /// (RFC 6455 §7.4.1, normal closure) is the bot hanging up; anything else is a fault.
    pub fn label_and_reason(self) -> (&'static str, &'static str) {
        match self {
            BotGone::Closed(Some(1000)) => ("normal", REASON_BOT_HUNG_UP),
            BotGone::Closed(_) => ("abnormal", REASON_BOT_DISCONNECTED),
            BotGone::Lost => ("lost", REASON_BOT_DISCONNECTED),
        }
    }
}
/// The Reason header of the BYE after the fallback message (the bot was unreachable).
pub const REASON_BOT_UNREACHABLE: &str = "Q.850;cause=41;text=\"agent unreachable\"";

/// The user part of a SIP URI (`sip:+15551230000@trunk` → `+15551230000`), the "number" bots
/// written for Twilio read from `from_number`/`to_number`.
/// The `customParameters` every call's `start` carries before the configured ones: Twilio's
/// names (From, To, CallId) and the ones pipecat's runner reads for the numbers. docs/agents.md
/// lists them; a test holds the list to this.
fn call_parameters(info: &CallInfo) -> Vec<(String, String)> {
    vec![
        ("From".to_string(), info.from.clone()),
        ("To".to_string(), info.to.clone()),
        ("CallId".to_string(), info.call_id.clone()),
        ("from_number".to_string(), number_of(&info.from)),
        ("to_number".to_string(), number_of(&info.to)),
    ]
}

fn number_of(uri: &str) -> String {
    let rest = uri
        .trim()
        .trim_start_matches('<')
        .trim_start_matches("sips:")
        .trim_start_matches("sip:")
        .trim_start_matches("tel:");
    let end = rest.find(['@', ';', '>', '?']).unwrap_or(rest.len());
    rest[..end].to_string()
}

/// The mark name the fallback message is queued with (the call hangs up when it is played).
const FALLBACK_MARK: &str = "ontime-fallback";

/// The built-in fallback message (espeak-ng, 8 kHz; made as `fixtures/README.md` says).
const FALLBACK_WAV: &[u8] = include_bytes!("../../../assets/ws_fallback.wav");

/// Errors building the WebSocket agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WsAgentError {
    /// The built-in fallback WAV is not 8 kHz mono 16-bit (a build-time fixture fault).
    #[error("built-in fallback WAV: {0}")]
    Fallback(#[from] hound::Error),
    /// The CA file (`tls_ca_file`, or its older name `ws_ca_file`) cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The fallback WAV has the wrong format.
    #[error("built-in fallback WAV must be 8000 Hz mono 16-bit PCM, got {rate} Hz, {channels} channel(s)")]
    FallbackFormat {
        /// Sample rate found.
        rate: u32,
        /// Channels found.
        channels: u16,
    },
}

/// The WebSocket agent's settings (from [`Config`]).
#[derive(Debug, Clone)]
pub struct WsAgentConfig {
    /// `ws://` or `wss://` URL of the bot.
    pub url: String,
    /// Longest wait for the connection (TCP, TLS and the HTTP upgrade together).
    pub connect_timeout: Duration,
    /// Bot messages longer than this (bytes of JSON text) are dropped and counted.
    pub max_message_bytes: usize,
    /// Caller frames queued for a slow bot before new ones are dropped.
    pub send_queue_frames: usize,
    /// Send ontime's own events (speech started/stopped, turn ended, barge-in).
    pub ontime_events: bool,
    /// What to do when the bot is unreachable at call start.
    pub unreachable: AgentUnreachable,
    /// Extra `customParameters` for every call (besides From, To, CallId).
    pub custom_parameters: Vec<(String, String)>,
    /// INVITE headers copied into `customParameters` (matched case-insensitively; the key is
    /// the name as configured; absent headers are left out).
    pub forward_headers: Vec<String>,
    /// PEM file of extra CA certificates for `wss://` (None: the system's roots only).
    pub ca_file: Option<std::path::PathBuf>,
    /// Most agent audio a call queues (`max_buffered_seconds`): after a bot's normal close, what
    /// it had sent plays for at most this long before the BYE.
    pub max_buffered: Duration,
    /// The audio both ways: Twilio's µ-law at 8 kHz, or 16-bit PCM at 16 kHz.
    pub audio: StreamAudio,
}

impl WsAgentConfig {
    /// The settings for `url` from the resolved configuration.
    pub fn from_config(url: &str, c: &Config) -> WsAgentConfig {
        WsAgentConfig {
            url: url.to_string(),
            connect_timeout: c.ws_connect_timeout,
            max_message_bytes: c.ws_max_message_bytes,
            send_queue_frames: c.ws_send_queue_frames,
            ontime_events: c.ws_ontime_events,
            unreachable: c.agent_unreachable,
            custom_parameters: c.ws_custom_parameters.clone(),
            forward_headers: c.ws_forward_headers.clone(),
            ca_file: c.ws_ca_file.clone(),
            max_buffered: c.max_buffered,
            audio: c.ws_audio,
        }
    }
}

type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The WebSocket agent: one connection per call, opened before the call is answered.
pub struct WsAgent {
    config: Arc<WsAgentConfig>,
    /// TLS for `wss://`: rustls with the system's roots and the extra CAs.
    tls: Arc<rustls::ClientConfig>,
    fallback: Arc<[i16]>,
    /// Connections opened by [`Agent::prepare_call`], waiting for [`Agent::start_call`], by
    /// Call-ID. Locked at call set-up only.
    ready: Arc<Mutex<HashMap<String, WsStream>>>,
}

impl std::fmt::Debug for WsAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsAgent")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl WsAgent {
    /// The agent for these settings, with the built-in fallback message.
    pub fn new(config: WsAgentConfig) -> Result<WsAgent, WsAgentError> {
        let r = hound::WavReader::new(std::io::Cursor::new(FALLBACK_WAV))?;
        let s = r.spec();
        if s.sample_rate != ontime_rtp::SAMPLE_RATE_HZ
            || s.channels != 1
            || s.bits_per_sample != 16
            || s.sample_format != hound::SampleFormat::Int
        {
            return Err(WsAgentError::FallbackFormat {
                rate: s.sample_rate,
                channels: s.channels,
            });
        }
        let pcm = r.into_samples::<i16>().collect::<Result<Vec<_>, _>>()?;
        let tls = crate::tls::client_config(config.ca_file.as_deref())?;
        Ok(WsAgent {
            config: Arc::new(config),
            tls,
            fallback: pcm.into(),
            ready: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    /// Length of the fallback message in samples.
    pub fn fallback_samples(&self) -> usize {
        self.fallback.len()
    }
}

async fn connect(
    config: &WsAgentConfig,
    tls: Arc<rustls::ClientConfig>,
) -> Result<WsStream, &'static str> {
    let mut ws_config = WebSocketConfig::default();
    // tungstenite fails the whole connection on a message over its limit; ontime wants an
    // oversized message dropped and counted with the call going on, so tungstenite gets room
    // above ontime's own limit (which is checked per message) and only a grossly oversized
    // message ends the connection.
    let hard_limit = config.max_message_bytes.saturating_mul(4).max(1 << 16);
    ws_config.max_message_size = Some(hard_limit);
    ws_config.max_frame_size = Some(hard_limit);
    let attempt = tokio_tungstenite::connect_async_tls_with_config(
        config.url.as_str(),
        Some(ws_config),
        true, // TCP_NODELAY: a mark or a media frame should not wait for Nagle.
        Some(tokio_tungstenite::Connector::Rustls(tls)),
    );
    match tokio::time::timeout(config.connect_timeout, attempt).await {
        Ok(Ok((ws, _response))) => Ok(ws),
        Ok(Err(e)) => {
            warn!(url = %config.url, error = %e, "bot unreachable");
            Err("error")
        }
        Err(_) => {
            warn!(url = %config.url, timeout_ms = config.connect_timeout.as_millis() as u64, "bot connection timed out");
            Err("timeout")
        }
    }
}

impl Agent for WsAgent {
    fn prepare_call(&self, info: &CallInfo) -> Option<AdmissionFuture> {
        let config = self.config.clone();
        let ready = self.ready.clone();
        let call_id = info.call_id.clone();
        let tls = self.tls.clone();
        Some(Box::pin(async move {
            let started = Instant::now();
            match connect(&config, tls).await {
                Ok(ws) => {
                    histogram!(WS_CONNECT_SECONDS).record(started.elapsed().as_secs_f64());
                    if let Ok(mut map) = ready.lock() {
                        map.insert(call_id, ws);
                    }
                    Admission::Answer
                }
                Err(reason) => {
                    counter!(WS_CONNECT_FAILURES_TOTAL, "reason" => reason).increment(1);
                    match config.unreachable {
                        AgentUnreachable::Reject => Admission::Reject,
                        // No connection stored: start_call plays the fallback and hangs up.
                        AgentUnreachable::Fallback => Admission::Answer,
                    }
                }
            }
        }))
    }

    fn abandon_call(&self, info: &CallInfo) {
        // Dropping the stream closes the TCP connection; the bot sees it end before `start`.
        if let Ok(mut map) = self.ready.lock() {
            map.remove(&info.call_id);
        }
    }

    fn start_call(&self, info: &CallInfo, output: AgentOutput) -> Box<dyn AgentCall> {
        let ws = self
            .ready
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&info.call_id));
        let Some(ws) = ws else {
            counter!(WS_FALLBACK_CALLS_TOTAL).increment(1);
            info!("bot unreachable: playing the fallback message, then hanging up");
            // The apology is heard whole: the caller talking over it must not cut it short.
            output.send(AgentAction::AllowBargeIn(false));
            output.send(AgentAction::Play(self.fallback.clone()));
            output.send(AgentAction::EndOfUtterance);
            output.send(AgentAction::Mark(FALLBACK_MARK.into()));
            return Box::new(FallbackCall { output });
        };
        let (media_tx, media_rx) = mpsc::channel(self.config.send_queue_frames.max(1));
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let mut custom = call_parameters(info);
        // The INVITE's X- headers, under the names the voice webhook gives them
        // (`SipHeader_X-…`), so a bot reads them the same way from either; before the
        // operator's and the TwiML's parameters, which win a clash.
        custom.extend(info.x_headers.webhook_params());
        custom.extend(self.config.custom_parameters.iter().cloned());
        for name in &self.config.forward_headers {
            if let Some((_, v)) = info
                .sip_headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
            {
                custom.push((name.clone(), v.clone()));
            }
        }
        let encoder = TwilioEncoder::new(
            protocol::StreamIds::for_call(&info.call_sid, &info.account_sid),
            custom,
        )
        .with_audio(self.config.audio);
        if self.config.audio == StreamAudio::L16At16k {
            output.send(AgentAction::ReceiveWideband(true));
        }
        let task = ConnectionTask {
            ws,
            encoder,
            config: self.config.clone(),
            output,
            pending: PendingMarks::default(),
            l16: protocol::L16Reader::default(),
        };
        tokio::spawn(tracing::Instrument::instrument(
            task.run(media_rx, control_rx),
            tracing::Span::current(),
        ));
        Box::new(WsCall {
            media: Some(media_tx),
            control: Some(control_tx),
            ontime_events: self.config.ontime_events,
            audio: self.config.audio,
            up: Upsampler::new(),
        })
    }
}

/// A call whose bot was unreachable: the fallback message plays, then the call hangs up.
struct FallbackCall {
    output: AgentOutput,
}

impl AgentCall for FallbackCall {
    fn on_event(&mut self, event: AgentEvent<'_>) {
        match event {
            AgentEvent::MarkPlayed(name) if name == FALLBACK_MARK => self
                .output
                .send(AgentAction::HangupWithReason(REASON_BOT_UNREACHABLE.into())),
            _ => {}
        }
    }
}

/// What the call task hands the connection task besides caller audio.
#[derive(Debug)]
enum ToBot {
    Dtmf(char),
    MarkPlayed(String),
    BargeIn {
        heard_ms: u64,
        last_mark: Option<String>,
    },
    SpeechStarted,
    SpeechStopped,
    TurnEnded(Option<f32>),
    TurnResumed {
        pause_ms: u64,
        dropped_ms: u64,
    },
    Backchannel(u64),
    Transfer {
        target: String,
        result: &'static str,
        sip_status: Option<u16>,
    },
    Amd {
        answered_by: String,
        duration_ms: u64,
    },
}

/// One 20 ms frame of caller audio as the bot takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum MediaFrame {
    /// µ-law at 8 kHz.
    Mulaw([u8; FRAME_BYTES]),
    /// 16-bit little-endian PCM at 16 kHz.
    L16(Box<[u8; 2 * WIDEBAND_SAMPLES_PER_FRAME]>),
}

impl MediaFrame {
    fn bytes(&self) -> &[u8] {
        match self {
            MediaFrame::Mulaw(b) => b,
            MediaFrame::L16(b) => &b[..],
        }
    }

    fn l16(pcm: &[i16]) -> MediaFrame {
        let mut bytes = Box::new([0u8; 2 * WIDEBAND_SAMPLES_PER_FRAME]);
        for (b, s) in bytes.chunks_exact_mut(2).zip(pcm) {
            b.copy_from_slice(&s.to_le_bytes());
        }
        MediaFrame::L16(bytes)
    }
}

/// The call task's side: turns events into messages for the connection task, never waiting.
struct WsCall {
    media: Option<mpsc::Sender<MediaFrame>>,
    control: Option<mpsc::UnboundedSender<ToBot>>,
    ontime_events: bool,
    audio: StreamAudio,
    /// Upsamples the 8 kHz frames that come before the call core takes the wideband request.
    up: Upsampler,
}

impl WsCall {
    fn send_media(&self, frame: MediaFrame) {
        let Some(tx) = &self.media else { return };
        if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(frame) {
            // A slow bot: drop this frame rather than wait. (Closed: the bot is gone and the
            // call is being hung up; nothing to count.)
            counter!(WS_SEND_QUEUE_DROPPED_TOTAL).increment(1);
        }
    }
}

impl WsCall {
    fn control(&self, m: ToBot) {
        if let Some(c) = &self.control {
            let _ = c.send(m);
        }
    }
}

impl AgentCall for WsCall {
    fn on_event(&mut self, event: AgentEvent<'_>) {
        match event {
            AgentEvent::CallerAudio(pcm) => match self.audio {
                StreamAudio::Mulaw8k => {
                    let mut frame = [0u8; FRAME_BYTES];
                    Law::Ulaw.encode_slice(pcm, &mut frame);
                    self.send_media(MediaFrame::Mulaw(frame));
                }
                StreamAudio::L16At16k => {
                    let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                    let n = self.up.process(pcm, &mut wide);
                    self.send_media(MediaFrame::l16(&wide[..n]));
                }
            },
            AgentEvent::CallerAudioWide(pcm) => match self.audio {
                StreamAudio::L16At16k => self.send_media(MediaFrame::l16(pcm)),
                // Not asked for; a µ-law bot takes 8 kHz only.
                StreamAudio::Mulaw8k => {}
            },
            AgentEvent::Dtmf(d) => self.control(ToBot::Dtmf(d)),
            AgentEvent::MarkPlayed(name) => self.control(ToBot::MarkPlayed(name.to_string())),
            // The connection task always learns of a barge-in (it returns the bot's cleared
            // marks); it forwards the ontime events only when enabled.
            AgentEvent::BargeIn {
                heard_ms,
                last_mark,
            } => self.control(ToBot::BargeIn {
                heard_ms,
                last_mark: last_mark.map(str::to_string),
            }),
            AgentEvent::Transfer {
                target,
                result,
                sip_status,
            } => self.control(ToBot::Transfer {
                target: target.to_string(),
                result: result.as_str(),
                sip_status,
            }),
            AgentEvent::Amd {
                answered_by,
                duration_ms,
            } => self.control(ToBot::Amd {
                answered_by: answered_by.to_string(),
                duration_ms,
            }),
            AgentEvent::SpeechStarted if self.ontime_events => self.control(ToBot::SpeechStarted),
            AgentEvent::SpeechStopped if self.ontime_events => self.control(ToBot::SpeechStopped),
            AgentEvent::TurnEnded { probability } if self.ontime_events => {
                self.control(ToBot::TurnEnded(probability))
            }
            AgentEvent::Backchannel { speech_ms } if self.ontime_events => {
                self.control(ToBot::Backchannel(speech_ms))
            }
            // Like a barge-in, always: the connection task returns the dropped reply's marks.
            AgentEvent::TurnResumed {
                pause_ms,
                dropped_ms,
            } => self.control(ToBot::TurnResumed {
                pause_ms,
                dropped_ms,
            }),
            AgentEvent::Ended => {
                // Closing both queues tells the connection task to send `stop` and close.
                self.media = None;
                self.control = None;
            }
            _ => {}
        }
    }
}

/// The tokio task owning one call's WebSocket.
struct ConnectionTask {
    ws: WsStream,
    encoder: TwilioEncoder,
    config: Arc<WsAgentConfig>,
    output: AgentOutput,
    pending: PendingMarks,
    l16: protocol::L16Reader,
}

/// Longest wait for the bot to take `stop` and the close handshake at the end of a call.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

impl ConnectionTask {
    async fn send(&mut self, event: &'static str, text: String) -> bool {
        counter!(WS_MESSAGES_SENT_TOTAL, "event" => event).increment(1);
        self.ws.send(Message::Text(text.into())).await.is_ok()
    }

    async fn run(
        mut self,
        mut media: mpsc::Receiver<MediaFrame>,
        mut control: mpsc::UnboundedReceiver<ToBot>,
    ) {
        let connected = self.encoder.connected();
        let start = self.encoder.start();
        let mut up = self.send("connected", connected).await && self.send("start", start).await;
        if up {
            info!(stream_sid = %self.encoder.ids().stream_sid, "bot stream started");
        }
        let mut gone = BotGone::Lost;
        while up {
            tokio::select! {
                frame = media.recv() => match frame {
                    Some(f) => {
                        let text = self.encoder.media(f.bytes());
                        up = self.send("media", text).await;
                    }
                    None => break,
                },
                msg = control.recv() => match msg {
                    Some(m) => up = self.handle_call_event(m).await,
                    None => break,
                },
                incoming = self.ws.next() => match incoming {
                    Some(Ok(Message::Text(text))) => up = self.handle_bot_text(text.as_str()).await,
                    Some(Ok(Message::Binary(_))) => {
                        counter!(WS_MESSAGES_INVALID_TOTAL, "reason" => "binary").increment(1);
                    }
                    Some(Ok(Message::Close(frame))) => {
                        gone = BotGone::Closed(frame.map(|f| u16::from(f.code)));
                        up = false;
                    }
                    None => up = false,
                    // Ping/pong are answered by tungstenite itself.
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        warn!(error = %e, "bot connection failed");
                        up = false;
                    }
                },
            }
        }
        if up {
            // The call ended first: `stop`, then close (bounded, a stuck bot cannot hold us).
            let stop = self.encoder.stop();
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
                let _ = self.send("stop", stop).await;
                let _ = self
                    .ws
                    .close(Some(CloseFrame {
                        code: CloseCode::Normal,
                        reason: "call ended".into(),
                    }))
                    .await;
                // Read the bot's close reply so the handshake completes on both sides.
                while self.ws.next().await.is_some() {}
            })
            .await;
            return;
        }
        let (how, reason) = gone.label_and_reason();
        counter!(WS_DISCONNECTS_TOTAL, "how" => how).increment(1);
        drop(media);
        if gone == BotGone::Closed(Some(1000)) {
            // The bot hung up: what it sent (a goodbye) plays whole, and the call hangs up as
            // soon as its last packet has been sent — decided by the call task, which sees the
            // sender's queue run dry, not after a round trip through this task.
            info!("bot closed normally: playing what it sent, then hanging up");
            self.output.send(AgentAction::AllowBargeIn(false));
            self.output
                .send(AgentAction::HangupWhenPlayed(Some(reason.into())));
        } else {
            info!(how, "bot connection ended mid-call: hanging up");
            // Hang up with a Reason header (RFC 3326).
            self.output
                .send(AgentAction::HangupWithReason(reason.into()));
        }
        if matches!(gone, BotGone::Closed(_)) {
            // Finish the closing handshake (the call is already on its way down): tungstenite
            // queued our close reply, echoing the bot's code; reading on until the bot drops
            // the connection sends it. Bounded: a bot that keeps the TCP connection open after
            // the handshake cannot hold this task.
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
                while self.ws.next().await.is_some() {}
            })
            .await;
        }
        // Keep draining until the call task lets go, so it never sees a closed queue early.
        while control.recv().await.is_some() {}
    }

    async fn handle_call_event(&mut self, m: ToBot) -> bool {
        match m {
            ToBot::Dtmf(d) => {
                let t = self.encoder.dtmf(d);
                self.send("dtmf", t).await
            }
            ToBot::MarkPlayed(name) => {
                if !self.pending.played(&name) {
                    return true; // already returned by a clear or a barge-in
                }
                let t = self.encoder.mark(&name);
                self.send("mark", t).await
            }
            ToBot::BargeIn {
                heard_ms,
                last_mark,
            } => {
                // The queue was cleared locally: return the bot's pending marks at once, as
                // Twilio does after a `clear`, so a bot tracking playback by marks knows.
                let mut ok = self.return_pending_marks().await;
                if self.config.ontime_events {
                    let t = self.encoder.barge_in(heard_ms, last_mark.as_deref());
                    ok = ok && self.send(protocol::EVENT_BARGE_IN, t).await;
                }
                ok
            }
            ToBot::SpeechStarted => {
                let t = self.encoder.ontime(protocol::EVENT_SPEECH_STARTED, None);
                self.send(protocol::EVENT_SPEECH_STARTED, t).await
            }
            ToBot::SpeechStopped => {
                let t = self.encoder.ontime(protocol::EVENT_SPEECH_STOPPED, None);
                self.send(protocol::EVENT_SPEECH_STOPPED, t).await
            }
            ToBot::TurnEnded(p) => {
                let t = self.encoder.ontime(protocol::EVENT_TURN_ENDED, Some(p));
                self.send(protocol::EVENT_TURN_ENDED, t).await
            }
            ToBot::TurnResumed {
                pause_ms,
                dropped_ms,
            } => {
                // The reply was dropped locally: its marks come back at once, as after a
                // barge-in.
                let mut ok = self.return_pending_marks().await;
                if self.config.ontime_events {
                    let t = self.encoder.turn_resumed(pause_ms, dropped_ms);
                    ok = ok && self.send(protocol::EVENT_TURN_RESUMED, t).await;
                }
                ok
            }
            ToBot::Backchannel(speech_ms) => {
                let t = self.encoder.backchannel(speech_ms);
                self.send(protocol::EVENT_BACKCHANNEL, t).await
            }
            ToBot::Transfer {
                target,
                result,
                sip_status,
            } => {
                let t = self.encoder.transfer(&target, result, sip_status);
                self.send(protocol::EVENT_TRANSFER, t).await
            }
            ToBot::Amd {
                answered_by,
                duration_ms,
            } => {
                let a = self.encoder.amd(&answered_by, duration_ms);
                self.send(protocol::EVENT_AMD, a).await
            }
        }
    }

    async fn return_pending_marks(&mut self) -> bool {
        for name in self.pending.take_all() {
            let t = self.encoder.mark(&name);
            if !self.send("mark", t).await {
                return false;
            }
        }
        true
    }

    async fn handle_bot_text(&mut self, text: &str) -> bool {
        if text.len() > self.config.max_message_bytes {
            counter!(WS_MESSAGES_INVALID_TOTAL, "reason" => "oversize").increment(1);
            return true;
        }
        match protocol::parse_bot_message(text) {
            Ok(BotMessage::Media(bytes)) => {
                counter!(WS_MESSAGES_RECEIVED_TOTAL, "event" => "media").increment(1);
                match self.config.audio {
                    // As it came: a PCMU call sends these very bytes.
                    StreamAudio::Mulaw8k if !bytes.is_empty() => {
                        self.output.send(AgentAction::PlayG711 {
                            law: Law::Ulaw,
                            audio: bytes.into(),
                        });
                    }
                    StreamAudio::Mulaw8k => {}
                    StreamAudio::L16At16k => {
                        let pcm = self.l16.samples(&bytes);
                        if !pcm.is_empty() {
                            self.output.send(AgentAction::PlayWide(pcm.into()));
                        }
                    }
                }
                true
            }
            Ok(BotMessage::Mark(name)) => {
                counter!(WS_MESSAGES_RECEIVED_TOTAL, "event" => "mark").increment(1);
                self.pending.queued(name.clone());
                self.output.send(AgentAction::Mark(name));
                true
            }
            Ok(BotMessage::Clear) => {
                counter!(WS_MESSAGES_RECEIVED_TOTAL, "event" => "clear").increment(1);
                self.output.send(AgentAction::Clear);
                self.return_pending_marks().await
            }
            Ok(BotMessage::Transcript(text)) => {
                counter!(WS_MESSAGES_RECEIVED_TOTAL, "event" => "transcript").increment(1);
                self.output.send(AgentAction::Transcript(text));
                true
            }
            Err(e) => {
                counter!(WS_MESSAGES_INVALID_TOTAL, "reason" => e.label()).increment(1);
                tracing::debug!(error = %e, "bot message ignored");
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_bot_never_blocks_the_call_task() {
        // The bot's connection task is not reading: the queue fills and further frames are
        // dropped at once; the call task's on_event never waits.
        let (media_tx, mut media_rx) = mpsc::channel(3);
        let (control_tx, mut control_rx) = mpsc::unbounded_channel();
        let mut call = WsCall {
            media: Some(media_tx),
            control: Some(control_tx),
            ontime_events: false,
            audio: StreamAudio::Mulaw8k,
            up: Upsampler::new(),
        };
        let frame = [0i16; ontime_rtp::SAMPLES_PER_FRAME];
        for _ in 0..10 {
            call.on_event(AgentEvent::CallerAudio(&frame));
        }
        call.on_event(AgentEvent::SpeechStarted); // ontime events off: not forwarded
        call.on_event(AgentEvent::Dtmf('3'));
        call.on_event(AgentEvent::Ended);
        let mut queued = 0;
        while let Ok(f) = media_rx.try_recv() {
            assert_eq!(
                f,
                MediaFrame::Mulaw([0xFF; FRAME_BYTES]),
                "silence in µ-law"
            );
            queued += 1;
        }
        assert_eq!(queued, 3);
        assert!(matches!(
            media_rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert!(matches!(control_rx.try_recv(), Ok(ToBot::Dtmf('3'))));
        assert!(matches!(
            control_rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }

    #[test]
    fn numbers_are_the_user_parts_of_the_uris() {
        assert_eq!(
            number_of("sip:+15551230000@trunk.example.com"),
            "+15551230000"
        );
        assert_eq!(number_of("<sips:alice@example.com;transport=tls>"), "alice");
        assert_eq!(number_of("tel:+4930123"), "+4930123");
        assert_eq!(number_of("sip:bot@127.0.0.1:5060"), "bot");
    }

    #[test]
    fn the_documented_custom_parameters_are_the_ones_sent() {
        let info = CallInfo {
            call_id: "a84b4c76e66710".into(),
            call_sid: String::new(),
            account_sid: String::new(),
            direction: ontime_twilio::Direction::Inbound,
            transport: ontime_sip::Transport::Udp,
            from: "sip:+15551230000@trunk.example.com".into(),
            to: "sip:bot@gw".into(),
            sip_headers: Vec::new(),
            x_headers: Default::default(),
        };
        let sent: Vec<String> = call_parameters(&info).into_iter().map(|(k, _)| k).collect();
        // docs/agents.md's table: the rows whose key is one literal name are the fixed keys.
        // Read at run time: a packaged crate has no docs/ to include.
        let docs = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/agents.md"),
        )
        .expect("docs/agents.md");
        let table = &docs[docs.find("- `customParameters` holds").expect("the list")..];
        let documented: Vec<String> = table
            .lines()
            .skip(1)
            .map(str::trim)
            .take_while(|l| l.is_empty() || l.starts_with('|'))
            .filter_map(|l| {
                let key = l.trim_start_matches('|').split(" | ").next()?.trim();
                let name = key.strip_prefix('`')?.strip_suffix('`')?;
                (!name.contains('`') && name != "key").then(|| name.to_string())
            })
            .collect();
        assert_eq!(documented, sent, "docs/agents.md vs the start message");
        assert_eq!(
            call_parameters(&info)[3],
            ("from_number".to_string(), "+15551230000".to_string())
        );
    }

    #[test]
    fn only_a_normal_close_is_a_hang_up() {
        assert_eq!(
            BotGone::Closed(Some(1000)).label_and_reason(),
            ("normal", REASON_BOT_HUNG_UP)
        );
        for g in [
            BotGone::Closed(None),
            BotGone::Closed(Some(1011)),
            BotGone::Lost,
        ] {
            assert_eq!(g.label_and_reason().1, REASON_BOT_DISCONNECTED, "{g:?}");
        }
    }
}

/// The Twilio Media Streams protocol as ontime speaks it, without I/O.
pub mod protocol;
