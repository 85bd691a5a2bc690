//! Random packet loss on loopback, netem-style, for one test at a time: UDP to given port
//! ranges is dropped at a given rate while a [`Loss`] lives, and nothing else is touched.
//!
//! netem (`tc qdisc … netem loss 5%` in a `prio` band chosen by `u32` filters) is the usual
//! tool, but kernels built without `CONFIG_NET_SCH_NETEM` and `CONFIG_NET_SCH_PRIO` have
//! neither (the VM this was written on runs one). What such kernels do have is enough for the
//! same loss: a `clsact` qdisc on `lo` whose egress hook runs one classic-BPF filter in
//! direct-action mode (`cls_bpf`, no action modules needed). The program drops IPv4 UDP to
//! the ports given, each packet with the probability given, from the kernel's own per-packet
//! random number (`ld rand`), by returning `TC_ACT_SHOT`; every other packet it returns
//! unclassified. The `clsact` qdisc counts those drops (`tc -s qdisc show dev lo`:
//! `dropped`), the counter [`Loss::dropped`] reads: nothing else drops at that hook.
//!
//! Loopback keeps its root qdisc (`noqueue`): other tests' traffic on `lo` takes its usual
//! path, plus one short BPF run per packet. Every packet crosses `lo`'s egress exactly once,
//! so matching on the destination port alone drops both directions of a call when both ends'
//! ports are given.
//!
//! The guard refuses (and adds nothing) when `lo` carries any qdisc but its default one: that
//! is someone else's setup, or the leftover of a test run killed while it held a guard
//! (`tc qdisc del dev lo clsact` removes it). Without `tc`, without root, or on a kernel
//! lacking `clsact` or `cls_bpf`, the test is skipped with the reason printed.

use std::fs::File;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// Serialises guards within this test binary; the lock file serialises them across binaries.
static IN_PROCESS: Mutex<()> = Mutex::new(());

/// A fixed path rather than the temporary directory: every test process on the machine must
/// agree on it whatever its `TMPDIR`.
const LOCK_FILE: &str = "/tmp/ontime-lo-loss.lock";

/// Why no [`Loss`] could be set up.
#[derive(Debug)]
pub enum Refusal {
    /// This machine cannot do it (no `tc`, not root, kernel without the modules): skip.
    Unavailable(String),
    /// `lo` already carries a qdisc that is not its default: fail rather than touch it.
    Busy(String),
}

/// Loss on `lo` for UDP to some port ranges; removed on drop (a panicking test included).
#[must_use = "the loss lasts as long as the guard"]
pub struct Loss {
    // `Drop` removes the qdisc before these let the locks go.
    _lock_file: File,
    _in_process: MutexGuard<'static, ()>,
}

impl Loss {
    /// Drops `percent` % of the IPv4 UDP packets to any port in `ranges` (inclusive pairs)
    /// sent over `lo`, until dropped. Waits for any other guard, in this process or another,
    /// to go first.
    pub fn on_loopback(percent: u32, ranges: &[(u16, u16)]) -> Result<Loss, Refusal> {
        assert!(
            (1..=100).contains(&percent),
            "a loss of {percent} % is not within 1-100 %"
        );
        match Command::new("tc").arg("-V").output() {
            Ok(out) if out.status.success() => {}
            _ => {
                return Err(Refusal::Unavailable(
                    "`tc` is not installed (iproute2)".into(),
                ))
            }
        }
        if effective_uid() != Some(0) {
            return Err(Refusal::Unavailable(
                "changing qdiscs on lo takes root".into(),
            ));
        }
        let in_process = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
        let lock_file = File::create(LOCK_FILE)
            .unwrap_or_else(|e| panic!("cannot open the lock file {LOCK_FILE}: {e}"));
        lock_file
            .lock()
            .unwrap_or_else(|e| panic!("cannot lock {LOCK_FILE}: {e}"));

        let qdiscs = tc(&["qdisc", "show", "dev", "lo"])
            .unwrap_or_else(|e| panic!("tc qdisc show dev lo: {e}"));
        let present: Vec<&str> = qdiscs.lines().filter(|l| l.starts_with("qdisc ")).collect();
        if present.len() != 1 || !present[0].starts_with("qdisc noqueue 0: root") {
            return Err(Refusal::Busy(format!(
                "lo carries qdiscs other than its default `noqueue`, not ours to change \
                 (a killed test's leftover goes with `tc qdisc del dev lo clsact`):\n{qdiscs}"
            )));
        }
        if let Err(e) = tc(&["qdisc", "add", "dev", "lo", "clsact"]) {
            return Err(Refusal::Unavailable(format!(
                "cannot add a clsact qdisc on lo (kernel without CONFIG_NET_SCH_INGRESS?): {e}"
            )));
        }
        // From here on the guard owns the qdisc: an early return drops it, removing it.
        let loss = Loss {
            _lock_file: lock_file,
            _in_process: in_process,
        };
        let program = bytecode(&drop_program(percent, ranges));
        if let Err(e) = tc(&[
            "filter", "add", "dev", "lo", "egress", "protocol", "ip", "prio", "1", "bpf", "da",
            "bytecode", &program,
        ]) {
            return Err(Refusal::Unavailable(format!(
                "cannot add a classic-BPF filter on lo (kernel without CONFIG_NET_CLS_BPF?): {e}"
            )));
        }
        Ok(loss)
    }

    /// How many packets the filter has dropped so far: the `clsact` qdisc's own counter.
    pub fn dropped(&self) -> u64 {
        let stats = tc(&["-s", "qdisc", "show", "dev", "lo"])
            .unwrap_or_else(|e| panic!("tc -s qdisc show dev lo: {e}"));
        dropped_by_clsact(&stats)
            .unwrap_or_else(|| panic!("no clsact drop counter on lo:\n{stats}"))
    }
}

impl Drop for Loss {
    fn drop(&mut self) {
        if let Err(e) = tc(&["qdisc", "del", "dev", "lo", "clsact"]) {
            eprintln!(
                "could not remove the loss filter from lo; `tc qdisc del dev lo clsact` does: {e}"
            );
        }
    }
}

/// The least number of drops to expect of `packets` packets each dropped with probability
/// `percent` %: the binomial mean less five standard deviations, so that a filter doing its
/// job falls short about once in 3.5 million runs (the normal approximation; `packets` is in
/// the hundreds). Zero when that bound is negative.
pub fn least_drops(packets: u64, percent: u32) -> u64 {
    let n = packets as f64;
    let p = f64::from(percent) / 100.0;
    (n * p - 5.0 * (n * p * (1.0 - p)).sqrt()).max(0.0).floor() as u64
}

/// The effective user id, from `/proc/self/status` (`Uid:` real, effective, saved, fs).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Runs `tc` with `args`: its standard output, or what it said when it failed.
fn tc(args: &[&str]) -> Result<String, String> {
    let out = Command::new("tc")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run tc: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`tc {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The `dropped` count of the `clsact` qdisc in `tc -s qdisc show` output: the statistics line
/// (` Sent … (dropped N, …)`) after its `qdisc clsact` line.
fn dropped_by_clsact(stats: &str) -> Option<u64> {
    let mut lines = stats.lines();
    lines.find(|l| l.starts_with("qdisc clsact "))?;
    let sent = lines.next()?;
    let after = &sent[sent.find("dropped ")? + "dropped ".len()..];
    after
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// `lo..=hi` as aligned power-of-two blocks, `(base, mask)`: a port `p` is in the range when
/// `p & mask == base` for one of them. At most two blocks per bit of the range's width.
pub fn port_blocks(lo: u16, hi: u16) -> Vec<(u16, u16)> {
    assert!(lo <= hi, "empty port range {lo}-{hi}");
    let (mut port, hi) = (u32::from(lo), u32::from(hi));
    let mut blocks = Vec::new();
    while port <= hi {
        let mut size = 1u32;
        while size < 0x1_0000 && port % (size * 2) == 0 && port + size * 2 - 1 <= hi {
            size *= 2;
        }
        blocks.push((port as u16, (0x1_0000 - size) as u16));
        port += size;
    }
    blocks
}

/// One classic-BPF instruction: `code jt jf k`, as `tc … bpf bytecode` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn(u16, u8, u8, u32);

// Classic BPF opcodes (class | size | mode, or class | op | source).
const LDB_ABS: u16 = 0x30;
const LDH_ABS: u16 = 0x28;
const LDW_ABS: u16 = 0x20;
const LDH_IND: u16 = 0x48;
const LDXB_MSH: u16 = 0xb1;
const AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
/// `SKF_AD_OFF + SKF_AD_RANDOM`: a load from here yields a fresh random 32-bit number.
const AD_RANDOM: u32 = 0xffff_f000 + 56;
/// `tc_act` codes a direct-action classifier returns.
const TC_ACT_UNSPEC: u32 = u32::MAX;
const TC_ACT_SHOT: u32 = 2;
/// Offsets in the frame as the egress hook sees it: a 14-byte Ethernet-style header first
/// (loopback has one, zeroed), then IPv4.
const IP: u32 = 14;

/// The filter: IPv4 UDP, not a later fragment, to a port in `ranges` → dropped with
/// probability `percent` %; anything else → unclassified.
fn drop_program(percent: u32, ranges: &[(u16, u16)]) -> Vec<Insn> {
    let blocks: Vec<(u16, u16)> = ranges
        .iter()
        .flat_map(|&(lo, hi)| port_blocks(lo, hi))
        .collect();
    // Layout: 5 header instructions, 3 per block, then `pass_unmatched`, the draw (2), the
    // drop and `pass`; jumps count the instructions skipped.
    let n = blocks.len();
    let draw = 5 + 3 * n + 1;
    let pass = draw + 3;
    let jump = |from: usize, to: usize| -> u8 {
        u8::try_from(to - from - 1).expect("too many port blocks for an 8-bit BPF jump")
    };
    let mut prog = vec![
        Insn(LDB_ABS, 0, 0, IP + 9),
        Insn(JEQ_K, 0, jump(1, pass), 17),
        Insn(LDH_ABS, 0, 0, IP + 6),
        Insn(JSET_K, jump(3, pass), 0, 0x1fff),
        Insn(LDXB_MSH, 0, 0, IP),
    ];
    for (base, mask) in blocks {
        let at = prog.len();
        prog.push(Insn(LDH_IND, 0, 0, IP + 2));
        prog.push(Insn(AND_K, 0, 0, u32::from(mask)));
        prog.push(Insn(JEQ_K, jump(at + 2, draw), 0, u32::from(base)));
    }
    // Below the threshold with probability percent/100 of a uniform 32-bit draw.
    let threshold = ((f64::from(percent) / 100.0) * 4_294_967_296.0).round() as u64;
    let threshold = u32::try_from(threshold).unwrap_or(u32::MAX);
    prog.extend([
        Insn(RET_K, 0, 0, TC_ACT_UNSPEC),
        Insn(LDW_ABS, 0, 0, AD_RANDOM),
        Insn(JGE_K, 1, 0, threshold),
        Insn(RET_K, 0, 0, TC_ACT_SHOT),
        Insn(RET_K, 0, 0, TC_ACT_UNSPEC),
    ]);
    debug_assert_eq!(prog.len(), pass + 1);
    prog
}

/// `tc`'s `bytecode` argument: the count, then `code jt jf k` per instruction, comma-separated.
fn bytecode(prog: &[Insn]) -> String {
    std::iter::once(prog.len().to_string())
        .chain(
            prog.iter()
                .map(|Insn(code, jt, jf, k)| format!("{code} {jt} {jf} {k}")),
        )
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn port_blocks_cover_exactly_the_range() {
    for (lo, hi) in [
        (20_000, 20_079),
        (26_000, 26_079),
        (31_998, 32_007),
        (1, 1),
        (0, 65_535),
        (65_534, 65_535),
    ] {
        let blocks = port_blocks(lo, hi);
        assert!(blocks.len() <= 32, "{lo}-{hi}: {blocks:?}");
        for port in 0..=u16::MAX {
            let hits = blocks.iter().filter(|&&(b, m)| port & m == b).count();
            let inside = (lo..=hi).contains(&port);
            assert_eq!(
                hits,
                usize::from(inside),
                "{lo}-{hi} port {port}: {blocks:?}"
            );
        }
    }
}

#[test]
fn the_drop_counter_is_read_from_the_clsact_lines() {
    let stats = "qdisc noqueue 0: root refcnt 2 \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 \
                 requeues 0) \n backlog 0b 0p requeues 0\nqdisc clsact ffff: parent ffff:fff1 \n \
                 Sent 27126618 bytes 126687 pkt (dropped 3051, overlimits 0 requeues 0) \n \
                 backlog 0b 0p requeues 0\n";
    assert_eq!(dropped_by_clsact(stats), Some(3051));
    assert_eq!(dropped_by_clsact("qdisc noqueue 0: root refcnt 2 \n"), None);
    assert_eq!(least_drops(1500, 5), 32);
    assert_eq!(least_drops(20, 5), 0);
}

#[test]
fn loopback_loss_drops_its_ports_only() {
    use std::net::UdpSocket;
    use std::time::Duration;

    const PACKETS: u64 = 5000;
    const PERCENT: u32 = 5;
    let inside = UdpSocket::bind("127.0.0.1:0").unwrap();
    let outside = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = inside.local_addr().unwrap().port();
    let loss = match Loss::on_loopback(PERCENT, &[(port, port)]) {
        Ok(loss) => loss,
        Err(Refusal::Unavailable(why)) => {
            eprintln!("SKIP: no packet loss on loopback: {why}");
            return;
        }
        Err(Refusal::Busy(why)) => panic!("{why}"),
    };
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    // In bursts the receiver drains before the next, so that no packet is lost to a full
    // socket buffer: every one missing is the filter's.
    let delivered = |to: &UdpSocket| -> u64 {
        to.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = to.local_addr().unwrap();
        let mut buf = [0u8; 256];
        let mut got = 0;
        for _ in 0..PACKETS / 100 {
            for _ in 0..100 {
                sender.send_to(&[0x80; 172], addr).unwrap();
            }
            while to.recv(&mut buf).is_ok() {
                got += 1;
            }
        }
        got
    };
    let missing = PACKETS - delivered(&inside);
    let untouched = delivered(&outside);
    let dropped = loss.dropped();
    drop(loss);
    eprintln!(
        "loss on port {port}: {missing} of {PACKETS} missing, the filter's counter {dropped}; \
         another port got {untouched} of {PACKETS}"
    );
    assert_eq!(untouched, PACKETS, "a port not given lost packets");
    assert_eq!(
        missing, dropped,
        "packets went missing other than by the filter"
    );
    let (n, p) = (PACKETS as f64, f64::from(PERCENT) / 100.0);
    let most = (n * p + 5.0 * (n * p * (1.0 - p)).sqrt()).ceil() as u64;
    assert!(
        (least_drops(PACKETS, PERCENT)..=most).contains(&missing),
        "{missing} of {PACKETS} lost at {PERCENT} %"
    );
}
