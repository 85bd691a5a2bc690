//! The tick itself, sans-IO: [`TickEngine`] serves every slot that is due at an injected "now";
//! [`crate::Sender`] wraps it in the real-time thread with the real clock.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender as ChannelSender, TryRecvError, TrySendError};
use ontime_rtp::FRAME;
use ringbuf::traits::{Consumer, Producer, Split};
use ringbuf::{HeapCons, HeapProd, HeapRb};

use crate::dtmf::DtmfSequence;
use crate::metrics_names as names;
use crate::os::RawSocketAddr;
use crate::stats::{SenderCounters, SenderStats, TickSample};
use crate::stream::{new_stream, SlotScratch, StreamState};
use crate::witness::ThreadWitness;
use crate::{Error, Result, StreamConfig, StreamId, StreamProducer};

/// Sizes fixed when the engine starts (everything the tick needs is allocated up front).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most streams served at once (default 1024).
    pub max_streams: usize,
    /// Add/remove requests that may wait for the next tick (default 256).
    pub control_capacity: usize,
    /// Tick samples kept for [`Controller::drain_ticks`] (default 4096 = 82 s of ticks).
    pub tick_trace_capacity: usize,
    /// Feed the `metrics` facade in [`Controller::publish_metrics`] (default true).
    pub metrics: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_streams: 1024,
            control_capacity: 256,
            tick_trace_capacity: 4096,
            metrics: true,
        }
    }
}

enum Control {
    Add(Box<StreamState>),
    Remove(StreamId),
    SetRemote(StreamId, RawSocketAddr),
    /// Inline symbols, no heap: dropping it on the tick frees nothing.
    Dtmf(StreamId, DtmfSequence),
}

/// The tick, on injected time. Slot `k` is due at `(k + 1) × 20 ms` after the engine's origin;
/// [`TickEngine::run_due`] serves every due slot once, in order, so timestamps stay continuous
/// after a late wake.
pub struct TickEngine {
    streams: Vec<StreamState>,
    control: Receiver<Control>,
    graveyard: ChannelSender<StreamState>,
    counters: Arc<SenderCounters>,
    reserved_streams: Arc<AtomicU64>,
    trace: HeapProd<TickSample>,
    next_slot: u64,
    scratch: SlotScratch,
}

/// Time of slot `k` since the origin.
fn slot_time(slot: u64) -> Duration {
    // Slots are 20 ms apart; u32 overflow would take 2.7 years of uptime.
    FRAME * u32::try_from(slot + 1).unwrap_or(u32::MAX)
}

impl TickEngine {
    /// A new engine and the controller that feeds it streams.
    pub fn new(config: EngineConfig) -> (TickEngine, Controller) {
        let max_streams = config.max_streams.max(1);
        let control_capacity = config.control_capacity.max(1);
        let (control_tx, control_rx) = crossbeam_channel::bounded(control_capacity);
        let (grave_tx, grave_rx) = crossbeam_channel::bounded(max_streams);
        let (mut trace_prod, mut trace_cons) =
            HeapRb::<TickSample>::new(config.tick_trace_capacity.max(1)).split();
        // Touch every slot now so the tick never takes a first-touch page fault on the trace.
        let blank = TickSample {
            slot: 0,
            scheduled: Duration::ZERO,
            lateness: Duration::ZERO,
            catch_up: false,
        };
        while trace_prod.try_push(blank).is_ok() {}
        trace_cons.clear();
        let counters = Arc::new(SenderCounters::default());
        let reserved_streams = Arc::new(AtomicU64::new(0));
        let engine = TickEngine {
            streams: Vec::with_capacity(max_streams),
            control: control_rx,
            graveyard: grave_tx,
            counters: Arc::clone(&counters),
            reserved_streams: Arc::clone(&reserved_streams),
            trace: trace_prod,
            next_slot: 0,
            scratch: SlotScratch::default(),
        };
        let controller = Controller {
            inner: Arc::new(ControllerInner {
                control: control_tx,
                graveyard: grave_rx,
                counters,
                reserved_streams,
                trace: Mutex::new(trace_cons),
                next_id: AtomicU64::new(1),
                max_streams,
                control_capacity,
                metrics: config.metrics,
                witness: Mutex::new(None),
            }),
        };
        (engine, controller)
    }

    /// When the next slot is due, since the origin.
    pub fn poll_timeout(&self) -> Duration {
        slot_time(self.next_slot)
    }

    /// Streams being served.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Apply queued adds/removes, drop streams whose producer is gone, then serve every slot due
    /// at `now()` (read again before each slot, so lateness is the real send time). Allocates
    /// nothing, locks nothing.
    pub fn run_due(&mut self, now: &mut impl FnMut() -> Duration) {
        self.apply_control();
        let mut current = now();
        if current < self.poll_timeout() {
            return;
        }
        // The latest slot due now; earlier ones still unserved are catch-up.
        let last_due = (current.as_nanos() / FRAME.as_nanos()) as u64 - 1;
        while self.next_slot <= last_due {
            let slot = self.next_slot;
            let scheduled = slot_time(slot);
            let lateness = current.saturating_sub(scheduled);
            let catch_up = slot < last_due;
            self.counters.record_tick(lateness);
            if self
                .trace
                .try_push(TickSample {
                    slot,
                    scheduled,
                    lateness,
                    catch_up,
                })
                .is_err()
            {
                self.counters.trace_dropped.fetch_add(1, Relaxed);
            }
            for stream in &mut self.streams {
                stream.serve_slot(
                    slot,
                    scheduled,
                    lateness,
                    catch_up,
                    &mut self.scratch,
                    &self.counters,
                );
            }
            self.next_slot += 1;
            if self.next_slot <= last_due {
                current = now();
            }
        }
    }

    fn apply_control(&mut self) {
        loop {
            match self.control.try_recv() {
                Ok(Control::Add(stream)) => {
                    // Never reallocates: the controller reserves a place before sending.
                    if self.streams.len() < self.streams.capacity() {
                        self.streams.push(*stream);
                    } else {
                        self.bury(*stream);
                    }
                }
                Ok(Control::Remove(id)) => {
                    if let Some(i) = self.streams.iter().position(|s| s.id == id) {
                        let stream = self.streams.swap_remove(i);
                        self.bury(stream);
                    }
                }
                Ok(Control::SetRemote(id, remote)) => {
                    if let Some(s) = self.streams.iter_mut().find(|s| s.id == id) {
                        s.set_remote(remote);
                    }
                }
                Ok(Control::Dtmf(id, sequence)) => {
                    if let Some(s) = self.streams.iter_mut().find(|s| s.id == id) {
                        s.queue_dtmf(&sequence);
                    }
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let mut i = 0;
        while i < self.streams.len() {
            if self.streams[i].is_closed() {
                let stream = self.streams.swap_remove(i);
                self.bury(stream);
            } else {
                i += 1;
            }
        }
        self.counters
            .streams
            .store(self.streams.len() as u64, Relaxed);
    }

    /// Hand a removed stream back to the controller so its rings are freed off the tick.
    fn bury(&mut self, stream: StreamState) {
        stream.shared.removed.store(true, Release);
        self.reserved_streams.fetch_sub(1, Relaxed);
        // Full only if the controller was never called again; then free here (rare).
        let _ = self.graveyard.try_send(stream);
    }

    /// Tell the engine whether its thread runs real-time (reported in stats and metrics).
    pub fn set_realtime(&self, realtime: bool) {
        self.counters.realtime.store(realtime, Relaxed);
    }
}

struct ControllerInner {
    control: ChannelSender<Control>,
    graveyard: Receiver<StreamState>,
    counters: Arc<SenderCounters>,
    reserved_streams: Arc<AtomicU64>,
    trace: Mutex<HeapCons<TickSample>>,
    next_id: AtomicU64,
    max_streams: usize,
    control_capacity: usize,
    metrics: bool,
    /// The tick thread's OS counters, read by each publish (set once the thread runs).
    witness: Mutex<Option<ThreadWitness>>,
}

/// Adds and removes streams and reads the accounting; cheap to clone, usable from any thread.
/// Never blocks: requests go through a bounded queue the tick drains every 20 ms.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<ControllerInner>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Controller {
    /// Add a stream; it is served from the next tick on. Returns its producer handle.
    pub fn add_stream(&self, config: StreamConfig) -> Result<StreamProducer> {
        self.free_removed();
        let max = self.inner.max_streams as u64;
        self.inner
            .reserved_streams
            .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
            .map_err(|_| Error::TooManyStreams {
                max_streams: self.inner.max_streams,
            })?;
        let id = StreamId(self.inner.next_id.fetch_add(1, Relaxed));
        let (state, producer) = match new_stream(id, config) {
            Ok(pair) => pair,
            Err(e) => {
                self.inner.reserved_streams.fetch_sub(1, Relaxed);
                return Err(e);
            }
        };
        if let Err(e) = self.send(Control::Add(Box::new(state))) {
            self.inner.reserved_streams.fetch_sub(1, Relaxed);
            return Err(e);
        }
        Ok(producer)
    }

    /// Stop serving a stream at the next tick (dropping its producer does the same).
    pub fn remove_stream(&self, id: StreamId) -> Result<()> {
        self.free_removed();
        self.send(Control::Remove(id))
    }

    /// Send a UDP stream to a new remote address from the next tick (e.g. after latching onto
    /// the caller's real RTP source).
    pub fn set_remote(&self, id: StreamId, remote: SocketAddr) -> Result<()> {
        self.send(Control::SetRemote(id, RawSocketAddr::new(remote)))
    }

    /// Play DTMF digits on a stream as RFC 4733 telephone-events with payload type
    /// `payload_type` (the call's negotiated telephone-event type, 96–127), from the next tick.
    /// `digits` is Twilio's `<Play digits>` syntax: `0`–`9`, `*`, `#`, `A`–`D` (either case),
    /// and `w` for a 0.5 s pause; 1 to [`crate::MAX_DTMF_SYMBOLS`] symbols. Each digit is a
    /// [`crate::DTMF_TONE`] tone followed by a [`crate::DTMF_GAP`] of silence.
    ///
    /// Returns how long the sequence takes to play. Meanwhile the stream's queued audio waits
    /// (nothing is consumed or counted as an underrun) and plays after it; `clear()` still
    /// discards queued audio but does not cut the digits. A sequence sent while another is
    /// playing is queued behind it when both fit in [`crate::MAX_DTMF_SYMBOLS`], and otherwise
    /// dropped whole and counted in [`crate::StreamStats::dtmf_dropped`]. An unknown stream id
    /// is ignored, as by [`Controller::set_remote`].
    pub fn send_dtmf(&self, id: StreamId, payload_type: u8, digits: &str) -> Result<Duration> {
        let sequence = DtmfSequence::parse(payload_type, digits)?;
        let duration = sequence.duration();
        self.send(Control::Dtmf(id, sequence))?;
        Ok(duration)
    }

    fn send(&self, control: Control) -> Result<()> {
        self.inner.control.try_send(control).map_err(|e| match e {
            TrySendError::Full(_) => Error::ControlQueueFull {
                capacity: self.inner.control_capacity,
            },
            TrySendError::Disconnected(_) => Error::Stopped,
        })
    }

    /// Watch the tick thread `tid` (pinned to `core`): each publish then reads its OS counters,
    /// and a late tick's log line carries them.
    pub(crate) fn watch_thread(&self, tid: i32, core: Option<usize>) {
        *self
            .inner
            .witness
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(ThreadWitness::new(tid, core));
    }

    /// Free the memory of streams the tick has removed.
    fn free_removed(&self) {
        while self.inner.graveyard.try_recv().is_ok() {}
    }

    /// The sender-wide accounting so far.
    pub fn stats(&self) -> SenderStats {
        self.inner.counters.snapshot()
    }

    /// Take the tick samples recorded since the last drain (oldest first), feeding each into the
    /// `ontime_sender_tick_lateness_seconds` histogram when metrics are on. Returns how many.
    pub fn drain_ticks(&self, mut each: impl FnMut(TickSample)) -> usize {
        let mut trace = self
            .inner
            .trace
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let histogram = self
            .inner
            .metrics
            .then(|| metrics::histogram!(names::TICK_LATENESS_SECONDS));
        let mut n = 0;
        while let Some(sample) = trace.try_pop() {
            if let Some(h) = &histogram {
                h.record(sample.lateness.as_secs_f64());
            }
            each(sample);
            n += 1;
        }
        n
    }

    /// Copy the atomics into the `metrics` facade (the `ontime_sender_*` series and
    /// `rtp_packets_sent_total`). Call it about once a second from any thread but the tick; it
    /// also drains the tick trace into the lateness histogram.
    pub fn publish_metrics(&self) {
        self.free_removed();
        if !self.inner.metrics {
            return;
        }
        // Each late tick is an incident to explain (call set-up on the core, a page fault, the
        // VM): say when it happened, once per drain, so its time can be laid beside the log's
        // other events and the host's steal counters. Here, not on the tick.
        let mut late = 0u64;
        let mut worst: Option<TickSample> = None;
        self.drain_ticks(|t| {
            if t.lateness > crate::LATE_TICK_THRESHOLD {
                late += 1;
                if worst.is_none_or(|w| t.lateness > w.lateness) {
                    worst = Some(t);
                }
            }
        });
        // Read every publish, so each window is the second or so that holds the drained ticks.
        let mut witness = self
            .inner
            .witness
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let window = witness.as_mut().and_then(ThreadWitness::advance);
        if let Some(w) = worst {
            let c = window.unwrap_or_default();
            let ms = |ticks| witness.as_ref().map_or(0.0, |wt| wt.ticks_ms(ticks));
            tracing::warn!(
                late_ticks = late,
                worst_late_ms = w.lateness.as_secs_f64() * 1e3,
                worst_slot_at_s = w.scheduled.as_secs_f64(),
                counted = window.is_some(),
                thread_ran_ms = c.run_ns as f64 / 1e6,
                runqueue_wait_ms = c.runqueue_wait_ns as f64 / 1e6,
                involuntary_switches = c.involuntary_switches,
                minor_faults = c.minor_faults,
                major_faults = c.major_faults,
                core_steal_ms = ms(c.core_steal_ticks),
                core_irq_ms = ms(c.core_irq_ticks),
                core_softirq_ms = ms(c.core_softirq_ticks),
                "sender ticks served late"
            );
        }
        drop(witness);
        let s = self.stats();
        metrics::counter!(names::TICKS_TOTAL).absolute(s.ticks);
        metrics::counter!(names::LATE_TICKS_TOTAL).absolute(s.late_ticks);
        metrics::counter!(names::CATCHUP_PACKETS_TOTAL).absolute(s.catchup_packets);
        metrics::counter!(names::UNDERRUNS_TOTAL).absolute(s.underruns);
        metrics::counter!(names::RTP_PACKETS_SENT_TOTAL).absolute(s.packets_sent);
        metrics::gauge!(names::REALTIME).set(if s.realtime { 1.0 } else { 0.0 });
    }
}
