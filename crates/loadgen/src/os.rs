//! The OS calls the harness needs that std lacks: setting the calling thread's CPU affinity
//! (so a spawned gateway inherits a cpuset and the harness keeps off it), joining a cgroup
//! between fork and exec, and the clock tick rate of `/proc/<pid>/stat`.
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
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(1024);
    // SAFETY: c < CPU_SETSIZE, inside `set`.
    (0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Make `cmd`'s child join the cgroup whose `cgroup.procs` is open as `procs` before it execs,
/// so the program starts inside its quota: a gateway moved in after it started had already read
/// its cgroup (no quota) and sized its inference budget and admission for a whole machine.
pub fn join_cgroup_before_exec(cmd: &mut std::process::Command, procs: std::fs::File) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = procs.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and calls only write(2), which is
    // async-signal-safe, on a descriptor the parent keeps open (the closure owns `procs`) with a
    // static buffer; it allocates nothing and takes no lock. Writing "0" moves the writer.
    unsafe {
        cmd.pre_exec(move || {
            let _keep_open = &procs;
            let rc = libc::write(fd, b"0".as_ptr().cast(), 1);
            if rc == 1 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Clock ticks per second of `/proc/<pid>/stat`'s utime/stime (almost always 100).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory effects; it returns -1 on error.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

/// Ask the kernel to stamp every datagram `fd` receives with its arrival time
/// (`SO_TIMESTAMPNS`), so a busy harness does not mistake its own lag for the gateway's.
pub fn enable_receive_timestamps(fd: std::os::fd::RawFd) -> Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `on` outlives the call and its size is passed; fd is an open socket of the caller.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(Error::Os {
            action: "setsockopt(SO_TIMESTAMPNS)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

fn socket_addr(storage: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET) into the storage, which is
            // large and aligned enough for any sockaddr.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6 (family AF_INET6).
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// One datagram with its kernel arrival stamp (wall clock since the Unix epoch), if the socket
/// has [`enable_receive_timestamps`]. Non-blocking sockets return `WouldBlock` as usual.
pub fn recv_with_timestamp(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
) -> std::io::Result<(
    usize,
    Option<std::net::SocketAddr>,
    Option<std::time::Duration>,
)> {
    // SAFETY: zeroed sockaddr_storage is a valid (unspecified) address buffer.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // u64 words keep the control buffer aligned for cmsghdr.
    let mut control = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: zeroed msghdr is valid; every pointer set below outlives the recvmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut storage as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: msg points at valid buffers of the lengths given.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: CMSG_* walk the control buffer the kernel filled, bounded by msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                if let (Ok(s), Ok(ns)) = (u64::try_from(ts.tv_sec), u32::try_from(ts.tv_nsec)) {
                    stamp = Some(std::time::Duration::new(s, ns));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, socket_addr(&storage), stamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn kernel_stamps_received_datagrams() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_receive_timestamps(rx.as_raw_fd()).unwrap();
        // The kernel turns stamping on asynchronously (a static key flipped from a work item).
        std::thread::sleep(std::time::Duration::from_millis(100));
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"hello", rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut buf = [0u8; 64];
        let (n, from, stamp) = recv_with_timestamp(rx.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(
            (&buf[..n], from),
            (&b"hello"[..], Some(tx.local_addr().unwrap()))
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let waited = now - stamp.expect("kernel timestamp");
        // It arrived before the 50 ms sleep ended, and not long before.
        assert!(waited >= std::time::Duration::from_millis(40), "{waited:?}");
        assert!(waited < std::time::Duration::from_secs(5), "{waited:?}");
        let e = recv_with_timestamp(rx.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    }
}
