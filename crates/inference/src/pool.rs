//! The inference pool: one OS thread owning both sessions, serving every call.
//!
//! Callers push decoded 8 kHz PCM (any length) through their [`CallInference`]; the thread cuts it
//! into 256-sample chunks, runs every call's ready chunk in **one** batched Silero VAD run, drives
//! each call's speech state machine, buffers each call's turn audio, and on speech stop runs Smart
//! Turn on it. Events go back per call through the sink given at registration.
//!
//! Order of work in the thread: control messages (register/unregister), then all queued audio,
//! then one job — a Smart Turn job if any is waiting (a turn verdict is on the reply's critical
//! path; earliest deadline first), else a VAD batch — each only if the CPU budget allows it in the
//! current window.
//!
//! Speculative end of turn (`TurnParams::speculate_after`, [`crate::speculative`]): when a call
//! goes quiet, Smart Turn runs on its turn audio so far; at the confirmed stop that verdict is
//! used if it covers the confirmed turn's audio, else Smart Turn runs as before. A speculative
//! run that does not fit the CPU budget is skipped, never deferred: the fallback is today's rule.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender, TrySendError};
use metrics::{counter, histogram};

use crate::budget::{BudgetDecision, CpuBudget};
use crate::config::{PoolConfig, TurnParams};
use crate::handoff::{Handoff, HeldAudio, Progress};
use crate::metrics::{
    describe_metrics, BUDGET_DEFERRALS_TOTAL, JOBS_TOTAL, MODEL_TURN, MODEL_VAD, QUEUE_FULL_TOTAL,
    QUEUE_WAIT_SECONDS, RUN_SECONDS, TURN_EARLY_END_TOTAL, TURN_SPECULATIVE_TOTAL,
    TURN_WIDEBAND_TOTAL,
};
use crate::speculative::{AudioSpan, DeadlineQueue, OnStop, OnVerdict, Outcome, Speculation};
use crate::speech::{
    chunk_time, chunks_for, SpeechDetector, SpeechState, SpeechTransition, VadParams, VAD_CHUNK,
    VAD_CHUNK_SAMPLES,
};
use crate::thread_cpu::thread_cpu_time;
use crate::turn::{SmartTurn, TurnAudioBuffer};
use crate::vad::{is_quiet_chunk, SileroVad, VadStream};
use crate::{Error, Result};

/// A call's identity inside the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(pub u64);

/// What the pool reports for a call. Times are *stream time*: the duration of the call's audio
/// pushed before that point (sample count / 8 kHz), not wall time.
#[derive(Debug, Clone, PartialEq)]
pub enum InferenceEvent {
    /// Speech started (pipecat's Starting → Speaking).
    SpeechStarted {
        /// Start of the first speaking chunk of the run that confirmed it.
        onset: Duration,
        /// End of the chunk that confirmed it (onset + the start duration).
        detected: Duration,
    },
    /// Speech stopped (Stopping → Quiet).
    SpeechStopped {
        /// Start of the first quiet chunk of the run that confirmed it.
        end: Duration,
        /// End of the chunk that confirmed it (end + the stop duration).
        detected: Duration,
    },
    /// Smart Turn's verdict on the turn's audio, after a speech stop (or with it, for an early
    /// end: `TurnParams::early_end`).
    TurnEnded {
        /// Probability that the turn is complete.
        probability: f32,
        /// `probability > complete_threshold`, or the incomplete timeout elapsed.
        complete: bool,
        /// True when `complete` comes from silence lasting `incomplete_timeout` after an
        /// incomplete verdict (then `probability` is that verdict's).
        timed_out: bool,
        /// Stream time of the speech stop detection that triggered the analysis.
        at: Duration,
        /// Audio analysed (at most 8 s).
        audio: Duration,
        /// Wall time from the stop detection to the verdict (queue wait + run); zero when a
        /// speculative verdict was ready at the detection.
        latency: Duration,
        /// For a complete verdict from the model: the pitch of the turn's last 100 ms of voice
        /// against the voice before it, in semitones (negative: it fell, as at a statement's
        /// end; [`crate::prosody`]). `None` for incomplete and timed-out verdicts, or when
        /// there was too little voice to tell.
        final_pitch: Option<f32>,
    },
}

type Sink = Box<dyn FnMut(InferenceEvent) + Send>;

enum Control {
    Register {
        id: u64,
        sink: Sink,
        progress: Arc<Progress>,
    },
    Unregister {
        id: u64,
    },
    Shutdown,
}

struct AudioJob {
    id: u64,
    samples: Vec<i16>,
    /// The same audio at 16 kHz from a wideband call (twice as many samples), else empty.
    wide: Vec<i16>,
    pushed_at: Instant,
}

/// Smart Turn is a 16 kHz model: a wideband call's turn goes to it as the call carried it.
const WIDE_RATE_HZ: u32 = crate::features::TURN_SAMPLE_RATE_HZ;
/// 16 kHz samples per 8 kHz stream sample.
const WIDE_FACTOR: usize = (WIDE_RATE_HZ / ontime_rtp::SAMPLE_RATE_HZ) as usize;

/// Counters shared between the pool thread and handles.
#[derive(Debug, Default)]
struct Shared {
    queue_full: AtomicU64,
    deferrals: AtomicU64,
    vad_batches: AtomicU64,
    vad_chunks: AtomicU64,
    vad_guarded: AtomicU64,
    vad_replayed: AtomicU64,
    vad_paired: AtomicU64,
    audio_jobs: AtomicU64,
    turn_runs: AtomicU64,
    turn_runs_wideband: AtomicU64,
    dropped_samples: AtomicU64,
    errors: AtomicU64,
    calls: AtomicU64,
    speculative_used: AtomicU64,
    speculative_discarded: AtomicU64,
    speculative_skipped: AtomicU64,
    early_ends: AtomicU64,
    /// CPU time of model runs, ns (the admission estimate reads its rate).
    model_cpu_ns: AtomicU64,
    /// CPU time of Smart Turn runs alone, ns (the admission estimate's service time).
    turn_cpu_ns: AtomicU64,
    /// Queue waits of the jobs run, summed (ns) and counted.
    queue_wait_ns: AtomicU64,
    queue_waits: AtomicU64,
}

/// A snapshot of the pool's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Audio pushes rejected because the queue was full.
    pub queue_full: u64,
    /// Jobs deferred by the CPU budget.
    pub budget_deferrals: u64,
    /// Batched VAD runs.
    pub vad_batches: u64,
    /// VAD chunks decided: the rows of every batch plus the chunks the quiet guard decided.
    pub vad_chunks: u64,
    /// Of them, chunks the quiet guard called non-speech without a model run
    /// (`PoolConfig::vad_quiet_peak`).
    pub vad_guarded: u64,
    /// Of the guarded chunks, those later run through Silero after all, back to back just
    /// before the call's next chunk the model judges, to give it the quiet's history.
    pub vad_replayed: u64,
    /// Chunks of a speaking call run as the second of a pair, right after the first
    /// (`PoolConfig::vad_pair_after`).
    pub vad_paired: u64,
    /// Sends of audio from the calls' handles to the thread: each one wakes it if it was idle.
    /// A handle sends what completes a chunk, and holds quiet chunks back while its call is
    /// quiet between turns (the quiet guard's chunks, which decide nothing there).
    pub audio_jobs: u64,
    /// Smart Turn inferences.
    pub turn_runs: u64,
    /// Of them, on a wideband call's own 16 kHz audio (the others on 8 kHz audio upsampled).
    pub turn_runs_wideband: u64,
    /// Samples dropped because a call's backlog exceeded 8 s (the thread could not keep up).
    pub dropped_samples: u64,
    /// Model runs that failed (logged).
    pub errors: u64,
    /// Calls registered now.
    pub calls: u64,
    /// Speculative verdicts that became the turn's verdict.
    pub speculative_used: u64,
    /// Speculative verdicts thrown away (speech resumed, or not covering the confirmed turn).
    pub speculative_discarded: u64,
    /// Speculative runs not made for lack of CPU budget.
    pub speculative_skipped: u64,
    /// Turns ended early by a confident speculative verdict (also counted as used).
    pub early_ends: u64,
    /// CPU time the models have used on the inference thread so far, in ns.
    pub model_cpu_ns: u64,
    /// Of it, Smart Turn's (its runs are the long jobs a turn's verdict waits behind).
    pub turn_cpu_ns: u64,
    /// Time jobs waited in the queue before their run, summed, in ns.
    pub queue_wait_ns: u64,
    /// Jobs whose wait is in `queue_wait_ns`.
    pub queue_waits: u64,
}

impl Shared {
    /// A model run: its CPU time and how long its job (the oldest of a batch) waited.
    fn count_run(&self, cpu: Duration, waited: Duration) {
        self.model_cpu_ns
            .fetch_add(cpu.as_nanos() as u64, Ordering::Relaxed);
        self.queue_wait_ns
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        self.queue_waits.fetch_add(1, Ordering::Relaxed);
    }
}

impl Shared {
    fn speculative(&self, outcome: Outcome) {
        let c = match outcome {
            Outcome::Used => &self.speculative_used,
            Outcome::Discarded => &self.speculative_discarded,
            Outcome::Skipped => &self.speculative_skipped,
        };
        c.fetch_add(1, Ordering::Relaxed);
        counter!(TURN_SPECULATIVE_TOTAL, "outcome" => outcome.label()).increment(1);
    }

    fn snapshot(&self) -> PoolStats {
        PoolStats {
            queue_full: self.queue_full.load(Ordering::Relaxed),
            budget_deferrals: self.deferrals.load(Ordering::Relaxed),
            vad_batches: self.vad_batches.load(Ordering::Relaxed),
            vad_chunks: self.vad_chunks.load(Ordering::Relaxed),
            vad_guarded: self.vad_guarded.load(Ordering::Relaxed),
            vad_replayed: self.vad_replayed.load(Ordering::Relaxed),
            vad_paired: self.vad_paired.load(Ordering::Relaxed),
            audio_jobs: self.audio_jobs.load(Ordering::Relaxed),
            turn_runs: self.turn_runs.load(Ordering::Relaxed),
            turn_runs_wideband: self.turn_runs_wideband.load(Ordering::Relaxed),
            dropped_samples: self.dropped_samples.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            speculative_used: self.speculative_used.load(Ordering::Relaxed),
            speculative_discarded: self.speculative_discarded.load(Ordering::Relaxed),
            speculative_skipped: self.speculative_skipped.load(Ordering::Relaxed),
            early_ends: self.early_ends.load(Ordering::Relaxed),
            model_cpu_ns: self.model_cpu_ns.load(Ordering::Relaxed),
            turn_cpu_ns: self.turn_cpu_ns.load(Ordering::Relaxed),
            queue_wait_ns: self.queue_wait_ns.load(Ordering::Relaxed),
            queue_waits: self.queue_waits.load(Ordering::Relaxed),
        }
    }
}

/// The running pool. Dropping it stops the thread (after its current job).
pub struct InferencePool {
    control: Sender<Control>,
    audio: Sender<AudioJob>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    capacity: usize,
    /// `PoolConfig::vad_quiet_peak`, for the handles ([`crate::handoff`]).
    quiet_peak: Option<i16>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for InferencePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InferencePool")
            .field("capacity", &self.capacity)
            .field("stats", &self.shared.snapshot())
            .finish()
    }
}

impl InferencePool {
    /// Checks the files, starts the inference thread and loads ONNX Runtime and both models on
    /// it; returns once they are loaded (or with the loading error). Registers the metrics.
    pub fn start(config: PoolConfig) -> Result<Self> {
        config.validate()?;
        config.paths.check()?;
        describe_metrics();
        let (control_tx, control_rx) = unbounded();
        let (audio_tx, audio_rx) = bounded(config.queue_capacity);
        let (ready_tx, ready_rx) = bounded::<Result<()>>(1);
        let shared = Arc::new(Shared::default());
        let thread_shared = shared.clone();
        let capacity = config.queue_capacity;
        let quiet_peak = config.vad_quiet_peak;
        let thread = std::thread::Builder::new()
            .name("ontime-inference".into())
            .spawn(move || {
                let worker = match Worker::load(config, control_rx, audio_rx, thread_shared) {
                    Ok(w) => {
                        let _ = ready_tx.send(Ok(()));
                        w
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                worker.run();
            })
            .map_err(Error::Spawn)?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                control: control_tx,
                audio: audio_tx,
                shared,
                next_id: AtomicU64::new(1),
                capacity,
                quiet_peak,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(Error::PoolStopped)
            }
        }
    }

    /// Registers a call whose events go to `sink`, called on the inference thread: it must not
    /// block (send on an unbounded or `try_send` on a bounded channel, e.g. tokio's mpsc).
    pub fn register_call_with_sink<F>(&self, sink: F) -> Result<CallInference>
    where
        F: FnMut(InferenceEvent) + Send + 'static,
    {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let progress = Arc::new(Progress::default());
        self.control
            .send(Control::Register {
                id,
                sink: Box::new(sink),
                progress: progress.clone(),
            })
            .map_err(|_| Error::PoolStopped)?;
        Ok(CallInference {
            progress,
            quiet_peak: self.quiet_peak,
            id: CallId(id),
            control: self.control.clone(),
            audio: self.audio.clone(),
            shared: self.shared.clone(),
            capacity: self.capacity,
            held: HeldAudio::default(),
        })
    }

    /// Registers a call; its events arrive on the returned (unbounded) channel.
    pub fn register_call(&self) -> Result<(CallInference, Receiver<InferenceEvent>)> {
        let (tx, rx) = unbounded();
        let call = self.register_call_with_sink(move |e| {
            let _ = tx.send(e);
        })?;
        Ok((call, rx))
    }

    /// The pool's counters now.
    pub fn stats(&self) -> PoolStats {
        self.shared.snapshot()
    }

    /// Stops the thread and waits for it.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.control.send(Control::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for InferencePool {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One call's handle: push its audio; dropping it unregisters the call.
pub struct CallInference {
    /// Chunks the thread has judged (stored after their events were sent) and what it allows
    /// for the next ones.
    progress: Arc<Progress>,
    /// The quiet guard's peak (`PoolConfig::vad_quiet_peak`): quiet chunks may wait here.
    quiet_peak: Option<i16>,
    id: CallId,
    control: Sender<Control>,
    audio: Sender<AudioJob>,
    shared: Arc<Shared>,
    capacity: usize,
    held: HeldAudio,
}

impl std::fmt::Debug for CallInference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallInference")
            .field("id", &self.id)
            .finish()
    }
}

impl CallInference {
    /// The call's id in the pool.
    pub fn id(&self) -> CallId {
        self.id
    }

    /// How far, in the call's stream time, the inference thread has judged its audio with the
    /// VAD. Every event of the audio up to there has been sent to the call's sink before this
    /// reads it; a caller deciding on "no speech stop came" checks it first, because the thread
    /// may be busy with a Smart Turn run while the audio that holds the stop waits.
    ///
    /// Quiet chunks this handle holds back under the quiet guard count as judged: the thread
    /// has said they are non-speech and decide nothing (`handoff.rs`).
    pub fn judged(&self) -> Duration {
        let (chunks, _) = self.progress.load();
        chunk_time(self.held.judged_chunks(chunks))
    }

    /// Queues decoded 8 kHz 16-bit PCM (any length; the pool chunks it). Audio that completes
    /// no VAD chunk is held here until a later push does (the thread could not judge it yet).
    /// Never blocks: a full queue drops what was to be sent, returns [`Error::QueueFull`] and
    /// counts it (`ontime_inference_queue_full_total`).
    pub fn push_pcm(&mut self, pcm: &[i16]) -> Result<()> {
        self.push(pcm, &[])
    }

    /// Queues a wideband call's audio: the 8 kHz PCM the VAD hears and the same audio at
    /// 16 kHz (`wide`, twice as many samples), which Smart Turn then judges instead of the
    /// 8 kHz upsampled. A call is wideband when its first push is; a later push without 16 kHz
    /// audio (a codec change to G.711) makes it narrowband for good. Errors as
    /// [`CallInference::push_pcm`], and [`Error::UnsupportedAudio`] when the lengths disagree.
    pub fn push_pcm_wide(&mut self, pcm: &[i16], wide: &[i16]) -> Result<()> {
        if wide.len() != WIDE_FACTOR * pcm.len() {
            return Err(Error::UnsupportedAudio(format!(
                "{} samples at 16 kHz for {} at 8 kHz",
                wide.len(),
                pcm.len()
            )));
        }
        self.push(pcm, wide)
    }

    fn push(&mut self, pcm: &[i16], wide: &[i16]) -> Result<()> {
        if pcm.is_empty() {
            return Ok(());
        }
        if !self.held.narrow.is_empty() && self.held.wide.is_empty() != wide.is_empty() {
            // The call changed between narrow- and wideband: what is held goes as it was
            // pushed (the thread takes a push without 16 kHz audio as the switch).
            self.send_held(self.held.narrow.len())?;
        }
        self.held.narrow.extend_from_slice(pcm);
        self.held.wide.extend_from_slice(wide);
        match self.held.decide_send(self.progress.load(), self.quiet_peak) {
            Some(n) => self.send_held(n),
            None => Ok(()),
        }
    }

    /// Sends the first `narrow` held samples (and their 16 kHz twins).
    fn send_held(&mut self, narrow: usize) -> Result<()> {
        let (samples, wide) = self.held.split_to_send(narrow, WIDE_FACTOR);
        let sent = samples.len() as u64;
        let job = AudioJob {
            id: self.id.0,
            samples,
            wide,
            pushed_at: Instant::now(),
        };
        match self.audio.try_send(job) {
            Ok(()) => {
                // Only what the thread got moves its chunk boundaries: after a dropped send
                // the next ones still complete a chunk each.
                self.held.sent += sent;
                Ok(())
            }
            Err(TrySendError::Full(_)) => {
                self.shared.queue_full.fetch_add(1, Ordering::Relaxed);
                counter!(QUEUE_FULL_TOTAL).increment(1);
                Err(Error::QueueFull {
                    capacity: self.capacity,
                })
            }
            Err(TrySendError::Disconnected(_)) => Err(Error::PoolStopped),
        }
    }
}

impl Drop for CallInference {
    fn drop(&mut self) {
        let _ = self.control.send(Control::Unregister { id: self.id.0 });
    }
}

/// The most unprocessed audio a call may hold before its oldest is dropped (8 s).
const MAX_BACKLOG_SAMPLES: usize = 8 * ontime_rtp::SAMPLE_RATE_HZ as usize;

/// Stream time after which a quiet call's Silero state is reset (pipecat resets every 5 s).
/// Not only a memory matter: at 8 kHz the carried state goes deaf after long silence — a 0.7 s
/// "Yes." after 6–20 s of silence was missed 6 times in 8 without resets (found by `ontime-load`,
/// pinned by `tests/vad_reset.rs`).
pub const VAD_STATE_RESET_CHUNKS: u64 =
    5 * ontime_rtp::SAMPLE_RATE_HZ as u64 / crate::speech::VAD_CHUNK_SAMPLES as u64;

/// A call's quiet backlog is at most what the state reset lets build up (5 s), and a chunk.
const MAX_QUIET_BACKLOG_SAMPLES: usize =
    (VAD_STATE_RESET_CHUNKS as usize + 1) * crate::speech::VAD_CHUNK_SAMPLES;

/// A wideband call's 16 kHz audio, in step with the 8 kHz stream: `pending` holds twice the
/// samples of the slot's, drained with it; `turn` gets each chunk as the 8 kHz turn does.
struct WideTurn {
    pending: VecDeque<i16>,
    turn: TurnAudioBuffer,
}

struct CallSlot {
    sink: Sink,
    /// Shared with the call's [`CallInference`]: see [`CallInference::judged`].
    progress: Arc<Progress>,
    pending: VecDeque<i16>,
    /// (absolute index one past the job's last sample, arrival) of jobs not fully consumed.
    arrivals: VecDeque<(u64, Instant)>,
    pushed_samples: u64,
    consumed_samples: u64,
    vad: VadStream,
    detector: SpeechDetector,
    /// Chunks dropped under overload, so detector indices map to stream time.
    skipped_chunks: u64,
    /// Chunk index of the last Silero state reset ([`VAD_STATE_RESET_CHUNKS`]).
    last_vad_reset_chunk: u64,
    /// Quiet chunks the guard decided without the model since the stream's last model run or
    /// state reset, oldest first. They are run through Silero, back to back, just before the
    /// next chunk the model judges, so the state it judges from is the one it would have had;
    /// the 5 s state reset drops them (and bounds them to that many chunks).
    quiet_backlog: VecDeque<i16>,
    turn: TurnAudioBuffer,
    /// A wideband call's 16 kHz audio, `None` for a narrowband one (decided by its first push).
    wide: Option<WideTurn>,
    /// Whether the first push has decided `wide`.
    rate_decided: bool,
    incomplete_since: Option<(u64, f32)>,
    speculation: Speculation,
    /// Samples the current speculative run judges (its audio plus any padding).
    speculative_samples: u64,
    /// The confirmed stop waiting for its speculative job (`OnStop::Await`).
    awaiting: Option<StopDetection>,
    /// When the call's audio last came.
    last_push: Option<Instant>,
    /// The detector's chunk index of the current speech's onset (valid while speaking).
    speech_onset: u64,
    /// The next chunk is the second of a pair: it runs as soon as it is ready.
    second_of_pair: bool,
}

/// A confirmed speech stop: stream time and chunk of its detection, and when it was seen.
#[derive(Clone, Copy)]
struct StopDetection {
    at: Duration,
    at_chunk: u64,
    seen: Instant,
}

impl CallSlot {
    fn new(sink: Sink, vad: &VadParams, turn: &TurnParams) -> Self {
        Self {
            sink,
            progress: Arc::new(Progress::default()),
            pending: VecDeque::new(),
            arrivals: VecDeque::new(),
            pushed_samples: 0,
            consumed_samples: 0,
            vad: VadStream::default(),
            detector: SpeechDetector::new(vad),
            skipped_chunks: 0,
            last_vad_reset_chunk: 0,
            quiet_backlog: VecDeque::new(),
            turn: TurnAudioBuffer::new(turn.pre_speech, vad.start + VAD_CHUNK * 2, turn.max_audio),
            wide: None,
            rate_decided: false,
            incomplete_since: None,
            speculation: Speculation::new(),
            speculative_samples: 0,
            awaiting: None,
            last_push: None,
            speech_onset: 0,
            second_of_pair: false,
        }
    }

    fn ready(&self) -> bool {
        self.pending.len() >= VAD_CHUNK_SAMPLES
    }

    /// What the call's handle may do with its next complete chunks, after the chunk just
    /// decided: hold quiet ones only while quiet between turns with the guard on, where a quiet
    /// chunk's verdict is the guard's and changes nothing (no turn open, so no stop, early end
    /// or incomplete timeout rides on it).
    fn handoff(&self, quiet_guard: bool) -> Handoff {
        let between_turns = self.detector.state() == SpeechState::Quiet
            && !self.turn.in_turn()
            && self.incomplete_since.is_none()
            && self.awaiting.is_none();
        if quiet_guard && between_turns {
            Handoff::Quiet
        } else {
            Handoff::Now
        }
    }

    /// Chunks the detector has judged since the current speech's onset (meaningful while
    /// speaking).
    fn speech_chunks(&self) -> u64 {
        self.detector
            .chunks_seen()
            .saturating_sub(self.speech_onset)
    }

    /// When the call's next chunk is due for a VAD run, `None` when it has none ready: when it
    /// became ready (or `now`), or [`PAIR_HOLD`] later if it waits for its pair.
    fn vad_due(&self, pair_after: Option<u64>, now: Instant) -> Option<Instant> {
        if !self.ready() {
            return None;
        }
        let ready_at = self.ready_at().unwrap_or(now);
        let waits = pair_waits(
            self.detector.state(),
            self.speech_chunks(),
            pair_after,
            self.pending.len() / VAD_CHUNK_SAMPLES,
            self.second_of_pair,
        );
        Some(if waits {
            ready_at + PAIR_HOLD
        } else {
            ready_at
        })
    }

    /// Takes a push's audio: the first decides whether the call is wideband, and a push without
    /// 16 kHz audio ends that for good (what is held at 16 kHz can no longer stay in step).
    fn take_audio(&mut self, job: &AudioJob, vad: &VadParams, turn: &TurnParams) {
        if !self.rate_decided {
            self.rate_decided = true;
            if !job.wide.is_empty() {
                let confirm = vad.start + VAD_CHUNK * 2;
                self.wide = Some(WideTurn {
                    pending: VecDeque::new(),
                    turn: TurnAudioBuffer::at_rate(
                        WIDE_RATE_HZ,
                        turn.pre_speech,
                        confirm,
                        turn.max_audio,
                    ),
                });
            }
        }
        if job.wide.is_empty() {
            self.wide = None;
        }
        self.pending.extend(job.samples.iter().copied());
        if let Some(w) = self.wide.as_mut() {
            w.pending.extend(job.wide.iter().copied());
        }
    }

    /// Drops `n` samples of 8 kHz audio not yet consumed, and their 16 kHz twins.
    fn drop_pending(&mut self, n: usize) {
        self.pending.drain(..n.min(self.pending.len()));
        if let Some(w) = self.wide.as_mut() {
            let n = (WIDE_FACTOR * n).min(w.pending.len());
            w.pending.drain(..n);
        }
    }

    /// The turn's audio for Smart Turn into `out` (16 kHz on a wideband call), and its rate.
    fn copy_turn(&self, out: &mut Vec<i16>) -> u32 {
        match self.wide.as_ref() {
            Some(w) => {
                w.turn.copy_turn(out);
                WIDE_RATE_HZ
            }
            None => {
                self.turn.copy_turn(out);
                ontime_rtp::SAMPLE_RATE_HZ
            }
        }
    }

    /// The turn ended: both buffers back to keeping the recent past.
    fn end_turn(&mut self) {
        self.turn.end_turn();
        if let Some(w) = self.wide.as_mut() {
            w.turn.end_turn();
        }
    }

    fn oldest_arrival(&self) -> Option<Instant> {
        self.arrivals.front().map(|&(_, t)| t)
    }

    /// When the next chunk became ready: the arrival of the push that completed it.
    fn ready_at(&self) -> Option<Instant> {
        let needed = self.consumed_samples + VAD_CHUNK_SAMPLES as u64;
        self.arrivals
            .iter()
            .find(|&&(end, _)| end >= needed)
            .map(|&(_, t)| t)
    }
}

/// The longest a speaking call's chunk waits for its pair (`PoolConfig::vad_pair_after`).
/// Pushes come every 20 ms and a chunk is 32, so chunks complete 20 or 40 ms apart while audio
/// flows; past this the chunk runs alone (the stream stalled, or the call is held).
const PAIR_HOLD: Duration = Duration::from_millis(50);

/// Whether a call's ready chunk waits for the next one, to run the two back to back: only the
/// first of a pair, only alone (a backlog runs back to back anyway), only while the detector is
/// in Speaking and the speech has lasted `pair_after` chunks since its onset. In any other state
/// a chunk's probability may confirm a start or count a stop: it runs as it comes.
fn pair_waits(
    state: SpeechState,
    speech_chunks: u64,
    pair_after: Option<u64>,
    ready_chunks: usize,
    second_of_pair: bool,
) -> bool {
    pairs(state, speech_chunks, pair_after) && ready_chunks == 1 && !second_of_pair
}

/// Whether a call's chunks go in pairs now: speaking, for `pair_after` chunks since the onset.
fn pairs(state: SpeechState, speech_chunks: u64, pair_after: Option<u64>) -> bool {
    state == SpeechState::Speaking && pair_after.is_some_and(|after| speech_chunks >= after)
}

struct TurnJob {
    id: u64,
    audio: Vec<i16>,
    /// `audio`'s sample rate.
    rate_hz: u32,
    queued_at: Instant,
    /// The stop detection's stream time and chunk (a speculative job: the chunk that started it).
    at: Duration,
    at_chunk: u64,
    /// The speculation's generation, for a speculative job.
    speculative: Option<u64>,
}

/// Emits a verdict on the turn and moves the call on: a complete turn ends, an incomplete one
/// waits for more speech or the incomplete timeout.
fn conclude(slot: &mut CallSlot, params: &TurnParams, verdict: Verdict) {
    let complete = verdict.probability > params.complete_threshold;
    // Measured on the turn's audio before it is let go.
    let final_pitch = (complete && params.final_pitch)
        .then(|| slot.turn.final_pitch_level())
        .flatten();
    if complete {
        slot.end_turn();
        slot.incomplete_since = None;
    } else {
        slot.incomplete_since = Some((verdict.at_chunk, verdict.probability));
    }
    (slot.sink)(InferenceEvent::TurnEnded {
        probability: verdict.probability,
        complete,
        timed_out: false,
        at: verdict.at,
        // The model reads at most the last `max_audio`, padding included.
        audio: Duration::from_secs_f64(
            verdict.audio_samples as f64 / f64::from(ontime_rtp::SAMPLE_RATE_HZ),
        )
        .min(params.max_audio),
        latency: verdict.latency,
        final_pitch,
    });
}

struct Verdict {
    probability: f32,
    at: Duration,
    at_chunk: u64,
    audio_samples: u64,
    latency: Duration,
}

/// Queues Smart Turn on the call's turn audio for a confirmed stop (today's rule), due at once.
fn queue_confirmed(
    jobs: &mut DeadlineQueue<TurnJob>,
    origin: Instant,
    id: u64,
    slot: &CallSlot,
    stop: StopDetection,
) {
    let mut audio = Vec::new();
    let rate_hz = slot.copy_turn(&mut audio);
    jobs.push(
        stop.seen.saturating_duration_since(origin),
        TurnJob {
            id,
            audio,
            rate_hz,
            queued_at: stop.seen,
            at: stop.at,
            at_chunk: stop.at_chunk,
            speculative: None,
        },
    );
}

/// Samples at `rate_hz` per 8 kHz stream sample (1 or 2).
fn stream_samples_per(rate_hz: u32) -> usize {
    (rate_hz / ontime_rtp::SAMPLE_RATE_HZ).max(1) as usize
}

/// Drops a call's queued speculative job `generation`.
fn cancel_job(jobs: &mut DeadlineQueue<TurnJob>, id: u64, generation: u64) {
    jobs.retain(|j| !(j.id == id && j.speculative == Some(generation)));
}

/// The call's turn so far, and where its voice ends (`quiet_chunks` quiet chunks before the end).
fn turn_span(slot: &CallSlot, quiet_chunks: u32) -> (AudioSpan, u64) {
    let span = AudioSpan {
        start: slot.turn.start(),
        end: slot.turn.end(),
    };
    let voiced_end = span
        .end
        .saturating_sub(u64::from(quiet_chunks) * VAD_CHUNK_SAMPLES as u64);
    (span, voiced_end)
}

/// How long the idle thread may block, and the deferral still ahead. A deferral already past
/// is dropped: the work it held back may have gone meanwhile (its call ended), and a past
/// deadline left in place made every wait return at once — the thread spun on a whole core
/// (or its whole CPU quota, throttling the process) until the next call's audio arrived.
/// Calls whose audio last came longer ago than this hold no VAD batch back (a bridged leg, a
/// held call, a stream that stalled).
const GATHER_ACTIVE: Duration = Duration::from_millis(100);

/// When the next VAD batch is due (`None`: no chunk is ready), from each call's (when its next
/// chunk is due if it has one ready, when its audio last came): when the first is due if every
/// call that sent audio within [`GATHER_ACTIVE`] has a chunk ready, else `gather` after it. One
/// run for all calls instead of one per RTP phase: each run starts cold.
fn vad_batch_due(
    calls: impl Iterator<Item = (Option<Instant>, Option<Instant>)>,
    gather: Duration,
    now: Instant,
) -> Option<Instant> {
    let mut first: Option<Instant> = None;
    let mut others_coming = false;
    for (ready_at, last_push) in calls {
        match ready_at {
            Some(at) => first = Some(first.map_or(at, |f| f.min(at))),
            None => {
                others_coming |=
                    last_push.is_some_and(|p| now.saturating_duration_since(p) < GATHER_ACTIVE);
            }
        }
    }
    let first = first?;
    // A chunk waiting for its pair is due in the future; any other one became ready by now.
    Some(if others_coming { first + gather } else { first })
}

fn wait_timeout(deferred_until: Option<Instant>, now: Instant) -> (Option<Instant>, Duration) {
    match deferred_until {
        Some(t) if t > now => (Some(t), t - now),
        _ => (None, Duration::from_secs(3600)),
    }
}

/// Running estimates of job CPU cost, for the budget (exponential moving averages).
struct CostEstimates {
    vad_per_chunk: Duration,
    turn: Duration,
}

impl CostEstimates {
    fn update(old: Duration, sample: Duration) -> Duration {
        // EMA with α = 1/4: follows load changes within a few jobs.
        (old * 3 + sample) / 4
    }
}

struct Worker {
    config: PoolConfig,
    control: Receiver<Control>,
    audio: Receiver<AudioJob>,
    shared: Arc<Shared>,
    vad: SileroVad,
    turn: SmartTurn,
    calls: HashMap<u64, CallSlot>,
    turn_jobs: DeadlineQueue<TurnJob>,
    budget: CpuBudget,
    origin: Instant,
    estimates: CostEstimates,
    batch_ids: Vec<u64>,
    /// Per entry of `batch_ids`: its row in the model batch, or `None` for a chunk the quiet
    /// guard decides.
    batch_rows: Vec<Option<usize>>,
    /// The model rows' calls with deferred quiet chunks to replay first, and how many each.
    replays: Vec<(u64, usize)>,
    chunk_f32: Vec<f32>,
    chunk_i16: Vec<i16>,
    /// The 16 kHz twin of `chunk_i16` for a wideband call's turn audio.
    wide_chunk: Vec<i16>,
    deferred_until: Option<Instant>,
    running: bool,
}

impl Worker {
    fn load(
        config: PoolConfig,
        control: Receiver<Control>,
        audio: Receiver<AudioJob>,
        shared: Arc<Shared>,
    ) -> Result<Self> {
        let env = crate::runtime::load_runtime(&config.paths.ort_dylib)?;
        let vad = SileroVad::load_graph(&env, &config.paths.silero_vad, config.vad_graph)?;
        let turn = SmartTurn::load_graph(&env, &config.paths.smart_turn, config.turn_graph)?;
        let budget = CpuBudget::new(config.quota, config.budget_reserve);
        tracing::info!(
            quota_cores = config.quota.map(|q| q.cores()),
            allowance_ms = budget.allowance().map(|a| a.as_secs_f64() * 1e3),
            turn_graph = ?turn.graph(),
            vad_graph = ?vad.graph(),
            "inference pool loaded Silero VAD and Smart Turn v3.2 on one thread"
        );
        Ok(Self {
            control,
            audio,
            shared,
            vad,
            turn,
            calls: HashMap::new(),
            turn_jobs: DeadlineQueue::default(),
            budget,
            origin: Instant::now(),
            // Conservative first guesses until measured: 0.3 ms per VAD chunk, 80 ms a turn.
            estimates: CostEstimates {
                vad_per_chunk: Duration::from_micros(300),
                turn: Duration::from_millis(80),
            },
            batch_ids: Vec::with_capacity(config.max_vad_batch),
            batch_rows: Vec::with_capacity(config.max_vad_batch),
            replays: Vec::with_capacity(config.max_vad_batch),
            chunk_f32: vec![0.0; VAD_CHUNK_SAMPLES * config.max_vad_batch],
            chunk_i16: vec![0; VAD_CHUNK_SAMPLES],
            wide_chunk: Vec::with_capacity(WIDE_FACTOR * VAD_CHUNK_SAMPLES),
            deferred_until: None,
            running: true,
            config,
        })
    }

    fn run(mut self) {
        while self.running {
            self.drain_control();
            self.drain_audio();
            if !self.running {
                break;
            }
            let now = Instant::now();
            let pair_after = self.pair_after_chunks();
            let chunks = self
                .calls
                .values()
                .map(|s| (s.vad_due(pair_after, now), s.last_push));
            let vad_due = vad_batch_due(chunks, self.config.vad_gather, now);
            let has_work = !self.turn_jobs.is_empty() || vad_due.is_some_and(|t| t <= now);
            let deferred = self.deferred_until.is_some_and(|t| now < t);
            if has_work && !deferred {
                self.deferred_until = None;
                if !self.turn_jobs.is_empty() {
                    self.run_turn_job();
                } else {
                    self.run_vad_batch();
                }
                continue;
            }
            self.wait(vad_due);
        }
    }

    /// Blocks until a message arrives (or the deferral ends, or the gathered VAD batch is due).
    fn wait(&mut self, vad_due: Option<Instant>) {
        let now = Instant::now();
        let (deferred_until, timeout) = wait_timeout(self.deferred_until, now);
        self.deferred_until = deferred_until;
        let timeout = match vad_due {
            Some(due) if deferred_until.is_none() => {
                timeout.min(due.saturating_duration_since(now))
            }
            _ => timeout,
        };
        select! {
            recv(self.control) -> msg => match msg {
                Ok(c) => self.handle_control(c),
                Err(_) => self.running = false,
            },
            recv(self.audio) -> msg => {
                if let Ok(job) = msg {
                    self.handle_audio(job);
                }
            },
            default(timeout) => {},
        }
    }

    fn drain_control(&mut self) {
        while let Ok(c) = self.control.try_recv() {
            self.handle_control(c);
        }
    }

    fn handle_control(&mut self, c: Control) {
        match c {
            Control::Register { id, sink, progress } => {
                let mut slot = CallSlot::new(sink, &self.config.vad, &self.config.turn);
                slot.progress = progress;
                self.calls.insert(id, slot);
            }
            Control::Unregister { id } => {
                self.calls.remove(&id);
                self.turn_jobs.retain(|j| j.id != id);
            }
            Control::Shutdown => self.running = false,
        }
        self.shared
            .calls
            .store(self.calls.len() as u64, Ordering::Relaxed);
    }

    fn drain_audio(&mut self) {
        while let Ok(job) = self.audio.try_recv() {
            self.handle_audio(job);
        }
    }

    fn handle_audio(&mut self, job: AudioJob) {
        self.shared.audio_jobs.fetch_add(1, Ordering::Relaxed);
        if !self.calls.contains_key(&job.id) {
            // The registration was sent before this audio; it may still be in the control queue.
            self.drain_control();
        }
        let Some(slot) = self.calls.get_mut(&job.id) else {
            return; // Unregistered: the call ended.
        };
        slot.last_push = Some(job.pushed_at);
        slot.take_audio(&job, &self.config.vad, &self.config.turn);
        slot.pushed_samples += job.samples.len() as u64;
        slot.arrivals
            .push_back((slot.pushed_samples, job.pushed_at));
        let excess = slot.pending.len().saturating_sub(MAX_BACKLOG_SAMPLES);
        if excess > 0 {
            // Overload: drop whole chunks of the oldest audio, keep stream time right.
            let drop = excess.div_ceil(VAD_CHUNK_SAMPLES) * VAD_CHUNK_SAMPLES;
            let drop = drop.min(slot.pending.len());
            slot.drop_pending(drop);
            slot.consumed_samples += drop as u64;
            slot.skipped_chunks += (drop / VAD_CHUNK_SAMPLES) as u64;
            while slot
                .arrivals
                .front()
                .is_some_and(|&(end, _)| end <= slot.consumed_samples)
            {
                slot.arrivals.pop_front();
            }
            self.shared
                .dropped_samples
                .fetch_add(drop as u64, Ordering::Relaxed);
        }
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// [`PoolConfig::vad_pair_after`] in chunks (rounded up).
    fn pair_after_chunks(&self) -> Option<u64> {
        self.config
            .vad_pair_after
            .map(|d| d.as_micros().div_ceil(VAD_CHUNK.as_micros()) as u64)
    }

    /// Asks the budget; on a deferral records it and returns false.
    fn budget_allows(&mut self, estimated: Duration) -> bool {
        match self.budget.check(self.now(), thread_cpu_time(), estimated) {
            BudgetDecision::Run => true,
            BudgetDecision::DeferUntil(t) => {
                self.shared.deferrals.fetch_add(1, Ordering::Relaxed);
                counter!(BUDGET_DEFERRALS_TOTAL).increment(1);
                self.deferred_until = Some(self.origin + t);
                false
            }
        }
    }

    fn run_vad_batch(&mut self) {
        let stop_chunks = self.config.vad.stop_chunks();
        let speculate_chunks = self.config.turn.speculate_after.map(chunks_for);
        let early = self.early_end_rule();
        self.batch_ids.clear();
        self.batch_rows.clear();
        let max = self.config.max_vad_batch;
        let now = Instant::now();
        let pair_after = self.pair_after_chunks();
        // Oldest backlog first, so no call starves when more than a batch are ready. A chunk
        // waiting for its pair stays out until the pair is there or the wait is over.
        let mut ready: Vec<(Instant, u64)> = self
            .calls
            .iter()
            .filter(|(_, s)| s.vad_due(pair_after, now).is_some_and(|due| due <= now))
            .map(|(&id, s)| (s.oldest_arrival().unwrap_or_else(Instant::now), id))
            .collect();
        ready.sort_unstable();
        let mut b = 0;
        for &(_, id) in &ready {
            let Some(slot) = self.calls.get(&id) else {
                continue;
            };
            // Only while quiet: in any other state a quiet chunk's probability decides
            // something (a start being confirmed, a stop being counted), so the model judges it.
            let guarded = self.config.vad_quiet_peak.is_some_and(|peak| {
                slot.detector.state() == SpeechState::Quiet
                    && is_quiet_chunk(slot.pending.range(..VAD_CHUNK_SAMPLES).copied(), peak)
            });
            if guarded {
                self.batch_ids.push(id);
                self.batch_rows.push(None);
            } else if b < max {
                self.batch_ids.push(id);
                self.batch_rows.push(Some(b));
                b += 1;
            }
        }
        if self.batch_ids.is_empty() {
            return;
        }
        let estimated = self.estimates.vad_per_chunk * b as u32;
        if b > 0 && !self.budget_allows(estimated) {
            // The guarded chunks cost no model time: decide them now, the batch waits.
            self.keep_only_guarded();
            b = 0;
        }
        if b > 0 && !self.run_vad_model(b, &ready) {
            self.keep_only_guarded();
        }
        self.decide_chunks(stop_chunks, speculate_chunks, early);
    }

    /// Leaves only the guarded chunks in the batch being decided (the model rows did not run).
    fn keep_only_guarded(&mut self) {
        let rows = &self.batch_rows;
        let mut k = 0;
        self.batch_ids.retain(|_| {
            let keep = rows[k].is_none();
            k += 1;
            keep
        });
        self.batch_rows.retain(Option::is_none);
    }

    /// Runs Silero on the `b` model rows of the batch being decided; false when it failed (the
    /// rows' chunks are then dropped or left pending, and only the guarded ones are decided).
    fn run_vad_model(&mut self, b: usize, ready: &[(Instant, u64)]) -> bool {
        let started = Instant::now();
        let cpu_before = thread_cpu_time();
        let waited = ready.first().map_or(Duration::ZERO, |&(oldest, _)| {
            started.saturating_duration_since(oldest)
        });
        if !ready.is_empty() {
            histogram!(QUEUE_WAIT_SECONDS, "model" => MODEL_VAD).record(waited.as_secs_f64());
        }
        self.replay_quiet_backlogs();
        self.vad.begin_batch(b);
        for (id, row) in self.batch_ids.iter().zip(&self.batch_rows) {
            let Some(i) = *row else {
                continue;
            };
            // ok: ids were just collected from `calls` on this thread.
            let Some(slot) = self.calls.get(id) else {
                continue;
            };
            let chunk = &mut self.chunk_f32[i * VAD_CHUNK_SAMPLES..(i + 1) * VAD_CHUNK_SAMPLES];
            for (o, &s) in chunk.iter_mut().zip(slot.pending.iter()) {
                *o = f32::from(s) / 32768.0;
            }
            if let Err(e) = self.vad.set_row(i, &slot.vad, chunk) {
                tracing::error!(error = %e, "VAD batch assembly failed");
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        if let Err(e) = self.vad.run() {
            tracing::error!(error = %e, batch = b, "Silero VAD run failed");
            self.shared.errors.fetch_add(1, Ordering::Relaxed);
            // Drop the chunks so a bad input cannot wedge the loop.
            for (id, row) in self.batch_ids.iter().zip(&self.batch_rows) {
                if row.is_none() {
                    continue;
                }
                if let Some(slot) = self.calls.get_mut(id) {
                    slot.drop_pending(VAD_CHUNK_SAMPLES);
                    slot.consumed_samples += VAD_CHUNK_SAMPLES as u64;
                }
            }
            return false;
        }
        let run_wall = started.elapsed();
        let cpu = thread_cpu_time().saturating_sub(cpu_before);
        self.shared.count_run(cpu, waited);
        self.estimates.vad_per_chunk =
            CostEstimates::update(self.estimates.vad_per_chunk, cpu / b as u32);
        histogram!(RUN_SECONDS, "model" => MODEL_VAD).record(run_wall.as_secs_f64());
        counter!(JOBS_TOTAL, "model" => MODEL_VAD).increment(b as u64);
        self.shared.vad_batches.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Runs each model row's call over the quiet chunks the guard deferred since its last run,
    /// in order, before its chunk is judged. Back to back these runs find the model in the
    /// caches (a VAD run costs ≈ 60 µs so, ≈ 490 µs after the thread slept 32 ms:
    /// docs/inference.md), so deferring quiet chunks and replaying them costs far less than
    /// judging each as it comes, and the decisions are the model's own. Calls replaying together
    /// share runs, aligned on their last deferred chunk (rows are independent). The
    /// probabilities are not used: the guard has already called those chunks non-speech.
    fn replay_quiet_backlogs(&mut self) {
        self.replays.clear();
        for (&id, row) in self.batch_ids.iter().zip(&self.batch_rows) {
            let Some(slot) = self.calls.get(&id).filter(|_| row.is_some()) else {
                continue;
            };
            let chunks = slot.quiet_backlog.len() / VAD_CHUNK_SAMPLES;
            if chunks > 0 {
                self.replays.push((id, chunks));
            }
        }
        let Some(steps) = self.replays.iter().map(|&(_, n)| n).max() else {
            return;
        };
        let cpu_before = thread_cpu_time();
        let mut replayed = 0u64;
        for step in 0..steps {
            // A call with n deferred chunks joins at step `steps - n`.
            let joined = |n: usize| n + step >= steps;
            let rows = self.replays.iter().filter(|&&(_, n)| joined(n)).count();
            self.vad.begin_batch(rows);
            let mut i = 0;
            let mut ran = Ok(());
            for &(id, n) in &self.replays {
                let Some(slot) = self.calls.get(&id).filter(|_| joined(n)) else {
                    continue;
                };
                let chunk = &mut self.chunk_f32[i * VAD_CHUNK_SAMPLES..(i + 1) * VAD_CHUNK_SAMPLES];
                for (o, &s) in chunk.iter_mut().zip(slot.quiet_backlog.iter()) {
                    *o = f32::from(s) / 32768.0;
                }
                ran = ran.and_then(|()| self.vad.set_row(i, &slot.vad, chunk));
                i += 1;
            }
            ran = ran.and_then(|()| self.vad.run());
            let mut i = 0;
            for &(id, n) in &self.replays {
                let Some(slot) = self.calls.get_mut(&id).filter(|_| joined(n)) else {
                    continue;
                };
                ran = ran.and_then(|()| self.vad.finish_row(i, &mut slot.vad).map(drop));
                slot.quiet_backlog.drain(..VAD_CHUNK_SAMPLES);
                i += 1;
            }
            if let Err(e) = ran {
                tracing::error!(error = %e, "Silero VAD replay of deferred quiet chunks failed");
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
                break;
            }
            replayed += rows as u64;
        }
        for &(id, _) in &self.replays {
            if let Some(slot) = self.calls.get_mut(&id) {
                slot.quiet_backlog.clear();
            }
        }
        // Model CPU all the same: the admission estimate reads its rate.
        let cpu = thread_cpu_time().saturating_sub(cpu_before);
        self.shared
            .model_cpu_ns
            .fetch_add(cpu.as_nanos() as u64, Ordering::Relaxed);
        self.shared
            .vad_replayed
            .fetch_add(replayed, Ordering::Relaxed);
        counter!(JOBS_TOTAL, "model" => MODEL_VAD).increment(replayed);
    }

    /// Decides every chunk of the batch: a model row by its probability, a guarded chunk as
    /// non-speech; then each call's speech, turn and speculation rules.
    fn decide_chunks(
        &mut self,
        stop_chunks: u32,
        speculate_chunks: Option<u32>,
        early: Option<(f32, u32)>,
    ) {
        let pair_after = self.pair_after_chunks();
        let guarded = self.batch_rows.iter().filter(|r| r.is_none()).count();
        self.shared
            .vad_chunks
            .fetch_add(self.batch_ids.len() as u64, Ordering::Relaxed);
        self.shared
            .vad_guarded
            .fetch_add(guarded as u64, Ordering::Relaxed);
        for k in 0..self.batch_ids.len() {
            let id = self.batch_ids[k];
            let Some(slot) = self.calls.get_mut(&id) else {
                continue;
            };
            let p = match self.batch_rows[k] {
                Some(i) => match self.vad.finish_row(i, &mut slot.vad) {
                    Ok(p) => p,
                    Err(_) => continue,
                },
                None => {
                    if slot.quiet_backlog.len() >= MAX_QUIET_BACKLOG_SAMPLES {
                        // Only if the state reset stopped bounding the backlog: the oldest
                        // chunk's history is then lost (its tail still becomes the context).
                        self.chunk_i16.clear();
                        self.chunk_i16
                            .extend(slot.quiet_backlog.drain(..VAD_CHUNK_SAMPLES));
                        slot.vad.skip_quiet(&self.chunk_i16);
                    }
                    let chunk = slot.pending.range(..VAD_CHUNK_SAMPLES).copied();
                    slot.quiet_backlog.extend(chunk);
                    0.0
                }
            };
            self.chunk_i16.clear();
            self.chunk_i16
                .extend(slot.pending.drain(..VAD_CHUNK_SAMPLES));
            slot.consumed_samples += VAD_CHUNK_SAMPLES as u64;
            // A chunk with another ready behind it opens a pair; that one runs next, at once.
            let second = slot.second_of_pair;
            slot.second_of_pair = !second && slot.ready();
            if second && pairs(slot.detector.state(), slot.speech_chunks(), pair_after) {
                self.shared.vad_paired.fetch_add(1, Ordering::Relaxed);
            }
            while slot
                .arrivals
                .front()
                .is_some_and(|&(end, _)| end <= slot.consumed_samples)
            {
                slot.arrivals.pop_front();
            }
            slot.turn.push(&self.chunk_i16);
            if let Some(w) = slot.wide.as_mut() {
                let n = (WIDE_FACTOR * VAD_CHUNK_SAMPLES).min(w.pending.len());
                self.wide_chunk.clear();
                self.wide_chunk.extend(w.pending.drain(..n));
                w.turn.push(&self.wide_chunk);
            }
            let chunk_index = slot.detector.chunks_seen() + slot.skipped_chunks;
            let was = slot.detector.state();
            let transition = slot.detector.push(p);
            let detected = chunk_time(chunk_index + 1);
            match transition {
                Some(SpeechTransition::Started { onset_chunk }) => {
                    slot.speech_onset = onset_chunk;
                    let onset_chunk = onset_chunk + slot.skipped_chunks;
                    let onset = onset_chunk * VAD_CHUNK_SAMPLES as u64;
                    slot.turn.speech_started(onset);
                    if let Some(w) = slot.wide.as_mut() {
                        w.turn.speech_started(WIDE_FACTOR as u64 * onset);
                    }
                    slot.incomplete_since = None;
                    (slot.sink)(InferenceEvent::SpeechStarted {
                        onset: chunk_time(onset_chunk),
                        detected,
                    });
                }
                Some(SpeechTransition::Stopped { end_chunk }) => {
                    (slot.sink)(InferenceEvent::SpeechStopped {
                        end: chunk_time(end_chunk + slot.skipped_chunks),
                        detected,
                    });
                    if slot.turn.in_turn() {
                        let (confirmed, voiced_end) = turn_span(slot, stop_chunks);
                        let stop = StopDetection {
                            at: detected,
                            at_chunk: chunk_index + 1,
                            seen: Instant::now(),
                        };
                        match slot.speculation.stop_confirmed(confirmed, voiced_end) {
                            OnStop::Use { probability, .. } => {
                                self.shared.speculative(Outcome::Used);
                                conclude(
                                    slot,
                                    &self.config.turn,
                                    Verdict {
                                        probability,
                                        at: stop.at,
                                        at_chunk: stop.at_chunk,
                                        audio_samples: slot.speculative_samples,
                                        latency: Duration::ZERO,
                                    },
                                );
                            }
                            OnStop::Await { .. } => slot.awaiting = Some(stop),
                            OnStop::Run { cancel, outcome } => {
                                // A stop still waiting for a cancelled job is superseded: its
                                // caller spoke again, so its verdict would be stale.
                                slot.awaiting = None;
                                if let Some(g) = cancel {
                                    cancel_job(&mut self.turn_jobs, id, g);
                                }
                                if let Some(o) = outcome {
                                    self.shared.speculative(o);
                                }
                                queue_confirmed(&mut self.turn_jobs, self.origin, id, slot, stop);
                            }
                        }
                    } else if let Some(g) = slot.speculation.clear() {
                        cancel_job(&mut self.turn_jobs, id, g);
                    }
                }
                None => {
                    let now = slot.detector.state();
                    if was == SpeechState::Stopping && now == SpeechState::Speaking {
                        // Speech resumed inside the quiet gap: what was judged is not the turn.
                        let (cancel, had) = slot.speculation.speech_resumed();
                        if let Some(g) = cancel {
                            cancel_job(&mut self.turn_jobs, id, g);
                        }
                        if had {
                            self.shared.speculative(Outcome::Discarded);
                        }
                    }
                    let quiet = slot.detector.quiet_run();
                    if quiet > 0
                        && Some(quiet) == speculate_chunks
                        && slot.turn.in_turn()
                        && !slot.speculation.is_active()
                    {
                        let fits = self.budget.fits(
                            self.origin.elapsed(),
                            thread_cpu_time(),
                            self.estimates.turn,
                        );
                        if !fits {
                            // Optional work: without room in this window, today's rule runs.
                            self.shared.speculative(Outcome::Skipped);
                        } else if let Some(generation) = slot.speculation.start(AudioSpan {
                            start: slot.turn.start(),
                            end: slot.turn.end(),
                        }) {
                            let to_confirm = stop_chunks.saturating_sub(quiet);
                            let pad = if self.config.turn.speculate_pad {
                                to_confirm as usize * VAD_CHUNK_SAMPLES
                            } else {
                                0
                            };
                            let mut audio = Vec::new();
                            let rate_hz = slot.copy_turn(&mut audio);
                            let per_sample = stream_samples_per(rate_hz);
                            // The quiet still to come before the confirmation, as silence.
                            audio.resize(audio.len() + pad * per_sample, 0);
                            slot.speculative_samples = (audio.len() / per_sample) as u64;
                            // Due when the stop would be confirmed.
                            let due = self.origin.elapsed() + VAD_CHUNK * to_confirm;
                            self.turn_jobs.push(
                                due,
                                TurnJob {
                                    id,
                                    audio,
                                    rate_hz,
                                    queued_at: Instant::now(),
                                    at: detected,
                                    at_chunk: chunk_index + 1,
                                    speculative: Some(generation),
                                },
                            );
                        }
                    }
                    try_early_end(slot, &self.config.turn, &self.shared, early);
                }
            }
            // Reset a quiet call's model state every 5 s of stream time, as pipecat does: the
            // carried state loses short utterances after long silence.
            if slot.detector.state() == SpeechState::Quiet
                && (chunk_index + 1).saturating_sub(slot.last_vad_reset_chunk)
                    >= VAD_STATE_RESET_CHUNKS
            {
                slot.vad.reset();
                slot.quiet_backlog.clear();
                slot.last_vad_reset_chunk = chunk_index + 1;
            }
            // After an incomplete verdict, enough silence ends the turn anyway.
            if let Some((since, probability)) = slot.incomplete_since {
                let silent = chunk_time((chunk_index + 1).saturating_sub(since));
                if slot.detector.state() == SpeechState::Quiet
                    && silent >= self.config.turn.incomplete_timeout
                {
                    slot.incomplete_since = None;
                    slot.end_turn();
                    (slot.sink)(InferenceEvent::TurnEnded {
                        probability,
                        complete: true,
                        timed_out: true,
                        at: detected,
                        audio: Duration::ZERO,
                        latency: Duration::ZERO,
                        final_pitch: None,
                    });
                }
            }
            // After the chunk's events: a reader that sees this far has them all in its sink.
            let handoff = slot.handoff(self.config.vad_quiet_peak.is_some());
            slot.progress.store(chunk_index + 1, handoff);
        }
    }

    /// The early end rule in chunks: (probability, minimum quiet chunks), if enabled.
    fn early_end_rule(&self) -> Option<(f32, u32)> {
        self.config.turn.speculate_after?;
        self.config.turn.early_end.map(|e| {
            // A verdict that would not call the turn complete never ends it early.
            let p = e.probability.max(self.config.turn.complete_threshold);
            let chunks = e.min_quiet.as_micros().div_ceil(VAD_CHUNK.as_micros());
            (p, u32::try_from(chunks).unwrap_or(u32::MAX).max(1))
        })
    }

    fn run_turn_job(&mut self) {
        let estimated = self.estimates.turn;
        let Some(speculative) = self.turn_jobs.peek().map(|j| j.speculative) else {
            return;
        };
        if let Some(generation) = speculative {
            if !self.budget.fits(self.now(), thread_cpu_time(), estimated) {
                // Speculation is optional work: skip it, never defer the thread for it.
                let Some(job) = self.turn_jobs.pop() else {
                    return;
                };
                self.shared.speculative(Outcome::Skipped);
                self.fall_back(job.id, generation);
                return;
            }
            // It fits: charge it to the window like any job.
            if !self.budget_allows(estimated) {
                return;
            }
        } else if !self.budget_allows(estimated) {
            return;
        }
        let Some(job) = self.turn_jobs.pop() else {
            return;
        };
        let started = Instant::now();
        let cpu_before = thread_cpu_time();
        histogram!(QUEUE_WAIT_SECONDS, "model" => MODEL_TURN).record(
            started
                .saturating_duration_since(job.queued_at)
                .as_secs_f64(),
        );
        let result = self.turn.predict_pcm(&job.audio, job.rate_hz);
        let run_wall = started.elapsed();
        let cpu = thread_cpu_time().saturating_sub(cpu_before);
        self.shared
            .count_run(cpu, started.saturating_duration_since(job.queued_at));
        self.estimates.turn = CostEstimates::update(self.estimates.turn, cpu);
        histogram!(RUN_SECONDS, "model" => MODEL_TURN).record(run_wall.as_secs_f64());
        counter!(JOBS_TOTAL, "model" => MODEL_TURN).increment(1);
        self.shared.turn_runs.fetch_add(1, Ordering::Relaxed);
        if job.rate_hz == WIDE_RATE_HZ {
            self.shared
                .turn_runs_wideband
                .fetch_add(1, Ordering::Relaxed);
            counter!(TURN_WIDEBAND_TOTAL).increment(1);
        }
        self.shared
            .turn_cpu_ns
            .fetch_add(cpu.as_nanos() as u64, Ordering::Relaxed);
        let probability = match result {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "Smart Turn run failed");
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
                if let Some(generation) = job.speculative {
                    // Not counted as an outcome: the error is; today's rule still answers.
                    self.fall_back(job.id, generation);
                }
                return;
            }
        };
        let early = self.early_end_rule();
        let Some(slot) = self.calls.get_mut(&job.id) else {
            return;
        };
        // In stream samples (8 kHz), as every position the verdict is compared with.
        let audio_samples = (job.audio.len() / stream_samples_per(job.rate_hz)) as u64;
        let Some(generation) = job.speculative else {
            conclude(
                slot,
                &self.config.turn,
                Verdict {
                    probability,
                    at: job.at,
                    at_chunk: job.at_chunk,
                    audio_samples,
                    latency: job.queued_at.elapsed(),
                },
            );
            return;
        };
        match slot.speculation.verdict(generation, probability) {
            // Counted when it was discarded.
            OnVerdict::Stale => {}
            OnVerdict::Stored => try_early_end(slot, &self.config.turn, &self.shared, early),
            OnVerdict::Final => {
                self.shared.speculative(Outcome::Used);
                let stop = slot.awaiting.take();
                let (at, at_chunk, latency) = match stop {
                    Some(s) => (s.at, s.at_chunk, s.seen.elapsed()),
                    None => (job.at, job.at_chunk, Duration::ZERO),
                };
                conclude(
                    slot,
                    &self.config.turn,
                    Verdict {
                        probability,
                        at,
                        at_chunk,
                        audio_samples,
                        latency,
                    },
                );
            }
        }
    }

    /// A speculative job did not run: if its stop was already confirmed, run today's rule now.
    fn fall_back(&mut self, id: u64, generation: u64) {
        let Some(slot) = self.calls.get_mut(&id) else {
            return;
        };
        if slot.speculation.skip(generation) != Some(true) {
            return;
        }
        let Some(stop) = slot.awaiting.take() else {
            return;
        };
        queue_confirmed(&mut self.turn_jobs, self.origin, id, slot, stop);
    }
}

/// Ends the turn now if the call is quiet long enough and holds a confident speculative verdict
/// covering its turn so far (`TurnParams::early_end`): the stop is confirmed early
/// (`SpeechStopped`, then `TurnEnded`).
fn try_early_end(
    slot: &mut CallSlot,
    params: &TurnParams,
    shared: &Shared,
    rule: Option<(f32, u32)>,
) {
    let Some((threshold, min_quiet)) = rule else {
        return;
    };
    let quiet = slot.detector.quiet_run();
    if quiet < min_quiet || !slot.turn.in_turn() {
        return;
    }
    let (turn, voiced_end) = turn_span(slot, quiet);
    let Some((probability, _)) = slot.speculation.take_confident(threshold, turn, voiced_end)
    else {
        return;
    };
    let Some(SpeechTransition::Stopped { end_chunk }) = slot.detector.stop_now() else {
        return;
    };
    let at_chunk = slot.detector.chunks_seen() + slot.skipped_chunks;
    let at = chunk_time(at_chunk);
    (slot.sink)(InferenceEvent::SpeechStopped {
        end: chunk_time(end_chunk + slot.skipped_chunks),
        detected: at,
    });
    shared.speculative(Outcome::Used);
    shared.early_ends.fetch_add(1, Ordering::Relaxed);
    counter!(TURN_EARLY_END_TOTAL).increment(1);
    conclude(
        slot,
        params,
        Verdict {
            probability,
            at,
            at_chunk,
            audio_samples: slot.speculative_samples,
            latency: Duration::ZERO,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_past_deferral_no_longer_wakes_the_idle_thread() {
        let now = Instant::now();
        let hour = Duration::from_secs(3600);
        // Ahead: wait until it ends.
        let ahead = now + Duration::from_millis(30);
        assert_eq!(
            wait_timeout(Some(ahead), now),
            (Some(ahead), Duration::from_millis(30))
        );
        // Past or due (its work gone meanwhile): dropped, block until a message.
        let past = now.checked_sub(Duration::from_millis(5)).unwrap_or(now);
        assert_eq!(wait_timeout(Some(past), now), (None, hour));
        assert_eq!(wait_timeout(Some(now), now), (None, hour));
        assert_eq!(wait_timeout(None, now), (None, hour));
    }

    #[test]
    fn only_a_speaking_calls_lone_first_chunk_waits_for_its_pair() {
        use SpeechState::*;
        // Speaking for 10 chunks, pairing from the onset: the lone first chunk waits.
        assert!(pair_waits(Speaking, 10, Some(0), 1, false));
        // Its pair runs at once; a backlog runs back to back anyway.
        assert!(!pair_waits(Speaking, 10, Some(0), 1, true));
        assert!(!pair_waits(Speaking, 10, Some(0), 2, false));
        // Not yet past the horizon (a barge-in decision may read this speech's progress).
        assert!(!pair_waits(Speaking, 10, Some(11), 1, false));
        assert!(pair_waits(Speaking, 11, Some(11), 1, false));
        // Pairing off.
        assert!(!pair_waits(Speaking, 10, None, 1, false));
        // Every other state: a chunk may confirm a start or count a stop.
        for state in [Quiet, Starting, Stopping] {
            assert!(!pair_waits(state, 10, Some(0), 1, false), "{state:?}");
        }
    }

    #[test]
    fn a_chunk_waiting_for_its_pair_is_due_when_its_wait_ends() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        // Alone, waiting: due in the future, not now.
        let held = now - ms(10) + PAIR_HOLD;
        assert_eq!(
            vad_batch_due([(Some(held), Some(now))].into_iter(), Duration::ZERO, now),
            Some(held)
        );
        // Beside a call whose chunk is ready: that one is due now.
        let ready = now - ms(2);
        let calls = [(Some(held), Some(now)), (Some(ready), Some(ready))];
        assert_eq!(
            vad_batch_due(calls.into_iter(), Duration::ZERO, now),
            Some(ready)
        );
    }

    #[test]
    fn a_vad_batch_waits_for_the_other_calls_chunks_within_the_gather_window() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let gather = ms(32);
        // Nothing ready: nothing due, whatever else is coming.
        assert_eq!(
            vad_batch_due([(None, Some(now))].into_iter(), gather, now),
            None
        );
        // One call alone: due when its chunk was ready.
        let ready = now - ms(3);
        assert_eq!(
            vad_batch_due([(Some(ready), Some(ready))].into_iter(), gather, now),
            Some(ready)
        );
        // Another call's chunk is coming: wait the window from the first ready chunk.
        let calls = [(Some(ready), Some(ready)), (None, Some(now - ms(10)))];
        assert_eq!(
            vad_batch_due(calls.into_iter(), gather, now),
            Some(ready + gather)
        );
        // Every active call ready: due at once (the earliest ready time, already past).
        let calls = [
            (Some(now - ms(20)), Some(now - ms(20))),
            (Some(ready), Some(ready)),
        ];
        assert_eq!(
            vad_batch_due(calls.into_iter(), gather, now),
            Some(now - ms(20))
        );
        // A call silent for longer than GATHER_ACTIVE (a bridged leg) holds nothing back.
        let calls = [(Some(ready), Some(ready)), (None, Some(now - ms(150)))];
        assert_eq!(vad_batch_due(calls.into_iter(), gather, now), Some(ready));
        // No window: due at once.
        let calls = [(Some(ready), Some(ready)), (None, Some(now))];
        assert_eq!(
            vad_batch_due(calls.into_iter(), Duration::ZERO, now),
            Some(ready)
        );
    }

    fn handle_on(audio: Sender<AudioJob>) -> CallInference {
        let (control, _) = unbounded();
        CallInference {
            progress: Arc::new(Progress::default()),
            quiet_peak: Some(crate::vad::QUIET_PEAK),
            id: CallId(7),
            control,
            audio,
            shared: Arc::new(Shared::default()),
            capacity: 64,
            held: HeldAudio::default(),
        }
    }

    #[test]
    fn audio_goes_to_the_thread_once_per_completed_chunk_and_whole() {
        let (tx, rx) = bounded(64);
        let mut call = handle_on(tx);
        // 2 s of 20 ms frames: 62.5 chunks of 256 samples, so 62 sends, not 100.
        let pcm: Vec<i16> = (0..16_000).map(|i| (i % 1000) as i16).collect();
        for frame in pcm.chunks(160) {
            call.push_pcm(frame).expect("push");
        }
        let jobs: Vec<AudioJob> = rx.try_iter().collect();
        assert_eq!(jobs.len(), 62);
        // Each send completes exactly one chunk at the thread, in order and whole; what is still
        // held (the last half chunk) completes none.
        let mut sent = 0usize;
        for job in &jobs {
            assert_eq!(
                sent / VAD_CHUNK_SAMPLES + 1,
                (sent + job.samples.len()) / VAD_CHUNK_SAMPLES
            );
            assert_eq!(job.samples, pcm[sent..sent + job.samples.len()]);
            sent += job.samples.len();
        }
        assert_eq!(pcm.len() - sent, call.held.narrow.len());
        assert!(call.held.narrow.len() < VAD_CHUNK_SAMPLES);
    }

    /// A send the full queue drops moves no chunk boundary: what the thread gets next still
    /// completes exactly one chunk a send. (Counted as sent, the dropped audio had shifted the
    /// handle's boundaries from the thread's: the third send below then completed none, a wake
    /// for nothing, and its chunk waited for the next send.)
    #[test]
    fn after_a_full_queue_each_send_still_completes_one_chunk() {
        let (tx, rx) = bounded(1);
        let mut call = handle_on(tx);
        let pcm: Vec<i16> = (0..6_400).map(|i| (i % 1000) as i16).collect();
        let mut full = 0;
        let mut got: Vec<AudioJob> = Vec::new();
        for (k, frame) in pcm.chunks(160).enumerate() {
            if call.push_pcm(frame).is_err() {
                full += 1;
            }
            // The thread takes what is queued after the 4th frame and the 31st.
            if k == 3 || k == 30 {
                got.extend(rx.try_iter());
            }
        }
        got.extend(rx.try_iter());
        let mut at_thread = 0usize;
        for job in &got {
            assert_eq!(
                at_thread / VAD_CHUNK_SAMPLES + 1,
                (at_thread + job.samples.len()) / VAD_CHUNK_SAMPLES,
                "a send of {} after {at_thread} samples",
                job.samples.len()
            );
            at_thread += job.samples.len();
        }
        // 25 chunks complete, each one attempt: 3 sent, 22 dropped by the full queue (a dropped
        // send takes its chunk only; the samples past the chunk's end stay for the next).
        assert_eq!((full, got.len()), (22, 3));
    }

    #[test]
    fn a_switch_to_wideband_sends_what_was_held_as_it_was_pushed() {
        let (tx, rx) = bounded(64);
        let mut call = handle_on(tx);
        call.push_pcm(&[1; 160]).expect("narrow");
        assert_eq!(rx.try_iter().count(), 0);
        call.push_pcm_wide(&[2; 160], &[2; 320]).expect("wide");
        let jobs: Vec<AudioJob> = rx.try_iter().collect();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].samples.len(), jobs[0].wide.len()), (160, 0));
        // Then up to the thread's chunk boundary (256 - 160 samples); the rest stays held.
        assert_eq!((jobs[1].samples.len(), jobs[1].wide.len()), (96, 192));
        assert_eq!((call.held.narrow.len(), call.held.wide.len()), (64, 128));
    }
}
