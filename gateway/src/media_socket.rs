//! The call task's read side of its RTP and RTCP sockets.
//!
//! tokio's `UdpSocket` registers a socket for readability *and* writability. A call's RTP socket
//! is written by the sender thread (through its own handle on the same socket) 50 times a
//! second, and with edge-triggered epoll each send's write-space edge reported the socket
//! writable and woke the call's task for nothing: at one call, 50 of the I/O thread's 165 wakes
//! a second. The task never writes through tokio (RTCP goes out on the blocking handle, RTP on
//! the sender's), so it registers for readability only.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A UDP socket the call's task only receives on.
#[derive(Debug)]
pub(crate) struct MediaReader(AsyncFd<UdpSocket>);

impl MediaReader {
    /// Registers `socket` (made non-blocking) with the runtime for readability only.
    #[allow(unsafe_code)]
    pub(crate) fn new(socket: UdpSocket) -> io::Result<Self> {
        socket.set_nonblocking(true)?;
        // SAFETY: the `UdpSocket` is owned by the `AsyncFd` from here until it is dropped, and
        // nothing closes or replaces its descriptor meanwhile (`as_raw_fd` of a std socket is
        // fixed for its lifetime).
        let fd = unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE) };
        Ok(Self(fd.map_err(io::Error::from)?))
    }

    /// The next datagram. Cancel-safe (a `select!` arm): nothing is read until the socket is
    /// readable, and a read that finds nothing clears the readiness and waits again.
    pub(crate) async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        loop {
            let mut ready = self.0.readable().await?;
            if let Ok(result) = ready.try_io(|s| s.get_ref().recv_from(buf)) {
                return result;
            }
        }
    }
}
