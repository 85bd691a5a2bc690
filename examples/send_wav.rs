//! Send an 8 kHz mono 16-bit WAV on time as RTP through ontime's real-time sender, with no
//! gateway: the file is G.711-encoded, pushed into one stream of a `Sender` (a `StreamOutput::Udp`
//! to `--to`) and paced out at one packet per 20 ms by the sender thread.
//!
//! ```text
//! cargo run --example send_wav -- gateway/assets/stub_reply.wav --to 127.0.0.1:40000
//! cargo run --example send_wav -- gateway/assets/stub_reply.wav --to 127.0.0.1:40000 \
//!     --listen 127.0.0.1:40000 [--codec pcma] [--json]
//! ```
//!
//! The sender sends continuously (silence when nothing is queued), so the stream is added right
//! after a tick and removed as soon as the mark after the file's last byte is reported: usually
//! every packet carries the file, but a late wake can add a silence packet at either end. The
//! report therefore splits `packets_sent` into `audio_packets` (exactly ⌈samples / 160⌉ when
//! nothing underran) and `silence_packets`. Ticks, late ticks (> 20 ms after their slot),
//! underruns and the p99 lateness bound (the upper edge of the histogram bucket holding the 99th
//! percentile; `null` above 200 ms) are the sender's own counters since it started.
//!
//! With `--listen ADDR` the example also binds that UDP address and acts as the receiver (point
//! `--to` at it): every datagram goes into ontime's live adaptive `JitterBuffer` at its arrival
//! time and one frame is played out per 20 ms. It reports packets received, lost and discarded
//! (late) as the buffer counted them, the depth when the last frame played and the deepest it
//! grew, and `wav_frames_received`: how many of the received packets, in sequence order, carry
//! the file's frames byte for byte (all of them when the audio arrived intact).
//!
//! `--json` prints one JSON line instead of the summary.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use ontime_jitter::{JitterBuffer, JitterConfig, Playout, RtpPacketInfo, SeqExtender};
use ontime_rtp::g711::Law;
use ontime_rtp::{parse_rtp, Packetizer, FRAME, FRAME_BYTES, SAMPLE_RATE_HZ};
use ontime_sender::{
    EngineConfig, Sender, SenderConfig, SenderStats, StreamConfig, StreamEvent, StreamOutput,
    LATE_TICK_THRESHOLD,
};
use serde::Serialize;

/// Command line.
#[derive(Debug, Clone, Parser)]
#[command(
    about = "Send an 8 kHz mono 16-bit WAV on time as G.711 RTP through ontime's real-time sender"
)]
pub struct Args {
    /// The WAV file: 8 kHz, mono, 16-bit PCM.
    #[arg(value_name = "WAV")]
    pub wav: PathBuf,
    /// Where to send the RTP stream.
    #[arg(long, value_name = "ADDR")]
    pub to: SocketAddr,
    /// Also bind this UDP address and receive the stream through the live jitter buffer.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// G.711 law (payload type 0 or 8).
    #[arg(long, value_enum, default_value_t = Codec::Pcmu)]
    pub codec: Codec,
    /// Print one JSON line instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// The G.711 law to encode with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// µ-law, payload type 0.
    Pcmu,
    /// A-law, payload type 8.
    Pcma,
}

impl Codec {
    fn law(self) -> Law {
        match self {
            Codec::Pcmu => Law::Ulaw,
            Codec::Pcma => Law::Alaw,
        }
    }
}

/// What the sender did, from its own counters.
#[derive(Debug, Clone, Serialize)]
pub struct SendReport {
    /// The sender thread ran SCHED_FIFO.
    pub realtime: bool,
    /// The core it was pinned to.
    pub core: Option<usize>,
    /// Packets handed to the socket successfully.
    pub packets_sent: u64,
    /// Packets built with the file's audio (sent or failed).
    pub audio_packets: u64,
    /// Packets of silence only (before the audio was queued or after it ran out).
    pub silence_packets: u64,
    /// Sends that failed.
    pub send_errors: u64,
    /// Slots the sender served since it started (one per 20 ms).
    pub ticks: u64,
    /// Slots served more than 20 ms after their time.
    pub late_ticks: u64,
    /// Packets sent as catch-up after a late wake.
    pub catchup_packets: u64,
    /// Frames that ran short mid-utterance.
    pub underruns: u64,
    /// Upper bound of the 99th percentile of tick lateness; `None` above 200 ms.
    pub p99_lateness_bound_ms: Option<f64>,
    /// The latest any slot was served.
    pub worst_lateness_ms: f64,
}

/// What the receiver model saw.
#[derive(Debug, Clone, Serialize)]
pub struct ReceiveReport {
    /// The address it listened on.
    pub listen: SocketAddr,
    /// Valid RTP packets received.
    pub received: u64,
    /// Datagrams that were not valid RTP (ignored).
    pub invalid: u64,
    /// Received packets, in sequence order, carrying the file's frames byte for byte.
    pub wav_frames_received: u64,
    /// Frames the jitter buffer played.
    pub played: u64,
    /// Sequence numbers the buffer passed without the packet ever arriving.
    pub lost: u64,
    /// Packets discarded (late, overflow, flushed, out of range).
    pub discarded: u64,
    /// Of those, discarded for arriving after their playout time.
    pub late: u64,
    /// Packets received twice.
    pub duplicates: u64,
    /// Concealment frames played (missing, late or stretching the depth).
    pub concealed: u64,
    /// Playout depth when the last frame played.
    pub depth_ms: f64,
    /// The deepest the buffer grew.
    pub max_depth_ms: u64,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The file sent.
    pub wav: PathBuf,
    /// Its samples at 8 kHz.
    pub samples: u64,
    /// Its 20 ms frames (the last one padded with silence): the audio packets expected.
    pub frames: u64,
    /// Its length in seconds.
    pub duration_s: f64,
    /// The law used.
    pub codec: Codec,
    /// Where the stream went.
    pub to: SocketAddr,
    /// The sender's side.
    pub sender: SendReport,
    /// The receiver's side, with `--listen`.
    pub receiver: Option<ReceiveReport>,
}

/// Reads an 8 kHz mono 16-bit PCM WAV; errors name the `WAV` argument and what is wrong.
pub fn read_wav(path: &Path) -> anyhow::Result<Vec<i16>> {
    let reader = hound::WavReader::open(path)
        .with_context(|| format!("WAV argument {}: cannot read it", path.display()))?;
    let spec = reader.spec();
    if spec.sample_rate != SAMPLE_RATE_HZ {
        bail!(
            "WAV argument {}: sample rate is {} Hz, need {SAMPLE_RATE_HZ} Hz (resample it first)",
            path.display(),
            spec.sample_rate
        );
    }
    if spec.channels != 1 {
        bail!(
            "WAV argument {}: {} channels, need mono",
            path.display(),
            spec.channels
        );
    }
    if spec.bits_per_sample != 16 || spec.sample_format != hound::SampleFormat::Int {
        bail!(
            "WAV argument {}: {}-bit {:?} samples, need 16-bit integer PCM",
            path.display(),
            spec.bits_per_sample,
            spec.sample_format
        );
    }
    let samples = reader
        .into_samples::<i16>()
        .collect::<Result<Vec<i16>, _>>()
        .with_context(|| format!("WAV argument {}: cannot decode samples", path.display()))?;
    if samples.is_empty() {
        bail!("WAV argument {}: no samples", path.display());
    }
    Ok(samples)
}

/// Number of 20 ms frames (packets) `samples` samples fill, the last one padded.
pub fn frames_of(samples: usize) -> u64 {
    samples.div_ceil(FRAME_BYTES) as u64
}

/// The file as the stream's payloads: G.711 codes padded with silence to whole frames.
fn encode(samples: &[i16], law: Law) -> Vec<u8> {
    let mut codes = vec![law.silence(); samples.len().div_ceil(FRAME_BYTES) * FRAME_BYTES];
    law.encode_slice(samples, &mut codes[..samples.len()]);
    codes
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// The receiver: a UDP socket feeding the live jitter buffer, played out every 20 ms.

struct Receiver {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<ReceiveReport>>,
}

impl Receiver {
    /// Binds `listen` now (so nothing sent afterwards is missed) and starts receiving.
    fn start(listen: SocketAddr, expected: Vec<u8>) -> anyhow::Result<Receiver> {
        let socket =
            UdpSocket::bind(listen).with_context(|| format!("--listen {listen}: cannot bind"))?;
        let listen = socket.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("send_wav-rx".into())
            .spawn(move || receive(&socket, listen, &expected, &thread_stop))?;
        Ok(Receiver { stop, thread })
    }

    /// Lets it play out what it holds, then returns what it saw.
    fn finish(self) -> anyhow::Result<ReceiveReport> {
        self.stop.store(true, Ordering::Release);
        match self.thread.join() {
            Ok(report) => report,
            Err(_) => bail!("the receiver thread panicked"),
        }
    }
}

fn receive(
    socket: &UdpSocket,
    listen: SocketAddr,
    expected: &[u8],
    stop: &AtomicBool,
) -> anyhow::Result<ReceiveReport> {
    let mut jb = JitterBuffer::new(JitterConfig::default())?;
    let epoch = Instant::now();
    let mut next_pop = FRAME;
    let mut buf = [0u8; 2048];
    let mut seq = SeqExtender::new();
    let mut payloads: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let (mut received, mut invalid, mut concealed) = (0u64, 0u64, 0u64);
    let mut depth_at_last_frame = Duration::ZERO;
    let mut stopping_since: Option<Instant> = None;
    loop {
        let now = epoch.elapsed();
        if now >= next_pop {
            // One playout tick: everything due now (one frame, two when the buffer shrinks).
            loop {
                match jb.pop(now) {
                    Playout::Nothing => break,
                    Playout::Frame(_) => depth_at_last_frame = jb.depth(),
                    Playout::Conceal(_) => concealed += 1,
                    Playout::Silence => {}
                }
            }
            next_pop = FRAME * (now.as_nanos() / FRAME.as_nanos() + 1) as u32;
            continue;
        }
        socket.set_read_timeout(Some((next_pop - now).max(Duration::from_millis(1))))?;
        match socket.recv(&mut buf) {
            Ok(n) => {
                let arrival = epoch.elapsed();
                let Ok(packet) = parse_rtp(&buf[..n]) else {
                    invalid += 1;
                    continue;
                };
                received += 1;
                let info = RtpPacketInfo {
                    sequence_number: packet.sequence_number,
                    timestamp: packet.timestamp,
                    marker: packet.marker,
                    ssrc: packet.ssrc,
                    payload_type: packet.payload_type,
                    payload: packet.payload,
                };
                payloads
                    .entry(seq.extend(packet.sequence_number))
                    .or_insert_with(|| packet.payload.to_vec());
                if jb.push(&info, arrival).is_err() {
                    // Only an oversized payload: counted as invalid, not fatal.
                    invalid += 1;
                }
                continue;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("receive"),
        }
        if stop.load(Ordering::Acquire) {
            // The sender is done and the socket is drained: stop once everything played (or
            // after 2 s, should a packet never leave the buffer).
            let since = *stopping_since.get_or_insert_with(Instant::now);
            if jb.buffered() == 0 || since.elapsed() > Duration::from_secs(2) {
                break;
            }
        }
    }
    let counters = jb.counters();
    Ok(ReceiveReport {
        listen,
        received,
        invalid,
        wav_frames_received: frames_in_place(&payloads, expected),
        played: counters.played,
        lost: counters.lost,
        discarded: counters.discarded(),
        late: counters.late,
        duplicates: counters.duplicates,
        concealed,
        depth_ms: (ms(depth_at_last_frame) * 1000.0).round() / 1000.0,
        max_depth_ms: u64::from(jb.voip_metrics().jb_maximum_ms),
    })
}

/// How many of the file's frames were received at their place: the received payloads, by
/// sequence number, are compared frame by frame with `expected` at every start the span allows
/// (silence packets may precede the audio); the best start counts.
fn frames_in_place(payloads: &BTreeMap<u64, Vec<u8>>, expected: &[u8]) -> u64 {
    let (Some(first), Some(last)) = (payloads.keys().next(), payloads.keys().next_back()) else {
        return 0;
    };
    let frames: Vec<&[u8]> = expected.chunks(FRAME_BYTES).collect();
    let span = last - first + 1;
    let starts = span.saturating_sub(frames.len() as u64);
    (0..=starts)
        .map(|offset| {
            frames
                .iter()
                .enumerate()
                .filter(|(i, frame)| {
                    payloads
                        .get(&(first + offset + *i as u64))
                        .is_some_and(|p| p.as_slice() == **frame)
                })
                .count() as u64
        })
        .max()
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// The sender.

/// Waits until the sender has served a tick, so a stream added now has ~20 ms before its first
/// slot.
fn wait_for_tick(sender: &Sender) {
    let ticks = sender.stats().ticks;
    let give_up = Instant::now() + Duration::from_millis(200);
    while sender.stats().ticks == ticks && Instant::now() < give_up {
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn send(to: SocketAddr, codec: Codec, codes: &[u8]) -> anyhow::Result<SendReport> {
    let local = match to.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let socket = Arc::new(
        UdpSocket::bind(SocketAddr::new(local, 0))
            .with_context(|| format!("--to {to}: cannot bind a local socket to send from"))?,
    );
    let sender = Sender::start(SenderConfig {
        engine: EngineConfig {
            metrics: false,
            ..EngineConfig::default()
        },
        ..SenderConfig::default()
    })
    .context("start the real-time sender")?;
    let output = StreamOutput::Udp { socket, remote: to };
    let mut config = StreamConfig::new(Packetizer::new(codec.law().payload_type()), output);
    // The whole file fits: it is queued at once and the sender paces it.
    config.ring_capacity_bytes = codes.len().max(StreamConfig::DEFAULT_RING_CAPACITY_BYTES);

    wait_for_tick(&sender);
    let mut producer = sender.add_stream(config)?;
    let accepted = producer.push(codes);
    producer.end_utterance();
    producer.mark(1)?;
    if accepted != codes.len() {
        bail!(
            "the stream took {accepted} of {} bytes (ring too small)",
            codes.len()
        );
    }

    // Wait for the mark after the last byte, then drop the stream before its next slot.
    let frames = codes.len() / FRAME_BYTES;
    let deadline = Instant::now() + FRAME * frames as u32 + Duration::from_secs(5);
    loop {
        if let Some(StreamEvent::Mark { id: 1, .. }) = producer.try_event() {
            break;
        }
        if Instant::now() > deadline {
            bail!("the sender did not finish the file in time");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(producer);
    let give_up = Instant::now() + Duration::from_secs(1);
    while sender.stats().streams > 0 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(1));
    }
    let stats: SenderStats = sender.stats();
    let (realtime, core) = (sender.is_realtime(), sender.core());
    sender.stop();
    Ok(SendReport {
        realtime,
        core,
        packets_sent: stats.packets_sent,
        audio_packets: (stats.packets_sent + stats.send_errors)
            .saturating_sub(stats.silence_packets),
        silence_packets: stats.silence_packets,
        send_errors: stats.send_errors,
        ticks: stats.ticks,
        late_ticks: stats.late_ticks,
        catchup_packets: stats.catchup_packets,
        underruns: stats.underruns,
        p99_lateness_bound_ms: stats.p99_upper_bound().map(ms),
        worst_lateness_ms: (ms(stats.worst_lateness) * 1000.0).round() / 1000.0,
    })
}

/// Reads the file, sends it (receiving it too with `--listen`) and reports.
pub fn run(args: &Args) -> anyhow::Result<Report> {
    let samples = read_wav(&args.wav)?;
    let codes = encode(&samples, args.codec.law());
    let receiver = match args.listen {
        Some(listen) => Some(Receiver::start(listen, codes.clone())?),
        None => None,
    };
    let sent = send(args.to, args.codec, &codes);
    // Stop the receiver whatever happened to the sender.
    let received = receiver.map(Receiver::finish).transpose();
    let sender = sent?;
    Ok(Report {
        wav: args.wav.clone(),
        samples: samples.len() as u64,
        frames: frames_of(samples.len()),
        duration_s: samples.len() as f64 / f64::from(SAMPLE_RATE_HZ),
        codec: args.codec,
        to: args.to,
        sender,
        receiver: received?,
    })
}

fn print_summary(r: &Report) {
    let s = &r.sender;
    println!(
        "sent {} ({:.2} s, {} frames of {}) to {}",
        r.wav.display(),
        r.duration_s,
        r.frames,
        format!("{:?}", r.codec).to_uppercase(),
        r.to
    );
    println!(
        "sender:   {} packets sent ({} with audio, {} silence), {} send errors; thread {}{}",
        s.packets_sent,
        s.audio_packets,
        s.silence_packets,
        s.send_errors,
        if s.realtime {
            "SCHED_FIFO"
        } else {
            "SCHED_OTHER"
        },
        s.core.map_or(String::new(), |c| format!(" on core {c}")),
    );
    println!(
        "          {} ticks, {} late (> {} ms), {} catch-up packets, {} underruns; lateness p99 <= {}, worst {:.3} ms",
        s.ticks,
        s.late_ticks,
        LATE_TICK_THRESHOLD.as_millis(),
        s.catchup_packets,
        s.underruns,
        s.p99_lateness_bound_ms
            .map_or("(above 200 ms)".into(), |p| format!("{p} ms")),
        s.worst_lateness_ms,
    );
    if let Some(rx) = &r.receiver {
        println!(
            "receiver: {} received on {} ({} invalid), {}/{} of the file's frames intact",
            rx.received, rx.listen, rx.invalid, rx.wav_frames_received, r.frames
        );
        println!(
            "          jitter buffer: {} played, {} lost, {} discarded ({} late), {} duplicates, {} concealed; depth {:.0} ms (max {} ms)",
            rx.played,
            rx.lost,
            rx.discarded,
            rx.late,
            rx.duplicates,
            rx.concealed,
            rx.depth_ms,
            rx.max_depth_ms
        );
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let printed = run(&args).and_then(|report| {
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_summary(&report);
        }
        Ok(())
    });
    match printed {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
