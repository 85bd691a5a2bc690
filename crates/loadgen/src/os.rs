//! The two OS calls the harness needs that std lacks: setting the calling thread's CPU affinity
//! (so a spawned gateway inherits a cpuset and the harness keeps off it) and the clock tick rate
//! of `/proc/<pid>/stat`.
#![allow(unsafe_code)]

use crate::{Error, Result};

/// Restrict the calling thread (and every thread or process it creates afterwards) to `cpus`.
pub fn set_current_thread_affinity(cpus: &[usize]) -> Result<()> {
    let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(1024);
    if cpus.is_empty() || cpus.iter().any(|&c| c >= max) {
        return Err(Error::Invalid {
            what: "cpuset",
            reason: format!("{cpus:?} is empty or beyond CPU {max}"),
        });
    }
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set CPU_ZERO produces.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` < CPU_SETSIZE was checked above, so CPU_SET stays inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(Error::Os {
            action: "sched_setaffinity",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The CPUs the calling thread may run on.
pub fn current_thread_affinity() -> Vec<usize> {
    // SAFETY: as above; sched_getaffinity fills `set` of the size passed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = calling thread, `set` is writable and sized correctly.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(1024);
    // SAFETY: c < CPU_SETSIZE, inside `set`.
    (0..max).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// Clock ticks per second of `/proc/<pid>/stat`'s utime/stime (almost always 100).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory effects; it returns -1 on error.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}
