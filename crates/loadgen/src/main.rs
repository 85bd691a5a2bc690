//! `ontime-load`: the capacity harness. Places N concurrent SIP calls per step to a gateway
//! (spawned and confined like a pod, or already running), measures what callers hear, prints a
//! table and writes JSON and a plot. See docs/capacity.md. With `--soak`, keeps N calls up for a
//! long time and samples the gateway's memory, fds, sockets, threads and late ticks instead (see
//! docs/reliability.md).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use ontime_loadgen::caller::{self, CallerCodec, CallerSetup, Media};
use ontime_loadgen::gateway::{self, Placement, SpawnedGateway};
use ontime_loadgen::http::MetricsUrl;
use ontime_loadgen::report::{self, JsonReport, Machine};
use ontime_loadgen::run::{self, GatewayView, RunPlan, Windows};
use ontime_loadgen::sip::SipClient;
use ontime_loadgen::soak::{self, SoakPlan};
use ontime_loadgen::{audio, os};
use ontime_sender::{EngineConfig, Sender, SenderConfig};

/// Capacity harness: how many concurrent calls a gateway carries, as callers hear them.
#[derive(Debug, Parser)]
#[command(name = "ontime-load", version)]
struct Args {
    /// Spawn this gateway binary on free loopback ports.
    #[arg(long, conflicts_with = "target")]
    gateway: Option<PathBuf>,
    /// Call an already running gateway: sip:HOST:PORT (an IP literal).
    #[arg(long, required_unless_present = "gateway")]
    target: Option<String>,
    /// Its metrics page (with --target): http://IP:PORT/metrics.
    #[arg(long, requires = "target")]
    metrics: Option<String>,
    /// Its process id (with --target, same machine): enables the CPU and memory columns.
    #[arg(long, requires = "target")]
    gateway_pid: Option<u32>,
    /// Confine the spawned gateway to a CFS quota of this many cores (a child cgroup).
    #[arg(long, requires = "gateway", conflicts_with = "cpuset")]
    cpu_quota: Option<f64>,
    /// Confine the spawned gateway to this one core (no quota); the harness keeps off it.
    #[arg(long, requires = "gateway")]
    cpuset: Option<usize>,
    /// Extra flag for the spawned gateway (repeatable), e.g. --gateway-arg=--turn-stop-timeout=2s.
    #[arg(long, allow_hyphen_values = true)]
    gateway_arg: Vec<String>,
    /// Concurrent calls per step.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,48,64")]
    steps: Vec<usize>,
    /// The callers' media: rtp, srtp (RTP/SAVP keyed by a=crypto), or both (every step runs
    /// twice back to back, plain then SRTP; or name the order: srtp,rtp).
    #[arg(long, default_value = "rtp", value_parser = caller::parse_media_list)]
    media: std::vec::Vec<Media>,
    /// The callers' codec, the only one they offer: PCMU (the recordings' µ-law) or G722 (the
    /// recordings upsampled to 16 kHz and G.722-encoded before the run; what callers hear is
    /// decoded, in order, one decoder per call).
    #[arg(long, default_value = "PCMU", value_parser = caller::parse_codec)]
    codec: ontime_rtp::Codec,
    /// Seconds over which a step's calls are started.
    #[arg(long, default_value_t = 10.0)]
    ramp: f64,
    /// Seconds after the ramp before measuring.
    #[arg(long, default_value_t = 8.0)]
    warmup: f64,
    /// Seconds measured per step.
    #[arg(long, default_value_t = 120.0)]
    measure: f64,
    /// Stop after the first step that is not ok.
    #[arg(long)]
    stop_on_degrade: bool,
    /// Folder of caller utterances (*.ulaw.wav, 8 kHz mono µ-law).
    #[arg(long, default_value = "fixtures/callers")]
    callers: PathBuf,
    /// Seed of the callers' pauses and utterance choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Callers pause mid-sentence for MIN-MAX ms (e.g. 700-1200) in every utterance of at least
    /// 1.2 s, at a gap between two words 40–70 % into it; the step reports how many pauses the
    /// agent's reply began in (the caller was cut off). Shorter utterances are said in one go.
    #[arg(long, value_parser = parse_mid_pause)]
    mid_pause: Option<(Duration, Duration)>,
    /// With --mid-pause: the share of long utterances (0–1) that get the pause; the others are
    /// said in one go (their replies show what holding back costs a caller who pauses by habit).
    #[arg(long, default_value_t = 1.0, value_parser = parse_share)]
    mid_pause_share: f64,
    /// Seconds without agent audio after the caller stops that make a turn unanswered.
    #[arg(long, default_value_t = 10.0)]
    answer_timeout: f64,
    /// CPU for the harness's own media clock (default: the first CPU it may use).
    #[arg(long)]
    harness_core: Option<usize>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Plot turn latency and CPU against N here (PNG).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Soak instead of steps: keep --calls calls up for --duration, each lasting --call-min to
    /// --call-max and replaced when it ends; sample the gateway every --sample-interval.
    #[arg(long)]
    soak: bool,
    /// Soak: concurrent calls (with --churn: the gateway's admission limit, unless --max-calls).
    #[arg(long, default_value_t = 48)]
    calls: usize,
    /// Soak: how long calls are kept up (90s, 10m, 1h …).
    #[arg(long, default_value = "1h", value_parser = soak::parse_duration)]
    duration: Duration,
    /// Soak: time between samples.
    #[arg(long, default_value = "10s", value_parser = soak::parse_duration)]
    sample_interval: Duration,
    /// Soak: samples before this are warm-up ("RSS after warm-up" is the first one after it).
    #[arg(long, default_value = "2m", value_parser = soak::parse_duration)]
    soak_warmup: Duration,
    /// Soak: shortest call.
    #[arg(long, default_value = "20s", value_parser = soak::parse_duration)]
    call_min: Duration,
    /// Soak: longest call.
    #[arg(long, default_value = "60s", value_parser = soak::parse_duration)]
    call_max: Duration,
    /// Soak at the admission limit: more callers than the gateway admits keep calling; its 503s
    /// count as refused, not failed.
    #[arg(long, requires = "soak")]
    churn: bool,
    /// Churn: callers beyond the admission limit (default: a quarter of it, at least 4).
    #[arg(long, requires = "churn")]
    churn_extra: Option<usize>,
    /// Admission limit (--max-calls) of the spawned gateway. Default: the largest step + 4; soak:
    /// --calls + 4; churn: --calls. Below a step, that step's excess is refused (503), counted
    /// apart from failed calls.
    #[arg(long)]
    max_calls: Option<usize>,
    /// Soak: one JSON line per sample goes here.
    #[arg(long, default_value = "soak-samples.jsonl")]
    samples: PathBuf,
}

/// A share, 0 to 1.
fn parse_share(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| (0.0..=1.0).contains(v))
        .ok_or_else(|| format!("{s:?}: expected a share from 0 to 1"))
}

/// `MIN-MAX` milliseconds, MIN ≤ MAX, both at most 10 s.
fn parse_mid_pause(s: &str) -> Result<(Duration, Duration), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("--mid-pause {s:?}: expected MIN-MAX in ms, e.g. 700-1200"))?;
    let ms = |v: &str| -> Result<u64, String> {
        v.trim()
            .parse::<u64>()
            .ok()
            .filter(|&v| v <= 10_000)
            .ok_or_else(|| format!("--mid-pause {s:?}: {v:?} is not 0–10000 ms"))
    };
    let (min, max) = (ms(a)?, ms(b)?);
    if min > max {
        return Err(format!("--mid-pause {s:?}: MIN is above MAX"));
    }
    Ok((Duration::from_millis(min), Duration::from_millis(max)))
}

fn seconds(what: &str, v: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| anyhow::anyhow!("--{what} {v}: not a number of seconds"))
}

/// The local IP that routes to `peer` (no packet is sent: connect on UDP only picks a route).
fn local_ip_towards(peer: SocketAddr) -> anyhow::Result<IpAddr> {
    let any: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()?;
    let s = UdpSocket::bind(any)?;
    s.connect(peer)?;
    Ok(s.local_addr()?.ip())
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let started_utc = report::utc_now();
    if args.steps.is_empty() || args.steps.contains(&0) {
        bail!("--steps must list positive call counts, e.g. 1,4,8");
    }
    for (what, v) in [
        ("ramp", args.ramp),
        ("warmup", args.warmup),
        ("measure", args.measure),
    ] {
        seconds(what, v)?;
    }
    if args.measure <= 0.0 {
        bail!("--measure must be above 0 s");
    }
    let answer_timeout = seconds("answer-timeout", args.answer_timeout)?;
    let mid_pause = args.mid_pause;
    let utterances: Arc<[audio::Utterance]> = audio::load_callers_dir(&args.callers)
        .with_context(|| "loading caller speech (run from the workspace root or pass --callers)")?
        .into();
    let caller_codec = CallerCodec::new(args.codec, &utterances).map_err(anyhow::Error::msg)?;
    let max_calls = args.steps.iter().copied().max().unwrap_or(1);
    if args.soak && args.calls == 0 {
        bail!("--calls must be above 0");
    }
    if args.soak && args.media.len() > 1 {
        bail!("--soak runs one media kind: --media rtp or --media srtp");
    }
    if args.call_min > args.call_max {
        bail!("--call-min must not exceed --call-max");
    }
    // The gateway's admission limit, and (soak) how many callers keep calling.
    let limit = match (args.soak, args.churn) {
        (false, _) => args.max_calls.unwrap_or(max_calls + 4),
        (true, false) => args.max_calls.unwrap_or(args.calls + 4),
        (true, true) => args.max_calls.unwrap_or(args.calls),
    };
    let soak_callers = if args.churn {
        limit + args.churn_extra.unwrap_or((limit / 4).max(4))
    } else {
        args.calls
    };
    let placement = match (args.cpu_quota, args.cpuset) {
        (Some(q), _) => Placement::Quota(q),
        (None, Some(c)) => Placement::Cpuset(c),
        _ => Placement::Shared,
    };

    // Spawn before any harness thread exists, so a cpuset leaves the harness on the other cores.
    let mut spawned: Option<SpawnedGateway> = match &args.gateway {
        Some(path) => Some(gateway::start_with_limit(
            path,
            placement,
            limit,
            &args.gateway_arg,
        )?),
        None => None,
    };
    // Kernel receive timestamps switch on asynchronously: flip them on now, before any call, and
    // keep this socket open so they stay on.
    let stamp_keeper = UdpSocket::bind("127.0.0.1:0")?;
    os::enable_receive_timestamps(std::os::fd::AsRawFd::as_raw_fd(&stamp_keeper))?;
    let allowed = os::current_thread_affinity();
    let harness_core = args.harness_core.or(allowed.first().copied());
    let sender = Sender::start(SenderConfig {
        core: harness_core,
        engine: EngineConfig {
            metrics: false,
            ..EngineConfig::default()
        },
        ..SenderConfig::default()
    })
    .context("starting the harness's media clock")?;
    if !sender.is_realtime() {
        eprintln!("note: the harness's sender is not SCHED_FIFO (not root?): its own lateness is reported per step");
    }

    let controller = sender.controller();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ontime-load")
        .build()?;
    runtime.block_on(async move {
        let (destination, metrics, pid, placement_text) = match &mut spawned {
            Some(gw) => {
                gw.wait_ready().await?;
                (gw.sip, Some(gw.metrics.clone()), Some(gw.pid()), placement.to_string())
            }
            None => {
                let target = args.target.as_deref().unwrap_or_default();
                let addr: SocketAddr = target
                    .strip_prefix("sip:")
                    .unwrap_or(target)
                    .parse()
                    .with_context(|| format!("--target {target}: expected sip:IP:PORT"))?;
                let metrics = args.metrics.as_deref().map(MetricsUrl::parse).transpose()?;
                (addr, metrics, args.gateway_pid, "external".to_owned())
            }
        };
        let local_ip = local_ip_towards(destination)?;
        let sip = SipClient::start(SocketAddr::new(local_ip, 0)).await?;
        let setup = Arc::new(CallerSetup {
            sip,
            sender: controller,
            utterances,
            target_uri: format!("sip:bot@{destination}"),
            destination,
            local_ip,
            origin: Instant::now(),
            answer_timeout,
            media: args.media.first().copied().unwrap_or_default(),
            mid_pause,
            mid_pause_share: args.mid_pause_share,
            codec: caller_codec,
        });
        let view = GatewayView {
            metrics,
            pid,
            cgroup: spawned.as_ref().and_then(|g| g.cgroup.as_ref()),
            core: args.cpuset,
        };
        if args.soak {
            let plan = SoakPlan {
                callers: soak_callers,
                admission_limit: (spawned.is_some() || args.max_calls.is_some()).then_some(limit),
                churn: args.churn,
                duration_s: args.duration.as_secs_f64(),
                sample_interval_s: args.sample_interval.as_secs_f64(),
                warmup_s: args.soak_warmup.as_secs_f64(),
                ramp_s: args.ramp,
                call_min_s: args.call_min.as_secs_f64(),
                call_max_s: args.call_max.as_secs_f64(),
                seed: args.seed,
            };
            let outcome = run_soak(&args, &plan, setup, &view, &placement_text, &command, &started_utc).await;
            if let Some(gw) = &spawned {
                println!("gateway logs: {}", gw.log_dir.display());
            }
            drop(view);
            drop(spawned);
            return outcome;
        }
        let plan = RunPlan {
            steps: args.steps.clone(),
            windows: Windows {
                ramp_s: args.ramp,
                warmup_s: args.warmup,
                measure_s: args.measure,
            },
            stop_on_degrade: args.stop_on_degrade,
            seed: args.seed,
            media: args.media.clone(),
        };
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()));
        bar.enable_steady_tick(Duration::from_millis(200));
        // PCMU, the default, is not named: the line reads as it always has.
        let codec_text = match args.codec {
            ontime_rtp::Codec::Pcmu => String::new(),
            other => format!(", codec {other}"),
        };
        eprintln!(
            "ontime-load: {} steps {:?}, media {}{codec_text}, gateway {destination} ({placement_text}), windows {}+{}+{} s",
            plan.steps.len(),
            plan.steps,
            plan.media.iter().map(|m| m.name()).collect::<Vec<_>>().join(" then "),
            args.ramp,
            args.warmup,
            args.measure
        );
        let steps = run::run(&plan, setup, &view, &bar, |s| {
            let line = format!(
                "N={:<3} {:<4} {} turns {} p50 {} p95 {} undr/min {:.2} cpu {} admitted {}/{} refused {} fail {}{}",
                s.calls,
                s.media.name(),
                if s.ok { "ok " } else { "NOT ok" },
                s.turns,
                s.lat_p50_ms.map_or("-".into(), |v| format!("{v:.0}")),
                s.lat_p95_ms.map_or("-".into(), |v| format!("{v:.0}")),
                s.underruns_per_min,
                s.cpu_pct.map_or("-".into(), |v| format!("{v:.1}%")),
                s.admitted,
                s.offered,
                s.refused,
                s.failed_calls,
                if s.client_bound { " (client-bound)" } else { "" },
            );
            let p50 = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
            let line = if s.paused_turns > 0 {
                format!(
                    "{line}\n      mid-sentence pauses {}: a reply began in {} ({:.1} %); unanswered {}; \
                     answered turns (p50 ms): paused {} ({}), long in one go {} ({}), short {} ({})",
                    s.paused_turns,
                    s.replies_in_pause,
                    100.0 * s.replies_in_pause as f64 / s.paused_turns as f64,
                    s.unanswered_turns,
                    s.paused_lat.0,
                    p50(s.paused_lat.1),
                    s.one_go_lat.0,
                    p50(s.one_go_lat.1),
                    s.short_lat.0,
                    p50(s.short_lat.1),
                )
            } else {
                line
            };
            // A hidden bar (output not a terminal) prints nothing: say it on stderr then.
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
        });
        // Ctrl-C or SIGTERM: stop the run; dropping the gateway kills it and removes its cgroup.
        let results = tokio::select! {
            r = steps => r,
            signal = interrupted() => {
                bar.finish_and_clear();
                drop(view);
                drop(spawned);
                bail!("interrupted by {signal}");
            }
        };
        bar.finish_and_clear();
        print!("{}", report::table(&results.steps));
        println!(
            "capacity: {} calls (limited by {}); idle RSS {} MiB, {} MiB per call",
            results.capacity,
            results.limited_by,
            results.idle_rss_mb.map_or("-".into(), |v| format!("{v:.1}")),
            results.rss_per_call_mb.map_or("-".into(), |v| format!("{v:.2}")),
        );
        if let Some(gw) = &spawned {
            println!("gateway logs: {}", gw.log_dir.display());
        }
        if let Some(path) = &args.json {
            let doc = JsonReport {
                steps: &results.steps,
                capacity: results.capacity,
                limited_by: &results.limited_by,
                baseline_p50_ms: results.baseline_p50_ms,
                idle_rss_mb: results.idle_rss_mb,
                rss_per_call_mb: results.rss_per_call_mb,
                placement: placement_text.clone(),
                codec: (args.codec != ontime_rtp::Codec::Pcmu).then(|| args.codec.encoding_name()),
                windows: plan.windows,
                command: command.clone(),
                started_utc: started_utc.clone(),
                machine: Machine::detect(),
                commit: report::git_commit(),
            };
            std::fs::write(path, serde_json::to_string_pretty(&doc)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(path) = &args.plot {
            report::plot(path, &results, &format!("ontime-load: {placement_text}"))?;
        }
        drop(spawned);
        anyhow::Ok(())
    })?;
    sender.stop();
    drop(stamp_keeper);
    Ok(())
}

/// The first of SIGINT and SIGTERM.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// The soak mode: run it, write every sample as a JSON line to `--samples`, print the summary and
/// write it (with plan, machine and commit) to `--json`.
async fn run_soak(
    args: &Args,
    plan: &SoakPlan,
    setup: Arc<CallerSetup>,
    view: &GatewayView<'_>,
    placement: &str,
    command: &str,
    started_utc: &str,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let file = std::fs::File::create(&args.samples)
        .with_context(|| format!("creating {}", args.samples.display()))?;
    let mut out = std::io::LineWriter::new(file);
    eprintln!(
        "ontime-load soak: {} callers{}, {} s (warm-up {} s), calls {}–{} s, a sample every {} s, gateway {} ({placement}); samples in {}",
        plan.callers,
        plan.admission_limit
            .map_or(String::new(), |l| format!(" against an admission limit of {l}")),
        plan.duration_s,
        plan.warmup_s,
        plan.call_min_s,
        plan.call_max_s,
        plan.sample_interval_s,
        setup.destination,
        args.samples.display(),
    );
    let mut write_error = None;
    let results = soak::run(plan, setup, view, interrupted(), |s| {
        eprintln!("{}", soak::sample_line(s));
        let written = serde_json::to_string(s)
            .map_err(anyhow::Error::from)
            .and_then(|line| Ok(writeln!(out, "{line}")?));
        if let Err(e) = written {
            write_error.get_or_insert(e);
        }
    })
    .await;
    print!("{}", soak::summary_text(&results.summary));
    println!(
        "ended by: {}; samples: {}",
        results.ended_by,
        args.samples.display()
    );
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "mode": if plan.churn { "churn" } else { "soak" },
            "plan": plan,
            "summary": results.summary,
            "ended_by": results.ended_by,
            "samples_file": args.samples,
            "placement": placement,
            "command": command,
            "started_utc": started_utc,
            "ended_utc": report::utc_now(),
            "machine": Machine::detect(),
            "commit": report::git_commit(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(e) = write_error {
        return Err(e.context(format!("writing {}", args.samples.display())));
    }
    if results.ended_by != "duration" {
        bail!("the soak ended early: {}", results.ended_by);
    }
    Ok(())
}
