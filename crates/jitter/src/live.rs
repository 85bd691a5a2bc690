//! The live inbound jitter buffer: the caller's RTP audio in, 20 ms frames out, on injected time.
//!
//! # Algorithm (adaptive playout, NetEq-like growth, Asterisk-like target)
//! Every packet's *transit* is `arrival − timestamp/8000`; its constant part is unknown and does
//! not matter, only differences do. A packet with RTP timestamp `ts` is due at
//! `ts/8000 + offset`; the buffer's *depth* is `offset − min transit`, the time a packet that came
//! by the fastest recent path waits before it plays.
//!
//! - **Target depth** = `p`-th percentile of the last `window_packets` transits minus their minimum,
//!   plus `margin`, clamped to `[min_depth, max_depth]` (Asterisk's `jitterbuf.c` drops the top
//!   3 % of 500 delays and adds 40 ms; ontime defaults to p97 of 250 packets + 20 ms).
//! - **Grows at once.** When the next packet is not there at its due time and nothing later is
//!   buffered (an underrun: the packet is late, not known lost), the buffer conceals one frame and
//!   moves `offset` 20 ms later instead of giving up on the packet (NetEq's *expand*), up to
//!   `max_depth`. When the depth is a frame or more below the target it also inserts a frame.
//!   A packet found after its due time by a `pop` that came late (a consumer that pops when
//!   packets arrive, not at every due time) grows the buffer the same way unless a later
//!   packet had arrived by its due time: when the consumer pops changes no decision. The packet
//!   played after such frames counts them (`PlayedFrame::inserted_before`): they were none of
//!   the sender's time.
//! - **Shrinks slowly.** At a talkspurt start (marker bit, or speech after silence or a timestamp
//!   jump) the offset is set straight to the target; inside a talkspurt it drops one frame's worth
//!   at most every `shrink_interval` while the depth stays at least a frame above target (the
//!   next frame is then due at once: two frames in one tick, as NetEq's *accelerate*). Above
//!   `max_depth` (a faster path appeared, so the depth grew without the buffer growing) it
//!   shrinks a frame per played packet until back under it.
//! - **Late**: a packet that arrives after its due time, or after its sequence number was passed,
//!   is discarded and counted (RFC 3611 §4.7.1 discards). **Missing**: when the next packet is absent
//!   at its due time but a later one is buffered, it is declared lost and concealed.
//! - **Silence**: after a comfort-noise packet (PT 13) or a long underrun at `max_depth`, empty
//!   slots are silence, not loss ([`Playout::Silence`]); the next speech packet starts a talkspurt.
//! - **Overflow**: packet slots are preallocated (`capacity_packets`); a packet that would not fit
//!   drops the oldest buffered ones (counted); playout re-anchors on the next one, as at a
//!   talkspurt start.
//! - **Discontinuities**: a transit change of more than [`RESYNC_THRESHOLD`] (1 s) between
//!   packets is a sender clock jump or path change, not jitter: when that packet reaches the
//!   playout point the delay history restarts from it and the offset re-anchors. A playout point
//!   more than 1 s behind `now` with nothing to play skips the empty slots at once.
//! - **Sequence numbers** are extended to 64 bits across wrap (RFC 3550 A.1); a jump of more than
//!   3000 or back by more than 100 is dropped unless the next packet continues it (re-sync). A new
//!   SSRC resets the stream (counted); counters are cumulative.
//!
//! Nothing here allocates after construction, reads a clock or logs: `push` and `pop` are safe on
//! the 20 ms tick path.

use std::time::Duration;

use ontime_rtp::{FRAME, FRAME_MS, PT_CN, PT_PCMA, PT_PCMU, SAMPLE_RATE_HZ};

use crate::burst_gap::{rfc3611_fraction, BurstGapCounter, BurstGapMetrics, GMIN_DEFAULT};
use crate::error::{Error, Result};
use crate::seq::{SeqExtender, MAX_DROPOUT, MAX_MISORDER};

/// Starting depth of the live buffer and depth of the replay model's fixed buffer unless
/// configured: 40 ms (two frames), one default for every model so that reports compare.
pub const DEFAULT_REPLAY_DEPTH: Duration = Duration::from_millis(40);

/// Largest RTP payload a slot holds: 40 ms of G.711 (a peer may send ptime up to 40), or a
/// 20 ms Opus packet up to 256 kbit/s (a VoIP peer sends 20-64).
pub const MAX_PAYLOAD_BYTES: usize = 4 * ontime_rtp::FRAME_BYTES;

/// Consecutive underrun concealments at `max_depth` after which the buffer assumes the sender
/// went silent without comfort noise (DTX) and reports silence instead of concealing.
pub const UNDERRUN_SILENCE_FRAMES: u32 = 5;

/// A transit change larger than this between consecutive packets is a timing discontinuity
/// (sender clock jump, path change, a stall of a second or more), not jitter: the delay history
/// restarts when that packet reaches the playout point (Asterisk's `resync_threshold` is 1000 ms).
pub const RESYNC_THRESHOLD: Duration = Duration::from_secs(1);

/// How far behind `now` the playout point may be before empty slots are skipped in one step.
const MAX_POP_LAG_US: i64 = 1_000_000;

/// Sequence numbers behind the playout point remembered, to tell duplicates from late packets
/// (more than RFC 3550's `MAX_MISORDER` of 100).
const HISTORY_BITS: u64 = 128;

/// Configuration of the adaptive jitter buffer (live, and the replay's adaptive model).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JitterConfig {
    /// Smallest playout depth the buffer adapts down to.
    pub min_depth: Duration,
    /// Largest playout depth the buffer grows to (RFC 3611 "JB abs max").
    pub max_depth: Duration,
    /// Depth used for the first talkspurt, before any delay history exists.
    pub initial_depth: Duration,
    /// Added on top of the delay percentile to form the target depth.
    pub margin: Duration,
    /// Packets of delay history the target is computed over.
    pub window_packets: usize,
    /// Percentile of the delay history (0..=100) the target covers.
    pub percentile: u8,
    /// Least time between two one-frame shrinks inside a talkspurt.
    pub shrink_interval: Duration,
    /// Preallocated packet slots (bounds the buffered span; overflow drops the oldest).
    pub capacity_packets: usize,
    /// The stream's RTP clock: 8000 Hz (G.711, G.722) unless set (48000 for Opus).
    pub clock_rate_hz: u32,
}

impl Default for JitterConfig {
    fn default() -> Self {
        Self {
            min_depth: Duration::from_millis(20),
            max_depth: Duration::from_millis(200),
            initial_depth: DEFAULT_REPLAY_DEPTH,
            margin: Duration::from_millis(20),
            window_packets: 250,
            percentile: 97,
            shrink_interval: Duration::from_millis(500),
            capacity_packets: 32,
            clock_rate_hz: SAMPLE_RATE_HZ,
        }
    }
}

impl JitterConfig {
    /// Checks that the configuration can work.
    pub fn validate(&self) -> Result<()> {
        if self.min_depth > self.max_depth {
            return Err(Error::InvalidConfig("min_depth exceeds max_depth"));
        }
        if self.initial_depth < self.min_depth || self.initial_depth > self.max_depth {
            return Err(Error::InvalidConfig(
                "initial_depth outside [min_depth, max_depth]",
            ));
        }
        if self.window_packets == 0 {
            return Err(Error::InvalidConfig("window_packets must be at least 1"));
        }
        if self.percentile > 100 {
            return Err(Error::InvalidConfig("percentile must be within 0..=100"));
        }
        if self.capacity_packets < 2 {
            return Err(Error::InvalidConfig("capacity_packets must be at least 2"));
        }
        if self.clock_rate_hz < 1000 || !self.clock_rate_hz.is_multiple_of(1000) {
            return Err(Error::InvalidConfig(
                "clock_rate_hz must be a whole number of kHz",
            ));
        }
        Ok(())
    }
}

/// One received RTP packet as the buffer needs it (the gateway fills it from `ontime-rtp`'s parse).
#[derive(Debug, Clone, Copy)]
pub struct RtpPacketInfo<'a> {
    /// RTP sequence number.
    pub sequence_number: u16,
    /// RTP timestamp (8 kHz units).
    pub timestamp: u32,
    /// Marker bit: first packet of a talkspurt for audio (RFC 3551 §4.1).
    pub marker: bool,
    /// Synchronisation source.
    pub ssrc: u32,
    /// Payload type (PCMU, PCMA or CN; telephone-event belongs elsewhere).
    pub payload_type: u8,
    /// Payload bytes; copied into a preallocated slot.
    pub payload: &'a [u8],
}

/// What [`JitterBuffer::push`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// Stored for playout under this 64-bit sequence index.
    Buffered {
        /// The extended sequence index the packet will be played under.
        index: u64,
    },
    /// Same sequence number as a packet already buffered or played.
    Duplicate,
    /// Its sequence number was already passed: discarded as late.
    Late,
    /// A sequence jump outside RFC 3550 A.1's window; dropped unless the next packet follows it.
    OutOfRange,
}

/// Why a concealment frame is played.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConcealReason {
    /// The packet is missing and a later one is buffered: declared lost.
    Missing,
    /// The packet arrived after its due time and was discarded.
    Late,
    /// The buffer grows: the packet may still come and play one frame later.
    Stretch,
    /// Nothing is buffered and the buffer is at its maximum depth.
    Underrun,
}

/// A frame handed out by [`JitterBuffer::pop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlayedFrame<'a> {
    /// Payload bytes (G.711 for PCMU/PCMA; the noise level byte(s) for CN).
    pub payload: &'a [u8],
    /// Payload type of the packet.
    pub payload_type: u8,
    /// RTP sequence number.
    pub sequence_number: u16,
    /// RTP timestamp.
    pub timestamp: u32,
    /// 64-bit sequence index (as returned by [`PushOutcome::Buffered`]).
    pub index: u64,
    /// Frames the buffer inserted just before this packet while it grew to wait for it
    /// ([`ConcealReason::Stretch`]): the packet came, so they were none of the sender's time.
    /// 0 when the packet started a talkspurt (a gap in the sender's timestamps is its time).
    pub inserted_before: u32,
}

/// The buffer's answer to "what plays now?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Playout<'a> {
    /// Play this packet's payload.
    Frame(PlayedFrame<'a>),
    /// Play one frame of concealment (packet-loss concealment), for the reason given.
    Conceal(ConcealReason),
    /// One frame of silence or comfort noise inside a DTX gap: not a loss.
    Silence,
    /// Nothing is due at this time; ask again at [`JitterBuffer::poll_timeout`].
    Nothing,
}

/// Cumulative counters of a [`JitterBuffer`] (across SSRC resets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitterCounters {
    /// Packets accepted by `push` (errors excluded).
    pub pushed: u64,
    /// Packets played.
    pub played: u64,
    /// Packets discarded for arriving after their due time or sequence position.
    pub late: u64,
    /// Buffered packets dropped to make room (oldest first).
    pub overflow: u64,
    /// Buffered packets dropped when the stream was reset (new SSRC or re-sync).
    pub flushed: u64,
    /// Packets dropped for a sequence jump outside RFC 3550 A.1's window.
    pub out_of_range: u64,
    /// Packets whose sequence number had already been received.
    pub duplicates: u64,
    /// Sequence numbers passed without a packet that has not arrived since.
    pub lost: u64,
    /// Concealment frames played because a packet was missing.
    pub conceal_missing: u64,
    /// Concealment frames played because a packet arrived late.
    pub conceal_late: u64,
    /// Concealment frames inserted to grow the depth.
    pub stretch_frames: u64,
    /// Concealment or silence frames played while empty at maximum depth.
    pub underrun_frames: u64,
    /// One-frame shrinks inside talkspurts.
    pub shrink_frames: u64,
    /// Silence frames inside DTX / comfort-noise gaps.
    pub silence_frames: u64,
    /// Times the playout point jumped over more than 1 s of empty slots at once (the consumer
    /// stopped popping, or timestamps jumped).
    pub timeline_skips: u64,
    /// Streams reset because the SSRC changed.
    pub ssrc_resets: u64,
    /// Streams restarted after a confirmed sequence jump (RFC 3550 A.1 re-sync).
    pub resyncs: u64,
}

impl JitterCounters {
    /// All discards in the RFC 3611 sense: late, overflow, flushed and out-of-range (duplicates
    /// excluded).
    pub fn discarded(&self) -> u64 {
        self.late + self.overflow + self.flushed + self.out_of_range
    }
}

/// Raw values for an RFC 3611 §4.7 VoIP-metrics block; the gateway maps them onto `ontime-rtp`'s
/// XR block. The signal, R-factor, MOS and round-trip fields are not the jitter buffer's to know.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VoipMetricsSnapshot {
    /// Packets expected (RFC 3550 A.3, summed over streams).
    pub expected: u64,
    /// Packets lost (never arrived).
    pub lost: u64,
    /// Packets discarded (late, overflow, flushed, out of range; not duplicates).
    pub discarded: u64,
    /// Lost over expected ×256, capped at 255.
    pub loss_rate_rfc3611: u8,
    /// Discarded over expected ×256, capped at 255.
    pub discard_rate_rfc3611: u8,
    /// Burst/gap metrics with Gmin = [`Self::gmin`].
    pub burst_gap: BurstGapMetrics,
    /// Gmin used for the burst/gap metrics.
    pub gmin: u8,
    /// Current nominal delay: the depth a packet arriving on the fastest recent path waits.
    pub jb_nominal_ms: u16,
    /// Highest depth the buffer has reached.
    pub jb_maximum_ms: u16,
    /// The configured maximum depth (the buffer never exceeds it).
    pub jb_abs_max_ms: u16,
    /// Always true: this buffer is adaptive (RFC 3611 §4.7.7 JBA = 3 when mapped).
    pub adaptive: bool,
}

#[derive(Debug, Clone)]
struct Slot {
    occupied: bool,
    index: u64,
    ext_ts: i64,
    timestamp: u32,
    sequence_number: u16,
    marker: bool,
    payload_type: u8,
    len: usize,
    arrival_us: i64,
    transit_us: i64,
    /// Its transit jumped by more than [`RESYNC_THRESHOLD`]: the sender's clock or path changed.
    resync: bool,
    bytes: [u8; MAX_PAYLOAD_BYTES],
}

impl Slot {
    const EMPTY: Slot = Slot {
        occupied: false,
        index: 0,
        ext_ts: 0,
        timestamp: 0,
        sequence_number: 0,
        marker: false,
        payload_type: 0,
        len: 0,
        arrival_us: 0,
        transit_us: 0,
        resync: false,
        bytes: [0; MAX_PAYLOAD_BYTES],
    };

    /// Timestamp units the packet covers: G.711 has one sample per byte; anything else is
    /// taken as one frame of `frame_step` units.
    fn samples(&self, frame_step: i64) -> i64 {
        match self.payload_type {
            PT_PCMU | PT_PCMA if self.len > 0 => self.len as i64,
            _ => frame_step,
        }
    }
}

#[derive(Debug, Clone)]
struct Stream {
    ssrc: u32,
    seq: SeqExtender,
    first_index: u64,
    ts_ref: i64,
    next_index: u64,
    play_ts: i64,
    offset_us: i64,
    step: i64,
    /// RTP clock in Hz.
    clock_hz: i64,
    in_silence: bool,
    anchored: Option<u64>,
    /// Bit k set: index `next_index − 1 − k` arrived before or after it was passed.
    arrived: u128,
    last_shrink_us: i64,
    consecutive_underrun: u32,
    bad_seq: Option<u16>,
    /// The index the buffer last grew to wait for, and by how many frames in a row.
    stretched_for: Option<(u64, u32)>,
}

impl Stream {
    fn expected(&self) -> u64 {
        self.seq.highest().map_or(0, |h| h + 1 - self.first_index)
    }

    fn extend_ts(&mut self, ts: u32) -> i64 {
        // RTP timestamps wrap at 2^32; unwrap by signed 32-bit distance from the reference.
        let ext = self.ts_ref + i64::from(ts.wrapping_sub(self.ts_ref as u32) as i32);
        self.ts_ref = self.ts_ref.max(ext);
        ext
    }

    fn due_us(&self, ext_ts: i64) -> i64 {
        ts_to_us(ext_ts, self.clock_hz) + self.offset_us
    }

    /// Timestamp units in one 20 ms frame.
    fn frame_step(&self) -> i64 {
        self.clock_hz / 1000 * i64::from(FRAME_MS)
    }
}

fn ts_to_us(ext_ts: i64, clock_hz: i64) -> i64 {
    ext_ts * 1_000_000 / clock_hz
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn ms_u16(v_us: i64) -> u16 {
    (v_us.max(0) / 1000).min(i64::from(u16::MAX)) as u16
}

const FRAME_US: i64 = FRAME.as_micros() as i64;

/// The live, adaptive inbound jitter buffer (see the module docs for the algorithm).
///
/// ```
/// use std::time::Duration;
/// use ontime_jitter::live::{JitterBuffer, JitterConfig, Playout, RtpPacketInfo};
///
/// let mut jb = JitterBuffer::new(JitterConfig::default())?;
/// let payload = [0xFFu8; 160];
/// let pkt = RtpPacketInfo {
///     sequence_number: 7, timestamp: 1000, marker: true, ssrc: 1, payload_type: 0,
///     payload: &payload,
/// };
/// jb.push(&pkt, Duration::from_millis(5))?;
/// assert_eq!(jb.pop(Duration::from_millis(10)), Playout::Nothing); // not due yet
/// let due = jb.poll_timeout().unwrap(); // 5 ms + 40 ms initial depth
/// assert_eq!(due, Duration::from_millis(45));
/// assert!(matches!(jb.pop(due), Playout::Frame(f) if f.sequence_number == 7));
/// # Ok::<(), ontime_jitter::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct JitterBuffer {
    cfg: JitterConfig,
    slots: Box<[Slot]>,
    buffered: usize,
    stream: Option<Stream>,
    counters: JitterCounters,
    burst_gap: BurstGapCounter,
    expected_before: u64,
    transits: Box<[i64]>,
    scratch: Box<[i64]>,
    transit_len: usize,
    transit_pos: usize,
    last_transit_us: Option<i64>,
    max_depth_seen_us: i64,
}

impl JitterBuffer {
    /// A buffer with `cfg`; allocates its slot pool and delay history once, here.
    pub fn new(cfg: JitterConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            slots: vec![Slot::EMPTY; cfg.capacity_packets].into_boxed_slice(),
            buffered: 0,
            stream: None,
            counters: JitterCounters::default(),
            burst_gap: BurstGapCounter::new(GMIN_DEFAULT),
            expected_before: 0,
            transits: vec![0; cfg.window_packets].into_boxed_slice(),
            scratch: vec![0; cfg.window_packets].into_boxed_slice(),
            transit_len: 0,
            transit_pos: 0,
            last_transit_us: None,
            max_depth_seen_us: 0,
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &JitterConfig {
        &self.cfg
    }

    /// Cumulative counters.
    pub fn counters(&self) -> JitterCounters {
        self.counters
    }

    /// Packets currently held.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// The payload of the packet that plays next, when it is already buffered: after a
    /// [`Playout::Conceal`] for a missing packet, the one after it, whose forward error
    /// correction (Opus in-band FEC) can rebuild the lost frame. `None` when it has not arrived.
    pub fn next_payload(&self) -> Option<&[u8]> {
        let st = self.stream.as_ref()?;
        let slot = &self.slots[self.slot_of(st.next_index)];
        (slot.occupied && slot.index == st.next_index).then(|| &slot.bytes[..slot.len])
    }

    /// Current playout depth (for the `ontime_jitter_depth_seconds` gauge); zero before the
    /// first packet.
    pub fn depth(&self) -> Duration {
        Duration::from_micros(self.depth_us().max(0) as u64)
    }

    /// Current target depth computed from the delay history.
    pub fn target_depth(&mut self) -> Duration {
        Duration::from_micros(self.target_us().max(0) as u64)
    }

    /// When the next frame is due (`pop` before it returns [`Playout::Nothing`]); `None` before
    /// the first packet.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let st = self.stream.as_ref()?;
        let due = st.due_us(st.play_ts).max(0);
        Some(Duration::from_micros(due as u64))
    }

    /// Values for an RFC 3611 VoIP-metrics block.
    pub fn voip_metrics(&self) -> VoipMetricsSnapshot {
        let expected = self.expected();
        let discarded = self.counters.discarded();
        VoipMetricsSnapshot {
            expected,
            lost: self.counters.lost,
            discarded,
            loss_rate_rfc3611: rfc3611_fraction(self.counters.lost, expected),
            discard_rate_rfc3611: rfc3611_fraction(discarded, expected),
            burst_gap: self.burst_gap.metrics(),
            gmin: self.burst_gap.gmin().min(255) as u8,
            jb_nominal_ms: ms_u16(self.depth_us()),
            jb_maximum_ms: ms_u16(self.max_depth_seen_us),
            jb_abs_max_ms: ms_u16(us(self.cfg.max_depth)),
            adaptive: true,
        }
    }

    /// Packets expected so far, summed over streams (RFC 3550 A.3).
    pub fn expected(&self) -> u64 {
        self.expected_before + self.stream.as_ref().map_or(0, Stream::expected)
    }

    fn depth_us(&self) -> i64 {
        match &self.stream {
            Some(st) if self.transit_len > 0 => st.offset_us - self.min_transit_us(),
            _ => 0,
        }
    }

    fn min_transit_us(&self) -> i64 {
        self.transits[..self.transit_len]
            .iter()
            .copied()
            .min()
            .unwrap_or(0)
    }

    fn target_us(&mut self) -> i64 {
        let (lo, hi) = (us(self.cfg.min_depth), us(self.cfg.max_depth));
        let n = self.transit_len;
        if n == 0 {
            return us(self.cfg.initial_depth);
        }
        let min = self.min_transit_us();
        let scratch = &mut self.scratch[..n];
        scratch.copy_from_slice(&self.transits[..n]);
        // Nearest-rank percentile: the smallest value with at least p % of samples at or below.
        let rank = (usize::from(self.cfg.percentile) * n)
            .div_ceil(100)
            .clamp(1, n);
        let (_, q, _) = scratch.select_nth_unstable(rank - 1);
        (*q - min + us(self.cfg.margin)).clamp(lo, hi)
    }

    /// Whether `transit_us` is a discontinuity against the delay history's timeline (further
    /// than [`RESYNC_THRESHOLD`] from its minimum). Push flags such a packet and re-anchoring
    /// restarts the history on it: one test, so the two agree.
    fn off_history(&self, transit_us: i64) -> bool {
        self.transit_len > 0 && (transit_us - self.min_transit_us()).abs() > us(RESYNC_THRESHOLD)
    }

    fn record_transit(&mut self, transit_us: i64) {
        let w = self.transits.len();
        self.transits[self.transit_pos] = transit_us;
        self.transit_pos = (self.transit_pos + 1) % w;
        self.transit_len = (self.transit_len + 1).min(w);
    }

    fn resync_pending(&self) -> bool {
        self.slots.iter().any(|s| s.occupied && s.resync)
    }

    fn slot_of(&self, index: u64) -> usize {
        (index % self.slots.len() as u64) as usize
    }

    /// Stores a packet that arrived at `arrival` (any monotonic origin shared with `pop`).
    ///
    /// Errors only for a payload larger than [`MAX_PAYLOAD_BYTES`]; every other oddity is
    /// counted and reported in the [`PushOutcome`].
    pub fn push(&mut self, pkt: &RtpPacketInfo<'_>, arrival: Duration) -> Result<PushOutcome> {
        if pkt.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(Error::PayloadTooLarge {
                len: pkt.payload.len(),
                max: MAX_PAYLOAD_BYTES,
            });
        }
        self.counters.pushed += 1;
        let arrival_us = us(arrival);
        match &self.stream {
            None => self.start_stream(pkt.ssrc, pkt.sequence_number, pkt.timestamp),
            Some(st) if st.ssrc != pkt.ssrc => {
                self.counters.ssrc_resets += 1;
                self.reset_stream(true);
                self.start_stream(pkt.ssrc, pkt.sequence_number, pkt.timestamp);
            }
            Some(_) => {}
        }
        let st = self.stream.as_mut().expect("ok: stream started above");
        let highest = st
            .seq
            .highest()
            .expect("ok: started streams have a highest index");
        let udelta = pkt.sequence_number.wrapping_sub(highest as u16);
        // RFC 3550 A.1: forward by < MAX_DROPOUT or back by <= MAX_MISORDER is the same stream;
        // anything else is a jump that must be confirmed by the next packet.
        if (MAX_DROPOUT..=u16::MAX - MAX_MISORDER + 1).contains(&udelta) {
            if st.bad_seq == Some(pkt.sequence_number) {
                self.counters.resyncs += 1;
                self.reset_stream(false);
                self.start_stream(pkt.ssrc, pkt.sequence_number, pkt.timestamp);
            } else {
                st.bad_seq = Some(pkt.sequence_number.wrapping_add(1));
                self.counters.out_of_range += 1;
                return Ok(PushOutcome::OutOfRange);
            }
        }
        let st = self.stream.as_mut().expect("ok: stream exists");
        st.bad_seq = None;
        let index = st.seq.extend(pkt.sequence_number);
        let ext_ts = st.extend_ts(pkt.timestamp);
        let transit_us = arrival_us - ts_to_us(ext_ts, i64::from(self.cfg.clock_rate_hz));
        // A discontinuity against the previous packet, or against the timeline the history
        // holds: packets of two timelines can arrive interleaved (a reordered packet from before
        // a jump), and the previous packet's timeline need not be the one the playout follows.
        // Whatever is flagged re-anchors at the playout point, which restarts the history.
        let resync = self
            .last_transit_us
            .is_some_and(|last| (transit_us - last).abs() > us(RESYNC_THRESHOLD))
            || self.off_history(transit_us);
        // The reference for the next packet's discontinuity test (`last_transit_us`) moves only
        // with packets that stay on the timeline or are kept: a duplicate (its sequence number
        // already seen, whatever timestamp it carries) or a late packet on a jumped timeline is
        // discarded, and taking it as the reference would let the next packet of that timeline
        // in unflagged, its transit in the history, and the depth measured against the wrong
        // timeline.
        // While a discontinuity waits in the buffer, new transits belong to the new timeline:
        // they enter the history when it is re-anchored, not before.
        let record = !resync && !self.resync_pending();
        let st = self.stream.as_mut().expect("ok: stream exists");

        if index < st.next_index {
            let behind = st.next_index - index;
            let bit = 1u128 << (behind - 1).min(HISTORY_BITS - 1);
            if behind <= HISTORY_BITS && st.arrived & bit != 0 {
                self.counters.duplicates += 1;
                return Ok(PushOutcome::Duplicate);
            }
            if behind <= HISTORY_BITS {
                st.arrived |= bit;
                // It was declared lost when passed; it is a discard now (RFC 3611 §4.7.1).
                self.counters.lost = self.counters.lost.saturating_sub(1);
            }
            self.counters.late += 1;
            if !resync {
                self.last_transit_us = Some(transit_us);
            }
            if record {
                self.record_transit(transit_us);
            }
            return Ok(PushOutcome::Late);
        }
        let cap = self.slots.len() as u64;
        let mut resync = resync;
        if index >= st.next_index + cap {
            let drop_to = index + 1 - cap;
            // A discontinuity dropped with nothing buffered after it is this packet's: it is on
            // the new timeline, which the history must not take in before it is re-anchored.
            resync |= self.drop_oldest_until(drop_to);
        }
        let i = self.slot_of(index);
        let slot = &mut self.slots[i];
        if slot.occupied && slot.index == index {
            self.counters.duplicates += 1;
            return Ok(PushOutcome::Duplicate);
        }
        *slot = Slot {
            occupied: true,
            index,
            ext_ts,
            timestamp: pkt.timestamp,
            sequence_number: pkt.sequence_number,
            marker: pkt.marker,
            payload_type: pkt.payload_type,
            len: pkt.payload.len(),
            arrival_us,
            transit_us,
            resync,
            bytes: slot.bytes,
        };
        slot.bytes[..pkt.payload.len()].copy_from_slice(pkt.payload);
        self.buffered += 1;
        self.last_transit_us = Some(transit_us);
        if record {
            self.record_transit(transit_us);
        }
        if self.stream.as_ref().is_some_and(|s| s.anchored.is_none()) {
            self.anchor_first(index);
        }
        Ok(PushOutcome::Buffered { index })
    }

    fn start_stream(&mut self, ssrc: u32, seq: u16, ts: u32) {
        let mut ext = SeqExtender::new();
        let first = ext.extend(seq);
        self.stream = Some(Stream {
            ssrc,
            seq: ext,
            first_index: first,
            ts_ref: i64::from(ts),
            next_index: first,
            play_ts: i64::from(ts),
            offset_us: 0,
            step: i64::from(self.cfg.clock_rate_hz / 1000 * FRAME_MS),
            clock_hz: i64::from(self.cfg.clock_rate_hz),
            in_silence: false,
            anchored: None,
            arrived: 0,
            last_shrink_us: i64::MIN / 2,
            consecutive_underrun: 0,
            bad_seq: None,
            stretched_for: None,
        });
    }

    /// The first packet of a stream anchors the playout clock at `arrival + initial_depth`.
    fn anchor_first(&mut self, index: u64) {
        let i = self.slot_of(index);
        let (ext_ts, transit) = (self.slots[i].ext_ts, self.slots[i].transit_us);
        let initial = us(self.cfg.initial_depth);
        let st = self.stream.as_mut().expect("ok: caller checked");
        st.offset_us = transit + initial;
        st.play_ts = ext_ts;
        st.anchored = Some(index);
        // No shrink before one interval of playing: the first talkspurt starts at initial depth.
        st.last_shrink_us = self.slots[i].arrival_us;
        self.max_depth_seen_us = self.max_depth_seen_us.max(initial);
    }

    /// Ends the current stream: buffered packets are flushed (counted when `count_flushed`;
    /// re-sync and SSRC change both count them) and the delay history is kept only for re-sync.
    fn reset_stream(&mut self, new_source: bool) {
        if let Some(st) = self.stream.take() {
            self.expected_before += st.expected();
        }
        for slot in self.slots.iter_mut().filter(|s| s.occupied) {
            slot.occupied = false;
            self.counters.flushed += 1;
        }
        self.buffered = 0;
        if new_source {
            // A new source has a new path: its delay history starts over.
            self.transit_len = 0;
            self.transit_pos = 0;
            self.last_transit_us = None;
        }
    }

    /// Overflow: passes every index below `drop_to`, dropping buffered packets (counted) and
    /// declaring the missing ones lost. Returns whether a dropped packet's discontinuity found
    /// no later buffered packet to carry it: the packet being stored must carry it then.
    #[must_use]
    fn drop_oldest_until(&mut self, drop_to: u64) -> bool {
        let Some(st) = self.stream.as_mut() else {
            return false;
        };
        let mut carry_resync = false;
        while st.next_index < drop_to {
            let i = (st.next_index % self.slots.len() as u64) as usize;
            let slot = &mut self.slots[i];
            let present = slot.occupied && slot.index == st.next_index;
            if present {
                slot.occupied = false;
                self.buffered -= 1;
                self.counters.overflow += 1;
                st.step = slot.samples(st.frame_step());
                if slot.resync {
                    // The discontinuity still has to be re-anchored: hand it to the next one.
                    slot.resync = false;
                    carry_resync = true;
                }
            } else {
                self.counters.lost += 1;
            }
            self.burst_gap.record(false);
            st.arrived = (st.arrived << 1) | u128::from(present);
            st.next_index += 1;
        }
        if carry_resync {
            let next = st.next_index;
            if let Some(slot) = self
                .slots
                .iter_mut()
                .filter(|s| s.occupied && s.index >= next)
                .min_by_key(|s| s.index)
            {
                slot.resync = true;
                carry_resync = false;
            }
        }
        // The playout point stays: the next packet's timestamp is now ahead of it, so pop
        // re-anchors there as at a talkspurt start (overflow means the depth was wrong).
        carry_resync
    }

    /// Whether a packet after `index` is buffered that arrived by `at_us`.
    fn later_arrived_by(&self, index: u64, at_us: i64) -> bool {
        self.slots
            .iter()
            .any(|s| s.occupied && s.index > index && s.arrival_us <= at_us)
    }

    /// The earliest buffered packet after the playout point, as (index, ext_ts).
    fn earliest_buffered(&self) -> Option<(u64, i64)> {
        self.slots
            .iter()
            .filter(|s| s.occupied)
            .map(|s| (s.index, s.ext_ts))
            .min_by_key(|&(index, _)| index)
    }

    /// What plays at `now`. Call it at [`Self::poll_timeout`] (or on a 20 ms tick) and again
    /// until it returns [`Playout::Nothing`]: each call yields at most one frame's worth.
    pub fn pop(&mut self, now: Duration) -> Playout<'_> {
        let now_us = us(now);
        loop {
            let Some(st) = self.stream.as_ref() else {
                return Playout::Nothing;
            };
            if now_us < st.due_us(st.play_ts) {
                return Playout::Nothing;
            }
            let i = self.slot_of(st.next_index);
            let front = &self.slots[i];
            let present = front.occupied && front.index == st.next_index;
            let lag = now_us - st.due_us(st.play_ts);
            if lag > MAX_POP_LAG_US && (!present || front.ext_ts > st.play_ts) {
                // The playout point is far behind with nothing to play there (the caller did not
                // pop for a long time, or timestamps jumped): skip the empty slots at once rather
                // than emitting one silence or concealment frame per 20 ms of backlog.
                let st = self.stream.as_mut().expect("ok: checked above");
                let step_us = ts_to_us(st.step, st.clock_hz).max(1);
                st.play_ts += (lag / step_us) * st.step;
                self.counters.timeline_skips += 1;
                continue;
            }
            if !present {
                match self.pop_missing() {
                    Some(out) => return out,
                    None => continue,
                }
            }
            let (index, ext_ts, pt, marker) =
                (front.index, front.ext_ts, front.payload_type, front.marker);
            // A packet the current offset would hold longer than the maximum depth has a
            // timestamp that jumped against its arrival: re-anchor on it whatever it carries.
            let held_too_long =
                st.due_us(ext_ts) - front.arrival_us > us(self.cfg.max_depth) + FRAME_US;
            let talkspurt_start = front.resync
                || (st.anchored != Some(index)
                    && (held_too_long
                        || (pt != PT_CN && (marker || st.in_silence || ext_ts > st.play_ts))));
            if talkspurt_start {
                self.reanchor(i, now_us);
                continue;
            }
            if ext_ts > st.play_ts {
                // A CN packet later than the playout point: the gap before it is silence.
                return self.pop_silence();
            }
            if front.arrival_us > st.due_us(ext_ts) {
                // It came after its due time, but nothing looked in between. Had pop run at
                // the due time it would have found nothing and grown to wait (unless a later
                // packet had come by then: that declares this one lost). Growing now makes
                // every decision the same whenever the consumer pops.
                let due = st.due_us(ext_ts);
                if !self.later_arrived_by(index, due)
                    && self.depth_us() + FRAME_US <= us(self.cfg.max_depth)
                {
                    return self.stretch();
                }
                let consumes_slot = ext_ts + front.samples(st.frame_step()) > st.play_ts;
                self.pass_front(i, false);
                self.counters.late += 1;
                if consumes_slot {
                    self.counters.conceal_late += 1;
                    return Playout::Conceal(ConcealReason::Late);
                }
                continue;
            }
            let depth = self.depth_us();
            if pt != PT_CN && st.anchored != Some(index) && depth + FRAME_US <= self.target_us() {
                return self.stretch();
            }
            return self.play_front(i, now_us);
        }
    }

    fn pop_silence(&mut self) -> Playout<'static> {
        let st = self.stream.as_mut().expect("ok: pop checked");
        st.play_ts += st.step;
        self.counters.silence_frames += 1;
        Playout::Silence
    }

    fn stretch(&mut self) -> Playout<'static> {
        let st = self.stream.as_mut().expect("ok: pop checked");
        st.offset_us += FRAME_US;
        st.stretched_for = match st.stretched_for {
            Some((index, n)) if index == st.next_index => Some((index, n + 1)),
            _ => Some((st.next_index, 1)),
        };
        self.counters.stretch_frames += 1;
        self.max_depth_seen_us = self.max_depth_seen_us.max(self.depth_us());
        Playout::Conceal(ConcealReason::Stretch)
    }

    /// The next packet is not here at its due time. `None`: an index was passed whose time had
    /// already gone by (it consumed no frame), so pop looks again.
    fn pop_missing(&mut self) -> Option<Playout<'static>> {
        let st = self.stream.as_ref().expect("ok: pop checked");
        let later = self.earliest_buffered();
        if st.in_silence && later.is_none() {
            return Some(self.pop_silence());
        }
        if let Some((later_index, later_ts)) = later {
            // A later packet is here: this one is lost (or so late it will be discarded).
            let gap = i64::try_from(later_index - st.next_index).unwrap_or(i64::MAX / 4);
            let expected_ts = later_ts - gap * st.step;
            // In silence nothing is concealed: the later packet starts the next talkspurt.
            let consumes_slot = !st.in_silence && expected_ts + st.step > st.play_ts;
            let st = self.stream.as_mut().expect("ok: pop checked");
            st.arrived <<= 1;
            st.next_index += 1;
            self.counters.lost += 1;
            self.burst_gap.record(false);
            if consumes_slot {
                st.play_ts += st.step;
                self.counters.conceal_missing += 1;
                return Some(Playout::Conceal(ConcealReason::Missing));
            }
            return None;
        }
        // Underrun: the packet is late, not known lost. Grow (NetEq expand) while allowed.
        if self.depth_us() + FRAME_US <= us(self.cfg.max_depth) {
            let st = self.stream.as_mut().expect("ok: pop checked");
            st.consecutive_underrun = 0;
            return Some(self.stretch());
        }
        let st = self.stream.as_mut().expect("ok: pop checked");
        st.play_ts += st.step;
        st.consecutive_underrun += 1;
        self.counters.underrun_frames += 1;
        if st.consecutive_underrun >= UNDERRUN_SILENCE_FRAMES {
            // The sender has likely gone quiet without comfort noise (DTX).
            st.in_silence = true;
            return Some(Playout::Silence);
        }
        Some(Playout::Conceal(ConcealReason::Underrun))
    }

    /// Removes the front packet, records it and advances the playout point.
    fn pass_front(&mut self, i: usize, played: bool) {
        let st = self.stream.as_mut().expect("ok: pop checked");
        let slot = &mut self.slots[i];
        slot.occupied = false;
        self.buffered -= 1;
        self.burst_gap.record(played);
        st.arrived = (st.arrived << 1) | 1;
        st.next_index += 1;
        st.step = slot.samples(st.frame_step());
        st.play_ts = st.play_ts.max(slot.ext_ts + st.step);
    }

    fn play_front(&mut self, i: usize, now_us: i64) -> Playout<'_> {
        self.pass_front(i, true);
        self.counters.played += 1;
        let target = self.target_us();
        let depth = self.depth_us();
        let shrink_interval = us(self.cfg.shrink_interval);
        let min_depth = us(self.cfg.min_depth);
        let max_depth = us(self.cfg.max_depth);
        let slot = &self.slots[i];
        let st = self.stream.as_mut().expect("ok: pop checked");
        let inserted_before = match st.stretched_for.take() {
            Some((index, n)) if index == slot.index => n,
            _ => 0,
        };
        st.consecutive_underrun = 0;
        st.in_silence = slot.payload_type == PT_CN;
        let above_max = depth - FRAME_US >= max_depth;
        if slot.payload_type != PT_CN
            && depth - FRAME_US >= target.max(min_depth)
            && (above_max || now_us - st.last_shrink_us >= shrink_interval)
        {
            st.offset_us -= FRAME_US;
            st.last_shrink_us = now_us;
            self.counters.shrink_frames += 1;
        }
        Playout::Frame(PlayedFrame {
            payload: &slot.bytes[..slot.len],
            payload_type: slot.payload_type,
            sequence_number: slot.sequence_number,
            timestamp: slot.timestamp,
            index: slot.index,
            inserted_before,
        })
    }

    /// A talkspurt starts at slot `i`: jump the offset to the target (never discarding the
    /// packet itself unless that would exceed `max_depth`).
    fn reanchor(&mut self, i: usize, now_us: i64) {
        let t0 = self.slots[i].transit_us;
        let threshold = us(RESYNC_THRESHOLD);
        let discontinuity = self.slots[i].resync || self.off_history(t0);
        if discontinuity {
            // A timing discontinuity: the history describes the old timeline. Restart it from
            // the buffered packets of the new one (those within the threshold of this one).
            self.transit_len = 0;
            self.transit_pos = 0;
            let start = self.slots[i].index;
            for index in start..start + self.slots.len() as u64 {
                let k = self.slot_of(index);
                let slot = &mut self.slots[k];
                if !slot.occupied || slot.index != index {
                    continue;
                }
                if (slot.transit_us - t0).abs() > threshold {
                    break;
                }
                slot.resync = false;
                let t = slot.transit_us;
                self.record_transit(t);
            }
        }
        let target = self.target_us();
        let min_transit = self.min_transit_us();
        let max = us(self.cfg.max_depth);
        let slot = &self.slots[i];
        let st = self.stream.as_mut().expect("ok: pop checked");
        let wanted = (min_transit + target).max(slot.transit_us);
        st.offset_us = wanted.min(min_transit + max);
        st.play_ts = slot.ext_ts;
        st.anchored = Some(slot.index);
        st.in_silence = false;
        st.consecutive_underrun = 0;
        // A talkspurt starts: what was played while waiting was the sender's time.
        st.stretched_for = None;
        st.last_shrink_us = now_us;
        self.max_depth_seen_us = self.max_depth_seen_us.max(self.depth_us());
    }
}
