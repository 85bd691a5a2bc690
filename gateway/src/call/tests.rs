//! The call core on simulated time: a real `TickEngine` (the sender's tick, sans-IO) serves the
//! call's outgoing stream into a counting sink, caller RTP is written by a real packetizer, and
//! the clock is an `Instant` the test moves. No sockets, no sleeps, no threads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use ontime_inference::speech::VAD_CHUNK;
use ontime_inference::InferenceEvent;
use ontime_rtp::{Packetizer, FRAME, FRAME_BYTES, PT_G722, PT_PCMA, PT_PCMU, SAMPLES_PER_FRAME};
use ontime_sender::{
    Controller, EngineConfig, PacketInfo, PacketSink, StreamConfig, StreamOutput, TickEngine,
};
use ontime_sip::{Codec, Direction, NegotiatedMedia};
use ontime_twilio::{DialTarget, Verb};

use super::core::HANGUP_WAIT;
use super::dial::DialEnd;
use super::program::{REASON_NORMAL_CLEARING, TRANSFER_WAIT};
use super::{
    AgentNotice, CallCommand, CallCore, CallOutput, CallSettings, DialogEvent, SipRequest,
    TransferOutcome,
};
use crate::agent::{AgentAction, CallInfo, TransferResult};
use crate::config::BargeIn;
use crate::records::cdr::{CallDetailRecord, EndCause};
use crate::records::recording::Track;

const CALLER: &str = "192.0.2.10:30000";

/// Counts the packets the tick sent, and apart the telephone-events (payload type 101); notes
/// the slot time of every packet that carried agent audio (not silence fill).
struct CountingSink(Arc<AtomicU64>, Arc<AtomicU64>, Arc<Mutex<Vec<Duration>>>);

impl PacketSink for CountingSink {
    fn send_packet(&mut self, packet: &[u8], info: PacketInfo) -> std::io::Result<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        if !info.silence && !info.telephone_event {
            self.2.lock().unwrap().push(info.scheduled);
        }
        if packet
            .get(1)
            .is_some_and(|b| b & 0x7f == TELEPHONE_EVENT_PT)
        {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

const TELEPHONE_EVENT_PT: u8 = 101;

fn media(direction: Direction, payload_type: u8) -> NegotiatedMedia {
    NegotiatedMedia {
        remote_rtp: Some(CALLER.parse().unwrap()),
        codec: match payload_type {
            PT_PCMA => Codec::Pcma,
            PT_G722 => Codec::G722,
            ontime_rtp::PT_OPUS_OFFER => Codec::Opus,
            _ => Codec::Pcmu,
        },
        payload_type,
        telephone_event_pt: Some(TELEPHONE_EVENT_PT),
        remote_ptime_ms: None,
        remote_maxptime_ms: None,
        local_direction: direction,
        srtp: false,
    }
}

fn settings(origin: Instant) -> CallSettings {
    CallSettings {
        rng_seed: 5,
        rtp_timeout: Some(Duration::from_secs(2)),
        max_call_duration: Duration::from_secs(3600),
        interim_record_interval: Some(Duration::from_secs(60)),
        barge_in: BargeIn::Local,
        // Barge in at the onset; the backchannel tests set a minimum.
        barge_in_min_speech: Duration::ZERO,
        echo_canceller: false,
        speech_stop_lag: Duration::from_millis(200),
        max_buffered: Duration::from_secs(30),
        cname: "ontime@test".into(),
        record: false,
        sender_origin: origin,
        transfer_domain: "trunk.example:5060".into(),
        unanswered: false,
        dial_by_refer: false,
        hold_back: Default::default(),
    }
}

/// One simulated call with everything it produced.
struct Sim {
    origin: Instant,
    now: Instant,
    core: CallCore,
    engine: TickEngine,
    controller: Controller,
    sent: Arc<AtomicU64>,
    sent_events: Arc<AtomicU64>,
    /// Slot times (since `origin`) of the packets that carried agent audio.
    voiced: Arc<Mutex<Vec<Duration>>>,
    notices: Vec<AgentNotice>,
    transfers: Vec<TransferOutcome>,
    connects: Vec<String>,
    /// When each SIP request was asked for.
    sip_at: Vec<Instant>,
    sip: Vec<SipRequest>,
    interim: Vec<CallDetailRecord>,
    ended: Option<(CallDetailRecord, u64)>,
    streams_started: usize,
    inference_frames: usize,
    /// Frames of the caller's audio the agent was handed: every frame the jitter buffer played.
    played_frames: usize,
    caller_track: Vec<i16>,
    agent_track: Vec<i16>,
    /// The caller's RTP: the packetizer and when its next packet is due (None: silent).
    caller: Packetizer,
    caller_next: Option<Instant>,
    caller_byte: u8,
    /// Payloads the caller sends first, in order, before `caller_byte` frames.
    caller_payloads: std::collections::VecDeque<[u8; FRAME_BYTES]>,
    /// Echo every caller frame back to the caller as agent audio.
    echo: bool,
    /// The caller's audio at 16 kHz, as an agent that asked for it got it.
    heard_wide: Vec<i16>,
    /// Agent actions due at a time (a bot streaming in real time).
    timed: std::collections::VecDeque<(Instant, AgentAction)>,
    /// What the core asked of the `<Dial>` machinery, in order.
    dials: Vec<DialAsk>,
    /// Where the outgoing stream was moved to (latching), in order.
    stream_remotes: Vec<std::net::SocketAddr>,
    /// Where each RTCP compound went.
    rtcp_to: Vec<std::net::SocketAddr>,
    /// Answering-machine detection's verdicts.
    amd: Vec<ontime_amd::Verdict>,
    /// Times the core's timer woke the driver at an instant no packet arrived (a wake of its
    /// own in the real driver).
    timer_wakes: usize,
}

impl Sim {
    fn new(settings_of: impl FnOnce(Instant) -> CallSettings) -> Sim {
        Sim::on(PT_PCMU, settings_of)
    }

    /// A recorded call on the codec of `payload_type` whose agent echoes the caller, with no
    /// RTP timeout.
    fn recording_echo(payload_type: u8) -> Sim {
        let mut sim = Sim::on(payload_type, |o| CallSettings {
            record: true,
            rtp_timeout: None,
            ..settings(o)
        });
        sim.echo = true;
        sim
    }

    /// A call negotiated on the codec of `payload_type`.
    fn on(payload_type: u8, settings_of: impl FnOnce(Instant) -> CallSettings) -> Sim {
        let (engine, controller) = TickEngine::new(EngineConfig {
            metrics: false,
            ..EngineConfig::default()
        });
        let origin = Instant::now();
        // Answered 7 ms into the sender's 20 ms grid: the recording must still line up.
        let answered = origin + Duration::from_millis(7);
        let info = CallInfo {
            call_sid: crate::call::new_call_sid(),
            account_sid: crate::config::DEFAULT_ACCOUNT_SID.into(),
            direction: ontime_twilio::Direction::Inbound,
            transport: ontime_sip::Transport::Udp,
            call_id: "sim-call".into(),
            from: "sip:caller@example.com".into(),
            to: "sip:bot@example.com".into(),
            sip_headers: Vec::new(),
            x_headers: Default::default(),
        };
        let core = CallCore::new(
            settings_of(origin),
            info,
            media(Direction::SendRecv, payload_type),
            0,
            answered,
            SystemTime::now(),
        );
        let mut sim = Sim {
            origin,
            now: answered,
            core,
            engine,
            controller,
            sent: Arc::new(AtomicU64::new(0)),
            sent_events: Arc::new(AtomicU64::new(0)),
            voiced: Arc::default(),
            notices: Vec::new(),
            transfers: Vec::new(),
            connects: Vec::new(),
            sip_at: Vec::new(),
            sip: Vec::new(),
            interim: Vec::new(),
            ended: None,
            streams_started: 0,
            inference_frames: 0,
            played_frames: 0,
            caller_track: Vec::new(),
            agent_track: Vec::new(),
            caller: Packetizer::with_initial(payload_type, 0xCA11E5, 100, 0).with_timestamp_step(
                media(Direction::SendRecv, payload_type)
                    .codec
                    .timestamp_step(),
            ),
            caller_next: None,
            caller_byte: 0xFF,
            caller_payloads: std::collections::VecDeque::new(),
            echo: false,
            heard_wide: Vec::new(),
            timed: std::collections::VecDeque::new(),
            stream_remotes: Vec::new(),
            rtcp_to: Vec::new(),
            amd: Vec::new(),
            dials: Vec::new(),
            timer_wakes: 0,
        };
        sim.drain();
        sim
    }

    fn drain(&mut self) {
        while let Some(out) = self.core.poll_output() {
            match out {
                CallOutput::StartStream {
                    packetizer,
                    remote: _,
                    srtp,
                    silence_frame,
                } => {
                    let config = {
                        let mut c = StreamConfig::new(
                            packetizer.clone(),
                            StreamOutput::Sink(Box::new(CountingSink(
                                self.sent.clone(),
                                self.sent_events.clone(),
                                self.voiced.clone(),
                            ))),
                        );
                        c.sent_tap_frames = 50;
                        c.srtp = srtp.map(|c| *c);
                        c.silence_frame = silence_frame;
                        c
                    };
                    let p = self.controller.add_stream(config).unwrap();
                    self.streams_started += 1;
                    self.core.attach_stream(p, &packetizer, self.now);
                }
                CallOutput::SetStreamRemote { remote, .. } => self.stream_remotes.push(remote),
                CallOutput::Rtcp { destination, .. } => self.rtcp_to.push(destination),
                CallOutput::Inference(_) => self.inference_frames += 1,
                CallOutput::Agent(n) => {
                    if let AgentNotice::CallerAudio(_) | AgentNotice::CallerAudioWide(_) = &n {
                        self.played_frames += 1;
                    }
                    if let (true, AgentNotice::CallerAudio(pcm)) = (self.echo, &n) {
                        let pcm: Arc<[i16]> = pcm.to_vec().into();
                        self.core.handle_agent(AgentAction::Play(pcm), self.now);
                    }
                    if let AgentNotice::CallerAudioWide(pcm) = &n {
                        self.heard_wide.extend_from_slice(&pcm[..]);
                        if self.echo {
                            let pcm: Arc<[i16]> = pcm.to_vec().into();
                            self.core.handle_agent(AgentAction::PlayWide(pcm), self.now);
                        }
                    }
                    if !matches!(
                        n,
                        AgentNotice::CallerAudio(_) | AgentNotice::CallerAudioWide(_)
                    ) {
                        self.notices.push(n);
                    }
                }
                CallOutput::Record { track, at, pcm, .. } => {
                    let t = match track {
                        Track::Caller => &mut self.caller_track,
                        Track::Agent => &mut self.agent_track,
                    };
                    let at = at as usize;
                    if t.len() < at {
                        t.resize(at, 0);
                    }
                    let skip = t.len() - at;
                    t.extend_from_slice(&pcm[skip.min(pcm.len())..]);
                }
                CallOutput::Sip(r) => {
                    self.sip.push(r);
                    self.sip_at.push(self.now);
                }
                CallOutput::SendDigits {
                    stream,
                    payload_type,
                    digits,
                } => {
                    let took = self
                        .controller
                        .send_dtmf(stream, payload_type, &digits)
                        .ok();
                    self.core.digits_queued(&digits, took, self.now);
                }
                CallOutput::ConnectStream { url, .. } => self.connects.push(url),
                CallOutput::Dial(d) => {
                    for n in d.nouns {
                        self.dials.push(DialAsk::Place(n.target));
                    }
                }
                CallOutput::EndDial(sid) => self.dials.push(DialAsk::End(sid)),
                CallOutput::WhisperDone => self.dials.push(DialAsk::Bridge),
                CallOutput::FetchTwiml { url, params, .. } => {
                    self.dials.push(DialAsk::Fetch(url, params))
                }
                CallOutput::Transfer(t) => self.transfers.push(t),
                CallOutput::Amd(v) => self.amd.push(v),
                CallOutput::Interim(r) => self.interim.push(*r),
                CallOutput::Ended { cdr, recording_end } => {
                    assert!(self.ended.is_none(), "ended twice");
                    self.ended = Some((*cdr, recording_end));
                }
            }
        }
    }

    /// The VAD's stream time: the caller's audio handed to it so far.
    fn stream_time(&self) -> Duration {
        FRAME * self.inference_frames as u32
    }

    /// Move the clock to `until`, serving the sender's slots, the core's timer and the caller's
    /// packets in time order.
    fn run_until(&mut self, until: Instant) {
        loop {
            let engine_at = self.origin + self.engine.poll_timeout();
            let mut next = engine_at;
            if let Some(t) = self.core.poll_timeout() {
                next = next.min(t);
            }
            if let Some(t) = self.caller_next {
                next = next.min(t);
            }
            if let Some((t, _)) = self.timed.front() {
                next = next.min(*t);
            }
            if next > until {
                break;
            }
            self.now = next.max(self.now);
            let packet_now = self.caller_next.is_some_and(|t| t <= self.now);
            if packet_now {
                let mut buf = [0u8; 200];
                let payload = self
                    .caller_payloads
                    .pop_front()
                    .unwrap_or([self.caller_byte; FRAME_BYTES]);
                let n = self.caller.write_frame(&payload, &mut buf).unwrap();
                self.core
                    .handle_rtp(&mut buf[..n], CALLER.parse().unwrap(), self.now);
                self.caller_next = self.caller_next.map(|t| t + FRAME);
            }
            while self.timed.front().is_some_and(|(t, _)| *t <= self.now) {
                let (_, action) = self.timed.pop_front().unwrap();
                self.core.handle_agent(action, self.now);
            }
            if engine_at <= self.now {
                let t = self.now - self.origin;
                self.engine.run_due(&mut || t);
            }
            if self.core.poll_timeout().is_some_and(|t| t <= self.now) {
                if !packet_now {
                    self.timer_wakes += 1;
                }
                self.core.handle_timeout(self.now);
            }
            self.drain();
        }
        self.now = until;
    }

    fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// A bot streaming `seconds` of reply in real time from now: 40 ms chunks, each sent up to
    /// `jitter` late (a fixed pattern), with a `stall` after `stall_at` of them.
    fn stream_reply(&mut self, seconds: f64, jitter: Duration, stall: Option<(usize, Duration)>) {
        let chunk = tone(0.04);
        let n = (seconds / 0.04) as usize;
        let mut delay = Duration::ZERO;
        for i in 0..n {
            if let Some((at, pause)) = stall {
                if i == at {
                    delay += pause;
                }
            }
            // A sawtooth of lateness: 0, j/3, 2j/3, j, 0, ...
            let late = jitter * (i % 4) as u32 / 3;
            let t = self.now + Duration::from_millis(40) * i as u32 + delay + late;
            self.timed.push_back((t, AgentAction::Play(chunk.clone())));
        }
        self.timed.make_contiguous().sort_by_key(|(t, _)| *t);
    }

    fn caller_talks(&mut self, byte: u8) {
        self.caller_byte = byte;
        if self.caller_next.is_none() {
            self.caller_next = Some(self.now);
        }
    }

    fn caller_stops(&mut self) {
        self.caller_next = None;
    }

    fn dialog(&mut self, ev: DialogEvent) {
        self.core.handle_dialog(ev, self.now);
        self.drain();
    }

    fn agent(&mut self, action: AgentAction) {
        self.core.handle_agent(action, self.now);
        self.drain();
    }

    fn inference(&mut self, ev: InferenceEvent) {
        self.core.handle_inference(ev, self.now);
        self.drain();
    }

    /// When the last packet carrying agent audio was sent.
    fn last_voiced(&self) -> Option<Instant> {
        let voiced = self.voiced.lock().unwrap();
        voiced.last().map(|t| self.origin + *t)
    }

    fn barged_in(&self) -> bool {
        self.notices
            .iter()
            .any(|n| matches!(n, AgentNotice::BargeIn { .. }))
    }

    /// What each barge-in told the agent: `heard_ms` and the last mark played.
    fn heard(&self) -> Vec<(u64, Option<String>)> {
        self.notices
            .iter()
            .filter_map(|n| match n {
                AgentNotice::BargeIn {
                    heard_ms,
                    last_mark,
                } => Some((*heard_ms, last_mark.clone())),
                _ => None,
            })
            .collect()
    }

    /// Milliseconds of agent audio the sink saw sent by `t` (20 ms a packet).
    fn voiced_ms_until(&self, t: Instant) -> u64 {
        let voiced = self.voiced.lock().unwrap();
        20 * voiced.iter().filter(|s| self.origin + **s <= t).count() as u64
    }

    fn voiced_packets(&self) -> usize {
        self.voiced.lock().unwrap().len()
    }

    fn cdr(&self) -> &CallDetailRecord {
        &self.ended.as_ref().expect("the call has ended").0
    }
}

fn seconds(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn tone(seconds: f64) -> Arc<[i16]> {
    let n = (seconds * 8000.0) as usize;
    (0..n)
        .map(|i| if (i / 8) % 2 == 0 { 8000 } else { -8000 })
        .collect::<Vec<i16>>()
        .into()
}

pub(crate) fn speech_started() -> InferenceEvent {
    InferenceEvent::SpeechStarted {
        onset: Duration::ZERO,
        detected: Duration::ZERO,
    }
}

pub(crate) fn speech_stopped() -> InferenceEvent {
    InferenceEvent::SpeechStopped {
        end: Duration::ZERO,
        detected: Duration::ZERO,
    }
}

pub(crate) fn turn_ended(complete: bool) -> InferenceEvent {
    InferenceEvent::TurnEnded {
        probability: 0.9,
        complete,
        timed_out: false,
        at: Duration::ZERO,
        audio: Duration::ZERO,
        latency: Duration::from_millis(60),
        final_pitch: None,
    }
}

#[test]
fn hold_longer_than_the_rtp_timeout_keeps_the_call_and_resume_restarts_the_clock() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(1.0));
    // The caller holds us with a=sendonly (we answer recvonly) and sends nothing, then
    // switches to a=inactive: neither ends the call.
    sim.caller_stops();
    sim.dialog(DialogEvent::Media(media(Direction::RecvOnly, PT_PCMU)));
    sim.run_for(seconds(5.0));
    sim.dialog(DialogEvent::Media(media(Direction::Inactive, PT_PCMU)));
    sim.run_for(seconds(5.0)); // five RTP timeouts long in all
    assert!(sim.sip.is_empty(), "hold ended the call: {:?}", sim.sip);
    // Resume; the caller stays silent: the timeout counts from the resume.
    sim.dialog(DialogEvent::Media(media(Direction::SendRecv, PT_PCMU)));
    sim.run_for(seconds(1.9));
    assert!(sim.sip.is_empty());
    sim.run_for(seconds(0.2));
    assert_eq!(sim.sip, vec![SipRequest::Hangup]);
    sim.dialog(DialogEvent::Ended(EndCause::GatewayBye));
    assert_eq!(sim.cdr().cause, Some(EndCause::RtpTimeout));
}

#[test]
fn an_rtp_timeout_of_none_never_hangs_up() {
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        ..settings(o)
    });
    sim.run_for(seconds(30.0));
    assert!(sim.sip.is_empty());
    assert!(sim.ended.is_none());
}

#[test]
fn per_call_counters_add_up_across_hold_resume_and_codec_change() {
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        ..settings(o)
    });
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.agent(AgentAction::EndOfUtterance);
    sim.run_for(seconds(1.5));
    // Hold: the stream stops.
    sim.dialog(DialogEvent::Media(media(Direction::Inactive, PT_PCMU)));
    sim.run_for(seconds(1.0));
    let on_hold = sim.sent.load(Ordering::Relaxed);
    sim.run_for(seconds(1.0));
    assert_eq!(
        sim.sent.load(Ordering::Relaxed),
        on_hold,
        "nothing sent on hold"
    );
    // Resume with A-law: a new stream.
    sim.dialog(DialogEvent::Media(media(Direction::SendRecv, PT_PCMA)));
    sim.agent(AgentAction::Play(tone(0.5)));
    sim.run_for(seconds(1.0));
    // Hold again and end there: the old code reported 0 packets out.
    sim.dialog(DialogEvent::Media(media(Direction::Inactive, PT_PCMA)));
    sim.run_for(seconds(0.5));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    let cdr = sim.cdr();
    assert_eq!(sim.streams_started, 2);
    assert_eq!(cdr.cause, Some(EndCause::CallerBye));
    assert_eq!(cdr.packets_out, sim.sent.load(Ordering::Relaxed));
    // 1.5 s on PCMU and 1 s on A-law at 50 packets a second; nothing on hold.
    assert_eq!(cdr.packets_out, 75 + 50);
    assert_eq!(cdr.late_ticks, 0, "simulated time is never late");
}

/// A re-INVITE that moves a call from PCMU to G.722 mid-call: a new stream on payload type 9,
/// and the caller's G.722 decoded from then on (the recording's caller track holds the voice),
/// with the CDR naming the codec the call ended on.
#[test]
fn a_reinvite_moves_a_call_from_pcmu_to_g722() {
    let mut sim = Sim::new(|o| CallSettings {
        record: true,
        rtp_timeout: None,
        ..settings(o)
    });
    sim.echo = true;
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    sim.caller_stops();
    sim.dialog(DialogEvent::Media(media(Direction::SendRecv, PT_G722)));
    sim.caller = Packetizer::with_initial(PT_G722, 0xCA11E6, 500, 0);
    sim.caller_payloads = wideband_voice().1;
    sim.caller_byte = ontime_rtp::g722::SILENCE_BYTE;
    sim.caller_talks(ontime_rtp::g722::SILENCE_BYTE);
    sim.run_for(seconds(1.5));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.streams_started, 2, "a new stream for the new codec");
    assert_eq!(sim.cdr().codec, Some("G722"));
    // The 440 Hz partial of the voice, as the 8 kHz caller track has it.
    let low: Vec<i16> = (0..4800)
        .map(|n| (5000.0 * (2.0 * std::f32::consts::PI * 440.0 * n as f32 / 8000.0).sin()) as i16)
        .collect();
    let (caller, lag) =
        best_correlation(&low[800..4000], &sim.caller_track, sim.caller_track.len());
    assert!(caller > 0.95, "caller track {caller:.4} at {lag}");
}

#[test]
fn marks_come_back_once_when_played_and_never_when_cleared_by_barge_in() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.agent(AgentAction::Play(tone(2.0)));
    sim.agent(AgentAction::Mark("long".into()));
    sim.run_for(seconds(0.5));
    // The caller talks over the reply: local barge-in clears it.
    sim.inference(speech_started());
    sim.run_for(seconds(0.1));
    sim.inference(speech_stopped());
    sim.agent(AgentAction::Play(tone(0.2)));
    sim.agent(AgentAction::Mark("short".into()));
    sim.run_for(seconds(1.0));
    let marks: Vec<&str> = sim
        .notices
        .iter()
        .filter_map(|n| match n {
            AgentNotice::MarkPlayed(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(marks, vec!["short"]);
    let barge_ins = sim
        .notices
        .iter()
        .filter(|n| matches!(n, AgentNotice::BargeIn { .. }))
        .count();
    assert_eq!(barge_ins, 1);
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().barge_ins, 1);
}

#[test]
fn barge_in_is_left_to_the_bot_when_configured() {
    let mut sim = Sim::new(|o| CallSettings {
        barge_in: BargeIn::Bot,
        ..settings(o)
    });
    sim.caller_talks(0xFF);
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(0.2));
    sim.inference(speech_started());
    assert!(!sim.barged_in());
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().barge_ins, 0);
}

#[test]
fn a_turn_counts_only_when_complete_and_the_caller_is_quiet() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.inference(speech_started());
    // A verdict that arrives while the caller speaks again is stale.
    sim.inference(turn_ended(true));
    sim.inference(speech_stopped());
    sim.inference(turn_ended(false));
    sim.inference(turn_ended(true));
    sim.run_for(seconds(0.1));
    let turns: Vec<&AgentNotice> = sim
        .notices
        .iter()
        .filter(|n| matches!(n, AgentNotice::TurnEnded { .. }))
        .collect();
    assert_eq!(
        turns,
        vec![&AgentNotice::TurnEnded {
            probability: Some(0.9)
        }]
    );
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().turns, 1);
}

#[test]
fn dtmf_from_rtp_events_and_sip_info_reaches_agent_and_cdr() {
    let mut sim = Sim::new(settings);
    let mut p = Packetizer::with_initial(101, 0xCA11E5, 500, 16000);
    let mut buf = [0u8; 64];
    for (i, (duration, end)) in [(160u16, false), (320, false), (480, true), (480, true)]
        .into_iter()
        .enumerate()
    {
        let ev = ontime_rtp::dtmf::TelephoneEvent {
            event: 5,
            end,
            volume: 10,
            duration,
        };
        let mut payload = [0u8; 4];
        ev.write(&mut payload).unwrap();
        let n = p
            .write_event(101, i == 0, 16000, &payload, &mut buf)
            .unwrap();
        sim.core
            .handle_rtp(&mut buf[..n], CALLER.parse().unwrap(), sim.now);
        sim.run_for(FRAME);
    }
    sim.dialog(DialogEvent::Dtmf('#'));
    let digits: Vec<char> = sim
        .notices
        .iter()
        .filter_map(|n| match n {
            AgentNotice::Dtmf(d) => Some(*d),
            _ => None,
        })
        .collect();
    assert_eq!(digits, vec!['5', '#']);
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().dtmf, "5#");
}

#[test]
fn an_expired_session_timer_ends_the_call_with_its_cause() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(1.0));
    sim.dialog(DialogEvent::Ended(EndCause::SessionExpired));
    assert_eq!(sim.cdr().cause, Some(EndCause::SessionExpired));
    assert!(sim.sip.is_empty(), "the endpoint already sent the BYE");
    assert_eq!(sim.core.poll_timeout(), None);
}

#[test]
fn drain_hangs_up_once_and_closes_the_call_when_sip_never_confirms() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    sim.dialog(DialogEvent::Hangup(EndCause::Drained));
    sim.dialog(DialogEvent::Hangup(EndCause::Drained));
    assert_eq!(sim.sip, vec![SipRequest::Hangup]);
    // Agent hang-ups after ours change nothing.
    sim.agent(AgentAction::Hangup);
    assert_eq!(sim.sip.len(), 1);
    sim.run_for(HANGUP_WAIT - seconds(0.1));
    assert!(sim.ended.is_none());
    sim.run_for(seconds(0.2));
    assert_eq!(sim.cdr().cause, Some(EndCause::Drained));
    let ended = sim
        .notices
        .iter()
        .filter(|n| **n == AgentNotice::Ended)
        .count();
    assert_eq!(ended, 1);
}

#[test]
fn an_agent_hangup_with_a_reason_is_the_calls_cause() {
    let mut sim = Sim::new(settings);
    sim.agent(AgentAction::HangupWithReason("Q.850;cause=16".into()));
    assert_eq!(
        sim.sip,
        vec![SipRequest::HangupWithReason("Q.850;cause=16".into())]
    );
    // The caller's BYE crossing ours: still our cause.
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().cause, Some(EndCause::GatewayBye));
}

#[test]
fn caller_audio_reaches_the_vad_one_frame_per_20_ms() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(2.0));
    sim.caller_stops();
    // Silence keeps the VAD's clock going after the caller stops sending.
    sim.run_for(seconds(1.0));
    let frames = sim.inference_frames;
    // 3 s of 20 ms frames, less the jitter buffer's start-up depth (a few frames).
    assert!((140..=150).contains(&frames), "{frames} frames");
}

/// A caller sending every 20 ms runs the call's 20 ms tick in its packets' wakes: the driver
/// wakes once a packet, not for the packet and again for its timer. When the packets stop, the
/// timer keeps the tick going, 50 times a second.
#[test]
fn a_steady_caller_runs_the_tick_in_its_packets_wakes() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    // The first packet takes the tick over from the timer's own phase.
    sim.run_for(FRAME);
    let before = sim.timer_wakes;
    sim.run_for(seconds(2.0));
    assert_eq!(sim.timer_wakes, before);
    sim.caller_stops();
    let before = sim.timer_wakes;
    sim.run_for(seconds(1.0));
    // 25 ms after the last packet (a frame and the slack a late packet gets), then every 20 ms.
    assert_eq!(sim.timer_wakes - before, 49);
    // Every 20 ms of the caller's line still reached the VAD, packets and silence alike.
    assert!(
        (140..=150).contains(&sim.inference_frames),
        "{}",
        sim.inference_frames
    );
}

/// A frame the jitter buffer plays while it grows to wait for a packet that then comes is none
/// of the caller's time: the VAD does not hear it, so a pause it falls in is as long as the
/// caller made it. The caller's packets come 25 ms later from the 51st on (a longer path). When the caller then stops, every frame the buffer
/// grows by is the caller's quiet, and the VAD hears it.
#[test]
fn a_frame_inserted_to_grow_the_buffer_is_not_heard_by_the_vad() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(1.0) - Duration::from_millis(1));
    assert_eq!(sim.caller.next_sequence(), 150);
    assert_eq!(sim.inference_frames, sim.played_frames);
    sim.caller_stops();
    sim.run_for(FRAME + Duration::from_millis(25));
    sim.caller_talks(0xFF);
    sim.run_for(seconds(1.0) - Duration::from_millis(1));
    assert_eq!(sim.caller.next_sequence(), 200);
    // Every packet played, none taken for late: the call's tick runs in the packets' wakes,
    // after their due times, and the buffer still grows as if it had looked on time.
    let c = sim.core.jitter_counters();
    assert_eq!((c.played, c.late, c.lost), (99, 0, 0), "{c:?}");
    // One frame to wait for the first late packet, one to bring the depth to the new target.
    assert_eq!(c.stretch_frames, 2);
    assert_eq!(sim.inference_frames, 99);
    assert_eq!(sim.played_frames, 99 + 2);
    sim.caller_stops();
    sim.run_for(seconds(0.5));
    // The buffer grows from 60 ms to its most (200 ms) on the quiet, then plays the caller's
    // silence: all of it the caller's time, heard.
    let grown = sim.core.jitter_counters().stretch_frames - 2;
    assert_eq!(grown, 7);
    assert_eq!(sim.inference_frames, sim.played_frames - 2);
}

/// The two recording tracks share one timeline: an agent that echoes each caller frame at once
/// is heard in the agent track within one sender slot of where the caller's track has it.
/// The best normalised cross-correlation of `b` against `a` over lags `0..max_lag`.
pub(crate) fn best_correlation(a: &[i16], b: &[i16], max_lag: usize) -> (f64, usize) {
    (0..max_lag)
        .map(|lag| {
            let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
            for (x, y) in a.iter().zip(b.iter().skip(lag)) {
                let (x, y) = (f64::from(*x), f64::from(*y));
                ab += x * y;
                aa += x * x;
                bb += y * y;
            }
            (ab / (aa * bb).sqrt().max(1.0), lag)
        })
        .fold((f64::MIN, 0), |best, c| if c.0 > best.0 { c } else { best })
}

/// A G.722 call end to end on simulated time: the caller's wideband speech is decoded and
/// halved for the line, the bot's reply (here the caller's own audio echoed back) is doubled,
/// encoded and sent; the recording's caller track is what the caller said, and its agent track,
/// decoded from the packets the sender really sent, is that again.
#[test]
fn a_g722_call_carries_the_callers_audio_in_and_the_reply_out() {
    use ontime_rtp::g722::Encoder;
    use ontime_rtp::resample::Upsampler;
    let mut sim = Sim::recording_echo(PT_G722);
    // Sent as the caller's phone would: at 16 kHz, G.722 from the state the caller's silence
    // left.
    let said = two_tone_voice();
    let mut up = Upsampler::new();
    let mut wide = vec![0i16; 2 * said.len()];
    up.process(&said, &mut wide);
    let mut encoder = Encoder::after_silence();
    let mut payload = vec![0u8; said.len()];
    encoder.encode(&wide, &mut payload);
    sim.caller_payloads = payload
        .chunks_exact(FRAME_BYTES)
        .map(|c| c.try_into().unwrap())
        .collect();
    sim.caller_byte = ontime_rtp::g722::SILENCE_BYTE;
    sim.run_for(seconds(0.3));
    sim.caller_talks(ontime_rtp::g722::SILENCE_BYTE);
    sim.run_for(seconds(1.5));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().codec, Some("G722"));
    assert_eq!(sim.streams_started, 1);
    // The middle 0.4 s of what was said, found in each track.
    let middle = &said[800..4000];
    let (caller, caller_lag) = best_correlation(middle, &sim.caller_track, sim.caller_track.len());
    let (agent, agent_lag) = best_correlation(middle, &sim.agent_track, sim.agent_track.len());
    eprintln!(
        "caller track {caller:.4} at lag {caller_lag}, agent track {agent:.4} at {agent_lag}"
    );
    assert!(caller > 0.98, "caller track: {caller:.4} at {caller_lag}");
    assert!(agent > 0.98, "agent track: {agent:.4} at {agent_lag}");
    assert!(agent_lag > caller_lag, "the reply follows what it echoes");
}

/// An Opus call end to end on simulated time: the caller's Opus (from libopus, 16 kHz, as a
/// phone sends it) is decoded into the call's tracks, and an echoing bot's reply goes out as
/// 160-byte (padded) Opus packets on the 48 kHz clock that decode back to the voice.
/// Opus is not waveform-exact like G.711 and G.722, so the bar is 0.97 rather than 0.98 (both
/// tracks score 0.995 with libopus 1.5; an unrelated or misaligned signal scores below 0.3).
#[test]
fn an_opus_call_carries_the_callers_audio_in_and_the_reply_out() {
    use ontime_rtp::resample::Upsampler;
    let mut sim = Sim::recording_echo(ontime_rtp::PT_OPUS_OFFER);
    let said = two_tone_voice();
    let mut wide = vec![0i16; 2 * said.len()];
    Upsampler::new().process(&said, &mut wide);
    // Then 1.4 s of silence, encoded by the same encoder as a phone would.
    wide.resize(wide.len() + 22_400, 0);
    let mut encoder = ontime_rtp::opus::Encoder::new().unwrap();
    sim.caller_payloads = wide
        .chunks_exact(ontime_rtp::WIDEBAND_SAMPLES_PER_FRAME)
        .map(|f| {
            let mut p = [0u8; FRAME_BYTES];
            encoder.encode(f.try_into().unwrap(), &mut p).unwrap();
            p
        })
        .collect();
    sim.run_for(seconds(0.3));
    sim.caller_talks(0);
    sim.run_for(seconds(1.5));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().codec, Some("opus"));
    assert_eq!(sim.streams_started, 1);
    assert_eq!(sim.cdr().lost, 0);
    let middle = &said[800..4000];
    let (caller, caller_lag) = best_correlation(middle, &sim.caller_track, sim.caller_track.len());
    let (agent, agent_lag) = best_correlation(middle, &sim.agent_track, sim.agent_track.len());
    eprintln!(
        "caller track {caller:.4} at lag {caller_lag}, agent track {agent:.4} at {agent_lag}"
    );
    assert!(caller > 0.97, "caller track: {caller:.4} at {caller_lag}");
    assert!(agent > 0.97, "agent track: {agent:.4} at {agent_lag}");
    assert!(agent_lag > caller_lag, "the reply follows what it echoes");
}

/// 0.6 s of a two-tone "voice" at 8 kHz (440 and 1250 Hz).
fn two_tone_voice() -> Vec<i16> {
    (0..4800)
        .map(|n| {
            let t = n as f32 / 8000.0;
            (6000.0 * (2.0 * std::f32::consts::PI * 440.0 * t).sin()
                + 3000.0 * (2.0 * std::f32::consts::PI * 1250.0 * t).sin()) as i16
        })
        .collect()
}

/// A said 0.6 s "voice" at 16 kHz with energy above 4 kHz, and its G.722 payloads as the
/// caller's phone sends them.
fn wideband_voice() -> (Vec<i16>, std::collections::VecDeque<[u8; FRAME_BYTES]>) {
    let wide: Vec<i16> = (0..9600)
        .map(|n| {
            let t = n as f32 / 16000.0;
            (5000.0 * (2.0 * std::f32::consts::PI * 440.0 * t).sin()
                + 4000.0 * (2.0 * std::f32::consts::PI * 5500.0 * t).sin()) as i16
        })
        .collect();
    let mut payload = vec![0u8; wide.len() / 2];
    ontime_rtp::g722::Encoder::after_silence().encode(&wide, &mut payload);
    let frames = payload
        .chunks_exact(FRAME_BYTES)
        .map(|c| c.try_into().unwrap())
        .collect();
    (wide, frames)
}

/// A bot that asked for 16 kHz on a G.722 call gets the caller's own wideband audio (the
/// 5.5 kHz partial included, which 8 kHz cannot carry), and its 16 kHz reply goes out as it is.
#[test]
fn a_wideband_agent_hears_and_speaks_16k_on_a_g722_call() {
    let mut sim = Sim::on(PT_G722, |o| CallSettings {
        record: true,
        rtp_timeout: None,
        ..settings(o)
    });
    sim.agent(AgentAction::ReceiveWideband(true));
    sim.echo = true;
    let (wide, frames) = wideband_voice();
    sim.caller_payloads = frames;
    sim.caller_byte = ontime_rtp::g722::SILENCE_BYTE;
    sim.caller_talks(ontime_rtp::g722::SILENCE_BYTE);
    sim.run_for(seconds(1.5));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.heard_wide.len() % 320, 0);
    let middle = &wide[1600..8000];
    let (heard, lag) = best_correlation(middle, &sim.heard_wide, 4000);
    eprintln!("the agent heard the 16 kHz voice at {heard:.4} (lag {lag})");
    assert!(heard > 0.98, "{heard:.4} at {lag}");
    // The echo went out as G.722 at 16 kHz: the agent track (8 kHz) holds its low partial.
    let low: Vec<i16> = (0..4800)
        .map(|n| (5000.0 * (2.0 * std::f32::consts::PI * 440.0 * n as f32 / 8000.0).sin()) as i16)
        .collect();
    let (agent, agent_lag) =
        best_correlation(&low[800..4000], &sim.agent_track, sim.agent_track.len());
    assert!(agent > 0.98, "agent track {agent:.4} at {agent_lag}");
}

/// A bot that asked for 16 kHz on a G.711 call gets the caller's audio upsampled once, and its
/// 16 kHz reply is halved onto the line.
#[test]
fn a_wideband_agent_on_a_g711_call_gets_upsampled_audio_and_is_halved() {
    let mut sim = Sim::new(|o| CallSettings {
        record: true,
        rtp_timeout: None,
        ..settings(o)
    });
    sim.agent(AgentAction::ReceiveWideband(true));
    sim.echo = true;
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.4));
    sim.caller_talks(0x80);
    sim.run_for(seconds(0.3));
    sim.caller_talks(0xFF);
    sim.run_for(seconds(1.0));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    // 0x80 is µ-law +32124: 15 loud frames (as in the recordings test), twice the samples at
    // 16 kHz (the filter's ringing at the edges aside).
    let loud = sim.heard_wide.iter().filter(|s| **s > 30_000).count();
    assert!(
        (15 * 320 - 64..=15 * 320).contains(&loud),
        "{loud} loud samples"
    );
    let loud_agent = sim.agent_track.iter().filter(|s| **s > 30_000).count();
    assert!(
        (15 * 160 - 64..=15 * 160).contains(&loud_agent),
        "{loud_agent} loud samples in the reply"
    );
}

#[test]
fn recordings_line_up_sample_for_sample() {
    let mut sim = Sim::new(|o| CallSettings {
        record: true,
        rtp_timeout: None,
        ..settings(o)
    });
    sim.echo = true;
    sim.run_for(seconds(0.5));
    // 0.3 s of loud µ-law (0x80 decodes to +32124) between silence.
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.4));
    sim.caller_talks(0x80);
    sim.run_for(seconds(0.3));
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.6));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    let end = sim.ended.as_ref().unwrap().1 as usize;
    let onset = |t: &[i16]| {
        t.iter()
            .position(|s| s.abs() > 20_000)
            .expect("a loud part")
    };
    let loud = |t: &[i16]| t.iter().filter(|s| s.abs() > 20_000).count();
    let caller_onset = onset(&sim.caller_track);
    let agent_onset = onset(&sim.agent_track);
    // The echo starts an utterance, so it prebuffers, then leaves at the next sender slot.
    let lag = agent_onset as i64 - caller_onset as i64;
    let most = (super::core::PREBUFFER.as_millis() as i64 + 20) * 8;
    assert!(
        (0..=most).contains(&lag),
        "caller onset {caller_onset}, agent onset {agent_onset}"
    );
    // Every loud sample the caller sent is in both tracks, once.
    assert_eq!(loud(&sim.caller_track), 15 * SAMPLES_PER_FRAME);
    assert_eq!(loud(&sim.agent_track), 15 * SAMPLES_PER_FRAME);
    // Both tracks cover the call to its end (a frame sent or played at time t covers
    // t..t + 20 ms, so a track may run one frame past the end).
    for track in [&sim.caller_track, &sim.agent_track] {
        assert!(
            track.len().abs_diff(end) <= 2 * SAMPLES_PER_FRAME,
            "track of {} samples, call of {end}",
            track.len()
        );
    }
}

#[test]
fn interim_records_carry_the_counters_so_far_on_their_interval() {
    let mut sim = Sim::new(|o| CallSettings {
        interim_record_interval: Some(Duration::from_secs(10)),
        ..settings(o)
    });
    sim.caller_talks(0xFF);
    sim.run_for(seconds(25.0));
    assert_eq!(sim.interim.len(), 2, "at 10 s and 20 s");
    let [first, second] = [&sim.interim[0], &sim.interim[1]];
    assert!(first.cause.is_none() && first.end_unix_ms.is_none());
    // 10 s of caller packets by the first, 20 s by the second (one every 20 ms, the first at
    // 0 s and one on each record's instant); the gateway's 50 a second from its first tick.
    assert_eq!((first.packets_in, second.packets_in), (501, 1001));
    assert_eq!((first.packets_out, second.packets_out), (500, 1000));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.interim.len(), 2, "no interim record after the end");
}

#[test]
fn what_the_agent_protects_from_barge_in_plays_whole() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.agent(AgentAction::AllowBargeIn(false));
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.agent(AgentAction::EndOfUtterance);
    sim.agent(AgentAction::Mark("goodbye".into()));
    sim.run_for(seconds(0.3));
    sim.inference(speech_started());
    sim.run_for(seconds(1.0));
    assert!(!sim.barged_in());
    assert!(sim
        .notices
        .contains(&AgentNotice::MarkPlayed("goodbye".into())));
    // Allowed again: the next reply can be cut.
    sim.inference(speech_stopped());
    sim.agent(AgentAction::AllowBargeIn(true));
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(0.2));
    sim.inference(speech_started());
    assert!(sim.barged_in());
}

/// A bot that streams its reply in real time and never marks the end of an utterance (pipecat
/// over the Twilio protocol): no underrun on a clean reply with pacing jitter, underruns when it
/// stalls mid-reply, none for the pause after the reply.
#[test]
fn streaming_bots_count_underruns_only_for_holes_in_their_reply() {
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        ..settings(o)
    });
    sim.stream_reply(3.0, Duration::from_millis(15), None);
    sim.run_for(seconds(5.0));
    sim.stream_reply(2.0, Duration::from_millis(15), None);
    sim.run_for(seconds(4.0));
    let clean = sim.core.poll_timeout().is_some();
    assert!(clean);
    // The same bot stalls 200 ms in the middle of its third reply.
    sim.stream_reply(2.0, Duration::ZERO, Some((25, Duration::from_millis(200))));
    sim.run_for(seconds(4.0));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    let cdr = sim.cdr();
    // 40 ms were in the ring when it stalled, so 160 ms of the 200 were a hole; the resumed
    // audio prebuffers (one more 40 ms chunk) before it plays: 200 ms, 10 frames.
    assert_eq!(cdr.underruns, 10, "{cdr:?}");
    assert_eq!(cdr.late_ticks, 0);
}

#[test]
fn streaming_bots_count_no_underrun_on_a_clean_reply() {
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        ..settings(o)
    });
    for _ in 0..3 {
        sim.stream_reply(3.0, Duration::from_millis(15), None);
        sim.run_for(seconds(5.0));
    }
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().underruns, 0);
    // One packet a tick for the 15 s simulated (3 replies of 3 s, each in 5 s): the sender
    // skipped none, and with no underrun every chunk of the replies was in its slot.
    assert_eq!(sim.cdr().packets_out, 15 * 50);
}

/// Local barge-in on a bot that keeps streaming the interrupted reply (its own interruptions
/// off): the reply is cut at once and stays cut; the bot's next reply, after a pause, plays.
#[test]
fn a_cut_reply_stays_cut_while_the_bot_keeps_streaming_it() {
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        record: true,
        ..settings(o)
    });
    sim.caller_talks(0xFF);
    sim.stream_reply(4.0, Duration::ZERO, None);
    sim.run_for(seconds(1.0));
    // The ring is often empty between two chunks of a streaming bot: barge-in still fires.
    sim.inference(speech_started());
    assert_eq!(
        sim.notices
            .iter()
            .filter(|n| matches!(n, AgentNotice::BargeIn { .. }))
            .count(),
        1
    );
    let cut_at = sim.now;
    sim.run_for(seconds(3.5)); // the bot streams the rest of the reply
    sim.inference(speech_stopped());
    sim.run_for(seconds(1.0));
    // The next reply, after the bot paused.
    sim.stream_reply(1.0, Duration::ZERO, None);
    sim.run_for(seconds(2.0));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    let loud = |from: Duration, to: Duration| {
        let at = |d: Duration| (d.as_secs_f64() * 8000.0) as usize;
        let end = at(to).min(sim.agent_track.len());
        sim.agent_track[at(from).min(end)..end]
            .iter()
            .filter(|s| s.abs() > 4000)
            .count()
    };
    let since_answer =
        |t: Instant| t.saturating_duration_since(sim.origin + Duration::from_millis(7));
    let cut = since_answer(cut_at);
    // Within a frame or two of the barge-in, and nothing of that reply afterwards.
    let after_cut = loud(cut + Duration::from_millis(40), cut + seconds(3.5));
    assert_eq!(after_cut, 0, "the cut reply played on");
    // The next reply is heard whole: 1 s of tone.
    let next = loud(cut + seconds(4.4), cut + seconds(7.0));
    assert_eq!(next, 8000, "{next}");
}

/// pipecat 1.14's pacing, as measured: 137.5 ms of audio per message, messages 121–163 ms
/// apart. The prebuffer, measured in time, absorbs it: no hole.
#[test]
fn pipecat_pacing_plays_without_underruns() {
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        ..settings(o)
    });
    let chunk = tone(0.1375);
    // Real time on average (137.5 ms), each message up to 25 ms early or late.
    let gaps_ms = [121u64, 163, 137, 130, 124, 150, 137, 138];
    for reply in 0..3 {
        let mut t = sim.now;
        for i in 0..38 {
            sim.timed.push_back((t, AgentAction::Play(chunk.clone())));
            t += Duration::from_millis(gaps_ms[(i + reply) % gaps_ms.len()]);
        }
        sim.run_until(t + seconds(1.5));
    }
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().underruns, 0, "{:?}", sim.cdr());
}

#[test]
fn the_apis_completed_status_hangs_up_with_q850_cause_16() {
    let mut sim = Sim::new(settings);
    sim.run_for(seconds(1.0));
    sim.core.handle_command(CallCommand::Complete, sim.now);
    sim.drain();
    assert_eq!(
        sim.sip,
        vec![SipRequest::HangupWithReason(REASON_NORMAL_CLEARING.into())]
    );
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().cause, Some(EndCause::GatewayBye));
}

#[test]
fn play_digits_go_out_as_telephone_events_then_the_twiml_goes_on() {
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        ..settings(o)
    });
    sim.run_for(seconds(0.5));
    let asked = sim.now;
    sim.core.handle_command(
        CallCommand::Run(vec![Verb::PlayDigits("1w#".into()), Verb::Hangup]),
        sim.now,
    );
    sim.drain();
    sim.run_for(seconds(3.0));
    // Two digits: each a 100 ms event (5 packets, the last the end packet) plus the end
    // packet's two retransmissions.
    assert_eq!(sim.sent_events.load(Ordering::Relaxed), 2 * (5 + 2));
    assert_eq!(sim.sip.len(), 1, "{:?}", sim.sip);
    assert_eq!(
        sim.sip[0],
        SipRequest::HangupWithReason(REASON_NORMAL_CLEARING.into())
    );
    // The hangup waits for the digits: 200 ms + 500 ms + 200 ms.
    assert_eq!(sim.sip_at[0] - asked, Duration::from_millis(900));
}

#[test]
fn without_telephone_event_digits_go_by_sip_info_one_per_200_ms() {
    let mut sim = Sim::new(settings);
    sim.core.handle_dialog(
        DialogEvent::Media(NegotiatedMedia {
            telephone_event_pt: None,
            ..media(Direction::SendRecv, PT_PCMU)
        }),
        sim.now,
    );
    sim.drain();
    sim.agent(AgentAction::SendDigits("12".into()));
    sim.run_for(seconds(1.0));
    let info: Vec<_> = sim
        .sip
        .iter()
        .filter_map(|r| match r {
            SipRequest::InfoDtmf(d, _) => Some(*d),
            _ => None,
        })
        .collect();
    assert_eq!(info, vec!['1', '2']);
    assert_eq!(sim.sent_events.load(Ordering::Relaxed), 0);
    assert_eq!(sim.sip_at[1] - sim.sip_at[0], Duration::from_millis(200));
}

/// A call half a second old that has been told by TwiML to transfer to the SIP URI `target`.
fn transferring_to(target: &str) -> Sim {
    let mut sim = Sim::new(settings);
    sim.run_for(seconds(0.5));
    sim.core.handle_command(
        CallCommand::Run(vec![Verb::Transfer(DialTarget::Sip(target.into()))]),
        sim.now,
    );
    sim.drain();
    sim
}

#[test]
fn an_accepted_transfer_ends_our_leg_once_the_target_answers() {
    let mut sim = transferring_to("sip:agent@192.0.2.55");
    assert_eq!(
        sim.sip,
        vec![SipRequest::Refer("sip:agent@192.0.2.55".into())]
    );
    sim.dialog(DialogEvent::ReferResponse(202));
    sim.dialog(DialogEvent::ReferProgress {
        status: 100,
        terminated: false,
    });
    assert_eq!(sim.sip.len(), 1);
    assert!(sim.transfers.is_empty());
    sim.dialog(DialogEvent::ReferProgress {
        status: 200,
        terminated: true,
    });
    assert_eq!(sim.sip.len(), 2);
    assert_eq!(sim.sip[1], SipRequest::Hangup);
    assert_eq!(sim.transfers.len(), 1);
    assert_eq!(sim.transfers[0].result, TransferResult::Completed);
    let told = sim
        .notices
        .iter()
        .filter(|n| matches!(n, AgentNotice::Transfer(t) if t.result == TransferResult::Completed))
        .count();
    assert_eq!(told, 1);
    sim.dialog(DialogEvent::Ended(EndCause::GatewayBye));
    let cdr = sim.cdr();
    assert_eq!(cdr.cause, Some(EndCause::Transferred));
    assert_eq!(cdr.transfer_target.as_deref(), Some("sip:agent@192.0.2.55"));
    assert_eq!(cdr.transfer_result, Some("completed"));
}

#[test]
fn a_transfers_x_headers_go_in_the_refer_to_and_nowhere_else() {
    let mut sim = transferring_to("sip:agent@192.0.2.55?X-Campaign=7&X-Account=a1");
    assert_eq!(
        sim.sip,
        vec![SipRequest::Refer(
            "sip:agent@192.0.2.55?X-Campaign=7&X-Account=a1".into()
        )]
    );
    sim.dialog(DialogEvent::ReferResponse(603));
    // What is reported and recorded is the URI alone.
    assert_eq!(sim.transfers[0].target, "sip:agent@192.0.2.55");
    // An agent's transfer is checked as TwiML is: headers that may not be set send no REFER.
    sim.agent(AgentAction::Transfer(
        "sip:agent@192.0.2.55?Route=%3Csip:evil%3E".into(),
    ));
    assert_eq!(sim.sip.len(), 1, "{:?}", sim.sip);
    assert_eq!(
        sim.transfers[1],
        TransferOutcome {
            target: "sip:agent@192.0.2.55".into(),
            result: TransferResult::Rejected,
            sip_status: None,
        }
    );
    assert!(sim.ended.is_none());
}

#[test]
fn a_declined_transfer_leaves_the_call_with_the_bot_and_tells_it() {
    let mut sim = Sim::new(settings);
    sim.run_for(seconds(0.5));
    sim.agent(AgentAction::Transfer("+15550100".into()));
    assert_eq!(
        sim.sip,
        vec![SipRequest::Refer("sip:+15550100@trunk.example:5060".into())]
    );
    sim.dialog(DialogEvent::ReferResponse(603));
    sim.run_for(seconds(1.0));
    assert_eq!(sim.sip.len(), 1, "no BYE: {:?}", sim.sip);
    assert!(sim.ended.is_none());
    assert_eq!(
        sim.transfers,
        vec![TransferOutcome {
            target: "sip:+15550100@trunk.example:5060".into(),
            result: TransferResult::Rejected,
            sip_status: Some(603),
        }]
    );
    assert_eq!(
        sim.notices
            .iter()
            .filter(|n| matches!(n, AgentNotice::Transfer(_)))
            .count(),
        1
    );
}

#[test]
fn a_transfer_without_news_fails_after_its_wait_and_the_twiml_goes_on() {
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        ..settings(o)
    });
    sim.core.handle_command(
        CallCommand::Run(vec![
            Verb::Transfer(DialTarget::Sip("sip:a@192.0.2.1".into())),
            Verb::ConnectStream {
                url: "ws://127.0.0.1:1/bot".into(),
                parameters: Vec::new(),
                audio: Default::default(),
            },
        ]),
        sim.now,
    );
    sim.drain();
    sim.dialog(DialogEvent::ReferResponse(202));
    sim.run_for(TRANSFER_WAIT - seconds(1.0));
    assert!(sim.transfers.is_empty());
    assert!(sim.connects.is_empty());
    sim.run_for(seconds(2.0));
    assert_eq!(sim.transfers.len(), 1);
    assert_eq!(sim.transfers[0].result, TransferResult::Failed);
    assert_eq!(sim.connects, vec!["ws://127.0.0.1:1/bot".to_string()]);
    assert!(sim.ended.is_none());
}

#[test]
fn srtp_calls_unprotect_the_callers_packets_and_drop_tampered_ones() {
    let offer: Vec<String> = ontime_srtp::offer()
        .unwrap()
        .iter()
        .map(|c| c.to_string())
        .collect();
    let keys = ontime_srtp::answer_offer(offer.iter().map(String::as_str)).unwrap();
    // The caller protects with its own key: the remote key of our answer.
    let mut caller_ctx = keys.remote.context();
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        ..settings(o)
    });
    sim.core.use_srtp(keys.clone());
    assert!(sim.core.is_srtp());
    let mut caller = Packetizer::with_initial(PT_PCMU, 0x5EC0, 7, 0);
    let frames_before = sim.inference_frames;
    for i in 0..50u32 {
        let mut buf = [0u8; 256];
        let n = caller.write_frame(&[0x55; FRAME_BYTES], &mut buf).unwrap();
        let n = caller_ctx.protect(&mut buf, n).unwrap();
        if i == 10 {
            // A flipped payload bit: the tag no longer matches.
            buf[20] ^= 1;
        }
        sim.core
            .handle_rtp(&mut buf[..n], CALLER.parse().unwrap(), sim.now);
        if i == 20 {
            // The same packet again: replayed.
            let mut again = [0u8; 256];
            let n2 = {
                let mut p = Packetizer::with_initial(PT_PCMU, 0x5EC0, 7 + 20, 20 * 160);
                let n = p.write_frame(&[0x55; FRAME_BYTES], &mut again).unwrap();
                let mut c = keys.remote.context();
                c.protect(&mut again, n).unwrap()
            };
            sim.core
                .handle_rtp(&mut again[..n2], CALLER.parse().unwrap(), sim.now);
        }
        sim.run_for(FRAME);
    }
    sim.run_for(seconds(0.5));
    let frames = sim.inference_frames - frames_before;
    // One frame a tick reaches the VAD for the 1.5 s simulated: the stream keeps its clock
    // through the tampered (lost) and the replayed (dropped) packet.
    assert_eq!(frames, 75, "{frames} frames");
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert!(sim.cdr().srtp);
    assert_eq!(sim.cdr().packets_in, 49);
}

/// The core counts in its own [`crate::call::CallStats`] (taken by the driver into the
/// metrics), exactly: here one second of caller audio, a STUN probe, a packet from a stranger,
/// a DTMF digit by SIP INFO, one complete turn and the caller's BYE.
#[test]
fn the_core_reports_its_counts_as_stats_and_resets_them_when_taken() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(1.0));
    let mut stun = [0x00u8, 0x01, 0x00, 0x00];
    sim.core
        .handle_rtp(&mut stun, CALLER.parse().unwrap(), sim.now);
    let mut p = Packetizer::with_initial(PT_PCMU, 0x5EED, 1, 0);
    let mut buf = [0u8; 256];
    let n = p.write_frame(&[0xFF; 160], &mut buf).unwrap();
    sim.core
        .handle_rtp(&mut buf[..n], "127.0.0.9:40000".parse().unwrap(), sim.now);
    sim.dialog(DialogEvent::Dtmf('7'));
    sim.caller_stops();
    sim.inference(speech_started());
    sim.inference(speech_stopped());
    sim.inference(turn_ended(true));
    let stats = sim.core.take_stats();
    // A packet every 20 ms from 0 through 1.0 s, both ends included.
    assert_eq!(stats.rtp_received, 51);
    assert_eq!(stats.rtp_invalid.get("stun"), 1);
    assert_eq!(stats.rtp_invalid.iter().map(|(_, n)| n).sum::<u64>(), 2);
    assert_eq!(stats.dtmf_digits, 1);
    assert_eq!(stats.turns, 1);
    assert_eq!(stats.ended, None);
    // Taken: the next take has only what came since.
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    let stats = sim.core.take_stats();
    assert_eq!(stats.rtp_received, 0);
    assert_eq!(stats.turns, 0);
    assert_eq!(stats.ended, Some("completed"));
}

/// Symmetric RTP with SRTP: the caller's SDP names one address and its packets come from a
/// NAT's. Forged packets (another key) from a stranger never latch; the caller's latch after
/// the 5-packet run, and the outgoing stream moves there once.
#[test]
fn symmetric_rtp_latches_only_on_packets_that_authenticate() {
    const NAT: &str = "203.0.113.9:61000";
    const STRANGER: &str = "198.51.100.7:5004";
    let offer = || -> Vec<String> {
        ontime_srtp::offer()
            .unwrap()
            .iter()
            .map(|c| c.to_string())
            .collect()
    };
    let keys = ontime_srtp::answer_offer(offer().iter().map(String::as_str)).unwrap();
    let forger = ontime_srtp::answer_offer(offer().iter().map(String::as_str)).unwrap();
    let mut caller_ctx = keys.remote.context();
    let mut forger_ctx = forger.remote.context();
    let mut sim = Sim::new(|o| CallSettings {
        rtp_timeout: None,
        ..settings(o)
    });
    sim.core.use_srtp(keys.clone());
    sim.core.use_symmetric_rtp();
    let mut forged = Packetizer::with_initial(PT_PCMU, 0xBAD, 7, 0);
    for _ in 0..2 * super::inbound::LATCH_RUN {
        let mut buf = [0u8; 256];
        let n = forged.write_frame(&[0x55; FRAME_BYTES], &mut buf).unwrap();
        let n = forger_ctx.protect(&mut buf, n).unwrap();
        sim.core
            .handle_rtp(&mut buf[..n], STRANGER.parse().unwrap(), sim.now);
        sim.run_for(FRAME);
    }
    assert!(sim.stream_remotes.is_empty(), "{:?}", sim.stream_remotes);
    let mut caller = Packetizer::with_initial(PT_PCMU, 0x5EC0, 7, 0);
    for _ in 0..50 {
        let mut buf = [0u8; 256];
        let n = caller.write_frame(&[0x55; FRAME_BYTES], &mut buf).unwrap();
        let n = caller_ctx.protect(&mut buf, n).unwrap();
        sim.core
            .handle_rtp(&mut buf[..n], NAT.parse().unwrap(), sim.now);
        sim.run_for(FRAME);
    }
    assert_eq!(sim.stream_remotes, vec![NAT.parse().unwrap()]);
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    // The run's first four are held back; the fifth latches and counts.
    assert_eq!(
        sim.cdr().packets_in,
        50 - u64::from(super::inbound::LATCH_RUN - 1)
    );
}

/// Symmetric RTP and RTCP: after the RTP latch, reports go to the NAT's RTP port + 1 until the
/// caller's own RTCP arrives (from a port the NAT chose), then there. Without the opt-in the same
/// packets are a stranger's: no audio, and reports keep going to the SDP's address.
#[test]
fn symmetric_rtp_moves_rtcp_to_where_the_callers_rtcp_comes_from() {
    const NAT: &str = "203.0.113.9:61000";
    const NAT_RTCP: &str = "203.0.113.9:40123";
    let rr = {
        let rr = ontime_rtp::RtcpPacket::ReceiverReport(ontime_rtp::rtcp::ReceiverReport {
            ssrc: 0x5EC0,
            reports: vec![],
        });
        let mut out = [0u8; 64];
        let n = ontime_rtp::write_compound(&[rr], &mut out).unwrap();
        out[..n].to_vec()
    };
    for symmetric in [false, true] {
        let mut sim = Sim::new(|o| CallSettings {
            rtp_timeout: None,
            ..settings(o)
        });
        if symmetric {
            sim.core.use_symmetric_rtp();
        }
        let mut caller = Packetizer::with_initial(PT_PCMU, 0x5EC0, 7, 0);
        // 6 s of caller audio from the NAT, an RR from its RTCP mapping after 5.5 s.
        for i in 0..300 {
            let mut buf = [0u8; 256];
            let n = caller.write_frame(&[0x55; FRAME_BYTES], &mut buf).unwrap();
            sim.core
                .handle_rtp(&mut buf[..n], NAT.parse().unwrap(), sim.now);
            if i == 275 {
                let mut b = rr.clone();
                sim.core
                    .handle_rtcp(&mut b, NAT_RTCP.parse().unwrap(), sim.now);
            }
            sim.run_for(FRAME);
        }
        // 6 s more, for the report after the RR.
        sim.run_for(seconds(6.0));
        sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
        let sdp_rtcp: std::net::SocketAddr = "192.0.2.10:30001".parse().unwrap();
        if symmetric {
            assert_eq!(sim.stream_remotes, vec![NAT.parse().unwrap()]);
            assert_eq!(sim.cdr().packets_in, 300 - 4);
            // Reports are due every 5 s: the first after the latch goes to the NAT's RTP port
            // + 1, the one after the RR to the RR's source.
            assert_eq!(
                sim.rtcp_to,
                vec![
                    "203.0.113.9:61001".parse().unwrap(),
                    NAT_RTCP.parse().unwrap()
                ],
                "{:?}",
                sim.rtcp_to
            );
        } else {
            assert!(sim.stream_remotes.is_empty());
            assert_eq!(sim.cdr().packets_in, 0);
            assert!(
                sim.rtcp_to.iter().all(|d| *d == sdp_rtcp),
                "{:?}",
                sim.rtcp_to
            );
            assert_eq!(sim.rtcp_to.len(), 2);
        }
    }
}

/// The BYE was asked for at most one 20 ms tick after the last packet of agent audio left.
fn assert_bye_within_a_tick_of_the_last_packet(sim: &Sim) {
    let last = sim.last_voiced().expect("the goodbye was sent");
    let bye = sim.sip_at[0];
    let after = bye.saturating_duration_since(last);
    assert!(
        bye >= last && after <= FRAME,
        "BYE {after:?} after the last packet"
    );
}

/// A bot's goodbye then its hang-up (a WebSocket bot's normal close): the goodbye plays whole
/// and the BYE follows its last packet within one 20 ms tick, not after a fixed wait.
#[test]
fn a_hang_up_when_played_follows_the_goodbyes_last_packet_within_a_tick() {
    let reason = "Q.850;cause=16;text=\"agent hung up\"".to_string();
    // A goodbye sent in one burst, the hang-up right behind it.
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    sim.agent(AgentAction::AllowBargeIn(false));
    sim.agent(AgentAction::Play(tone(1.5)));
    sim.agent(AgentAction::HangupWhenPlayed(Some(reason.clone())));
    sim.run_for(seconds(1.0));
    assert!(sim.sip.is_empty(), "hung up mid-goodbye");
    sim.run_for(seconds(2.0));
    assert_eq!(sim.sip, vec![SipRequest::HangupWithReason(reason.clone())]);
    assert_eq!(sim.voiced_packets(), 75, "the goodbye plays whole");
    assert_bye_within_a_tick_of_the_last_packet(&sim);

    // A bot streaming its goodbye in real time, hanging up right after its last chunk (an odd
    // length: the last frame is padded).
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    sim.stream_reply(1.0, Duration::from_millis(15), None);
    sim.run_for(seconds(0.99));
    sim.agent(AgentAction::Play(tone(0.0125)));
    sim.agent(AgentAction::HangupWhenPlayed(None));
    sim.run_for(seconds(1.0));
    assert_eq!(sim.sip, vec![SipRequest::Hangup]);
    assert_eq!(sim.voiced_packets(), 51);
    assert_bye_within_a_tick_of_the_last_packet(&sim);

    // Nothing queued: at once.
    let mut sim = Sim::new(settings);
    sim.run_for(seconds(0.1));
    let at = sim.now;
    sim.agent(AgentAction::HangupWhenPlayed(None));
    assert_eq!(sim.sip, vec![SipRequest::Hangup]);
    assert_eq!(sim.sip_at, vec![at]);
}

/// `heard_ms` on a barge-in: the milliseconds of the current reply the sender had played out
/// when the caller's speech began, counted against the packets the sink saw; the reply before
/// it (ended by its end of utterance) does not count, and the last mark played is named.
#[test]
fn a_barge_in_tells_the_agent_how_much_of_the_reply_was_heard() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    // A 1 s reply, then at once a 3 s one marked every 0.5 s: the queue never runs dry.
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.agent(AgentAction::Mark("a".into()));
    sim.agent(AgentAction::EndOfUtterance);
    for i in 1..=6 {
        sim.agent(AgentAction::Play(tone(0.5)));
        sim.agent(AgentAction::Mark(format!("b{i}")));
    }
    // The caller starts talking at about 1.2 s into the second reply; the VAD confirms it
    // 250 ms later.
    let confirm = Duration::from_millis(250);
    sim.run_for(seconds(1.0 + 1.2) + confirm);
    let onset_at = sim.now - confirm;
    let first_reply_ms = 1000;
    // The caller began speaking one jitter buffer before the VAD heard it (no network here).
    let spoke_at = onset_at - sim.core.jitter_depth();
    let expected = sim.voiced_ms_until(spoke_at) - first_reply_ms;
    let detected = sim.stream_time();
    sim.inference(InferenceEvent::SpeechStarted {
        onset: detected - confirm,
        detected,
    });
    let (heard_ms, last_mark) = sim.heard()[0].clone();
    assert!(
        heard_ms.abs_diff(expected) <= 40,
        "heard {heard_ms} ms, the sink saw {expected} ms"
    );
    assert!((1100..=1300).contains(&heard_ms), "{heard_ms}");
    assert_eq!(last_mark.as_deref(), Some("b2"));

    // The next reply starts from zero, with no mark of its own played yet.
    sim.inference(speech_stopped());
    sim.run_for(seconds(0.5));
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(0.3));
    let detected = sim.stream_time();
    sim.inference(InferenceEvent::SpeechStarted {
        onset: detected,
        detected,
    });
    let last = sim.notices.last().cloned();
    let heard = sim.heard();
    assert_eq!(heard.len(), 2);
    let second = heard[1].clone();
    assert!((180..=300).contains(&second.0), "{second:?}");
    assert_eq!(second.1, None);
    assert_eq!(last, Some(AgentNotice::SpeechStarted));
}

/// The VAD's events reach the call as late as the inference thread was busy (here 400 ms: a
/// Smart Turn run, a model's first run): what the caller heard is still counted to the onset
/// on the audio's own clock, not to the moment the event arrived less its own durations.
#[test]
fn a_late_vad_event_still_counts_what_was_heard_to_the_onset() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    sim.agent(AgentAction::Play(tone(3.0)));
    sim.run_for(seconds(1.0));
    let onset_at = sim.now;
    let onset = sim.stream_time();
    // Ten frames, as the sim hands the VAD whole frames.
    let confirm = Duration::from_millis(200);
    sim.run_for(confirm);
    let detected = sim.stream_time();
    assert_eq!(detected - onset, confirm);
    sim.run_for(Duration::from_millis(400));
    sim.inference(InferenceEvent::SpeechStarted { onset, detected });
    let expected = sim.voiced_ms_until(onset_at - sim.core.jitter_depth());
    let (heard_ms, _) = sim.heard()[0].clone();
    assert!(
        heard_ms.abs_diff(expected) <= 20,
        "heard {heard_ms} ms, the sink saw {expected} ms"
    );
    // The sender had played about 1.6 s by the time the event came: not that.
    assert!((900..=1100).contains(&heard_ms), "{heard_ms}");
}

/// Backchannels: the caller speaks for `speech` over a 3 s reply half a second in, the VAD's
/// events coming as Silero's would (speech confirmed 192 ms after its onset, its stop 192 ms
/// after its end), with `barge_in_min_speech` at 400 ms. Returns the call and the onset.
fn speak_over_a_reply(speech: Duration) -> (Sim, Instant) {
    speak_over_a_reply_with(speech, Duration::ZERO, false)
}

/// As [`speak_over_a_reply`], with the stop reported `late` (the inference thread busy with a
/// Smart Turn run while the audio holding the stop waits) and, when `progress`, the call told
/// how far the VAD has judged: to the chunk after the speech's end until the stop comes.
fn speak_over_a_reply_with(speech: Duration, late: Duration, progress: bool) -> (Sim, Instant) {
    let confirm = Duration::from_millis(192);
    let mut sim = Sim::new(|o| CallSettings {
        barge_in_min_speech: Duration::from_millis(400),
        ..settings(o)
    });
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    sim.agent(AgentAction::Play(tone(3.0)));
    sim.run_for(seconds(0.5));
    let onset_at = sim.now;
    let onset = sim.stream_time();
    sim.run_for(confirm);
    sim.inference(InferenceEvent::SpeechStarted {
        onset,
        detected: onset + confirm,
    });
    if progress {
        sim.core.handle_vad_progress(onset + speech + VAD_CHUNK);
    }
    sim.run_until(onset_at + speech + confirm + late);
    sim.inference(InferenceEvent::SpeechStopped {
        end: onset + speech,
        detected: onset + speech + confirm,
    });
    if progress {
        sim.core.handle_vad_progress(onset + speech + confirm);
    }
    sim.run_for(seconds(3.0));
    (sim, onset_at)
}

/// The reply played whole and the 300 ms of speech over it was reported as one backchannel.
fn assert_a_300ms_backchannel(sim: &Sim) {
    assert!(!sim.barged_in());
    assert_eq!(sim.voiced_packets(), 150, "the whole reply played");
    let backchannels: Vec<&AgentNotice> = sim
        .notices
        .iter()
        .filter(|n| matches!(n, AgentNotice::Backchannel { .. }))
        .collect();
    assert_eq!(
        backchannels,
        vec![&AgentNotice::Backchannel { speech_ms: 300 }]
    );
}

#[test]
fn a_backchannel_leaves_the_reply_playing_and_is_reported() {
    let (sim, _) = speak_over_a_reply(Duration::from_millis(300));
    assert_a_300ms_backchannel(&sim);
}

#[test]
fn speech_longer_than_the_minimum_barges_in_within_the_bound() {
    let (sim, onset_at) = speak_over_a_reply(Duration::from_secs(1));
    assert!(sim.barged_in());
    assert!(!sim
        .notices
        .iter()
        .any(|n| matches!(n, AgentNotice::Backchannel { .. })));
    // Cut once the speech has lasted the minimum and the VAD could have told it stopped
    // (400 + 200 ms), then within a core tick and the sender's next slot.
    let bound = onset_at + Duration::from_millis(400 + 200) + 2 * FRAME;
    let last = sim.last_voiced().expect("the reply started");
    assert!(
        last <= bound,
        "reply played {:?} past the bound",
        last.saturating_duration_since(bound)
    );
    // Everything the caller got of the reply: the 1.1 s before the cut (55 packets).
    assert_eq!(sim.voiced_packets(), 55);
    // What the caller heard is counted to the onset (as the caller spoke it, one jitter buffer
    // before the VAD heard it), not to the decision.
    let expected = sim.voiced_ms_until(onset_at - sim.core.jitter_depth());
    let (heard_ms, _) = sim.heard()[0].clone();
    assert!(
        heard_ms.abs_diff(expected) <= 40,
        "heard {heard_ms} ms, the sink saw {expected} ms"
    );
}

#[test]
fn a_backchannel_whose_stop_the_vad_reports_late_is_still_a_backchannel() {
    // The decision's time (400 + 200 ms after the onset) passes 192 ms before the stop comes.
    let (sim, _) =
        speak_over_a_reply_with(Duration::from_millis(300), Duration::from_millis(300), true);
    assert_a_300ms_backchannel(&sim);
    // Without the VAD's progress the call goes by its own clock and cuts the reply.
    let (blind, _) = speak_over_a_reply_with(
        Duration::from_millis(300),
        Duration::from_millis(300),
        false,
    );
    assert!(blind.barged_in());
}

#[test]
fn a_vad_that_never_catches_up_holds_the_barge_in_no_longer_than_the_limit() {
    // The stop comes 1 s late: past the limit the call decides on its own clock.
    let (sim, _) =
        speak_over_a_reply_with(Duration::from_millis(300), Duration::from_secs(1), true);
    assert!(sim.barged_in());
}

/// A call detecting who answered with Twilio's default settings, from the answer.
fn detecting(sim: &mut Sim, vad: bool) {
    let mut detector =
        ontime_amd::Detector::new(&ontime_amd::AmdConfig::default(), sim.now).unwrap();
    if vad {
        detector.use_vad_segments();
    }
    sim.core.detect_machine(detector);
}

#[test]
fn a_callee_that_never_sends_rtp_is_unknown_at_the_silence_timeout_and_the_call_goes_on() {
    let mut sim = Sim::new(settings);
    detecting(&mut sim, true);
    sim.run_for(Duration::from_millis(4980));
    assert_eq!(sim.amd.len(), 0);
    sim.run_for(Duration::from_secs(20));
    assert_eq!(sim.amd.len(), 1, "{:?}", sim.amd);
    assert_eq!(sim.amd[0].answered_by, ontime_amd::AnsweredBy::Unknown);
    // On the call's 20 ms ticks: within a tick of the 5 s silence timeout.
    let after = sim.amd[0].after;
    assert!(
        (Duration::from_secs(5)..=Duration::from_millis(5020)).contains(&after),
        "{after:?}"
    );
    assert!(sim.ended.is_none(), "a verdict does not end the call");
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().answered_by, Some("unknown"));
}

#[test]
fn the_vads_speech_segments_decide_a_short_hello_is_a_person() {
    let mut sim = Sim::new(settings);
    detecting(&mut sim, true);
    sim.caller_talks(0x55);
    sim.run_for(Duration::from_millis(500));
    // The VAD's events name the audio's own stream time, as it was handed the caller's frames.
    let onset = sim.stream_time();
    sim.inference(InferenceEvent::SpeechStarted {
        onset,
        detected: onset,
    });
    sim.run_for(Duration::from_millis(600));
    let end = sim.stream_time();
    sim.inference(InferenceEvent::SpeechStopped { end, detected: end });
    // A person: 1.2 s of silence after the speech stopped (within a frame of the stream's clock).
    sim.run_for(Duration::from_millis(1160));
    assert_eq!(sim.amd.len(), 0, "{:?}", sim.amd);
    sim.run_for(Duration::from_millis(80));
    assert_eq!(sim.amd.len(), 1, "{:?}", sim.amd);
    assert_eq!(sim.amd[0].answered_by, ontime_amd::AnsweredBy::Human);
    sim.run_for(Duration::from_secs(30));
    assert_eq!(sim.amd.len(), 1, "one verdict a call");
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.cdr().answered_by, Some("human"));
}

#[test]
fn a_call_without_detection_has_no_verdict() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0x55);
    sim.run_for(Duration::from_secs(40));
    sim.dialog(DialogEvent::Ended(EndCause::CallerBye));
    assert_eq!(sim.amd.len(), 0);
    assert_eq!(sim.cdr().answered_by, None);
}

/// What the core asked of the `<Dial>` machinery.
#[derive(Debug, Clone, PartialEq)]
enum DialAsk {
    Place(ontime_twilio::DialTarget),
    End(String),
    Fetch(String, Vec<(String, String)>),
    /// A leg's own TwiML is over: bridge it.
    Bridge,
}

fn dial_twiml(action: Option<&str>, time_limit_s: u64) -> Vec<Verb> {
    vec![
        Verb::Dial(ontime_twilio::Dial {
            nouns: vec![ontime_twilio::DialNoun {
                target: ontime_twilio::DialTarget::Sip("sip:desk@pbx".into()),
                whisper: None,
            }],
            timeout: Duration::from_secs(20),
            caller_id: None,
            action: action.map(str::to_string),
            action_get: false,
            time_limit: Duration::from_secs(time_limit_s),
            answer_on_bridge: false,
        }),
        Verb::PlayDigits("4".into()),
    ]
}

/// `<Dial>` on simulated time: the caller hears ringback (2 s of tone, then 4 s of silence)
/// until the leg answers; the bridged leg's audio then plays as it comes, the caller's speech
/// does not cut it, its time limit ends the leg; once the leg is over the next verb runs and
/// the call hangs up after the last.
#[test]
fn a_dial_rings_back_bridges_and_runs_on_when_the_leg_ends() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.2));
    sim.core
        .handle_command(CallCommand::Run(dial_twiml(None, 10)), sim.now);
    sim.drain();
    assert_eq!(
        sim.dials,
        vec![DialAsk::Place(ontime_twilio::DialTarget::Sip(
            "sip:desk@pbx".into()
        ))]
    );
    sim.core
        .handle_command(CallCommand::DialPlaced("CAleg".into()), sim.now);
    // Three seconds of ringing: all of it is ringback (its 2 s tone, then its silence).
    sim.run_for(seconds(3.0));
    assert_eq!(sim.voiced_packets(), 150);
    sim.core
        .handle_command(CallCommand::DialAnswered("CAleg".into()), sim.now);
    let answered = sim.now;
    let to_vad = sim.inference_frames;
    // The other party talks (their audio comes in as the agent's); the caller's speech does
    // not cut it.
    for _ in 0..50 {
        sim.agent(AgentAction::Play(tone(0.02)));
        sim.inference(speech_started());
        sim.run_for(FRAME);
    }
    assert!(!sim.barged_in());
    // Bridged, the caller's audio goes to the other party, not to the VAD.
    assert_eq!(sim.inference_frames, to_vad);
    // The leg's time limit (10 s from the answer) asks to end it, once.
    sim.run_until(answered + seconds(10.0) + FRAME);
    assert_eq!(sim.dials.last(), Some(&DialAsk::End("CAleg".into())));
    sim.run_for(seconds(1.0));
    assert_eq!(
        sim.dials
            .iter()
            .filter(|d| matches!(d, DialAsk::End(_)))
            .count(),
        1
    );
    assert!(sim.sip.is_empty(), "{:?}", sim.sip);
    sim.core.handle_command(
        CallCommand::DialEnded(DialEnd {
            call_sid: Some("CAleg".into()),
            status: ontime_twilio::CallStatus::Completed,
            sip_status: None,
            duration_secs: 10,
        }),
        sim.now,
    );
    sim.run_for(seconds(2.0));
    // The next verb (a digit), then the hang-up after the last verb.
    assert_eq!(sim.core.take_stats().dtmf_sent, 1);
    assert_eq!(sim.sip.len(), 1, "{:?}", sim.sip);
    assert!(matches!(&sim.sip[0], SipRequest::HangupWithReason(r) if r.contains("cause=16")));
}

/// A call running a `<Dial>` of one party with an `action`, its leg placed, a second in.
fn dialling_with_action() -> Sim {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.2));
    sim.core.handle_command(
        CallCommand::Run(dial_twiml(Some("https://bot/after"), 60)),
        sim.now,
    );
    sim.core
        .handle_command(CallCommand::DialPlaced("CAleg".into()), sim.now);
    sim.run_for(seconds(1.0));
    sim
}

/// With an `action`, the leg's end fetches it with Twilio's `Dial*` parameters, and only the
/// TwiML it answers runs (then the call hangs up).
#[test]
fn a_dials_action_is_fetched_with_the_legs_outcome() {
    let mut sim = dialling_with_action();
    sim.core.handle_command(
        CallCommand::DialEnded(DialEnd {
            call_sid: Some("CAleg".into()),
            status: ontime_twilio::CallStatus::NoAnswer,
            sip_status: Some(487),
            duration_secs: 0,
        }),
        sim.now,
    );
    sim.drain();
    let Some(DialAsk::Fetch(url, params)) = sim.dials.last().cloned() else {
        panic!("no action fetched: {:?}", sim.dials);
    };
    assert_eq!(url, "https://bot/after");
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("DialCallStatus"), Some("no-answer"));
    assert_eq!(get("DialCallSid"), Some("CAleg"));
    assert_eq!(get("DialSipResponseCode"), Some("487"));
    assert_eq!(get("CallStatus"), Some("in-progress"));
    // Nothing runs until the action answers (the <Play digits="4"> after the <Dial> is gone).
    sim.run_for(seconds(2.0));
    assert!(sim.sip.is_empty());
    sim.core
        .handle_command(CallCommand::DialAction(vec![]), sim.now);
    sim.run_for(seconds(0.1));
    assert_eq!(sim.sip.len(), 1, "{:?}", sim.sip);
    assert_eq!(sim.core.take_stats().dtmf_sent, 0);
}

/// New TwiML while a `<Dial>` rings ends its leg (asked once), and the leg's end when it comes
/// resumes nothing: the new TwiML runs.
#[test]
fn new_twiml_during_a_dial_ends_its_leg() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.2));
    sim.core
        .handle_command(CallCommand::Run(dial_twiml(None, 60)), sim.now);
    sim.core
        .handle_command(CallCommand::DialPlaced("CAleg".into()), sim.now);
    sim.run_for(seconds(1.0));
    assert!(sim.core.dialing());
    sim.core.handle_command(
        CallCommand::Run(vec![Verb::Pause(Duration::from_secs(30))]),
        sim.now,
    );
    sim.drain();
    assert!(!sim.core.dialing());
    assert_eq!(sim.dials.last(), Some(&DialAsk::End("CAleg".into())));
    sim.core.handle_command(
        CallCommand::DialEnded(DialEnd {
            call_sid: Some("CAleg".into()),
            status: ontime_twilio::CallStatus::Canceled,
            sip_status: Some(487),
            duration_secs: 0,
        }),
        sim.now,
    );
    sim.run_for(seconds(2.0));
    // Still pausing: no action fetched, no hang-up.
    assert_eq!(
        sim.dials
            .iter()
            .filter(|d| matches!(d, DialAsk::Fetch(..)))
            .count(),
        0
    );
    assert!(sim.sip.is_empty(), "{:?}", sim.sip);
}

/// A `<Dial>` leg with `<Number url>` TwiML on simulated time: its verbs run on the leg (a
/// pause, digits to the dialled party), and the bridge is asked for once, only when they ran
/// out.
#[test]
fn a_legs_own_twiml_runs_before_its_bridge() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.2));
    sim.core.handle_command(
        CallCommand::Whisper(vec![
            Verb::Pause(Duration::from_secs(2)),
            Verb::PlayDigits("1".into()),
        ]),
        sim.now,
    );
    sim.run_for(seconds(1.9));
    assert!(sim.dials.is_empty(), "{:?}", sim.dials);
    sim.run_for(seconds(2.0));
    assert_eq!(sim.core.take_stats().dtmf_sent, 1);
    assert_eq!(sim.dials, vec![DialAsk::Bridge]);
    sim.run_for(seconds(5.0));
    assert_eq!(sim.dials, vec![DialAsk::Bridge]);
    assert!(sim.sip.is_empty(), "{:?}", sim.sip);
}

/// A leg whose TwiML hangs up declines the call: BYE, and no bridge.
#[test]
fn a_leg_whose_twiml_hangs_up_is_not_bridged() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.2));
    sim.core
        .handle_command(CallCommand::Whisper(vec![Verb::Hangup]), sim.now);
    sim.run_for(seconds(1.0));
    assert!(sim.dials.is_empty(), "{:?}", sim.dials);
    assert_eq!(sim.sip.len(), 1, "{:?}", sim.sip);
}

/// A leg whose TwiML connects a bot (a warm transfer's briefing) is bridged when the bot closes
/// normally and what it queued has played, not hung up; the bot's audio reaches the leg whole.
#[test]
fn a_briefing_bots_normal_close_bridges_the_leg() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.2));
    sim.core.handle_command(
        CallCommand::Whisper(vec![Verb::ConnectStream {
            url: "ws://bot/brief".into(),
            parameters: Vec::new(),
            audio: Default::default(),
        }]),
        sim.now,
    );
    sim.drain();
    assert_eq!(sim.connects, vec!["ws://bot/brief".to_string()]);
    assert!(sim.dials.is_empty(), "{:?}", sim.dials);
    // The bot says one second of briefing and closes (1000).
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.agent(AgentAction::HangupWhenPlayed(Some("bot closed".into())));
    sim.run_for(seconds(0.5));
    assert!(sim.dials.is_empty(), "{:?}", sim.dials);
    sim.run_for(seconds(1.5));
    assert_eq!(sim.dials, vec![DialAsk::Bridge]);
    assert_eq!(sim.voiced_packets(), 50);
    assert!(sim.sip.is_empty(), "{:?}", sim.sip);
}

/// The caller's side: a leg that answered but ended before it was bridged (its own TwiML hung
/// up) reaches the `action` as `no-answer`.
#[test]
fn a_leg_that_declined_before_the_bridge_is_no_answer() {
    let mut sim = dialling_with_action();
    sim.core.handle_command(
        CallCommand::DialEnded(DialEnd {
            call_sid: Some("CAleg".into()),
            status: ontime_twilio::CallStatus::Completed,
            sip_status: None,
            duration_secs: 3,
        }),
        sim.now,
    );
    sim.drain();
    let Some(DialAsk::Fetch(_, params)) = sim.dials.last() else {
        panic!("{:?}", sim.dials);
    };
    let status = params.iter().find(|(k, _)| k == "DialCallStatus");
    assert_eq!(status.map(|(_, v)| v.as_str()), Some("no-answer"));
}

/// A call running a `<Dial>` of two parties (with an `action`), both placed.
fn dialling_two() -> Sim {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.2));
    sim.core
        .handle_command(CallCommand::Run(dial_two("https://bot/after")), sim.now);
    sim.drain();
    for sid in ["CAa", "CAb"] {
        sim.core
            .handle_command(CallCommand::DialPlaced(sid.into()), sim.now);
    }
    sim
}

/// A `<Dial>` of two parties: both are placed at once.
fn dial_two(action: &str) -> Vec<Verb> {
    let noun = |uri: &str| ontime_twilio::DialNoun {
        target: ontime_twilio::DialTarget::Sip(uri.into()),
        whisper: None,
    };
    vec![Verb::Dial(ontime_twilio::Dial {
        nouns: vec![noun("sip:a@pbx"), noun("sip:b@pbx")],
        timeout: Duration::from_secs(20),
        caller_id: None,
        action: Some(action.into()),
        action_get: false,
        time_limit: Duration::from_secs(3600),
        answer_on_bridge: false,
    })]
}

fn leg_end(sid: &str, status: ontime_twilio::CallStatus, sip: Option<u16>) -> CallCommand {
    CallCommand::DialEnded(DialEnd {
        call_sid: Some(sid.into()),
        status,
        sip_status: sip,
        duration_secs: 4,
    })
}

fn action_params(sim: &Sim) -> Vec<(String, String)> {
    let fetches: Vec<&Vec<(String, String)>> = sim
        .dials
        .iter()
        .filter_map(|d| match d {
            DialAsk::Fetch(_, p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(fetches.len(), 1, "{:?}", sim.dials);
    fetches[0].clone()
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Two parties dialled at once: one busy, the other answering. The busy one's end changes
/// nothing (ringback goes on), the one that answers is bridged, and its end, not the first,
/// reaches the `action`.
#[test]
fn a_dial_of_two_bridges_the_one_that_answers() {
    let mut sim = dialling_two();
    assert_eq!(
        sim.dials,
        vec![
            DialAsk::Place(ontime_twilio::DialTarget::Sip("sip:a@pbx".into())),
            DialAsk::Place(ontime_twilio::DialTarget::Sip("sip:b@pbx".into())),
        ]
    );
    sim.run_for(seconds(1.0));
    sim.core.handle_command(
        leg_end("CAa", ontime_twilio::CallStatus::Busy, Some(486)),
        sim.now,
    );
    sim.run_for(seconds(1.0));
    // Still ringing back: 2 s of tone so far.
    assert_eq!(sim.voiced_packets(), 100);
    assert_eq!(sim.dials.len(), 2, "{:?}", sim.dials);
    sim.core
        .handle_command(CallCommand::DialAnswered("CAb".into()), sim.now);
    sim.run_for(seconds(2.0));
    sim.core.handle_command(
        leg_end("CAb", ontime_twilio::CallStatus::Completed, None),
        sim.now,
    );
    sim.drain();
    let params = action_params(&sim);
    assert_eq!(param(&params, "DialCallStatus"), Some("completed"));
    assert_eq!(param(&params, "DialCallSid"), Some("CAb"));
}

/// Two parties, neither answering: the `<Dial>` ends only with the last leg, and the
/// `action` hears the outcome that says most (one rang out: `no-answer`, before `busy`).
#[test]
fn a_dial_of_two_that_neither_answers_ends_with_the_last() {
    let mut sim = dialling_two();
    sim.run_for(seconds(1.0));
    sim.core.handle_command(
        leg_end("CAb", ontime_twilio::CallStatus::NoAnswer, Some(487)),
        sim.now,
    );
    sim.drain();
    assert!(
        !sim.dials.iter().any(|d| matches!(d, DialAsk::Fetch(..))),
        "{:?}",
        sim.dials
    );
    sim.core.handle_command(
        leg_end("CAa", ontime_twilio::CallStatus::Busy, Some(486)),
        sim.now,
    );
    sim.drain();
    let params = action_params(&sim);
    assert_eq!(param(&params, "DialCallStatus"), Some("no-answer"));
    assert_eq!(param(&params, "DialCallSid"), Some("CAb"));
    assert_eq!(param(&params, "DialSipResponseCode"), Some("487"));
}

/// New TwiML during a `<Dial>` of two ends both legs still ringing.
#[test]
fn new_twiml_ends_every_leg_of_a_dial() {
    let mut sim = dialling_two();
    sim.run_for(seconds(1.0));
    sim.core.handle_command(
        CallCommand::Run(vec![Verb::Pause(Duration::from_secs(5))]),
        sim.now,
    );
    sim.drain();
    let ended: Vec<&DialAsk> = sim
        .dials
        .iter()
        .filter(|d| matches!(d, DialAsk::End(_)))
        .collect();
    assert_eq!(
        ended,
        vec![&DialAsk::End("CAa".into()), &DialAsk::End("CAb".into())]
    );
}

/// A call started unanswered for a `<Dial answerOnBridge>` of one party, with a digit after
/// it (`then_digit`) or nothing.
fn unanswered_dialling(then_digit: bool) -> Sim {
    let mut sim = Sim::new(|origin| CallSettings {
        unanswered: true,
        ..settings(origin)
    });
    let mut program = dial_twiml(None, 3600);
    if let Verb::Dial(d) = &mut program[0] {
        d.answer_on_bridge = true;
    }
    if !then_digit {
        program.truncate(1);
    }
    sim.core.handle_command(CallCommand::Run(program), sim.now);
    sim.core
        .handle_command(CallCommand::DialPlaced("CAleg".into()), sim.now);
    sim
}

/// `<Dial answerOnBridge>`: while the leg rings the call stays unanswered: no SIP request, no
/// stream, no ringback, and no RTP timeout though the caller sends nothing (2 s here). The
/// leg's answer answers the call ([`SipRequest::Answer`], once), and the stream starts then.
#[test]
fn answer_on_bridge_answers_when_the_leg_does() {
    let mut sim = unanswered_dialling(false);
    sim.run_for(seconds(10.0));
    assert!(sim.sip.is_empty(), "{:?}", sim.sip);
    assert_eq!(sim.streams_started, 0);
    assert_eq!(sim.voiced_packets(), 0);
    sim.core
        .handle_command(CallCommand::DialAnswered("CAleg".into()), sim.now);
    sim.caller_talks(0xFF);
    // The stream starts with the answer; the driver attaches it before the next agent action
    // is read, as this frame's run does here.
    sim.run_for(FRAME);
    for _ in 0..50 {
        sim.agent(AgentAction::Play(tone(0.02)));
        sim.run_for(FRAME);
    }
    sim.run_for(seconds(0.5));
    assert_eq!(sim.sip, vec![SipRequest::Answer]);
    assert_eq!(sim.streams_started, 1);
    assert_eq!(sim.voiced_packets(), 50);
}

/// `<Dial answerOnBridge>` whose party is busy, with nothing after it: the call, never
/// answered, is refused with the party's 486 (no BYE, no answer).
#[test]
fn answer_on_bridge_refuses_the_call_with_the_dials_outcome() {
    let mut sim = unanswered_dialling(false);
    sim.run_for(seconds(1.0));
    sim.core.handle_command(
        leg_end("CAleg", ontime_twilio::CallStatus::Busy, Some(486)),
        sim.now,
    );
    sim.run_for(seconds(1.0));
    assert_eq!(sim.sip, vec![SipRequest::Reject(486)]);
    assert_eq!(sim.streams_started, 0);
}

/// `<Dial answerOnBridge>` that rang out, followed by other TwiML: the next verb answers the
/// call (then runs: a digit), as Twilio's.
#[test]
fn answer_on_bridge_answers_for_the_verb_after_an_unbridged_dial() {
    let mut sim = unanswered_dialling(true);
    sim.run_for(seconds(1.0));
    sim.core.handle_command(
        leg_end("CAleg", ontime_twilio::CallStatus::NoAnswer, Some(487)),
        sim.now,
    );
    sim.run_for(seconds(2.0));
    assert_eq!(sim.sip.first(), Some(&SipRequest::Answer), "{:?}", sim.sip);
    assert_eq!(sim.streams_started, 1);
    assert_eq!(sim.core.take_stats().dtmf_sent, 1);
}

// Reply hold-back (`hold_back.rs`) in the call: the reply's audio waits at its verdict, a
// caller who resumes first has it dropped unheard and the bot told.

/// The caller speaks for `speech`, stops, and their turn ends `verdict_after` later with
/// probability `p`. Returns when the speech ended.
fn speak_a_turn(sim: &mut Sim, speech: Duration, verdict_after: Duration, p: f32) -> Instant {
    speak_a_turn_ending(sim, speech, verdict_after, p, None)
}

/// As [`speak_a_turn`], the verdict carrying the turn's final pitch level.
fn speak_a_turn_ending(
    sim: &mut Sim,
    speech: Duration,
    verdict_after: Duration,
    p: f32,
    final_pitch: Option<f32>,
) -> Instant {
    caller_begins(sim);
    sim.run_for(speech);
    caller_stops(sim, verdict_after, p, speech, final_pitch)
}

/// The caller begins speaking now (the VAD's onset at the stream's present).
fn caller_begins(sim: &mut Sim) {
    let detected = sim.stream_time();
    sim.inference(InferenceEvent::SpeechStarted {
        onset: detected,
        detected,
    });
}

/// The caller's speech ends now; `verdict_after` later the VAD says so and Smart Turn ends the
/// turn (`audio` analysed) with probability `p`. Returns when the speech ended.
fn caller_stops(
    sim: &mut Sim,
    verdict_after: Duration,
    p: f32,
    audio: Duration,
    final_pitch: Option<f32>,
) -> Instant {
    let end = sim.stream_time();
    let ended_at = sim.now;
    sim.run_for(verdict_after);
    sim.inference(InferenceEvent::SpeechStopped {
        end,
        detected: sim.stream_time(),
    });
    sim.inference(InferenceEvent::TurnEnded {
        probability: p,
        complete: true,
        timed_out: false,
        at: end,
        audio,
        latency: Duration::ZERO,
        final_pitch,
    });
    ended_at
}

fn resumed(sim: &Sim) -> Vec<(u64, u64)> {
    sim.notices
        .iter()
        .filter_map(|n| match n {
            AgentNotice::TurnResumed {
                pause_ms,
                dropped_ms,
            } => Some((*pause_ms, *dropped_ms)),
            _ => None,
        })
        .collect()
}

/// With the doubt wait on, 600 ms at probability 0.5 (it is off by default).
fn doubtful(origin: Instant) -> CallSettings {
    CallSettings {
        hold_back: super::hold_back::HoldBackConfig {
            unsure_hold: Duration::from_millis(600),
            ..Default::default()
        },
        ..settings(origin)
    }
}

#[test]
fn a_caller_who_resumes_before_the_held_reply_plays_has_it_dropped_unheard() {
    let mut sim = Sim::new(doubtful);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    // Smart Turn at 0.5: the reply waits the whole doubt wait, 600 ms.
    let ended_at = speak_a_turn(&mut sim, seconds(1.5), seconds(0.2), 0.5);
    sim.agent(AgentAction::Play(tone(2.0)));
    sim.agent(AgentAction::Mark("reply".into()));
    sim.agent(AgentAction::EndOfUtterance);
    sim.run_for(seconds(0.3));
    assert_eq!(sim.voiced_packets(), 0, "held");
    // The caller goes on 500 ms after their speech ended.
    let detected = sim.stream_time();
    sim.inference(InferenceEvent::SpeechStarted {
        onset: detected,
        detected,
    });
    assert_eq!(resumed(&sim), vec![(500, 2000)]);
    assert!(!sim.barged_in());
    // The bot, not listening, sends more of the dropped reply: dropped too.
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(1.5));
    assert_eq!(
        sim.voiced_packets(),
        0,
        "nothing of the dropped reply is heard"
    );
    // The turn really ends (the caller has paused in it: no habit wait), sure: the next reply
    // (a 1 s burst: no prebuffer) plays at once, in the sender's next slot.
    let second_end = speak_a_turn(&mut sim, seconds(1.0), seconds(0.2), 0.95);
    let verdict = sim.now;
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(1.5));
    assert_eq!(sim.voiced_packets(), 50);
    let first = sim.origin + sim.voiced.lock().unwrap()[0];
    assert!(
        first >= verdict && first <= verdict + Duration::from_millis(20),
        "{:?} after the verdict",
        first - verdict
    );
    assert!(second_end > ended_at);
    let marks = sim
        .notices
        .iter()
        .filter(|n| matches!(n, AgentNotice::MarkPlayed(_)))
        .count();
    assert_eq!(marks, 0, "the dropped reply's mark is never played");
    let stats = sim.core.take_stats();
    assert_eq!(stats.turns, 2);
    assert_eq!(stats.turns_resumed, 1);
    assert_eq!(stats.held_replies_dropped, 1);
    assert_eq!(stats.replies_held.get("doubt"), 1);
    assert_eq!(stats.replies_held.get("habit"), 0);
}

#[test]
fn a_doubtful_reply_plays_when_its_hold_is_over() {
    let mut sim = Sim::new(doubtful);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    // 0.7: half the doubt wait, 300 ms.
    speak_a_turn(&mut sim, seconds(1.5), seconds(0.2), 0.7);
    let verdict = sim.now;
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.agent(AgentAction::EndOfUtterance);
    sim.run_for(seconds(2.0));
    assert_eq!(sim.voiced_packets(), 50);
    let first = sim.origin + sim.voiced.lock().unwrap()[0];
    let after = first - verdict;
    // Released at the first 20 ms tick from 300 ms, into the sender's next slot.
    assert!(
        after >= Duration::from_millis(300) && after <= Duration::from_millis(340),
        "{after:?}"
    );
    assert!(resumed(&sim).is_empty());
    assert_eq!(sim.core.take_stats().replies_held.get("doubt"), 1);
}

#[test]
fn a_pause_the_caller_made_over_the_reply_is_waited_for_next_time() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    // Turn 1 ends in a pause, sure (not held); the reply starts; the caller resumes 900 ms
    // after their speech, over it: a barge-in the hold-back learns from.
    let ended_at = speak_a_turn(&mut sim, seconds(1.5), seconds(0.2), 0.95);
    sim.agent(AgentAction::Play(tone(3.0)));
    sim.run_until(ended_at + Duration::from_millis(900));
    let detected = sim.stream_time();
    sim.inference(InferenceEvent::SpeechStarted {
        onset: detected,
        detected,
    });
    assert!(sim.barged_in());
    assert!(
        resumed(&sim).is_empty(),
        "the reply was playing: a barge-in"
    );
    // The caller finishes: that end is not held (they paused in this turn already).
    sim.run_for(seconds(1.0));
    let end = sim.stream_time();
    sim.run_for(seconds(0.2));
    sim.inference(InferenceEvent::SpeechStopped {
        end,
        detected: sim.stream_time(),
    });
    sim.inference(turn_ended(true));
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(3.0));
    let heard_before = sim.voiced_packets();
    // Turn 2: sure again, but this caller pauses (rate 1.5 / 3): held until 900 × 1.5 + 128 ms
    // after the speech, then played.
    let ended_at = speak_a_turn(&mut sim, seconds(1.5), seconds(0.2), 0.95);
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(3.0));
    let voiced = sim.voiced.lock().unwrap().clone();
    let first = sim.origin + voiced[heard_before];
    let after = first - ended_at;
    assert!(
        after >= Duration::from_millis(1478) && after <= Duration::from_millis(1520),
        "{after:?}"
    );
    assert_eq!(voiced.len() - heard_before, 50);
    assert_eq!(sim.core.take_stats().replies_held.get("habit"), 1);
    // Turn 3 (rate 1.5 / 4, a habit still): the caller's voice fell 3.1 semitones at its end,
    // a statement's end: answered at once.
    sim.run_for(seconds(2.0));
    let heard_before = sim.voiced.lock().unwrap().len();
    speak_a_turn_ending(&mut sim, seconds(1.5), seconds(0.2), 0.95, Some(-3.1));
    let verdict = sim.now;
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(1.5));
    let first = first_voiced_after(&sim, heard_before);
    assert!(
        first - verdict <= Duration::from_millis(20),
        "{:?}",
        first - verdict
    );
    let stats = sim.core.take_stats();
    assert_eq!(stats.replies_held.get("habit"), 0);
    assert_eq!(stats.holds_lifted.get("fall"), 1);
}

/// The caller's speech ends now; the VAD says so and Smart Turn ends the turn, sure, 200 ms
/// later.
fn caller_ends_a_turn(sim: &mut Sim) -> Instant {
    caller_stops(sim, seconds(0.2), 0.95, seconds(1.5), None)
}

/// A call whose caller spoke 1.5 s and whose turn just ended (sure, not held): at the verdict.
fn a_turn_just_ended() -> Sim {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    caller_begins(&mut sim);
    sim.run_for(seconds(1.5));
    caller_ends_a_turn(&mut sim);
    sim
}

fn first_voiced_after(sim: &Sim, before: usize) -> Instant {
    sim.origin + sim.voiced.lock().unwrap()[before]
}

#[test]
fn a_transcript_that_stops_on_to_holds_a_new_callers_reply_until_they_go_on() {
    let mut sim = Sim::new(settings);
    sim.caller_talks(0xFF);
    sim.run_for(seconds(0.5));
    caller_begins(&mut sim);
    sim.run_for(seconds(1.2));
    sim.agent(AgentAction::Transcript(
        "I'd like to move my appointment to".into(),
    ));
    sim.run_for(seconds(0.3));
    let ended_at = caller_ends_a_turn(&mut sim);
    // A bot that answers at once: its reply is held (no pause learned yet: the words did it).
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.agent(AgentAction::EndOfUtterance);
    sim.run_until(ended_at + Duration::from_millis(800));
    assert_eq!(sim.voiced_packets(), 0, "held for the words");
    caller_begins(&mut sim);
    assert_eq!(resumed(&sim), vec![(800, 1000)]);
    // They finish the sentence, and their words end it: the reply plays at once.
    sim.run_for(seconds(0.6));
    sim.agent(AgentAction::Transcript(
        "I'd like to move my appointment to Friday.".into(),
    ));
    caller_ends_a_turn(&mut sim);
    let verdict = sim.now;
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(1.5));
    assert_eq!(sim.voiced_packets(), 50);
    let after = first_voiced_after(&sim, 0) - verdict;
    // The sender's next 20 ms slot: 13 ms on in this script's phase.
    assert_eq!(after, Duration::from_millis(13));
    let stats = sim.core.take_stats();
    assert_eq!(stats.replies_held.get("words"), 1);
    assert_eq!(stats.replies_held.get("habit"), 0);
    assert_eq!(stats.turns_resumed, 1);
    assert_eq!(stats.held_replies_dropped, 1);
    assert_eq!(stats.transcripts.get("incomplete"), 1);
    assert_eq!(stats.transcripts.get("complete"), 1);
}

#[test]
fn a_transcript_after_the_verdict_holds_the_reply_and_a_later_one_releases_it() {
    let mut sim = a_turn_just_ended();
    let verdict = sim.now;
    // The recogniser's last words come after the verdict, before the bot's reply.
    sim.run_for(seconds(0.1));
    sim.agent(AgentAction::Transcript(
        "The parcel never arrived and".into(),
    ));
    sim.run_for(seconds(0.2));
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.agent(AgentAction::EndOfUtterance);
    sim.run_until(verdict + Duration::from_millis(600));
    assert_eq!(sim.voiced_packets(), 0, "held for the words");
    // A final result that ends the sentence: released now, into the sender's next slot.
    sim.agent(AgentAction::Transcript(
        "The parcel never arrived and I am upset.".into(),
    ));
    let released = sim.now;
    sim.run_for(seconds(1.5));
    assert_eq!(sim.voiced_packets(), 50);
    let after = first_voiced_after(&sim, 0) - released;
    // The sender's next 20 ms slot: 13 ms on in this script's phase.
    assert_eq!(after, Duration::from_millis(13));
    assert!(resumed(&sim).is_empty());
    let stats = sim.core.take_stats();
    assert_eq!(stats.replies_held.get("words"), 1);
    assert_eq!(stats.transcripts.get("incomplete"), 1);
    assert_eq!(stats.transcripts.get("complete"), 1);
}

#[test]
fn without_a_transcript_the_same_turn_is_answered_at_once() {
    // The same turn as above with the hold-back's words left silent: played at once.
    let mut sim = a_turn_just_ended();
    let verdict = sim.now;
    sim.agent(AgentAction::Play(tone(1.0)));
    sim.run_for(seconds(1.5));
    assert_eq!(sim.voiced_packets(), 50);
    // The sender's next 20 ms slot.
    assert_eq!(
        first_voiced_after(&sim, 0) - verdict,
        Duration::from_millis(13)
    );
    assert_eq!(sim.core.take_stats().replies_held.get("words"), 0);
}
