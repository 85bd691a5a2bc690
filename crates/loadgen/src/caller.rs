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

use ontime_rtp::{Packetizer, PT_PCMU};
use ontime_sender::{Controller, PacketInfo, PacketSink, StreamConfig, StreamEvent, StreamOutput};
use ontime_sip::sdp::{self, Codec, LocalMedia};
use ontime_sip::{CallParams, EndReason, Transport};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch};

use crate::audio::{is_silent_payload, Utterance};
use crate::listen::{AgentListener, AgentUtterance, Heard};
use crate::os;
use crate::sip::{CallEvent, SipClient};

/// Shortest pause between the agent's answer and the caller's next utterance.
pub const PAUSE_MIN: Duration = Duration::from_millis(500);
/// Longest such pause.
pub const PAUSE_MAX: Duration = Duration::from_millis(1500);
/// How long a call may take to be answered before it counts as failed.
pub const ANSWER_LIMIT: Duration = Duration::from_secs(10);
/// How often a caller looks at its clock-driven state (sender events, hangover, deadlines).
const POLL: Duration = Duration::from_millis(5);

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
}

/// Sends the caller's packets and notes when the last packet carrying speech (a non-silent
/// payload) left: the turn's start. Runs on the sender's tick, so only a non-blocking `sendto` and an atomic store.
struct SpeechSink {
    socket: Arc<std::net::UdpSocket>,
    remote: SocketAddr,
    origin: Instant,
    last_speech_ns: Arc<AtomicU64>,
}

impl PacketSink for SpeechSink {
    fn send_packet(&mut self, packet: &[u8], info: PacketInfo) -> io::Result<()> {
        let sent = self.socket.send_to(packet, self.remote).map(|_| ());
        // Speech, not just an utterance's frame: a file's leading and trailing quiet frames do
        // not end the caller's speech (a 160-byte table decode, no allocation).
        let voiced = !info.silence
            && ontime_rtp::parse_rtp(packet)
                .is_ok_and(|p| !is_silent_payload(p.payload, p.payload_type));
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

enum Phase {
    Pausing {
        until: Instant,
    },
    Speaking {
        turn: u64,
        utterance: usize,
    },
    Awaiting {
        since: Duration,
        deadline: Instant,
        utterance: usize,
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
    let (local_rtp, socket) = match std_socket
        .local_addr()
        .and_then(|a| Ok((a, tokio::net::UdpSocket::from_std(std_socket.try_clone()?)?)))
    {
        Ok(v) => v,
        Err(e) => return fail(format!("RTP socket: {e}")),
    };
    if let Err(e) = os::enable_receive_timestamps(socket.as_raw_fd()) {
        tracing::warn!(error = %e, "no kernel receive timestamps: arrival times carry the harness's lag");
    }
    let mut local = LocalMedia::new(local_rtp, id as u64 + 1);
    local.codecs = vec![Codec::Pcmu];
    local.telephone_event = false;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let invited = Instant::now();
    let params = CallParams {
        target: setup.target_uri.clone(),
        from: None,
        destination: setup.destination,
        transport: Transport::Udp,
        offer: sdp::build_offer(&local),
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
    let Some(remote) = media.remote_rtp.filter(|_| media.payload_type == PT_PCMU) else {
        setup.sip.hangup(call);
        return fail(format!("answer has no PCMU RTP address: {media:?}"));
    };
    record(RecordKind::Answered {
        setup: invited.elapsed(),
    });

    let last_speech_ns = Arc::new(AtomicU64::new(0));
    let sink = SpeechSink {
        socket: Arc::clone(&std_socket),
        remote,
        origin: setup.origin,
        last_speech_ns: Arc::clone(&last_speech_ns),
    };
    let mut producer = match setup.sender.add_stream(StreamConfig::new(
        Packetizer::new(PT_PCMU),
        StreamOutput::Sink(Box::new(sink)),
    )) {
        Ok(p) => p,
        Err(e) => {
            setup.sip.hangup(call);
            return fail(format!("harness sender: {e}"));
        }
    };

    let mut rng = StdRng::seed_from_u64(seed);
    let mut listener = AgentListener::new();
    let mut phase = Phase::Pausing {
        until: Instant::now() + random_pause(&mut rng),
    };
    let mut turn = 0u64;
    let mut buf = [0u8; 2048];
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let since_origin = |at: Instant| at.saturating_duration_since(setup.origin);
    let dropped = loop {
        let mut heard = None;
        tokio::select! {
            ready = socket.readable() => {
                let received = ready.and_then(|()| {
                    socket.try_io(tokio::io::Interest::READABLE, || {
                        os::recv_with_timestamp(socket.as_raw_fd(), &mut buf)
                    })
                });
                if let Ok((n, Some(from), stamp)) = received {
                    let arrival = since_origin(kernel_arrival(stamp));
                    if from == remote {
                        if let Ok(p) = ontime_rtp::parse_rtp(&buf[..n]) {
                            let silent = is_silent_payload(p.payload, p.payload_type);
                            heard = listener.on_packet(p.sequence_number, silent, arrival);
                        }
                    }
                }
            }
            _ = poll.tick() => {
                heard = listener.on_time(since_origin(Instant::now()));
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
            if let Phase::Speaking { turn: t, utterance } = phase {
                if mark == t {
                    let since = Duration::from_nanos(last_speech_ns.load(Relaxed));
                    phase = if listener.agent_speaking() {
                        Phase::Listening
                    } else {
                        Phase::Awaiting {
                            since,
                            deadline: now + setup.answer_timeout,
                            utterance,
                        }
                    };
                }
            }
        }
        match heard {
            Some(Heard::AgentStarted { arrival }) => match phase {
                Phase::Awaiting { since, .. } => {
                    record(RecordKind::Turn {
                        latency: arrival.saturating_sub(since),
                    });
                    phase = Phase::Listening;
                }
                Phase::Pausing { .. } => {
                    record(RecordKind::EarlyAgentAudio);
                    phase = Phase::Listening;
                }
                Phase::Speaking { .. } => record(RecordKind::EarlyAgentAudio),
                Phase::Listening => {}
            },
            Some(Heard::AgentEnded(u)) => {
                record(RecordKind::Agent(u));
                if matches!(phase, Phase::Listening) {
                    phase = Phase::Pausing {
                        until: now + random_pause(&mut rng),
                    };
                }
            }
            None => {}
        }
        match phase {
            Phase::Pausing { until } if now >= until => {
                turn += 1;
                let index = rng.random_range(0..setup.utterances.len());
                let utterance = &setup.utterances[index];
                // The mark sits at the end of the speech, before the file's trailing quiet: the
                // gateway may answer while that quiet is still playing.
                let voiced_end = utterance.voiced_end();
                producer.push(&utterance.ulaw[..voiced_end]);
                if producer.mark(turn).is_err() {
                    break Some("harness mark queue full".into());
                }
                producer.push(&utterance.ulaw[voiced_end..]);
                producer.end_utterance();
                phase = Phase::Speaking {
                    turn,
                    utterance: index,
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
