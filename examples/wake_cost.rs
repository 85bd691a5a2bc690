//! What a wake costs on this machine: the floor under a one-call gateway's carriage.
//!
//! A "sender" thread on an absolute 20 ms clock sends one 172-byte datagram a tick to a "phone"
//! socket; a "call" thread receives one datagram every 20 ms from a "caller" (as the gateway's
//! I/O thread does). Both are pinned to `--core`; the phone and the caller run on
//! `--other-core`. Each thread's CPU comes from `/proc/self/task/<tid>/schedstat`.
//!
//! ```text
//! cargo run --release --example wake_cost -- --phone wait  --call own-wake     # the gateway before 2026-12-06's harness change
//! cargo run --release --example wake_cost -- --phone drain --call own-wake     # a phone that is not woken per packet
//! cargo run --release --example wake_cost -- --phone drain --call after-tick   # the call served from the sender's tick
//! cargo run --release --example wake_cost -- --phone none  --call none         # the sender's clock alone
//! ```
//!
//! - `--phone wait`: the phone's thread blocks in `recv`, so each send also wakes it on the
//!   other core from inside `sendto` (loopback delivers in the sending thread); `drain`: the
//!   phone reads its socket every 5 ms, no waiter to wake; `none`: nothing is sent.
//! - `--call own-wake`: the call thread blocks in `recv` and wakes per datagram; `after-tick`:
//!   the sender writes an eventfd after each tick and the call thread drains its socket then (the
//!   same core is busy, so no second wake from idle); `none`: no call thread.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phone {
    Wait,
    Drain,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Call {
    OwnWake,
    AfterTick,
    None,
}

#[derive(Debug, Parser)]
#[command(about = "CPU cost of the wakes under one call's carriage")]
struct Args {
    #[arg(long, value_enum, default_value = "wait")]
    phone: Phone,
    #[arg(long, value_enum, default_value = "own-wake")]
    call: Call,
    /// Seconds measured.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
    /// Core of the sender and the call thread.
    #[arg(long, default_value_t = 1)]
    core: usize,
    /// Core of the phone and the caller.
    #[arg(long, default_value_t = 0)]
    other_core: usize,
}

const TICK: Duration = Duration::from_millis(20);
const PACKET: [u8; 172] = [0xff; 172];

/// The few OS calls the experiment needs that std lacks.
#[allow(unsafe_code)]
mod os {
    use std::time::Duration;

    /// Pin the calling thread to `core`.
    pub fn pin(core: usize) {
        // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it; pid 0 is the
        // calling thread and the size passed is the set's.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(core, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }

    /// The calling thread's kernel id.
    pub fn tid() -> i64 {
        // SAFETY: gettid has no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) }
    }

    /// CLOCK_MONOTONIC now.
    pub fn now() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// Sleep until `deadline` on CLOCK_MONOTONIC, as the sender does.
    pub fn sleep_until(deadline: Duration) {
        let ts = libc::timespec {
            tv_sec: deadline.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(deadline.subsec_nanos() as i32),
        };
        // SAFETY: `ts` is a valid timespec; the remainder pointer may be null with TIMER_ABSTIME.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
    }

    /// A blocking eventfd.
    pub fn eventfd() -> i32 {
        // SAFETY: eventfd has no memory preconditions.
        unsafe { libc::eventfd(0, 0) }
    }

    /// Add one to the eventfd's counter.
    pub fn signal(fd: i32) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a valid u64.
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }

    /// Block until the eventfd's counter is non-zero, and reset it.
    pub fn wait(fd: i32) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a valid u64.
        unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    }
}

/// A thread's CPU time so far, from the kernel's scheduler statistics.
fn cpu_ns(tid: i64) -> anyhow::Result<u64> {
    let path = format!("/proc/self/task/{tid}/schedstat");
    let text = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{path}: no run time"))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let start = os::now() + Duration::from_millis(200);
    let phone = UdpSocket::bind("127.0.0.1:0")?;
    let phone_addr = phone.local_addr()?;
    let call_socket = UdpSocket::bind("127.0.0.1:0")?;
    let call_addr = call_socket.local_addr()?;
    let other = args.other_core;
    match args.phone {
        Phone::Wait => {
            std::thread::spawn(move || {
                os::pin(other);
                let mut b = [0u8; 2048];
                while phone.recv(&mut b).is_ok() {}
            });
        }
        Phone::Drain => {
            phone.set_nonblocking(true)?;
            std::thread::spawn(move || {
                os::pin(other);
                let mut b = [0u8; 2048];
                loop {
                    std::thread::sleep(Duration::from_millis(5));
                    while phone.recv(&mut b).is_ok() {}
                }
            });
        }
        Phone::None => {}
    }
    if args.call != Call::None {
        // The caller: a datagram every 20 ms, 7 ms off the sender's phase.
        std::thread::spawn(move || -> std::io::Result<()> {
            os::pin(other);
            let s = UdpSocket::bind("127.0.0.1:0")?;
            let mut at = start + Duration::from_millis(7);
            loop {
                os::sleep_until(at);
                s.send_to(&PACKET, call_addr)?;
                at += TICK;
            }
        });
    }
    let tick_done = os::eventfd();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let mode = args.call;
    let core = args.core;
    if mode != Call::None {
        std::thread::spawn(move || -> std::io::Result<()> {
            os::pin(core);
            let _ = tid_tx.send(os::tid());
            let mut b = [0u8; 2048];
            if mode == Call::AfterTick {
                call_socket.set_nonblocking(true)?;
                loop {
                    os::wait(tick_done);
                    while call_socket.recv(&mut b).is_ok() {}
                }
            }
            loop {
                call_socket.recv(&mut b)?;
            }
        });
    }
    let call_tid = if mode == Call::None {
        None
    } else {
        Some(tid_rx.recv()?)
    };
    let send = args.phone != Phone::None;
    let seconds = args.seconds;
    let sender = std::thread::spawn(move || -> anyhow::Result<(u64, Option<u64>)> {
        os::pin(core);
        let me = os::tid();
        let out = UdpSocket::bind("127.0.0.1:0")?;
        let end = start + Duration::from_secs(seconds);
        let mut at = start;
        os::sleep_until(at);
        let (s0, c0) = (cpu_ns(me)?, call_tid.map(cpu_ns).transpose()?);
        while at < end {
            os::sleep_until(at);
            if send {
                out.send_to(&PACKET, phone_addr)?;
            }
            if mode == Call::AfterTick {
                os::signal(tick_done);
            }
            at += TICK;
        }
        let (s1, c1) = (cpu_ns(me)?, call_tid.map(cpu_ns).transpose()?);
        Ok((s1 - s0, c0.zip(c1).map(|(a, b)| b - a)))
    });
    let began = Instant::now();
    let (sender_ns, call_ns) = sender
        .join()
        .map_err(|_| anyhow::anyhow!("sender thread panicked"))??;
    let per_s = |ns: u64| ns as f64 / 1e6 / seconds as f64;
    println!(
        "phone {:?}, call {:?}, {:.0} s: sender {:.2} ms/s, call thread {}, both {:.2} ms/s",
        args.phone,
        args.call,
        began.elapsed().as_secs_f64(),
        per_s(sender_ns),
        call_ns.map_or("-".into(), |n| format!("{:.2} ms/s", per_s(n))),
        per_s(sender_ns + call_ns.unwrap_or(0)),
    );
    Ok(())
}
