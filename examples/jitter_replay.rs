//! Replay a sender-lateness (or arrival) trace against a receiver's jitter buffer and report what
//! the caller's phone would have played, discarded and lost (packet `i` plays at the first
//! arrival + depth + i·20 ms; later is discarded).
//!
//! ```text
//! cargo run --example jitter_replay -- [--buffer-ms 40] [--adaptive] TRACE.csv [--json] [--arrivals]
//! ```
//! TRACE.csv: optional header, then `seq,lateness_ms` (the packet left at `seq·20 ms + lateness`)
//! or, with `--arrivals`, `seq,arrival_ms`. `--adaptive` replays through ontime's adaptive live
//! buffer (`--buffer-ms` is then its initial depth) and reports the delay it added.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ontime::jitter::{
    parse_trace, replay_adaptive, replay_fixed, JitterConfig, ReplayModel, ReplayReport, TraceKind,
    DEFAULT_REPLAY_DEPTH,
};
use serde::Serialize;

#[derive(Parser, Debug)]
#[command(about = "Replay a lateness/arrival trace against a fixed or adaptive jitter buffer")]
struct Args {
    /// Fixed buffer depth in ms (with --adaptive: the initial depth).
    #[arg(long, default_value_t = DEFAULT_REPLAY_DEPTH.as_millis() as u64)]
    buffer_ms: u64,
    /// Replay through the adaptive live buffer instead of a fixed one.
    #[arg(long)]
    adaptive: bool,
    /// Adaptive buffer: minimum depth in ms.
    #[arg(long, default_value_t = JitterConfig::default().min_depth.as_millis() as u64)]
    min_ms: u64,
    /// Adaptive buffer: maximum depth in ms.
    #[arg(long, default_value_t = JitterConfig::default().max_depth.as_millis() as u64)]
    max_ms: u64,
    /// The trace's second column is the arrival time, not the sender's lateness.
    #[arg(long)]
    arrivals: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// The trace file (CSV).
    trace: PathBuf,
}

#[derive(Serialize)]
struct JsonReport {
    trace: String,
    model: &'static str,
    buffer_ms: f64,
    min_ms: Option<f64>,
    max_ms: Option<f64>,
    packets: u64,
    duplicates: u64,
    expected: u64,
    played: u64,
    discarded: u64,
    lost: u64,
    max_discard_run: u64,
    discard_rate: f64,
    discard_rate_rfc3611: u8,
    loss_rate: f64,
    loss_rate_rfc3611: u8,
    burst_density: f64,
    burst_density_rfc3611: u8,
    gap_density: f64,
    gap_density_rfc3611: u8,
    burst_duration_ms: f64,
    gap_duration_ms: f64,
    mean_playout_delay_ms: f64,
    max_playout_delay_ms: f64,
    stretch_frames: u64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn to_json(trace: &str, r: &ReplayReport) -> JsonReport {
    let (model, buffer, min, max) = match r.model {
        ReplayModel::Fixed { depth } => ("fixed", ms(depth), None, None),
        ReplayModel::Adaptive(c) => (
            "adaptive",
            ms(c.initial_depth),
            Some(ms(c.min_depth)),
            Some(ms(c.max_depth)),
        ),
    };
    let bg = r.burst_gap;
    JsonReport {
        trace: trace.to_owned(),
        model,
        buffer_ms: buffer,
        min_ms: min,
        max_ms: max,
        packets: r.packets,
        duplicates: r.duplicates,
        expected: r.expected,
        played: r.played,
        discarded: r.discarded,
        lost: r.lost,
        max_discard_run: r.max_discard_run,
        discard_rate: r.discard_rate(),
        discard_rate_rfc3611: r.discard_rate_rfc3611(),
        loss_rate: r.loss_rate(),
        loss_rate_rfc3611: r.loss_rate_rfc3611(),
        burst_density: bg.burst_density,
        burst_density_rfc3611: bg.burst_density_rfc3611(),
        gap_density: bg.gap_density,
        gap_density_rfc3611: bg.gap_density_rfc3611(),
        burst_duration_ms: bg.burst_duration_ms,
        gap_duration_ms: bg.gap_duration_ms,
        mean_playout_delay_ms: ms(r.mean_playout_delay),
        max_playout_delay_ms: ms(r.max_playout_delay),
        stretch_frames: r.stretch_frames,
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.trace)
        .with_context(|| format!("reading trace {}", args.trace.display()))?;
    let kind = if args.arrivals {
        TraceKind::Arrivals
    } else {
        TraceKind::Lateness
    };
    let arrivals =
        parse_trace(&text, kind).with_context(|| format!("in {}", args.trace.display()))?;
    let buffer = Duration::from_millis(args.buffer_ms);
    let report = if args.adaptive {
        let cfg = JitterConfig {
            initial_depth: buffer,
            min_depth: Duration::from_millis(args.min_ms),
            max_depth: Duration::from_millis(args.max_ms),
            ..JitterConfig::default()
        };
        replay_adaptive(cfg, &arrivals).context("adaptive buffer configuration")?
    } else {
        replay_fixed(buffer, &arrivals)
    };
    let j = to_json(&args.trace.display().to_string(), &report);
    if args.json {
        println!("{}", serde_json::to_string(&j)?);
        return Ok(());
    }
    let model = match (j.min_ms, j.max_ms) {
        (Some(lo), Some(hi)) => format!(
            "adaptive (initial {:.0} ms, within {lo:.0}..{hi:.0} ms)",
            j.buffer_ms
        ),
        _ => format!("fixed {:.0} ms", j.buffer_ms),
    };
    println!("trace                 {}", j.trace);
    println!("buffer                {model}");
    println!(
        "packets received      {} ({} duplicates)",
        j.packets, j.duplicates
    );
    println!("expected              {}", j.expected);
    println!("played                {}", j.played);
    println!(
        "discarded             {} ({:.2} %, RFC 3611 {}/256)",
        j.discarded,
        100.0 * j.discard_rate,
        j.discard_rate_rfc3611
    );
    println!(
        "lost                  {} ({:.2} %, RFC 3611 {}/256)",
        j.lost,
        100.0 * j.loss_rate,
        j.loss_rate_rfc3611
    );
    println!("longest discard run   {} packets", j.max_discard_run);
    println!(
        "burst density / dur   {:.3} ({}/256) / {:.0} ms",
        j.burst_density, j.burst_density_rfc3611, j.burst_duration_ms
    );
    println!(
        "gap density / dur     {:.4} ({}/256) / {:.0} ms",
        j.gap_density, j.gap_density_rfc3611, j.gap_duration_ms
    );
    println!(
        "playout delay         mean {:.1} ms, max {:.1} ms",
        j.mean_playout_delay_ms, j.max_playout_delay_ms
    );
    if args.adaptive {
        println!("stretch frames        {}", j.stretch_frames);
    }
    Ok(())
}
