//! A child cgroup with its own quota, removed on drop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{io_error, read, write, CgroupVersion, CpuCgroup, CpuQuota, CpuStat, Error, Result};

/// A child cgroup created for an experiment or a test. Dropping it moves every task still
/// inside back to the parent and removes the directory, so a failing test leaves nothing behind.
#[derive(Debug)]
pub struct ChildCgroup {
    cgroup: CpuCgroup,
    parent: PathBuf,
    removed: bool,
}

/// Format a quota the way v2 `cpu.max` wants it.
fn cpu_max_value(quota: &CpuQuota) -> String {
    let period = quota.period.as_micros();
    match quota.quota {
        Some(q) => format!("{} {period}", q.as_micros()),
        None => format!("max {period}"),
    }
}

impl ChildCgroup {
    pub(crate) fn create(
        parent: &CpuCgroup,
        name: &str,
        quota: CpuQuota,
        rt_runtime: Option<Duration>,
    ) -> Result<ChildCgroup> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(Error::InvalidName(name.to_owned()));
        }
        let dir = parent.dir().join(name);
        if parent.version() == CgroupVersion::V2 {
            // The child only gets cpu.max if the parent delegates the cpu controller.
            let control = parent.dir().join("cgroup.subtree_control");
            let enabled = read(&control).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "cpu") {
                write(&control, "+cpu")?;
            }
        }
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            // A leftover from a crashed run: reuse it (Drop removes it this time).
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_error("create cgroup", &dir, e)),
        }
        let child = ChildCgroup {
            cgroup: CpuCgroup::at(parent.version(), dir),
            parent: parent.dir().to_owned(),
            removed: false,
        };
        // From here on, an error drops `child`, which removes the directory again.
        child.set_quota(&quota)?;
        if let Some(runtime) = rt_runtime {
            child.set_rt_runtime(runtime)?;
        }
        Ok(child)
    }

    /// The child as a [`CpuCgroup`] (quota, stat).
    pub fn cgroup(&self) -> &CpuCgroup {
        &self.cgroup
    }

    /// The child's directory.
    pub fn dir(&self) -> &Path {
        self.cgroup.dir()
    }

    /// The child's throttle counters.
    pub fn stat(&self) -> Result<CpuStat> {
        self.cgroup.stat()
    }

    /// Change the child's quota.
    pub fn set_quota(&self, quota: &CpuQuota) -> Result<()> {
        let dir = self.cgroup.dir();
        match self.cgroup.version() {
            CgroupVersion::V2 => write(&dir.join("cpu.max"), &cpu_max_value(quota)),
            CgroupVersion::V1 => {
                // Quota −1 first, so a shorter period never conflicts with the old quota.
                write(&dir.join("cpu.cfs_quota_us"), "-1")?;
                write(
                    &dir.join("cpu.cfs_period_us"),
                    &quota.period.as_micros().to_string(),
                )?;
                let value = quota
                    .quota
                    .map_or_else(|| "-1".to_owned(), |q| q.as_micros().to_string());
                write(&dir.join("cpu.cfs_quota_us"), &value)
            }
        }
    }

    /// Set the child's CPU weight against its siblings, on the v2 scale 1..=10000 (100 is the
    /// default); on v1 it is converted to `cpu.shares` (1024 × weight / 100, within 2..=262144).
    /// Under contention a group with the default weight gets no more CPU than one ordinary
    /// thread, however many threads it runs: a high weight makes an experiment's group behave
    /// like a container with CPUs of its own, so its quota, not the neighbours, limits it.
    pub fn set_cpu_weight(&self, weight: u32) -> Result<()> {
        let weight = weight.clamp(1, 10_000);
        match self.cgroup.version() {
            CgroupVersion::V2 => write(&self.cgroup.dir().join("cpu.weight"), &weight.to_string()),
            CgroupVersion::V1 => {
                let shares = (u64::from(weight) * 1024 / 100).clamp(2, 262_144);
                write(&self.cgroup.dir().join("cpu.shares"), &shares.to_string())
            }
        }
    }

    /// Give the child RT runtime per RT period (v1 with RT group scheduling), so SCHED_FIFO
    /// threads may run in it. Elsewhere RT tasks are not limited per group and this is a no-op.
    pub fn set_rt_runtime(&self, runtime: Duration) -> Result<()> {
        if self.cgroup.version() == CgroupVersion::V1 && self.cgroup.has_rt_group_scheduling() {
            write(
                &self.cgroup.dir().join("cpu.rt_runtime_us"),
                &runtime.as_micros().to_string(),
            )?;
        }
        Ok(())
    }

    /// Move a whole process (every thread) into the child.
    pub fn add_process(&self, pid: u32) -> Result<()> {
        write(&self.cgroup.dir().join("cgroup.procs"), &pid.to_string())
    }

    /// Move one thread into the child (v1 only: v2 moves threads only in threaded subtrees).
    pub fn add_thread(&self, tid: u32) -> Result<()> {
        match self.cgroup.version() {
            CgroupVersion::V1 => write(&self.cgroup.dir().join("tasks"), &tid.to_string()),
            version => Err(Error::Unsupported {
                what: "moving a single thread",
                version,
            }),
        }
    }

    /// Move every thread of `pid` (from `/proc/<pid>/task`) into the child, one by one, and
    /// return how many moved. On v2 this moves the process as a whole.
    pub fn add_all_threads(&self, pid: u32) -> Result<usize> {
        if self.cgroup.version() == CgroupVersion::V2 {
            self.add_process(pid)?;
            return Ok(1);
        }
        let task_dir = PathBuf::from(format!("/proc/{pid}/task"));
        let entries =
            std::fs::read_dir(&task_dir).map_err(|e| io_error("list threads", &task_dir, e))?;
        let mut moved = 0;
        for entry in entries.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            match self.add_thread(tid) {
                Ok(()) => moved += 1,
                // The thread exited meanwhile.
                Err(Error::Io { ref source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {
                }
                Err(e) => return Err(e),
            }
        }
        Ok(moved)
    }

    /// The tasks (v1: thread ids; v2: process ids) inside the child now.
    pub fn tasks(&self) -> Result<Vec<u32>> {
        let file = match self.cgroup.version() {
            CgroupVersion::V1 => "tasks",
            CgroupVersion::V2 => "cgroup.procs",
        };
        let path = self.cgroup.dir().join(file);
        Ok(read(&path)?
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect())
    }

    /// Move the tasks back to the parent and remove the child, reporting errors (Drop does the
    /// same but can only ignore them).
    pub fn remove(mut self) -> Result<()> {
        self.remove_inner()
    }

    fn remove_inner(&mut self) -> Result<()> {
        if self.removed {
            return Ok(());
        }
        let (file, each) = match self.cgroup.version() {
            CgroupVersion::V1 => ("tasks", "tasks"),
            CgroupVersion::V2 => ("cgroup.procs", "cgroup.procs"),
        };
        let back = self.parent.join(each);
        // Tasks may exit or appear (threads spawned inside) while we move them: a few passes.
        let mut last_error = None;
        for _ in 0..20 {
            // Empty when already gone (or a plain directory without the file).
            let tasks = read(&self.cgroup.dir().join(file)).unwrap_or_default();
            for task in tasks.split_whitespace() {
                let _ = write(&back, task);
            }
            match std::fs::remove_dir(self.cgroup.dir()) {
                Ok(()) => {
                    self.removed = true;
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.removed = true;
                    return Ok(());
                }
                Err(e) => last_error = Some(e),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let source = last_error.unwrap_or_else(|| std::io::Error::other("cgroup busy"));
        Err(io_error("remove cgroup", self.cgroup.dir(), source))
    }
}

impl Drop for ChildCgroup {
    fn drop(&mut self) {
        let _ = self.remove_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_values() {
        let half = CpuQuota::from_cores(0.5, CpuQuota::DEFAULT_PERIOD).expect("valid");
        assert_eq!(cpu_max_value(&half), "50000 100000");
        assert_eq!(
            cpu_max_value(&CpuQuota::unlimited(CpuQuota::DEFAULT_PERIOD)),
            "max 100000"
        );
    }
}
