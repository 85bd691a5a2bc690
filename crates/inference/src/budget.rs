//! The CPU budget of the inference thread per CFS period, sans-IO.
//!
//! The container may use `quota` of CPU per `period` (cgroup `cpu.max` / `cfs_quota_us`), summed over
//! all its threads. The sender and I/O need a share every period; if inference spends the whole
//! quota early in a period, CFS throttles *every* thread of the container until the next period,
//! the media clock included (a 20 ms sender under a 0.5-core limit was seen sending packets 126 ms
//! late). So the inference thread keeps its own CPU per window below `quota − reserve`: before each
//! job it asks [`CpuBudget::check`] with its thread CPU time and the job's estimated cost, and
//! defers the job to the next window when it would overrun.
//!
//! Windows are consecutive `period`-long intervals of the thread's monotonic clock (the kernel's
//! period boundaries are not visible to a process; being out of phase at most splits one job's
//! cost over two kernel periods). CPU spent past the allowance (a job costlier than estimated)
//! is carried into the next window as debt, so the long-run rate stays within the allowance. A
//! job larger than a whole window's allowance runs only at the start of a window with no debt
//! (the first job of a window with no debt; else it would never run), and its excess is carried
//! as debt.

use std::time::Duration;

use crate::{Error, Result};

/// A CFS quota: at most `quota` of CPU time per `period` of wall time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuQuota {
    /// CPU time allowed per period (may exceed `period` on a multi-core quota).
    pub quota: Duration,
    /// The CFS period (100 ms unless the cgroup says otherwise).
    pub period: Duration,
}

impl CpuQuota {
    /// The quota in cores (quota / period).
    pub fn cores(&self) -> f64 {
        self.quota.as_secs_f64() / self.period.as_secs_f64()
    }

    /// Converts `ontime-cgroup`'s reading; `None` when the cgroup is unlimited.
    pub fn from_cgroup(q: &ontime_cgroup::CpuQuota) -> Option<CpuQuota> {
        Some(CpuQuota {
            quota: q.quota?,
            period: q.period,
        })
        .filter(|q| !q.quota.is_zero() && !q.period.is_zero())
    }

    /// The quota of this process's CPU cgroup (v1 or v2) via `ontime-cgroup`; `Ok(None)` when
    /// unlimited.
    pub fn of_current_process() -> Result<Option<CpuQuota>> {
        let cgroup = ontime_cgroup::CpuCgroup::current()?;
        Ok(Self::from_cgroup(&cgroup.quota()?))
    }

    /// Rejects a zero quota or period.
    pub fn validate(&self) -> Result<()> {
        if self.quota.is_zero() || self.period.is_zero() {
            return Err(Error::InvalidConfig(format!(
                "CPU quota {:?} per period {:?}: both must be positive",
                self.quota, self.period
            )));
        }
        Ok(())
    }
}

/// Whether a job may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetDecision {
    /// Start it.
    Run,
    /// Wait until this monotonic time (the next window's start), then ask again.
    DeferUntil(Duration),
}

/// Per-window CPU accounting for one thread. Times are injected: `now` is any monotonic clock
/// (a `Duration` since some origin), `thread_cpu` the thread's CPU time on the same call.
#[derive(Debug, Clone)]
pub struct CpuBudget {
    allowance: Option<Duration>,
    period: Duration,
    window_start: Option<Duration>,
    cpu_at_window_start: Duration,
    debt: Duration,
    deferrals: u64,
    oversize_runs: u64,
    started_in_window: u64,
}

impl CpuBudget {
    /// A budget of `quota − reserve` per period; `None` quota = unlimited. A reserve at or above
    /// the quota leaves a minimal allowance of 1 ms per period (inference still progresses, slowly).
    pub fn new(quota: Option<CpuQuota>, reserve: Duration) -> Self {
        let (allowance, period) = match quota {
            Some(q) => (
                Some(
                    q.quota
                        .saturating_sub(reserve)
                        .max(Duration::from_millis(1)),
                ),
                q.period,
            ),
            None => (None, Duration::from_millis(100)),
        };
        Self {
            allowance,
            period,
            window_start: None,
            cpu_at_window_start: Duration::ZERO,
            debt: Duration::ZERO,
            deferrals: 0,
            oversize_runs: 0,
            started_in_window: 0,
        }
    }

    /// CPU the thread may use per window (`None` = unlimited).
    pub fn allowance(&self) -> Option<Duration> {
        self.allowance
    }

    /// Jobs deferred so far.
    pub fn deferrals(&self) -> u64 {
        self.deferrals
    }

    /// Jobs started although larger than a whole window's allowance.
    pub fn oversize_runs(&self) -> u64 {
        self.oversize_runs
    }

    /// CPU charged to the current window (including debt carried in).
    pub fn used_in_window(&self, now: Duration, thread_cpu: Duration) -> Duration {
        let mut probe = self.clone();
        probe.roll(now, thread_cpu);
        probe.used(thread_cpu)
    }

    fn used(&self, thread_cpu: Duration) -> Duration {
        thread_cpu.saturating_sub(self.cpu_at_window_start) + self.debt
    }

    /// Moves to the window containing `now`, carrying overspend as debt.
    fn roll(&mut self, now: Duration, thread_cpu: Duration) {
        let Some(start) = self.window_start else {
            self.window_start = Some(now);
            self.cpu_at_window_start = thread_cpu;
            return;
        };
        if now < start + self.period {
            return;
        }
        let elapsed_windows = ((now - start).as_nanos() / self.period.as_nanos()) as u32;
        let used = self.used(thread_cpu);
        let allowance = self.allowance.unwrap_or(Duration::MAX);
        // Each elapsed window repays one allowance.
        self.debt = used.saturating_sub(allowance.saturating_mul(elapsed_windows));
        self.window_start = Some(start + self.period * elapsed_windows);
        self.cpu_at_window_start = thread_cpu;
        self.started_in_window = 0;
    }

    /// Would a job costing about `estimated` fit in this window's allowance now? Unlike
    /// [`CpuBudget::check`] it changes nothing and counts nothing: for optional work (a
    /// speculative Smart Turn run) that is skipped rather than deferred.
    pub fn fits(&self, now: Duration, thread_cpu: Duration, estimated: Duration) -> bool {
        let Some(allowance) = self.allowance else {
            return true;
        };
        let mut probe = self.clone();
        probe.roll(now, thread_cpu);
        probe.used(thread_cpu) + estimated <= allowance
    }

    /// May a job costing about `estimated` start now? Counts a deferral when not.
    pub fn check(
        &mut self,
        now: Duration,
        thread_cpu: Duration,
        estimated: Duration,
    ) -> BudgetDecision {
        self.roll(now, thread_cpu);
        let Some(allowance) = self.allowance else {
            return BudgetDecision::Run;
        };
        let used = self.used(thread_cpu);
        if used + estimated <= allowance {
            self.started_in_window += 1;
            return BudgetDecision::Run;
        }
        if estimated > allowance && self.started_in_window == 0 && self.debt.is_zero() {
            self.oversize_runs += 1;
            self.started_in_window += 1;
            return BudgetDecision::Run;
        }
        self.deferrals += 1;
        // ok: roll() always sets window_start.
        let start = self.window_start.unwrap_or(now);
        BudgetDecision::DeferUntil(start + self.period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn quota(q_ms: u32) -> Option<CpuQuota> {
        Some(CpuQuota {
            quota: q_ms * MS,
            period: 100 * MS,
        })
    }

    /// Simulates a thread with unlimited work of `job` cost each; returns CPU per window.
    fn simulate(budget: &mut CpuBudget, job: Duration, windows: u32) -> Vec<Duration> {
        let mut now = Duration::ZERO;
        let mut cpu = Duration::ZERO;
        let end = 100 * MS * windows;
        let mut per_window = vec![Duration::ZERO; windows as usize];
        while now < end {
            match budget.check(now, cpu, job) {
                BudgetDecision::Run => {
                    // Charge the job to the window(s) it runs in, as the kernel would.
                    let mut left = job;
                    while !left.is_zero() && now < end {
                        let w = (now.as_nanos() / (100 * MS).as_nanos()) as usize;
                        let to_edge = 100 * MS * (w as u32 + 1) - now;
                        let step = left.min(to_edge);
                        per_window[w] += step;
                        now += step;
                        cpu += step;
                        left -= step;
                    }
                }
                BudgetDecision::DeferUntil(t) => {
                    assert!(t > now, "deferral must move time forward");
                    now = t;
                }
            }
        }
        per_window
    }

    #[test]
    fn converts_cgroup_quota() {
        let half = ontime_cgroup::CpuQuota::from_cores(0.5, 100 * MS).expect("quota");
        assert_eq!(CpuQuota::from_cgroup(&half), quota(50));
        let unlimited = ontime_cgroup::CpuQuota::unlimited(100 * MS);
        assert_eq!(CpuQuota::from_cgroup(&unlimited), None);
    }

    #[test]
    fn reads_this_process_quota() {
        // Whatever the machine's limit, reading it must not fail where cgroups are mounted.
        match CpuQuota::of_current_process() {
            Ok(q) => eprintln!("this process's quota: {q:?}"),
            Err(e) => eprintln!("SKIPPED: no readable CPU cgroup here: {e}"),
        }
    }

    #[test]
    fn unlimited_never_defers() {
        let mut b = CpuBudget::new(None, 20 * MS);
        let w = simulate(&mut b, 7 * MS, 20);
        assert_eq!(b.deferrals(), 0);
        assert!(w.iter().all(|&c| c == 100 * MS));
    }

    #[test]
    fn stays_within_quota_minus_reserve() {
        // Half a core, 10 ms reserved: 40 ms per window for inference, jobs of 7 ms.
        let mut b = CpuBudget::new(quota(50), 10 * MS);
        assert_eq!(b.allowance(), Some(40 * MS));
        let w = simulate(&mut b, 7 * MS, 50);
        for (i, c) in w.iter().enumerate() {
            assert!(*c <= 40 * MS, "window {i} used {c:?}");
        }
        // It used the budget (5 jobs of 7 ms fit in 40 ms), not nothing.
        assert!(w.iter().all(|&c| c == 35 * MS), "{w:?}");
        assert_eq!(b.deferrals(), 50);
    }

    #[test]
    fn oversize_job_runs_at_window_start_and_pays_debt() {
        // 10 ms allowance, 60 ms jobs (Smart Turn on a tiny quota): one job, then five windows idle.
        let mut b = CpuBudget::new(quota(30), 20 * MS);
        let w = simulate(&mut b, 60 * MS, 60);
        let total: Duration = w.iter().sum();
        // Each job is six windows' allowance: one every six windows, ten in sixty, and the
        // thread is told to wait in every window (the job's own and the five it pays back).
        assert_eq!(total, 600 * MS);
        assert_eq!(b.oversize_runs(), 10);
        assert_eq!(b.deferrals(), 60);
    }

    #[test]
    fn fits_probes_without_counting() {
        let mut b = CpuBudget::new(quota(50), 10 * MS);
        assert!(CpuBudget::new(None, 10 * MS).fits(Duration::ZERO, Duration::ZERO, 500 * MS));
        assert_eq!(
            b.check(Duration::ZERO, Duration::ZERO, MS),
            BudgetDecision::Run
        );
        // 30 ms used of 40: 10 ms fits, 11 does not; nothing is counted.
        assert!(b.fits(50 * MS, 30 * MS, 10 * MS));
        assert!(!b.fits(50 * MS, 30 * MS, 11 * MS));
        assert_eq!(b.deferrals(), 0);
        // The next window has room again.
        assert!(b.fits(100 * MS, 30 * MS, 40 * MS));
    }

    #[test]
    fn reserve_above_quota_leaves_one_ms() {
        let b = CpuBudget::new(quota(10), 50 * MS);
        assert_eq!(b.allowance(), Some(MS));
    }

    #[test]
    fn idle_windows_clear_debt() {
        let mut b = CpuBudget::new(quota(50), 10 * MS);
        // Overrun by 30 ms in window 0 (job cost higher than estimated).
        assert_eq!(
            b.check(Duration::ZERO, Duration::ZERO, MS),
            BudgetDecision::Run
        );
        // Window 1: debt 30 ms → only 10 ms left.
        assert_eq!(
            b.check(100 * MS, 70 * MS, 15 * MS),
            BudgetDecision::DeferUntil(200 * MS)
        );
        assert_eq!(b.check(100 * MS, 70 * MS, 10 * MS), BudgetDecision::Run);
        // After three idle windows the debt is gone.
        assert_eq!(b.check(450 * MS, 70 * MS, 40 * MS), BudgetDecision::Run);
    }
}
