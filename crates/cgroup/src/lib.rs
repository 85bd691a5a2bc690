//! # ontime-cgroup
//!
//! Owns the container's CPU limits: reads the CFS quota and throttle counters of cgroup v1 and v2
//! for the current process, samples deltas and the throttle ratio (Δnr_throttled / Δnr_periods),
//! and creates/removes child cgroups with a given quota for experiments and tests. Files only.
//!
//! ```no_run
//! use ontime_cgroup::CpuCgroup;
//!
//! # fn main() -> ontime_cgroup::Result<()> {
//! let cgroup = CpuCgroup::current()?;
//! let quota = cgroup.quota()?;
//! println!("{:?} cores per {:?}", quota.cores(), quota.period);
//! let before = cgroup.stat()?;
//! // ... run a call ...
//! let delta = cgroup.stat()?.since(&before);
//! println!("throttle ratio {:?}", delta.throttle_ratio());
//! # Ok(()) }
//! ```
//!
//! `throttled_time` (v1) / `throttled_usec` (v2) is summed per CPU by the kernel, so the field
//! is named [`CpuStat::throttled_time_summed_per_cpu`]: never report it as a stall's length.

// The README's examples are compiled and run with the doctests, so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod child;
mod error;
mod locate;
mod stat;

pub use child::ChildCgroup;
pub use error::{Error, Result};
pub use locate::{
    locate_cpu_cgroup, parse_mountinfo, parse_proc_cgroup, CgroupMount, ProcCgroupLine,
};
pub use stat::{parse_cfs_quota, parse_cpu_max, parse_cpu_stat, CpuQuota, CpuStat, CpuStatDelta};

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which cgroup interface holds the CPU controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1, `cpu` controller hierarchy.
    V1,
    /// cgroup v2 unified hierarchy.
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        })
    }
}

/// A cgroup directory with the CPU controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuCgroup {
    version: CgroupVersion,
    dir: PathBuf,
}

impl CpuCgroup {
    /// The current process's CPU cgroup, from `/proc/self/cgroup` and `/proc/self/mountinfo`.
    pub fn current() -> Result<CpuCgroup> {
        Self::of_proc_dir(Path::new("/proc/self"))
    }

    /// The CPU cgroup described by `<proc_dir>/cgroup` and `<proc_dir>/mountinfo` (a process's
    /// `/proc/<pid>` directory, or fixtures).
    pub fn of_proc_dir(proc_dir: &Path) -> Result<CpuCgroup> {
        let cgroup_file = proc_dir.join("cgroup");
        let mountinfo_file = proc_dir.join("mountinfo");
        let lines = parse_proc_cgroup(&read(&cgroup_file)?, &cgroup_file)?;
        let mounts = parse_mountinfo(&read(&mountinfo_file)?, &mountinfo_file)?;
        let (version, dir) = locate_cpu_cgroup(&lines, &mounts)?;
        Ok(CpuCgroup { version, dir })
    }

    /// A cgroup at a known directory.
    pub fn at(version: CgroupVersion, dir: impl Into<PathBuf>) -> CpuCgroup {
        CpuCgroup {
            version,
            dir: dir.into(),
        }
    }

    /// The interface version.
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CFS quota and period.
    pub fn quota(&self) -> Result<CpuQuota> {
        match self.version {
            CgroupVersion::V2 => {
                let file = self.dir.join("cpu.max");
                parse_cpu_max(&read(&file)?, &file)
            }
            CgroupVersion::V1 => {
                let quota_file = self.dir.join("cpu.cfs_quota_us");
                let period_file = self.dir.join("cpu.cfs_period_us");
                parse_cfs_quota(
                    &read(&quota_file)?,
                    &quota_file,
                    &read(&period_file)?,
                    &period_file,
                )
            }
        }
    }

    /// The throttle counters now.
    pub fn stat(&self) -> Result<CpuStat> {
        let file = self.dir.join("cpu.stat");
        parse_cpu_stat(&read(&file)?, &file)
    }

    /// v1 with RT group scheduling (`cpu.rt_runtime_us` exists): a SCHED_FIFO thread may only
    /// run in a cgroup that was given RT runtime.
    pub fn has_rt_group_scheduling(&self) -> bool {
        self.version == CgroupVersion::V1 && self.dir.join("cpu.rt_runtime_us").exists()
    }

    /// RT runtime per RT period (v1 with RT group scheduling only).
    pub fn rt_runtime(&self) -> Result<Option<Duration>> {
        if !self.has_rt_group_scheduling() {
            return Ok(None);
        }
        let file = self.dir.join("cpu.rt_runtime_us");
        let text = read(&file)?;
        match text.trim() {
            "-1" => Ok(None),
            t => t
                .parse()
                .map(|us| Some(Duration::from_micros(us)))
                .map_err(|_| locate::parse_error(&file, &text, "not -1 or a number of µs")),
        }
    }

    /// Create a child cgroup `name` with `quota` (and, on v1 with RT group scheduling, RT
    /// runtime per second so SCHED_FIFO threads may run inside). It is removed when the
    /// returned guard drops, its tasks moved back here first.
    pub fn create_child(
        &self,
        name: &str,
        quota: CpuQuota,
        rt_runtime: Option<Duration>,
    ) -> Result<ChildCgroup> {
        ChildCgroup::create(self, name, quota, rt_runtime)
    }
}

/// Read a whole cgroup file with a typed error.
pub(crate) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| io_error("read", path, e))
}

/// Write a cgroup file (one `write(2)`, as the kernel expects) with a typed error.
pub(crate) fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|e| io_error("write", path, e))
}

/// The effective uid, from `/proc/self/status` (no unsafe `geteuid` needed).
pub(crate) fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

pub(crate) fn io_error(action: &'static str, path: &Path, source: io::Error) -> Error {
    let path = path.to_owned();
    match source.kind() {
        io::ErrorKind::PermissionDenied => match effective_uid() {
            Some(euid) if euid != 0 => Error::NotRoot { action, path, euid },
            _ => Error::PermissionDenied {
                action,
                path,
                source,
            },
        },
        _ => Error::Io {
            action,
            path,
            source,
        },
    }
}
