//! A caller on a line that echoes: a real UDP caller (SIP by [`RawUac`]) whose audio to the
//! gateway carries, besides its own scripted speech, the gateway's audio it received earlier,
//! delayed, attenuated and filtered like a PSTN 2-wire hybrid's reflection, plus line noise.
//!
//! The echo is placed on the caller's timeline as a phone plays it (by RTP timestamp, from the
//! first packet's arrival), then µ-law coded once more on the way back, so the gateway hears its
//! own voice G.711-coded twice, as over a real trunk.
//! The caller records every packet it received and when each of its utterances began, on its
//! own clock, so a test can say what the caller heard of a reply and when it was cut.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ontime_rtp::g711::{ulaw_decode, ulaw_encode};
use serde_json::Value;

use super::pipecat::cdr_end_records;
use super::uac::{DialogIds, RawUac};
use super::{ulaw_is_silent, workspace, Gateway};

/// Samples of one 20 ms frame at 8 kHz.
const FRAME: usize = 160;
/// One frame's duration.
const FRAME_TIME: Duration = Duration::from_millis(20);
/// Samples per millisecond.
const PER_MS: usize = 8;

/// A hybrid's echo path at 8 kHz: a main reflection spread over under a millisecond with an
/// undershoot, high-pass as a line transformer is (its DC gain is under half). [`EchoLine::run`]
/// scales the taps to unit energy; the stub's reply through them keeps its power within 0.1 dB,
/// so `erl_db` is the loss of the speech's echo.
pub const HYBRID_FIR: &[f32] = &[0.3, 0.8, -0.1, -0.45, -0.2, 0.1];

/// Line noise of a quiet PSTN line.
pub const LINE_NOISE_DBFS: f32 = -60.0;

/// When an utterance starts.
#[derive(Debug, Clone, Copy)]
pub enum Cue {
    /// This long after the caller's first packet.
    At(Duration),
    /// This long after the first voiced packet the caller received once its previous utterance
    /// had been sent (the onset of the gateway's reply to it): talking over that reply.
    IntoReply(Duration),
}

/// One scripted utterance: 8 kHz samples and when they start.
#[derive(Debug, Clone)]
pub struct Utterance {
    pub cue: Cue,
    pub audio: Arc<[i16]>,
}

/// The line and what the caller says on it.
#[derive(Debug, Clone)]
pub struct EchoLine {
    /// From the gateway's audio playing at the caller to its echo in the caller's audio
    /// (0-500 ms).
    pub delay_ms: u32,
    /// Echo return loss: how far the echo is below the audio that caused it (6-30 dB).
    pub erl_db: f32,
    /// The echo path's impulse response at 8 kHz (`[1.0]` for a pure delay).
    pub fir: Vec<f32>,
    /// White line noise, RMS in dBFS (None: a noiseless line).
    pub noise_dbfs: Option<f32>,
    /// Seeds the noise and the caller's SSRC, so a run repeats.
    pub seed: u64,
    pub script: Vec<Utterance>,
    /// Hang up once every utterance was sent, a voiced packet arrived after the last one, and
    /// nothing voiced arrived for this long (longer than the turn-stop timeout, so a turn the
    /// gateway takes on the echo of the reply's tail is still heard).
    pub quiet: Duration,
    /// Hang up at this call age whatever happened.
    pub max_duration: Duration,
    /// The caller's packets stall: this long into the reply to its first utterance, nothing is
    /// sent for the second duration, then the held packets leave back to back (a network or
    /// a phone stalling; the gateway's jitter buffer grows, and the echo moves on its timeline).
    pub stall: Option<(Duration, Duration)>,
}

impl EchoLine {
    /// A line echoing `delay_ms` later, `erl_db` down, through [`HYBRID_FIR`], with
    /// [`LINE_NOISE_DBFS`] of noise; nothing said yet.
    pub fn new(delay_ms: u32, erl_db: f32) -> EchoLine {
        EchoLine {
            delay_ms,
            erl_db,
            fir: HYBRID_FIR.to_vec(),
            noise_dbfs: Some(LINE_NOISE_DBFS),
            seed: u64::from(delay_ms) << 16 ^ erl_db.to_bits() as u64,
            script: Vec::new(),
            quiet: Duration::from_secs(4),
            max_duration: Duration::from_secs(30),
            stall: None,
        }
    }

    /// The caller also says `audio` at `cue`.
    pub fn say(mut self, cue: Cue, audio: Arc<[i16]>) -> EchoLine {
        self.script.push(Utterance { cue, audio });
        self
    }

    /// Call `gateway`, play the script over the echoing line, hang up (BYE) when it is done.
    pub fn run(&self, gateway: SocketAddr) -> Result<EchoCall, String> {
        let mut uac = RawUac::new("127.0.0.1", gateway);
        let ids = uac.call()?;
        let to = ids
            .answer_media
            .ok_or("no media address in the 200 OK's SDP")?;
        let origin = Instant::now();
        let heard = Mutex::new(Heard::default());
        let stop = AtomicBool::new(false);
        let rx = uac.media.try_clone().unwrap();
        let tx = uac.media.try_clone().unwrap();
        let sent = std::thread::scope(|s| {
            let receiver = s.spawn(|| receive(&rx, origin, &heard, &stop));
            let sent = self.send(&tx, to, origin, &heard);
            stop.store(true, Ordering::Relaxed);
            receiver.join().unwrap();
            sent
        });
        let bye = uac.bye(&ids);
        let heard = heard.into_inner().unwrap();
        Ok(EchoCall {
            ids,
            received: heard.packets,
            onsets: sent.onsets,
            ends: sent.ends,
            sent: sent.packets,
            late_sends: sent.late,
            bye,
        })
    }

    /// The sending side: one packet every 20 ms on absolute deadlines until the hang-up rule
    /// holds. Packet `k` carries the caller's audio of `[k, k + 1)` × 20 ms and leaves at the end
    /// of that interval, as a phone sends a frame once it has captured it.
    fn send(
        &self,
        socket: &UdpSocket,
        to: SocketAddr,
        origin: Instant,
        heard: &Mutex<Heard>,
    ) -> Sent {
        let taps = unit_energy(&self.fir);
        let gain = 10f32.powf(-self.erl_db / 20.0);
        let delay = self.delay_ms as usize * PER_MS;
        let mut noise = self
            .noise_dbfs
            .map(|dbfs| Noise::new(self.seed, 32768.0 * 10f32.powf(dbfs / 20.0)));
        let ssrc = (self.seed as u32) ^ 0xEC40_11E5;
        // Start of each utterance in samples since `origin`, once its cue is resolved.
        let mut starts: Vec<Option<usize>> = vec![None; self.script.len()];
        let mut out = Sent {
            onsets: vec![None; self.script.len()],
            ends: vec![None; self.script.len()],
            ..Sent::default()
        };
        let mut pcm = [0f32; FRAME];
        let mut packet = [0u8; 12 + FRAME];
        let mut stalled = false;
        for k in 0usize.. {
            if let (Some((into, hold)), false, Some(end)) =
                (self.stall, stalled, out.ends.first().copied().flatten())
            {
                let reply = heard
                    .lock()
                    .unwrap()
                    .packets
                    .iter()
                    .find(|p| !p.silent && p.at > end)
                    .map(|p| p.at);
                if reply.is_some_and(|r| origin.elapsed() >= r + into) {
                    stalled = true;
                    std::thread::sleep(hold);
                }
            }
            // Absolute deadlines: a late wake-up does not push the following packets back. The
            // frame is made at its deadline, not before, so that the echo of audio that arrived
            // within the frame is in it (a delay under 20 ms).
            let deadline = origin + FRAME_TIME * (k as u32 + 1);
            let now = Instant::now();
            if deadline > now {
                std::thread::sleep(deadline - now);
            } else if now - deadline > FRAME_TIME / 2 {
                out.late += 1;
            }
            let first = k * FRAME;
            self.resolve_cues(&mut starts, &out.ends, first, heard);
            // The caller's own speech, and which utterance is voiced in this frame.
            pcm.fill(0.0);
            let mut voiced = Vec::new();
            for (i, u) in self.script.iter().enumerate() {
                let Some(start) = starts[i] else { continue };
                if first + FRAME <= start || first >= start + u.audio.len() {
                    continue;
                }
                let mut own = [0i16; FRAME];
                for (n, slot) in own.iter_mut().enumerate() {
                    if let Some(&x) = (first + n).checked_sub(start).and_then(|j| u.audio.get(j)) {
                        *slot = x;
                    }
                }
                own.iter()
                    .zip(pcm.iter_mut())
                    .for_each(|(&x, p)| *p += f32::from(x));
                if frame_voiced(&own) {
                    voiced.push(i);
                }
            }
            // The echo: what the caller received, `delay` earlier, through the hybrid.
            {
                let h = heard.lock().unwrap();
                for (n, p) in pcm.iter_mut().enumerate() {
                    let at = first + n;
                    let e: f32 = taps
                        .iter()
                        .enumerate()
                        .filter_map(|(j, t)| {
                            let src = at.checked_sub(delay + j)?;
                            Some(t * h.timeline.get(src).copied().unwrap_or(0.0))
                        })
                        .sum();
                    *p += gain * e;
                }
            }
            if let Some(noise) = noise.as_mut() {
                pcm.iter_mut().for_each(|p| *p += noise.next());
            }
            let seq = k as u16;
            packet[0] = 0x80;
            packet[1] = if k == 0 { 0x80 } else { 0x00 };
            packet[2..4].copy_from_slice(&seq.to_be_bytes());
            packet[4..8].copy_from_slice(&((first as u32).to_be_bytes()));
            packet[8..12].copy_from_slice(&ssrc.to_be_bytes());
            for (c, &p) in packet[12..].iter_mut().zip(pcm.iter()) {
                *c = ulaw_encode(p.clamp(-32768.0, 32767.0) as i16);
            }
            let _ = socket.send_to(&packet, to);
            out.packets += 1;
            let at = origin.elapsed();
            for i in voiced {
                out.onsets[i].get_or_insert(at);
                out.ends[i] = Some(at);
            }
            if self.done(&starts, first + FRAME, at, heard) {
                break;
            }
        }
        out
    }

    /// Turn cues into start samples: `At` at once, `IntoReply` once the reply to the previous
    /// utterance has begun. A start is never in a frame already sent.
    fn resolve_cues(
        &self,
        starts: &mut [Option<usize>],
        ends: &[Option<Duration>],
        next: usize,
        heard: &Mutex<Heard>,
    ) {
        for i in 0..self.script.len() {
            if starts[i].is_some() {
                continue;
            }
            let at = match self.script[i].cue {
                Cue::At(d) => Some(d),
                Cue::IntoReply(d) => {
                    let prev_end = if i == 0 {
                        Some(Duration::ZERO)
                    } else {
                        ends[i - 1]
                    };
                    let sent_all = i == 0
                        || starts[i - 1]
                            .is_some_and(|s| next >= s + self.script[i - 1].audio.len());
                    let prev_end = prev_end.filter(|_| sent_all);
                    prev_end.and_then(|end| {
                        let h = heard.lock().unwrap();
                        h.packets
                            .iter()
                            .find(|p| !p.silent && p.at > end)
                            .map(|p| p.at + d)
                    })
                }
            };
            starts[i] = at.map(|t| (t.as_millis() as usize * PER_MS).max(next));
        }
    }

    /// The hang-up rule (see [`EchoLine::quiet`]), after the caller's audio up to sample `next`.
    fn done(
        &self,
        starts: &[Option<usize>],
        next: usize,
        now: Duration,
        heard: &Mutex<Heard>,
    ) -> bool {
        if now >= self.max_duration {
            return true;
        }
        let all_sent = self
            .script
            .iter()
            .zip(starts)
            .all(|(u, s)| s.is_some_and(|s| next >= s + u.audio.len()));
        if !all_sent {
            return false;
        }
        let last_end = starts
            .iter()
            .zip(&self.script)
            .map(|(s, u)| s.unwrap_or(0) + u.audio.len())
            .max()
            .unwrap_or(0);
        let last_end = Duration::from_millis((last_end / PER_MS) as u64);
        let h = heard.lock().unwrap();
        let last_voiced = h.packets.iter().rev().find(|p| !p.silent).map(|p| p.at);
        last_voiced.is_some_and(|t| t > last_end && now >= t + self.quiet)
    }
}

/// What the sending side kept.
#[derive(Debug, Default)]
struct Sent {
    onsets: Vec<Option<Duration>>,
    ends: Vec<Option<Duration>>,
    packets: usize,
    late: usize,
}

/// What the receiving side keeps: the packets, and the gateway's audio on the caller's
/// timeline (samples since the call's origin).
#[derive(Debug, Default)]
struct Heard {
    packets: Vec<Received>,
    timeline: Vec<f32>,
    /// The playout clock: an RTP timestamp and where on the timeline it plays.
    anchor: Option<(u32, usize)>,
}

/// The receiving side: every RTP packet until `stop`, its audio on the timeline where a phone's
/// jitter buffer plays it: by its RTP timestamp, from the first packet's arrival.
///
/// A phone plays what it receives on its own clock, so its echo stays at one delay from the
/// gateway's timestamps whenever a packet arrives. (Placed by arrival, the echo moved with this
/// thread's and the gateway's scheduling: a packet 10 ms late moved it for the rest of the call,
/// and on a loaded machine the echo path the canceller must learn changed under it.)
fn receive(socket: &UdpSocket, origin: Instant, heard: &Mutex<Heard>, stop: &AtomicBool) {
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok((len, _)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let at = origin.elapsed();
        let Some((seq, timestamp, payload)) = pcmu_payload(&buf[..len]) else {
            continue;
        };
        let mut h = heard.lock().unwrap();
        h.packets.push(Received {
            at,
            seq,
            silent: ulaw_is_silent(payload),
        });
        let arrival = at.as_millis() as usize * PER_MS;
        let played = |(ts0, pos0): (u32, usize)| {
            usize::try_from(pos0 as i64 + i64::from(timestamp.wrapping_sub(ts0) as i32)).ok()
        };
        // A timestamp far from the arrival is a new stream (or one the sender restarted): the
        // phone plays it from its arrival.
        let pos = match h.anchor.and_then(played) {
            Some(pos) if pos.abs_diff(arrival) < RESYNC => pos,
            _ => {
                h.anchor = Some((timestamp, arrival));
                arrival
            }
        };
        let end = pos + payload.len();
        if h.timeline.len() < end {
            h.timeline.resize(end, 0.0);
        }
        for (slot, &c) in h.timeline[pos..end].iter_mut().zip(payload) {
            *slot = f32::from(ulaw_decode(c));
        }
    }
}

/// How far (samples, 250 ms) a packet's timestamp may put it from its arrival before the
/// playout clock starts again from it.
const RESYNC: usize = 250 * PER_MS;

/// The sequence number, timestamp and payload of an RTP packet of PCMU (payload type 0).
fn pcmu_payload(pkt: &[u8]) -> Option<(u16, u32, &[u8])> {
    if pkt.len() < 12 || pkt[0] >> 6 != 2 || pkt[1] & 0x7f != 0 {
        return None;
    }
    let mut start = 12 + 4 * usize::from(pkt[0] & 0x0f);
    if pkt[0] & 0x10 != 0 {
        let words = u16::from_be_bytes([*pkt.get(start + 2)?, *pkt.get(start + 3)?]);
        start += 4 + 4 * usize::from(words);
    }
    Some((
        u16::from_be_bytes([pkt[2], pkt[3]]),
        u32::from_be_bytes([pkt[4], pkt[5], pkt[6], pkt[7]]),
        pkt.get(start..)?,
    ))
}

/// Taps scaled to unit energy: white audio through them keeps its power.
fn unit_energy(taps: &[f32]) -> Vec<f32> {
    let energy: f32 = taps.iter().map(|t| t * t).sum::<f32>().sqrt();
    taps.iter()
        .map(|t| t / energy.max(f32::MIN_POSITIVE))
        .collect()
}

/// Seeded white Gaussian noise (splitmix64 and Box-Muller: the run repeats for a seed).
struct Noise {
    state: u64,
    rms: f32,
}

impl Noise {
    fn new(seed: u64, rms: f32) -> Noise {
        Noise { state: seed, rms }
    }

    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn next(&mut self) -> f32 {
        let (u1, u2) = (self.uniform(), self.uniform());
        let g = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        self.rms * g as f32
    }
}

/// One packet the caller received.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Arrival, since the call's origin (just after the ACK).
    pub at: Duration,
    pub seq: u16,
    /// Below -45 dBFS RMS ([`ulaw_is_silent`]).
    pub silent: bool,
}

/// What the caller did and heard.
#[derive(Debug)]
pub struct EchoCall {
    pub ids: DialogIds,
    pub received: Vec<Received>,
    /// When the first packet carrying each utterance's speech was sent (None: never sent).
    pub onsets: Vec<Option<Duration>>,
    /// When the last packet carrying each utterance's speech was sent.
    pub ends: Vec<Option<Duration>>,
    /// Packets sent.
    pub sent: usize,
    /// Packets sent more than half a frame after their deadline.
    pub late_sends: usize,
    /// The gateway's response to the BYE.
    pub bye: Option<String>,
}

impl EchoCall {
    /// Arrival times of the voiced packets received.
    pub fn voiced(&self) -> Vec<Duration> {
        self.received
            .iter()
            .filter(|p| !p.silent)
            .map(|p| p.at)
            .collect()
    }

    /// The first voiced packet that arrived after `t`: the onset of a reply.
    pub fn first_voiced_after(&self, t: Duration) -> Option<&Received> {
        self.received.iter().find(|p| !p.silent && p.at > t)
    }

    /// Voiced packets among the `frames` packets from sequence number `first` on.
    pub fn voiced_in_seq_span(&self, first: u16, frames: usize) -> usize {
        self.received
            .iter()
            .filter(|p| !p.silent && usize::from(p.seq.wrapping_sub(first)) < frames)
            .count()
    }

    /// Onset of utterance `i`.
    pub fn onset(&self, i: usize) -> Duration {
        self.onsets[i].unwrap_or_else(|| panic!("utterance {i} was never sent"))
    }

    /// End of utterance `i` (its last voiced packet sent).
    pub fn end(&self, i: usize) -> Duration {
        self.ends[i].unwrap_or_else(|| panic!("utterance {i} was never sent"))
    }
}

/// The gateway's end record of call `call_id`, waiting up to `limit` for it to be written.
pub fn cdr_end(gw: &Gateway, call_id: &str, limit: Duration) -> Option<Value> {
    let until = Instant::now() + limit;
    loop {
        let found = cdr_end_records(gw)
            .into_iter()
            .find(|r| r["call_id"] == call_id);
        if found.is_some() || Instant::now() >= until {
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether 8 kHz samples are voiced once µ-law coded (not [`ulaw_is_silent`]).
pub fn frame_voiced(samples: &[i16]) -> bool {
    let codes: Vec<u8> = samples.iter().map(|&x| ulaw_encode(x)).collect();
    !ulaw_is_silent(&codes)
}

/// The samples of an 8 kHz µ-law WAV.
pub fn ulaw_wav(path: &Path) -> Vec<i16> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut at = 12;
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let size = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let body = &bytes[at + 8..(at + 8 + size).min(bytes.len())];
        if id == b"data" {
            return body.iter().map(|&c| ulaw_decode(c)).collect();
        }
        at += 8 + size + size % 2;
    }
    panic!("{}: no data chunk", path.display())
}

/// Committed caller speech `fixtures/callers/utterance_{n}.ulaw.wav` (see fixtures/README.md).
pub fn caller_utterance(n: u32) -> Arc<[i16]> {
    ulaw_wav(&workspace().join(format!("fixtures/callers/utterance_{n}.ulaw.wav"))).into()
}

/// `len` of `speech` from its first voiced frame on: a backchannel or an interruption of a
/// known length.
pub fn voiced_cut(speech: &[i16], len: Duration) -> Arc<[i16]> {
    let first = speech
        .chunks(FRAME)
        .position(frame_voiced)
        .expect("speech has a voiced frame");
    let start = first * FRAME;
    let n = len.as_millis() as usize * PER_MS;
    speech[start..(start + n).min(speech.len())].into()
}

/// The stub agent's reply as 20 ms frames: how many, and the index of the first voiced one.
pub fn stub_reply_frames() -> (usize, usize) {
    let path = workspace().join("gateway/assets/stub_reply.wav");
    let r = hound::WavReader::open(&path).unwrap();
    let samples: Vec<i16> = r.into_samples::<i16>().map(|s| s.unwrap()).collect();
    let first = samples
        .chunks(FRAME)
        .position(frame_voiced)
        .expect("the reply has a voiced frame");
    (samples.len().div_ceil(FRAME), first)
}
