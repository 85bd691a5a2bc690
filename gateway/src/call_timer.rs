//! The call task's wake-up: a kernel timer (`timerfd`) instead of tokio's timer wheel.
//!
//! A call's next wake is its 20 ms playout tick. While the caller's packets flow, each packet
//! runs the tick and pushes the next one 25 ms out, so the timer is re-armed 50 times a second
//! and never fires; it fires only when packets stop (DTX, hold, loss). tokio's timer wheel keeps
//! a deadline that lies past the current 64 ms block on its second level, and that level's slots
//! expire at their *start*: the runtime wakes at every 64 ms boundary to move the entry down a
//! level, whether or not it will fire (`tokio` 1.x, `runtime/time/wheel/level.rs`,
//! `next_expiration`). A tick always 25 ms ahead straddles every boundary, so at one call the
//! I/O thread woke 15.6 times a second with nothing to do, a quarter of its wakes.
//!
//! A `timerfd` moves the deadline into the kernel's high-resolution timer, which wakes nobody
//! until it expires. Re-arming it is one `timerfd_settime` call, made only when the deadline
//! changed. Written here because no maintained crate offers a re-armable `timerfd` on tokio's
//! `AsyncFd` without pulling in a second event loop; the system calls are three.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tracing::warn;

/// A one-shot monotonic timer the call's task re-arms to its next deadline.
#[derive(Debug)]
pub(crate) struct CallTimer {
    fd: AsyncFd<OwnedFd>,
    /// The deadline the kernel timer is set to, until its expiry is read.
    armed: Option<Instant>,
    /// The descriptor failed once: tokio's timer from then on.
    failed: bool,
}

impl CallTimer {
    /// A disarmed timer, registered with the runtime for readability.
    #[allow(unsafe_code)]
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain system call; the flags are valid for `timerfd_create`.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just created and owned by nothing else; from here the
        // `OwnedFd` is owned by the `AsyncFd` until it is dropped, and nothing closes or
        // replaces the descriptor meanwhile.
        let fd = unsafe {
            let owned = OwnedFd::from_raw_fd(raw);
            AsyncFd::register_with_interest(owned, Interest::READABLE)
        };
        let fd = fd.map_err(io::Error::from)?;
        Ok(Self {
            fd,
            armed: None,
            failed: false,
        })
    }

    /// Waits until `deadline` (at once if it has passed). Cancel-safe (a `select!` arm): the
    /// kernel timer stays set when the wait is dropped, and the next call re-arms it only if
    /// the deadline moved. Should the descriptor ever fail (it does not on Linux), the wait
    /// falls back to tokio's timer rather than spinning or missing the tick.
    pub(crate) async fn sleep_until(&mut self, deadline: Instant) {
        if !self.failed {
            match self.wait(deadline).await {
                Ok(()) => return,
                Err(e) => {
                    warn!(error = %e, "the call's timerfd failed; its ticks use tokio's timer");
                    self.failed = true;
                }
            }
        }
        tokio::time::sleep_until(deadline.into()).await;
    }

    #[allow(unsafe_code)]
    async fn wait(&mut self, deadline: Instant) -> io::Result<()> {
        if self.armed != Some(deadline) {
            self.arm(deadline)?;
        }
        loop {
            let mut ready = self.fd.readable().await?;
            let read = ready.try_io(|fd| {
                let mut expirations = [0u8; 8];
                // SAFETY: reads 8 bytes into an 8-byte buffer from a descriptor we own.
                let n = unsafe {
                    libc::read(
                        fd.get_ref().as_raw_fd(),
                        expirations.as_mut_ptr().cast(),
                        expirations.len(),
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match read {
                Ok(Ok(())) => {
                    self.armed = None;
                    return Ok(());
                }
                Ok(Err(e)) => return Err(e),
                // Not expired yet (readiness left over from an expiry a re-arm cancelled).
                Err(_would_block) => continue,
            }
        }
    }

    /// Sets the kernel timer to `deadline`, relative to now; re-arming discards an expiry not
    /// yet read.
    #[allow(unsafe_code)]
    fn arm(&mut self, deadline: Instant) -> io::Result<()> {
        // A zero `it_value` would disarm the timer: a deadline already passed expires in 1 ns.
        let after = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec; the old value is not asked for.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed = Some(deadline);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_at_the_deadline_and_not_before() {
        let mut timer = CallTimer::new().unwrap();
        let start = Instant::now();
        let deadline = start + Duration::from_millis(30);
        timer.sleep_until(deadline).await;
        assert!(Instant::now() >= deadline);
    }

    #[tokio::test]
    async fn a_past_deadline_returns_at_once() {
        let mut timer = CallTimer::new().unwrap();
        let past = Instant::now() - Duration::from_millis(5);
        timer.sleep_until(past).await;
        // The same deadline again after its expiry was read is armed afresh, not waited on
        // forever.
        timer.sleep_until(past).await;
    }

    #[tokio::test]
    async fn a_moved_deadline_cancels_the_old_expiry() {
        let mut timer = CallTimer::new().unwrap();
        let start = Instant::now();
        // The first deadline expires in the kernel while nobody waits on it.
        timer.arm(start + Duration::from_millis(1)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let later = Instant::now() + Duration::from_millis(20);
        timer.sleep_until(later).await;
        assert!(
            Instant::now() >= later,
            "the stale expiry woke the wait early"
        );
    }

    #[tokio::test]
    async fn a_dropped_wait_leaves_the_timer_set() {
        let mut timer = CallTimer::new().unwrap();
        let deadline = Instant::now() + Duration::from_millis(20);
        tokio::select! {
            biased;
            _ = timer.sleep_until(deadline) => panic!("woke before a 20 ms deadline"),
            () = std::future::ready(()) => {}
        }
        assert_eq!(timer.armed, Some(deadline));
        timer.sleep_until(deadline).await;
        assert!(Instant::now() >= deadline);
        assert_eq!(timer.armed, None);
    }

    /// Times this thread blocked (`voluntary_ctxt_switches` of `/proc/thread-self/status`).
    fn blocks() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let field = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap();
        field.trim().parse().unwrap()
    }

    /// A call's loop on its own current-thread runtime: datagrams every 20 ms for 1 s, each
    /// re-arming the wake 25 ms ahead (the playout tick's fallback). Returns how often the
    /// thread blocked beyond the wakes that found a datagram or a due deadline (a datagram a
    /// busy machine delayed past 25 ms lets the deadline fire, as it should).
    fn blocks_beyond_packets(kernel_timer: bool) -> i64 {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let drain = rx.try_clone().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let reader = crate::media_socket::MediaReader::new(rx).unwrap();
            let mut timer = CallTimer::new().unwrap();
            let pacer = std::thread::spawn(move || {
                let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                for _ in 0..51 {
                    tx.send_to(&[0u8; 172], to).unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            let mut buf = [0u8; 1500];
            reader.recv_from(&mut buf).await.unwrap();
            let first_blocks = blocks();
            let (mut packet_wakes, mut fired, mut received) = (0i64, 0u32, 1);
            let mut wake = Instant::now() + Duration::from_millis(25);
            while received < 51 {
                tokio::select! {
                    r = reader.recv_from(&mut buf) => {
                        r.unwrap();
                        received += 1;
                        packet_wakes += 1;
                        // Datagrams that queued meanwhile came without a wake of their own.
                        while drain.recv_from(&mut buf).is_ok() {
                            received += 1;
                        }
                        wake = Instant::now() + Duration::from_millis(25);
                    }
                    () = timer.sleep_until(wake), if kernel_timer => {
                        fired += 1;
                        wake += Duration::from_millis(20);
                    }
                    () = tokio::time::sleep_until(wake.into()), if !kernel_timer => {
                        fired += 1;
                        wake += Duration::from_millis(20);
                    }
                }
            }
            let blocked = (blocks() - first_blocks) as i64;
            pacer.join().unwrap();
            blocked - packet_wakes - i64::from(fired)
        })
    }

    #[test]
    fn a_deadline_kept_ahead_by_packets_wakes_nobody() {
        // The same loop on tokio's timer shows what the test catches.
        let tokio_extra = blocks_beyond_packets(false);
        let timerfd_extra = blocks_beyond_packets(true);
        eprintln!(
            "blocks beyond packet and deadline wakes over 1 s: tokio's timer {tokio_extra}, timerfd {timerfd_extra}"
        );
        // tokio wakes at each 64 ms boundary the deadline straddles: 15 in a second, fewer
        // only where a boundary and a datagram meet.
        assert!(
            tokio_extra >= 5,
            "tokio's timer wheel woke {tokio_extra} times for nothing"
        );
        // At most zero: a datagram or deadline found without blocking counts below zero.
        assert!(
            timerfd_extra <= 0,
            "the kernel timer woke the thread {timerfd_extra} times for nothing"
        );
    }
}
