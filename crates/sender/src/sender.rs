//! The real-time thread around [`TickEngine`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use thread_priority::{
    RealtimeThreadSchedulePolicy, ThreadPriority, ThreadPriorityValue, ThreadSchedulePolicy,
};

use crate::engine::{Controller, EngineConfig, TickEngine};
use crate::stats::{SenderStats, TickSample};
use crate::{os, Error, Result, StreamConfig, StreamId, StreamProducer};

/// How to start the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderConfig {
    /// Pin the thread to one core (default true).
    pub pin: bool,
    /// Core to pin to; `None` = the last CPU of the process's affinity mask.
    pub core: Option<usize>,
    /// Try SCHED_FIFO (falls back to SCHED_OTHER with a warning when refused). Default true.
    pub realtime: bool,
    /// SCHED_FIFO priority, 1..=99 (default 50: above ordinary RT helpers, below kernel
    /// watchdogs at 99).
    pub realtime_priority: u8,
    /// Lock the whole process's memory (`mlockall(MCL_CURRENT | MCL_FUTURE)`) while the sender
    /// runs, so no page the tick touches (code included) can be reclaimed and faulted back in
    /// under memory pressure. Process-wide, so off by default: a deployment decision.
    pub lock_memory: bool,
    /// Stream, queue and trace sizes, and whether to feed the `metrics` facade.
    pub engine: EngineConfig,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            pin: true,
            core: None,
            realtime: true,
            realtime_priority: 50,
            lock_memory: false,
            engine: EngineConfig::default(),
        }
    }
}

/// The running media clock: one thread serving every stream. Stops (and joins) on drop.
pub struct Sender {
    controller: Controller,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    realtime: bool,
    core: Option<usize>,
    memory_locked: bool,
    origin: Instant,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("realtime", &self.realtime)
            .field("core", &self.core)
            .finish()
    }
}

/// The CPUs this process may run on.
fn allowed_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

impl Sender {
    /// Spawn the sender thread, pin it, try SCHED_FIFO, and start ticking. Returns once the
    /// thread is set up, so [`Sender::is_realtime`] is known.
    pub fn start(config: SenderConfig) -> Result<Sender> {
        let allowed = allowed_cores();
        let core = match config.core {
            Some(core) if !allowed.contains(&core) => {
                return Err(Error::CoreNotAllowed { core, allowed });
            }
            Some(core) => Some(core),
            None => allowed.last().copied(),
        }
        .filter(|_| config.pin);
        if config.engine.metrics {
            crate::describe_metrics();
        }
        let memory_locked = config.lock_memory
            && match os::lock_all_memory() {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "could not lock memory (mlockall)");
                    false
                }
            };
        let (mut engine, controller) = TickEngine::new(config.engine);
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = crossbeam_channel::bounded::<(bool, Instant, i32)>(1);
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("ontime-sender".into())
            .spawn(move || {
                prefault_stack();
                let pinned = core
                    .is_some_and(|id| core_affinity::set_for_current(core_affinity::CoreId { id }));
                if config.pin && !pinned {
                    tracing::warn!(?core, "sender thread not pinned to a core");
                }
                let realtime = config.realtime && become_realtime(config.realtime_priority);
                engine.set_realtime(realtime);
                // The schedule's origin on both clocks (CLOCK_MONOTONIC, which `Instant` also
                // reads), so callers can place a slot's `scheduled` time on their own timeline.
                let origin_ns = os::monotonic_now_ns();
                let origin = Instant::now();
                let _ = ready_tx.send((realtime, origin, os::thread_id()));
                tick_loop(&mut engine, &thread_stop, origin_ns);
            })
            .map_err(Error::Spawn)?;
        let (realtime, origin, tid) = ready_rx.recv().map_err(|_| Error::ThreadExited)?;
        controller.watch_thread(tid, core);
        if realtime {
            tracing::info!(?core, "sender thread runs SCHED_FIFO");
        } else {
            tracing::warn!(
                ?core,
                wished = config.realtime,
                "sender thread runs SCHED_OTHER (best effort): CFS quota throttling can freeze it"
            );
        }
        if config.engine.metrics {
            controller.publish_metrics();
        }
        Ok(Sender {
            controller,
            stop,
            thread: Some(thread),
            realtime,
            core,
            memory_locked,
            origin,
        })
    }

    /// When slot 0's schedule started: slot `k` is due at `origin + (k + 1) × 20 ms`, and
    /// [`crate::PacketInfo::scheduled`] / [`crate::SentFrame::scheduled`] count from here.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The thread runs SCHED_FIFO.
    pub fn is_realtime(&self) -> bool {
        self.realtime
    }

    /// The core the thread is pinned to, if any.
    pub fn core(&self) -> Option<usize> {
        self.core
    }

    /// A cloneable handle for adding/removing streams and reading stats from other threads.
    pub fn controller(&self) -> Controller {
        self.controller.clone()
    }

    /// See [`Controller::add_stream`].
    pub fn add_stream(&self, config: StreamConfig) -> Result<StreamProducer> {
        self.controller.add_stream(config)
    }

    /// See [`Controller::remove_stream`].
    pub fn remove_stream(&self, id: StreamId) -> Result<()> {
        self.controller.remove_stream(id)
    }

    /// See [`Controller::set_remote`].
    pub fn set_remote(&self, id: StreamId, remote: SocketAddr) -> Result<()> {
        self.controller.set_remote(id, remote)
    }

    /// See [`Controller::send_dtmf`].
    pub fn send_dtmf(&self, id: StreamId, payload_type: u8, digits: &str) -> Result<Duration> {
        self.controller.send_dtmf(id, payload_type, digits)
    }

    /// See [`Controller::stats`].
    pub fn stats(&self) -> SenderStats {
        self.controller.stats()
    }

    /// See [`Controller::drain_ticks`].
    pub fn drain_ticks(&self, each: impl FnMut(TickSample)) -> usize {
        self.controller.drain_ticks(each)
    }

    /// See [`Controller::publish_metrics`].
    pub fn publish_metrics(&self) {
        self.controller.publish_metrics()
    }

    /// Stop the thread (within one tick) and wait for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if std::mem::take(&mut self.memory_locked) {
            os::unlock_all_memory();
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Touch the stack the tick will use, so its pages are mapped before the first deadline.
fn prefault_stack() {
    let stack = [0u8; 64 * 1024];
    std::hint::black_box(&stack);
}

/// Ask for SCHED_FIFO; false (and a log line from the caller) when the OS refuses.
fn become_realtime(priority: u8) -> bool {
    let Ok(value) = ThreadPriorityValue::try_from(priority.clamp(1, 99)) else {
        return false;
    };
    match thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        ThreadPriority::Crossplatform(value),
        ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
    ) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = ?e, "SCHED_FIFO refused");
            false
        }
    }
}

/// Sleep to each absolute deadline, then serve what is due. The origin is read once; every
/// deadline is origin + k × 20 ms, so a late wake never shifts the schedule.
fn tick_loop(engine: &mut TickEngine, stop: &AtomicBool, origin_ns: u64) {
    let mut now = || Duration::from_nanos(os::monotonic_now_ns().saturating_sub(origin_ns));
    while !stop.load(Acquire) {
        let deadline = engine.poll_timeout();
        os::sleep_until_ns(origin_ns + u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX));
        if stop.load(Acquire) {
            break;
        }
        engine.run_due(&mut now);
    }
}
