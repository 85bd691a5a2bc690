//! What an endpoint is configured with: transport, RFC 3261 timer values, limits, session timers.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::digest::Credentials;
use crate::message::Limits;

/// The transport a message came on or goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// UDP: the endpoint retransmits (timers A, E, G).
    Udp,
    /// TCP (reliable, framed by [`crate::StreamFramer`]): no retransmissions, zero wait timers.
    Tcp,
    /// TLS over TCP (RFC 3261 §26.2): framed and timed as TCP; Via says `TLS` and our Contact
    /// carries `transport=tls`.
    Tls,
}

impl Transport {
    /// The Via token (`UDP`, `TCP`, `TLS`).
    pub fn via_token(self) -> &'static str {
        match self {
            Transport::Udp => "UDP",
            Transport::Tcp => "TCP",
            Transport::Tls => "TLS",
        }
    }
    /// Reliable transports get no retransmissions and zero wait timers.
    pub fn reliable(self) -> bool {
        self != Transport::Udp
    }
    /// The lower-case name used in `transport=` URI parameters and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
        }
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

/// Which source addresses an endpoint also accepts in-dialog requests from; see
/// [`Config::trusted_peer`].
pub type TrustedPeer = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

/// Endpoint configuration.
#[derive(Clone)]
pub struct Config {
    /// The address we advertise in Via and Contact (the address our socket is reachable at).
    pub local_addr: SocketAddr,
    /// The address advertised for messages over TCP (`None`: `local_addr`).
    pub tcp_addr: Option<SocketAddr>,
    /// The address advertised for messages over TLS (`None`: `local_addr`).
    pub tls_addr: Option<SocketAddr>,
    /// User part of our Contact and of the From of calls we place.
    pub user: String,
    /// `User-Agent` (requests we send) and `Server` (responses) header value; `None` (the
    /// default) sends neither header, so a peer learns no product or version from us. An
    /// application that wants one sets it from its own configuration.
    pub user_agent: Option<String>,
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
    /// Also accept in-dialog requests from these sources (e.g. every address of the trunk).
    ///
    /// A request inside a dialog (BYE, re-INVITE, UPDATE, INFO, OPTIONS, NOTIFY, ACK) is accepted
    /// only when its Call-ID, To tag (ours) and From tag (theirs) match a live dialog (else 481)
    /// and it comes from the IP the dialog's INVITE came from (or, for a call we placed, the IP
    /// we sent the INVITE to), from the IP literal of the remote target or of the first route, or
    /// from an IP this predicate returns `true` for; any other source gets 403 and changes
    /// nothing. `None` (the default) trusts no other address.
    pub trusted_peer: Option<TrustedPeer>,
    /// What we answer digest challenges (401/407, RFC 3261 §22.2) with: a request of ours that
    /// is challenged (REGISTER, INVITE, re-INVITE, BYE, REFER, OPTIONS, INFO) is sent again once
    /// with credentials, and later requests of the same dialog or registration carry them from
    /// the start. With [`Credentials::realm`] set, only challenges of that realm are answered.
    /// `None` (the default): a challenge is a final failure like any other 4xx.
    pub credentials: Option<Credentials>,
    /// Challenge new INVITEs with digest authentication (RFC 3261 §22.4): an INVITE without
    /// valid credentials for this user and password gets 401 with a fresh nonce, one with them
    /// becomes [`crate::Event::IncomingCall`]. The realm is [`Credentials::realm`], else our
    /// IP. Nonces are stateless (an HMAC of their time and the caller's IP under a per-endpoint
    /// random key) and live [`NONCE_LIFETIME`]. Requests inside a dialog are not challenged.
    /// `None` (the default): no challenge.
    pub trunk_auth: Option<Credentials>,
    /// The digest algorithms offered in those challenges, one `WWW-Authenticate` each, in
    /// order (default SHA-256 then MD5, RFC 8760 §2.4). Some clients answer only the first
    /// challenge they see: list MD5 alone for them.
    pub trunk_auth_algorithms: Vec<crate::digest::Algorithm>,
}

/// How long a nonce of ours stays good (RFC 7616 §5.4 leaves it to the server): an INVITE
/// answered with an older one gets a new challenge with `stale=true`, which clients answer
/// without asking their user again.
pub const NONCE_LIFETIME: Duration = Duration::from_secs(300);

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("local_addr", &self.local_addr)
            .field("tcp_addr", &self.tcp_addr)
            .field("tls_addr", &self.tls_addr)
            .field("user", &self.user)
            .field("user_agent", &self.user_agent)
            .field("timers", &self.timers)
            .field("limits", &self.limits)
            .field("session_expires", &self.session_expires)
            .field("min_se", &self.min_se)
            .field("rng_seed", &self.rng_seed)
            .field(
                "trusted_peer",
                &self.trusted_peer.as_ref().map(|_| "Fn(IpAddr) -> bool"),
            )
            .field("credentials", &self.credentials)
            .field("trunk_auth", &self.trunk_auth)
            .field("trunk_auth_algorithms", &self.trunk_auth_algorithms)
            .finish()
    }
}

impl Config {
    /// The address we advertise for messages over `transport`.
    pub fn addr_for(&self, transport: Transport) -> SocketAddr {
        match transport {
            Transport::Udp => self.local_addr,
            Transport::Tcp => self.tcp_addr.unwrap_or(self.local_addr),
            Transport::Tls => self.tls_addr.unwrap_or(self.local_addr),
        }
    }

    /// Defaults for an endpoint reachable at `local_addr`.
    pub fn new(local_addr: SocketAddr) -> Config {
        Config {
            local_addr,
            tcp_addr: None,
            tls_addr: None,
            user: "ontime".into(),
            user_agent: None,
            timers: Timers::default(),
            limits: Limits::default(),
            session_expires: Some(Duration::from_secs(1800)),
            min_se: Duration::from_secs(90),
            rng_seed: None,
            trusted_peer: None,
            credentials: None,
            trunk_auth: None,
            trunk_auth_algorithms: vec![
                crate::digest::Algorithm::Sha256,
                crate::digest::Algorithm::Md5,
            ],
        }
    }
}
