//! One call, sans-IO: [`CallCore`] is fed the caller's datagrams, dialog events from the SIP
//! loop, the inference thread's events, the agent's actions and the time, and answers with
//! [`CallOutput`]s — what to send, what to tell the agent and the VAD, what to record, what to
//! ask of SIP — and [`CallCore::poll_timeout`], when to call [`CallCore::handle_timeout`] next.
//! It reads no clock and touches no socket: the driver task does, and tests drive it on
//! simulated time.
//!
//! Every decision about the call lives here: the 20 ms playout of caller audio, turn-taking
//! (a turn counts when Smart Turn calls it complete while the caller is quiet; local barge-in
//! clears the reply when the caller starts speaking over it), hold (no sending, no RTP
//! timeout), the end of the call and its record.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use ontime_amd::{AnsweredBy, Detector};
use ontime_echo::{EchoCanceller, EchoConfig, Verdict, CALLER_HANGOVER_TIME};
use ontime_inference::InferenceEvent;
use ontime_rtp::resample::Upsampler;
use ontime_rtp::{
    Packetizer, FRAME, FRAME_BYTES, SAMPLES_PER_FRAME, SAMPLE_RATE_HZ, WIDEBAND_SAMPLES_PER_FRAME,
};
use ontime_sender::{StreamEvent, StreamProducer};
use ontime_sip::{Codec, Direction, NegotiatedMedia};
use ontime_srtp::{SdesKeys, SrtpContext, SRTCP_TRAILER_LEN};
use ontime_twilio::{CallStatus, Dial, DialTarget, SipTarget, Verb};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tracing::{info, warn};

use super::codec::{LineDecoder, WideForModels};
use super::dial::{ringback_cycle, DialEnd, DialLeg, RINGBACK_LOW_WATER};
use super::events::{
    AgentNotice, CallCommand, CallOutput, CallSettings, DialogEvent, ModelFrame, SipRequest,
};
use super::hold_back::{HoldBack, RESUME_HEARD, RESUME_WINDOW};
use super::inbound::{FrameOrigin, InboundMedia, InboundOutcome};
use super::outbound::Outbound;
use super::program::{
    refer_to, PendingTransfer, Program, Step, TransferOutcome, INFO_DIGIT_TONE,
    REASON_NORMAL_CLEARING,
};
use super::rtcp::{OutgoingStream, RtcpSession};
use super::stats::CallStats;
use super::words;
use crate::agent::{AgentAction, CallInfo, TransferResult};
use crate::config::BargeIn;
use crate::records::cdr::{CallDetailRecord, EndCause, RecordKind};
use crate::records::recording::Track;

/// How long to wait for the dialog to end after we asked SIP to hang up, before the call is
/// closed anyway (a BYE's transaction gives up after 64·T1 = 32 s; a little more).
pub const HANGUP_WAIT: Duration = Duration::from_secs(40);

/// A pause this long in the agent's audio ends its utterance (agents that stream in real time
/// rarely mark one) and, after a local barge-in, ends the interrupted reply: audio that arrives
/// sooner belongs to the reply the caller cut and is dropped.
pub const REPLY_GAP: Duration = Duration::from_millis(250);

/// Agent audio that starts an utterance waits this long before it enters the sender's ring
/// (unless a burst of [`BURST`] or more is already queued): a bot that streams in real time then
/// has this much slack before its pacing jitter becomes a hole the caller hears. Measured in
/// time, not bytes: pipecat sends 137.5 ms messages 121–163 ms apart, so any single message
/// would satisfy a byte threshold and the next one would still come late.
pub const PREBUFFER: Duration = Duration::from_millis(60);

/// Queued audio that needs no prebuffer: an agent that sends its reply in one burst (or far
/// ahead of real time) has already covered any jitter.
pub const BURST: Duration = Duration::from_secs(1);

/// What a call started unanswered is refused with when its `<Dial>` ended without a bridge
/// and its outcome says nothing better (480 Temporarily Unavailable: no one took the call).
const REFUSE_UNBRIDGED: u16 = 480;

/// Extra time a hang-up waits beyond the audio queued before it
/// ([`AgentAction::HangupWhenPlayed`]): a stream that stops being served (the sender removed
/// it) must not keep the call up.
const HANGUP_WHEN_PLAYED_SLACK: Duration = Duration::from_secs(1);

/// Most playout ticks caught up at once after the driver was late; beyond that the schedule
/// restarts from now (the jitter buffer's own clock bounds the audio catch-up).
const MAX_CATCH_UP: Duration = Duration::from_millis(200);
/// A playout tick due within this of a media packet's arrival runs with the packet, in the
/// same wake of the call's task. Every step of the tick goes by `now`, not by a count of
/// ticks, so running it a few ms early changes no decision; at one call it halves the task's
/// wakes (one per packet instead of a packet and a timer every 20 ms).
const TICK_WITH_PACKET: Duration = Duration::from_millis(10);
/// After a tick run with a packet, the next is due one frame later plus this: the next packet,
/// expected a frame later, runs it unless it is more than this late (then the timer does).
const TICK_AFTER_PACKET_SLACK: Duration = Duration::from_millis(5);
/// How far (samples, 500 ms) a caller frame placed by its RTP timestamp may stray from its
/// playout by the clock before the echo canceller's timeline is anchored again: more than any
/// jitter buffer's growth, less than the canceller's reference ring.
const ECHO_REANCHOR: u64 = 4000;

/// A `<Dial>` leg's own TwiML (`<Number url>`), run before its bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whisper {
    /// None was asked for (or the call is no leg).
    None,
    /// Its verbs are running.
    Running,
    /// It connected a bot, whose normal close ends it.
    Bot,
    /// It is over; the leg is bridged.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Up,
    /// We asked SIP to hang up; waiting for the dialog to end (or `give_up_at`).
    HangingUp {
        cause: EndCause,
        give_up_at: Instant,
    },
    Ended,
}

/// Caller speech over the reply that barges in if it lasts `barge_in_min_speech`.
#[derive(Debug, Clone, Copy)]
struct PendingBargeIn {
    /// The speech's onset on the VAD's audio clock.
    onset: Duration,
    /// When the caller began speaking on the call's clock (the VAD confirms speech some time
    /// after it began, and the echo canceller can hold back its first part).
    spoke_at: Instant,
    /// When the speech, if not stopped, has lasted the minimum as far as the VAD can tell.
    decide_at: Instant,
    /// The same point on the VAD's audio clock: the decision waits until the VAD has judged
    /// the audio up to it (see [`CallCore::handle_vad_progress`]).
    decide_on_stream: Duration,
}

/// How long past `decide_at` a pending barge-in waits for a VAD that has not judged the audio
/// yet: more than one Smart Turn run on a slow host (≈ 250 ms), so that a run holding the
/// inference thread does not turn a backchannel into a barge-in, and bounded, so that a VAD
/// that lost audio (an overloaded thread drops chunks) cannot hold the decision for ever.
const VAD_LAG_LIMIT: Duration = Duration::from_millis(500);

/// The last turn's end, until its reply is heard, the caller resumes, or the bot stays silent
/// for [`RESUME_WINDOW`].
#[derive(Debug, Clone, Copy)]
struct ReplyGate {
    /// Where the caller's speech ended, and when the verdict came.
    speech_end_at: Instant,
    ended_at: Instant,
    /// The reply may not play before this ([`HoldBack`]'s decision).
    release_at: Instant,
    /// `release_at` is still ahead: the reply's audio is held.
    held: bool,
}

/// A call's SRTP state (SDES keys from the offer and answer).
struct CallSrtp {
    /// Both keys: each new outgoing stream gets a context under ours.
    keys: SdesKeys,
    /// Under the caller's key: unprotects its RTP and RTCP.
    inbound: SrtpContext,
    /// Under ours: protects our RTCP (the sender's context protects the RTP).
    rtcp_out: SrtpContext,
}

/// One call's media and turn-taking state.
pub struct CallCore {
    settings: CallSettings,
    info: CallInfo,
    start_unix_ms: u64,
    answer_unix_ms: u64,
    answered: Instant,
    wall_at_answer: SystemTime,
    negotiated: NegotiatedMedia,
    inbound: InboundMedia,
    rtcp: RtcpSession,
    out: Outbound,
    /// The agent takes the caller's audio at 16 kHz; what upsamples a narrowband codec's.
    agent_wideband: Option<Box<Upsampler>>,
    /// Smart Turn's 16 kHz audio, from the first wideband frame of the caller's on.
    wide_for_models: Option<Box<WideForModels>>,
    /// Frames played while the jitter buffer grew, held back from the VAD until it is known
    /// whether they were the caller's time ([`Self::hear_on_callers_timeline`]).
    stretch_held: Vec<Popped>,
    /// The frames one playout pops, kept from wake to wake so that a wake allocates nothing
    /// for them.
    popped: Vec<Popped>,
    /// Decodes what the sender sent, as the caller's decoder does (the echo canceller's
    /// reference and the recording's agent track).
    sent_decoder: LineDecoder,
    next_tick: Instant,
    next_interim: Option<Instant>,
    last_rtp: Instant,
    caller_cursor: Option<u64>,
    /// The line's echo taken out of what the VAD hears (`settings.echo_canceller`).
    echo: Option<EchoCanceller>,
    /// Where the next caller frame sits on the echo canceller's timeline if it has no RTP
    /// timestamp (concealment): right after the last (the canceller needs sample-exact spacing).
    echo_cursor: Option<u64>,
    /// The RTP timestamp and canceller position the caller's timeline is anchored at.
    echo_anchor: Option<(u32, u64)>,
    /// The caller's audio handed to the VAD so far (samples: the VAD's stream time) and when
    /// the last of it was: the VAD's events come late by however long the inference thread
    /// took, and their stream times map back to the call's clock through this.
    vad_stream: (u64, Option<Instant>),
    speaking: bool,
    barge_in_allowed: bool,
    /// After a local barge-in: when the interrupted reply was last heard from (its audio is
    /// dropped until it pauses for `REPLY_GAP`).
    cut: Option<Instant>,
    /// When the agent's audio last arrived, while its utterance is open.
    last_play: Option<Instant>,
    /// Until when a starting utterance is held back to prebuffer.
    prebuffer_until: Option<Instant>,
    /// Where the current reply began ([`Outbound::sent_position`]'s count): the first audio
    /// after the queue ran dry or after the end of an utterance.
    reply_start: u64,
    /// The current reply has ended: the next audio starts another.
    reply_ended: bool,
    /// The last of the current reply's marks played.
    reply_mark: Option<String>,
    /// Caller speech over the reply not yet long enough to barge in.
    pending_barge_in: Option<PendingBargeIn>,
    /// How far the VAD has judged the caller's audio (stream time), once the driver says.
    vad_judged: Option<Duration>,
    /// Reply hold-back: this caller's pauses and the decision per turn end.
    hold_back: HoldBack,
    /// The last turn end, until its reply is heard.
    reply_gate: Option<ReplyGate>,
    /// The caller resumed and their reply was dropped: the bot's audio of that reply is dropped
    /// too, until the next turn end or the bot's `clear`.
    stale_reply: bool,
    /// The last turn end's speech end, until the caller speaks again: speech soon after it that
    /// barges in on the reply is a pause the hold-back did not cover (it learns from it).
    last_end_speech_at: Option<Instant>,
    /// When the reply to the last turn end began to play.
    reply_playing_since: Option<Instant>,
    turns: u64,
    barge_ins: u64,
    dtmf: String,
    program: Program,
    /// Answering-machine detection, until its verdict.
    amd: Option<Detector>,
    /// Its verdict, for the record.
    answered_by: Option<AnsweredBy>,
    /// The `<Dial>` the call waits on, ringing or bridged.
    dial: Option<DialLeg>,
    /// This call is itself a `<Dial>`'s leg.
    bridge_leg: bool,
    /// The INVITE is not answered yet ([`CallSettings::unanswered`]).
    unanswered: bool,
    /// What an unanswered call is refused with when it ends: its `<Dial>`'s outcome.
    refuse_with: u16,
    /// Where the leg's own TwiML is, before its bridge.
    whisper: Whisper,
    srtp: Option<CallSrtp>,
    transfer: Option<PendingTransfer>,
    last_transfer: Option<TransferOutcome>,
    phase: Phase,
    /// A hang-up waiting for the queued audio to play out (and its latest time).
    hangup_when_played: Option<(SipRequest, Instant)>,
    outputs: VecDeque<CallOutput>,
    /// Counts since the driver last took them.
    stats: CallStats,
    /// SSRCs and first sequence numbers and timestamps of the call's streams.
    rng: StdRng,
}

/// Frames played while the jitter buffer grew that wait to be known as the caller's time or
/// not. Three absorb a path 60 ms longer; a caller who stops sending without comfort noise
/// has its quiet heard at most 60 ms late, and caught up at the fourth, long before the VAD's
/// stop.
const STRETCH_HELD_MAX: usize = 3;

/// A frame of digital silence.
const SILENT_FRAME: [i16; SAMPLES_PER_FRAME] = [0; SAMPLES_PER_FRAME];

/// One frame of the caller's audio as the jitter buffer played it: at 8 kHz, at 16 kHz when
/// the codec is wideband, and where it came from.
type Popped = (
    [i16; SAMPLES_PER_FRAME],
    Option<Box<[i16; WIDEBAND_SAMPLES_PER_FRAME]>>,
    FrameOrigin,
);

fn sends(d: Direction) -> bool {
    d.flags().0
}

/// Hold, in any of its spellings (RFC 3264 §8.4: `sendonly`, `inactive`; RFC 2543: a
/// `0.0.0.0` address): the caller may send nothing, so no RTP timeout runs.
fn on_hold(m: &NegotiatedMedia) -> bool {
    m.local_direction != Direction::SendRecv || m.remote_rtp.is_none()
}

fn rtcp_address(rtp: SocketAddr) -> SocketAddr {
    SocketAddr::new(rtp.ip(), rtp.port().wrapping_add(1))
}

/// Samples of 8 kHz audio in `d`, rounded to the nearest.
fn samples_in(d: Duration) -> u64 {
    ((d.as_nanos() * u128::from(SAMPLE_RATE_HZ) + 500_000_000) / 1_000_000_000) as u64
}

impl CallCore {
    /// A call answered at `now` (`wall`: the wall-clock time at `now`, for RTCP and the CDR),
    /// with the media negotiated in the answer. The first outputs (the outgoing stream) are
    /// ready at once.
    pub fn new(
        settings: CallSettings,
        info: CallInfo,
        negotiated: NegotiatedMedia,
        start_unix_ms: u64,
        now: Instant,
        wall: SystemTime,
    ) -> CallCore {
        let settings_unanswered = settings.unanswered;
        let hold_back = HoldBack::new(settings.hold_back);
        let sdp_ip: Option<IpAddr> = negotiated.remote_rtp.map(|a| a.ip());
        let max_buffered_bytes =
            (settings.max_buffered.as_secs_f64() * f64::from(SAMPLE_RATE_HZ)) as usize;
        let mut rng = StdRng::seed_from_u64(settings.rng_seed);
        let rtcp = RtcpSession::new(
            negotiated.remote_rtp.map(rtcp_address),
            rng.random(),
            settings.cname.clone(),
            now,
            wall,
        );
        let mut core = CallCore {
            inbound: InboundMedia::new(negotiated, sdp_ip, now),
            out: Outbound::new(negotiated.codec, max_buffered_bytes),
            sent_decoder: LineDecoder::new(negotiated.codec),
            agent_wideband: None,
            wide_for_models: None,
            stretch_held: Vec::new(),
            popped: Vec::new(),
            rtcp,
            settings,
            info,
            start_unix_ms,
            answer_unix_ms: unix_ms(wall),
            answered: now,
            wall_at_answer: wall,
            negotiated,
            next_tick: now + FRAME,
            next_interim: None,
            last_rtp: now,
            caller_cursor: None,
            echo: None,
            echo_cursor: None,
            echo_anchor: None,
            vad_stream: (0, None),
            speaking: false,
            barge_in_allowed: true,
            cut: None,
            last_play: None,
            prebuffer_until: None,
            reply_start: 0,
            reply_ended: true,
            reply_mark: None,
            pending_barge_in: None,
            vad_judged: None,
            hold_back,
            reply_gate: None,
            stale_reply: false,
            last_end_speech_at: None,
            reply_playing_since: None,
            turns: 0,
            barge_ins: 0,
            dtmf: String::new(),
            program: Program::default(),
            amd: None,
            answered_by: None,
            dial: None,
            bridge_leg: false,
            unanswered: settings_unanswered,
            refuse_with: REFUSE_UNBRIDGED,
            srtp: None,
            transfer: None,
            last_transfer: None,
            phase: Phase::Up,
            hangup_when_played: None,
            whisper: Whisper::None,
            outputs: VecDeque::new(),
            stats: CallStats::default(),
            rng,
        };
        if core.settings.echo_canceller {
            // The default configuration is valid; a failure here would be a bug, not input.
            core.echo = EchoCanceller::new(&EchoConfig::default())
                .map_err(|e| tracing::warn!(error = %e, "echo canceller off for this call"))
                .ok();
        }
        core.program.set_dial_by_refer(core.settings.dial_by_refer);
        core.next_interim = core.settings.interim_record_interval.map(|i| now + i);
        core.start_stream_if_sending();
        core
    }

    /// The call's facts.
    pub fn info(&self) -> &CallInfo {
        &self.info
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<CallOutput> {
        self.outputs.pop_front()
    }

    /// When to call [`CallCore::handle_timeout`] next (`None` once the call has ended).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            // A TwiML pause ends between two ticks at the latest.
            Phase::Up => Some(
                self.program
                    .wake_at()
                    .map_or(self.next_tick, |t| t.min(self.next_tick)),
            ),
            Phase::HangingUp { give_up_at, .. } => Some(self.next_tick.min(give_up_at)),
            Phase::Ended => None,
        }
    }

    /// Detect who answered from now on (`MachineDetection`): the callee's frames feed
    /// `detector` (after the echo canceller, as the VAD hears them), and so do the VAD's speech
    /// segments once [`Detector::use_vad_segments`] was called on it. The verdict comes out as
    /// [`CallOutput::Amd`], once.
    pub fn detect_machine(&mut self, detector: Detector) {
        self.amd = Some(detector);
    }

    /// Hand a verdict on, if there is one, and stop detecting.
    fn amd_decided(&mut self, verdict: Option<ontime_amd::Verdict>) {
        if let Some(verdict) = verdict {
            info!(
                answered_by = verdict.answered_by.as_str(),
                after_ms = verdict.after.as_millis() as u64,
                "answering-machine detection decided"
            );
            self.amd = None;
            self.answered_by = Some(verdict.answered_by);
            self.stats.amd_verdict = Some(verdict.answered_by.as_str());
            self.outputs.push_back(CallOutput::Amd(verdict));
        }
    }

    /// The inbound jitter buffer's current depth (for `ontime_jitter_depth_seconds`).
    pub fn jitter_depth(&self) -> Duration {
        self.inbound.jitter().depth()
    }

    /// The stream asked for by [`CallOutput::StartStream`] is running.
    pub fn attach_stream(
        &mut self,
        producer: StreamProducer,
        packetizer: &Packetizer,
        now: Instant,
    ) {
        if self.phase == Phase::Ended {
            return; // dropping the producer removes the stream
        }
        self.rtcp.set_outgoing(Some(OutgoingStream {
            ssrc: packetizer.ssrc(),
            first_timestamp: packetizer.next_timestamp(),
            started: now,
            clock_hz: self.negotiated.codec.rtp_clock_hz(),
        }));
        self.out.attach(producer);
    }

    /// The call's media is SRTP under these keys (call before the first output is taken:
    /// the first stream is protected too).
    pub fn use_srtp(&mut self, keys: SdesKeys) {
        let outbound = keys.outbound();
        for out in self.outputs.iter_mut() {
            if let CallOutput::StartStream { srtp, .. } = out {
                *srtp = Some(Box::new(keys.outbound()));
            }
        }
        self.srtp = Some(CallSrtp {
            inbound: keys.inbound(),
            rtcp_out: outbound,
            keys,
        });
    }

    /// Symmetric RTP for this call: its media (and RTCP) latch to the first source that sends a
    /// consistent run of valid packets (with SRTP: packets that authenticate, as they are
    /// unprotected before the source is checked), whatever address its SDP named.
    pub fn use_symmetric_rtp(&mut self) {
        self.inbound.use_symmetric_rtp();
        self.rtcp.use_symmetric_rtp();
    }

    /// Whether the call's media is SRTP (the tests' view; the driver learns it from the SDP).
    #[cfg(test)]
    pub fn is_srtp(&self) -> bool {
        self.srtp.is_some()
    }

    #[cfg(test)]
    pub fn jitter_counters(&self) -> ontime_jitter::JitterCounters {
        self.inbound.jitter_counters()
    }

    /// What the call counted since the last call of this (the driver adds it to the metrics).
    pub fn take_stats(&mut self) -> CallStats {
        std::mem::take(&mut self.stats)
    }

    /// A datagram on the RTP port (SRTP is unprotected in place).
    pub fn handle_rtp(&mut self, bytes: &mut [u8], src: SocketAddr, now: Instant) {
        if self.phase == Phase::Ended {
            return;
        }
        // RFC 7983's demultiplexing: a first byte of 0 to 3 is STUN (ICE connectivity checks
        // some phones send to the media port), not RTP or SRTP: dropped under its own name.
        if bytes.first().is_some_and(|b| *b < 4) {
            self.stats.rtp_invalid.add("stun", 1);
            return;
        }
        let bytes = match self.srtp.as_mut() {
            None => &bytes[..],
            Some(s) => match s.inbound.unprotect(bytes) {
                Ok(n) => &bytes[..n],
                Err(e) => {
                    self.stats.srtp_dropped.add(e.reason(), 1);
                    return;
                }
            },
        };
        match self.inbound.handle_datagram(bytes, src, now) {
            InboundOutcome::Audio => {
                self.last_rtp = now;
                self.stats.rtp_received += 1;
                self.play_caller_audio(now);
            }
            InboundOutcome::Latched(addr) => {
                self.last_rtp = now;
                self.stats.rtp_received += 1;
                if let Some(p) = self.out.producer() {
                    self.outputs.push_back(CallOutput::SetStreamRemote {
                        stream: p.id(),
                        remote: addr,
                    });
                }
                self.rtcp.set_remote(rtcp_address(addr));
                self.play_caller_audio(now);
            }
            InboundOutcome::Dtmf(digit) => {
                self.last_rtp = now;
                self.stats.rtp_received += 1;
                if let Some(d) = digit {
                    self.digit(d);
                }
            }
            InboundOutcome::Dropped(reason) => {
                self.stats.rtp_invalid.add(reason, 1);
            }
            InboundOutcome::Rtcp => {}
        }
        if self.phase == Phase::Up && self.next_tick <= now + TICK_WITH_PACKET {
            self.next_tick = now + FRAME + TICK_AFTER_PACKET_SLACK;
            self.tick(now);
        }
    }

    /// A datagram on the RTCP port.
    pub fn handle_rtcp(&mut self, bytes: &mut [u8], src: SocketAddr, now: Instant) {
        let bytes = match self.srtp.as_mut() {
            None => &bytes[..],
            Some(s) => match s.inbound.unprotect_rtcp(bytes) {
                Ok(n) => &bytes[..n],
                Err(e) => {
                    self.stats.srtp_dropped.add(e.reason(), 1);
                    return;
                }
            },
        };
        if self.phase != Phase::Ended {
            self.rtcp
                .handle_packet(bytes, src, now, self.inbound.caller_ip(), &mut self.stats);
        }
    }

    /// Something from the SIP side.
    pub fn handle_dialog(&mut self, event: DialogEvent, now: Instant) {
        match event {
            DialogEvent::Established => {}
            DialogEvent::Media(n) => self.media_changed(n, now),
            DialogEvent::Dtmf(d) => self.digit(d),
            DialogEvent::Ended(cause) => {
                let cause = match self.phase {
                    // Our BYE's cause is the call's cause, whatever ended the dialog.
                    Phase::HangingUp { cause, .. } => cause,
                    _ => cause,
                };
                self.finish(cause, now);
            }
            DialogEvent::Hangup(cause) => self.hang_up(cause, SipRequest::Hangup, now),
            DialogEvent::ReferResponse(status) => {
                let outcome = self.transfer.as_ref().and_then(|t| t.on_response(status));
                if let Some(o) = outcome {
                    self.transfer_ended(o, now);
                }
            }
            DialogEvent::ReferProgress { status, terminated } => {
                let outcome = self
                    .transfer
                    .as_ref()
                    .and_then(|t| t.on_progress(status, terminated));
                if let Some(o) = outcome {
                    self.transfer_ended(o, now);
                }
            }
        }
    }

    /// A command from the call-control API.
    pub fn handle_command(&mut self, command: CallCommand, now: Instant) {
        if self.phase != Phase::Up {
            return;
        }
        match command {
            CallCommand::Complete => self.hang_up(
                EndCause::GatewayBye,
                SipRequest::HangupWithReason(REASON_NORMAL_CLEARING.into()),
                now,
            ),
            CallCommand::Run(verbs) => {
                // New TwiML ends a `<Dial>` in progress, as on Twilio: its leg is cancelled or
                // hung up, and its end (still reported) no longer resumes anything.
                if let Some(leg) = self.dial.take() {
                    info!("new TwiML ends the <Dial> in progress");
                    for sid in leg.live_legs() {
                        self.outputs.push_back(CallOutput::EndDial(sid.to_string()));
                    }
                    self.out.clear();
                    self.last_play = None;
                    self.prebuffer_until = None;
                    self.barge_in_allowed = true;
                }
                self.program.replace(verbs);
                self.run_program(now);
            }
            CallCommand::DialPlaced(sid) => {
                if let Some(leg) = self.dial.as_mut() {
                    leg.placed(sid);
                }
            }
            CallCommand::DialAnswered(sid) => {
                if let Some(leg) = self.dial.as_mut() {
                    info!(leg = %sid, "dialled leg answered: bridged");
                    leg.answered(sid, now);
                    // `answerOnBridge`: the caller's call is answered now, not before.
                    self.answer_now(now);
                    // The ringback stops; what comes now is the other party.
                    self.out.clear();
                    self.last_play = None;
                    self.prebuffer_until = None;
                }
            }
            CallCommand::DialEnded(end) => self.dial_ended(end, now),
            CallCommand::DialAction(verbs) => {
                self.program.run_action(verbs);
                self.run_program(now);
            }
            CallCommand::Whisper(verbs) => {
                info!(
                    verbs = verbs.len(),
                    "running the leg's TwiML before the bridge"
                );
                self.whisper = Whisper::Running;
                self.program.replace(verbs);
                self.run_program(now);
            }
        }
    }

    /// A `<Dial>`: the caller hears ringback while the driver places the leg; the agent is
    /// let go of (the driver's part), and the caller's speech no longer cuts what plays.
    fn start_dial(&mut self, dial: Dial, now: Instant) {
        info!(
            timeout_s = dial.timeout.as_secs(),
            "dialling a leg to bridge"
        );
        self.barge_in_allowed = false;
        self.pending_barge_in = None;
        self.out.clear();
        self.last_play = None;
        self.prebuffer_until = None;
        self.outputs.push_back(CallOutput::Dial(dial.clone()));
        self.dial = Some(DialLeg::new(dial));
        self.ringback(now);
    }

    /// Whether the call waits on a `<Dial>`'s leg (ringing or bridged).
    pub fn dialing(&self) -> bool {
        self.dial.is_some()
    }

    /// Whether a `<Dial>`'s leg is bridged to this call now.
    pub fn bridged(&self) -> bool {
        self.dial.as_ref().is_some_and(DialLeg::is_bridged)
    }

    /// This call is a `<Dial>`'s leg: the other party is its agent for as long as it lasts.
    pub fn serve_bridge(&mut self) {
        self.bridge_leg = true;
    }

    /// Whether the call's audio goes to another leg (either side of a bridge).
    fn in_bridge(&self) -> bool {
        self.bridge_leg || self.dial.as_ref().is_some_and(DialLeg::is_bridged)
    }

    /// Keep ringback queued while the leg rings.
    fn ringback(&mut self, now: Instant) {
        let ringing = self.dial.as_ref().is_some_and(|d| !d.is_bridged()) && !self.unanswered;
        let low = (RINGBACK_LOW_WATER.as_millis() as usize) * SAMPLE_RATE_HZ as usize / 1000;
        if ringing && self.out.queued_bytes() < low {
            let cycle = ringback_cycle();
            self.play(now, cycle.len(), |out| out.play(&cycle));
        }
    }

    fn dial_ended(&mut self, mut end: DialEnd, now: Instant) {
        let Some(leg) = self.dial.as_mut() else {
            return;
        };
        // A leg that answered but hung up before it was bridged declined the call in its own
        // TwiML (`<Number url>` hung up), or lost the race to another leg: either way the
        // person did not take it, which is what a bot must learn to try someone else.
        // Twilio's documents do not name a status for it.
        if !leg.is_bridged() && end.status == CallStatus::Completed {
            end.status = CallStatus::NoAnswer;
        }
        let Some(end) = leg.leg_ended(end) else {
            return;
        };
        self.refuse_with = match end.status {
            CallStatus::Busy => 486,
            CallStatus::Canceled => 487,
            CallStatus::Failed => 503,
            _ => REFUSE_UNBRIDGED,
        };
        let Some(leg) = self.dial.take() else {
            return;
        };
        info!(
            status = end.status.as_str(),
            sip_status = ?end.sip_status,
            duration_s = end.duration_secs,
            "dialled leg over"
        );
        self.out.clear();
        self.last_play = None;
        self.prebuffer_until = None;
        self.barge_in_allowed = true;
        match leg.action() {
            Some((url, method_get)) => {
                let mut params = crate::routing::webhook_params(&self.info);
                for (k, v) in params.iter_mut() {
                    if k == "CallStatus" {
                        *v = "in-progress".into();
                    }
                }
                params.extend(leg.action_params(&end));
                self.outputs.push_back(CallOutput::FetchTwiml {
                    url: url.to_string(),
                    method_get,
                    params,
                });
                self.program.await_action();
            }
            None => self.program.dial_ended(),
        }
        self.run_program(now);
    }

    /// The sender queued the digits of [`CallOutput::SendDigits`] (they play for `took`), or
    /// refused them (`None`).
    pub fn digits_queued(&mut self, digits: &str, took: Option<Duration>, now: Instant) {
        if took.is_some() {
            let n = digits
                .chars()
                .filter(|d| !d.eq_ignore_ascii_case(&'w'))
                .count();
            self.stats.dtmf_sent += n as u64;
        }
        self.program.digits_queued(took, now);
        self.run_program(now);
    }

    /// Carry out the program's steps due now.
    fn run_program(&mut self, now: Instant) {
        self.run_steps(now);
        // A leg's own TwiML that ran out (not into a bot) is over: the bridge follows.
        if self.whisper == Whisper::Running && self.phase == Phase::Up && self.program.is_idle() {
            self.whisper_done();
        }
    }

    /// Answer a call started unanswered (if it still is): the INVITE's 200, then media.
    fn answer_now(&mut self, now: Instant) {
        if !self.unanswered || self.phase != Phase::Up {
            return;
        }
        info!("answering the call");
        self.unanswered = false;
        // The caller's media starts with our answer: the RTP timeout counts from here.
        self.last_rtp = now;
        self.outputs.push_back(CallOutput::Sip(SipRequest::Answer));
        self.start_stream_if_sending();
    }

    fn whisper_done(&mut self) {
        info!("the leg's TwiML is over: bridging");
        self.whisper = Whisper::Done;
        self.outputs.push_back(CallOutput::WhisperDone);
    }

    fn run_steps(&mut self, now: Instant) {
        while self.phase == Phase::Up {
            let rtp_digits =
                self.negotiated.telephone_event_pt.is_some() && self.out.producer().is_some();
            let Some(step) = self.program.poll(now, rtp_digits) else {
                return;
            };
            // An unanswered call is answered by any step but a hang-up (refused instead) and a
            // `<Dial answerOnBridge>` (answered by its bridge), as Twilio's.
            let answers = match &step {
                Step::Hangup(_) => false,
                Step::Dial(d) => !d.answer_on_bridge,
                _ => true,
            };
            if answers && self.unanswered {
                self.answer_now(now);
            }
            match step {
                Step::Hangup(reason) => self.hang_up(
                    EndCause::GatewayBye,
                    SipRequest::HangupWithReason(reason.into()),
                    now,
                ),
                Step::SendDigits(digits) => {
                    match (self.negotiated.telephone_event_pt, self.out.producer()) {
                        (Some(payload_type), Some(p)) => {
                            self.outputs.push_back(CallOutput::SendDigits {
                                stream: p.id(),
                                payload_type,
                                digits,
                            })
                        }
                        _ => self.program.digits_queued(None, now),
                    }
                }
                Step::InfoDigit(d) => {
                    self.stats.dtmf_sent += 1;
                    self.outputs
                        .push_back(CallOutput::Sip(SipRequest::InfoDtmf(d, INFO_DIGIT_TONE)));
                }
                Step::Transfer(target) => self.start_transfer(&target, now),
                Step::Connect {
                    url,
                    parameters,
                    audio,
                } => {
                    if self.whisper == Whisper::Running {
                        self.whisper = Whisper::Bot;
                    }
                    info!(%url, "connecting the call to a new bot");
                    self.outputs.push_back(CallOutput::ConnectStream {
                        url,
                        parameters,
                        audio,
                    });
                }
                Step::Dial(dial) => self.start_dial(dial, now),
            }
        }
    }

    fn start_transfer(&mut self, target: &DialTarget, now: Instant) {
        let written = refer_to(target, &self.settings.transfer_domain);
        // The URI's X- headers (`?X-Campaign=7`) travel as headers of the Refer-To URI, not as
        // headers of the REFER: RFC 3515 §2.1 has the referee (the trunk or PBX acting on the
        // REFER) copy them onto the INVITE it sends to the target, which is where the bot
        // wants them to arrive, and Twilio's own <Refer> puts them there; headers of the REFER
        // itself stop at the referee. TwiML's were checked when it was parsed; an agent's
        // `AgentAction::Transfer` is checked here. What is recorded and reported is the URI
        // without them (their values may be secrets).
        let (uri, refer_to_uri) = match SipTarget::parse(&written) {
            Ok(t) => {
                if !t.headers.is_empty() {
                    info!(headers = %t.headers.names(), "the Refer-To carries X- headers");
                }
                let with = t.with_headers();
                (t.uri, with)
            }
            Err(e) => {
                warn!(error = %e, "transfer refused: its URI's headers cannot be sent");
                let o = TransferOutcome {
                    target: written.split('?').next().unwrap_or_default().to_string(),
                    result: TransferResult::Rejected,
                    sip_status: None,
                };
                return self.transfer_ended(o, now);
            }
        };
        if self.transfer.is_some() {
            // One REFER at a time (RFC 3515 subscriptions would otherwise need ids).
            let o = TransferOutcome {
                target: uri,
                result: TransferResult::Rejected,
                sip_status: None,
            };
            return self.transfer_ended(o, now);
        }
        info!(target = %uri, "transferring the call (REFER)");
        self.transfer = Some(PendingTransfer::new(uri.clone(), now));
        self.outputs
            .push_back(CallOutput::Sip(SipRequest::Refer(refer_to_uri)));
    }

    fn transfer_ended(&mut self, outcome: TransferOutcome, now: Instant) {
        self.transfer = None;
        self.stats.transfers.add(outcome.result.as_str(), 1);
        info!(target = %outcome.target, result = outcome.result.as_str(), sip_status = ?outcome.sip_status, "transfer ended");
        self.last_transfer = Some(outcome.clone());
        self.notify(AgentNotice::Transfer(outcome.clone()));
        let completed = outcome.result == TransferResult::Completed;
        self.outputs.push_back(CallOutput::Transfer(outcome));
        if completed {
            // The caller is with the transfer target now: our leg ends.
            self.hang_up(EndCause::Transferred, SipRequest::Hangup, now);
        } else {
            self.program.transfer_done();
            self.run_program(now);
        }
    }

    /// An event from the inference thread. The turn-taking decision is made here and only here.
    pub fn handle_inference(&mut self, event: InferenceEvent, now: Instant) {
        if self.phase != Phase::Up {
            return;
        }
        match event {
            InferenceEvent::SpeechStarted { onset, detected } => {
                self.speaking = true;
                let onset_at = self.stream_instant(onset, now);
                if let Some(amd) = self.amd.as_mut() {
                    let verdict = amd.speech_started(onset_at);
                    self.amd_decided(verdict);
                }
                self.update_reply_gate(now);
                self.hold_back.speech_started(onset_at);
                let last_end = self.last_end_speech_at.take();
                if let Some(gate) = self.reply_gate.take() {
                    // The reply is not heard yet: the end was a pause, and the reply goes.
                    self.turn_resumed(gate, onset_at);
                    self.notify(AgentNotice::SpeechStarted);
                    return;
                }
                if let (Some(end), Some(playing)) = (last_end, self.reply_playing_since) {
                    let pause = onset_at.saturating_duration_since(end);
                    let heard = onset_at.saturating_duration_since(playing);
                    let learned =
                        self.may_barge_in() && pause <= RESUME_WINDOW && heard < RESUME_HEARD;
                    if learned {
                        // Over the reply's start: a pause longer than the hold. Learn it.
                        self.hold_back.resumed(pause);
                    }
                    info!(
                        pause_ms = pause.as_millis() as u64,
                        reply_heard_ms = heard.as_millis() as u64,
                        learned,
                        "the caller spoke again over the reply to their turn"
                    );
                }
                if self.may_barge_in() {
                    let lasted = detected.saturating_sub(onset);
                    // What the caller heard is counted to when they began, which can be before
                    // the VAD heard them; the decisions go by what the VAD heard.
                    let spoke_at = onset_at
                        .checked_sub(self.echo_held(onset))
                        .unwrap_or(onset_at);
                    let min = self.settings.barge_in_min_speech;
                    if lasted >= min {
                        self.barge_in(spoke_at, now);
                    } else {
                        // Perhaps a backchannel: barge in only once the speech has lasted the
                        // minimum and the VAD has had time to tell if it stopped before.
                        // The VAD may hear the echo gate's hangover as speech going on: the
                        // decision waits that much longer for the stop (which takes it back).
                        let hangover = if self.echo.is_some() {
                            CALLER_HANGOVER_TIME
                        } else {
                            Duration::ZERO
                        };
                        let wait = min + self.settings.speech_stop_lag + hangover;
                        self.pending_barge_in = Some(PendingBargeIn {
                            onset,
                            spoke_at,
                            decide_at: onset_at + wait,
                            decide_on_stream: onset + wait,
                        });
                    }
                }
                self.notify(AgentNotice::SpeechStarted);
            }
            InferenceEvent::SpeechStopped { end, .. } => {
                self.speaking = false;
                let end_at = self.stream_instant(end, now);
                self.hold_back.speech_stopped(end_at);
                if let Some(amd) = self.amd.as_mut() {
                    let verdict = amd.speech_stopped(end_at);
                    self.amd_decided(verdict);
                }
                if let Some(p) = self.pending_barge_in.take() {
                    // As the caller spoke it: without the tail the echo gate passed on its
                    // hangover alone.
                    let hangover = self.echo_hangover_heard(end);
                    let lasted = end.saturating_sub(p.onset).saturating_sub(hangover);
                    info!(
                        heard_ms = end.saturating_sub(p.onset).as_millis() as u64,
                        hangover_ms = hangover.as_millis() as u64,
                        lasted_ms = lasted.as_millis() as u64,
                        "speech ended before the barge-in decision"
                    );
                    if lasted < self.settings.barge_in_min_speech {
                        self.stats.backchannels += 1;
                        self.notify(AgentNotice::Backchannel {
                            speech_ms: lasted.as_millis() as u64,
                        });
                    } else if self.may_barge_in() {
                        self.barge_in(p.spoke_at, now);
                    }
                }
                self.notify(AgentNotice::SpeechStopped);
            }
            InferenceEvent::TurnEnded {
                probability,
                complete,
                timed_out,
                latency,
                final_pitch,
                ..
            } => {
                // A verdict on audio the caller has since continued is stale.
                if complete && !self.speaking {
                    self.turns += 1;
                    self.stats.turns += 1;
                    let hold = self.hold_back.turn_ended(
                        (!timed_out).then_some(probability),
                        final_pitch,
                        now,
                    );
                    let speech_end_at = hold.speech_end_at;
                    let held = hold.release_at > now;
                    if held {
                        self.stats.replies_held.add(hold.reason.as_str(), 1);
                    }
                    if let Some(cue) = hold.lifted {
                        self.stats.holds_lifted.add(cue, 1);
                    }
                    // The decision's inputs with it.
                    info!(
                        probability,
                        timed_out,
                        latency_ms = latency.as_secs_f64() * 1e3,
                        hold_ms = hold.wait(now).as_millis() as u64,
                        hold = hold.reason.as_str(),
                        speech_ms = hold.speech.as_millis() as u64,
                        resume_rate = hold.resume_rate,
                        longest_pause_ms = hold.longest_pause.map(|p| p.as_millis() as u64),
                        resumed_turn = hold.resumed_turn,
                        words = hold.words.map_or("none", |w| w.as_str()),
                        final_pitch_st = hold.final_pitch,
                        lifted = hold.lifted,
                        "turn ended"
                    );
                    // A new end: whatever the bot sends now is its reply to it.
                    self.stale_reply = false;
                    self.reply_playing_since = None;
                    self.reply_gate = Some(ReplyGate {
                        speech_end_at,
                        ended_at: now,
                        release_at: hold.release_at,
                        held,
                    });
                    self.last_end_speech_at = Some(speech_end_at);
                    self.notify(AgentNotice::TurnEnded {
                        probability: (!timed_out).then_some(probability),
                    });
                }
            }
        }
    }

    /// An action from the agent.
    pub fn handle_agent(&mut self, action: AgentAction, now: Instant) {
        if self.phase != Phase::Up {
            return;
        }
        match action {
            AgentAction::Play(samples) => {
                self.play(now, samples.len(), |out| out.play(&samples));
            }
            AgentAction::PlayWide(samples) => {
                self.play(now, samples.len() / 2, |out| out.play_wide(&samples));
            }
            AgentAction::ReceiveWideband(wide) => {
                self.agent_wideband = wide.then(Box::default);
            }
            AgentAction::PlayG711 { law, audio } => {
                self.play(now, audio.len(), |out| out.play_g711(law, &audio));
            }
            AgentAction::EndOfUtterance => {
                self.reply_ended = true;
                self.last_play = None;
                self.release_prebuffer_now();
                self.out.end_utterance();
                self.out.feed();
            }
            AgentAction::Mark(name) => {
                self.out.mark(name);
                self.out.feed();
            }
            AgentAction::Clear => {
                // The bot cleared its own audio: whatever it sends next is its next reply.
                self.stale_reply = false;
                self.reply_ended = true;
                self.pending_barge_in = None;
                self.cut = None;
                self.last_play = None;
                self.prebuffer_until = None;
                self.out.clear();
            }
            AgentAction::AllowBargeIn(allowed) => self.barge_in_allowed = allowed,
            AgentAction::Transcript(text) => self.caller_words(&text, now),
            AgentAction::Hangup => self.hang_up(EndCause::GatewayBye, SipRequest::Hangup, now),
            AgentAction::HangupWithReason(reason) => self.hang_up(
                EndCause::GatewayBye,
                SipRequest::HangupWithReason(reason),
                now,
            ),
            AgentAction::HangupWhenPlayed(reason) => {
                // Nothing more is coming: what is queued plays at once, padded to a frame.
                if let Some(g) = self.reply_gate.as_mut() {
                    g.held = false;
                }
                self.last_play = None;
                self.release_prebuffer_now();
                if self.out.queued() {
                    self.out.end_utterance();
                    self.out.feed();
                }
                let request = reason.map_or(SipRequest::Hangup, SipRequest::HangupWithReason);
                let queued = self.out.queued_bytes() as u64 * 1000 / u64::from(SAMPLE_RATE_HZ);
                let give_up_at = now + Duration::from_millis(queued) + HANGUP_WHEN_PLAYED_SLACK;
                self.hangup_when_played = Some((request, give_up_at));
                self.hang_up_if_played(now);
            }
            // A bridged leg's digits (the other party pressed them) go out at once: the program
            // waits on the `<Dial>` meanwhile.
            AgentAction::SendDigits(digits)
                if self.dial.as_ref().is_some_and(DialLeg::is_bridged) =>
            {
                if let (Some(payload_type), Some(p)) =
                    (self.negotiated.telephone_event_pt, self.out.producer())
                {
                    self.outputs.push_back(CallOutput::SendDigits {
                        stream: p.id(),
                        payload_type,
                        digits,
                    });
                } else if let Some(d) = digits.chars().next() {
                    self.stats.dtmf_sent += 1;
                    self.outputs
                        .push_back(CallOutput::Sip(SipRequest::InfoDtmf(d, INFO_DIGIT_TONE)));
                }
            }
            AgentAction::SendDigits(digits) => {
                self.program.push(Verb::PlayDigits(digits));
                self.run_program(now);
            }
            AgentAction::Transfer(target) => {
                let target = if target.starts_with("sip:") || target.starts_with("sips:") {
                    DialTarget::Sip(target)
                } else {
                    DialTarget::Number(target)
                };
                self.program.push(Verb::Transfer(target));
                self.run_program(now);
            }
        }
    }

    /// The VAD has judged the caller's audio up to `judged` on its stream clock (the clock of
    /// [`InferenceEvent`]'s times). A pending barge-in is decided only once the VAD has judged
    /// the audio that could have held the speech's stop; without this input it goes by the
    /// call's clock alone.
    pub fn handle_vad_progress(&mut self, judged: Duration) {
        self.vad_judged = Some(judged);
    }

    /// Time passed: play caller audio due, feed the sender, report marks, send RTCP, check the
    /// timeouts.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Ended => return,
            Phase::HangingUp { cause, give_up_at } if now >= give_up_at => {
                return self.finish(cause, now);
            }
            _ => {}
        }
        if now < self.next_tick {
            // Between two ticks only the program can be due (a pause, digits played out).
            if self.program.wake_at().is_some_and(|t| t <= now) {
                self.run_program(now);
            }
            return;
        }
        self.next_tick = if now.duration_since(self.next_tick) > MAX_CATCH_UP {
            now + FRAME
        } else {
            self.next_tick + FRAME
        };
        self.tick(now);
    }

    /// The 20 ms playout tick's work, from the timer or with a packet (`TICK_WITH_PACKET`).
    fn tick(&mut self, now: Instant) {
        self.play_caller_audio(now);
        if let Some(amd) = self.amd.as_mut() {
            // A callee that sends nothing still gets its verdict at the timeouts.
            let verdict = amd.poll(now);
            self.amd_decided(verdict);
        }
        self.ringback(now);
        if let Some(sid) = self
            .dial
            .as_ref()
            .filter(|d| d.time_limit_at().is_some_and(|t| now >= t))
            .and_then(|d| d.bridged_sid())
        {
            info!("the bridge reached its timeLimit");
            self.outputs.push_back(CallOutput::EndDial(sid.to_string()));
            if let Some(d) = self.dial.as_mut() {
                // Asked once: the leg's end comes back as `DialEnded`.
                d.time_limit_passed();
            }
        }
        let transfer_over = self.transfer.as_ref().and_then(|t| t.on_timeout(now));
        if let Some(o) = transfer_over {
            self.transfer_ended(o, now);
        }
        self.run_program(now);
        self.update_reply_gate(now);
        self.release_prebuffer(now);
        if self
            .last_play
            .is_some_and(|t| now.saturating_duration_since(t) >= REPLY_GAP)
        {
            // The agent paused: its utterance is over, whether or not it said so.
            self.reply_ended = true;
            self.last_play = None;
            self.release_prebuffer_now();
            self.out.end_utterance();
        }
        self.out.feed();
        self.inbound.count_jitter(&mut self.stats);
        self.collect_stream_events();
        self.collect_sent_audio();
        let packets_sent = self.out.producer().map(|p| p.stats().packets_sent);
        if let Some(r) = self.rtcp.poll_report(now, &mut self.inbound, packets_sent) {
            let mut bytes = r.bytes;
            let protected = match self.srtp.as_mut() {
                None => true,
                Some(s) => {
                    let len = bytes.len();
                    bytes.resize(len + SRTCP_TRAILER_LEN, 0);
                    match s.rtcp_out.protect_rtcp(&mut bytes, len) {
                        Ok(n) => {
                            bytes.truncate(n);
                            true
                        }
                        Err(e) => {
                            self.stats.srtp_dropped.add(e.reason(), 1);
                            false
                        }
                    }
                }
            };
            if protected {
                self.outputs.push_back(CallOutput::Rtcp {
                    bytes,
                    destination: r.destination,
                });
            }
        }
        if self.phase != Phase::Up {
            return;
        }
        self.hang_up_if_played(now);
        self.decide_barge_in(now);
        if let Some(at) = self.next_interim.filter(|at| now >= *at) {
            let interval = self
                .settings
                .interim_record_interval
                .unwrap_or(Duration::MAX);
            self.next_interim = at.checked_add(interval);
            let record = self.record(RecordKind::Interim, None, now);
            self.outputs
                .push_back(CallOutput::Interim(Box::new(record)));
        }
        if let Some(timeout) = self.settings.rtp_timeout {
            // Only while the caller should be sending: on hold (we receive nothing by
            // agreement) the clock is paused, and restarts at resume.
            // Nor before the answer: a caller sends media once it has ours.
            let expecting = !on_hold(&self.negotiated) && !self.unanswered;
            if expecting && now.duration_since(self.last_rtp) >= timeout {
                self.stats.rtp_timeouts += 1;
                info!(
                    timeout_s = timeout.as_secs_f64(),
                    "no RTP from the caller: hanging up"
                );
                return self.hang_up(EndCause::RtpTimeout, SipRequest::Hangup, now);
            }
        }
        if now.duration_since(self.answered) >= self.settings.max_call_duration {
            info!("maximum call length reached: hanging up");
            self.hang_up(EndCause::MaxDuration, SipRequest::Hangup, now);
        }
    }

    /// Let a prebuffered start go once enough is queued or the wait is over.
    /// Agent audio of `samples` samples, queued by `queue` (which returns the bytes it dropped
    /// beyond `max_buffered`) unless the caller cut the reply it belongs to; then one feed.
    fn play(&mut self, now: Instant, samples: usize, queue: impl FnOnce(&mut Outbound) -> usize) {
        if self.stale_reply {
            // The reply to an end the caller resumed after: it is not heard.
            self.stats.agent_audio_cut_frames += samples.div_ceil(FRAME_BYTES) as u64;
            return;
        }
        self.update_reply_gate(now);
        if let Some(heard) = self.cut {
            if now.saturating_duration_since(heard) < REPLY_GAP {
                // Still the reply the caller cut: it stays cut.
                self.cut = Some(now);
                self.stats.agent_audio_cut_frames += samples.div_ceil(FRAME_BYTES) as u64;
                return;
            }
            self.cut = None;
        }
        let dry = self.out.is_dry();
        if dry || self.reply_ended {
            self.reply_ended = false;
            self.reply_start = self.out.end_position();
            self.reply_mark = None;
        }
        if dry {
            // A new utterance (or audio after a hole): prebuffer before it plays; a held reply
            // waits for its release too.
            self.out.hold(true);
            let mut until = now + PREBUFFER;
            if let Some(g) = self.reply_gate.filter(|g| g.held) {
                until = until.max(g.release_at);
            }
            self.prebuffer_until = Some(until);
        }
        self.last_play = Some(now);
        let dropped = queue(&mut self.out);
        if dropped > 0 {
            self.stats.agent_audio_dropped_frames += dropped.div_ceil(FRAME_BYTES) as u64;
        }
        self.stats
            .agent_buffered_seconds
            .push(self.out.queued_bytes() as f64 / f64::from(SAMPLE_RATE_HZ));
        self.release_prebuffer(now);
        // Into the sender's ring now, not at the next tick: the reply then starts at the
        // sender's next 20 ms slot (10 ms sooner on average).
        self.out.feed();
    }

    /// Whether caller speech now would clear the reply: local barge-in, allowed, and a reply
    /// playing (audio queued, or an agent streaming one: its ring can be empty between two
    /// chunks).
    fn may_barge_in(&self) -> bool {
        let replying = self.out.queued() || self.last_play.is_some();
        self.settings.barge_in == BargeIn::Local && self.barge_in_allowed && replying
    }

    /// Barge-in: the caller talks over the reply (their speech began at `onset_at`); drop it at
    /// once, and what is still coming of it.
    fn barge_in(&mut self, onset_at: Instant, now: Instant) {
        // What the caller heard, before the sender's position moves on.
        self.collect_stream_events();
        let heard_ms = self.heard_ms(now.saturating_duration_since(onset_at));
        let last_mark = self.reply_mark.take();
        self.reply_ended = true;
        self.pending_barge_in = None;
        self.out.clear();
        self.cut = Some(now);
        self.last_play = None;
        self.prebuffer_until = None;
        self.barge_ins += 1;
        self.stats.barge_ins += 1;
        // What the echo canceller knew of the line when the caller (or an echo it let
        // through) cut the reply: the first thing to read when a barge-in was the bot's own.
        let echo = self.echo.as_ref().map(EchoCanceller::report);
        info!(
            heard_ms,
            echo_delay_ms = echo.and_then(|r| r.delay).map(|d| d.as_millis() as u64),
            echo_erle_db = echo.and_then(|r| r.erle_db),
            echo_path_changes = echo.map(|r| r.path_changes),
            echo_frames_double_talk = echo.map(|r| r.frames_double_talk),
            "barge-in: the reply is cut"
        );
        self.notify(AgentNotice::BargeIn {
            heard_ms,
            last_mark,
        });
    }

    /// A pending barge-in whose speech has lasted the minimum: the reply is cut now (if there
    /// still is one to cut and the agent still allows it).
    fn decide_barge_in(&mut self, now: Instant) {
        let Some(p) = self.pending_barge_in.filter(|p| now >= p.decide_at) else {
            return;
        };
        if self
            .vad_judged
            .is_some_and(|judged| judged < p.decide_on_stream)
            && now < p.decide_at + VAD_LAG_LIMIT
        {
            // The VAD has not judged the audio that would hold the stop yet (the inference
            // thread is busy, e.g. with a Smart Turn run): ask again on the next tick.
            return;
        }
        self.pending_barge_in = None;
        if self.speaking && self.may_barge_in() {
            self.barge_in(p.spoke_at, now);
        }
    }

    /// Milliseconds of the current reply the caller heard before the speech that is barging
    /// in began: the reply's audio the sender has sent, less what it sent since the VAD's onset
    /// (the reply played on while the VAD confirmed the speech), less the time the onset spent
    /// in our jitter buffer before the VAD heard it, and less the RTCP round trip when known
    /// (the caller's speech on its way to us, and our packets on theirs: what the caller had
    /// heard when they began is what we sent one round trip before their speech reached us).
    fn heard_ms(&self, since_onset: Duration) -> u64 {
        let sent = self.out.sent_position().saturating_sub(self.reply_start);
        let sent_ms = sent * 1000 / u64::from(SAMPLE_RATE_HZ);
        let round_trip = self.rtcp.peer().rtt.unwrap_or(Duration::ZERO);
        let before = since_onset + self.jitter_depth() + round_trip;
        sent_ms.saturating_sub(before.as_millis() as u64)
    }

    fn release_prebuffer(&mut self, now: Instant) {
        let Some(until) = self.prebuffer_until else {
            return;
        };
        if self.reply_gate.is_some_and(|g| g.held) {
            return;
        }
        let enough = self.out.queued_bytes() as u64
            >= BURST.as_millis() as u64 * u64::from(SAMPLE_RATE_HZ) / 1000;
        if enough || now >= until {
            self.release_prebuffer_now();
        }
    }

    fn release_prebuffer_now(&mut self) {
        if self.reply_gate.is_some_and(|g| g.held) {
            // Held back: the gate lets it go (`update_reply_gate`).
            return;
        }
        self.prebuffer_until = None;
        if self.out.is_held() {
            self.out.hold(false);
        }
    }

    /// The reply gate as time passes: its hold ends at its release time; it closes once the
    /// reply plays (audio queued and not held) or the bot sent nothing for [`RESUME_WINDOW`].
    fn update_reply_gate(&mut self, now: Instant) {
        let Some(g) = self.reply_gate.as_mut() else {
            return;
        };
        if g.held && now >= g.release_at {
            g.held = false;
        }
        let playing = !g.held && self.out.queued();
        let silent_bot = now.saturating_duration_since(g.ended_at) >= RESUME_WINDOW;
        if playing || silent_bot {
            self.reply_playing_since = playing.then_some(now);
            self.reply_gate = None;
            self.hold_back.reply_heard();
        }
    }

    /// The bot's transcript of the caller's turn so far: its cue goes to the hold-back, and
    /// moves the release of a reply not yet heard.
    fn caller_words(&mut self, text: &str, now: Instant) {
        let cue = words::judge(text);
        self.stats.transcripts.add(cue.as_str(), 1);
        self.hold_back.words(cue);
        self.update_reply_gate(now);
        let Some(g) = self.reply_gate.as_mut() else {
            return;
        };
        let Some((release_at, reason)) =
            self.hold_back
                .rewait(g.speech_end_at, g.ended_at, g.release_at, now)
        else {
            return;
        };
        info!(
            words = cue.as_str(),
            hold_ms = release_at.saturating_duration_since(now).as_millis() as u64,
            "the caller's words moved the reply's release"
        );
        g.release_at = release_at;
        if release_at > now {
            if !g.held {
                self.stats.replies_held.add(reason.as_str(), 1);
            }
            g.held = true;
            if let Some(until) = self.prebuffer_until.as_mut() {
                *until = (*until).max(release_at);
            }
        } else {
            g.held = false;
            // Prebuffered as a reply that starts now.
            self.prebuffer_until = self.prebuffer_until.map(|u| u.min(now + PREBUFFER));
            self.release_prebuffer(now);
            self.update_reply_gate(now);
            self.out.feed();
        }
    }

    /// The caller resumed (speech from `onset_at`) before the reply to their last turn end
    /// was heard: drop what is queued of it, drop what comes of it, tell the bot.
    fn turn_resumed(&mut self, gate: ReplyGate, onset_at: Instant) {
        let pause = onset_at.saturating_duration_since(gate.speech_end_at);
        self.hold_back.resumed(pause);
        let dropped = self.out.queued_bytes() as u64;
        self.out.clear();
        self.prebuffer_until = None;
        self.last_play = None;
        self.reply_ended = true;
        self.pending_barge_in = None;
        self.stale_reply = true;
        self.stats.turns_resumed += 1;
        if dropped > 0 {
            self.stats.held_replies_dropped += 1;
            self.stats.agent_audio_cut_frames += dropped.div_ceil(FRAME_BYTES as u64);
        }
        let dropped_ms = dropped * 1000 / u64::from(SAMPLE_RATE_HZ);
        info!(
            pause_ms = pause.as_millis() as u64,
            dropped_ms, "the caller resumed before the reply was heard"
        );
        self.notify(AgentNotice::TurnResumed {
            pause_ms: pause.as_millis() as u64,
            dropped_ms,
        });
    }

    fn notify(&mut self, notice: AgentNotice) {
        self.outputs.push_back(CallOutput::Agent(notice));
    }

    fn digit(&mut self, d: char) {
        self.stats.dtmf_digits += 1;
        self.dtmf.push(d);
        self.notify(AgentNotice::Dtmf(d));
    }

    fn samples_since_answer(&self, t: Instant) -> u64 {
        samples_in(t.saturating_duration_since(self.answered))
    }

    /// How much of the speech the VAD found starting at `stream` time the echo canceller had
    /// held back before it (the start of speech over the echo, quieter than the gate passes).
    fn echo_held(&self, stream: Duration) -> Duration {
        self.echo_correction(stream, |echo, onset| onset - echo.speech_began(onset))
    }

    /// How much of the speech the VAD found ending at `stream` time was the echo gate's
    /// hangover after the caller's last frame ([`EchoCanceller::speech_ended`]).
    fn echo_hangover_heard(&self, stream: Duration) -> Duration {
        self.echo_correction(stream, |echo, end| end - echo.speech_ended(end))
    }

    /// `samples(canceller, position)` at the canceller's position of the VAD's `stream` time,
    /// as a duration (zero without a canceller).
    fn echo_correction(
        &self,
        stream: Duration,
        samples: impl Fn(&EchoCanceller, u64) -> u64,
    ) -> Duration {
        let (Some(echo), Some(cursor)) = (self.echo.as_ref(), self.echo_cursor) else {
            return Duration::ZERO;
        };
        // The canceller's timeline and the VAD's stream advance together, a frame for a frame
        // (a frame the jitter buffer inserted or dropped since puts this one frame off).
        let ahead = self.vad_stream.0.saturating_sub(samples_in(stream));
        let Some(position) = cursor.checked_sub(ahead) else {
            return Duration::ZERO;
        };
        let n = samples(echo, position);
        Duration::from_micros(n * 1_000_000 / u64::from(SAMPLE_RATE_HZ))
    }

    /// When the VAD was handed the caller's audio at `stream` time: the events it sends say
    /// when on the audio's own clock, and reach us as late as the inference thread was busy
    /// (a batch, a Smart Turn run, the first run of a model), so `now` less the event's own
    /// durations would count that wait as audio heard.
    fn stream_instant(&self, stream: Duration, now: Instant) -> Instant {
        let (pushed, Some(pushed_at)) = self.vad_stream else {
            return now;
        };
        let ahead = Duration::from_micros(pushed * 1_000_000 / u64::from(SAMPLE_RATE_HZ))
            .saturating_sub(stream);
        pushed_at.checked_sub(ahead).unwrap_or(pushed_at)
    }

    /// Plays the caller's audio due by `now` (to the VAD, the recording and the agent). Called
    /// on every tick and on every packet's arrival: at a steady 20 ms the previous frame falls
    /// due as the next packet arrives, so the VAD hears it then rather than at the next tick
    /// (10 ms sooner on average, straight off the turn latency).
    fn play_caller_audio(&mut self, now: Instant) {
        let record = self.settings.record;
        let start = self.samples_since_answer(now);
        let mut frames = std::mem::take(&mut self.popped);
        self.inbound.pop(now, |frame, wide, origin| {
            frames.push((*frame, wide.map(|w| Box::new(*w)), origin))
        });
        if !frames.is_empty() {
            // The echo canceller needs what was played up to now before the caller's audio.
            self.collect_sent_audio();
        }
        // Bridged to another leg, nothing here decides on the caller's speech: no VAD, no turn,
        // no echo to take out of what the VAD hears.
        let to_vad = !self.in_bridge();
        for (frame, wide, origin) in frames.drain(..) {
            if to_vad {
                self.hear_on_callers_timeline(start, now, (frame, wide.clone(), origin));
            }
            if record {
                // The caller's track runs on from its first frame, one frame per frame played:
                // the jitter buffer's playout clock is the caller's timeline.
                let at = *self.caller_cursor.get_or_insert(start);
                self.caller_cursor = Some(at + SAMPLES_PER_FRAME as u64);
                self.outputs.push_back(CallOutput::Record {
                    track: Track::Caller,
                    at,
                    pcm: Box::new(frame),
                    wide: wide.clone(),
                });
            }
            match self.agent_wideband.as_mut() {
                // The agent takes 16 kHz: a wideband codec's own, else upsampled once, here.
                Some(up) => {
                    let wide = wide.unwrap_or_else(|| {
                        let mut w = Box::new([0i16; WIDEBAND_SAMPLES_PER_FRAME]);
                        up.process(&frame, &mut w[..]);
                        w
                    });
                    self.notify(AgentNotice::CallerAudioWide(wide));
                }
                None => self.notify(AgentNotice::CallerAudio(Box::new(frame))),
            }
        }
        self.popped = frames;
    }

    /// Hands a played frame to what judges the caller's speech (the echo canceller, AMD, the
    /// VAD) on the caller's own timeline. A frame played while the jitter buffer grew to wait
    /// for a packet is none of the caller's time if the packet then comes: heard, it would
    /// lengthen whatever it fell in, and a pause in mid-sentence a frame short of the VAD's stop
    /// would end the turn. So up to [`STRETCH_HELD_MAX`] of them wait here until the buffer
    /// says: dropped when the packet plays after them, heard when anything else comes (the
    /// caller went quiet without comfort noise, or the packet was lost).
    fn hear_on_callers_timeline(&mut self, start: u64, now: Instant, popped: Popped) {
        match popped.2 {
            FrameOrigin::Stretch if self.stretch_held.len() < STRETCH_HELD_MAX => {
                self.stretch_held.push(popped);
                return;
            }
            FrameOrigin::Packet {
                inserted_before, ..
            } if inserted_before > 0 => self.stretch_held.clear(),
            _ => {
                for (frame, wide, origin) in std::mem::take(&mut self.stretch_held) {
                    self.hear(start, now, frame, wide.as_deref(), origin.timestamp());
                }
            }
        }
        let (frame, wide, origin) = popped;
        self.hear(start, now, frame, wide.as_deref(), origin.timestamp());
    }

    /// Takes the line's echo out of one frame of the caller's and hands it to AMD and the VAD.
    fn hear(
        &mut self,
        start: u64,
        now: Instant,
        frame: [i16; SAMPLES_PER_FRAME],
        wide: Option<&[i16; WIDEBAND_SAMPLES_PER_FRAME]>,
        timestamp: Option<u32>,
    ) {
        let mut heard = frame;
        self.cancel_echo(start, timestamp, &mut heard);
        if let Some(amd) = self.amd.as_mut() {
            let verdict = amd.push_frame(now, &heard);
            self.amd_decided(verdict);
        }
        if wide.is_some() && self.wide_for_models.is_none() {
            self.wide_for_models = Some(Box::new(WideForModels::new()));
        }
        let wide_heard = self
            .wide_for_models
            .as_mut()
            .map(|w| w.frame(wide, &frame, &heard));
        self.outputs
            .push_back(CallOutput::Inference(Box::new(ModelFrame {
                narrow: heard,
                wide: wide_heard,
            })));
        self.vad_stream = (self.vad_stream.0 + SAMPLES_PER_FRAME as u64, Some(now));
    }

    fn collect_stream_events(&mut self) {
        let mut played = Vec::new();
        if let Some(p) = self.out.producer_mut() {
            while let Some(ev) = p.try_event() {
                if let StreamEvent::Mark { id, cleared } = ev {
                    played.push((id, cleared));
                }
            }
        }
        for (id, cleared) in played {
            if let Some((name, at)) = self.out.take_mark(id) {
                if !cleared {
                    if at >= self.reply_start {
                        self.reply_mark = Some(name.clone());
                    }
                    self.notify(AgentNotice::MarkPlayed(name));
                }
            }
        }
    }

    /// Takes the line's echo out of a caller frame the VAD will hear. `now_at` is the frame's
    /// playout position by the clock, `timestamp` the RTP timestamp it came with (`None` for
    /// concealment). The canceller places a frame by its timestamp, from an anchor on the clock:
    /// the caller's own timeline, on which the echo keeps its delay when the jitter buffer grows
    /// or shrinks (placed by playout, a stall of the caller's packets moved the echo 20-100 ms
    /// under a converged filter). Concealment continues from the last frame. A timestamp that
    /// strays more than [`ECHO_REANCHOR`] from the clock (a new SSRC, a jump) is anchored again.
    fn cancel_echo(
        &mut self,
        now_at: u64,
        timestamp: Option<u32>,
        frame: &mut [i16; SAMPLES_PER_FRAME],
    ) {
        let Some(echo) = self.echo.as_mut() else {
            return;
        };
        let by_timestamp = timestamp.and_then(|ts| {
            let (ts0, at0) = self.echo_anchor?;
            let at = at0.checked_add_signed(i64::from(ts.wrapping_sub(ts0) as i32))?;
            (at.abs_diff(now_at) <= ECHO_REANCHOR).then_some(at)
        });
        let at = match (by_timestamp, timestamp, self.echo_cursor) {
            (Some(at), _, _) => at,
            (None, Some(ts), _) => {
                self.echo_anchor = Some((ts, now_at));
                now_at
            }
            (None, None, Some(c)) if c.abs_diff(now_at) <= ECHO_REANCHOR => c,
            (None, None, _) => now_at,
        };
        self.echo_cursor = Some(at + SAMPLES_PER_FRAME as u64);
        let before = echo.report();
        if echo.process(at, frame) == Verdict::Echo {
            self.stats.echo_frames_gated += 1;
        }
        let after = echo.report();
        self.stats.echo_bursts_gated += after.bursts_gated - before.bursts_gated;
        if after.delay != before.delay {
            // A few times a call at most: where the canceller put the line's echo, and when (a
            // barge-in by the bot's own echo is read against these).
            info!(
                delay_ms = after.delay.map(|d| d.as_millis() as u64),
                was_ms = before.delay.map(|d| d.as_millis() as u64),
                path_changes = after.path_changes,
                at_ms = at * 1000 / u64::from(ontime_echo::SAMPLE_RATE_HZ),
                "echo path placed"
            );
        }
    }

    /// The agent's track: exactly what the sender sent, placed by each slot's time (for the
    /// recording, and as the echo canceller's reference).
    fn collect_sent_audio(&mut self) {
        let origin = self.settings.sender_origin;
        let mut sent = Vec::new();
        if let Some(p) = self.out.producer_mut() {
            while let Some(f) = p.try_sent_frame() {
                sent.push(f);
            }
        }
        for f in sent {
            let mut pcm = [0i16; SAMPLES_PER_FRAME];
            let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
            let fill = self.sent_decoder.is_fill(&f.payload);
            // Opus's fill is silence whatever the decoder's state, and a decoder that skips it
            // stays usable: most of a call's sent frames are fill, and each decode is ~11 µs.
            let wideband = if fill && self.sent_decoder.fill_is_silence() {
                self.sent_decoder.is_wideband()
            } else {
                self.sent_decoder.decode(&f.payload, &mut pcm, &mut wide)
            };
            let at = self.samples_since_answer(origin + f.scheduled);
            if let Some(echo) = self.echo.as_mut() {
                // The sender's silence fill is no reply to echo. On G.722 it decodes to what
                // the last reply left in the ADPCM state, a DC offset of up to −56 dBFS, which
                // is above the canceller's reply floor: taken as the reference, every silence
                // after the first reply looked like a reply playing.
                echo.push_reference(at, if fill { &SILENT_FRAME } else { &pcm });
            }
            if self.settings.record {
                self.outputs.push_back(CallOutput::Record {
                    track: Track::Agent,
                    at,
                    pcm: Box::new(pcm),
                    wide: wideband.then(|| Box::new(wide)),
                });
            }
        }
    }

    fn start_stream_if_sending(&mut self) {
        // No media before the answer: the caller's phone rings back on our 180.
        if self.unanswered {
            return;
        }
        let Some(remote) = self.negotiated.remote_rtp else {
            return;
        };
        if !sends(self.negotiated.local_direction) {
            return;
        }
        // After the caller's first packet its real address is known (latching).
        let remote = self.inbound.latched().unwrap_or(remote);
        // Random SSRC, sequence and timestamp (RFC 3550 §5.1).
        let codec = self.negotiated.codec;
        let packetizer = Packetizer::with_initial(
            self.negotiated.payload_type,
            self.rng.random(),
            self.rng.random(),
            self.rng.random(),
        )
        .with_timestamp_step(codec.timestamp_step());
        let srtp = self.srtp.as_ref().map(|s| Box::new(s.keys.outbound()));
        self.outputs.push_back(CallOutput::StartStream {
            packetizer,
            remote,
            srtp,
            silence_frame: (codec == Codec::Opus).then(ontime_rtp::opus::silence_frame),
        });
    }

    fn media_changed(&mut self, n: NegotiatedMedia, now: Instant) {
        if self.phase != Phase::Up {
            return;
        }
        let old = self.negotiated;
        let codec_changed = n.codec != old.codec || n.payload_type != old.payload_type;
        if on_hold(&old) && !on_hold(&n) {
            // Resume: the RTP timeout counts from now, not from before the hold.
            self.last_rtp = now;
        }
        self.negotiated = n;
        self.inbound.update(n);
        if n.codec != old.codec {
            self.out.set_codec(n.codec);
            self.sent_decoder = LineDecoder::new(n.codec);
        }
        if codec_changed || on_hold(&n) || n.remote_rtp != old.remote_rtp {
            // A new codec, a hold or a new media address is a new echo path: learn it again.
            if let Some(echo) = self.echo.as_mut() {
                echo.restart();
            }
        }
        let send_to = n.remote_rtp.filter(|_| sends(n.local_direction));
        if send_to.is_none() || codec_changed {
            // Hold (we must not send, RFC 3264 §8.4) or a new codec: the stream stops, its
            // counts stay with the call.
            self.out.retire();
            self.rtcp.set_outgoing(None);
        }
        if let Some(remote) = send_to {
            match self.out.producer() {
                Some(p) if Some(remote) != old.remote_rtp => {
                    self.outputs.push_back(CallOutput::SetStreamRemote {
                        stream: p.id(),
                        remote,
                    });
                }
                Some(_) => {}
                // Resume or codec change: a new stream (new SSRC, RFC 3550 §8).
                None => self.start_stream_if_sending(),
            }
        }
        info!(direction = ?n.local_direction, remote = ?n.remote_rtp, "media updated");
    }

    /// The hang-up of [`AgentAction::HangupWhenPlayed`], once the sender has sent the last
    /// queued packet: checked on every tick, so the BYE follows it within one.
    fn hang_up_if_played(&mut self, now: Instant) {
        let Some((_, give_up_at)) = &self.hangup_when_played else {
            return;
        };
        if self.out.is_dry() || now >= *give_up_at {
            if let Some((request, _)) = self.hangup_when_played.take() {
                if self.whisper == Whisper::Bot {
                    // The bot briefing the dialled party closed normally and was heard out:
                    // its part is over, and the leg is bridged rather than hung up.
                    self.whisper_done();
                } else {
                    self.hang_up(EndCause::GatewayBye, request, now);
                }
            }
        }
    }

    fn hang_up(&mut self, cause: EndCause, request: SipRequest, now: Instant) {
        if self.phase != Phase::Up {
            return;
        }
        // A call never answered is refused, not hung up: with its `<Dial>`'s outcome, as the
        // caller's phone would have shown the dialled party's.
        let request = if self.unanswered {
            info!(
                status = self.refuse_with,
                "refusing the call never answered"
            );
            SipRequest::Reject(self.refuse_with)
        } else {
            request
        };
        self.outputs.push_back(CallOutput::Sip(request));
        self.phase = Phase::HangingUp {
            cause,
            give_up_at: now + HANGUP_WAIT,
        };
    }

    fn finish(&mut self, cause: EndCause, now: Instant) {
        if self.phase == Phase::Ended {
            return;
        }
        self.notify(AgentNotice::Ended);
        // Sent audio not yet collected still belongs in the recording.
        if self.settings.record {
            self.collect_sent_audio();
        }
        let cdr = self.record(RecordKind::End, Some(cause), now);
        self.out.retire();
        self.stats.ended = Some(cause.result_label());
        self.stats.ended_codec = Some(self.negotiated.codec.encoding_name());
        self.stats.echo_found = self
            .echo
            .as_ref()
            .map(EchoCanceller::report)
            .filter(|r| r.delay.is_some());
        self.outputs.push_back(CallOutput::Ended {
            cdr: Box::new(cdr),
            recording_end: self.samples_since_answer(now),
        });
        self.phase = Phase::Ended;
    }
}

impl CallCore {
    /// The call's record as of `now`.
    fn record(&self, kind: RecordKind, cause: Option<EndCause>, now: Instant) -> CallDetailRecord {
        let totals = self.out.totals();
        let jitter = self.inbound.counters();
        let at_unix_ms =
            unix_ms(self.wall_at_answer + now.saturating_duration_since(self.answered));
        let echo = self.echo.as_ref().map(EchoCanceller::report);
        CallDetailRecord {
            record: kind,
            call_id: self.info.call_id.clone(),
            from: self.info.from.clone(),
            to: self.info.to.clone(),
            start_unix_ms: self.start_unix_ms,
            answer_unix_ms: Some(self.answer_unix_ms),
            end_unix_ms: cause.map(|_| at_unix_ms),
            cause,
            packets_in: jitter.received,
            packets_out: totals.packets_sent,
            late_ticks: totals.late_ticks,
            underruns: totals.underruns,
            discards: jitter.discarded,
            lost: jitter.lost,
            turns: self.turns,
            barge_ins: self.barge_ins,
            echo_delay_ms: echo.and_then(|r| r.delay).map(|d| d.as_millis() as u64),
            echo_erl_db: echo.and_then(|r| r.erl_db),
            echo_erle_db: echo.and_then(|r| r.erle_db),
            echo_bursts_gated: echo.map_or(0, |r| r.bursts_gated),
            fec_recovered: jitter.fec_recovered,
            dtmf: self.dtmf.clone(),
            direction: self.info.direction.as_str(),
            transport: self.info.transport.name(),
            srtp: self.srtp.is_some(),
            codec: Some(self.negotiated.codec.encoding_name()),
            call_sid: self.info.call_sid.clone(),
            transfer_target: self.last_transfer.as_ref().map(|t| t.target.clone()),
            transfer_result: self.last_transfer.as_ref().map(|t| t.result.as_str()),
            answered_by: self.answered_by.map(AnsweredBy::as_str),
        }
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
