//! One caller: places a call, speaks recorded utterances in real time through the harness's
//! media clock (`ontime-sender`), listens to the agent through the 60 ms playout model
//! ([`crate::listen`]), pauses 0.5–1.5 s (seeded) after each answer, and speaks again until told
//! to stop. Everything it observes goes out as [`Record`]s with the time it happened.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ontime_rtp::{g722, Packetizer, FRAME_BYTES};
use ontime_sender::{Controller, PacketInfo, PacketSink, StreamConfig, StreamEvent, StreamOutput};
use ontime_sip::sdp::{self, Codec, LocalMedia};
use ontime_sip::{CallParams, EndReason, SessionDescription, Transport};
use ontime_srtp::{CryptoAttribute, SdesKeys, SrtpContext, MAX_SRTP_TAG_LEN};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::audio::{is_silent_payload, Ear, G722Speech, OpusSpeech, Utterance};
use crate::listen::{AgentListener, AgentUtterance, Heard};
use crate::os;
use crate::sip::{CallEvent, SipClient};

/// Shortest pause between the agent's answer and the caller's next utterance.
pub const PAUSE_MIN: Duration = Duration::from_millis(500);
/// Longest such pause.
pub const PAUSE_MAX: Duration = Duration::from_millis(1500);
/// How long a call may take to be answered before it counts as failed.
pub const ANSWER_LIMIT: Duration = Duration::from_secs(10);
/// How often a caller looks at its clock-driven state (sender events, hangover, deadlines) and
/// drains its RTP socket (packets keep their kernel arrival stamps, so the wait bends no figure).
const POLL: Duration = Duration::from_millis(5);

/// What a caller's media is: plain RTP, or SRTP keyed by SDES (RFC 4568).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Media {
    /// `RTP/AVP`, no crypto lines.
    #[default]
    Rtp,
    /// `RTP/SAVP` with an `a=crypto` line per suite `ontime-srtp` supports; what the caller sends
    /// is protected and what it receives unprotected.
    Srtp,
}

impl Media {
    /// `rtp` or `srtp`, as in the table, the JSON and `--media`.
    pub fn name(self) -> &'static str {
        match self {
            Media::Rtp => "rtp",
            Media::Srtp => "srtp",
        }
    }
}

impl std::fmt::Display for Media {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The media of each step, in the order run: `rtp`, `srtp`, `both` (`rtp,srtp`: every step
/// runs twice back to back, so the gateway's CPU for plain and SRTP calls is measured side by
/// side), or a comma list of `rtp` and `srtp`.
pub fn parse_media_list(s: &str) -> Result<Vec<Media>, String> {
    if s.trim() == "both" {
        return Ok(vec![Media::Rtp, Media::Srtp]);
    }
    let kinds = s
        .split(',')
        .map(|k| match k.trim() {
            "rtp" => Ok(Media::Rtp),
            "srtp" => Ok(Media::Srtp),
            other => Err(format!(
                "media {other:?}: expected rtp, srtp, both or a comma list of rtp and srtp"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if kinds.is_empty() {
        return Err("no media kind given".into());
    }
    Ok(kinds)
}

/// What callers speak: G.711 µ-law as recorded, or G.722 or Opus encoded ahead of time.
#[derive(Debug, Clone, Default)]
pub enum CallerCodec {
    /// Offer PCMU only, send the recordings' µ-law bytes.
    #[default]
    Pcmu,
    /// Offer G722 only, send [`G722Speech`]: one per utterance, in the order of
    /// [`CallerSetup::utterances`].
    G722(Arc<[G722Speech]>),
    /// Offer Opus only (`opus/48000/2` at payload type 111), send [`OpusSpeech`]: 160-byte
    /// packets, so every position the caller cuts at or marks is rounded to a whole frame.
    Opus(Arc<[OpusSpeech]>),
}

impl CallerCodec {
    /// Callers of `codec` (PCMU or G722) saying `utterances` (encoded here, once, for G.722).
    pub fn new(codec: Codec, utterances: &[Utterance]) -> Result<CallerCodec, String> {
        match codec {
            Codec::Pcmu => Ok(CallerCodec::Pcmu),
            Codec::G722 => Ok(CallerCodec::G722(
                utterances.iter().map(G722Speech::new).collect(),
            )),
            Codec::Opus => Ok(CallerCodec::Opus(
                utterances
                    .iter()
                    .map(OpusSpeech::new)
                    .collect::<Result<Vec<_>, _>>()?
                    .into(),
            )),
            other => Err(format!("callers speak PCMU, G722 or opus, not {other}")),
        }
    }

    /// The one codec the callers offer.
    pub fn codec(&self) -> Codec {
        match self {
            CallerCodec::Pcmu => Codec::Pcmu,
            CallerCodec::G722(_) => Codec::G722,
            CallerCodec::Opus(_) => Codec::Opus,
        }
    }

    /// `n` bytes rounded up to whole packets for Opus (unchanged for the others).
    fn align(&self, n: usize) -> usize {
        match self {
            CallerCodec::Opus(_) => n.div_ceil(FRAME_BYTES) * FRAME_BYTES,
            _ => n,
        }
    }

    /// `n` bytes (rounded by [`CallerCodec::align`]) of line silence as this caller sends it.
    fn silence(&self, n: usize) -> Vec<u8> {
        match self {
            CallerCodec::Opus(_) => {
                ontime_rtp::opus::silence_frame().repeat(self.align(n) / FRAME_BYTES)
            }
            _ => vec![self.silence_byte(); n],
        }
    }

    /// The sender's silence fill when it is a whole frame (Opus), see
    /// `StreamConfig::silence_frame`.
    fn silence_frame(&self) -> Option<[u8; FRAME_BYTES]> {
        matches!(self, CallerCodec::Opus(_)).then(ontime_rtp::opus::silence_frame)
    }

    /// The byte the caller's sender fills silence with, and the caller's mid-sentence pause.
    pub fn silence_byte(&self) -> u8 {
        match self {
            // µ-law 0xFF decodes to 0.
            CallerCodec::Pcmu => 0xFF,
            CallerCodec::G722(_) => g722::SILENCE_BYTE,
            // Unused: an Opus caller's silence is a whole frame (`silence`).
            CallerCodec::Opus(_) => 0,
        }
    }

    /// Utterance `index` (of `utterances`) as this caller pushes it: the piece before the
    /// mid-sentence pause at `pause_at` (if any), and the piece from there (or from the start) to
    /// the end. Byte `i` of a piece is the same instant as µ-law byte `i` of the recording.
    fn pieces<'a>(
        &'a self,
        utterances: &'a [Utterance],
        index: usize,
        pause_at: Option<usize>,
    ) -> (&'a [u8], &'a [u8]) {
        let ulaw = &utterances[index].ulaw[..];
        match (self, pause_at) {
            (CallerCodec::Pcmu, None) => (&[], ulaw),
            (CallerCodec::Pcmu, Some(at)) => ulaw.split_at(at),
            (CallerCodec::G722(speech), None) => (&[], &speech[index].whole[..]),
            (CallerCodec::G722(speech), Some(_)) => match &speech[index].split {
                Some(split) => (&split.head[..], &split.tail[..]),
                None => (&[], &speech[index].whole[..]),
            },
            (CallerCodec::Opus(speech), None) => (&[], &speech[index].whole[..]),
            (CallerCodec::Opus(speech), Some(_)) => match &speech[index].split {
                Some(split) => (&split.head[..], &split.tail[..]),
                None => (&[], &speech[index].whole[..]),
            },
        }
    }
}

/// `--codec`: PCMU, G722 or opus (any case).
pub fn parse_codec(s: &str) -> Result<Codec, String> {
    match Codec::from_name(s.trim()) {
        Some(c @ (Codec::Pcmu | Codec::G722 | Codec::Opus)) => Ok(c),
        _ => Err(format!("codec {s:?}: expected PCMU, G722 or opus")),
    }
}

/// A caller's offer for `local` (its one codec): for [`Media::Srtp`] on `RTP/SAVP` with one
/// `a=crypto` line per supported suite, each a fresh key, returned too so the answer's line can
/// be matched against them ([`answer_keys`]).
pub fn caller_offer(
    local: &LocalMedia,
    media: Media,
) -> Result<(SessionDescription, Vec<CryptoAttribute>), ontime_srtp::SdesError> {
    let mut offer = sdp::build_offer(local);
    let crypto = match media {
        Media::Rtp => Vec::new(),
        Media::Srtp => ontime_srtp::offer()?,
    };
    if !crypto.is_empty() {
        for m in offer.media.iter_mut().filter(|m| m.media == "audio") {
            m.protocol = "RTP/SAVP".into();
            m.other_attributes
                .extend(crypto.iter().map(CryptoAttribute::to_sdp_line));
        }
    }
    Ok((offer, crypto))
}

/// The call's SRTP keys from the answer to an SRTP offer: its accepted audio section must keep
/// `RTP/SAVP` and carry a crypto line naming one we `offered` (RFC 4568 §7.1.3). A plain answer
/// is an error: the call would not measure SRTP.
pub fn answer_keys(
    answer: &SessionDescription,
    offered: &[CryptoAttribute],
) -> Result<SdesKeys, String> {
    let audio = answer
        .media
        .iter()
        .find(|m| m.media == "audio" && m.port != 0)
        .ok_or("answer has no accepted audio stream")?;
    if !audio.protocol.eq_ignore_ascii_case("RTP/SAVP") {
        return Err(format!(
            "SRTP offer answered on {} (plain media)",
            audio.protocol
        ));
    }
    let line = audio
        .attribute_values("crypto")
        .next()
        .ok_or("SRTP offer answered without an a=crypto line")?;
    ontime_srtp::accept_answer(offered, line).map_err(|e| format!("answer's a=crypto: {e}"))
}

/// Everything callers share.
#[derive(Debug, Clone)]
pub struct CallerSetup {
    /// The SIP user agent.
    pub sip: SipClient,
    /// The harness's media clock.
    pub sender: Controller,
    /// What callers say, picked at random per turn.
    pub utterances: Arc<[Utterance]>,
    /// Request-URI of the calls (`sip:bot@HOST:PORT`).
    pub target_uri: String,
    /// Where INVITEs go.
    pub destination: SocketAddr,
    /// The harness's IP towards the gateway (RTP sockets bind here).
    pub local_ip: IpAddr,
    /// Time zero of every [`Duration`] callers compute.
    pub origin: Instant,
    /// A turn unanswered this long counts as unanswered.
    pub answer_timeout: Duration,
    /// Plain RTP or SRTP.
    pub media: Media,
    /// Callers pause mid-sentence this long (a range, seeded per turn) in every utterance long
    /// enough ([`Utterance::pause_point`]): the end-of-turn test. None: they speak in one go.
    pub mid_pause: Option<(Duration, Duration)>,
    /// The share of those utterances (0–1, seeded per turn) that get the pause; the rest are
    /// said in one go, so a caller who pauses by habit also ends sentences without one.
    pub mid_pause_share: f64,
    /// What callers offer and send: PCMU, or G.722 encoded from [`CallerSetup::utterances`].
    pub codec: CallerCodec,
}

/// Something a caller observed.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Which caller.
    pub caller: usize,
    /// When.
    pub at: Instant,
    /// What.
    pub kind: RecordKind,
}

/// What a caller observed.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordKind {
    /// The call was answered after this long.
    Answered {
        /// INVITE to 200 OK.
        setup: Duration,
    },
    /// The call could not be set up.
    Failed(String),
    /// The gateway refused the call with 503 (at its admission limit, or draining).
    Refused,
    /// The far end ended a running call.
    DroppedByGateway(String),
    /// A turn: last speech packet sent → first agent audio packet received.
    Turn {
        /// The turn latency.
        latency: Duration,
        /// The caller paused mid-sentence in this turn ([`CallerSetup::mid_pause`]).
        paused: bool,
        /// The utterance is too short to pause in ([`Utterance::pause_point`]): a short answer.
        short: bool,
    },
    /// The caller resumed after a mid-sentence pause ([`CallerSetup::mid_pause`]).
    PausedTurn {
        /// Agent audio began inside the pause: the caller was cut off.
        reply_in_pause: bool,
    },
    /// No agent audio within the answer timeout after the caller stopped speaking.
    Unanswered {
        /// The utterance the caller had said (some are harder for a turn detector).
        utterance: String,
    },
    /// Agent audio began while the caller was still speaking or pausing (no latency sample).
    EarlyAgentAudio,
    /// One agent utterance, heard through the playout model.
    Agent(AgentUtterance),
    /// An SRTP call's packets refused over its life (recorded when it ends, if any): received
    /// ones that failed authentication, and the rest (replayed, too old, malformed, or ours
    /// that could not be protected).
    SrtpDropped {
        /// Received packets whose authentication tag did not match.
        auth_failed: u64,
        /// Every other refusal.
        other: u64,
    },
}

/// Room for one protected packet: the caller sends 12-byte headers and 160-byte PCMU or G.722
/// frames.
const SRTP_SCRATCH: usize = 12 + 160 + MAX_SRTP_TAG_LEN;

/// Sends the caller's packets and notes when the last packet carrying speech (a non-silent
/// payload) left: the turn's start. Runs on the sender's tick, so only a non-blocking `sendto`,
/// an atomic store, for SRTP protecting a copy in a buffer allocated with the sink, and for
/// G.722 decoding the frame into a stack buffer (every frame, silence included: the decoder
/// follows the stream as the gateway's does).
struct SpeechSink {
    socket: Arc<std::net::UdpSocket>,
    remote: SocketAddr,
    origin: Instant,
    last_speech_ns: Arc<AtomicU64>,
    /// SRTP: our outbound context and the buffer it protects in. The sink protects, not the
    /// sender's own `StreamConfig::srtp`, because the speech test above needs the clear payload.
    srtp: Option<(SrtpContext, Box<[u8; SRTP_SCRATCH]>)>,
    /// Packets SRTP refused to protect (not sent).
    srtp_errors: Arc<AtomicU64>,
    /// Judges what is sent as the gateway hears it.
    ear: Ear,
}

impl PacketSink for SpeechSink {
    fn send_packet(&mut self, packet: &[u8], info: PacketInfo) -> io::Result<()> {
        let sent = match &mut self.srtp {
            None => self.socket.send_to(packet, self.remote).map(|_| ()),
            Some((context, scratch)) => {
                let protected = scratch
                    .get_mut(..packet.len())
                    .map(|room| room.copy_from_slice(packet))
                    .ok_or(())
                    .and_then(|()| {
                        context
                            .protect(&mut scratch[..], packet.len())
                            .map_err(|_| ())
                    });
                match protected {
                    Ok(len) => self
                        .socket
                        .send_to(&scratch[..len], self.remote)
                        .map(|_| ()),
                    Err(()) => {
                        self.srtp_errors.fetch_add(1, Relaxed);
                        Ok(())
                    }
                }
            }
        };
        // Speech, not just an utterance's frame: a file's leading and trailing quiet frames do
        // not end the caller's speech (a 160-byte table decode, no allocation; G.722: a decode
        // of every frame, in order, into a stack buffer).
        let voiced = if self.ear.is_stateful() {
            let heard = ontime_rtp::parse_rtp(packet)
                .is_ok_and(|p| !self.ear.is_silent(p.payload, p.payload_type));
            !info.silence && heard
        } else {
            !info.silence
                && ontime_rtp::parse_rtp(packet)
                    .is_ok_and(|p| !is_silent_payload(p.payload, p.payload_type))
        };
        if voiced {
            let ns = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.last_speech_ns.store(ns, Relaxed);
        }
        sent
    }
}

/// A kernel arrival stamp (wall clock) as an `Instant`: now minus how long ago it was. Without a
/// stamp, now.
fn kernel_arrival(stamp: Option<Duration>) -> Instant {
    let now = Instant::now();
    let Some(stamp) = stamp else { return now };
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.checked_sub(wall.saturating_sub(stamp)).unwrap_or(now)
}

/// Where a speaking caller is in a mid-sentence pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MidPause {
    /// The utterance has none.
    No,
    /// Not reached yet.
    Before,
    /// In it; `replied` once agent audio began.
    In { replied: bool },
    /// Resumed.
    After,
}

/// Marks on the caller's stream: each turn's speech end, its pause's start and its resumption.
fn end_mark(turn: u64) -> u64 {
    turn * 4
}
fn pause_mark(turn: u64) -> u64 {
    turn * 4 + 1
}
fn resume_mark(turn: u64) -> u64 {
    turn * 4 + 2
}

enum Phase {
    Pausing {
        until: Instant,
    },
    Speaking {
        turn: u64,
        utterance: usize,
        pause: MidPause,
    },
    Awaiting {
        since: Duration,
        deadline: Instant,
        utterance: usize,
        paused: bool,
    },

    Listening,
}

fn random_pause(rng: &mut StdRng) -> Duration {
    let min = PAUSE_MIN.as_millis() as u64;
    let max = PAUSE_MAX.as_millis() as u64;
    Duration::from_millis(rng.random_range(min..=max))
}

/// Run caller `id` until `stop` turns true; records go to `records`.
pub async fn run_caller(
    id: usize,
    setup: Arc<CallerSetup>,
    seed: u64,
    mut stop: watch::Receiver<bool>,
    records: mpsc::UnboundedSender<Record>,
) {
    let record = |kind: RecordKind| {
        let _ = records.send(Record {
            caller: id,
            at: Instant::now(),
            kind,
        });
    };
    let fail = |what: String| {
        tracing::debug!(caller = id, %what, "call failed");
        record(RecordKind::Failed(what));
    };
    if setup.utterances.is_empty() {
        return fail("no caller utterances loaded".into());
    }
    let std_socket = match std::net::UdpSocket::bind((setup.local_ip, 0))
        .and_then(|s| s.set_nonblocking(true).map(|()| s))
    {
        Ok(s) => Arc::new(s),
        Err(e) => return fail(format!("bind RTP socket: {e}")),
    };
    // The RTP socket stays out of the runtime's epoll set: the caller drains it on its clock
    // (`POLL`), by kernel arrival stamps. Registered, each of the gateway's 50 packets a second
    // also woke this process's I/O thread from inside the gateway's `sendto` (loopback delivers
    // in the sender's context): a cross-core wake charged to the gateway that a gateway sending
    // to a remote phone never pays, and that no peer's figure includes.
    let local_rtp = match std_socket.local_addr() {
        Ok(a) => a,
        Err(e) => return fail(format!("RTP socket: {e}")),
    };
    if let Err(e) = os::enable_receive_timestamps(std_socket.as_raw_fd()) {
        tracing::warn!(error = %e, "no kernel receive timestamps: arrival times carry the harness's lag");
    }
    let codec = setup.codec.codec();
    let mut local = LocalMedia::new(local_rtp, id as u64 + 1);
    local.codecs = vec![codec];
    local.telephone_event = false;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let invited = Instant::now();
    let (offer, offered_crypto) = match caller_offer(&local, setup.media) {
        Ok(o) => o,
        Err(e) => return fail(format!("SRTP keys for the offer: {e}")),
    };
    let params = CallParams {
        headers: Vec::new(),
        target: setup.target_uri.clone(),
        from: None,
        destination: setup.destination,
        transport: Transport::Udp,
        offer,
    };
    let call = match setup.sip.place_call(params, events_tx).await {
        Ok(c) => c,
        Err(e) => return fail(format!("INVITE: {e}")),
    };
    // Wait for the answer.
    let answer = loop {
        tokio::select! {
            e = events.recv() => match e {
                Some(CallEvent::Answered(answer)) => break answer,
                Some(CallEvent::Progress(_)) => {}
                Some(CallEvent::Ended(EndReason::Refused { status: 503, .. })) => {
                    return record(RecordKind::Refused);
                }
                Some(CallEvent::Ended(reason)) => return fail(format!("not answered: {reason:?}")),
                None => return fail("SIP task stopped".into()),
            },
            () = tokio::time::sleep_until((invited + ANSWER_LIMIT).into()) => {
                setup.sip.hangup(call);
                return fail(format!("not answered within {ANSWER_LIMIT:?}"));
            }
            _ = stop.changed() => { setup.sip.hangup(call); return; }
        }
    };
    let media = match answer.as_ref().map(|a| sdp::read_answer(a, &local)) {
        Some(Ok(m)) => m,
        Some(Err(e)) => {
            setup.sip.hangup(call);
            return fail(format!("answer SDP: {e}"));
        }
        None => {
            setup.sip.hangup(call);
            return fail("200 OK without SDP".into());
        }
    };
    let Some(remote) = media
        .remote_rtp
        .filter(|_| media.payload_type == codec.payload_type())
    else {
        setup.sip.hangup(call);
        return fail(format!("answer has no {codec} RTP address: {media:?}"));
    };
    let keys = match (setup.media, &answer) {
        (Media::Srtp, Some(answer)) => match answer_keys(answer, &offered_crypto) {
            Ok(k) => Some(k),
            Err(e) => {
                setup.sip.hangup(call);
                return fail(e);
            }
        },
        _ => None,
    };
    let mut inbound = keys.as_ref().map(SdesKeys::inbound);
    let (mut auth_failed, mut other_drops) = (0u64, 0u64);
    let srtp_errors = Arc::new(AtomicU64::new(0));
    record(RecordKind::Answered {
        setup: invited.elapsed(),
    });

    let last_speech_ns = Arc::new(AtomicU64::new(0));
    let sink = SpeechSink {
        socket: Arc::clone(&std_socket),
        remote,
        origin: setup.origin,
        last_speech_ns: Arc::clone(&last_speech_ns),
        srtp: keys
            .as_ref()
            .map(|k| (k.outbound(), Box::new([0u8; SRTP_SCRATCH]))),
        srtp_errors: Arc::clone(&srtp_errors),
        ear: Ear::new(codec),
    };
    let mut config = StreamConfig::new(
        Packetizer::new(codec.payload_type()).with_timestamp_step(codec.timestamp_step()),
        StreamOutput::Sink(Box::new(sink)),
    );
    config.silence_frame = setup.codec.silence_frame();
    let mut producer = match setup.sender.add_stream(config) {
        Ok(p) => p,
        Err(e) => {
            setup.sip.hangup(call);
            return fail(format!("harness sender: {e}"));
        }
    };

    let mut rng = StdRng::seed_from_u64(seed);
    let mut listener = AgentListener::new();
    // What the caller hears, decoded in arrival order (one G.722 decoder for the call).
    let mut ear = Ear::new(codec);
    let mut phase = Phase::Pausing {
        until: Instant::now() + random_pause(&mut rng),
    };
    let mut turn = 0u64;
    let mut buf = [0u8; 2048];
    let mut heard = Vec::new();
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let since_origin = |at: Instant| at.saturating_duration_since(setup.origin);
    let dropped = loop {
        heard.clear();
        tokio::select! {
            _ = poll.tick() => {
                // Everything that arrived since the last tick, each at its kernel arrival.
                while let Ok((n, from, stamp)) = os::recv_with_timestamp(std_socket.as_raw_fd(), &mut buf) {
                    if from != Some(remote) {
                        continue;
                    }
                    let arrival = since_origin(kernel_arrival(stamp));
                    // SRTP: a packet that fails to unprotect is not heard, and counted.
                    let clear = match inbound.as_mut() {
                        None => Some(n),
                        Some(context) => match context.unprotect(&mut buf[..n]) {
                            Ok(len) => Some(len),
                            Err(ontime_srtp::Error::AuthFailed) => {
                                auth_failed += 1;
                                None
                            }
                            Err(_) => {
                                other_drops += 1;
                                None
                            }
                        },
                    };
                    if let Some(n) = clear {
                        if let Ok(p) = ontime_rtp::parse_rtp(&buf[..n]) {
                            let silent = ear.is_silent(p.payload, p.payload_type);
                            heard.extend(listener.on_packet(p.sequence_number, silent, arrival));
                        }
                    }
                }
                heard.extend(listener.on_time(since_origin(Instant::now())));
            }
            e = events.recv() => match e {
                Some(CallEvent::Ended(reason)) => break Some(format!("{reason:?}")),
                Some(_) => {}
                None => break Some("SIP task stopped".into()),
            },
            _ = stop.changed() => break None,
        }
        let now = Instant::now();
        while let Some(StreamEvent::Mark { id: mark, .. }) = producer.try_event() {
            if let Phase::Speaking {
                turn: t,
                utterance,
                ref mut pause,
            } = phase
            {
                if mark == pause_mark(t) {
                    *pause = MidPause::In { replied: false };
                } else if mark == resume_mark(t) {
                    if let MidPause::In { replied } = *pause {
                        record(RecordKind::PausedTurn {
                            reply_in_pause: replied,
                        });
                    }
                    *pause = MidPause::After;
                } else if mark == end_mark(t) {
                    let paused = *pause != MidPause::No;
                    let since = Duration::from_nanos(last_speech_ns.load(Relaxed));
                    phase = if listener.agent_speaking() {
                        Phase::Listening
                    } else {
                        Phase::Awaiting {
                            since,
                            deadline: now + setup.answer_timeout,
                            utterance,
                            paused,
                        }
                    };
                }
            }
        }
        for heard in heard.drain(..) {
            match heard {
                Heard::AgentStarted { arrival } => match phase {
                    Phase::Awaiting {
                        since,
                        paused,
                        utterance,
                        ..
                    } => {
                        record(RecordKind::Turn {
                            latency: arrival.saturating_sub(since),
                            paused,
                            short: setup.utterances[utterance].pause_point().is_none(),
                        });
                        phase = Phase::Listening;
                    }
                    Phase::Pausing { .. } => {
                        record(RecordKind::EarlyAgentAudio);
                        phase = Phase::Listening;
                    }
                    Phase::Speaking { ref mut pause, .. } => {
                        if let MidPause::In { replied } = pause {
                            *replied = true;
                        }
                        record(RecordKind::EarlyAgentAudio);
                    }
                    Phase::Listening => {}
                },
                Heard::AgentEnded(u) => {
                    record(RecordKind::Agent(u));
                    if matches!(phase, Phase::Listening) {
                        phase = Phase::Pausing {
                            until: now + random_pause(&mut rng),
                        };
                    }
                }
            }
        }
        match phase {
            Phase::Pausing { until } if now >= until => {
                turn += 1;
                let index = rng.random_range(0..setup.utterances.len());
                let utterance = &setup.utterances[index];
                // The mark sits at the end of the speech, before the file's trailing quiet: the
                // gateway may answer while that quiet is still playing.
                let voiced_end = utterance.voiced_end();
                let pausing = setup.mid_pause.is_some() && rng.random_bool(setup.mid_pause_share);
                let split = setup.mid_pause.filter(|_| pausing).and_then(|(min, max)| {
                    // Opus: the pieces were cut at the whole frame at or before it.
                    let at = utterance.pause_point()? / setup.codec.align(1) * setup.codec.align(1);
                    let ms = rng.random_range(min.as_millis() as u64..=max.as_millis() as u64);
                    Some((at, ms as usize * 8))
                });
                let mut marked = true;
                let mut from = 0;
                let (head, rest) =
                    setup
                        .codec
                        .pieces(&setup.utterances, index, split.map(|(at, _)| at));
                if let Some((at, quiet)) = split {
                    // The pause replaces the quietest frame between two words with line
                    // silence (µ-law 0xFF decodes to 0; G.722's silence byte, which the piece
                    // after it is encoded to follow), as a caller who stops to think.
                    producer.push(head);
                    marked &= producer.mark(pause_mark(turn)).is_ok();
                    producer.push(&setup.codec.silence(quiet));
                    marked &= producer.mark(resume_mark(turn)).is_ok();
                    from = at;
                }
                let cut = setup.codec.align(voiced_end - from).min(rest.len());
                producer.push(&rest[..cut]);
                marked &= producer.mark(end_mark(turn)).is_ok();
                if !marked {
                    break Some("harness mark queue full".into());
                }
                producer.push(&rest[cut..]);
                producer.end_utterance();
                phase = Phase::Speaking {
                    turn,
                    utterance: index,
                    pause: if split.is_some() {
                        MidPause::Before
                    } else {
                        MidPause::No
                    },
                };
            }
            Phase::Awaiting {
                deadline,
                utterance,
                ..
            } if now >= deadline => {
                record(RecordKind::Unanswered {
                    utterance: setup.utterances[utterance].name.clone(),
                });
                phase = Phase::Pausing {
                    until: now + random_pause(&mut rng),
                };
            }
            _ => {}
        }
    };
    drop(producer);
    other_drops += srtp_errors.load(Relaxed);
    if auth_failed + other_drops > 0 {
        record(RecordKind::SrtpDropped {
            auth_failed,
            other: other_drops,
        });
    }
    match dropped {
        Some(reason) => record(RecordKind::DroppedByGateway(reason)),
        None => {
            setup.sip.hangup(call);
            // Let the BYE's transaction finish so the gateway frees the call before the next step.
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while let Some(e) = events.recv().await {
                    if matches!(e, CallEvent::Ended(_)) {
                        break;
                    }
                }
            })
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> LocalMedia {
        let mut local = LocalMedia::new("127.0.0.1:40000".parse().unwrap(), 1);
        local.codecs = vec![Codec::Pcmu];
        local.telephone_event = false;
        local
    }

    /// The offer as the gateway receives it: written out and parsed back.
    fn on_the_wire(offer: &SessionDescription) -> (String, SessionDescription) {
        let text = offer.to_sdp_string();
        let parsed = SessionDescription::parse(text.as_bytes()).unwrap();
        (text, parsed)
    }

    #[test]
    fn an_srtp_caller_offers_savp_with_a_crypto_line_per_suite() {
        let (offer, crypto) = caller_offer(&local(), Media::Srtp).unwrap();
        let (text, parsed) = on_the_wire(&offer);
        assert!(text.contains("m=audio 40000 RTP/SAVP 0\r\n"), "{text}");
        let audio = parsed.audio().unwrap();
        let lines: Vec<&str> = audio.attribute_values("crypto").collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(crypto.len(), 2);
        assert!(lines[0].starts_with("1 AES_CM_128_HMAC_SHA1_80 inline:"));
        assert!(lines[1].starts_with("2 AES_CM_128_HMAC_SHA1_32 inline:"));
        for (line, ours) in lines.iter().zip(&crypto) {
            assert_eq!(&CryptoAttribute::parse(line).unwrap(), ours);
        }
    }

    #[test]
    fn a_plain_caller_offers_avp_without_crypto() {
        let (offer, crypto) = caller_offer(&local(), Media::Rtp).unwrap();
        let (text, _) = on_the_wire(&offer);
        assert!(text.contains("m=audio 40000 RTP/AVP 0\r\n"), "{text}");
        assert!(!text.contains("a=crypto"), "{text}");
        assert!(crypto.is_empty());
    }

    #[test]
    fn the_answer_keys_the_call_and_a_plain_answer_is_refused() {
        let (offer, crypto) = caller_offer(&local(), Media::Srtp).unwrap();
        let (_, offer) = on_the_wire(&offer);
        let gateway = LocalMedia::new("127.0.0.1:50000".parse().unwrap(), 2);
        let mut theirs = None;
        let (answer, negotiated) = sdp::answer_offer_srtp(
            &offer,
            &gateway,
            ontime_sip::SrtpPolicy::Optional,
            &mut |_, m| {
                let k = ontime_srtp::answer_offer(m.attribute_values("crypto")).ok()?;
                let line = k.local.to_string();
                theirs = Some(k);
                Some(line)
            },
        )
        .unwrap();
        assert!(negotiated.srtp);
        let theirs = theirs.unwrap();
        let keys = answer_keys(&answer, &crypto).unwrap();
        // Each side's outbound key is the other's inbound one.
        assert_eq!(keys.remote, theirs.local);
        assert_eq!(keys.local, theirs.remote);
        let mut packet = [0u8; 12 + 160 + MAX_SRTP_TAG_LEN];
        packet[0] = 0x80;
        let len = keys.outbound().protect(&mut packet, 172).unwrap();
        assert_eq!(theirs.inbound().unprotect(&mut packet[..len]), Ok(172));

        let plain = sdp::answer_offer(&on_the_wire(&sdp::build_offer(&local())).1, &gateway)
            .unwrap()
            .0;
        assert!(answer_keys(&plain, &crypto)
            .unwrap_err()
            .contains("answered on RTP/AVP"));
    }

    #[test]
    fn a_g722_caller_offers_g722_only_and_the_gateways_default_answers_it() {
        let mut ours = local();
        ours.codecs = vec![Codec::G722];
        let (offer, _) = caller_offer(&ours, Media::Rtp).unwrap();
        let (text, offer) = on_the_wire(&offer);
        assert!(text.contains("m=audio 40000 RTP/AVP 9\r\n"), "{text}");
        assert!(text.contains("a=rtpmap:9 G722/8000\r\n"), "{text}");
        assert!(!text.contains("PCMU"), "{text}");
        // The gateway's default `--codecs PCMU,PCMA,G722` answers it with G.722 on type 9.
        let gateway = LocalMedia::new("127.0.0.1:50000".parse().unwrap(), 2);
        let (answer, negotiated) = sdp::answer_offer(&offer, &gateway).unwrap();
        assert_eq!(
            (negotiated.codec, negotiated.payload_type),
            (Codec::G722, 9)
        );
        let heard = sdp::read_answer(&on_the_wire(&answer).1, &ours).unwrap();
        assert_eq!(heard.payload_type, Codec::G722.payload_type());
        // A gateway with G.711 only (`--codecs PCMU,PCMA`) has nothing in common with it.
        let mut g711 = gateway.clone();
        g711.codecs = vec![Codec::Pcmu, Codec::Pcma];
        assert!(sdp::answer_offer(&offer, &g711).is_err());
    }

    #[test]
    fn codecs_and_the_pieces_callers_push() {
        assert_eq!(parse_codec("PCMU"), Ok(Codec::Pcmu));
        assert_eq!(parse_codec("g722"), Ok(Codec::G722));
        assert!(parse_codec("PCMA").is_err());
        assert_eq!(parse_codec("OPUS"), Ok(Codec::Opus));
        assert!(parse_codec("speex").is_err());
        // 2 s of a 300 Hz tone (a constant byte would be DC, which Opus filters out).
        let tone: Vec<i16> = (0..160 * 100)
            .map(|n| {
                (8000.0 * (2.0 * std::f64::consts::PI * 300.0 * n as f64 / 8000.0).sin()) as i16
            })
            .collect();
        let mut speech = vec![0u8; tone.len()];
        ontime_rtp::g711::Law::Ulaw.encode_slice(&tone, &mut speech);
        let utterances = [Utterance::new("s", speech.clone())];
        let at = utterances[0].pause_point().unwrap();
        // PCMU: the recording's own bytes, cut at the pause point.
        let pcmu = CallerCodec::new(Codec::Pcmu, &utterances).unwrap();
        assert_eq!((pcmu.codec(), pcmu.silence_byte()), (Codec::Pcmu, 0xFF));
        assert_eq!(pcmu.pieces(&utterances, 0, None), (&[][..], &speech[..]));
        assert_eq!(
            pcmu.pieces(&utterances, 0, Some(at)),
            (&speech[..at], &speech[at..])
        );
        // G.722: the encoded pieces, as long as the µ-law ones.
        let g722 = CallerCodec::new(Codec::G722, &utterances).unwrap();
        assert_eq!(
            (g722.codec(), g722.silence_byte()),
            (Codec::G722, g722::SILENCE_BYTE)
        );
        let CallerCodec::G722(encoded) = &g722 else {
            unreachable!()
        };
        let (head, tail) = g722.pieces(&utterances, 0, Some(at));
        let split = encoded[0].split.as_ref().unwrap();
        assert_eq!((head, tail), (&split.head[..], &split.tail[..]));
        assert_eq!((head.len(), tail.len()), (at, speech.len() - at));
        let (none, whole) = g722.pieces(&utterances, 0, None);
        assert_eq!((none.len(), whole), (0, &encoded[0].whole[..]));
        // Opus: whole 160-byte packets, as many as the µ-law frames, cut at the pause point's
        // frame; its silence is whole silent packets, and its ear hears the speech, not them.
        let opus = CallerCodec::new(Codec::Opus, &utterances).unwrap();
        assert_eq!(opus.codec(), Codec::Opus);
        let (head, tail) = opus.pieces(&utterances, 0, Some(at));
        assert_eq!(at % FRAME_BYTES, 0);
        assert_eq!((head.len(), tail.len()), (at, speech.len() - at));
        let (_, whole) = opus.pieces(&utterances, 0, None);
        assert_eq!(whole.len(), speech.len());
        assert_eq!(
            (opus.align(161), opus.align(160), g722.align(161)),
            (320, 160, 161)
        );
        let quiet = opus.silence(170);
        assert_eq!(quiet.len(), 2 * FRAME_BYTES);
        let mut ear = Ear::new(Codec::Opus);
        let voiced = whole
            .chunks(FRAME_BYTES)
            .filter(|p| !ear.is_silent(p, ontime_rtp::PT_OPUS_OFFER))
            .count();
        let silent = quiet
            .chunks(FRAME_BYTES)
            .filter(|p| ear.is_silent(p, ontime_rtp::PT_OPUS_OFFER))
            .count();
        // Every speech packet is heard; of the silent packets after it, the first still carries
        // the decoder's tail of the tone (Opus frames overlap), the second is silence.
        assert_eq!((voiced, silent), (100, 1));
        assert!(CallerCodec::new(Codec::Pcma, &utterances).is_err());
    }

    #[test]
    fn media_lists() {
        assert_eq!(parse_media_list("rtp"), Ok(vec![Media::Rtp]));
        assert_eq!(parse_media_list("srtp"), Ok(vec![Media::Srtp]));
        assert_eq!(parse_media_list("both"), Ok(vec![Media::Rtp, Media::Srtp]));
        assert_eq!(
            parse_media_list("srtp,rtp"),
            Ok(vec![Media::Srtp, Media::Rtp])
        );
        assert!(parse_media_list("zrtp").is_err());
        assert!(parse_media_list("").is_err());
    }
}
