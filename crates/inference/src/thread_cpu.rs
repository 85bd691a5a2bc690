//! The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), the one OS call this crate makes by
//! hand: `std` has no thread CPU clock, and the budget must see this thread's CPU alone. The
//! process's CPU clock (`CLOCK_PROCESS_CPUTIME_ID`, every thread) sits beside it for the
//! gateway's admission estimate: one owner of the CPU clocks.
#![allow(unsafe_code)]

use std::time::Duration;

/// CPU time consumed by the calling thread so far (user + system). Zero if the clock is
/// unavailable (it is on every Linux since 2.6.12).
pub fn thread_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time consumed by the whole process so far, every thread (user + system).
pub fn process_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec` for the duration of the call, and
    // both CPU clock ids are ones every Linux kernel accepts; the call has no other
    // memory effects.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_with_work_not_with_sleep() {
        let a = thread_cpu_time();
        std::thread::sleep(Duration::from_millis(30));
        let b = thread_cpu_time();
        assert!(
            b - a < Duration::from_millis(20),
            "sleep cost {:?} of CPU",
            b - a
        );
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let c = thread_cpu_time();
        assert!(c > b, "busy loop did not advance the thread clock");
    }
}
