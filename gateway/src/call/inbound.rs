//! The caller's media as the gateway receives it, sans-IO: fed datagrams with their source and
//! arrival time, it checks the source, parses RTP (every invalid packet is dropped with a reason),
//! keeps RFC 3550 receiver statistics for RTCP, turns RFC 4733 events into digits, and buffers
//! audio in the live jitter buffer, from which [`InboundMedia::pop`] plays one 20 ms frame.
//!
//! Source policy (media belongs to the caller): packets are accepted only from the IP the caller's
//! SDP named. The SDP's own address always wins: a packet from it is accepted at once and takes
//! the stream back from any other port. Another port of that IP (a trunk behind a
//! port-translating firewall) is latched only after a run of [`LATCH_RUN`] valid packets with
//! one SSRC while the current source has been quiet for [`LATCH_QUIET`]; until then its packets
//! are dropped as `latch_pending`. Everything else is dropped as `wrong_source`. What remains:
//! a sender on the caller's own IP (same host or NAT) that speaks before a NATed caller's first
//! packet can still take that stream; SRTP closes this, since it cannot produce valid packets.
//!
//! Symmetric RTP (opt-in, [`InboundMedia::use_symmetric_rtp`]), for trunks whose SDP names a
//! private address their packets never come from: until the call has a source, a run of
//! [`LATCH_RUN`] valid packets with one SSRC from any one address latches the stream there (the
//! packets before are `latch_pending`). Once the call has a source, other addresses are
//! `wrong_source` as without it; the SDP's own address still wins.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ontime_jitter::{
    ConcealReason, JitterBuffer, JitterConfig, Playout, PushOutcome, RtpPacketInfo,
};
use ontime_rtp::dtmf::DtmfTracker;
use ontime_rtp::stats::ReceiverStats;
use ontime_rtp::{
    classify, parse_rtp, Codec, PacketKind, FRAME, PT_CN, SAMPLES_PER_FRAME,
    WIDEBAND_SAMPLES_PER_FRAME,
};
use ontime_sip::NegotiatedMedia;

use super::codec::LineDecoder;
use super::stats::CallStats;

/// Valid packets in a row, one SSRC, from another port of the caller's IP before it is latched.
pub const LATCH_RUN: u32 = 5;
/// How long the current source must have been silent before another port may be latched.
pub const LATCH_QUIET: Duration = Duration::from_secs(1);

/// What one datagram was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboundOutcome {
    /// Audio (or comfort noise) accepted into the jitter buffer.
    Audio,
    /// Audio accepted, and the source was latched to this address.
    Latched(SocketAddr),
    /// A telephone-event packet; a digit when one completed.
    Dtmf(Option<char>),
    /// RTCP multiplexed on the RTP port (RFC 5761): ignored here, RTCP has its own port.
    Rtcp,
    /// Dropped, with the `reason` label of `ontime_rtp_invalid_packets_total`.
    Dropped(&'static str),
}

/// Where a frame [`InboundMedia::pop`] plays comes from, on the caller's timeline or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameOrigin {
    /// Decoded from the packet with this RTP timestamp (comfort noise included), after
    /// `inserted_before` [`FrameOrigin::Stretch`] frames that waited for it.
    Packet {
        /// The packet's RTP timestamp.
        timestamp: u32,
        /// Frames played just before while the buffer grew to wait for this packet: it came,
        /// so they were none of the caller's time.
        inserted_before: u32,
    },
    /// Stands in for a packet of the caller's that did not come or came too late: concealment,
    /// or the caller's silence (DTX, a stream that stopped). The caller's time passed.
    InPlaceOf,
    /// Played while the jitter buffer grew by a frame to wait for the next packet: none of the
    /// caller's time if that packet then comes (it says so), the caller's quiet if not.
    Stretch,
}

impl FrameOrigin {
    /// The RTP timestamp of the packet the frame was decoded from.
    pub fn timestamp(self) -> Option<u32> {
        match self {
            Self::Packet { timestamp, .. } => Some(timestamp),
            Self::InPlaceOf | Self::Stretch => None,
        }
    }
}

/// Totals for the CDR and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboundCounters {
    /// Valid RTP packets accepted.
    pub received: u64,
    /// Discarded by the jitter buffer (late, overflow, flushed, out of range).
    pub discarded: u64,
    /// Never arrived.
    pub lost: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Dropped datagrams (invalid or wrong source).
    pub dropped: u64,
    /// Lost Opus packets rebuilt from the next packet's in-band FEC.
    pub fec_recovered: u64,
}

/// The caller's inbound media.
pub struct InboundMedia {
    media: NegotiatedMedia,
    sdp_ip: Option<IpAddr>,
    latched: Option<SocketAddr>,
    /// When the current source (SDP address or latched) was last heard.
    source_heard: Option<Instant>,
    /// Another port's run of consistent packets: address, SSRC, packets.
    candidate: Option<(SocketAddr, u32, u32)>,
    /// Symmetric RTP: any address may become the source while the call has none.
    symmetric: bool,
    origin: Instant,
    first_audio: Option<Instant>,
    frames_played: u64,
    jitter: JitterBuffer,
    stats: Option<(u32, ReceiverStats)>,
    dtmf: DtmfTracker,
    decoder: LineDecoder,
    /// The sequence number after the last frame decoded: a late packet with it can still be
    /// decoded (unheard) to keep a stateful decoder in step with the caller's encoder.
    decode_next: Option<u16>,
    last_frame: [i16; SAMPLES_PER_FRAME],
    concealed_run: u32,
    received: u64,
    dropped: u64,
    /// Late packets decoded unheard to keep a stateful decoder in step.
    late_decoded: u64,
    /// Lost Opus packets rebuilt from the next packet's in-band FEC.
    fec_recovered: u64,
    published: Published,
}

/// What this call already added to the global counters.
#[derive(Debug, Default)]
struct Published {
    discarded: u64,
    lost: u64,
}

/// The caller's jitter buffer: the default's, with a 10 ms margin over the delay percentile
/// instead of 20 ms. This buffer feeds the VAD, the recording and the bot, not an ear, and every
/// millisecond it holds is on the turn latency: with the default margin a clean path's target
/// sits a hair above one frame (p97 spread + 20 ms), so the buffer never shrinks below two frames
/// (40 ms); with 10 ms it runs at one frame (20 ms) until the path's jitter asks for more.
/// The buffer runs on the codec's RTP clock (48 kHz for Opus).
fn inbound_jitter_config(codec: Codec) -> JitterConfig {
    JitterConfig {
        margin: Duration::from_millis(10),
        clock_rate_hz: codec.rtp_clock_hz(),
        ..JitterConfig::default()
    }
}

fn jitter_buffer(codec: Codec) -> JitterBuffer {
    // ok: the configuration is valid for every codec (`inbound_jitter_config` test).
    JitterBuffer::new(inbound_jitter_config(codec)).expect("ok: inbound jitter config is valid")
}

impl InboundMedia {
    /// Media for a call whose SDP named `sdp_ip`, starting at `now`.
    pub fn new(media: NegotiatedMedia, sdp_ip: Option<IpAddr>, now: Instant) -> InboundMedia {
        InboundMedia {
            media,
            sdp_ip,
            latched: None,
            source_heard: None,
            candidate: None,
            symmetric: false,
            origin: now,
            first_audio: None,
            frames_played: 0,
            jitter: jitter_buffer(media.codec),
            stats: None,
            dtmf: DtmfTracker::new(),
            decoder: LineDecoder::new(media.codec),
            decode_next: None,
            last_frame: [0; SAMPLES_PER_FRAME],
            concealed_run: 0,
            received: 0,
            dropped: 0,
            late_decoded: 0,
            fec_recovered: 0,
            published: Published::default(),
        }
    }

    /// Add this call's new discards and losses to `stats`. The buffer's `lost` can fall (a
    /// concealed packet that turns up late becomes a discard), so only increases are counted.
    pub fn count_jitter(&mut self, stats: &mut CallStats) {
        let j = self.jitter.counters();
        if j.discarded() > self.published.discarded {
            stats.jitter_discarded += j.discarded() - self.published.discarded;
            self.published.discarded = j.discarded();
        }
        if j.lost > self.published.lost {
            stats.jitter_lost += j.lost - self.published.lost;
            self.published.lost = j.lost;
        }
    }

    /// New negotiated media after a re-INVITE.
    pub fn update(&mut self, media: NegotiatedMedia) {
        if let Some(addr) = media.remote_rtp {
            if Some(addr) != self.media.remote_rtp {
                // A new address: it is the SDP address now; any latch is void.
                self.sdp_ip = Some(addr.ip());
                self.latched = None;
                self.candidate = None;
                if self.symmetric {
                    // The new address may be private too: the first source latches again.
                    self.source_heard = None;
                }
            }
        }
        if media.codec != self.media.codec {
            self.decoder = LineDecoder::new(media.codec);
            self.decode_next = None;
            if media.codec.rtp_clock_hz() != self.media.codec.rtp_clock_hz() {
                // Timestamps on another clock: a new buffer (and new RTCP statistics). Its
                // counters start again, so what this call published restarts with them.
                self.jitter = jitter_buffer(media.codec);
                self.published = Published::default();
                self.stats = None;
            }
        }
        self.media = media;
    }

    /// The address the source was latched to, once the caller has sent.
    pub fn latched(&self) -> Option<SocketAddr> {
        self.latched
    }

    /// Symmetric RTP: latch to the first address that sends a consistent run of valid packets,
    /// whatever the SDP said (the module's source policy).
    pub fn use_symmetric_rtp(&mut self) {
        self.symmetric = true;
    }

    /// The caller's media IP: the latched source's, else the SDP's (RTCP is accepted from it).
    pub fn caller_ip(&self) -> Option<IpAddr> {
        self.latched.map(|a| a.ip()).or(self.sdp_ip)
    }

    fn since_origin(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.origin)
    }

    /// Whether a valid packet from `src` with `ssrc` is the caller's; `Ok(true)` when the
    /// stream's source changed to `src` with it (latched, or taken back by the SDP address).
    fn source_ok(
        &mut self,
        src: SocketAddr,
        ssrc: u32,
        now: Instant,
    ) -> Result<bool, &'static str> {
        let sdp = self.media.remote_rtp;
        let current = self.latched.or(sdp);
        if Some(src.ip()) != self.sdp_ip && Some(src) != current {
            // Symmetric RTP: the first source of the call, after the same run as a NATed port.
            if self.symmetric && self.source_heard.is_none() {
                return self.latch_run(src, ssrc, now);
            }
            return Err("wrong_source");
        }
        if Some(src) == current {
            self.source_heard = Some(now);
            self.candidate = None;
            // The first packet from the SDP address after a latch elsewhere takes it back.
            let changed = self.latched.is_some_and(|l| l != src);
            return Ok(changed);
        }
        if Some(src) == sdp {
            // The SDP address takes the stream back from a latched port.
            self.latched = Some(src);
            self.source_heard = Some(now);
            self.candidate = None;
            return Ok(true);
        }
        // Another port of the caller's IP: latch only after a consistent run while the current
        // source is quiet.
        let quiet = self
            .source_heard
            .is_none_or(|t| now.saturating_duration_since(t) >= LATCH_QUIET);
        if !quiet {
            self.candidate = None;
            return Err("wrong_source");
        }
        self.latch_run(src, ssrc, now)
    }

    /// Counts `src`'s run of valid packets with one SSRC; latches it at [`LATCH_RUN`].
    fn latch_run(
        &mut self,
        src: SocketAddr,
        ssrc: u32,
        now: Instant,
    ) -> Result<bool, &'static str> {
        let run = match self.candidate {
            Some((addr, c_ssrc, n)) if addr == src && c_ssrc == ssrc => n + 1,
            _ => 1,
        };
        if run < LATCH_RUN {
            self.candidate = Some((src, ssrc, run));
            return Err("latch_pending");
        }
        self.candidate = None;
        self.latched = Some(src);
        self.source_heard = Some(now);
        Ok(true)
    }

    /// Take one datagram from the RTP port.
    pub fn handle_datagram(
        &mut self,
        bytes: &[u8],
        src: SocketAddr,
        now: Instant,
    ) -> InboundOutcome {
        match classify(bytes) {
            PacketKind::Rtcp => return InboundOutcome::Rtcp,
            PacketKind::Other if bytes.len() < ontime_rtp::RTP_HEADER_BYTES => {
                self.dropped += 1;
                return InboundOutcome::Dropped("too_short");
            }
            _ => {}
        }
        let pkt = match parse_rtp(bytes) {
            Ok(p) => p,
            Err(e) => {
                self.dropped += 1;
                return InboundOutcome::Dropped(e.reason());
            }
        };
        // Check the source only for valid packets, so garbage cannot latch it.
        let latched = match self.source_ok(src, pkt.ssrc, now) {
            Ok(l) => l,
            Err(reason) => {
                self.dropped += 1;
                return InboundOutcome::Dropped(reason);
            }
        };
        let arrival = self.since_origin(now);
        let stats = match &mut self.stats {
            Some((ssrc, s)) if *ssrc == pkt.ssrc => s,
            slot => {
                &mut slot
                    .insert((
                        pkt.ssrc,
                        ReceiverStats::new(self.media.codec.rtp_clock_hz()),
                    ))
                    .1
            }
        };
        stats.on_packet(pkt.sequence_number, pkt.timestamp, arrival);

        if Some(pkt.payload_type) == self.media.telephone_event_pt {
            self.received += 1;
            let digit = match self.dtmf.on_packet(pkt.timestamp, pkt.payload) {
                Ok(found) => found.into_iter().flatten().last().map(|d| d.digit),
                Err(_) => {
                    return InboundOutcome::Dropped("telephone_event");
                }
            };
            return InboundOutcome::Dtmf(digit);
        }
        if pkt.payload_type != self.media.payload_type && pkt.payload_type != PT_CN {
            self.dropped += 1;
            return InboundOutcome::Dropped("unknown_payload_type");
        }
        // A malformed Opus packet (bad TOC, frame lengths past the end) or one that is not
        // 20 ms is dropped here, counted, and concealed like a lost one.
        if self.media.codec == Codec::Opus
            && pkt.payload_type == self.media.payload_type
            && ontime_rtp::opus::check_packet(pkt.payload).is_err()
        {
            self.dropped += 1;
            return InboundOutcome::Dropped("opus");
        }
        let info = RtpPacketInfo {
            sequence_number: pkt.sequence_number,
            timestamp: pkt.timestamp,
            marker: pkt.marker,
            ssrc: pkt.ssrc,
            payload_type: pkt.payload_type,
            payload: pkt.payload,
        };
        match self.jitter.push(&info, arrival) {
            Err(_e) => {
                self.dropped += 1;
                return InboundOutcome::Dropped("payload_size");
            }
            // Its frame was concealed, and the next one is not decoded yet: G.722 is ADPCM, and
            // a decoder that skips a packet disagrees with the caller's encoder for the next
            // 100-300 ms of what it hears. Decoded now, unheard, it stays in step.
            Ok(PushOutcome::Late)
                if self.decoder.is_stateful()
                    && pkt.payload_type == self.media.payload_type
                    && self.decode_next == Some(pkt.sequence_number) =>
            {
                let mut narrow = [0i16; SAMPLES_PER_FRAME];
                let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                self.decoder.decode(pkt.payload, &mut narrow, &mut wide);
                self.decode_next = Some(pkt.sequence_number.wrapping_add(1));
                self.late_decoded += 1;
            }
            Ok(_) => {}
        }
        self.received += 1;
        if self.first_audio.is_none() {
            self.first_audio = Some(now);
        }
        if latched {
            InboundOutcome::Latched(src)
        } else {
            InboundOutcome::Audio
        }
    }

    /// Play the caller's audio due by `now` as 8 kHz PCM, one 20 ms frame per call of `each`,
    /// with the same frame at 16 kHz when a wideband codec decoded it (`None` otherwise), and
    /// where it came from.
    /// When the caller stops sending (DTX, end of stream), silence keeps the frames flowing so
    /// the VAD's clock advances and speech can stop.
    pub fn pop(
        &mut self,
        now: Instant,
        mut each: impl FnMut(
            &[i16; SAMPLES_PER_FRAME],
            Option<&[i16; WIDEBAND_SAMPLES_PER_FRAME]>,
            FrameOrigin,
        ),
    ) {
        let Some(first) = self.first_audio else {
            return;
        };
        let t = self.since_origin(now);
        let mut out = [0i16; SAMPLES_PER_FRAME];
        let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        // Bounded: a tokio stall of a few frames is caught up, never an unbounded burst.
        for _ in 0..8 {
            let mut origin = FrameOrigin::InPlaceOf;
            let mut wideband = false;
            match self.jitter.pop(t) {
                Playout::Frame(f) => {
                    origin = FrameOrigin::Packet {
                        timestamp: f.timestamp,
                        inserted_before: f.inserted_before,
                    };
                    if f.payload_type == self.media.payload_type {
                        wideband = self.decoder.decode(f.payload, &mut out, &mut wide);
                        self.decode_next = Some(f.sequence_number.wrapping_add(1));
                    } else {
                        out.fill(0); // comfort noise: play silence
                    }
                    self.concealed_run = 0;
                }
                Playout::Conceal(reason) => {
                    if reason == ConcealReason::Stretch {
                        origin = FrameOrigin::Stretch;
                    }
                    self.concealed_run += 1;
                    // Opus conceals itself, from the next packet's FEC when it is here.
                    if let Some(recovered) =
                        self.decoder
                            .conceal(self.jitter.next_payload(), &mut out, &mut wide)
                    {
                        wideband = true;
                        if recovered {
                            self.fec_recovered += 1;
                        }
                    } else if self.concealed_run == 1 {
                        // Packet-loss concealment: repeat the last frame at half level once,
                        // then silence (G.711 Appendix I does better; VAD only needs no burst
                        // of noise).
                        for (o, s) in out.iter_mut().zip(self.last_frame.iter()) {
                            *o = s / 2;
                        }
                    } else {
                        out.fill(0);
                    }
                }
                Playout::Silence => out.fill(0),
                Playout::Nothing => break,
            }
            self.last_frame = out;
            self.frames_played += 1;
            each(&out, wideband.then_some(&wide), origin);
        }
        // Keep the playout clock running when nothing arrives: one frame per 20 ms of wall
        // time since the first packet, less the buffer's depth.
        let wall_frames = now.saturating_duration_since(first).as_micros() / FRAME.as_micros();
        let depth_frames = (self.jitter.depth().as_micros() / FRAME.as_micros()) as u64;
        let due = (wall_frames as u64).saturating_sub(depth_frames + 2);
        let mut filled = 0;
        while self.frames_played < due && filled < 8 {
            self.frames_played += 1;
            filled += 1;
            self.last_frame = [0; SAMPLES_PER_FRAME];
            each(&self.last_frame, None, FrameOrigin::InPlaceOf);
        }
    }

    #[cfg(test)]
    /// The jitter buffer's counters.
    pub fn jitter_counters(&self) -> ontime_jitter::JitterCounters {
        self.jitter.counters()
    }

    /// The jitter buffer (for RTCP XR and the depth gauge).
    pub fn jitter(&self) -> &JitterBuffer {
        &self.jitter
    }

    /// RFC 3550 statistics of the current source, with its SSRC.
    pub fn receiver_stats(&mut self) -> Option<(u32, &mut ReceiverStats)> {
        self.stats.as_mut().map(|(ssrc, s)| (*ssrc, s))
    }

    /// Totals for the CDR.
    pub fn counters(&self) -> InboundCounters {
        let j = self.jitter.counters();
        InboundCounters {
            received: self.received,
            discarded: j.discarded(),
            lost: j.lost,
            duplicates: j.duplicates,
            dropped: self.dropped,
            fec_recovered: self.fec_recovered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_rtp::PT_PCMU;

    #[test]
    fn inbound_jitter_config_is_valid_and_keeps_one_frame_on_a_clean_path() {
        for codec in Codec::ALL {
            assert_eq!(inbound_jitter_config(codec).validate(), Ok(()), "{codec}");
        }
        // A caller on a clean path (transit varying by up to 0.9 ms), 5 s of one talkspurt,
        // played as the gateway plays it (on each arrival): the buffer settles at one frame.
        let sdp = "127.0.0.1:4000".parse().unwrap();
        let t0 = Instant::now();
        let mut m = InboundMedia::new(media(sdp), Some(sdp.ip()), t0);
        let mut p = Packetizer::with_initial(PT_PCMU, 7, 100, 0);
        let mut buf = [0u8; 200];
        for i in 0..250u32 {
            let n = p.write_frame(&[0x10; 160], &mut buf).unwrap();
            let at = t0 + FRAME * i + Duration::from_micros(u64::from(i * 7919 % 900));
            m.handle_datagram(&buf[..n], sdp, at);
            m.pop(at, |_, _, _| {});
        }
        assert_eq!(m.jitter().depth().as_millis(), 20);
        // With the library's default margin the same path holds two frames.
        let mut d = JitterBuffer::new(JitterConfig::default()).unwrap();
        for i in 0..250u32 {
            let info = RtpPacketInfo {
                sequence_number: 100 + i as u16,
                timestamp: 160 * i,
                marker: i == 0,
                ssrc: 7,
                payload_type: PT_PCMU,
                payload: &[0x10; 160],
            };
            let at = FRAME * i + Duration::from_micros(u64::from(i * 7919 % 900));
            d.push(&info, at).unwrap();
            while !matches!(d.pop(at), Playout::Nothing) {}
        }
        assert_eq!(d.depth().as_millis(), 40);
    }
    use ontime_rtp::Packetizer;
    use ontime_rtp::FRAME_BYTES;
    use ontime_sip::Direction;

    fn media(remote: SocketAddr) -> NegotiatedMedia {
        NegotiatedMedia {
            remote_rtp: Some(remote),
            codec: Codec::Pcmu,
            payload_type: PT_PCMU,
            telephone_event_pt: Some(101),
            remote_ptime_ms: Some(20),
            remote_maxptime_ms: None,
            local_direction: Direction::SendRecv,
            srtp: false,
        }
    }

    /// A G.722 caller whose packet 40 comes after its slot: the slot is concealed, and the
    /// packet, decoded unheard, keeps the decoder in step, so every frame after the concealed
    /// one is exactly what an undisturbed decoder plays. Without the catch-up the frames after it
    /// differ for hundreds of milliseconds (checked on a decoder that skips the packet).
    #[test]
    fn a_late_g722_packet_is_decoded_unheard_and_the_decoder_stays_in_step() {
        let sdp: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let g722 = NegotiatedMedia {
            codec: Codec::G722,
            payload_type: ontime_rtp::PT_G722,
            ..media(sdp)
        };
        // 2 s of a two-tone voice, G.722 from the silence state, one payload per frame.
        let wide: Vec<i16> = (0..32000)
            .map(|n| {
                let t = n as f32 / 16000.0;
                (6000.0 * (2.0 * std::f32::consts::PI * 300.0 * t).sin()
                    + 3000.0 * (2.0 * std::f32::consts::PI * 2100.0 * t).sin())
                    as i16
            })
            .collect();
        let mut coded = vec![0u8; 16000];
        ontime_rtp::g722::Encoder::after_silence().encode(&wide, &mut coded);
        let payloads: Vec<&[u8]> = coded.chunks(160).collect();
        let late = 40usize;
        // Every frame played, by RTP timestamp, for one caller; the late packet 25 ms after it
        // was sent (one frame of buffer: after its due time, before the next frame's).
        let run = |late_by: Option<Duration>| {
            let t0 = Instant::now();
            let mut m = InboundMedia::new(g722, Some(sdp.ip()), t0);
            let mut p = Packetizer::with_initial(ontime_rtp::PT_G722, 7, 100, 0);
            let mut buf = [0u8; 200];
            let mut played: Vec<(Option<u32>, [i16; SAMPLES_PER_FRAME])> = Vec::new();
            let mut held = None;
            for (i, payload) in payloads.iter().enumerate() {
                let n = p.write_frame(payload, &mut buf).unwrap();
                let at = t0 + FRAME * i as u32;
                if let (true, Some(by)) = (i == late, late_by) {
                    held = Some((buf[..n].to_vec(), at + by));
                } else {
                    m.handle_datagram(&buf[..n], sdp, at);
                }
                for step in [Duration::ZERO, Duration::from_millis(10)] {
                    if let Some((b, due)) = held.as_ref() {
                        if *due <= at + step {
                            m.handle_datagram(b, sdp, *due);
                            held = None;
                        }
                    }
                    m.pop(at + step, |f, _, o| played.push((o.timestamp(), *f)));
                }
            }
            (played, m.late_decoded)
        };
        let (clean, none) = run(None);
        let (disturbed, decoded) = run(Some(Duration::from_millis(25)));
        assert_eq!((none, decoded), (0, 1), "the late packet was decoded once");
        let by_ts = |v: &[(Option<u32>, [i16; SAMPLES_PER_FRAME])]| -> std::collections::HashMap<u32, [i16; SAMPLES_PER_FRAME]> {
            v.iter().filter_map(|(ts, f)| ts.map(|t| (t, *f))).collect()
        };
        let (clean, disturbed) = (by_ts(&clean), by_ts(&disturbed));
        let late_ts = 160 * late as u32;
        assert!(!disturbed.contains_key(&late_ts), "its slot was concealed");
        let after: Vec<u32> = (late as u32 + 1..late as u32 + 41)
            .map(|k| 160 * k)
            .collect();
        let same = after
            .iter()
            .filter(|ts| clean.contains_key(ts) && clean.get(ts) == disturbed.get(ts))
            .count();
        let differ: Vec<u32> = after
            .iter()
            .filter(|ts| clean.get(ts) != disturbed.get(ts))
            .map(|ts| ts / 160)
            .collect();
        assert_eq!(
            same,
            after.len(),
            "every frame after the concealed one as undisturbed; differ: {differ:?}"
        );
    }

    /// An Opus caller on the 48 kHz clock: every 20 ms frame plays at 16 kHz; a lost packet is
    /// rebuilt from the next one's FEC (counted); a malformed packet (a code 3 TOC with no
    /// frames) and a 60 ms one are dropped on arrival, counted, and their slots concealed.
    #[test]
    fn an_opus_caller_plays_wideband_with_fec_and_malformed_packets_dropped() {
        let sdp: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let opus_media = NegotiatedMedia {
            codec: Codec::Opus,
            payload_type: 107,
            ..media(sdp)
        };
        let mut enc = ontime_rtp::opus::Encoder::new().unwrap();
        let frames = 50usize;
        let payloads: Vec<Vec<u8>> = (0..frames)
            .map(|k| {
                let pcm: [i16; WIDEBAND_SAMPLES_PER_FRAME] = std::array::from_fn(|n| {
                    let t = (k * WIDEBAND_SAMPLES_PER_FRAME + n) as f32 / 16000.0;
                    (6000.0 * (2.0 * std::f32::consts::PI * 300.0 * t).sin()) as i16
                });
                let mut out = [0u8; FRAME_BYTES];
                enc.encode(&pcm, &mut out).unwrap();
                out.to_vec()
            })
            .collect();
        let (lost, malformed, long) = (20usize, 30usize, 35usize);
        let t0 = Instant::now();
        let mut m = InboundMedia::new(opus_media, Some(sdp.ip()), t0);
        let mut p = Packetizer::with_initial(107, 7, 100, 0)
            .with_timestamp_step(Codec::Opus.timestamp_step());
        let mut buf = [0u8; 400];
        let (mut wide_frames, mut narrow_only, mut dropped_opus) = (0, 0, 0);
        for (i, payload) in payloads.iter().enumerate() {
            let payload: &[u8] = match i {
                _ if i == malformed => &[(9 << 3) | 3, 0],
                // TOC config 3: SILK narrowband, 60 ms.
                _ if i == long => &[3 << 3, 0xAA, 0x55],
                _ => payload,
            };
            let n = p.write_frame(payload, &mut buf).unwrap();
            let at = t0 + FRAME * i as u32;
            if i != lost {
                if let InboundOutcome::Dropped("opus") = m.handle_datagram(&buf[..n], sdp, at) {
                    dropped_opus += 1;
                }
            }
            m.pop(at + Duration::from_millis(10), |_, wide, _| {
                if wide.is_some() {
                    wide_frames += 1;
                } else {
                    narrow_only += 1;
                }
            });
        }
        assert_eq!(dropped_opus, 2);
        assert_eq!(m.counters().dropped, 2);
        // Each of the three slots without a packet is rebuilt from the next packet's FEC (it
        // carries the encoder's copy of the frame, whatever happened to the packet itself).
        assert_eq!(m.counters().fec_recovered, 3);
        assert_eq!(m.counters().lost, 3);
        assert_eq!(
            narrow_only, 0,
            "every frame is 16 kHz, concealment included"
        );
        // Played up to the last packet's slot less the buffer's one frame.
        assert_eq!(wide_frames, frames - 1);
    }

    #[test]
    fn source_policy_latches_a_consistent_run_and_drops_strangers() {
        let sdp: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let t0 = Instant::now();
        let mut m = InboundMedia::new(media(sdp), Some(sdp.ip()), t0);
        let mut p = Packetizer::with_initial(PT_PCMU, 7, 100, 0);
        let mut buf = [0u8; 200];
        let n = p.write_frame(&[0xFF; 160], &mut buf).unwrap();
        let other_ip: SocketAddr = "127.0.0.2:40000".parse().unwrap();
        assert_eq!(
            m.handle_datagram(&buf[..n], other_ip, t0),
            InboundOutcome::Dropped("wrong_source")
        );
        // A NATed trunk: another port of the SDP IP is latched after a consistent run.
        let nat: SocketAddr = "127.0.0.1:40002".parse().unwrap();
        for i in 1..LATCH_RUN {
            let n = p.write_frame(&[0xFF; 160], &mut buf).unwrap();
            assert_eq!(
                m.handle_datagram(&buf[..n], nat, t0 + FRAME * i),
                InboundOutcome::Dropped("latch_pending")
            );
        }
        let n = p.write_frame(&[0xFF; 160], &mut buf).unwrap();
        assert_eq!(
            m.handle_datagram(&buf[..n], nat, t0 + FRAME * LATCH_RUN),
            InboundOutcome::Latched(nat)
        );
        let n = p.write_frame(&[0xFF; 160], &mut buf).unwrap();
        assert_eq!(
            m.handle_datagram(&buf[..n], nat, t0 + FRAME * 6),
            InboundOutcome::Audio
        );
        assert_eq!(
            m.handle_datagram(&[0x80, 0], nat, t0),
            InboundOutcome::Dropped("too_short")
        );
        // The SDP address takes the stream back at once.
        let n = p.write_frame(&[0xFF; 160], &mut buf).unwrap();
        assert_eq!(
            m.handle_datagram(&buf[..n], sdp, t0 + FRAME * 7),
            InboundOutcome::Latched(sdp)
        );
        assert_eq!(m.counters().received, 3);
        assert_eq!(m.counters().dropped, 1 + (LATCH_RUN as u64 - 1) + 1);
    }

    /// Symmetric RTP: the SDP names a private address, the packets come from elsewhere. Off,
    /// they are all `wrong_source`; on, the first source's run of [`LATCH_RUN`] latches it, and
    /// from then on every other address is `wrong_source`, however long the source is quiet.
    #[test]
    fn symmetric_rtp_latches_the_first_source_and_only_it() {
        let sdp: SocketAddr = "10.0.0.5:4000".parse().unwrap();
        let nat: SocketAddr = "203.0.113.9:61000".parse().unwrap();
        let other: SocketAddr = "198.51.100.7:5004".parse().unwrap();
        let t0 = Instant::now();
        let packets = |ssrc, n: u32| {
            let mut p = Packetizer::with_initial(PT_PCMU, ssrc, 100, 0);
            (0..n)
                .map(|_| {
                    let mut buf = [0u8; 200];
                    let len = p.write_frame(&[0xFF; 160], &mut buf).unwrap();
                    buf[..len].to_vec()
                })
                .collect::<Vec<_>>()
        };
        let caller = packets(1, 20);
        let stranger = packets(2, 20);

        let mut strict = InboundMedia::new(media(sdp), Some(sdp.ip()), t0);
        for (i, pkt) in caller.iter().enumerate() {
            assert_eq!(
                strict.handle_datagram(pkt, nat, t0 + FRAME * i as u32),
                InboundOutcome::Dropped("wrong_source")
            );
        }
        assert_eq!(
            (strict.counters().received, strict.counters().dropped),
            (0, 20)
        );

        let mut m = InboundMedia::new(media(sdp), Some(sdp.ip()), t0);
        m.use_symmetric_rtp();
        // A run broken by another source (or SSRC) starts again.
        assert_eq!(
            m.handle_datagram(&stranger[0], other, t0),
            InboundOutcome::Dropped("latch_pending")
        );
        for (i, pkt) in caller[..LATCH_RUN as usize].iter().enumerate() {
            let want = if i + 1 < LATCH_RUN as usize {
                InboundOutcome::Dropped("latch_pending")
            } else {
                InboundOutcome::Latched(nat)
            };
            assert_eq!(m.handle_datagram(pkt, nat, t0 + FRAME * i as u32), want);
        }
        assert_eq!(m.latched(), Some(nat));
        assert_eq!(m.caller_ip(), Some(nat.ip()));
        // Latched: the caller is audio, a stranger is wrong_source, even a full run of it after
        // the caller has been quiet for longer than LATCH_QUIET.
        let later = t0 + LATCH_QUIET * 2;
        for (i, pkt) in stranger[1..].iter().enumerate() {
            assert_eq!(
                m.handle_datagram(pkt, other, later + FRAME * i as u32),
                InboundOutcome::Dropped("wrong_source")
            );
        }
        for (i, pkt) in caller[LATCH_RUN as usize..].iter().enumerate() {
            assert_eq!(
                m.handle_datagram(pkt, nat, later + FRAME * (20 + i as u32)),
                InboundOutcome::Audio
            );
        }
        assert_eq!(m.latched(), Some(nat));
        // 1 + 4 pending, 19 strangers; 1 latching + 15 audio.
        assert_eq!((m.counters().received, m.counters().dropped), (16, 24));
    }

    /// With symmetric RTP on, a caller whose SDP address is reachable and speaks first keeps the
    /// stream: the first source is the SDP's, and strangers stay out.
    #[test]
    fn symmetric_rtp_leaves_a_caller_that_sends_from_its_sdp_address_alone() {
        let sdp: SocketAddr = "192.0.2.10:4000".parse().unwrap();
        let other: SocketAddr = "198.51.100.7:5004".parse().unwrap();
        let t0 = Instant::now();
        let mut m = InboundMedia::new(media(sdp), Some(sdp.ip()), t0);
        m.use_symmetric_rtp();
        let mut caller = Packetizer::with_initial(PT_PCMU, 1, 100, 0);
        let mut stranger = Packetizer::with_initial(PT_PCMU, 2, 100, 0);
        let mut buf = [0u8; 200];
        let n = caller.write_frame(&[0xFF; 160], &mut buf).unwrap();
        assert_eq!(m.handle_datagram(&buf[..n], sdp, t0), InboundOutcome::Audio);
        for i in 1..=LATCH_RUN * 2 {
            let n = stranger.write_frame(&[0x80; 160], &mut buf).unwrap();
            assert_eq!(
                m.handle_datagram(&buf[..n], other, t0 + FRAME * i),
                InboundOutcome::Dropped("wrong_source")
            );
        }
        assert_eq!(m.latched(), None);
        assert_eq!(m.caller_ip(), Some(sdp.ip()));
    }

    /// The latch race: a sender on the caller's IP but another port speaks first; the caller,
    /// sending from its SDP address, keeps (or takes back) its stream, and while it talks no
    /// other port can take it.
    #[test]
    fn the_sdp_address_wins_the_latch_race() {
        let sdp: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let attacker: SocketAddr = "127.0.0.1:41000".parse().unwrap();
        let t0 = Instant::now();
        let mut m = InboundMedia::new(media(sdp), Some(sdp.ip()), t0);
        let mut caller = Packetizer::with_initial(PT_PCMU, 1, 100, 0);
        let mut other = Packetizer::with_initial(PT_PCMU, 2, 5000, 0);
        let mut buf = [0u8; 200];
        // The attacker gets in first with a full run.
        let mut outcomes = Vec::new();
        for i in 0..LATCH_RUN {
            let n = other.write_frame(&[0x80; 160], &mut buf).unwrap();
            outcomes.push(m.handle_datagram(&buf[..n], attacker, t0 + FRAME * i));
        }
        assert_eq!(outcomes.last(), Some(&InboundOutcome::Latched(attacker)));
        // The caller's first packet takes the stream back.
        let n = caller.write_frame(&[0xFF; 160], &mut buf).unwrap();
        assert_eq!(
            m.handle_datagram(&buf[..n], sdp, t0 + FRAME * 6),
            InboundOutcome::Latched(sdp)
        );
        // Interleaved from now on: the caller's packets are audio, the attacker's never latch.
        for i in 7..200u32 {
            let n = caller.write_frame(&[0xFF; 160], &mut buf).unwrap();
            assert_eq!(
                m.handle_datagram(&buf[..n], sdp, t0 + FRAME * i),
                InboundOutcome::Audio
            );
            let n = other.write_frame(&[0x80; 160], &mut buf).unwrap();
            assert_eq!(
                m.handle_datagram(&buf[..n], attacker, t0 + FRAME * i),
                InboundOutcome::Dropped("wrong_source")
            );
        }
        assert_eq!(m.latched(), Some(sdp));
    }

    #[test]
    fn plays_frames_then_keeps_the_clock_with_silence() {
        let sdp: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let mut m = InboundMedia::new(media(sdp), Some(sdp.ip()), Instant::now());
        let mut p = Packetizer::with_initial(PT_PCMU, 7, 65530, 0);
        let mut buf = [0u8; 200];
        let t0 = Instant::now();
        // 10 packets across a sequence wrap, a loud tone byte so frames are not silence.
        for i in 0..10u32 {
            let n = p.write_frame(&[0x80; 160], &mut buf).unwrap();
            m.handle_datagram(&buf[..n], sdp, t0 + FRAME * i);
        }
        let mut frames = Vec::new();
        for k in 0..60u32 {
            m.pop(t0 + FRAME * k, |f, _, _| frames.push(f[0]));
        }
        let loud = frames.iter().filter(|s| s.abs() > 30000).count(); // concealment plays at half level
        assert_eq!(loud, 10, "each packet played once: {frames:?}");
        assert!(
            frames.len() >= 50,
            "silence keeps the clock going: {} frames",
            frames.len()
        );
        assert_eq!(m.counters().lost, 0);
    }

    #[test]
    fn dtmf_digit_reported_once_with_repeated_end_packets() {
        let sdp: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let mut m = InboundMedia::new(media(sdp), Some(sdp.ip()), Instant::now());
        let mut p = Packetizer::with_initial(101, 9, 1, 1000);
        let mut buf = [0u8; 64];
        let t0 = Instant::now();
        let mut digits = Vec::new();
        for (dur, end) in [
            (160u16, false),
            (320, false),
            (480, true),
            (480, true),
            (480, true),
        ] {
            let ev = ontime_rtp::dtmf::TelephoneEvent {
                event: 5,
                end,
                volume: 10,
                duration: dur,
            };
            let mut payload = [0u8; 4];
            ev.write(&mut payload).unwrap();
            let n = p
                .write_event(101, dur == 160, 1000, &payload, &mut buf)
                .unwrap();
            if let InboundOutcome::Dtmf(Some(d)) = m.handle_datagram(&buf[..n], sdp, t0) {
                digits.push(d);
            }
        }
        assert_eq!(digits, vec!['5']);
    }
}
