//! What the OS saw of the sender thread between two metric publishes, so that a late tick's log
//! line names where the time went instead of leaving it to a guess: the thread waiting for its
//! core (run-queue wait, involuntary switches), faulting pages in, or its core lost below the
//! guest (that core's steal time in `/proc/stat`), or spent in interrupts.
//!
//! Read from `/proc` on the publishing thread, about once a second, never on the tick. The
//! counters are cumulative; [`ThreadWitness::advance`] returns the difference since its last
//! call, i.e. over the window that holds the ticks the same publish drains.

use std::path::PathBuf;
use std::time::Duration;

/// Counters of the sender thread and its core, cumulative or (from [`ThreadWitness::advance`])
/// over one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Time the thread ran on its core (`/proc/<tid>/schedstat`, 1st field), ns: a tick that ran
    /// long shows here, a wake that came late does not.
    pub run_ns: u64,
    /// Time the thread was runnable but not running (`/proc/<tid>/schedstat`, 2nd field), ns.
    pub runqueue_wait_ns: u64,
    /// Times the thread was taken off its core (`nonvoluntary_ctxt_switches`).
    pub involuntary_switches: u64,
    /// Page faults served without I/O (`minflt`).
    pub minor_faults: u64,
    /// Page faults that waited for I/O (`majflt`).
    pub major_faults: u64,
    /// The core's time taken by the hypervisor for other work (`steal`), in clock ticks.
    pub core_steal_ticks: u64,
    /// The core's time in hardware interrupts (`irq`), in clock ticks.
    pub core_irq_ticks: u64,
    /// The core's time in software interrupts (`softirq`: network receive, timers), in clock
    /// ticks.
    pub core_softirq_ticks: u64,
}

impl Counters {
    fn since(self, earlier: Counters) -> Counters {
        Counters {
            run_ns: self.run_ns.saturating_sub(earlier.run_ns),
            runqueue_wait_ns: self
                .runqueue_wait_ns
                .saturating_sub(earlier.runqueue_wait_ns),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            major_faults: self.major_faults.saturating_sub(earlier.major_faults),
            core_steal_ticks: self
                .core_steal_ticks
                .saturating_sub(earlier.core_steal_ticks),
            core_irq_ticks: self.core_irq_ticks.saturating_sub(earlier.core_irq_ticks),
            core_softirq_ticks: self
                .core_softirq_ticks
                .saturating_sub(earlier.core_softirq_ticks),
        }
    }
}

/// Reads one thread's counters (and its pinned core's) and keeps the last reading.
#[derive(Debug)]
pub(crate) struct ThreadWitness {
    task: PathBuf,
    core: Option<usize>,
    last: Option<Counters>,
    /// Milliseconds per `/proc/stat` clock tick (`sysconf(_SC_CLK_TCK)`, 100 Hz nearly always).
    ms_per_tick: f64,
}

impl ThreadWitness {
    /// Watch thread `tid` of this process, pinned to `core` (no core: the core columns stay 0).
    pub(crate) fn new(tid: i32, core: Option<usize>) -> Self {
        let mut witness = ThreadWitness {
            task: PathBuf::from(format!("/proc/self/task/{tid}")),
            core,
            last: None,
            ms_per_tick: crate::os::ms_per_clock_tick(),
        };
        witness.last = witness.read();
        witness
    }

    /// Read the counters now and return what changed since the last call (`None` when `/proc`
    /// cannot be read, e.g. the thread has gone).
    pub(crate) fn advance(&mut self) -> Option<Counters> {
        let now = self.read()?;
        let window = self.last.map(|last| now.since(last));
        self.last = Some(now);
        window
    }

    /// Clock ticks of `/proc/stat` as milliseconds.
    pub(crate) fn ticks_ms(&self, ticks: u64) -> f64 {
        ticks as f64 * self.ms_per_tick
    }

    fn read(&self) -> Option<Counters> {
        let stat = std::fs::read_to_string(self.task.join("stat")).ok()?;
        let status = std::fs::read_to_string(self.task.join("status")).ok()?;
        let schedstat = std::fs::read_to_string(self.task.join("schedstat")).ok()?;
        let (minor_faults, major_faults) = parse_task_faults(&stat)?;
        let (core_irq_ticks, core_softirq_ticks, core_steal_ticks) = match self.core {
            Some(core) => std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|text| parse_core_line(&text, core))
                .unwrap_or_default(),
            None => (0, 0, 0),
        };
        let (run_ns, runqueue_wait_ns) = parse_schedstat(&schedstat)?;
        Some(Counters {
            run_ns,
            runqueue_wait_ns,
            involuntary_switches: parse_status_field(&status, "nonvoluntary_ctxt_switches")?,
            minor_faults,
            major_faults,
            core_steal_ticks,
            core_irq_ticks,
            core_softirq_ticks,
        })
    }
}

/// Time the host has taken from core `core` for other work since boot (that core's `steal` in
/// `/proc/stat`: zero on bare metal); `None` where `/proc/stat` cannot be read or has no such
/// core. A load harness reports it beside its figures: a window in which the host took the
/// measured core is not a measure of the gateway alone.
pub fn core_steal(core: usize) -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let (_, _, steal_ticks) = parse_core_line(&text, core)?;
    Some(Duration::from_secs_f64(
        steal_ticks as f64 * crate::os::ms_per_clock_tick() / 1000.0,
    ))
}

/// `(minflt, majflt)` of a `/proc/.../stat` line: fields 10 and 12, counted after the name's
/// closing parenthesis (the name may hold spaces and parentheses).
pub(crate) fn parse_task_faults(text: &str) -> Option<(u64, u64)> {
    let after = text.get(text.rfind(')')? + 1..)?;
    let mut fields = after.split_whitespace();
    // state(3) is index 0, so minflt(10) is index 7 and majflt(12) index 9.
    let minor = fields.nth(7)?.parse().ok()?;
    let major = fields.nth(1)?.parse().ok()?;
    Some((minor, major))
}

/// `(run, run-queue wait)` of `/proc/.../schedstat` (`run_ns wait_ns slices`), ns.
pub(crate) fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(str::parse);
    Some((fields.next()?.ok()?, fields.next()?.ok()?))
}

/// The number of a `key:\tvalue` line of `/proc/.../status`.
pub(crate) fn parse_status_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .parse()
        .ok()
}

/// `(irq, softirq, steal)` clock ticks of core `core`'s line in `/proc/stat`
/// (`cpuN user nice system idle iowait irq softirq steal …`).
pub(crate) fn parse_core_line(text: &str, core: usize) -> Option<(u64, u64, u64)> {
    let name = format!("cpu{core}");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    Some((*values.get(5)?, *values.get(6)?, *values.get(7)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_counted_after_the_last_parenthesis() {
        // A name with a space and a parenthesis; minflt 4321, majflt 7.
        let line = "812 (ontime (x) y) S 1 812 812 0 -1 4194624 4321 0 7 0 15 3 0 0 -100 0 6 0";
        assert_eq!(parse_task_faults(line), Some((4321, 7)));
        assert_eq!(parse_task_faults("812 (a) S 1 2"), None);
    }

    #[test]
    fn schedstat_is_run_then_wait() {
        assert_eq!(
            parse_schedstat("123456789 987654 4321\n"),
            Some((123_456_789, 987_654))
        );
        assert_eq!(parse_schedstat("123"), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn status_field_by_exact_key() {
        let status = "voluntary_ctxt_switches:\t5012\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(
            parse_status_field(status, "nonvoluntary_ctxt_switches"),
            Some(3)
        );
        assert_eq!(
            parse_status_field(status, "voluntary_ctxt_switches"),
            Some(5012)
        );
        assert_eq!(parse_status_field(status, "Threads"), None);
    }

    #[test]
    fn the_core_line_is_found_by_its_exact_name() {
        let stat = "cpu  9 9 9 9 9 9 9 9 0 0\ncpu1 100 0 50 900 1 2 3 4 0 0\n\
                    cpu11 1 1 1 1 1 7 8 9 0 0\nintr 5\n";
        assert_eq!(parse_core_line(stat, 1), Some((2, 3, 4)));
        assert_eq!(parse_core_line(stat, 11), Some((7, 8, 9)));
        assert_eq!(parse_core_line(stat, 2), None);
    }

    #[test]
    fn steal_is_read_for_a_core_that_exists_only() {
        // The first core always exists; no machine has this many.
        assert!(core_steal(0).is_some(), "cpu0 has a /proc/stat line");
        assert_eq!(core_steal(usize::MAX), None);
    }

    #[test]
    fn a_window_is_the_difference_of_two_readings() {
        let a = Counters {
            run_ns: 5_000_000,
            runqueue_wait_ns: 1_000,
            involuntary_switches: 2,
            minor_faults: 10,
            major_faults: 0,
            core_steal_ticks: 5,
            core_irq_ticks: 1,
            core_softirq_ticks: 9,
        };
        let b = Counters {
            run_ns: 8_000_000,
            runqueue_wait_ns: 21_001_000,
            involuntary_switches: 3,
            minor_faults: 10,
            major_faults: 1,
            core_steal_ticks: 7,
            core_irq_ticks: 1,
            core_softirq_ticks: 12,
        };
        assert_eq!(
            b.since(a),
            Counters {
                run_ns: 3_000_000,
                runqueue_wait_ns: 21_000_000,
                involuntary_switches: 1,
                minor_faults: 0,
                major_faults: 1,
                core_steal_ticks: 2,
                core_irq_ticks: 0,
                core_softirq_ticks: 3,
            }
        );
    }

    #[test]
    fn this_thread_can_be_read() {
        let tid = crate::os::thread_id();
        let mut witness = ThreadWitness::new(tid, Some(0));
        let window = witness.advance().expect("this thread's /proc entries read");
        // Nothing of this thread blocked on I/O between two readings a few µs apart.
        assert_eq!(window.major_faults, 0);
    }
}
