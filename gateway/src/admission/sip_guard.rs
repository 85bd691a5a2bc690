//! The first look at every SIP datagram, before the endpoint parses it or creates a transaction:
//! strangers (outside the trunk networks) cost nothing — dropped, or at most one stateless,
//! rate-limited 403 — and each trusted source has a message budget per second, so no flood can
//! fill the transaction table that trunk INVITEs and in-dialog BYEs need. Sans-IO: fed the
//! source, the first bytes and the time.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tracing::warn;

use crate::config::UntrustedSip;

/// Stateless 403s to strangers per second, over all of them (`untrusted_sip = reject`): enough
/// for a misconfigured peer to learn why, too few to reflect a flood at a spoofed victim.
const UNTRUSTED_REPLIES_PER_SECOND: u32 = 10;
/// Sources remembered for rate limiting; beyond it, idle ones are forgotten.
const MAX_TRACKED_SOURCES: usize = 4096;
/// At most one warning per this interval about dropped SIP (with the count since the last).
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What to do with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Hand it to the endpoint.
    Pass,
    /// Send one stateless 403 and forget it.
    Reject,
    /// Drop it; the reason is the `reason` label of `ontime_sip_dropped_total`.
    Drop(&'static str),
}

/// A token bucket: `rate` per second, holding at most one second's worth.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: u32, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(rate),
            at: now,
        }
    }

    fn take(&mut self, rate: u32, now: Instant) -> bool {
        let rate = f64::from(rate);
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The per-datagram policy.
#[derive(Debug)]
pub(crate) struct SipGuard {
    trunk: Vec<IpNet>,
    untrusted: UntrustedSip,
    rate: u32,
    sources: HashMap<IpAddr, Bucket>,
    replies: Bucket,
    dropped_since_log: u64,
    last_log: Option<Instant>,
}

fn is_request(bytes: &[u8]) -> bool {
    !bytes.starts_with(b"SIP/") && !bytes.starts_with(b"ACK ")
}

impl SipGuard {
    /// A guard trusting `trunk`, letting each trusted source send `rate` messages a second.
    pub(crate) fn new(trunk: Vec<IpNet>, untrusted: UntrustedSip, rate: u32, now: Instant) -> Self {
        SipGuard {
            trunk,
            untrusted,
            rate: rate.max(1),
            sources: HashMap::new(),
            replies: Bucket::full(UNTRUSTED_REPLIES_PER_SECOND, now),
            dropped_since_log: 0,
            last_log: None,
        }
    }

    fn trusted(&self, ip: IpAddr) -> bool {
        self.trunk.iter().any(|net| net.contains(&ip))
    }

    /// Judge one datagram from `source`.
    pub(crate) fn check(&mut self, source: SocketAddr, bytes: &[u8], now: Instant) -> Verdict {
        let verdict = self.judge(source, bytes, now);
        if let Verdict::Drop(reason) = verdict {
            self.note_drop(reason, source, now);
        }
        verdict
    }

    fn judge(&mut self, source: SocketAddr, bytes: &[u8], now: Instant) -> Verdict {
        let ip = source.ip();
        if !self.trusted(ip) {
            return match self.untrusted {
                UntrustedSip::Reject
                    if is_request(bytes)
                        && self.replies.take(UNTRUSTED_REPLIES_PER_SECOND, now) =>
                {
                    Verdict::Reject
                }
                _ => Verdict::Drop("untrusted"),
            };
        }
        if self.sources.len() >= MAX_TRACKED_SOURCES && !self.sources.contains_key(&ip) {
            // Forget sources whose bucket has refilled: they are idle.
            let rate = self.rate;
            self.sources.retain(|_, b| {
                now.saturating_duration_since(b.at) < Duration::from_secs(1)
                    || b.tokens < f64::from(rate)
            });
        }
        let rate = self.rate;
        let bucket = self
            .sources
            .entry(ip)
            .or_insert_with(|| Bucket::full(rate, now));
        if bucket.take(rate, now) {
            Verdict::Pass
        } else {
            Verdict::Drop("rate_limited")
        }
    }

    fn note_drop(&mut self, reason: &'static str, source: SocketAddr, now: Instant) {
        self.dropped_since_log += 1;
        let due = self
            .last_log
            .is_none_or(|t| now.saturating_duration_since(t) >= LOG_INTERVAL);
        if due {
            warn!(
                reason,
                %source,
                dropped = self.dropped_since_log,
                "SIP dropped before the endpoint (one line per 10 s at most)"
            );
            self.dropped_since_log = 0;
            self.last_log = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &[u8] = b"INVITE sip:bot@example.com SIP/2.0\r\n";

    fn guard(untrusted: UntrustedSip, rate: u32) -> (SipGuard, Instant) {
        let now = Instant::now();
        let trunk = vec!["127.0.0.1/32".parse().unwrap()];
        (SipGuard::new(trunk, untrusted, rate, now), now)
    }

    #[test]
    fn strangers_are_dropped_by_default() {
        let (mut g, now) = guard(UntrustedSip::Drop, 100);
        let stranger: SocketAddr = "127.0.0.2:5060".parse().unwrap();
        for _ in 0..1000 {
            assert_eq!(g.check(stranger, INVITE, now), Verdict::Drop("untrusted"));
        }
        let trunk: SocketAddr = "127.0.0.1:5060".parse().unwrap();
        assert_eq!(g.check(trunk, INVITE, now), Verdict::Pass);
    }

    #[test]
    fn rejecting_strangers_answers_requests_only_and_at_a_bounded_rate() {
        let (mut g, now) = guard(UntrustedSip::Reject, 100);
        let stranger: SocketAddr = "192.0.2.9:5060".parse().unwrap();
        assert_eq!(
            g.check(stranger, b"SIP/2.0 200 OK\r\n", now),
            Verdict::Drop("untrusted")
        );
        assert_eq!(
            g.check(stranger, b"ACK sip:x SIP/2.0\r\n", now),
            Verdict::Drop("untrusted")
        );
        let rejected = (0..1000)
            .filter(|_| g.check(stranger, INVITE, now) == Verdict::Reject)
            .count();
        assert_eq!(rejected, UNTRUSTED_REPLIES_PER_SECOND as usize);
        // A second later the bucket has refilled.
        let later = now + Duration::from_secs(1);
        let rejected = (0..1000)
            .filter(|_| g.check(stranger, INVITE, later) == Verdict::Reject)
            .count();
        assert_eq!(rejected, UNTRUSTED_REPLIES_PER_SECOND as usize);
    }

    #[test]
    fn each_trusted_source_has_its_own_rate() {
        let (mut g, now) = guard(UntrustedSip::Drop, 50);
        let trunk: SocketAddr = "127.0.0.1:5060".parse().unwrap();
        let passed = (0..200)
            .filter(|_| g.check(trunk, INVITE, now) == Verdict::Pass)
            .count();
        assert_eq!(passed, 50);
        // 100 ms later, 5 more.
        let later = now + Duration::from_millis(100);
        let passed = (0..200)
            .filter(|_| g.check(trunk, INVITE, later) == Verdict::Pass)
            .count();
        assert_eq!(passed, 5);
    }
}
