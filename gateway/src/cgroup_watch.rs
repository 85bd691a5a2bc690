//! The gateway's view of its container's CPU limit: the quota for the inference budget at start,
//! and the throttle counters published once a second (`ontime_cgroup_*`).

use metrics::{counter, gauge};
use ontime_cgroup::{CpuCgroup, CpuStat};
use tracing::{info, warn};

use crate::metrics as m;

/// The current process's CFS quota for the inference budget; `None` when unlimited or unknown.
pub fn current_quota() -> Option<ontime_inference::CpuQuota> {
    let cgroup = match CpuCgroup::current() {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "no cpu cgroup found: inference runs without a CPU budget");
            return None;
        }
    };
    match cgroup.quota() {
        Ok(q) => {
            gauge!(m::CGROUP_QUOTA_CORES).set(q.cores().unwrap_or(0.0));
            let quota = q.quota?;
            info!(
                quota_cores = q.cores(),
                period_ms = q.period.as_millis() as u64,
                "CPU quota found: inference keeps inside it"
            );
            Some(ontime_inference::CpuQuota {
                quota,
                period: q.period,
            })
        }
        Err(e) => {
            warn!(error = %e, "cpu quota unreadable: inference runs without a CPU budget");
            None
        }
    }
}

/// Publishes the cgroup's throttle counters.
pub struct CgroupWatch {
    cgroup: Option<CpuCgroup>,
    first: Option<CpuStat>,
}

impl Default for CgroupWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl CgroupWatch {
    /// Watch the current process's cgroup (nothing is published when there is none).
    pub fn new() -> CgroupWatch {
        let cgroup = CpuCgroup::current().ok();
        let first = cgroup.as_ref().and_then(|c| c.stat().ok());
        CgroupWatch { cgroup, first }
    }

    /// Publish periods and throttled periods since the gateway started.
    pub fn publish(&mut self) {
        let (Some(c), Some(first)) = (&self.cgroup, &self.first) else {
            return;
        };
        if let Ok(now) = c.stat() {
            let d = now.since(first);
            counter!(m::CGROUP_PERIODS_TOTAL).absolute(d.periods);
            counter!(m::CGROUP_THROTTLED_PERIODS_TOTAL).absolute(d.throttled);
        }
    }
}
