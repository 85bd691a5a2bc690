//! The seed post's experiment, side by side: a 20 ms sender next to random bursts of CPU work,
//! optionally inside a child cgroup with a CFS quota, for ontime's real-time sender, a plain
//! SCHED_OTHER thread with the same absolute deadlines, and a tokio interval task.
//!
//! ```text
//! cargo run --release --example sender_jitter -- --quota 0.5 --workers 4 --sender ontime
//! cargo run --release --example sender_jitter -- --matrix --duration 60 --csv out/ --plot out/lateness.png
//! ```
//!
//! The UDP sink standing in for the caller's phone stays outside the quota (it is another
//! machine in the post); every other thread of the process runs inside the child cgroup.

use std::fs::File;
use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use ontime::cgroup::{ChildCgroup, CpuCgroup, CpuQuota, CpuStat};
use ontime::jitter::{replay_fixed, DEFAULT_REPLAY_DEPTH};
use ontime::rtp::{Packetizer, FRAME, FRAME_BYTES, MAX_FRAME_PACKET_BYTES, PT_PCMU};
use ontime::sender::{
    EngineConfig, Sender, SenderConfig, StreamConfig, StreamOutput, LATE_TICK_THRESHOLD,
};
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// The few OS calls the experiment needs that std lacks.
#[allow(unsafe_code)]
mod os {
    use std::time::Duration;

    /// CPU time consumed by the calling thread.
    pub fn thread_cpu_time() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID exists on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// Clock ticks per second of `/proc/<pid>/stat` times.
    pub fn clock_ticks_per_second() -> u64 {
        // SAFETY: sysconf has no memory preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if ticks > 0 {
            ticks as u64
        } else {
            100
        }
    }

    /// Make the calling thread SCHED_FIFO at `priority`; false when refused.
    pub fn set_fifo(priority: i32) -> bool {
        let param = libc::sched_param {
            sched_priority: priority,
        };
        // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum SenderKind {
    /// ontime's sender: SCHED_FIFO, pinned, absolute deadlines.
    Ontime,
    /// The same absolute deadlines on an ordinary SCHED_OTHER, unpinned thread.
    Plain,
    /// A `tokio::time::interval` task on the multi-thread runtime that also runs the bursts.
    Tokio,
}

#[derive(Debug, Clone, Parser)]
#[command(
    about = "20 ms sender lateness under CPU bursts and CFS quotas (the seed post's experiment)"
)]
struct Args {
    /// CPU per burst in ms (split over --workers).
    #[arg(long, default_value_t = 60.0)]
    burst_ms: f64,
    /// Average CPU load of the bursts, in cores.
    #[arg(long, default_value_t = 0.30)]
    load: f64,
    /// Threads each burst is split over (1 or 4 in the post).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Streams the sender serves.
    #[arg(long, default_value_t = 1)]
    calls: usize,
    /// Seconds per cell.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// CFS quota of the child cgroup in cores, or "none".
    #[arg(long, default_value = "none")]
    quota: String,
    /// Which sender to run.
    #[arg(long, value_enum, default_value_t = SenderKind::Ontime)]
    sender: SenderKind,
    /// Run the post's four cells (0.5 and 1 core × 1 and 4 workers) for every sender.
    #[arg(long)]
    matrix: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Write per-tick lateness CSVs into this directory.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Draw lateness over time per sender into this PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Seed of the burst schedule (the same in every cell).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Debug, Serialize)]
struct ReplaySummary {
    discarded: u64,
    discard_pct: f64,
    max_discard_run: u64,
    packets: u64,
}

#[derive(Debug, Serialize)]
struct CellReport {
    sender: SenderKind,
    quota_cores: Option<f64>,
    in_child_cgroup: bool,
    workers: usize,
    realtime: bool,
    avg_cpu: f64,
    /// Hypervisor steal time during the cell, all CPUs summed (ms).
    steal_ms: f64,
    /// CPU of the sender thread alone (ontime and plain), fraction of a core.
    sender_thread_cpu: Option<f64>,
    nr_periods: u64,
    nr_throttled: u64,
    throttle_ratio: Option<f64>,
    ticks: u64,
    late_ticks: u64,
    worst_tick_ms: f64,
    p99_tick_ms: f64,
    replay: ReplaySummary,
    #[serde(skip)]
    lateness: Vec<TickRow>,
}

#[derive(Debug, Clone, Copy)]
struct TickRow {
    slot: u64,
    lateness: Duration,
    catch_up: bool,
}

fn parse_quota(text: &str) -> anyhow::Result<Option<f64>> {
    match text {
        "none" => Ok(None),
        t => {
            let cores: f64 = t.parse().with_context(|| format!("--quota {t:?}"))?;
            if !(cores.is_finite() && cores > 0.0) {
                bail!("--quota must be a positive number of cores or \"none\", got {t}");
            }
            Ok(Some(cores))
        }
    }
}

/// This thread's id, from `/proc/thread-self` (`<pid>/task/<tid>`).
fn current_tid() -> Option<u32> {
    std::fs::read_link("/proc/thread-self")
        .ok()?
        .file_name()?
        .to_str()?
        .parse()
        .ok()
}

/// User + system CPU time of the whole process so far.
fn process_cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Duration::from_secs_f64(ticks as f64 / os::clock_ticks_per_second() as f64)
}

/// Time the hypervisor ran something else while this VM's CPUs wanted to run (`steal` in
/// `/proc/stat`, all CPUs summed): stalls no scheduling policy inside the VM can prevent.
fn machine_steal_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let steal_ticks = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    Duration::from_secs_f64(steal_ticks as f64 / os::clock_ticks_per_second() as f64)
}

/// User + system CPU time of this process's thread named `name`, if there is one.
fn thread_cpu_time_by_name(name: &str) -> Option<Duration> {
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|i| fields.get(*i).and_then(|f| f.parse::<u64>().ok()))
            .sum();
        return Some(Duration::from_secs_f64(
            ticks as f64 / os::clock_ticks_per_second() as f64,
        ));
    }
    None
}

// ---------------------------------------------------------------------------------------------
// The sink: the caller's phone, recording arrival times, outside the quota.

struct Sink {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<(u32, u16, Duration)>>,
    tid: Option<u32>,
}

impl Sink {
    fn start() -> anyhow::Result<Sink> {
        let socket = UdpSocket::bind("127.0.0.1:0").context("bind the sink")?;
        socket.set_read_timeout(Some(Duration::from_millis(50)))?;
        let addr = socket.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sink".into())
            .spawn(move || {
                // Stamp arrivals promptly: the sink stands in for another machine, so it should
                // not add its own scheduling delay (below the sender's priority 50).
                os::set_fifo(40);
                let _ = tid_tx.send(current_tid());
                let epoch = Instant::now();
                let mut arrivals = Vec::with_capacity(1 << 16);
                let mut buf = [0u8; 1500];
                while !thread_stop.load(Ordering::Acquire) {
                    if let Ok(n) = socket.recv(&mut buf) {
                        let at = epoch.elapsed();
                        if n >= 12 {
                            let seq = u16::from_be_bytes([buf[2], buf[3]]);
                            let ssrc = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
                            arrivals.push((ssrc, seq, at));
                        }
                    }
                }
                arrivals
            })?;
        let tid = tid_rx.recv().ok().flatten();
        Ok(Sink {
            addr,
            stop,
            thread,
            tid,
        })
    }

    /// Stop and replay each call's arrivals through the 40 ms fixed buffer.
    fn finish(self, calls: usize) -> ReplaySummary {
        self.stop.store(true, Ordering::Release);
        let arrivals = self.thread.join().unwrap_or_default();
        let mut summary = ReplaySummary {
            discarded: 0,
            discard_pct: 0.0,
            max_discard_run: 0,
            packets: 0,
        };
        for call in 0..calls as u32 {
            let mine: Vec<(u16, Duration)> = arrivals
                .iter()
                .filter(|a| a.0 == call)
                .map(|a| (a.1, a.2))
                .collect();
            let Some(first) = mine.first().map(|a| a.0) else {
                continue;
            };
            // Sequence numbers start at 0 per call; fewer than 65 536 packets per cell.
            let indexed: Vec<(u64, Duration)> = mine
                .iter()
                .map(|(seq, at)| (u64::from(seq.wrapping_sub(first)), *at))
                .collect();
            let report = replay_fixed(DEFAULT_REPLAY_DEPTH, &indexed);
            summary.discarded += report.discarded;
            summary.packets += report.packets;
            summary.max_discard_run = summary.max_discard_run.max(report.max_discard_run);
        }
        if summary.packets > 0 {
            summary.discard_pct = 100.0 * summary.discarded as f64 / summary.packets as f64;
        }
        summary
    }
}

// ---------------------------------------------------------------------------------------------
// Bursts.

/// Burst start times: exponential gaps with mean burst/load, so the bursts average `load` cores.
fn burst_schedule(args: &Args, duration: Duration) -> Vec<Duration> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mean_gap_s = args.burst_ms / 1000.0 / args.load.max(1e-6);
    let mut t = 0.0;
    let mut starts = Vec::new();
    loop {
        let u: f64 = 1.0 - rng.random::<f64>();
        t += -u.ln() * mean_gap_s;
        if t >= duration.as_secs_f64() {
            return starts;
        }
        starts.push(Duration::from_secs_f64(t));
    }
}

/// Burn `cpu` of this thread's CPU time (wall time stretches when throttled, as in the post).
fn burn(cpu: Duration) {
    let start = os::thread_cpu_time();
    let mut x = 1u64;
    while os::thread_cpu_time() - start < cpu {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
}

/// Burst workers as OS threads, fed by a dispatcher thread on the schedule.
fn run_thread_bursts(args: &Args, start: Instant, schedule: Vec<Duration>) -> Vec<JoinHandle<()>> {
    let share = Duration::from_secs_f64(args.burst_ms / 1000.0 / args.workers as f64);
    let mut handles = Vec::new();
    let mut senders = Vec::new();
    for i in 0..args.workers {
        let (tx, rx) = crossbeam_channel::unbounded::<Duration>();
        senders.push(tx);
        handles.push(
            std::thread::Builder::new()
                .name(format!("burst-{i}"))
                .spawn(move || {
                    while let Ok(cpu) = rx.recv() {
                        burn(cpu);
                    }
                })
                .expect("spawn burst worker"),
        );
    }
    handles.push(
        std::thread::Builder::new()
            .name("burst-dispatch".into())
            .spawn(move || {
                for at in schedule {
                    let now = start.elapsed();
                    if at > now {
                        std::thread::sleep(at - now);
                    }
                    for tx in &senders {
                        let _ = tx.send(share);
                    }
                }
            })
            .expect("spawn dispatcher"),
    );
    handles
}

// ---------------------------------------------------------------------------------------------
// Senders.

/// ontime's sender (real-time, pinned) or the plain thread (same engine, SCHED_OTHER, unpinned).
fn run_engine_sender(
    args: &Args,
    kind: SenderKind,
    sink: SocketAddr,
    duration: Duration,
) -> anyhow::Result<(bool, Vec<TickRow>, Option<f64>)> {
    let realtime = kind == SenderKind::Ontime;
    let sender = Sender::start(SenderConfig {
        realtime,
        pin: realtime,
        lock_memory: realtime,
        engine: EngineConfig {
            metrics: false,
            ..EngineConfig::default()
        },
        ..SenderConfig::default()
    })?;
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0")?);
    let mut producers = Vec::new();
    for call in 0..args.calls as u32 {
        let output = StreamOutput::Udp {
            socket: Arc::clone(&socket),
            remote: sink,
        };
        producers.push(sender.add_stream(StreamConfig::new(
            Packetizer::with_initial(PT_PCMU, call, 0, 0),
            output,
        ))?);
    }
    let mut rows = Vec::new();
    let started = Instant::now();
    let cpu_before = thread_cpu_time_by_name("ontime-sender");
    let end = started + duration;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(250));
        sender.drain_ticks(|t| {
            rows.push(TickRow {
                slot: t.slot,
                lateness: t.lateness,
                catch_up: t.catch_up,
            })
        });
    }
    // The sender thread's own CPU, as a fraction of a core.
    let sender_cpu = match (cpu_before, thread_cpu_time_by_name("ontime-sender")) {
        (Some(before), Some(after)) => {
            Some((after - before).as_secs_f64() / started.elapsed().as_secs_f64())
        }
        _ => None,
    };
    drop(producers);
    let realtime = sender.is_realtime();
    sender.stop();
    Ok((realtime, rows, sender_cpu))
}

/// A `tokio::time::interval` sender on a multi-thread runtime that also runs the bursts.
fn run_tokio(
    args: &Args,
    sink: SocketAddr,
    duration: Duration,
    schedule: Vec<Duration>,
) -> anyhow::Result<Vec<TickRow>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let calls = args.calls;
    let share = Duration::from_secs_f64(args.burst_ms / 1000.0 / args.workers as f64);
    let workers = args.workers;
    runtime.block_on(async move {
        let start = tokio::time::Instant::now();
        // The bursts run as tasks on the same runtime, as model code on an event loop would.
        let bursts = tokio::spawn(async move {
            for at in schedule {
                tokio::time::sleep_until(start + at).await;
                for _ in 0..workers {
                    tokio::spawn(async move { burn(share) });
                }
            }
        });
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
        let mut packetizers: Vec<Packetizer> = (0..calls as u32)
            .map(|c| Packetizer::with_initial(PT_PCMU, c, 0, 0))
            .collect();
        let mut interval = tokio::time::interval_at(start + FRAME, FRAME);
        // Burst (the default): missed ticks fire at once, i.e. catch-up like the other senders.
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let payload = [0xFFu8; FRAME_BYTES];
        let mut packet = [0u8; MAX_FRAME_PACKET_BYTES];
        let mut rows = Vec::new();
        let mut slot = 0u64;
        let end = start + duration;
        loop {
            let scheduled = interval.tick().await;
            if scheduled >= end {
                break;
            }
            let now = tokio::time::Instant::now();
            let lateness = now.saturating_duration_since(scheduled);
            for p in &mut packetizers {
                let len = p.write_frame(&payload, &mut packet)?;
                let _ = socket.try_send_to(&packet[..len], sink);
            }
            rows.push(TickRow {
                slot,
                lateness,
                // A later slot is already due: this one is being caught up.
                catch_up: now >= scheduled + FRAME,
            });
            slot += 1;
        }
        bursts.abort();
        anyhow::Ok(rows)
    })
}

// ---------------------------------------------------------------------------------------------
// One cell.

/// Create the child cgroup and move every thread but the sink's into it.
fn enter_child_cgroup(quota_cores: f64, sink_tid: Option<u32>) -> anyhow::Result<ChildCgroup> {
    let parent = CpuCgroup::current()?;
    let quota = CpuQuota::from_cores(quota_cores, parent.quota()?.period)?;
    let name = format!("ontime-sender-jitter-{}", std::process::id());
    // With RT group scheduling a SCHED_FIFO thread needs RT runtime in its cgroup: 100 ms/s.
    let rt = parent
        .has_rt_group_scheduling()
        .then_some(Duration::from_millis(100));
    let child = parent.create_child(&name, quota, rt)?;
    // Compete like a container with CPUs of its own: on a shared machine a default-weight group
    // gets one thread's share, never reaches its quota, and measures the neighbours instead.
    child.set_cpu_weight(10_000)?;
    match parent.version() {
        ontime::cgroup::CgroupVersion::V1 => {
            let tasks = std::fs::read_dir("/proc/self/task")?;
            for entry in tasks.flatten() {
                let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                    continue;
                };
                if Some(tid) != sink_tid {
                    child.add_thread(tid)?;
                }
            }
        }
        // v2 moves whole processes: the sink goes in too.
        _ => child.add_process(std::process::id())?,
    }
    Ok(child)
}

fn run_cell(
    args: &Args,
    kind: SenderKind,
    quota: Option<f64>,
    workers: usize,
) -> anyhow::Result<CellReport> {
    let args = Args {
        workers,
        quota: quota.map_or("none".into(), |q| q.to_string()),
        sender: kind,
        matrix: false,
        csv: None,
        plot: None,
        ..args.clone()
    };
    let duration = Duration::from_secs_f64(args.duration);
    let sink = Sink::start()?;
    let child = match quota {
        Some(q) => match enter_child_cgroup(q, sink.tid) {
            Ok(child) => Some(child),
            Err(e) => {
                eprintln!("cannot run inside a {q}-core child cgroup ({e:#}); running without");
                None
            }
        },
        None => None,
    };
    let cgroup = match &child {
        Some(c) => Some(c.cgroup().clone()),
        None => CpuCgroup::current().ok(),
    };
    let stat_before = cgroup.as_ref().and_then(|c| c.stat().ok());
    let cpu_before = process_cpu_time();
    let steal_before = machine_steal_time();
    let wall = Instant::now();
    let schedule = burst_schedule(&args, duration);

    let (realtime, rows, sender_thread_cpu) = match kind {
        SenderKind::Ontime | SenderKind::Plain => {
            let bursts = run_thread_bursts(&args, Instant::now(), schedule);
            let result = run_engine_sender(&args, kind, sink.addr, duration);
            for b in bursts {
                let _ = b.join();
            }
            result?
        }
        SenderKind::Tokio => (
            false,
            run_tokio(&args, sink.addr, duration, schedule)?,
            None,
        ),
    };

    let elapsed = wall.elapsed();
    let avg_cpu = (process_cpu_time() - cpu_before).as_secs_f64() / elapsed.as_secs_f64();
    let steal_ms = machine_steal_time()
        .saturating_sub(steal_before)
        .as_secs_f64()
        * 1000.0;
    let delta = match (cgroup.as_ref().and_then(|c| c.stat().ok()), stat_before) {
        (Some(after), Some(before)) => after.since(&before),
        _ => CpuStat::default().since(&CpuStat::default()),
    };
    let in_child_cgroup = child.is_some();
    if let Some(child) = child {
        child.remove().context("remove the child cgroup")?;
    }
    let replay = sink.finish(args.calls);

    let mut sorted: Vec<Duration> = rows.iter().map(|r| r.lateness).collect();
    sorted.sort_unstable();
    let p99 = if sorted.is_empty() {
        Duration::ZERO
    } else {
        sorted[((sorted.len() as f64 * 0.99).ceil() as usize).clamp(1, sorted.len()) - 1]
    };
    Ok(CellReport {
        sender: kind,
        quota_cores: quota,
        in_child_cgroup,
        workers,
        realtime,
        avg_cpu,
        steal_ms,
        sender_thread_cpu,
        nr_periods: delta.periods,
        nr_throttled: delta.throttled,
        throttle_ratio: delta.throttle_ratio(),
        ticks: rows.len() as u64,
        late_ticks: rows
            .iter()
            .filter(|r| r.lateness > LATE_TICK_THRESHOLD)
            .count() as u64,
        worst_tick_ms: sorted.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        p99_tick_ms: p99.as_secs_f64() * 1000.0,
        replay,
        lateness: rows,
    })
}

// ---------------------------------------------------------------------------------------------
// Output.

fn quota_label(q: Option<f64>) -> String {
    q.map_or("none".into(), |q| format!("{q}"))
}

fn print_table(cells: &[CellReport]) {
    println!(
        "{:<7} {:>5} {:>3} {:>4} {:>7} {:>7} {:>9} {:>6} {:>6} {:>5} {:>9} {:>7} {:>9} {:>6} {:>7} {:>8}",
        "sender",
        "quota",
        "wrk",
        "rt",
        "avg_cpu",
        "periods",
        "throttled",
        "ratio",
        "ticks",
        "late",
        "worst_ms",
        "p99_ms",
        "discarded",
        "disc%",
        "max_run",
        "steal_ms"
    );
    for c in cells {
        println!(
            "{:<7} {:>5} {:>3} {:>4} {:>7.3} {:>7} {:>9} {:>6} {:>6} {:>5} {:>9.1} {:>7.2} {:>9} {:>6.2} {:>7} {:>8.0}",
            format!("{:?}", c.sender).to_lowercase(),
            quota_label(c.quota_cores) + if c.quota_cores.is_some() && !c.in_child_cgroup { "!" } else { "" },
            c.workers,
            if c.realtime { "yes" } else { "no" },
            c.avg_cpu,
            c.nr_periods,
            c.nr_throttled,
            c.throttle_ratio.map_or("-".into(), |r| format!("{r:.3}")),
            c.ticks,
            c.late_ticks,
            c.worst_tick_ms,
            c.p99_tick_ms,
            c.replay.discarded,
            c.replay.discard_pct,
            c.replay.max_discard_run,
            c.steal_ms,
        );
    }
}

fn write_csvs(dir: &Path, cells: &[CellReport]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for c in cells {
        let name = format!(
            "{}-quota{}-workers{}.csv",
            format!("{:?}", c.sender).to_lowercase(),
            quota_label(c.quota_cores),
            c.workers
        );
        let mut f = File::create(dir.join(&name))?;
        writeln!(f, "slot,scheduled_ms,lateness_ms,catch_up")?;
        for r in &c.lateness {
            writeln!(
                f,
                "{},{},{:.3},{}",
                r.slot,
                (r.slot + 1) * u64::from(ontime::rtp::FRAME_MS),
                r.lateness.as_secs_f64() * 1000.0,
                r.catch_up
            )?;
        }
    }
    Ok(())
}

fn plot(path: &Path, cells: &[CellReport]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let mut groups: Vec<(Option<f64>, usize)> = Vec::new();
    for c in cells {
        if !groups.contains(&(c.quota_cores, c.workers)) {
            groups.push((c.quota_cores, c.workers));
        }
    }
    let root = BitMapBackend::new(path, (1200, 300 * groups.len() as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((groups.len(), 1));
    for (panel, (quota, workers)) in panels.iter().zip(&groups) {
        let mine: Vec<&CellReport> = cells
            .iter()
            .filter(|c| c.quota_cores == *quota && c.workers == *workers)
            .collect();
        let max_ms = mine
            .iter()
            .map(|c| c.worst_tick_ms)
            .fold(25.0_f64, f64::max);
        let max_s = mine
            .iter()
            .filter_map(|c| c.lateness.last())
            .map(|r| (r.slot + 1) as f64 * FRAME.as_secs_f64())
            .fold(1.0_f64, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("quota {} cores, {workers} workers", quota_label(*quota)),
                ("sans-serif", 18),
            )
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..max_s, 0.0..max_ms * 1.05)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("tick lateness (ms)")
            .draw()?;
        chart.draw_series(LineSeries::new(
            [
                (0.0, LATE_TICK_THRESHOLD.as_secs_f64() * 1000.0),
                (max_s, 20.0),
            ],
            BLACK.mix(0.4),
        ))?;
        for c in mine {
            let color = match c.sender {
                SenderKind::Ontime => GREEN.to_rgba(),
                SenderKind::Plain => BLUE.to_rgba(),
                SenderKind::Tokio => RED.to_rgba(),
            };
            chart
                .draw_series(LineSeries::new(
                    c.lateness.iter().map(|r| {
                        (
                            (r.slot + 1) as f64 * FRAME.as_secs_f64(),
                            r.lateness.as_secs_f64() * 1000.0,
                        )
                    }),
                    color,
                ))?
                .label(format!("{:?}", c.sender).to_lowercase())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.workers == 0 || args.calls == 0 || args.duration <= 0.0 || args.burst_ms <= 0.0 {
        bail!("--workers, --calls, --duration and --burst-ms must be positive");
    }
    let cells: Vec<(SenderKind, Option<f64>, usize)> = if args.matrix {
        let mut v = Vec::new();
        for (quota, workers) in [(1.0, 1), (1.0, 4), (0.5, 1), (0.5, 4)] {
            for kind in [SenderKind::Ontime, SenderKind::Plain, SenderKind::Tokio] {
                v.push((kind, Some(quota), workers));
            }
        }
        v
    } else {
        vec![(args.sender, parse_quota(&args.quota)?, args.workers)]
    };
    let mut reports = Vec::new();
    for (kind, quota, workers) in cells {
        if !args.json {
            eprintln!(
                "running {kind:?} quota={} workers={workers} for {} s ...",
                quota_label(quota),
                args.duration
            );
        }
        reports.push(run_cell(&args, kind, quota, workers)?);
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "cells": reports }))?
        );
    } else {
        print_table(&reports);
        println!(
            "late = ticks > {} ms after their slot; replay = {} ms fixed jitter buffer on the sink's arrivals; quota marked ! = could not enter the child cgroup",
            LATE_TICK_THRESHOLD.as_millis(),
            DEFAULT_REPLAY_DEPTH.as_millis()
        );
    }
    if let Some(dir) = &args.csv {
        write_csvs(dir, &reports)?;
    }
    if let Some(path) = &args.plot {
        plot(path, &reports)?;
    }
    Ok(())
}
