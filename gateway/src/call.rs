//! One call's media task (tokio): caller RTP in through [`crate::inbound::InboundMedia`] (parse,
//! source check, RFC 3550 stats, jitter buffer, DTMF), decoded audio into the shared inference
//! pool's VAD and Smart Turn, turn events to the agent, the agent's audio out through the
//! real-time sender's ring for this call, RTCP both ways, barge-in, timeouts and the CDR.
//!
//! Nothing here is on the 20 ms send clock: the sender thread is. This task's 20 ms playout
//! interval only drains the inbound jitter buffer, where a few ms of tokio lateness are absorbed
//! by the buffer's depth.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::counter;
use ontime_inference::{InferenceEvent, InferencePool};
use ontime_rtp::g711::Law;
use ontime_rtp::{Packetizer, FRAME, PT_PCMA};
use ontime_sender::{Sender, StreamConfig, StreamEvent, StreamOutput, StreamProducer};
use ontime_sip::{CallHandle, NegotiatedMedia};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::agent::{Agent, AgentAction, AgentEvent, AgentOutput, CallInfo};
use crate::cdr::{unix_ms_now, CallDetailRecord, EndCause};
use crate::config::{BargeIn, Config};
use crate::inbound::{InboundMedia, InboundOutcome};
use crate::metrics as m;
use crate::recording::CallRecording;
use crate::rtcp::{OutgoingStream, RtcpSession};
use crate::server::{may_send, Shared, SipCommand};

/// Control messages from the SIP loop to a call.
#[derive(Debug)]
pub enum CallControl {
    /// The ACK arrived.
    Established,
    /// New negotiated media after a re-INVITE/UPDATE (hold, resume, new address).
    Media(NegotiatedMedia),
    /// A DTMF digit from SIP INFO.
    Dtmf(char),
    /// The dialog ended (BYE, CANCEL, timeout): clean up.
    Ended(EndCause),
    /// Hang up now (drain timeout, operator).
    Hangup(EndCause),
}

/// Shared services a call uses.
pub struct CallContext {
    /// Configuration.
    pub config: Arc<Config>,
    /// Admission state.
    pub shared: Arc<Shared>,
    /// The media clock.
    pub sender: Arc<Sender>,
    /// The inference pool.
    pub pool: Arc<InferencePool>,
    /// The agent.
    pub agent: Arc<dyn Agent>,
    /// Commands back to the SIP loop.
    pub sip: mpsc::UnboundedSender<SipCommand>,
}

/// What the SIP loop hands a new call.
pub struct CallMedia {
    /// The dialog.
    pub call: CallHandle,
    /// Facts for the agent and the CDR.
    pub info: CallInfo,
    /// The RTP socket (even port).
    pub rtp: StdUdpSocket,
    /// The RTCP socket (port + 1).
    pub rtcp: StdUdpSocket,
    /// The RTP port (returned to the pool at the end).
    pub port: u16,
    /// The negotiated media.
    pub negotiated: NegotiatedMedia,
    /// The IP the caller's SDP named.
    pub sdp_remote_ip: Option<IpAddr>,
}

/// Agent audio waiting for room in the sender's ring, in order with marks and utterance ends.
enum Queued {
    Audio(Vec<u8>, usize),
    EndOfUtterance,
    Mark(u64),
}

fn law_of(payload_type: u8) -> Law {
    if payload_type == PT_PCMA {
        Law::Alaw
    } else {
        Law::Ulaw
    }
}

struct Outbound {
    producer: Option<StreamProducer>,
    queue: VecDeque<Queued>,
    law: Law,
    mark_names: Vec<(u64, String)>,
    next_mark: u64,
    /// `max_buffered_seconds` in G.711 bytes: more queued agent audio than this drops the oldest.
    max_buffered_bytes: usize,
}

/// How far ahead agent audio is handed to the sender's ring. The rest waits in the call's
/// queue, where the oldest can still be dropped when a bot sends more than
/// `max_buffered_seconds`; two seconds absorb any tokio delay in refilling (every 20 ms).
const RING_HORIZON_BYTES: usize = 100 * ontime_rtp::FRAME_BYTES;

impl Outbound {
    fn queued(&self) -> bool {
        !self.queue.is_empty() || self.producer.as_ref().is_some_and(|p| p.queued_bytes() > 0)
    }

    /// Move queued items into the ring as far as it has room.
    fn feed(&mut self) {
        let Some(p) = self.producer.as_mut() else {
            return;
        };
        while let Some(front) = self.queue.front_mut() {
            match front {
                Queued::Audio(bytes, offset) => {
                    let horizon = RING_HORIZON_BYTES.min(self.max_buffered_bytes);
                    let room = horizon.saturating_sub(p.queued_bytes());
                    let end = bytes.len().min(*offset + room);
                    *offset += p.push(&bytes[*offset..end]);
                    if *offset < bytes.len() {
                        return;
                    }
                }
                Queued::EndOfUtterance => p.end_utterance(),
                Queued::Mark(id) => {
                    if p.mark(*id).is_err() {
                        return; // mark ring full: retry next tick
                    }
                }
            }
            self.queue.pop_front();
        }
    }

    /// Agent audio queued here and in the sender's ring, in G.711 bytes (= samples).
    fn queued_bytes(&self) -> usize {
        let ring = self.producer.as_ref().map_or(0, |p| p.queued_bytes());
        let here: usize = self
            .queue
            .iter()
            .map(|q| match q {
                Queued::Audio(bytes, offset) => bytes.len() - *offset,
                _ => 0,
            })
            .sum();
        ring + here
    }

    /// Drop the oldest queued audio (not yet in the ring) beyond `max_buffered_bytes`; returns
    /// the bytes dropped. Marks and utterance ends stay in order.
    fn drop_oldest_beyond_max(&mut self) -> usize {
        let mut excess = self.queued_bytes().saturating_sub(self.max_buffered_bytes);
        let mut dropped = 0;
        for item in self.queue.iter_mut() {
            if excess == 0 {
                break;
            }
            if let Queued::Audio(bytes, offset) = item {
                let n = (bytes.len() - *offset).min(excess);
                *offset += n;
                excess -= n;
                dropped += n;
            }
        }
        dropped
    }

    fn clear(&mut self) {
        self.queue.clear();
        if let Some(p) = self.producer.as_mut() {
            p.clear();
        }
    }
}

fn start_stream(
    sender: &Sender,
    socket: &StdUdpSocket,
    remote: SocketAddr,
    payload_type: u8,
) -> Option<(StreamProducer, OutgoingStream)> {
    let socket = match socket.try_clone() {
        Ok(s) => Arc::new(s),
        Err(e) => {
            warn!(error = %e, "cannot share the RTP socket with the sender");
            return None;
        }
    };
    // Random SSRC, sequence and timestamp (RFC 3550 §5.1); RTCP needs the SSRC and first timestamp.
    let packetizer = Packetizer::new(payload_type);
    let outgoing = OutgoingStream {
        ssrc: packetizer.ssrc(),
        first_timestamp: packetizer.next_timestamp(),
        started: Instant::now(),
    };
    let config = StreamConfig::new(packetizer, StreamOutput::Udp { socket, remote });
    match sender.add_stream(config) {
        Ok(p) => Some((p, outgoing)),
        Err(e) => {
            warn!(error = %e, "sender refused the stream");
            None
        }
    }
}

/// Run one call to its end.
pub async fn run(
    ctx: CallContext,
    media: CallMedia,
    start_unix_ms: u64,
    mut control: mpsc::UnboundedReceiver<CallControl>,
) {
    let started = Instant::now();
    let CallMedia {
        call,
        info,
        rtp,
        rtcp,
        port,
        mut negotiated,
        sdp_remote_ip,
    } = media;

    let (rtp_async, rtcp_async) = match (
        rtp.try_clone().and_then(UdpSocket::from_std),
        rtcp.try_clone().and_then(UdpSocket::from_std),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            warn!(error = %e, "RTP sockets unusable; hanging up");
            let _ = ctx.sip.send(SipCommand::Hangup(call));
            finish_port(&ctx, port);
            return;
        }
    };

    // Inference events come from the pool's thread; a tokio channel wakes this task.
    let (inference_tx, mut inference_rx) = mpsc::unbounded_channel();
    let inference = match ctx.pool.register_call_with_sink(move |e| {
        let _ = inference_tx.send(e);
    }) {
        Ok(c) => Some(c),
        Err(e) => {
            warn!(error = %e, "inference pool refused the call: no VAD or turn detection");
            None
        }
    };

    let (agent_tx, mut agent_rx) = mpsc::unbounded_channel();
    let mut agent = ctx.agent.start_call(&info, AgentOutput(agent_tx));

    let mut recording = ctx.config.record_dir.as_ref().and_then(|dir| {
        CallRecording::create(dir, &info.call_id)
            .map_err(|e| warn!(error = %e, "recording disabled for this call"))
            .ok()
    });

    let mut inbound = InboundMedia::new(negotiated, sdp_remote_ip);
    let mut rtcp_session = RtcpSession::new(
        rtcp_address(negotiated.remote_rtp),
        rand::random(),
        format!("ontime@{}", ctx.config.public_ip),
        Instant::now(),
    );
    let mut out = Outbound {
        producer: None,
        queue: VecDeque::new(),
        law: law_of(negotiated.payload_type),
        mark_names: Vec::new(),
        next_mark: 1,
        max_buffered_bytes: (ctx.config.max_buffered.as_secs_f64()
            * f64::from(ontime_rtp::SAMPLE_RATE_HZ)) as usize,
    };
    if let (Some(remote), true) = (negotiated.remote_rtp, may_send(negotiated.local_direction)) {
        if let Some((p, o)) = start_stream(&ctx.sender, &rtp, remote, negotiated.payload_type) {
            out.producer = Some(p);
            rtcp_session.set_outgoing(Some(o));
        }
    }

    let mut rtp_buf = vec![0u8; 2048];
    let mut rtcp_buf = vec![0u8; 2048];
    let mut playout = tokio::time::interval(FRAME);
    playout.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut last_rtp = Instant::now();
    let mut turns = 0u64;
    let mut barge_ins = 0u64;
    let mut dtmf = String::new();
    let answer_unix_ms = Some(unix_ms_now());
    let mut speaking = false;

    let cause = loop {
        tokio::select! {
            r = rtp_async.recv_from(&mut rtp_buf) => {
                let Ok((n, src)) = r else { continue };
                let now = Instant::now();
                match inbound.handle_datagram(&rtp_buf[..n], src, now) {
                    InboundOutcome::Audio => {
                        last_rtp = now;
                        counter!(m::RTP_PACKETS_RECEIVED_TOTAL).increment(1);
                    }
                    InboundOutcome::Latched(addr) => {
                        last_rtp = now;
                        counter!(m::RTP_PACKETS_RECEIVED_TOTAL).increment(1);
                        if let Some(p) = out.producer.as_ref() {
                            let _ = ctx.sender.set_remote(p.id(), addr);
                        }
                        rtcp_session.set_remote(SocketAddr::new(addr.ip(), addr.port().wrapping_add(1)));
                    }
                    InboundOutcome::Dtmf(digit) => {
                        last_rtp = now;
                        counter!(m::RTP_PACKETS_RECEIVED_TOTAL).increment(1);
                        if let Some(d) = digit {
                            counter!(m::DTMF_DIGITS_TOTAL).increment(1);
                            dtmf.push(d);
                            agent.on_event(AgentEvent::Dtmf(d));
                        }
                    }
                    InboundOutcome::Dropped(reason) => {
                        counter!(m::RTP_INVALID_PACKETS_TOTAL, "reason" => reason).increment(1);
                    }
                    InboundOutcome::Rtcp => {}
                }
            }
            r = rtcp_async.recv_from(&mut rtcp_buf) => {
                if let Ok((n, src)) = r {
                    rtcp_session.handle_packet(&rtcp_buf[..n], src, Instant::now(), inbound.sdp_ip());
                }
            }
            _ = playout.tick() => {
                let now = Instant::now();
                // Caller audio: one frame per 20 ms once the caller has started sending; silence
                // (DTX, end of a stream) still advances the VAD's clock so speech can stop.
                inbound.pop(now, |frame| {
                    if let Some(c) = inference.as_ref() {
                        let _ = c.push_pcm(frame);
                    }
                    if let Some(r) = recording.as_mut() {
                        r.caller(frame);
                    }
                    agent.on_event(AgentEvent::CallerAudio(frame));
                });
                out.feed();
                inbound.publish_metrics();
                if let Some(p) = out.producer.as_mut() {
                    while let Some(ev) = p.try_event() {
                        let StreamEvent::Mark { id, cleared } = ev else { continue };
                        if let Some(i) = out.mark_names.iter().position(|(m, _)| *m == id) {
                            let (_, name) = out.mark_names.swap_remove(i);
                            if !cleared {
                                agent.on_event(AgentEvent::MarkPlayed(&name));
                            }
                        }
                    }
                }
                if let Some(pkt) = rtcp_session.poll_report(now, &mut inbound, out.producer.as_ref().map(|p| p.stats().packets_sent)) {
                    let _ = rtcp.send_to(&pkt.bytes, pkt.destination);
                }
                if now.duration_since(last_rtp) >= ctx.config.rtp_timeout {
                    counter!(m::RTP_TIMEOUTS_TOTAL).increment(1);
                    info!(timeout_s = ctx.config.rtp_timeout.as_secs(), "no RTP from the caller: hanging up");
                    let _ = ctx.sip.send(SipCommand::Hangup(call));
                    break wait_for_end(&mut control, EndCause::RtpTimeout).await;
                }
                if now.duration_since(started) >= ctx.config.max_call_duration {
                    info!("maximum call length reached: hanging up");
                    let _ = ctx.sip.send(SipCommand::Hangup(call));
                    break wait_for_end(&mut control, EndCause::MaxDuration).await;
                }
            }
            Some(ev) = inference_rx.recv() => match ev {
                InferenceEvent::SpeechStarted { .. } => {
                    speaking = true;
                    if ctx.config.barge_in == BargeIn::Local && out.queued() {
                        // Barge-in: the caller talks over the reply; drop it at once.
                        out.clear();
                        barge_ins += 1;
                        counter!(m::BARGE_INS_TOTAL).increment(1);
                        agent.on_event(AgentEvent::BargeIn);
                    }
                    agent.on_event(AgentEvent::SpeechStarted);
                }
                InferenceEvent::SpeechStopped { .. } => {
                    speaking = false;
                    agent.on_event(AgentEvent::SpeechStopped);
                }
                InferenceEvent::TurnEnded { probability, complete, timed_out, latency, .. } => {
                    if complete && !speaking {
                        turns += 1;
                        counter!(m::TURNS_TOTAL).increment(1);
                        info!(probability, timed_out, latency_ms = latency.as_secs_f64() * 1e3, "turn ended");
                        agent.on_event(AgentEvent::TurnEnded { probability: (!timed_out).then_some(probability) });
                    }
                }
            },
            Some(action) = agent_rx.recv() => match action {
                AgentAction::Play(samples) => {
                    if let Some(r) = recording.as_mut() {
                        r.agent(&samples);
                    }
                    let mut bytes = vec![0u8; samples.len()];
                    out.law.encode_slice(&samples, &mut bytes);
                    out.queue.push_back(Queued::Audio(bytes, 0));
                    let dropped = out.drop_oldest_beyond_max();
                    if dropped > 0 {
                        counter!(m::AGENT_AUDIO_DROPPED_FRAMES_TOTAL)
                            .increment(dropped.div_ceil(ontime_rtp::FRAME_BYTES) as u64);
                    }
                    out.feed();
                    metrics::histogram!(m::AGENT_BUFFERED_AUDIO_SECONDS).record(
                        out.queued_bytes() as f64 / f64::from(ontime_rtp::SAMPLE_RATE_HZ),
                    );
                }
                AgentAction::EndOfUtterance => {
                    out.queue.push_back(Queued::EndOfUtterance);
                    out.feed();
                }
                AgentAction::Mark(name) => {
                    let id = out.next_mark;
                    out.next_mark += 1;
                    out.mark_names.push((id, name));
                    out.queue.push_back(Queued::Mark(id));
                    out.feed();
                }
                AgentAction::Clear => out.clear(),
                AgentAction::Hangup => {
                    let _ = ctx.sip.send(SipCommand::Hangup(call));
                    break wait_for_end(&mut control, EndCause::GatewayBye).await;
                }
                AgentAction::HangupWithReason(reason) => {
                    let _ = ctx.sip.send(SipCommand::HangupWithReason(call, reason));
                    break wait_for_end(&mut control, EndCause::GatewayBye).await;
                }
            },
            c = control.recv() => match c {
                Some(CallControl::Established) => {}
                Some(CallControl::Media(n)) => {
                    let codec_changed = n.payload_type != negotiated.payload_type;
                    negotiated = n;
                    inbound.update(n);
                    out.law = law_of(n.payload_type);
                    let send = n.remote_rtp.filter(|_| may_send(n.local_direction));
                    if send.is_none() || codec_changed {
                        // Hold (we must not send, RFC 3264 §8.4) or a new codec: dropping the
                        // producer removes the stream at the next tick.
                        out.queue.clear();
                        out.producer = None;
                        rtcp_session.set_outgoing(None);
                    }
                    if let Some(remote) = send {
                        match out.producer.as_ref() {
                            Some(p) => {
                                let _ = ctx.sender.set_remote(p.id(), remote);
                            }
                            None => {
                                // Resume or codec change: a new stream (new SSRC, RFC 3550 §8).
                                if let Some((p, o)) = start_stream(&ctx.sender, &rtp, remote, n.payload_type) {
                                    out.producer = Some(p);
                                    rtcp_session.set_outgoing(Some(o));
                                }
                            }
                        }
                    }
                    info!(direction = ?n.local_direction, remote = ?n.remote_rtp, "media updated");
                }
                Some(CallControl::Dtmf(d)) => {
                    counter!(m::DTMF_DIGITS_TOTAL).increment(1);
                    dtmf.push(d);
                    agent.on_event(AgentEvent::Dtmf(d));
                }
                Some(CallControl::Ended(cause)) => break cause,
                Some(CallControl::Hangup(cause)) => {
                    let _ = ctx.sip.send(SipCommand::Hangup(call));
                    break wait_for_end(&mut control, cause).await;
                }
                None => break EndCause::SignallingFailure,
            },
        }
    };

    agent.on_event(AgentEvent::Ended);
    let stream_stats = out.producer.as_ref().map(|p| p.stats());
    drop(out); // removes the stream at the next tick
    drop(inference); // unregisters from the pool
    let jitter = inbound.counters();
    let cdr = CallDetailRecord {
        call_id: info.call_id.clone(),
        from: info.from.clone(),
        to: info.to.clone(),
        start_unix_ms,
        answer_unix_ms,
        end_unix_ms: unix_ms_now(),
        cause,
        packets_in: jitter.received,
        packets_out: stream_stats.map_or(0, |s| s.packets_sent),
        late_ticks: stream_stats.map_or(0, |s| s.late_ticks),
        underruns: stream_stats.map_or(0, |s| s.underruns),
        discards: jitter.discarded,
        lost: jitter.lost,
        turns,
        barge_ins,
        dtmf,
    };
    cdr.log();
    counter!(m::CALLS_TOTAL, "result" => cause.result_label()).increment(1);
    if let Some(r) = recording.take() {
        if let Err(e) = r.finish() {
            warn!(error = %e, "recording could not be finalised");
        }
    }
    finish_port(&ctx, port);
}

fn rtcp_address(rtp: Option<SocketAddr>) -> Option<SocketAddr> {
    rtp.map(|a| SocketAddr::new(a.ip(), a.port().wrapping_add(1)))
}

fn finish_port(ctx: &CallContext, port: u16) {
    if let Ok(mut p) = ctx.shared.ports.lock() {
        p.release(port);
    }
    ctx.shared.active_calls.fetch_sub(1, Ordering::Relaxed);
}

/// After we sent BYE, wait (bounded) for the dialog to end so the CDR has the final word.
async fn wait_for_end(
    control: &mut mpsc::UnboundedReceiver<CallControl>,
    cause: EndCause,
) -> EndCause {
    let deadline = tokio::time::sleep(Duration::from_secs(40));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            c = control.recv() => match c {
                Some(CallControl::Ended(_)) | None => return cause,
                _ => {}
            },
            _ = &mut deadline => return cause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn outbound(max_buffered_bytes: usize) -> Outbound {
        Outbound {
            producer: None,
            queue: VecDeque::new(),
            law: Law::Ulaw,
            mark_names: Vec::new(),
            next_mark: 1,
            max_buffered_bytes,
        }
    }

    proptest! {
        /// `max_buffered_seconds`: after every chunk the queue holds at most the limit, the
        /// bytes dropped plus the bytes kept are the bytes pushed, the oldest go first, and
        /// marks keep their order.
        #[test]
        fn overflow_drops_the_oldest_and_accounts_for_every_byte(
            max in 1usize..20_000,
            chunks in proptest::collection::vec((1usize..8_000, any::<bool>()), 1..40),
        ) {
            let mut out = outbound(max);
            let mut pushed = 0usize;
            let mut dropped = 0usize;
            let mut next = 0u8;
            for (len, mark) in chunks {
                // Each chunk's bytes count up so the survivors show which were dropped.
                let bytes: Vec<u8> = (0..len).map(|_| { next = next.wrapping_add(1); next }).collect();
                out.queue.push_back(Queued::Audio(bytes, 0));
                pushed += len;
                dropped += out.drop_oldest_beyond_max();
                if mark {
                    out.queue.push_back(Queued::Mark(out.next_mark));
                    out.next_mark += 1;
                }
                prop_assert!(out.queued_bytes() <= max);
                prop_assert_eq!(out.queued_bytes() + dropped, pushed);
            }
            // What is left is the newest audio, in order.
            let kept: Vec<u8> = out.queue.iter().flat_map(|q| match q {
                Queued::Audio(b, o) => b[*o..].to_vec(),
                _ => Vec::new(),
            }).collect();
            let expected: Vec<u8> = (0..pushed)
                .map(|i| (i + 1) as u8)
                .skip(dropped)
                .collect();
            prop_assert_eq!(kept, expected);
            let marks: Vec<u64> = out.queue.iter().filter_map(|q| match q {
                Queued::Mark(id) => Some(*id),
                _ => None,
            }).collect();
            prop_assert!(marks.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
