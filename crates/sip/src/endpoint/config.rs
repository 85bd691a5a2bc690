//! What an endpoint is configured with: transport, RFC 3261 timer values, limits, session timers.

use std::net::SocketAddr;
use std::time::Duration;

use crate::message::Limits;

/// The transport a message came on or goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// UDP: the endpoint retransmits (timers A, E, G).
    Udp,
    /// TCP (reliable, framed by [`crate::StreamFramer`]): no retransmissions, zero wait timers.
    Tcp,
}

impl Transport {
    pub(super) fn via_token(self) -> &'static str {
        match self {
            Transport::Udp => "UDP",
            Transport::Tcp => "TCP",
        }
    }
    pub(super) fn reliable(self) -> bool {
        self == Transport::Tcp
    }
}

/// RFC 3261 timer base values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    /// T1, round-trip estimate (500 ms).
    pub t1: Duration,
    /// T2, longest retransmit interval for non-INVITE requests and INVITE responses (4 s).
    pub t2: Duration,
    /// T4, longest time a message stays in the network (5 s).
    pub t4: Duration,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            t1: Duration::from_millis(500),
            t2: Duration::from_secs(4),
            t4: Duration::from_secs(5),
        }
    }
}

impl Timers {
    pub(super) fn t64(&self) -> Duration {
        self.t1 * 64
    }
}

/// Endpoint configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The address we advertise in Via and Contact (the address our socket is reachable at).
    pub local_addr: SocketAddr,
    /// User part of our Contact and of the From of calls we place.
    pub user: String,
    /// `User-Agent`/`Server` header value.
    pub user_agent: String,
    /// RFC 3261 timer values.
    pub timers: Timers,
    /// Message limits.
    pub limits: Limits,
    /// Session interval we ask for in calls we place, and grant when a caller asks for none but
    /// supports timers (RFC 4028 §7, §9); `None` turns session timers off for our side.
    pub session_expires: Option<Duration>,
    /// Smallest session interval we accept (RFC 4028 Min-SE; 90 s is the RFC floor).
    pub min_se: Duration,
    /// Seed for tags, branches and Call-IDs (`None`: from the OS).
    pub rng_seed: Option<u64>,
}

impl Config {
    /// Defaults for an endpoint reachable at `local_addr`.
    pub fn new(local_addr: SocketAddr) -> Config {
        Config {
            local_addr,
            user: "ontime".into(),
            user_agent: concat!("ontime-sip/", env!("CARGO_PKG_VERSION")).into(),
            timers: Timers::default(),
            limits: Limits::default(),
            session_expires: Some(Duration::from_secs(1800)),
            min_se: Duration::from_secs(90),
            rng_seed: None,
        }
    }
}
