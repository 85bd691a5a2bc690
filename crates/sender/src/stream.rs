//! One outgoing stream: its producer handle (agent side) and its state on the tick.

use std::fmt;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use ontime_rtp::{Packetizer, FRAME_BYTES, MAX_FRAME_PACKET_BYTES};
use ontime_srtp::{SrtpContext, MAX_SRTP_TAG_LEN};
use ringbuf::traits::{Consumer, Observer, Producer, Split};
use ringbuf::{HeapCons, HeapProd, HeapRb};

use crate::dtmf::{DtmfPlayer, DtmfSequence, DtmfSlot, EventPacket};
use crate::os::{self, RawSocketAddr};
use crate::stats::{SenderCounters, TickCounters};
use crate::{Error, Result};

/// Identifies a stream within one sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a sink learns about each packet besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    /// The stream the packet belongs to.
    pub stream: StreamId,
    /// The sender slot it was built for.
    pub slot: u64,
    /// The slot's time since the sender's origin.
    pub scheduled: Duration,
    /// Sent as catch-up after a late wake (a later slot was already due).
    pub catch_up: bool,
    /// The payload is all silence (between utterances, an underrun, or a DTMF gap or pause).
    pub silence: bool,
    /// An RFC 4733 telephone-event packet (see [`crate::Sender::send_dtmf`]), not audio.
    pub telephone_event: bool,
}

/// Where a stream's packets go instead of a UDP socket: tests, recorders, other transports.
///
/// `send_packet` runs on the real-time tick: it must not block, lock or allocate. Whatever it
/// spends delays every stream.
pub trait PacketSink: Send + 'static {
    /// Take one RTP packet (header + 160-byte G.711 payload, or + 4-byte telephone-event payload
    /// while DTMF plays), or the SRTP packet when the stream has [`StreamConfig::srtp`]. An
    /// error is counted as a send error.
    fn send_packet(&mut self, packet: &[u8], info: PacketInfo) -> io::Result<()>;
}

/// Where a stream sends.
#[non_exhaustive]
pub enum StreamOutput {
    /// Send with `sendto(MSG_DONTWAIT)` on this socket (usually the call's RTP socket, so the
    /// caller sees symmetric RTP) to `remote`. The socket's blocking mode is left alone.
    Udp {
        /// The socket to send from.
        socket: Arc<UdpSocket>,
        /// The caller's RTP address (change it later with [`crate::Sender::set_remote`]).
        remote: SocketAddr,
    },
    /// Hand packets to a sink.
    Sink(Box<dyn PacketSink>),
}

impl fmt::Debug for StreamOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Udp { socket, remote } => f
                .debug_struct("Udp")
                .field("local", &socket.local_addr().ok())
                .field("remote", remote)
                .finish(),
            Self::Sink(_) => f.write_str("Sink(..)"),
        }
    }
}

/// How to send one stream. Build with [`StreamConfig::new`], then adjust fields.
#[derive(Debug)]
#[non_exhaustive]
pub struct StreamConfig {
    /// The stream's RTP state: payload type (PCMU 0 or PCMA 8), SSRC, next sequence number and
    /// timestamp. The sender sets the marker only on the first packet: it sends continuously,
    /// silence included, so there is no talkspurt gap to flag (RFC 3551 §4.1).
    pub packetizer: Packetizer,
    /// Where packets go.
    pub output: StreamOutput,
    /// Capacity of the audio ring in bytes (default 30 s of G.711: bots may send faster than
    /// real time and the sender paces it).
    pub ring_capacity_bytes: usize,
    /// Marks that may wait for their audio to play (default 256).
    pub mark_capacity: usize,
    /// Events that may wait for the producer to read them (default 256).
    pub event_capacity: usize,
    /// Sent frames kept for [`StreamProducer::try_sent_frame`] (default 0: no copy is kept).
    /// A recorder that wants exactly what went on the wire, silence included, sets this to a
    /// second or more of frames and drains it more often than that.
    pub sent_tap_frames: usize,
    /// Protect every packet with SRTP under this context (default `None`: plain RTP). The
    /// context holds the local master key (SDES: ours, from the SDP answer's or offer's
    /// `a=crypto` line). Audio and telephone-event packets alike are encrypted and tagged in
    /// the tick's packet buffer, in place: no allocation, no lock. The sent tap still gets the
    /// plaintext audio. A packet SRTP refuses (it cannot, short of a key worn out after 2^48
    /// packets) is not sent, and counted in [`StreamStats::srtp_errors`] and as a send error.
    pub srtp: Option<SrtpContext>,
    /// The payload of one silent frame, for a codec without a silence byte (Opus: a whole
    /// encoded frame, `ontime_rtp::opus::silence_frame`). `None` (the default) fills with the
    /// payload type's silence byte ([`ontime_rtp::silence_byte`]). A stream whose silence is a
    /// frame must be pushed whole frames only: the tick never pads a partial one.
    pub silence_frame: Option<[u8; FRAME_BYTES]>,
}

impl StreamConfig {
    /// Default audio ring: 30 s of 8 kHz G.711.
    pub const DEFAULT_RING_CAPACITY_BYTES: usize = 30 * 50 * FRAME_BYTES;

    /// A stream with default ring sizes.
    pub fn new(packetizer: Packetizer, output: StreamOutput) -> Self {
        Self {
            packetizer,
            output,
            ring_capacity_bytes: Self::DEFAULT_RING_CAPACITY_BYTES,
            mark_capacity: 256,
            event_capacity: 256,
            sent_tap_frames: 0,
            srtp: None,
            silence_frame: None,
        }
    }
}

/// Something the tick reports back to a stream's producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// The mark's position was reached: every byte pushed before [`StreamProducer::mark`] has been
    /// sent (`cleared: false`), or was discarded by [`StreamProducer::clear`] (`cleared: true`).
    Mark {
        /// The id given to `mark`.
        id: u64,
        /// The audio before the mark was cleared rather than played.
        cleared: bool,
    },
}

/// One frame as the tick sent it (see [`StreamConfig::sent_tap_frames`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentFrame {
    /// The slot's time since the sender's origin ([`crate::Sender::origin`]).
    pub scheduled: Duration,
    /// The G.711 payload sent, silence fill included.
    pub payload: [u8; FRAME_BYTES],
}

/// A snapshot of one stream's accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamStats {
    /// Slots served for this stream.
    pub ticks: u64,
    /// Slots served more than [`crate::LATE_TICK_THRESHOLD`] late.
    pub late_ticks: u64,
    /// Frames that ran short mid-utterance and were filled with silence, counted once the
    /// utterance's audio resumed (a gap the utterance ends in is a pause, not an underrun).
    pub underruns: u64,
    /// Packets sent as catch-up after a late wake.
    pub catchup_packets: u64,
    /// Packets sent successfully.
    pub packets_sent: u64,
    /// Sends that failed.
    pub send_errors: u64,
    /// The latest any of this stream's packets was sent.
    pub worst_lateness: Duration,
    /// Audio bytes queued and not yet sent.
    pub queued_bytes: usize,
    /// Sent frames the tap had no room for (the producer did not drain it in time).
    pub tap_dropped: u64,
    /// RFC 4733 telephone-event packets sent successfully (also counted in `packets_sent`).
    pub dtmf_packets_sent: u64,
    /// DTMF digits played out: counted when a digit's third and last end packet has been sent
    /// (the gateway's `ontime_dtmf_sent_total`).
    pub dtmf_digits_sent: u64,
    /// DTMF sequences dropped whole because the stream's queue had no room for them behind what
    /// was still playing (more than [`crate::MAX_DTMF_SYMBOLS`] symbols at once).
    pub dtmf_dropped: u64,
    /// Packets SRTP refused to protect (see [`StreamConfig::srtp`]; also counted in
    /// `send_errors`).
    pub srtp_errors: u64,
    /// The stream has been removed from the tick.
    pub removed: bool,
}

/// State shared between a producer and the tick, all atomics.
#[derive(Debug, Default)]
pub(crate) struct StreamShared {
    pub(crate) counters: TickCounters,
    /// Byte position up to which queued audio is discarded (barge-in).
    pub(crate) clear_to: AtomicU64,
    /// Byte position where the last finished utterance ended.
    pub(crate) utterance_end: AtomicU64,
    /// The producer was dropped: the tick removes the stream.
    pub(crate) closed: AtomicBool,
    /// The tick no longer serves the stream.
    pub(crate) removed: AtomicBool,
    /// Sent frames the tap had no room for.
    pub(crate) tap_dropped: AtomicU64,
    /// Telephone-event packets sent.
    pub(crate) dtmf_packets_sent: AtomicU64,
    /// Digits whose last end packet has been sent.
    pub(crate) dtmf_digits_sent: AtomicU64,
    /// DTMF sequences with no room in the stream's queue.
    pub(crate) dtmf_dropped: AtomicU64,
    /// Packets SRTP refused to protect.
    pub(crate) srtp_errors: AtomicU64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingMark {
    id: u64,
    position: u64,
}

/// The agent's side of a stream: push G.711 audio, end utterances, clear on barge-in, set marks
/// and read back events. Dropping it removes the stream at the next tick.
///
/// All methods are wait-free (SPSC rings and atomics); call them from any one thread or task.
pub struct StreamProducer {
    id: StreamId,
    audio: HeapProd<u8>,
    marks: HeapProd<PendingMark>,
    mark_capacity: usize,
    events: HeapCons<StreamEvent>,
    sent: Option<HeapCons<SentFrame>>,
    shared: Arc<StreamShared>,
    pushed: u64,
}

impl fmt::Debug for StreamProducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamProducer")
            .field("id", &self.id)
            .field("pushed", &self.pushed)
            .field("queued", &self.audio.occupied_len())
            .finish()
    }
}

impl StreamProducer {
    /// The stream's id (for [`crate::Sender::remove_stream`] and logs).
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Queue G.711 bytes (of the stream's payload type) as part of the current utterance.
    /// Returns how many were accepted: fewer than given when the ring is full.
    pub fn push(&mut self, g711: &[u8]) -> usize {
        let accepted = self.audio.push_slice(g711);
        self.pushed += accepted as u64;
        accepted
    }

    /// Free space in the ring, in bytes.
    pub fn vacant_bytes(&self) -> usize {
        self.audio.vacant_len()
    }

    /// Audio queued and not yet sent, in bytes.
    pub fn queued_bytes(&self) -> usize {
        self.audio.occupied_len()
    }

    /// The current utterance is complete: once its audio has been sent, an empty ring is silence
    /// between utterances, not an underrun. A last partial frame is padded with silence.
    pub fn end_utterance(&mut self) {
        self.shared.utterance_end.store(self.pushed, Release);
    }

    /// Barge-in: discard everything queued so far. The tick applies it before the next packet it
    /// builds (within 20 ms); audio pushed after this call is kept. Pending marks come back as
    /// `StreamEvent::Mark { cleared: true }`; the stream is then between utterances.
    pub fn clear(&mut self) {
        self.shared.utterance_end.store(self.pushed, Release);
        self.shared.clear_to.store(self.pushed, Release);
    }

    /// Report `id` back as a [`StreamEvent::Mark`] once all audio pushed so far has been sent.
    pub fn mark(&mut self, id: u64) -> Result<()> {
        self.marks
            .try_push(PendingMark {
                id,
                position: self.pushed,
            })
            .map_err(|_| Error::MarkQueueFull {
                stream: self.id.0,
                capacity: self.mark_capacity,
            })
    }

    /// The next event from the tick, if any.
    pub fn try_event(&mut self) -> Option<StreamEvent> {
        self.events.try_pop()
    }

    /// The oldest sent frame not yet taken, when the stream keeps them
    /// ([`StreamConfig::sent_tap_frames`]). Frames the tap had no room for are dropped and
    /// counted in [`StreamStats::tap_dropped`].
    pub fn try_sent_frame(&mut self) -> Option<SentFrame> {
        self.sent.as_mut()?.try_pop()
    }

    /// This stream's accounting so far.
    pub fn stats(&self) -> StreamStats {
        let c = &self.shared.counters;
        StreamStats {
            ticks: c.ticks.load(Relaxed),
            late_ticks: c.late_ticks.load(Relaxed),
            underruns: c.underruns.load(Relaxed),
            catchup_packets: c.catchup_packets.load(Relaxed),
            packets_sent: c.packets_sent.load(Relaxed),
            send_errors: c.send_errors.load(Relaxed),
            worst_lateness: Duration::from_nanos(c.worst_lateness_ns.load(Relaxed)),
            queued_bytes: self.audio.occupied_len(),
            tap_dropped: self.shared.tap_dropped.load(Relaxed),
            dtmf_packets_sent: self.shared.dtmf_packets_sent.load(Relaxed),
            dtmf_digits_sent: self.shared.dtmf_digits_sent.load(Relaxed),
            dtmf_dropped: self.shared.dtmf_dropped.load(Relaxed),
            srtp_errors: self.shared.srtp_errors.load(Relaxed),
            removed: self.shared.removed.load(Acquire),
        }
    }
}

impl Drop for StreamProducer {
    fn drop(&mut self) {
        self.shared.closed.store(true, Release);
    }
}

pub(crate) enum Output {
    Udp {
        socket: Arc<UdpSocket>,
        remote: RawSocketAddr,
    },
    Sink(Box<dyn PacketSink>),
}

/// A stream as the tick owns it.
pub(crate) struct StreamState {
    pub(crate) id: StreamId,
    pub(crate) shared: Arc<StreamShared>,
    audio: HeapCons<u8>,
    marks: HeapCons<PendingMark>,
    events: HeapProd<StreamEvent>,
    sent: Option<HeapProd<SentFrame>>,
    packetizer: Packetizer,
    output: Output,
    silence: [u8; FRAME_BYTES],
    /// Bytes taken out of the audio ring so far (sent or cleared).
    popped: u64,
    /// Short frames mid-utterance not yet known to be holes (see `serve_slot`).
    pending_underruns: u32,
    /// DTMF queued by `Sender::send_dtmf`, played instead of the audio.
    dtmf: DtmfPlayer,
    /// Protects each packet in place when the call negotiated SRTP.
    srtp: Option<SrtpContext>,
}

/// Build both halves of a stream (off the tick: this allocates the rings).
pub(crate) fn new_stream(
    id: StreamId,
    config: StreamConfig,
) -> Result<(StreamState, StreamProducer)> {
    let payload_type = config.packetizer.payload_type();
    let silence = match (config.silence_frame, ontime_rtp::silence_byte(payload_type)) {
        (Some(frame), _) => frame,
        (None, Some(byte)) => [byte; FRAME_BYTES],
        (None, None) => return Err(Error::UnsupportedPayloadType(payload_type)),
    };
    if config.ring_capacity_bytes < FRAME_BYTES {
        return Err(Error::RingTooSmall {
            bytes: config.ring_capacity_bytes,
        });
    }
    let (mut audio_prod, mut audio_cons) = HeapRb::<u8>::new(config.ring_capacity_bytes).split();
    let mark_capacity = config.mark_capacity.max(1);
    let (mut marks_prod, mut marks_cons) = HeapRb::<PendingMark>::new(mark_capacity).split();
    let (mut events_prod, mut events_cons) =
        HeapRb::<StreamEvent>::new(config.event_capacity.max(1)).split();
    // Write every slot once here, off the tick, so the tick never takes the first-touch page
    // fault of a fresh allocation (which under memory pressure can mean direct reclaim).
    while audio_prod.push_slice(&[0u8; 4096]) > 0 {}
    audio_cons.clear();
    while marks_prod
        .try_push(PendingMark { id: 0, position: 0 })
        .is_ok()
    {}
    marks_cons.clear();
    while events_prod
        .try_push(StreamEvent::Mark {
            id: 0,
            cleared: false,
        })
        .is_ok()
    {}
    events_cons.clear();
    let (sent_prod, sent_cons) = if config.sent_tap_frames > 0 {
        let (mut prod, mut cons) = HeapRb::<SentFrame>::new(config.sent_tap_frames).split();
        let blank = SentFrame {
            scheduled: Duration::ZERO,
            payload: [0; FRAME_BYTES],
        };
        while prod.try_push(blank).is_ok() {}
        cons.clear();
        (Some(prod), Some(cons))
    } else {
        (None, None)
    };
    let shared = Arc::new(StreamShared::default());
    let output = match config.output {
        StreamOutput::Udp { socket, remote } => Output::Udp {
            socket,
            remote: RawSocketAddr::new(remote),
        },
        StreamOutput::Sink(sink) => Output::Sink(sink),
    };
    let state = StreamState {
        id,
        shared: Arc::clone(&shared),
        audio: audio_cons,
        marks: marks_cons,
        events: events_prod,
        sent: sent_prod,
        packetizer: config.packetizer,
        output,
        silence,
        popped: 0,
        pending_underruns: 0,
        dtmf: DtmfPlayer::default(),
        srtp: config.srtp,
    };
    let producer = StreamProducer {
        id,
        audio: audio_prod,
        marks: marks_prod,
        mark_capacity,
        events: events_cons,
        sent: sent_cons,
        shared,
        pushed: 0,
    };
    Ok((state, producer))
}

impl StreamState {
    pub(crate) fn set_remote(&mut self, remote: RawSocketAddr) {
        if let Output::Udp { remote: r, .. } = &mut self.output {
            *r = remote;
        }
    }

    /// Queue DTMF behind whatever is still playing; counted as dropped when it does not fit.
    pub(crate) fn queue_dtmf(&mut self, sequence: &DtmfSequence) {
        if !self.dtmf.enqueue(sequence) {
            self.shared.dtmf_dropped.fetch_add(1, Relaxed);
        }
    }

    /// The producer is gone: remove at this tick.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.load(Acquire)
    }

    /// Serve one slot: apply a pending clear, then send a DTMF telephone-event packet, DTMF
    /// silence, or one frame of audio (or silence), and report marks reached. Allocation-free,
    /// lock-free.
    pub(crate) fn serve_slot(
        &mut self,
        slot: u64,
        scheduled: Duration,
        lateness: Duration,
        catch_up: bool,
        scratch: &mut SlotScratch,
        global: &SenderCounters,
    ) {
        // Barge-in: drop everything queued before the clear position. It does not stop DTMF:
        // a digit cut short would reach the far end as a different key press or none.
        let clear_to = self.shared.clear_to.load(Acquire);
        if clear_to > self.popped {
            let skip = (clear_to - self.popped).min(self.audio.occupied_len() as u64) as usize;
            let skipped = self.audio.skip(skip);
            self.popped += skipped as u64;
            self.report_marks(true, global);
        }

        // While DTMF plays the audio ring is not touched: the agent's queued audio waits and
        // resumes after the sequence, and the wait is neither consumed nor an underrun (the
        // agent did not fall behind; the sender chose not to play). Every slot still sends
        // exactly one packet and moves the media timestamp on by one frame, so audio resumes
        // on the clock the caller has heard elapse.
        let mut telephone_event = None;
        let silence = match self.dtmf.next_slot(
            self.packetizer.next_timestamp(),
            self.packetizer.timestamp_step(),
        ) {
            DtmfSlot::Audio => self.take_audio(scratch, global),
            DtmfSlot::Silence => {
                scratch.payload = self.silence;
                true
            }
            DtmfSlot::Event(event) => {
                // The tap gets silence for this slot: no audio went out, and a recorder keeps
                // one frame per slot.
                scratch.payload = self.silence;
                telephone_event = Some(event);
                false
            }
        };
        if silence {
            global.silence_packets.fetch_add(1, Relaxed);
        }
        if let Some(tap) = self.sent.as_mut() {
            // A 160-byte copy into a ring filled at creation: no allocation on the tick.
            let frame = SentFrame {
                scheduled,
                payload: scratch.payload,
            };
            if tap.try_push(frame).is_err() {
                self.shared.tap_dropped.fetch_add(1, Relaxed);
            }
        }

        // The scratch packet buffer is MAX_FRAME_PACKET_BYTES = header + one frame, the
        // largest packet either writer can need, plus room for the SRTP tag; a failure would
        // be a bug, counted as a send error.
        let written = match &telephone_event {
            None => self
                .packetizer
                .write_frame(&scratch.payload, &mut scratch.packet),
            Some(event) => write_event(&mut self.packetizer, event, &mut scratch.packet),
        };
        // SRTP in place in the same buffer, after the packetizer has moved on: a packet that
        // cannot be protected is skipped, never sent in the clear, and its sequence number is
        // not reused (that would reuse keystream).
        let written = match (written, self.srtp.as_mut()) {
            (Ok(len), Some(srtp)) => srtp.protect(&mut scratch.packet, len).map_err(|_| {
                self.shared.srtp_errors.fetch_add(1, Relaxed);
            }),
            (Ok(len), None) => Ok(len),
            (Err(_), _) => Err(()),
        };
        let sent = match written {
            Ok(len) => self.send(
                &scratch.packet[..len],
                PacketInfo {
                    stream: self.id,
                    slot,
                    scheduled,
                    catch_up,
                    silence,
                    telephone_event: telephone_event.is_some(),
                },
            ),
            Err(_) => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        };
        let counters = &self.shared.counters;
        counters.record_tick(lateness);
        if catch_up {
            counters.catchup_packets.fetch_add(1, Relaxed);
            global.clock.catchup_packets.fetch_add(1, Relaxed);
        }
        if sent.is_ok() {
            counters.packets_sent.fetch_add(1, Relaxed);
            global.clock.packets_sent.fetch_add(1, Relaxed);
            if telephone_event.is_some() {
                self.shared.dtmf_packets_sent.fetch_add(1, Relaxed);
            }
        } else {
            counters.send_errors.fetch_add(1, Relaxed);
            global.clock.send_errors.fetch_add(1, Relaxed);
        }
        // A digit counts once its last end packet has gone, whether or not that copy's send
        // failed (failures are counted above); the earlier copies carried the same end.
        if telephone_event.is_some_and(|e| e.completes_digit) {
            self.shared.dtmf_digits_sent.fetch_add(1, Relaxed);
            global.dtmf_digits_sent.fetch_add(1, Relaxed);
        }
        self.report_marks(false, global);
    }

    /// Take one frame of audio into the scratch payload, padding with silence, and account for
    /// underruns. Returns whether the frame is all silence (nothing was queued).
    fn take_audio(&mut self, scratch: &mut SlotScratch, global: &SenderCounters) -> bool {
        let taken = self.audio.pop_slice(&mut scratch.payload[..]);
        self.popped += taken as u64;
        // Underruns are known only in hindsight: a frame that ran short mid-utterance is a hole
        // the caller heard if the utterance's audio resumes afterwards, and a pause if the
        // utterance ends instead (an agent that streams in real time and marks no end, or
        // marks it late). So short frames wait in `pending_underruns` until audio is taken
        // again (counted) or the utterance is closed over them (dropped).
        if taken > 0 && self.pending_underruns > 0 {
            let n = u64::from(self.pending_underruns);
            self.shared.counters.underruns.fetch_add(n, Relaxed);
            global.clock.underruns.fetch_add(n, Relaxed);
            self.pending_underruns = 0;
        }
        let utterance_end = self.shared.utterance_end.load(Acquire);
        if taken < FRAME_BYTES {
            scratch.payload[taken..].copy_from_slice(&self.silence[taken..]);
            // Mid-utterance: audio beyond the last finished utterance has been queued and the
            // ring ran dry before the frame was full.
            if self.popped > utterance_end {
                self.pending_underruns = self.pending_underruns.saturating_add(1);
            }
        }
        if self.popped <= utterance_end {
            self.pending_underruns = 0;
        }
        taken == 0
    }

    fn send(&mut self, packet: &[u8], info: PacketInfo) -> io::Result<()> {
        match &mut self.output {
            Output::Udp { socket, remote } => {
                os::send_to_nonblocking(socket.as_ref(), packet, remote).map(|_| ())
            }
            Output::Sink(sink) => sink.send_packet(packet, info),
        }
    }

    /// Report every mark whose position has been reached.
    fn report_marks(&mut self, cleared: bool, global: &SenderCounters) {
        while let Some(mark) = self.marks.try_peek().copied() {
            if mark.position > self.popped {
                break;
            }
            self.marks.skip(1);
            let event = StreamEvent::Mark {
                id: mark.id,
                cleared,
            };
            if self.events.try_push(event).is_err() {
                global.events_dropped.fetch_add(1, Relaxed);
            }
        }
    }
}

/// Write one telephone-event packet on the stream's SSRC and sequence, and move the media
/// timestamp on by the frame the event replaces.
fn write_event(
    packetizer: &mut Packetizer,
    event: &EventPacket,
    out: &mut [u8],
) -> ontime_rtp::Result<usize> {
    let mut payload = [0u8; ontime_rtp::dtmf::TELEPHONE_EVENT_BYTES];
    event.payload.write(&mut payload)?;
    let len = packetizer.write_event(
        event.payload_type,
        event.marker,
        event.timestamp,
        &payload,
        out,
    )?;
    packetizer.skip_frames(1);
    Ok(len)
}

/// The tick's packet buffer: the largest packet either writer makes, and room for SRTP's tag.
const SCRATCH_PACKET_BYTES: usize = MAX_FRAME_PACKET_BYTES + MAX_SRTP_TAG_LEN;

/// Per-tick scratch buffers, allocated once with the engine.
pub(crate) struct SlotScratch {
    pub(crate) payload: [u8; FRAME_BYTES],
    pub(crate) packet: [u8; SCRATCH_PACKET_BYTES],
}

impl Default for SlotScratch {
    fn default() -> Self {
        Self {
            payload: [0; FRAME_BYTES],
            packet: [0; SCRATCH_PACKET_BYTES],
        }
    }
}
