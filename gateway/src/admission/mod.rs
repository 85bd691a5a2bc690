//! Admission: whether a new call may start (accepting, `max_calls`, a free RTP port pair) and the
//! one place a call's resources are given back. A [`CallSlot`] is taken when an INVITE is
//! admitted and released when it is dropped — rejected after ringing, cancelled, or ended — so
//! "free the port and count the call out" is written once, in [`Drop`].

pub(crate) mod headroom;
mod ports;
pub(crate) mod sip_guard;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::warn;

use crate::config::PortRange;
use ports::PortPool;

/// Seconds a refused caller is asked to wait (`Retry-After`).
pub const RETRY_AFTER_SECS: u32 = 5;

/// How many ports of the pool to try before giving up (another process may hold some).
const BIND_ATTEMPTS: usize = 8;

/// Counted reasons for refusing an INVITE (label values of `ontime_calls_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The INVITE came from outside the trunk networks: 403.
    NotTrunk,
    /// At `max_calls`: 503 with Retry-After.
    MaxCalls,
    /// No RTP port pair free: 503 with Retry-After.
    NoRtpPort,
    /// Draining for shutdown: 503 with Retry-After.
    Draining,
    /// No codec in common (or no offer): 488.
    NoCommonCodec,
    /// Codecs in common, but the SRTP policy refused the offer (SRTP required and not offered,
    /// or offered only and turned off, or no usable crypto suite): 488.
    Srtp,
    /// The agent could not serve the call (e.g. its bot is unreachable): 503 with Retry-After,
    /// sent after ringing.
    AgentUnavailable,
    /// The measured headroom is below `admission_reserve`: one more call would risk every
    /// call's timing (503 with Retry-After, so the trunk tries another pod).
    NoHeadroom,
    /// The voice route said `<Reject reason="busy"/>`: 486.
    Busy,
    /// The voice route said `<Reject/>`, or the API ended the ringing call: 603.
    Declined,
}

impl RejectReason {
    /// Every reason, for registering the metric's labels at zero.
    pub const ALL: [RejectReason; 10] = [
        RejectReason::NotTrunk,
        RejectReason::MaxCalls,
        RejectReason::NoRtpPort,
        RejectReason::Draining,
        RejectReason::NoCommonCodec,
        RejectReason::Srtp,
        RejectReason::AgentUnavailable,
        RejectReason::NoHeadroom,
        RejectReason::Busy,
        RejectReason::Declined,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            RejectReason::NotTrunk => "not_trunk",
            RejectReason::MaxCalls => "max_calls",
            RejectReason::NoRtpPort => "no_rtp_port",
            RejectReason::Draining => "draining",
            RejectReason::NoCommonCodec => "no_common_codec",
            RejectReason::Srtp => "srtp",
            RejectReason::AgentUnavailable => "agent_unavailable",
            RejectReason::NoHeadroom => "no_headroom",
            RejectReason::Busy => "busy",
            RejectReason::Declined => "declined",
        }
    }
    /// The SIP status sent.
    pub fn status(self) -> u16 {
        match self {
            RejectReason::NotTrunk => 403,
            RejectReason::NoCommonCodec | RejectReason::Srtp => 488,
            RejectReason::Busy => 486,
            RejectReason::Declined => 603,
            _ => 503,
        }
    }
}

/// Why the gateway would refuse a new call now (`/readyz` says it; OPTIONS get 503).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// Draining for shutdown.
    Draining,
    /// At `max_calls`.
    Full,
    /// Every RTP port pair is taken.
    NoRtpPort,
    /// The SIP endpoint's transaction budget is exhausted (a flood from trusted sources).
    SipOverloaded,
    /// The measured headroom is below the reserve.
    NoHeadroom,
}

impl NotReady {
    /// What `/readyz` says.
    pub fn describe(self) -> &'static str {
        match self {
            NotReady::Draining => "draining: no new calls",
            NotReady::Full => "full: max_calls reached",
            NotReady::NoRtpPort => "full: no free RTP port",
            NotReady::SipOverloaded => "overloaded: SIP transaction budget exhausted",
            NotReady::NoHeadroom => "full: no measured headroom for another call",
        }
    }
}

/// The gateway's call capacity, shared by the switchboard, the calls and the ops endpoint.
#[derive(Debug)]
pub struct CallSlots {
    sip_overloaded: AtomicBool,
    /// More calls that fit by measurement (0 until the first estimate: with a reserve, not
    /// ready before anything was measured).
    headroom: AtomicUsize,
    /// Headroom a new call needs (`admission_reserve`).
    reserve: usize,
    accepting: AtomicBool,
    active: AtomicUsize,
    /// Calls admitted since the start (the headroom estimate tells young calls by it).
    admitted: AtomicU64,
    max_calls: usize,
    ports: Mutex<PortPool>,
}

impl CallSlots {
    /// Room for `max_calls` calls on the RTP ports of `ports`, whatever the measured headroom
    /// (see [`CallSlots::with_reserve`]).
    #[cfg(test)]
    pub fn new(max_calls: usize, ports: PortRange) -> Arc<CallSlots> {
        Self::with_reserve(max_calls, ports, 0)
    }

    /// Room for `max_calls` calls on the RTP ports of `ports`, admitting a call only while the
    /// measured headroom is at least `reserve` calls.
    pub fn with_reserve(max_calls: usize, ports: PortRange, reserve: usize) -> Arc<CallSlots> {
        Arc::new(CallSlots {
            sip_overloaded: AtomicBool::new(false),
            headroom: AtomicUsize::new(0),
            reserve,
            accepting: AtomicBool::new(true),
            active: AtomicUsize::new(0),
            admitted: AtomicU64::new(0),
            max_calls,
            ports: Mutex::new(PortPool::new(ports)),
        })
    }

    /// Whether a new call would be admitted now (for `/readyz` and OPTIONS).
    pub fn ready(&self) -> bool {
        self.readiness().is_ok()
    }

    /// Whether a new call would be admitted now, and if not, why.
    pub fn readiness(&self) -> Result<(), NotReady> {
        if !self.accepting() {
            Err(NotReady::Draining)
        } else if self.active() >= self.max_calls {
            Err(NotReady::Full)
        } else if self.pool().available() == 0 {
            Err(NotReady::NoRtpPort)
        } else if self.sip_overloaded.load(Ordering::Relaxed) {
            Err(NotReady::SipOverloaded)
        } else if self.headroom.load(Ordering::Relaxed) < self.reserve {
            Err(NotReady::NoHeadroom)
        } else {
            Ok(())
        }
    }

    /// One admitted call uses one call of the measured headroom until the next estimate
    /// re-measures (about a second): without this, a burst of INVITEs inside one estimate window
    /// was admitted whole against a headroom measured before it (the load harness saw 35 calls
    /// in 3 s under a 0.5-CPU quota, then 25 % of CFS periods throttled). False when the headroom
    /// left is below the reserve (never with a reserve of 0: report only).
    fn take_headroom(&self) -> bool {
        let mut left = self.headroom.load(Ordering::Relaxed);
        loop {
            if left < self.reserve {
                return false;
            }
            match self.headroom.compare_exchange_weak(
                left,
                left.saturating_sub(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => left = now,
            }
        }
    }

    /// The latest measured headroom (more calls that fit).
    pub fn set_headroom(&self, calls: usize) {
        self.headroom.store(calls, Ordering::Relaxed);
    }

    /// More calls that would be admitted now: the measured headroom within `max_calls`.
    pub fn headroom(&self) -> usize {
        let by_count = self.max_calls.saturating_sub(self.active());
        self.headroom.load(Ordering::Relaxed).min(by_count)
    }

    /// The SIP endpoint's transaction budget is (or is no longer) exhausted.
    pub fn set_sip_overloaded(&self, overloaded: bool) {
        self.sip_overloaded.store(overloaded, Ordering::Relaxed);
    }

    /// Calls admitted since the start (monotonic).
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// Calls holding a slot (ringing or up).
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Whether new calls are still accepted.
    pub fn accepting(&self) -> bool {
        self.accepting.load(Ordering::Relaxed)
    }

    /// Refuse new calls from now on (drain).
    pub fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::Relaxed);
    }

    /// Take a slot for a new call and bind its RTP/RTCP sockets on `ip`.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<AdmittedCall, RejectReason> {
        if !self.accepting() {
            return Err(RejectReason::Draining);
        }
        if self.headroom.load(Ordering::Relaxed) < self.reserve {
            return Err(RejectReason::NoHeadroom);
        }
        // Counted before the check so two admissions cannot both take the last slot.
        if self.active.fetch_add(1, Ordering::Relaxed) >= self.max_calls {
            self.active.fetch_sub(1, Ordering::Relaxed);
            return Err(RejectReason::MaxCalls);
        }
        if !self.take_headroom() {
            self.active.fetch_sub(1, Ordering::Relaxed);
            return Err(RejectReason::NoHeadroom);
        }
        let mut slot = CallSlot {
            slots: Arc::clone(self),
            port: None,
        };
        for _ in 0..BIND_ATTEMPTS {
            let Some(port) = self.pool().allocate() else {
                break;
            };
            match bind_pair(ip, port) {
                Ok((rtp, rtcp)) => {
                    slot.port = Some(port);
                    self.admitted.fetch_add(1, Ordering::Relaxed);
                    return Ok(AdmittedCall { slot, rtp, rtcp });
                }
                Err(e) => {
                    warn!(port, error = %e, "RTP port busy, trying the next");
                    self.pool().release(port);
                }
            }
        }
        Err(RejectReason::NoRtpPort) // dropping `slot` counts the call out
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, PortPool> {
        // The pool holds plain data: a panic elsewhere cannot leave it inconsistent.
        self.ports.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One admitted call's hold on the capacity: its RTP port pair and its place in `max_calls`.
/// Dropping it gives both back.
#[derive(Debug)]
#[must_use = "dropping the slot releases it"]
pub struct CallSlot {
    slots: Arc<CallSlots>,
    port: Option<u16>,
}

/// A call slot with its bound sockets.
#[derive(Debug)]
pub struct AdmittedCall {
    /// The slot (keep it as long as the call lives).
    pub slot: CallSlot,
    /// RTP socket, non-blocking, on an even port.
    pub rtp: UdpSocket,
    /// RTCP socket on the port above.
    pub rtcp: UdpSocket,
}

impl CallSlot {
    /// The RTP port held.
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        if let Some(port) = self.port.take() {
            self.slots.pool().release(port);
        }
        self.slots.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Bind the RTP socket on an even port and RTCP on the port above (RFC 3550 §11).
fn bind_pair(ip: IpAddr, port: u16) -> std::io::Result<(UdpSocket, UdpSocket)> {
    let rtp = UdpSocket::bind(SocketAddr::new(ip, port))?;
    let rtcp = UdpSocket::bind(SocketAddr::new(ip, port + 1))?;
    rtp.set_nonblocking(true)?;
    rtcp.set_nonblocking(true)?;
    Ok((rtp, rtcp))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `n` free even-aligned ports on loopback.
    pub(crate) fn free_range(n: u16) -> PortRange {
        for _ in 0..100 {
            let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
            let base = probe.local_addr().unwrap().port() & !1;
            drop(probe);
            if base < 1024 || base.checked_add(n).is_none() {
                continue;
            }
            if (base..base + n).all(|p| UdpSocket::bind(("127.0.0.1", p)).is_ok()) {
                return PortRange {
                    first: base,
                    last: base + n - 1,
                };
            }
        }
        panic!("no free port range");
    }

    #[test]
    fn a_slot_is_given_back_once_whichever_way_the_call_ends() {
        let slots = CallSlots::new(2, free_range(6));
        let a = slots.admit("127.0.0.1".parse().unwrap()).unwrap();
        let b = slots.admit("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(slots.active(), 2);
        assert_eq!(slots.readiness(), Err(NotReady::Full));
        assert_eq!(
            slots.admit("127.0.0.1".parse().unwrap()).unwrap_err(),
            RejectReason::MaxCalls
        );
        assert_eq!(slots.active(), 2, "a refused admission holds nothing");
        drop(a);
        assert_eq!(slots.active(), 1);
        assert_eq!(slots.readiness(), Ok(()));
        slots.set_sip_overloaded(true);
        assert_eq!(slots.readiness(), Err(NotReady::SipOverloaded));
        slots.set_sip_overloaded(false);
        slots.stop_accepting();
        assert_eq!(slots.readiness(), Err(NotReady::Draining));
        drop(b);
        assert_eq!(slots.active(), 0);
    }

    #[test]
    fn each_admission_uses_a_call_of_the_measured_headroom() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let slots = CallSlots::with_reserve(10, free_range(12), 1);
        assert_eq!(
            slots.readiness(),
            Err(NotReady::NoHeadroom),
            "nothing measured yet"
        );
        slots.set_headroom(2);
        let a = slots.admit(ip).unwrap();
        let b = slots.admit(ip).unwrap();
        assert_eq!(slots.headroom(), 0);
        assert_eq!(slots.readiness(), Err(NotReady::NoHeadroom));
        assert_eq!(slots.admit(ip).unwrap_err(), RejectReason::NoHeadroom);
        assert_eq!(slots.active(), 2, "a refused admission holds nothing");
        // The next estimate re-measures with the two calls up.
        slots.set_headroom(1);
        let c = slots.admit(ip).unwrap();
        assert_eq!(slots.active(), 3);
        drop((a, b, c));
        // Report only: a reserve of 0 never refuses, whatever is measured.
        let report = CallSlots::with_reserve(10, free_range(4), 0);
        let d = report.admit(ip).unwrap();
        let e = report.admit(ip).unwrap();
        assert_eq!(report.active(), 2);
        drop((d, e));
    }

    #[test]
    fn no_free_port_is_not_ready() {
        let slots = CallSlots::new(10, free_range(2));
        let a = slots.admit("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(slots.readiness(), Err(NotReady::NoRtpPort));
        assert_eq!(
            slots.admit("127.0.0.1".parse().unwrap()).unwrap_err(),
            RejectReason::NoRtpPort
        );
        assert_eq!(slots.active(), 1);
        drop(a);
        assert_eq!(slots.readiness(), Ok(()));
    }
}
