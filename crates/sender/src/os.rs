//! The OS calls of the media clock, in one small module: the monotonic clock, absolute sleeps and
//! non-blocking UDP sends. Everything else in the crate is safe code.
#![allow(unsafe_code)]

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// CLOCK_MONOTONIC now, in nanoseconds since an arbitrary origin (boot).
pub(crate) fn monotonic_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux, so the
    // call cannot fail (and on failure `ts` stays zeroed, which is still a valid value).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * NANOS_PER_SEC + ts.tv_nsec as u64
}

/// Sleep until CLOCK_MONOTONIC reaches `deadline_ns` (absolute: a late wake never shifts the
/// schedule, unlike chained relative sleeps). Returns at once if the deadline has passed.
pub(crate) fn sleep_until_ns(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / NANOS_PER_SEC) as libc::time_t,
        tv_nsec: (deadline_ns % NANOS_PER_SEC) as libc::c_long,
    };
    loop {
        // SAFETY: `ts` is a valid timespec with tv_nsec < 1e9; with TIMER_ABSTIME the remaining
        // time pointer is unused, so passing null is allowed (clock_nanosleep(2)).
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        // clock_nanosleep returns the error number directly; EINTR (a signal) means sleep again
        // to the same absolute deadline.
        if rc != libc::EINTR {
            return;
        }
    }
}

/// Lock the process's current and future pages in RAM (mlockall(2)), so the tick never waits
/// for a page to come back from disk or be reclaimed. Needs CAP_IPC_LOCK or a large enough
/// RLIMIT_MEMLOCK.
pub(crate) fn lock_all_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only and touches no memory of ours.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Undo [`lock_all_memory`].
pub(crate) fn unlock_all_memory() {
    // SAFETY: munlockall takes no arguments and touches no memory of ours.
    unsafe { libc::munlockall() };
}

/// A destination address in the kernel's form, built once per stream so sends do no conversion.
#[derive(Clone, Copy)]
pub(crate) struct RawSocketAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawSocketAddr {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = match addr {
            SocketAddr::V4(v4) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: v4.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(v4.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
                unsafe {
                    std::ptr::write(
                        (&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>(),
                        sin,
                    )
                };
                std::mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(v6) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: v6.port().to_be(),
                    sin6_flowinfo: v6.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: v6.ip().octets(),
                    },
                    sin6_scope_id: v6.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
                unsafe {
                    std::ptr::write(
                        (&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>(),
                        sin6,
                    )
                };
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        Self {
            storage,
            len: len as libc::socklen_t,
        }
    }
}

/// Send one datagram without blocking, whatever the socket's own blocking mode (MSG_DONTWAIT),
/// so a full socket buffer costs a packet, never the clock.
pub(crate) fn send_to_nonblocking(
    socket: &impl AsRawFd,
    packet: &[u8],
    to: &RawSocketAddr,
) -> io::Result<usize> {
    // SAFETY: the fd is owned by `socket`, which outlives the call; `packet` is a valid slice
    // of `packet.len()` bytes; `to.storage` holds an initialised address of `to.len` bytes.
    let rc = unsafe {
        libc::sendto(
            socket.as_raw_fd(),
            packet.as_ptr().cast::<libc::c_void>(),
            packet.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            (&to.storage as *const libc::sockaddr_storage).cast::<libc::sockaddr>(),
            to.len,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// This thread's kernel id (gettid(2)), the name of its `/proc/self/task/<tid>` entry.
pub(crate) fn thread_id() -> i32 {
    // SAFETY: gettid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::gettid() }
}

/// Milliseconds per clock tick of `/proc/stat` (sysconf(_SC_CLK_TCK); 100 Hz unless the kernel
/// says otherwise).
pub(crate) fn ms_per_clock_tick() -> f64 {
    // SAFETY: sysconf takes a constant and touches no memory.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        1000.0 / hz as f64
    } else {
        10.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_sleep_reaches_its_deadline() {
        let start = monotonic_now_ns();
        let deadline = start + 5_000_000;
        sleep_until_ns(deadline);
        assert!(monotonic_now_ns() >= deadline);
        // A deadline in the past returns at once (no panic, no wait).
        sleep_until_ns(start);
    }

    #[test]
    fn sends_to_v4_and_v6_loopback() {
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(rx) = std::net::UdpSocket::bind(bind) else {
                eprintln!("skip {bind}: cannot bind (no such address family here)");
                continue;
            };
            let tx = std::net::UdpSocket::bind(bind).expect("same family binds twice");
            let to = RawSocketAddr::new(rx.local_addr().expect("bound"));
            assert_eq!(
                send_to_nonblocking(&tx, b"hello", &to).expect("loopback send"),
                5
            );
            let mut buf = [0u8; 16];
            let (n, from) = rx.recv_from(&mut buf).expect("loopback receive");
            assert_eq!(&buf[..n], b"hello");
            assert_eq!(from, tx.local_addr().expect("bound"));
        }
    }
}
