//! Output: the table, the JSON document (with machine and commit) and the PNG plot.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use plotters::prelude::*;
use serde::Serialize;

use crate::run::{RunResults, Windows};
use crate::stats::StepReport;
use crate::{Error, Result};

/// The machine the run was on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// Total memory, MiB.
    pub mem_total_mb: u64,
    /// `PRETTY_NAME` from /etc/os-release.
    pub os: String,
    /// Kernel release.
    pub kernel: String,
    /// 1-minute load average when the run started (other work on the machine).
    pub load_avg_1m: Option<f64>,
}

impl Machine {
    /// Read it from /proc and /etc.
    pub fn detect() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|x| x.1.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let os = read("/etc/os-release")
            .lines()
            .find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpu_model,
            // Every CPU of the machine, not this process's affinity (a cpuset run narrows it).
            cpus: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count(),
            mem_total_mb: crate::procstat::parse_status_kib(&read("/proc/meminfo"), "MemTotal")
                .unwrap_or(0)
                / 1024,
            os,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            load_avg_1m: load_average_1m(),
        }
    }
}

/// The machine's 1-minute load average now (`/proc/loadavg`).
pub fn load_average_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, so no date crate is needed for one stamp).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_from_unix(secs)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_from_unix(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The git commit of the working directory (`unknown` outside a checkout), `-dirty` when it has
/// uncommitted changes.
pub fn git_commit() -> String {
    let out = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match out(&["rev-parse", "HEAD"]) {
        Some(head) => {
            let dirty = out(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{head}-dirty")
            } else {
                head
            }
        }
        None => "unknown".into(),
    }
}

/// The `--json` document.
#[derive(Debug, Clone, Serialize)]
pub struct JsonReport<'a> {
    /// Per step.
    pub steps: &'a [StepReport],
    /// Most calls admitted in a step with every step up to it ok (`stats::capacity`).
    pub capacity: usize,
    /// What stopped capacity growing.
    pub limited_by: &'a str,
    /// The latency rule's baseline.
    pub baseline_p50_ms: Option<f64>,
    /// Gateway memory before the first call, MiB.
    pub idle_rss_mb: Option<f64>,
    /// Memory per added call, MiB.
    pub rss_per_call_mb: Option<f64>,
    /// Where the gateway ran.
    pub placement: String,
    /// The callers' codec when it is not PCMU (`G722`); absent for PCMU, so a PCMU run's JSON
    /// reads as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codec: Option<&'static str>,
    /// Step windows.
    pub windows: Windows,
    /// The command line.
    pub command: String,
    /// UTC start time (RFC 3339).
    pub started_utc: String,
    /// The machine.
    pub machine: Machine,
    /// The git commit.
    pub commit: String,
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

/// The per-step table, one header line then one line per step.
pub fn table(steps: &[StepReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>5} {:>6} {:>5} {:>5} {:>5} {:>6} {:>5} {:>6} {:>9} {:>5} {:>9} {:>6} {:>11} {:>9} {:>4} {:>4} {:>4} {:>5} {:>6} {:>4}  ok",
        "N", "media", "cpu%", "snd%", "inf%", "io%", "thr%", "stl%", "rssMB", "late/wst", "infq", "turns", "p50", "p95", "undr/min", "offr", "adm", "ref", "fail", "cli", "cb"
    );
    for s in steps {
        let _ = writeln!(
            out,
            "{:>4} {:>5} {:>6} {:>5} {:>5} {:>5} {:>6} {:>5} {:>6} {:>9} {:>5} {:>9} {:>6} {:>11} {:>9.2} {:>4} {:>4} {:>4} {:>5} {:>6} {:>4}  {}",
            s.calls,
            s.media.name(),
            opt(s.cpu_pct, 1),
            opt(s.sender_cpu_pct, 1),
            opt(s.inference_cpu_pct, 1),
            opt(s.io_cpu_pct, 1),
            opt(s.throttle_ratio.map(|r| r * 100.0), 1),
            opt(s.core_steal_pct, 1),
            opt(s.rss_mb, 0),
            format!(
                "{}/{}",
                s.late_ticks.map_or("-".into(), |v| v.to_string()),
                opt(s.worst_tick_ms, 1)
            ),
            opt(s.inference_wait_p99_ms, 0),
            format!("{}+{}u", s.turns, s.unanswered_turns),
            opt(s.lat_p50_ms, 0),
            format!("{}/{}", opt(s.lat_p95_ms, 0), opt(s.lat_max_ms, 0)),
            s.underruns_per_min,
            s.offered,
            s.admitted,
            s.refused,
            s.failed_calls,
            opt(s.harness_lag_p99_ms, 1),
            if s.client_bound { "yes" } else { "" },
            if s.ok {
                "ok".to_owned()
            } else {
                format!("NO: {}", s.reasons.join("; "))
            },
        );
    }
    out
}

/// Turn latency (p50, p95) and gateway CPU against N, as a PNG.
pub fn plot(path: &Path, results: &RunResults, title: &str) -> Result<()> {
    let err = |e: String| Error::Plot {
        path: path.to_owned(),
        reason: e,
    };
    let steps = &results.steps;
    let max_n = steps.iter().map(|s| s.calls).max().unwrap_or(1) as f64;
    let max_lat = steps
        .iter()
        .filter_map(|s| s.lat_p95_ms)
        .fold(100.0, f64::max)
        * 1.1;
    let max_cpu = steps.iter().filter_map(|s| s.cpu_pct).fold(10.0, f64::max) * 1.1;
    let root = BitMapBackend::new(path, (1000, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let root = root
        .titled(title, ("sans-serif", 20))
        .map_err(|e| err(e.to_string()))?;
    let (top, bottom) = root.split_vertically(350);
    let mut lat = ChartBuilder::on(&top)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_n * 1.05, 0.0..max_lat)
        .map_err(|e| err(e.to_string()))?;
    lat.configure_mesh()
        .x_desc("concurrent calls")
        .y_desc("turn latency, ms")
        .draw()
        .map_err(|e| err(e.to_string()))?;
    for (label, color, pick) in [
        (
            "p50",
            BLUE,
            (|s: &StepReport| s.lat_p50_ms) as fn(&StepReport) -> Option<f64>,
        ),
        ("p95", RED, |s: &StepReport| s.lat_p95_ms),
    ] {
        let points: Vec<(f64, f64)> = steps
            .iter()
            .filter_map(|s| Some((s.calls as f64, pick(s)?)))
            .collect();
        lat.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| err(e.to_string()))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        lat.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 3, color.filled())),
        )
        .map_err(|e| err(e.to_string()))?;
    }
    lat.configure_series_labels()
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    let mut cpu = ChartBuilder::on(&bottom)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_n * 1.05, 0.0..max_cpu)
        .map_err(|e| err(e.to_string()))?;
    cpu.configure_mesh()
        .x_desc("concurrent calls")
        .y_desc("gateway CPU, % of a core")
        .draw()
        .map_err(|e| err(e.to_string()))?;
    let points: Vec<(f64, f64)> = steps
        .iter()
        .filter_map(|s| Some((s.calls as f64, s.cpu_pct?)))
        .collect();
    cpu.draw_series(LineSeries::new(points.clone(), GREEN.stroke_width(2)))
        .map_err(|e| err(e.to_string()))?;
    cpu.draw_series(
        points
            .into_iter()
            .map(|p| Circle::new(p, 3, GREEN.filled())),
    )
    .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}
