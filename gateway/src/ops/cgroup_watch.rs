//! The gateway's view of its container's CPU limit (`ontime_cgroup_*`): the quota, and the
//! throttle counters published once a second. The inference budget reads the quota itself.

use metrics::{counter, gauge};
use ontime_cgroup::{CpuCgroup, CpuStat};
use tracing::{info, warn};

use super::metrics as m;

/// Publish the process's CFS quota as `ontime_cgroup_quota_cores` (0 = unlimited) and log it.
pub fn publish_quota() {
    match CpuCgroup::current().and_then(|c| c.quota()) {
        Ok(q) => {
            gauge!(m::CGROUP_QUOTA_CORES).set(q.cores().unwrap_or(0.0));
            info!(
                quota_cores = q.cores(),
                period_ms = q.period.as_millis() as u64,
                "CPU quota of this container"
            );
        }
        Err(e) => warn!(error = %e, "no readable cpu cgroup: quota and throttle metrics stay 0"),
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

    /// Publish periods and throttled periods since the gateway started, and return them
    /// (`(0, 0)` without a cgroup).
    pub fn publish(&mut self) -> (u64, u64) {
        let (Some(c), Some(first)) = (&self.cgroup, &self.first) else {
            return (0, 0);
        };
        match c.stat() {
            Ok(now) => {
                let d = now.since(first);
                counter!(m::CGROUP_PERIODS_TOTAL).absolute(d.periods);
                counter!(m::CGROUP_THROTTLED_PERIODS_TOTAL).absolute(d.throttled);
                (d.periods, d.throttled)
            }
            Err(_) => (0, 0),
        }
    }
}
