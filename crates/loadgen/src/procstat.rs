//! CPU and memory of the gateway process from `/proc/<pid>` deltas (never lifetime averages),
//! and what it holds open (fds, sockets, threads) for the soak.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

/// Thread names the gateway gives its threads (one sender, one inference thread, the tokio
/// workers), as in `/proc/<pid>/task/*/comm`.
pub const SENDER_THREAD: &str = "ontime-sender";
/// The inference thread's name.
pub const INFERENCE_THREAD: &str = "ontime-inference";
/// The gateway's tokio worker threads' name.
pub const IO_THREAD: &str = "ontime-io";

/// One reading of a process.
#[derive(Debug, Clone)]
pub struct ProcSample {
    /// When it was read.
    pub at: Instant,
    /// utime + stime of the whole process, in clock ticks.
    pub process_ticks: u64,
    /// Per thread id: (name, utime + stime ticks).
    pub threads: HashMap<u32, (String, u64)>,
    /// Resident memory now, KiB.
    pub rss_kib: u64,
    /// Peak resident memory over the process's life, KiB.
    pub hwm_kib: u64,
    /// Threads (`Threads:` of `/proc/<pid>/status`).
    pub thread_count: u64,
}

/// `(comm, utime + stime)` from a `/proc/.../stat` line. The name sits in parentheses and may
/// itself hold spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let mut fields = text.get(close + 1..)?.split_whitespace();
    // After the name: state(3) ... utime(14) stime(15), i.e. the 12th and 13th fields here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((comm, utime + stime))
}

/// A `Key:   123 kB` line of `/proc/<pid>/status`, in KiB.
pub fn parse_status_kib(text: &str, key: &str) -> Option<u64> {
    parse_status_number(text, key)
}

/// The number of a `Key:  123 [unit]` line of `/proc/<pid>/status` (`Threads:`, `VmRSS:` …).
pub fn parse_status_number(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Read process `pid`; `None` once it has gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let dir = Path::new("/proc").join(pid.to_string());
    let at = Instant::now();
    let (_, process_ticks) = parse_stat(&std::fs::read_to_string(dir.join("stat")).ok()?)?;
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let mut threads = HashMap::new();
    if let Ok(tasks) = std::fs::read_dir(dir.join("task")) {
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            if let Some(stat) = std::fs::read_to_string(task.path().join("stat"))
                .ok()
                .and_then(|t| parse_stat(&t))
            {
                threads.insert(tid, stat);
            }
        }
    }
    Some(ProcSample {
        at,
        process_ticks,
        threads,
        rss_kib: parse_status_kib(&status, "VmRSS").unwrap_or(0),
        hwm_kib: parse_status_kib(&status, "VmHWM").unwrap_or(0),
        thread_count: parse_status_number(&status, "Threads").unwrap_or(0),
    })
}

/// What a process holds open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFiles {
    /// Open file descriptors (`/proc/<pid>/fd` entries).
    pub fds: usize,
    /// Distinct sockets among them (any family).
    pub sockets: usize,
    /// Of those, UDP sockets (their inodes in `/proc/<pid>/net/udp` and `udp6`).
    pub udp_sockets: usize,
}

/// The inode of an fd's link when it is a socket: `socket:[12345]`.
pub fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Socket inodes of a `/proc/net/{udp,udp6,tcp,tcp6}` table (the 10th column; the header line
/// and malformed lines are skipped).
pub fn net_table_inodes(text: &str) -> impl Iterator<Item = u64> + '_ {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(9)?.parse().ok())
}

/// Count process `pid`'s fds, sockets and UDP sockets; `None` once it has gone.
pub fn open_files(pid: u32) -> Option<OpenFiles> {
    let dir = Path::new("/proc").join(pid.to_string());
    let mut fds = 0;
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir(dir.join("fd")).ok()?.flatten() {
        fds += 1;
        // An fd closed between the listing and the read is still counted (it was open).
        if let Some(inode) = std::fs::read_link(entry.path())
            .ok()
            .and_then(|l| socket_inode(&l.to_string_lossy()))
        {
            inodes.insert(inode);
        }
    }
    // The tables list the whole network namespace: only this process's inodes count.
    let udp_sockets = ["net/udp", "net/udp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(dir.join(t)).ok())
        .map(|t| net_table_inodes(&t).filter(|i| inodes.contains(i)).count())
        .sum();
    Some(OpenFiles {
        fds,
        sockets: inodes.len(),
        udp_sockets,
    })
}

/// CPU between two samples, in % of one core.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuUsage {
    /// The whole process.
    pub process_pct: f64,
    /// Per thread name (threads sharing a name are summed; threads that exited in between are
    /// not counted).
    pub by_thread_name: HashMap<String, f64>,
}

impl CpuUsage {
    /// CPU of threads named `name` (0 when there is none).
    /// Names are compared as the kernel keeps them: cut to 15 bytes (`TASK_COMM_LEN` − 1).
    pub fn thread_pct(&self, name: &str) -> f64 {
        let name = name.get(..name.len().min(15)).unwrap_or(name);
        self.by_thread_name.get(name).copied().unwrap_or(0.0)
    }
}

/// CPU used between `before` and `after`, with `ticks_per_second` from
/// [`crate::os::clock_ticks_per_second`].
pub fn cpu_between(before: &ProcSample, after: &ProcSample, ticks_per_second: u64) -> CpuUsage {
    let wall = after.at.saturating_duration_since(before.at).as_secs_f64();
    if wall <= 0.0 {
        return CpuUsage::default();
    }
    let pct = |ticks: u64| ticks as f64 / ticks_per_second.max(1) as f64 / wall * 100.0;
    let mut by_thread_name: HashMap<String, f64> = HashMap::new();
    for (tid, (name, ticks)) in &after.threads {
        let earlier = before.threads.get(tid).map(|t| t.1).unwrap_or(0);
        *by_thread_name.entry(name.clone()).or_default() += pct(ticks.saturating_sub(earlier));
    }
    CpuUsage {
        process_pct: pct(after.process_ticks.saturating_sub(before.process_ticks)),
        by_thread_name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_in_the_name() {
        let line =
            "1234 (ontime (x) y) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 9 0 100";
        assert_eq!(parse_stat(line), Some(("ontime (x) y".to_owned(), 300)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (a) S 1 2"), None);
    }

    #[test]
    fn status_fields() {
        let s = "Name:\tx\nVmHWM:\t  51234 kB\nVmRSS:\t   40000 kB\n";
        assert_eq!(parse_status_kib(s, "VmHWM"), Some(51234));
        assert_eq!(parse_status_kib(s, "VmRSS"), Some(40000));
        assert_eq!(parse_status_kib(s, "VmSwap"), None);
        assert_eq!(parse_status_number("Threads:\t14\n", "Threads"), Some(14));
    }

    #[test]
    fn sockets_and_net_tables() {
        assert_eq!(socket_inode("socket:[4026531993]"), Some(4_026_531_993));
        assert_eq!(socket_inode("pipe:[12]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
        let udp = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
  123: 0100007F:13C4 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 55501 2 0000000000000000 0\n\
  124: 0100007F:13C6 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 55502 2 0000000000000000 0\n\
  garbage\n";
        assert_eq!(
            net_table_inodes(udp).collect::<Vec<_>>(),
            vec![55501, 55502]
        );
    }

    #[test]
    fn counts_this_process_sockets() {
        let before = open_files(std::process::id()).expect("own /proc entry");
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let after = open_files(std::process::id()).expect("own /proc entry");
        // Other tests run in parallel threads and may open fds too: at least one more.
        assert!(after.fds > before.fds || after.udp_sockets > before.udp_sockets);
        assert!(after.udp_sockets >= 1 && after.sockets >= after.udp_sockets);
        drop(s);
    }

    #[test]
    fn reads_this_process() {
        let me = sample(std::process::id()).expect("own /proc entry");
        assert!(me.rss_kib > 0 && me.hwm_kib >= me.rss_kib);
        assert!(!me.threads.is_empty());
        assert!(me.thread_count >= 1);
    }

    proptest::proptest! {
        #[test]
        fn stat_parser_never_panics(text in "\\PC{0,200}") {
            let _ = parse_stat(&text);
            let _ = parse_status_kib(&text, "VmRSS");
        }
    }
}
