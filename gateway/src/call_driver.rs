//! The thin tokio task around a [`CallCore`]: it owns the call's sockets, its inference
//! registration, its agent and its recording, feeds the core what arrives with the time it
//! arrived, and carries out what the core asks. No decision is made here.
//!
//! Nothing here is on the 20 ms send clock: the sender thread is. The core's 20 ms playout only
//! drains the inbound jitter buffer, where a few ms of tokio lateness are absorbed by its depth.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ontime_amd::{AmdConfig, Detector, Mode};
use ontime_inference::InferencePool;
use ontime_sender::{Sender, StreamConfig, StreamOutput};
use ontime_sip::CallHandle;
use tokio::sync::mpsc;
use tracing::warn;

use crate::agent::bridge::BridgeEnd;
use crate::agent::{
    Admission, Agent, AgentAction, AgentCall, AgentEvent, AgentOutput, WsAgent, WsAgentConfig,
};
use crate::api::Callbacks;
use crate::call::dial::DialEnd;
use crate::call::{CallCommand, CallCore, CallOutput, CallStats, DialogEvent, SipRequest};
use crate::media_socket::MediaReader;
use crate::ops::metrics::JitterDepthGauge;
use crate::records::recording::CallRecording;
use crate::registry::CallRegistry;
use crate::switchboard::CallStart;
use ontime_twilio::{CallStatus, MachineDetection, Verb};

/// Sent frames the sender keeps for a recording call: the driver drains them every 20 ms, so a
/// second leaves room for a stalled task.
const SENT_TAP_FRAMES: usize = 50;

/// What a call asks of the switchboard.
#[derive(Debug)]
pub struct SipCall {
    /// The dialog.
    pub call: CallHandle,
    /// The request.
    pub request: SipRequest,
}

/// Shared services a call uses.
#[derive(Clone)]
pub struct CallServices {
    /// The media clock.
    pub sender: Arc<Sender>,
    /// The inference pool.
    pub pool: Arc<InferencePool>,
    /// The agent.
    pub agent: Arc<dyn Agent>,
    /// Requests back to the switchboard.
    pub sip: mpsc::UnboundedSender<SipCall>,
    /// Where the call's jitter depth is summed.
    pub jitter_depth: Arc<JitterDepthGauge>,
    /// Where recordings go, if anywhere.
    pub record_dir: Option<std::path::PathBuf>,
    /// The calls the API sees.
    pub registry: Arc<CallRegistry>,
    /// The WebSocket settings a `<Connect><Stream>` bot gets (its URL and parameters added).
    pub ws_base: Arc<WsAgentConfig>,
    /// Latch each call's media to its first source (`--symmetric-rtp`).
    pub symmetric_rtp: bool,
}

/// The agent of a call whose TwiML connects its own bot, until that bot is connected.
struct NoAgent;

impl AgentCall for NoAgent {
    fn on_event(&mut self, _event: AgentEvent<'_>) {}
}

/// The detector's settings for a call's `MachineDetection`.
fn amd_config(asked: &MachineDetection) -> AmdConfig {
    AmdConfig {
        mode: if asked.detect_message_end {
            Mode::DetectMessageEnd
        } else {
            Mode::Enable
        },
        timeout: asked.timeout,
        speech_threshold: asked.speech_threshold,
        speech_end_threshold: asked.speech_end_threshold,
        silence_timeout: asked.silence_timeout,
    }
}

/// Tell an agent detection's verdict.
fn tell_verdict(agent: &mut dyn AgentCall, verdict: &ontime_amd::Verdict) {
    agent.on_event(AgentEvent::Amd {
        answered_by: verdict.answered_by.as_str(),
        duration_ms: verdict.after.as_millis() as u64,
    });
}

/// The TwiML of a call whose answering-machine detection is not asynchronous: it runs once the
/// verdict is in, fetched then from `url` if it came as a `Url=`.
struct HeldProgram {
    program: Vec<Verb>,
    url: Option<(String, bool)>,
}

impl HeldProgram {
    /// Hand the program to the call task on `ready`: at once, or once fetched with `params`
    /// (the verdict's). The bot's server answers in its own time; the call goes on meanwhile.
    fn release(
        self,
        params: Vec<(String, String)>,
        callbacks: &Callbacks,
        ready: &mpsc::UnboundedSender<Vec<Verb>>,
    ) {
        let Some((url, method_get)) = self.url else {
            let _ = ready.send(self.program);
            return;
        };
        let callbacks = callbacks.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let program = match callbacks.fetch_twiml(&url, method_get, &params).await {
                Ok(program) => program,
                Err(e) => {
                    // Twilio ends a call whose TwiML cannot be had.
                    warn!(error = %e, "TwiML fetch after the verdict failed: hanging up");
                    vec![Verb::Hangup]
                }
            };
            let _ = ready.send(program);
        });
    }
}

/// Run one call to its end.
pub async fn run(
    services: CallServices,
    start: CallStart,
    mut dialog: mpsc::UnboundedReceiver<DialogEvent>,
    mut control: mpsc::UnboundedReceiver<CallCommand>,
) {
    let CallStart {
        call,
        info,
        admitted,
        negotiated,
        start_unix_ms,
        mut settings,
        program,
        srtp,
        span: _,
    } = start;
    let sid = info.call_sid.clone();
    let (rtp_async, rtcp_async) = match (
        admitted.rtp.try_clone().and_then(MediaReader::new),
        admitted.rtcp.try_clone().and_then(MediaReader::new),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            warn!(error = %e, "RTP sockets unusable; hanging up");
            let _ = services.sip.send(SipCall {
                call,
                request: SipRequest::Hangup,
            });
            services.registry.ended(&sid, CallStatus::Failed, None);
            return; // dropping `admitted` releases the slot
        }
    };

    // Inference events come from the pool's thread; a tokio channel wakes this task.
    let (inference_tx, mut inference_rx) = mpsc::unbounded_channel();
    let mut inference = match services.pool.register_call_with_sink(move |e| {
        let _ = inference_tx.send(e);
    }) {
        Ok(c) => Some(c),
        Err(e) => {
            warn!(error = %e, "inference pool refused the call: no VAD or turn detection");
            None
        }
    };
    let mut recording = services.record_dir.as_ref().and_then(|dir| {
        CallRecording::create(dir, &info.call_id, negotiated.codec.is_wideband())
            .map_err(|e| warn!(error = %e, "recording disabled for this call"))
            .ok()
    });
    settings.record = recording.is_some();
    // The echo canceller's reference is the sender's sent tap, as the recording's agent track.
    let tap_sent = settings.record || settings.echo_canceller;
    settings.sender_origin = services.sender.origin();

    // Answering-machine detection: unless asynchronous, the TwiML (and with it the agent)
    // waits for the verdict, and the callee hears silence meanwhile, as on Twilio.
    let machine_detection = services.registry.machine_detection(&sid);
    let (program, mut held) = match &machine_detection {
        Some((asked, url)) if !asked.asynchronous => (
            Vec::new(),
            Some(HeldProgram {
                program,
                url: url.clone(),
            }),
        ),
        _ => (program, None),
    };
    let (fetched_tx, mut fetched_rx) = mpsc::unbounded_channel::<Vec<Verb>>();
    let mut verdict: Option<ontime_amd::Verdict> = None;

    let (agent_tx, mut agent_rx) = mpsc::unbounded_channel();
    // A `<Dial>` leg's input, handed over once it answers, and the leg (its CallSid).
    let (bridge_tx, mut bridge_rx) = mpsc::unbounded_channel::<AgentOutput>();
    let mut dial_legs: Vec<String> = Vec::new();
    // The agent is the `<Dial>` leg's bridge end (replaced by nothing when that leg is over).
    let mut bridged_agent = false;
    // A `<Dial>`'s `action` TwiML, fetched.
    let (action_tx, mut action_rx) = mpsc::unbounded_channel::<Vec<Verb>>();
    // This call is a `<Dial>` leg: the other party is its agent.
    let bridge_peer = services.registry.take_bridge(&sid);
    // ... whose own TwiML (`<Number url>`) runs first: the bridge waits for its end.
    let whisper = bridge_peer
        .as_ref()
        .and_then(|_| services.registry.whisper(&sid, &info));
    let (whisper_tx, mut whisper_rx) = mpsc::unbounded_channel::<Vec<Verb>>();
    let mut agent: Box<dyn AgentCall> = if whisper.is_some() {
        Box::new(NoAgent)
    } else if let Some(peer) = bridge_peer.clone() {
        Box::new(BridgeEnd::new(&AgentOutput::new(agent_tx.clone()), peer))
    } else if held.is_some() || matches!(program.first(), Some(Verb::ConnectStream { .. })) {
        Box::new(NoAgent)
    } else {
        services
            .agent
            .start_call(&info, AgentOutput::new(agent_tx.clone()))
    };
    // A `<Connect><Stream>` bot being connected, and the one connected (kept alive).
    let (connected_tx, mut connected_rx) = mpsc::unbounded_channel::<Arc<WsAgent>>();
    let mut _stream_agent: Option<Arc<WsAgent>> = None;
    let mut core = CallCore::new(
        settings,
        info,
        negotiated,
        start_unix_ms,
        Instant::now(),
        SystemTime::now(),
    );
    if let Some(keys) = srtp {
        core.use_srtp(keys);
    }
    if services.symmetric_rtp {
        core.use_symmetric_rtp();
    }
    if let Some((asked, _)) = &machine_detection {
        match Detector::new(&amd_config(asked), Instant::now()) {
            Ok(mut detector) => {
                if inference.is_some() {
                    detector.use_vad_segments();
                }
                core.detect_machine(detector);
            }
            Err(e) => {
                // Twilio's ranges are checked when the API reads them, so this would be a bug;
                // the call runs as one whose detection could not decide.
                warn!(error = %e, "answering-machine detection off for this call");
                let params = services
                    .registry
                    .amd_verdict(
                        &sid,
                        ontime_amd::AnsweredBy::Unknown.as_str(),
                        Duration::ZERO,
                    )
                    .unwrap_or_default();
                if let Some(h) = held.take() {
                    h.release(params, services.registry.callbacks(), &fetched_tx);
                }
            }
        }
    }
    if !program.is_empty() {
        core.handle_command(CallCommand::Run(program), Instant::now());
    }
    match whisper {
        Some((leg_twiml, params)) => {
            let callbacks = services.registry.callbacks().clone();
            tokio::spawn(async move {
                let verbs = match callbacks
                    .fetch_twiml(&leg_twiml.url, leg_twiml.get, &params)
                    .await
                {
                    Ok(v) => v,
                    Err(e) => {
                        // As a call whose TwiML cannot be had: the leg ends, unbridged.
                        warn!(error = %e, "the dialled leg's TwiML fetch failed: hanging up");
                        vec![Verb::Hangup]
                    }
                };
                let _ = whisper_tx.send(verbs);
            });
        }
        // The call that dialled this leg is gone already.
        None if bridge_peer.is_some() && !bridge_leg(&services, &sid, &mut core, &agent_tx) => {
            core.handle_command(CallCommand::Complete, Instant::now());
        }
        None => {}
    }
    let mut depth = services.jitter_depth.share();
    // Counted on every packet's wake: the handle is looked up in the registry once, here.
    let packets_received = metrics::counter!(crate::ops::metrics::RTP_PACKETS_RECEIVED_TOTAL);
    let mut rtp_buf = vec![0u8; 2048];
    let mut rtcp_buf = vec![0u8; 2048];

    loop {
        // Carry out everything the core asked for.
        while let Some(output) = core.poll_output() {
            match output {
                CallOutput::StartStream {
                    packetizer,
                    remote,
                    srtp,
                    silence_frame,
                } => {
                    let socket = match admitted.rtp.try_clone() {
                        Ok(s) => Arc::new(s),
                        Err(e) => {
                            warn!(error = %e, "cannot share the RTP socket with the sender");
                            continue;
                        }
                    };
                    let mut config =
                        StreamConfig::new(packetizer.clone(), StreamOutput::Udp { socket, remote });
                    if tap_sent {
                        config.sent_tap_frames = SENT_TAP_FRAMES;
                    }
                    config.srtp = srtp.map(|c| *c);
                    config.silence_frame = silence_frame;
                    match services.sender.add_stream(config) {
                        Ok(p) => core.attach_stream(p, &packetizer, Instant::now()),
                        Err(e) => warn!(error = %e, "sender refused the stream"),
                    }
                }
                CallOutput::SetStreamRemote { stream, remote } => {
                    let _ = services.sender.set_remote(stream, remote);
                }
                CallOutput::Rtcp { bytes, destination } => {
                    let _ = admitted.rtcp.send_to(&bytes, destination);
                }
                CallOutput::Inference(frame) => {
                    if let Some(c) = inference.as_mut() {
                        let _ = match &frame.wide {
                            Some(wide) => c.push_pcm_wide(&frame.narrow, wide),
                            None => c.push_pcm(&frame.narrow),
                        };
                    }
                }
                CallOutput::Agent(notice) => agent.on_event(notice.as_event()),
                CallOutput::Record {
                    track,
                    at,
                    pcm,
                    wide,
                } => {
                    if let Some(r) = recording.as_mut() {
                        r.write_frame(track, at, &pcm[..], wide.as_deref().map(|w| &w[..]));
                    }
                }
                CallOutput::Interim(record) => record.log(),
                CallOutput::SendDigits {
                    stream,
                    payload_type,
                    digits,
                } => {
                    let took = services
                        .sender
                        .send_dtmf(stream, payload_type, &digits)
                        .map_err(|e| warn!(error = %e, "digits not sent"))
                        .ok();
                    core.digits_queued(&digits, took, Instant::now());
                }
                CallOutput::ConnectStream {
                    url,
                    parameters,
                    audio,
                } => {
                    // The current agent is done with this call; the new bot takes over once
                    // connected (the caller hears silence meanwhile).
                    agent.on_event(AgentEvent::Ended);
                    agent = Box::new(NoAgent);
                    bridged_agent = false;
                    let mut config = (*services.ws_base).clone();
                    config.url = url;
                    config.custom_parameters.extend(parameters);
                    config.audio = audio;
                    match WsAgent::new(config) {
                        Ok(ws) => {
                            let ws = Arc::new(ws);
                            let prepared = ws.prepare_call(core.info());
                            let tx = connected_tx.clone();
                            tokio::spawn(async move {
                                if let Some(p) = prepared {
                                    // Unreachable: start_call plays the fallback and hangs up.
                                    let _: Admission = p.await;
                                }
                                let _ = tx.send(ws);
                            });
                        }
                        Err(e) => warn!(error = %e, "cannot connect the stream"),
                    }
                }
                CallOutput::Transfer(outcome) => services.registry.transferred(&sid, &outcome),
                CallOutput::Dial(dial) => {
                    // The agent is done with this call: the dialled party takes its place
                    // once it answers (ringback meanwhile), then the TwiML goes on.
                    agent.on_event(AgentEvent::Ended);
                    agent = Box::new(NoAgent);
                    // Every party at once: the first to answer is bridged.
                    dial_legs.clear();
                    for noun in &dial.nouns {
                        let placed = services.registry.dial(
                            core.info(),
                            &dial,
                            noun,
                            AgentOutput::new(agent_tx.clone()),
                            bridge_tx.clone(),
                        );
                        match placed {
                            Ok(leg) => {
                                dial_legs.push(leg.clone());
                                core.handle_command(CallCommand::DialPlaced(leg), Instant::now());
                            }
                            Err(e) => {
                                warn!(error = %e, "a <Dial> leg could not be placed");
                                core.handle_command(
                                    CallCommand::DialEnded(DialEnd {
                                        call_sid: None,
                                        status: CallStatus::Failed,
                                        sip_status: None,
                                        duration_secs: 0,
                                    }),
                                    Instant::now(),
                                );
                            }
                        }
                    }
                }
                CallOutput::EndDial(leg) => services.registry.end(&leg),
                CallOutput::WhisperDone => {
                    // The leg's own TwiML (or the bot it connected) is done with it: the other
                    // party takes the agent's place.
                    agent.on_event(AgentEvent::Ended);
                    agent = Box::new(NoAgent);
                    if let Some(peer) = bridge_peer.clone() {
                        agent = Box::new(BridgeEnd::new(&AgentOutput::new(agent_tx.clone()), peer));
                        if !bridge_leg(&services, &sid, &mut core, &agent_tx) {
                            core.handle_command(CallCommand::Complete, Instant::now());
                        }
                    }
                }
                CallOutput::FetchTwiml {
                    url,
                    method_get,
                    params,
                } => {
                    let callbacks = services.registry.callbacks().clone();
                    let tx = action_tx.clone();
                    tokio::spawn(async move {
                        let verbs = match callbacks.fetch_twiml(&url, method_get, &params).await {
                            Ok(v) => v,
                            Err(e) => {
                                // Twilio ends a call whose next TwiML cannot be had.
                                warn!(error = %e, "the <Dial> action's TwiML fetch failed");
                                vec![Verb::Hangup]
                            }
                        };
                        let _ = tx.send(verbs);
                    });
                }
                CallOutput::Amd(v) => {
                    verdict = Some(v);
                    tell_verdict(agent.as_mut(), &v);
                    let params =
                        services
                            .registry
                            .amd_verdict(&sid, v.answered_by.as_str(), v.after);
                    if let Some(h) = held.take() {
                        h.release(
                            params.unwrap_or_default(),
                            services.registry.callbacks(),
                            &fetched_tx,
                        );
                    }
                }
                CallOutput::Sip(request) => {
                    let _ = services.sip.send(SipCall { call, request });
                }
                CallOutput::Ended { cdr, recording_end } => {
                    cdr.log();
                    services.registry.ended(&sid, CallStatus::Completed, None);
                    if let Some(r) = recording.take() {
                        if let Err(e) = r.finish(recording_end) {
                            warn!(error = %e, "recording could not be finalised");
                        }
                    }
                }
            }
        }
        record_stats(core.take_stats(), &packets_received);
        depth.set(core.jitter_depth());
        let Some(wake) = core.poll_timeout() else {
            break;
        };
        tokio::select! {
            r = rtp_async.recv_from(&mut rtp_buf) => {
                if let Ok((n, src)) = r {
                    let now = Instant::now();
                    // A packet runs the playout tick with it (most ticks at a steady 20 ms), and
                    // the tick decides pending barge-ins: it must know how far the VAD has judged.
                    catch_up_with_inference(&mut core, inference.as_ref(), &mut inference_rx, now);
                    core.handle_rtp(&mut rtp_buf[..n], src, now);
                }
            }
            r = rtcp_async.recv_from(&mut rtcp_buf) => {
                if let Ok((n, src)) = r {
                    core.handle_rtcp(&mut rtcp_buf[..n], src, Instant::now());
                }
            }
            _ = tokio::time::sleep_until(wake.into()) => {
                let now = Instant::now();
                catch_up_with_inference(&mut core, inference.as_ref(), &mut inference_rx, now);
                core.handle_timeout(now);
            }
            Some(ev) = inference_rx.recv() => core.handle_inference(ev, Instant::now()),
            Some(action) = agent_rx.recv() => core.handle_agent(action, Instant::now()),
            Some(command) = control.recv() => {
                let leg_over = match &command {
                    CallCommand::DialEnded(end) => end.call_sid.clone(),
                    _ => None,
                };
                core.handle_command(command, Instant::now());
                if let Some(leg) = leg_over {
                    dial_legs.retain(|l| *l != leg);
                    // The other party is gone (not a leg that lost the race): nothing more to
                    // hand them, unless new TwiML gave the call another agent meanwhile.
                    if bridged_agent && !core.bridged() {
                        agent = Box::new(NoAgent);
                        bridged_agent = false;
                    }
                }
            }
            Some(peer) = bridge_rx.recv() => {
                // A leg that answers after new TwiML ended its `<Dial>` is not bridged.
                if core.dialing() {
                    agent = Box::new(BridgeEnd::new(&AgentOutput::new(agent_tx.clone()), peer));
                    bridged_agent = true;
                }
            }
            Some(verbs) = whisper_rx.recv() => {
                core.handle_command(CallCommand::Whisper(verbs), Instant::now());
            }
            Some(verbs) = action_rx.recv() => {
                core.handle_command(CallCommand::DialAction(verbs), Instant::now());
            }
            Some(ws) = connected_rx.recv() => {
                agent = ws.start_call(core.info(), AgentOutput::new(agent_tx.clone()));
                if let Some(v) = &verdict {
                    tell_verdict(agent.as_mut(), v);
                }
                _stream_agent = Some(ws);
            }
            Some(program) = fetched_rx.recv() => {
                // The TwiML held for the verdict: its agent starts now (a `<Connect><Stream>`
                // bot once connected, above).
                if !matches!(program.first(), Some(Verb::ConnectStream { .. })) {
                    agent.on_event(AgentEvent::Ended);
                    agent = services
                        .agent
                        .start_call(core.info(), AgentOutput::new(agent_tx.clone()));
                    if let Some(v) = &verdict {
                        tell_verdict(agent.as_mut(), v);
                    }
                }
                if !program.is_empty() {
                    core.handle_command(CallCommand::Run(program), Instant::now());
                }
            }
            ev = dialog.recv() => match ev {
                Some(ev) => core.handle_dialog(ev, Instant::now()),
                // The SIP driver is gone: nothing will end the dialog for us.
                None => core.handle_dialog(
                    DialogEvent::Ended(crate::records::cdr::EndCause::SignallingFailure),
                    Instant::now(),
                ),
            },
        }
    }
    for leg in dial_legs {
        // The caller is gone: a leg still ringing is cancelled, a bridged one hung up.
        services.registry.end(&leg);
    }
    drop(inference); // unregisters from the pool
    drop(core); // removes the stream at the next tick
    drop(admitted); // the slot: port back to the pool, one call fewer
}

/// A `<Dial>` leg's audio goes to the call that dialled it from now on, and that call is told
/// it answered; false if that call is gone already.
/// Before a wake that can run the playout tick: how far the VAD has judged the caller's audio,
/// and the events it sent up to there. The progress is read first and the events drained after
/// (each chunk's events are sent before its progress is stored), so the core never takes audio
/// as judged without its events. Fed on the timer's wakes alone, the progress was never fed on a
/// call whose packets ran every tick: a pending barge-in then went by the call's clock and cut
/// the reply under a backchannel whose stop a Smart Turn run held back.
fn catch_up_with_inference(
    core: &mut CallCore,
    inference: Option<&ontime_inference::CallInference>,
    events: &mut mpsc::UnboundedReceiver<ontime_inference::InferenceEvent>,
    now: Instant,
) {
    let Some(c) = inference else {
        return;
    };
    let judged = c.judged();
    while let Ok(ev) = events.try_recv() {
        core.handle_inference(ev, now);
    }
    core.handle_vad_progress(judged);
}

fn bridge_leg(
    services: &CallServices,
    sid: &str,
    core: &mut CallCore,
    agent_tx: &mpsc::UnboundedSender<AgentAction>,
) -> bool {
    core.serve_bridge();
    services
        .registry
        .bridged(sid, AgentOutput::new(agent_tx.clone()))
}

/// Add what a call counted to the gateway's metrics (the one place a call's numbers become
/// metrics; the core only counts).
fn record_stats(stats: CallStats, packets_received: &metrics::Counter) {
    use crate::ops::metrics as m;
    use metrics::{counter, gauge, histogram};
    let add = |name: &'static str, n: u64| {
        if n > 0 {
            counter!(name).increment(n);
        }
    };
    if stats.rtp_received > 0 {
        packets_received.increment(stats.rtp_received);
    }
    for (reason, n) in stats.rtp_invalid.iter() {
        counter!(m::RTP_INVALID_PACKETS_TOTAL, "reason" => reason).increment(n);
    }
    for (reason, n) in stats.srtp_dropped.iter() {
        counter!(m::SRTP_DROPPED_TOTAL, "reason" => reason).increment(n);
    }
    add(m::RTCP_REPORTS_RECEIVED_TOTAL, stats.rtcp_reports_received);
    if let Some(peer) = stats.peer_report {
        if let Some(rtt) = peer.rtt {
            gauge!(m::RTCP_RTT_SECONDS).set(rtt.as_secs_f64());
        }
        gauge!(m::RTCP_PEER_FRACTION_LOST).set(peer.fraction_lost);
        gauge!(m::RTCP_PEER_JITTER_SECONDS).set(peer.jitter.as_secs_f64());
    }
    add(m::JITTER_DISCARDED_TOTAL, stats.jitter_discarded);
    add(m::JITTER_LOST_TOTAL, stats.jitter_lost);
    add(m::DTMF_DIGITS_TOTAL, stats.dtmf_digits);
    add(m::DTMF_SENT_TOTAL, stats.dtmf_sent);
    add(m::TURNS_TOTAL, stats.turns);
    add(m::BARGE_INS_TOTAL, stats.barge_ins);
    add(m::BACKCHANNELS_TOTAL, stats.backchannels);
    for (reason, n) in stats.replies_held.iter() {
        counter!(m::REPLIES_HELD_TOTAL, "reason" => reason).increment(n);
    }
    for (cue, n) in stats.holds_lifted.iter() {
        counter!(m::REPLY_HOLDS_LIFTED_TOTAL, "cue" => cue).increment(n);
    }
    for (cue, n) in stats.transcripts.iter() {
        counter!(m::TRANSCRIPTS_TOTAL, "cue" => cue).increment(n);
    }
    add(m::TURNS_RESUMED_TOTAL, stats.turns_resumed);
    add(m::HELD_REPLIES_DROPPED_TOTAL, stats.held_replies_dropped);
    add(m::ECHO_FRAMES_GATED_TOTAL, stats.echo_frames_gated);
    add(m::ECHO_BURSTS_GATED_TOTAL, stats.echo_bursts_gated);
    if let Some(echo) = stats.echo_found {
        if let Some(d) = echo.delay {
            histogram!(m::ECHO_DELAY_SECONDS).record(d.as_secs_f64());
        }
        if let Some(erle) = echo.erle_db {
            histogram!(m::ECHO_ERLE_DB).record(f64::from(erle));
        }
    }
    add(
        m::AGENT_AUDIO_CUT_FRAMES_TOTAL,
        stats.agent_audio_cut_frames,
    );
    add(
        m::AGENT_AUDIO_DROPPED_FRAMES_TOTAL,
        stats.agent_audio_dropped_frames,
    );
    for seconds in stats.agent_buffered_seconds {
        histogram!(m::AGENT_BUFFERED_AUDIO_SECONDS).record(seconds);
    }
    for (result, n) in stats.transfers.iter() {
        counter!(m::TRANSFERS_TOTAL, "result" => result).increment(n);
    }
    add(m::RTP_TIMEOUTS_TOTAL, stats.rtp_timeouts);
    if let Some(result) = stats.ended {
        counter!(m::CALLS_TOTAL, "result" => result).increment(1);
    }
    if let Some(codec) = stats.ended_codec {
        counter!(m::CALLS_BY_CODEC_TOTAL, "codec" => codec).increment(1);
    }
    if let Some(answered_by) = stats.amd_verdict {
        counter!(m::AMD_VERDICTS_TOTAL, "answered_by" => answered_by).increment(1);
    }
}
