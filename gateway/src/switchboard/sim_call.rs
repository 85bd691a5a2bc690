//! One answered call on the harness's simulated clock, as its tokio task would run it: the real
//! [`CallCore`] with the built-in stub agent, its stream on the sender's real `TickEngine` (the
//! harness's, shared by every call, sending into a capturing sink instead of a socket), a
//! scripted caller sending RTP from the address of its SDP, and scripted inference events (the
//! models are an edge like the sockets; their verdicts are what the test says).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use ontime_rtp::{Packetizer, FRAME, FRAME_BYTES};
use ontime_sender::{Controller, PacketInfo, PacketSink, StreamConfig, StreamOutput};
use ontime_sip::{CallHandle, NegotiatedMedia};
use tokio::sync::mpsc;

use super::CallStart;
use crate::admission::AdmittedCall;
use crate::agent::{Agent, AgentAction, AgentCall, AgentOutput, CallInfo, StubAgent};
use crate::call::{AgentNotice, CallCommand, CallCore, CallOutput, SipRequest};
use crate::records::cdr::CallDetailRecord;

/// Packets the sender sent to the caller: the slot time of each and its bytes.
pub(super) type Sent = Arc<Mutex<Vec<(Duration, Vec<u8>)>>>;

struct CapturingSink(Sent);

impl PacketSink for CapturingSink {
    fn send_packet(&mut self, packet: &[u8], info: PacketInfo) -> std::io::Result<()> {
        self.0
            .lock()
            .expect("the test thread only")
            .push((info.scheduled, packet.to_vec()));
        Ok(())
    }
}

/// A call task on simulated time.
pub(super) struct SimCall {
    pub call: CallHandle,
    pub info: CallInfo,
    pub negotiated: NegotiatedMedia,
    /// The slot: given back when the call ends, as when a task ends.
    admitted: Option<AdmittedCall>,
    pub core: CallCore,
    agent: Box<dyn AgentCall>,
    agent_rx: mpsc::UnboundedReceiver<AgentAction>,
    /// What the sender sent to the caller.
    pub sent: Sent,
    /// What the core told the agent, but caller audio.
    pub notices: Vec<AgentNotice>,
    /// Caller frames handed to the inference thread.
    pub inference_frames: usize,
    /// The end record, once the call ended.
    pub ended: Option<CallDetailRecord>,
    caller: Packetizer,
    /// When the caller's next packet is due, and how many are left.
    caller_next: Option<(Instant, usize)>,
}

impl SimCall {
    /// The task of a call the switchboard started at `now` (`epoch`: the wall clock).
    pub(super) fn start(start: CallStart, now: Instant, wall: SystemTime) -> SimCall {
        let (tx, agent_rx) = mpsc::unbounded_channel();
        let stub = StubAgent::built_in().expect("the built-in reply decodes");
        let agent = stub.start_call(&start.info, AgentOutput::new(tx));
        let mut core = CallCore::new(
            start.settings,
            start.info.clone(),
            start.negotiated,
            start.start_unix_ms,
            now,
            wall,
        );
        if let Some(keys) = start.srtp {
            core.use_srtp(keys);
        }
        if !start.program.is_empty() {
            core.handle_command(CallCommand::Run(start.program), now);
        }
        SimCall {
            call: start.call,
            info: start.info,
            negotiated: start.negotiated,
            admitted: Some(start.admitted),
            core,
            agent,
            agent_rx,
            sent: Arc::new(Mutex::new(Vec::new())),
            notices: Vec::new(),
            inference_frames: 0,
            ended: None,
            caller: Packetizer::with_initial(0, 0xCA11E5, 100, 0),
            caller_next: None,
        }
    }

    /// The caller speaks (a loud steady payload) for `packets` packets from `now`.
    pub(super) fn caller_talks(&mut self, packets: usize, now: Instant) {
        self.caller_next = Some((now, packets));
    }

    /// When the caller's next packet is due.
    pub(super) fn caller_due(&self) -> Option<Instant> {
        self.caller_next.map(|(at, _)| at)
    }

    /// Send the caller's packet if due.
    pub(super) fn caller_sends(&mut self, now: Instant) {
        let Some((at, left)) = self.caller_next else {
            return;
        };
        if at > now {
            return;
        }
        let mut buf = [0u8; 200];
        let n = self
            .caller
            .write_frame(&[0x10; FRAME_BYTES], &mut buf)
            .expect("a frame fits");
        let from = self.negotiated_caller();
        self.core.handle_rtp(&mut buf[..n], from, now);
        self.caller_next = (left > 1).then_some((at + FRAME, left - 1));
    }

    /// Where the caller's RTP comes from: the address its SDP gave.
    fn negotiated_caller(&self) -> std::net::SocketAddr {
        self.negotiated
            .remote_rtp
            .expect("the harness's calls have remote media")
    }

    /// Carry out what the core and the agent produced; SIP requests go to `sip`.
    pub(super) fn drain(
        &mut self,
        now: Instant,
        controller: &mut Controller,
        sip: &mut Vec<(CallHandle, SipRequest)>,
    ) {
        loop {
            let mut any = false;
            while let Ok(action) = self.agent_rx.try_recv() {
                any = true;
                self.core.handle_agent(action, now);
            }
            while let Some(out) = self.core.poll_output() {
                any = true;
                match out {
                    CallOutput::StartStream {
                        packetizer,
                        srtp,
                        silence_frame,
                        ..
                    } => {
                        let mut config = StreamConfig::new(
                            packetizer.clone(),
                            StreamOutput::Sink(Box::new(CapturingSink(self.sent.clone()))),
                        );
                        config.srtp = srtp.map(|c| *c);
                        config.silence_frame = silence_frame;
                        let p = controller
                            .add_stream(config)
                            .expect("the engine takes the stream");
                        self.core.attach_stream(p, &packetizer, now);
                    }
                    CallOutput::Inference(_) => self.inference_frames += 1,
                    CallOutput::Agent(notice) => {
                        self.agent.on_event(notice.as_event());
                        if !matches!(notice, AgentNotice::CallerAudio(_)) {
                            self.notices.push(notice);
                        }
                    }
                    CallOutput::Sip(request) => sip.push((self.call, request)),
                    CallOutput::Ended { cdr, .. } => self.ended = Some(*cdr),
                    _ => {}
                }
            }
            if !any {
                return;
            }
        }
    }

    /// The task is over: its slot goes back.
    pub(super) fn finish(&mut self) {
        self.admitted = None;
    }

    /// Packets sent to the caller so far.
    pub(super) fn packets_sent(&self) -> usize {
        self.sent.lock().expect("the test thread only").len()
    }

    /// Payloads sent to the caller that are not µ-law silence, in order.
    pub(super) fn voiced_payloads_sent(&self) -> Vec<Vec<u8>> {
        self.sent
            .lock()
            .expect("the test thread only")
            .iter()
            .filter_map(|(_, p)| p.get(12..))
            .filter(|p| is_voiced(p))
            .map(<[u8]>::to_vec)
            .collect()
    }

    /// How many of them.
    pub(super) fn voiced_packets_sent(&self) -> usize {
        self.voiced_payloads_sent().len()
    }
}

/// A µ-law payload with a sample that is not zero (0xFF, or its negative twin 0x7F).
pub(super) fn is_voiced(payload: &[u8]) -> bool {
    payload.iter().any(|b| *b != 0xFF && *b != 0x7F)
}

impl SimCall {}
