//! The CPU controller's files: quota and throttle counters, for v1 and v2.

use std::path::Path;
use std::time::Duration;

use crate::locate::parse_error;
use crate::{Error, Result};

/// A CFS bandwidth limit: `quota` of CPU time per `period` (of wall time), summed over CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuQuota {
    /// CPU time allowed per period; `None` = unlimited (`max` / `-1`).
    pub quota: Option<Duration>,
    /// The enforcement window (usually 100 ms; always read it, never assume).
    pub period: Duration,
}

impl CpuQuota {
    /// The kernel's default period.
    pub const DEFAULT_PERIOD: Duration = Duration::from_millis(100);

    /// A limit of `cores` CPUs per `period` (0.5 = 50 ms per 100 ms).
    pub fn from_cores(cores: f64, period: Duration) -> Result<CpuQuota> {
        if !cores.is_finite() || cores <= 0.0 {
            return Err(Error::InvalidQuota { cores });
        }
        // The kernel's minimum quota is 1 ms.
        let quota = period.mul_f64(cores).max(Duration::from_millis(1));
        Ok(CpuQuota {
            quota: Some(quota),
            period,
        })
    }

    /// No limit.
    pub fn unlimited(period: Duration) -> CpuQuota {
        CpuQuota {
            quota: None,
            period,
        }
    }

    /// The limit in cores (quota / period), `None` when unlimited.
    pub fn cores(&self) -> Option<f64> {
        let quota = self.quota?;
        (!self.period.is_zero()).then(|| quota.as_secs_f64() / self.period.as_secs_f64())
    }
}

/// The CPU controller's counters.
///
/// `throttled_time_summed_per_cpu` is v2 `throttled_usec` / v1 `throttled_time`: the kernel adds
/// a throttle's duration once for every CPU the group's threads were queued on, so it can exceed
/// wall time several-fold. It is never the length of a stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuStat {
    /// Enforcement periods that have elapsed while the group was runnable.
    pub nr_periods: u64,
    /// Periods in which the group ran out of quota and was throttled.
    pub nr_throttled: u64,
    /// Throttled time summed per CPU (see the type's docs).
    pub throttled_time_summed_per_cpu: Duration,
    /// CPU time used (v2 `usage_usec`; v1 keeps it in the cpuacct controller: `None`).
    pub usage: Option<Duration>,
}

impl CpuStat {
    /// What changed between `earlier` and `self` (saturating, so a counter reset reads as 0).
    pub fn since(&self, earlier: &CpuStat) -> CpuStatDelta {
        CpuStatDelta {
            periods: self.nr_periods.saturating_sub(earlier.nr_periods),
            throttled: self.nr_throttled.saturating_sub(earlier.nr_throttled),
            throttled_time_summed_per_cpu: self
                .throttled_time_summed_per_cpu
                .saturating_sub(earlier.throttled_time_summed_per_cpu),
            usage: match (self.usage, earlier.usage) {
                (Some(now), Some(then)) => Some(now.saturating_sub(then)),
                _ => None,
            },
        }
    }
}

/// The change of [`CpuStat`] over an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuStatDelta {
    /// Δnr_periods.
    pub periods: u64,
    /// Δnr_throttled.
    pub throttled: u64,
    /// Δ throttled time, summed per CPU (not a stall's length).
    pub throttled_time_summed_per_cpu: Duration,
    /// Δ CPU usage when known (v2).
    pub usage: Option<Duration>,
}

impl CpuStatDelta {
    /// Throttle ratio Δnr_throttled / Δnr_periods: the share of CFS periods in which the cgroup
    /// hit its quota; `None` when no period elapsed.
    pub fn throttle_ratio(&self) -> Option<f64> {
        (self.periods > 0).then(|| self.throttled as f64 / self.periods as f64)
    }
}

fn parse_u64(file: &Path, token: &str, reason: &'static str) -> Result<u64> {
    token
        .trim()
        .parse()
        .map_err(|_| parse_error(file, token, reason))
}

/// Parse v2 `cpu.max`: `"max 100000"` or `"50000 100000"` (microseconds).
pub fn parse_cpu_max(text: &str, file: &Path) -> Result<CpuQuota> {
    let mut parts = text.split_whitespace();
    let (Some(quota), Some(period), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(parse_error(file, text, "expected \"<quota|max> <period>\""));
    };
    let period = parse_u64(file, period, "period is not a number of microseconds")?;
    let quota = match quota {
        "max" => None,
        q => Some(Duration::from_micros(parse_u64(
            file,
            q,
            "quota is neither \"max\" nor a number of microseconds",
        )?)),
    };
    Ok(CpuQuota {
        quota,
        period: Duration::from_micros(period),
    })
}

/// Parse v1 `cpu.cfs_quota_us` (`-1` = unlimited) and `cpu.cfs_period_us`.
pub fn parse_cfs_quota(
    quota_text: &str,
    quota_file: &Path,
    period_text: &str,
    period_file: &Path,
) -> Result<CpuQuota> {
    let period = parse_u64(
        period_file,
        period_text,
        "period is not a number of microseconds",
    )?;
    let quota = match quota_text.trim() {
        "-1" => None,
        q => Some(Duration::from_micros(parse_u64(
            quota_file,
            q,
            "quota is neither -1 nor a number of microseconds",
        )?)),
    };
    Ok(CpuQuota {
        quota,
        period: Duration::from_micros(period),
    })
}

/// Parse `cpu.stat` of either version (v1 `throttled_time` is in ns, v2 `throttled_usec` in µs).
/// Unknown keys are ignored (kernels add them); `nr_periods` and `nr_throttled` are required.
pub fn parse_cpu_stat(text: &str, file: &Path) -> Result<CpuStat> {
    let mut stat = CpuStat::default();
    let (mut periods, mut throttled) = (false, false);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.split_whitespace();
        let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(parse_error(file, line, "expected \"<key> <value>\""));
        };
        let value: u64 = value
            .parse()
            .map_err(|_| parse_error(file, line, "value is not a number"))?;
        match key {
            "nr_periods" => {
                stat.nr_periods = value;
                periods = true;
            }
            "nr_throttled" => {
                stat.nr_throttled = value;
                throttled = true;
            }
            "throttled_time" => stat.throttled_time_summed_per_cpu = Duration::from_nanos(value),
            "throttled_usec" => stat.throttled_time_summed_per_cpu = Duration::from_micros(value),
            "usage_usec" => stat.usage = Some(Duration::from_micros(value)),
            _ => {}
        }
    }
    if !(periods && throttled) {
        return Err(parse_error(
            file,
            text,
            "missing nr_periods or nr_throttled (is the cpu controller enabled?)",
        ));
    }
    Ok(stat)
}
