//! The user agent core: transactions (RFC 3261 §17), dialogs (§12), calls (§13–§15), session
//! timers (RFC 4028), sans-IO.
//!
//! Feed it what arrived with [`Endpoint::handle_datagram`] / [`Endpoint::handle_message`], the
//! time with [`Endpoint::handle_timeout`], and commands; drain [`Endpoint::poll_transmit`] and
//! [`Endpoint::poll_event`] until both are empty, then sleep until [`Endpoint::poll_timeout`].

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::build::{self, h, HeaderList};
use crate::error::{Error, Result};
use crate::message::{
    is_sip_uri, parse_message, parse_name_addr, uri_scheme, uri_socket_addr, Framing, Limits,
    Message, Method, NameAddr, ParseError, MAGIC_COOKIE,
};
use crate::sdp::SessionDescription;

/// Methods this UA serves (RFC 3261 §20.5 Allow).
const ALLOW: &str = "INVITE, ACK, BYE, CANCEL, OPTIONS, UPDATE, INFO";
/// Option tags we support (RFC 3261 §20.37).
const SUPPORTED: &str = "timer";

/// The transport a message came on or goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// UDP: the endpoint retransmits (timers A, E, G).
    Udp,
    /// TCP (reliable, framed by [`crate::StreamFramer`]): no retransmissions, zero wait timers.
    Tcp,
}

impl Transport {
    fn via_token(self) -> &'static str {
        match self {
            Transport::Udp => "UDP",
            Transport::Tcp => "TCP",
        }
    }
    fn reliable(self) -> bool {
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
    fn t64(&self) -> Duration {
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

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it.
    pub destination: SocketAddr,
    /// On which transport.
    pub transport: Transport,
    /// The bytes.
    pub payload: Vec<u8>,
}

/// Names one call (dialog) inside an [`Endpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallHandle(pub u64);

/// Names one out-of-dialog request we sent (OPTIONS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestHandle(pub u64);

/// Why a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndReason {
    /// The peer sent BYE.
    RemoteHangup,
    /// We sent BYE (the field says whether a final response came; `false` is a timeout).
    LocalHangup {
        /// A final response to our BYE arrived.
        confirmed: bool,
    },
    /// The caller cancelled before the answer (we sent 487), or we cancelled our call.
    Cancelled,
    /// We rejected the incoming call with this status.
    Rejected {
        /// The status sent.
        status: u16,
    },
    /// Our call was refused with this final status.
    Refused {
        /// The status received.
        status: u16,
        /// Its reason phrase.
        reason: String,
    },
    /// No final response to our INVITE within 64·T1 (timer B).
    Timeout,
    /// Our 2xx was never acknowledged (RFC 3261 §13.3.1.4); we sent BYE.
    NoAck,
    /// The session timer expired without a refresh (RFC 4028 §10); we sent BYE.
    SessionExpired,
    /// A request inside the dialog got 481/408 (RFC 3261 §12.2.1.2).
    DialogGone {
        /// The status received.
        status: u16,
    },
}

/// A new call to us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingCall {
    /// The call.
    pub call: CallHandle,
    /// Call-ID.
    pub call_id: String,
    /// The caller (From).
    pub from: NameAddr,
    /// The called party (To).
    pub to: NameAddr,
    /// Request-URI.
    pub request_uri: String,
    /// Where the INVITE came from.
    pub source: SocketAddr,
    /// The SDP offer, if the INVITE had one.
    pub offer: Option<SessionDescription>,
    /// Every header of the INVITE (canonical names, unfolded values), for what the application
    /// reads itself (P-Asserted-Identity, X- headers, Authorization...).
    pub headers: Vec<(String, String)>,
}

/// What the endpoint tells the application.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A new INVITE: answer with [`Endpoint::answer`], [`Endpoint::ring`], [`Endpoint::reject`].
    IncomingCall(Box<IncomingCall>),
    /// Our call got a provisional response (180, 183, ...).
    Progress {
        /// The call.
        call: CallHandle,
        /// Status code.
        status: u16,
        /// Early media SDP, if any.
        sdp: Option<SessionDescription>,
    },
    /// Our call was answered (we already sent the ACK).
    Answered {
        /// The call.
        call: CallHandle,
        /// The answer SDP.
        answer: Option<SessionDescription>,
    },
    /// The caller acknowledged our 2xx: media may flow both ways.
    Established {
        /// The call.
        call: CallHandle,
    },
    /// The peer sent a re-INVITE or UPDATE with a new offer (hold, resume, media change):
    /// reply with [`Endpoint::answer_update`] or [`Endpoint::reject_update`].
    OfferReceived {
        /// The call.
        call: CallHandle,
        /// `Invite` (re-INVITE) or `Update`.
        method: Method,
        /// The new offer.
        offer: SessionDescription,
    },
    /// Our re-INVITE was answered.
    UpdateAnswered {
        /// The call.
        call: CallHandle,
        /// The answer SDP.
        answer: Option<SessionDescription>,
    },
    /// Our re-INVITE failed with this status; the previous session stays.
    UpdateFailed {
        /// The call.
        call: CallHandle,
        /// Status received (408 on timeout).
        status: u16,
    },
    /// A DTMF digit sent with SIP INFO (`application/dtmf-relay` or `application/dtmf`).
    Dtmf {
        /// The call.
        call: CallHandle,
        /// The digit (`0`-`9`, `*`, `#`, `A`-`D`, or `!` for flash).
        digit: char,
        /// Duration, if given.
        duration_ms: Option<u32>,
    },
    /// The call is over; the handle is no longer valid.
    Ended {
        /// The call.
        call: CallHandle,
        /// Why.
        reason: EndReason,
    },
    /// The final response (or 408 on timeout) to an OPTIONS we sent.
    OptionsResponse {
        /// The request.
        request: RequestHandle,
        /// Status.
        status: u16,
    },
}

/// Parameters of a call we place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallParams {
    /// Request-URI and To (e.g. `sip:bot@192.0.2.10:5060`).
    pub target: String,
    /// Our From URI (`None`: `sip:<user>@<local_addr>`).
    pub from: Option<String>,
    /// Where to send the INVITE.
    pub destination: SocketAddr,
    /// Transport.
    pub transport: Transport,
    /// The SDP offer.
    pub offer: SessionDescription,
}

// ---------------------------------------------------------------- transactions

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientState {
    Calling,
    Proceeding,
    Completed,
    Accepted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Invite(CallHandle),
    ReInvite(CallHandle),
    Bye(CallHandle),
    Cancel(CallHandle),
    InDialog(CallHandle),
    Options(RequestHandle),
}

#[derive(Debug)]
struct ClientTx {
    method: Method,
    request: Vec<u8>,
    destination: SocketAddr,
    transport: Transport,
    state: ClientState,
    interval: Duration,
    retransmit_at: Option<Instant>,
    timeout_at: Option<Instant>,
    end_at: Option<Instant>,
    ack: Option<Vec<u8>>,
    owner: Owner,
}

impl ClientTx {
    fn deadline(&self) -> Option<Instant> {
        [self.retransmit_at, self.timeout_at, self.end_at]
            .into_iter()
            .flatten()
            .min()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerState {
    Proceeding,
    Completed,
    Confirmed,
    Accepted,
}

/// RFC 3261 §17.2.3 server transaction key: branch + sent-by + method (ACK matches INVITE),
/// or for RFC 2543 peers a digest of the identifying fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ServerKey {
    Rfc3261 {
        branch: String,
        sent_by: String,
        method: String,
    },
    Rfc2543 {
        request_uri: String,
        from_tag: String,
        call_id: String,
        cseq: u32,
        via: String,
        method: String,
    },
}

#[derive(Debug)]
struct ServerTx {
    method: Method,
    request: Message,
    state: ServerState,
    last_response: Option<Vec<u8>>,
    final_code: Option<u16>,
    destination: SocketAddr,
    transport: Transport,
    interval: Duration,
    retransmit_at: Option<Instant>,
    timeout_at: Option<Instant>,
    end_at: Option<Instant>,
    to_tag: String,
}

impl ServerTx {
    fn deadline(&self) -> Option<Instant> {
        [self.retransmit_at, self.timeout_at, self.end_at]
            .into_iter()
            .flatten()
            .min()
    }
}

// ---------------------------------------------------------------- calls

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallState {
    /// UAS: INVITE received, no final response yet.
    Incoming,
    /// UAC: INVITE sent, no final response yet.
    Outgoing,
    /// 2xx sent (UAS, waiting for ACK) or received.
    Established,
    /// BYE sent, waiting for its response.
    Terminating,
}

impl CallState {
    fn name(self) -> &'static str {
        match self {
            CallState::Incoming => "ringing in",
            CallState::Outgoing => "ringing out",
            CallState::Established => "established",
            CallState::Terminating => "hanging up",
        }
    }
}

#[derive(Debug)]
struct Pending2xx {
    response: Vec<u8>,
    /// Where the INVITE's responses go (RFC 3261 §18.2.2).
    destination: SocketAddr,
    transport: Transport,
    cseq: u32,
    interval: Duration,
    next_at: Instant,
    give_up_at: Instant,
}

#[derive(Debug)]
struct SessionTimer {
    we_refresh: bool,
    /// When we refresh (we_refresh) or give up (peer refreshes).
    fire_at: Instant,
}

#[derive(Debug)]
struct Call {
    state: CallState,
    is_uas: bool,
    call_id: String,
    local_tag: String,
    remote_tag: Option<String>,
    /// From of our requests (URI with params except tag, wrapped in <>).
    local_party: String,
    /// To of our requests (without tag).
    remote_party: String,
    local_cseq: u32,
    remote_cseq: Option<u32>,
    route_set: Vec<String>,
    remote_target: String,
    peer: SocketAddr,
    transport: Transport,
    /// UAS: the INVITE's server transaction; UAC: the INVITE's branch.
    invite_server: Option<ServerKey>,
    invite_branch: Option<String>,
    invite_request: Option<Vec<u8>>,
    invite_cseq: u32,
    pending_2xx: Option<Pending2xx>,
    last_ack: Option<(u32, Vec<u8>)>,
    /// An incoming re-INVITE/UPDATE waiting for the application's answer.
    pending_offer: Option<ServerKey>,
    reinvite_in_progress: bool,
    cancel_wanted: bool,
    got_provisional: bool,
    session_timer: Option<SessionTimer>,
    local_sdp: Option<Vec<u8>>,
    remote_sdp_version: Option<u64>,
    /// Session-Expires we put in our 2xx (UAS).
    granted_session: Option<(Duration, bool)>,
    /// UAS: the initial 2xx was acknowledged.
    acked: bool,
    /// The peer listed `timer` in Supported (RFC 4028 §9: only then may we Require it).
    peer_supports_timer: bool,
}

/// The SIP user agent: transactions, dialogs and calls for any number of calls.
#[derive(Debug)]
pub struct Endpoint {
    config: Config,
    rng: StdRng,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    client: HashMap<(String, String), ClientTx>,
    server: HashMap<ServerKey, ServerTx>,
    calls: HashMap<CallHandle, Call>,
    dialogs: HashMap<(String, String), CallHandle>,
    next_id: u64,
    accepting: bool,
    invalid_messages: u64,
}

fn timer_end(transport: Transport, wait: Duration, now: Instant) -> Instant {
    if transport.reliable() {
        now
    } else {
        now + wait
    }
}

fn is_dtmf_digit(c: char) -> bool {
    c.is_ascii_digit() || matches!(c, '*' | '#' | 'A'..='D' | '!')
}

/// Reads `Signal=5\r\nDuration=160` (application/dtmf-relay) or `5` (application/dtmf).
fn parse_dtmf(content_type: &str, body: &[u8]) -> Option<(char, Option<u32>)> {
    let text = std::str::from_utf8(body).ok()?;
    if content_type == "application/dtmf" {
        let c = text.trim().chars().next()?.to_ascii_uppercase();
        return is_dtmf_digit(c).then_some((c, None));
    }
    let mut digit = None;
    let mut duration = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        match k.trim().to_ascii_lowercase().as_str() {
            "signal" => {
                let v = v.trim();
                digit = match v {
                    "10" => Some('*'),
                    "11" => Some('#'),
                    "16" => Some('!'),
                    _ if v.len() == 1 => v.chars().next().map(|c| c.to_ascii_uppercase()),
                    _ => None,
                };
            }
            "duration" => duration = v.trim().parse().ok(),
            _ => {}
        }
    }
    digit.filter(|c| is_dtmf_digit(*c)).map(|d| (d, duration))
}

/// Our own stored requests are re-read without limits.
const UNLIMITED: Limits = Limits {
    max_message_bytes: usize::MAX,
    max_headers: usize::MAX,
    max_body_bytes: usize::MAX,
    max_transactions: usize::MAX,
};

/// Longest session interval we honour (RFC 4028 sets no ceiling; a day keeps `Instant`
/// arithmetic far from overflow whatever a peer writes).
const MAX_SESSION_INTERVAL_SECS: u64 = 86_400;

fn session_interval(secs: u64) -> Duration {
    Duration::from_secs(secs.min(MAX_SESSION_INTERVAL_SECS))
}

/// Parses `Session-Expires: 1800;refresher=uac` (RFC 4028 §4).
fn parse_session_expires(v: &str) -> Option<(u64, Option<String>)> {
    let mut parts = v.split(';');
    let secs = parts.next()?.trim().parse::<u64>().ok()?;
    let refresher = parts
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("refresher"))
        .map(|(_, v)| v.trim().to_ascii_lowercase());
    Some((secs, refresher))
}

fn sdp_body(msg: &Message) -> Option<std::result::Result<SessionDescription, Error>> {
    if msg.body.is_empty() {
        return None;
    }
    match msg.content_type().as_deref() {
        Some("application/sdp") => Some(SessionDescription::parse(&msg.body)),
        _ => Some(Err(Error::Sdp("body is not application/sdp".into()))),
    }
}

impl Endpoint {
    /// A new endpoint.
    pub fn new(mut config: Config) -> Endpoint {
        // Keep timer arithmetic in range whatever the configuration says.
        let t = &mut config.timers;
        t.t1 =
            t.t1.clamp(Duration::from_millis(1), Duration::from_secs(60));
        t.t2 = t.t2.clamp(t.t1, Duration::from_secs(600));
        t.t4 = t.t4.min(Duration::from_secs(600));
        let max_interval = session_interval(u64::MAX);
        config.session_expires = config.session_expires.map(|d| d.min(max_interval));
        config.min_se = config.min_se.min(max_interval);
        let rng = match config.rng_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        Endpoint {
            config,
            rng,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            client: HashMap::new(),
            server: HashMap::new(),
            calls: HashMap::new(),
            dialogs: HashMap::new(),
            next_id: 1,
            accepting: true,
            invalid_messages: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether OPTIONS are answered 200 (accepting) or 503 (full or draining, design.md §9).
    pub fn set_accepting(&mut self, accepting: bool) {
        self.accepting = accepting;
    }

    /// Calls alive (from the first INVITE to the end of the dialog).
    pub fn active_calls(&self) -> usize {
        self.calls.len()
    }

    /// Transactions alive (client and server), for tests and metrics.
    pub fn active_transactions(&self) -> usize {
        self.client.len() + self.server.len()
    }

    /// Messages that could not be parsed (answered 400 or dropped) since start.
    pub fn invalid_messages(&self) -> u64 {
        self.invalid_messages
    }

    /// The Call-ID of a live call.
    pub fn call_id(&self, call: CallHandle) -> Option<&str> {
        self.calls.get(&call).map(|c| c.call_id.as_str())
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Endpoint::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let tx = self.client.values().filter_map(ClientTx::deadline);
        let stx = self.server.values().filter_map(ServerTx::deadline);
        let calls = self.calls.values().flat_map(|c| {
            [
                c.pending_2xx.as_ref().map(|p| p.next_at.min(p.give_up_at)),
                c.session_timer.as_ref().map(|s| s.fire_at),
            ]
            .into_iter()
            .flatten()
        });
        tx.chain(stx).chain(calls).min()
    }

    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn random_token(&mut self) -> String {
        format!("{:016x}", self.rng.random::<u64>())
    }

    fn new_branch(&mut self) -> String {
        format!("{MAGIC_COOKIE}{}", self.random_token())
    }

    fn send(&mut self, destination: SocketAddr, transport: Transport, payload: Vec<u8>) {
        if let Some(line) = payload.split(|b| *b == b'\r').next() {
            tracing::trace!(%destination, line = %String::from_utf8_lossy(line), "sip send");
        }
        self.transmits.push_back(Transmit {
            destination,
            transport,
            payload,
        });
    }

    fn contact(&self, transport: Transport) -> String {
        let t = match transport {
            Transport::Udp => "",
            Transport::Tcp => ";transport=tcp",
        };
        format!("<sip:{}@{}{t}>", self.config.user, self.config.local_addr)
    }

    // ------------------------------------------------------------ input

    /// A UDP datagram arrived from `source`.
    pub fn handle_datagram(&mut self, bytes: &[u8], source: SocketAddr, now: Instant) {
        self.handle_bytes(bytes, source, Transport::Udp, Framing::Datagram, now);
    }

    /// A whole message arrived on `transport` (for TCP: one message cut by
    /// [`crate::StreamFramer`]).
    pub fn handle_message(
        &mut self,
        bytes: &[u8],
        source: SocketAddr,
        transport: Transport,
        now: Instant,
    ) {
        let framing = match transport {
            Transport::Udp => Framing::Datagram,
            Transport::Tcp => Framing::Stream,
        };
        self.handle_bytes(bytes, source, transport, framing, now);
    }

    fn handle_bytes(
        &mut self,
        bytes: &[u8],
        source: SocketAddr,
        transport: Transport,
        framing: Framing,
        now: Instant,
    ) {
        match parse_message(bytes, &self.config.limits, framing) {
            Ok(msg) => {
                let direction = "in";
                let label = match msg.method() {
                    Some(m) => m.as_str().to_string(),
                    None => "response".to_string(),
                };
                metrics::counter!("ontime_sip_messages_total", "method" => label, "direction" => direction)
                    .increment(1);
                if msg.method().is_some() {
                    self.on_request(msg, source, transport, now);
                } else {
                    self.on_response(msg, now);
                }
            }
            Err(e) => {
                self.invalid_messages += 1;
                metrics::counter!("ontime_sip_invalid_messages_total").increment(1);
                tracing::debug!(%source, reason = %e.reason, "invalid SIP message");
                self.answer_invalid(e, source, transport);
            }
        }
    }

    /// RFC 3261 §8.2 / §16.3: a request we cannot read gets 400 (or 505...) with the reason in a
    /// Warning, when enough of it is readable to address a response.
    fn answer_invalid(&mut self, e: ParseError, source: SocketAddr, transport: Transport) {
        let Some(status) = e.status else { return };
        // Never answer an ACK.
        if e.headers
            .iter()
            .any(|(n, v)| n == "CSeq" && v.trim_end().ends_with("ACK"))
        {
            return;
        }
        let Some(via) = e.headers.iter().find(|(n, _)| n == "Via") else {
            return;
        };
        let destination = match crate::message::parse_via(&via.1)
            .ok()
            .and_then(|v| v.into_iter().next())
        {
            Some(v) => self.response_destination(&v, source, transport),
            None => source,
        };
        let reason: String = e
            .reason
            .chars()
            .filter(|c| !c.is_control() && *c != '"')
            .collect();
        let warning = h(
            "Warning",
            format!("399 {} \"{}\"", self.config.local_addr, reason),
        );
        let tag = self.random_token();
        let bytes = build::response(&e.headers, status, Some(&tag), &[warning], b"");
        self.send(destination, transport, bytes);
    }

    /// RFC 3261 §18.2.2 with RFC 3581: reply to the source address when `rport` is present or
    /// the transport is a stream, else to the source IP and the Via port.
    fn response_destination(
        &self,
        via: &crate::message::Via,
        source: SocketAddr,
        transport: Transport,
    ) -> SocketAddr {
        if transport.reliable() || via.has_rport() {
            source
        } else {
            SocketAddr::new(source.ip(), via.port.unwrap_or(5060))
        }
    }

    fn server_key(msg: &Message) -> Option<ServerKey> {
        let via = msg.top_via()?;
        let method = match msg.method()? {
            Method::Ack => "INVITE".to_string(),
            m => m.as_str().to_string(),
        };
        if via.has_rfc3261_branch() {
            Some(ServerKey::Rfc3261 {
                branch: via.branch().unwrap_or_default().to_string(),
                sent_by: via.sent_by().to_ascii_lowercase(),
                method,
            })
        } else {
            // RFC 3261 §17.2.3 for RFC 2543 peers: Request-URI, From tag, Call-ID, CSeq number,
            // top Via and method; the To tag is left out so the ACK for a non-2xx matches.
            Some(ServerKey::Rfc2543 {
                request_uri: msg.request_uri()?.to_string(),
                from_tag: msg
                    .from()
                    .and_then(|f| f.tag().map(str::to_string))
                    .unwrap_or_default(),
                call_id: msg.call_id().to_string(),
                cseq: msg.cseq().0,
                via: msg.header("Via").unwrap_or_default().to_string(),
                method,
            })
        }
    }

    fn on_request(&mut self, msg: Message, source: SocketAddr, transport: Transport, now: Instant) {
        let Some(key) = Self::server_key(&msg) else {
            return;
        };
        let Some(via) = msg.top_via() else { return };
        let method = msg.method().cloned().unwrap_or(Method::Ack);
        let destination = self.response_destination(&via, source, transport);

        if method == Method::Ack {
            if let Some(tx) = self.server.get_mut(&key) {
                match tx.state {
                    ServerState::Completed => {
                        // RFC 3261 §17.2.1: ACK for our non-2xx: stop G/H, wait timer I.
                        tx.state = ServerState::Confirmed;
                        tx.retransmit_at = None;
                        tx.timeout_at = None;
                        tx.end_at = Some(timer_end(tx.transport, self.config.timers.t4, now));
                        return;
                    }
                    ServerState::Confirmed => return,
                    _ => {}
                }
            }
            self.on_dialog_ack(&msg);
            return;
        }

        if let Some(tx) = self.server.get(&key) {
            // A retransmission: resend the last response (RFC 3261 §17.2.1, §17.2.2); in
            // Accepted the TU's own 2xx retransmissions cover it (RFC 6026 §7.1).
            if tx.state != ServerState::Accepted {
                if let Some(resp) = tx.last_response.clone() {
                    let (d, t) = (tx.destination, tx.transport);
                    self.send(d, t, resp);
                }
            }
            return;
        }

        if self.client.len() + self.server.len() >= self.config.limits.max_transactions {
            // Overloaded: answer statelessly (RFC 3261 §21.5.4) rather than grow without bound.
            let tag = self.random_token();
            let bytes = build::response_to(&msg, 503, Some(&tag), &[h("Retry-After", "5")], b"");
            self.send(destination, transport, bytes);
            return;
        }
        let to_tag = msg
            .to()
            .and_then(|t| t.tag().map(str::to_string))
            .unwrap_or_else(|| self.random_token());
        self.server.insert(
            key.clone(),
            ServerTx {
                method: method.clone(),
                request: msg.clone(),
                state: ServerState::Proceeding,
                last_response: None,
                final_code: None,
                destination,
                transport,
                interval: self.config.timers.t1,
                retransmit_at: None,
                timeout_at: None,
                end_at: None,
                to_tag,
            },
        );

        if method == Method::Cancel {
            self.on_cancel(&key, now);
            return;
        }
        // RFC 3261 §8.2.2.1: a Request-URI scheme we do not understand gets 416.
        let ruri = msg.request_uri().unwrap_or_default();
        let scheme_ok =
            is_sip_uri(ruri) || uri_scheme(ruri).is_some_and(|s| s.eq_ignore_ascii_case("tel"));
        if !scheme_ok {
            self.respond(&key, 416, &[], b"", now);
            return;
        }
        // RFC 3261 §8.2.2.3: Require with options we do not support gets 420.
        let unsupported: Vec<String> = msg
            .option_tags("Require")
            .into_iter()
            .filter(|t| !SUPPORTED.split(", ").any(|s| s == t))
            .collect();
        if !unsupported.is_empty() {
            let extra = [h("Unsupported", unsupported.join(", "))];
            self.respond(&key, 420, &extra, b"", now);
            return;
        }
        let to_tag = msg.to().and_then(|t| t.tag().map(str::to_string));
        match (&method, to_tag) {
            (Method::Invite, None) => self.on_new_invite(key, msg, source, transport, now),
            (Method::Options, None) => self.on_options(&key, now),
            (
                Method::Invite | Method::Update | Method::Info | Method::Bye | Method::Options,
                Some(tag),
            ) => match self.dialogs.get(&(msg.call_id().to_string(), tag)).copied() {
                Some(call) => self.on_in_dialog(call, key, msg, now),
                None => self.respond(&key, 481, &[], b"", now),
            },
            (Method::Bye | Method::Update | Method::Info, None) => {
                self.respond(&key, 481, &[], b"", now)
            }
            (Method::Extension(_), _) => self.respond(&key, 501, &[h("Allow", ALLOW)], b"", now),
            _ => self.respond(&key, 405, &[h("Allow", ALLOW)], b"", now),
        }
    }

    fn capability_headers(&self) -> HeaderList {
        vec![
            h("Allow", ALLOW),
            h("Accept", "application/sdp"),
            h("Supported", SUPPORTED),
            h("Server", self.config.user_agent.clone()),
        ]
    }

    fn on_options(&mut self, key: &ServerKey, now: Instant) {
        let code = if self.accepting { 200 } else { 503 };
        let extra = self.capability_headers();
        self.respond(key, code, &extra, b"", now);
    }

    /// Sends a response in a server transaction and moves its state (RFC 3261 §17.2).
    fn respond(
        &mut self,
        key: &ServerKey,
        code: u16,
        extra: &[(String, String)],
        body: &[u8],
        now: Instant,
    ) {
        let timers = self.config.timers;
        let Some(tx) = self.server.get_mut(key) else {
            return;
        };
        if tx.final_code.is_some() {
            return;
        }
        let bytes = build::response_to(&tx.request, code, Some(&tx.to_tag), extra, body);
        let (d, t) = (tx.destination, tx.transport);
        tx.last_response = Some(bytes.clone());
        if code >= 200 {
            tx.final_code = Some(code);
            let is_invite = tx.method == Method::Invite;
            match (is_invite, code < 300) {
                (true, true) => {
                    // RFC 6026: Accepted, absorb retransmitted INVITEs for 64·T1 (timer L).
                    tx.state = ServerState::Accepted;
                    tx.end_at = Some(now + timers.t64());
                }
                (true, false) => {
                    tx.state = ServerState::Completed;
                    if !t.reliable() {
                        tx.retransmit_at = Some(now + timers.t1);
                    }
                    tx.timeout_at = Some(now + timers.t64());
                }
                (false, _) => {
                    tx.state = ServerState::Completed;
                    tx.end_at = Some(timer_end(t, timers.t64(), now));
                }
            }
        }
        metrics::counter!("ontime_sip_messages_total", "method" => "response", "direction" => "out").increment(1);
        self.send(d, t, bytes);
    }

    fn on_new_invite(
        &mut self,
        key: ServerKey,
        msg: Message,
        source: SocketAddr,
        transport: Transport,
        now: Instant,
    ) {
        // RFC 3261 §8.2.3: content we cannot read gets 415 with what we accept.
        if !msg.body.is_empty() && msg.content_type().as_deref() != Some("application/sdp") {
            let extra = [h("Accept", "application/sdp")];
            self.respond(&key, 415, &extra, b"", now);
            return;
        }
        // RFC 3261 §21.4.7: a response body must be in a type the Accept header lists.
        let accepts: Vec<String> = msg.option_tags("Accept");
        if msg.header("Accept").is_some()
            && !accepts.iter().any(|a| {
                let a = a.split(';').next().unwrap_or_default().trim();
                a == "application/sdp" || a == "application/*" || a == "*/*"
            })
        {
            self.respond(&key, 406, &[h("Accept", "application/sdp")], b"", now);
            return;
        }
        let offer = match sdp_body(&msg) {
            None => None,
            Some(Ok(s)) => Some(s),
            Some(Err(e)) => {
                let warning = h(
                    "Warning",
                    format!(
                        "399 {} \"{}\"",
                        self.config.local_addr,
                        e.to_string().replace('"', "'")
                    ),
                );
                self.respond(&key, 400, &[warning], b"", now);
                return;
            }
        };
        // RFC 4028 §8: too small a session interval gets 422 with our Min-SE.
        let min_se = self.config.min_se.as_secs();
        let supports_timer = msg.option_tags("Supported").iter().any(|t| t == "timer");
        let granted = match msg.header("Session-Expires").map(parse_session_expires) {
            Some(Some((secs, refresher))) => {
                if secs < min_se {
                    self.respond(&key, 422, &[h("Min-SE", min_se.to_string())], b"", now);
                    return;
                }
                // RFC 4028 §9: a caller without timer support cannot refresh; we do.
                let we_refresh = !supports_timer || refresher.as_deref() != Some("uac");
                Some((session_interval(secs), we_refresh))
            }
            Some(None) => {
                let w = h(
                    "Warning",
                    format!("399 {} \"bad Session-Expires\"", self.config.local_addr),
                );
                self.respond(&key, 400, &[w], b"", now);
                return;
            }
            None if supports_timer => {
                let min_se_req = msg
                    .header("Min-SE")
                    .and_then(|v| v.split(';').next()?.trim().parse::<u64>().ok());
                self.config
                    .session_expires
                    .map(|d| (d.max(Duration::from_secs(min_se_req.unwrap_or(0))), true))
            }
            None => None,
        };
        let (Some(from), Some(to)) = (msg.from(), msg.to()) else {
            return;
        };
        let Some(tx) = self.server.get(&key) else {
            return;
        };
        let local_tag = tx.to_tag.clone();
        let call = CallHandle(self.new_id());
        let remote_target = msg
            .contact()
            .map(|c| c.uri)
            .unwrap_or_else(|| from.uri.clone());
        let route_set: Vec<String> = msg
            .list_values("Record-Route")
            .into_iter()
            .map(str::to_string)
            .collect();
        let remote_party = self.header_without_tag(msg.header("From").unwrap_or_default());
        let local_party = msg.header("To").unwrap_or_default().to_string();
        self.calls.insert(
            call,
            Call {
                state: CallState::Incoming,
                is_uas: true,
                call_id: msg.call_id().to_string(),
                local_tag: local_tag.clone(),
                remote_tag: from.tag().map(str::to_string),
                local_party,
                remote_party,
                local_cseq: self.rng.random_range(1..10_000),
                remote_cseq: Some(msg.cseq().0),
                route_set,
                remote_target,
                peer: source,
                transport,
                invite_server: Some(key.clone()),
                invite_branch: None,
                invite_request: None,
                invite_cseq: msg.cseq().0,
                pending_2xx: None,
                last_ack: None,
                pending_offer: None,
                reinvite_in_progress: false,
                cancel_wanted: false,
                got_provisional: false,
                session_timer: None,
                local_sdp: None,
                remote_sdp_version: offer.as_ref().map(|o| o.session_version),
                granted_session: granted,
                acked: false,
                peer_supports_timer: supports_timer,
            },
        );
        self.dialogs
            .insert((msg.call_id().to_string(), local_tag), call);
        // RFC 3261 §17.2.1: 100 Trying at once so the caller stops retransmitting.
        self.respond(&key, 100, &[], b"", now);
        self.events
            .push_back(Event::IncomingCall(Box::new(IncomingCall {
                call,
                call_id: msg.call_id().to_string(),
                from,
                to,
                request_uri: msg.request_uri().unwrap_or_default().to_string(),
                source,
                offer,
                headers: msg.headers.clone(),
            })));
    }

    fn header_without_tag(&self, value: &str) -> String {
        match parse_name_addr(value) {
            Ok(a) => {
                let mut s = match &a.display_name {
                    Some(d) => format!("\"{d}\" <{}>", a.uri),
                    None => format!("<{}>", a.uri),
                };
                for (n, v) in a.params.iter().filter(|(n, _)| n != "tag") {
                    match v {
                        Some(v) => s.push_str(&format!(";{n}={v}")),
                        None => s.push_str(&format!(";{n}")),
                    }
                }
                s
            }
            Err(_) => value.to_string(),
        }
    }

    fn on_cancel(&mut self, key: &ServerKey, now: Instant) {
        // RFC 3261 §9.2: the CANCEL matches the INVITE's server transaction by everything but
        // the method.
        let invite_key = match key.clone() {
            ServerKey::Rfc3261 {
                branch, sent_by, ..
            } => ServerKey::Rfc3261 {
                branch,
                sent_by,
                method: "INVITE".into(),
            },
            ServerKey::Rfc2543 {
                request_uri,
                from_tag,
                call_id,
                cseq,
                via,
                ..
            } => ServerKey::Rfc2543 {
                request_uri,
                from_tag,
                call_id,
                cseq,
                via,
                method: "INVITE".into(),
            },
        };
        let pending = self
            .server
            .get(&invite_key)
            .map(|tx| tx.final_code.is_none());
        match pending {
            None => self.respond(key, 481, &[], b"", now),
            Some(still_pending) => {
                self.respond(key, 200, &[], b"", now);
                if still_pending {
                    self.respond(&invite_key, 487, &[], b"", now);
                    let call = self
                        .calls
                        .iter()
                        .find(|(_, c)| c.invite_server.as_ref() == Some(&invite_key))
                        .map(|(h, _)| *h);
                    if let Some(call) = call {
                        self.end_call(call, now, EndReason::Cancelled);
                    }
                }
            }
        }
    }

    fn on_dialog_ack(&mut self, msg: &Message) {
        let Some(tag) = msg.to().and_then(|t| t.tag().map(str::to_string)) else {
            return;
        };
        let Some(call) = self.dialogs.get(&(msg.call_id().to_string(), tag)).copied() else {
            return;
        };
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        let Some(p) = &c.pending_2xx else { return };
        if msg.cseq().0 != p.cseq {
            return;
        }
        c.pending_2xx = None;
        let first = !c.acked && c.is_uas;
        c.reinvite_in_progress = false;
        c.acked = true;
        if first {
            self.events.push_back(Event::Established { call });
        }
    }

    fn on_in_dialog(&mut self, call: CallHandle, key: ServerKey, msg: Message, now: Instant) {
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        let cseq = msg.cseq().0;
        // RFC 3261 §12.2.2: a lower CSeq than the last one is out of order: 500.
        if c.remote_cseq.is_some_and(|r| cseq < r) {
            self.respond(&key, 500, &[], b"", now);
            return;
        }
        c.remote_cseq = Some(cseq);
        if c.state == CallState::Terminating && msg.method() != Some(&Method::Bye) {
            self.respond(&key, 481, &[], b"", now);
            return;
        }
        match msg.method().cloned().unwrap_or(Method::Ack) {
            Method::Bye => {
                self.respond(&key, 200, &[], b"", now);
                // RFC 3261 §15.1.2: a BYE before our final answer ends the INVITE with 487.
                if let Some(k) = self.calls.get(&call).and_then(|c| c.invite_server.clone()) {
                    self.respond(&k, 487, &[], b"", now);
                }
                self.end_call(call, now, EndReason::RemoteHangup);
            }
            Method::Options => {
                let extra = self.capability_headers();
                self.respond(&key, 200, &extra, b"", now);
            }
            Method::Info => {
                let ct = msg.content_type().unwrap_or_default();
                if msg.body.is_empty() {
                    self.respond(&key, 200, &[], b"", now);
                } else if ct == "application/dtmf-relay" || ct == "application/dtmf" {
                    match parse_dtmf(&ct, &msg.body) {
                        Some((digit, duration_ms)) => {
                            self.respond(&key, 200, &[], b"", now);
                            self.events.push_back(Event::Dtmf {
                                call,
                                digit,
                                duration_ms,
                            });
                        }
                        None => {
                            let w = h(
                                "Warning",
                                format!("399 {} \"unreadable DTMF body\"", self.config.local_addr),
                            );
                            self.respond(&key, 400, &[w], b"", now);
                        }
                    }
                } else {
                    self.respond(
                        &key,
                        415,
                        &[h("Accept", "application/dtmf-relay, application/dtmf")],
                        b"",
                        now,
                    );
                }
            }
            method @ (Method::Invite | Method::Update) => {
                self.on_offer_request(call, key, msg, method, now)
            }
            _ => self.respond(&key, 405, &[h("Allow", ALLOW)], b"", now),
        }
    }

    fn on_offer_request(
        &mut self,
        call: CallHandle,
        key: ServerKey,
        msg: Message,
        method: Method,
        now: Instant,
    ) {
        let Some(c) = self.calls.get(&call) else {
            return;
        };
        // RFC 3261 §14.2: a re-INVITE while ours is pending gets 491; while one of theirs is
        // pending, 500 with Retry-After.
        if c.pending_offer.is_some() {
            self.respond(&key, 500, &[h("Retry-After", "1")], b"", now);
            return;
        }
        if c.reinvite_in_progress && method == Method::Invite {
            self.respond(&key, 491, &[], b"", now);
            return;
        }
        if method == Method::Invite && c.state != CallState::Established {
            self.respond(&key, 491, &[], b"", now);
            return;
        }
        // Any re-INVITE/UPDATE refreshes the session (RFC 4028 §10).
        if let Some(Some((secs, refresher))) =
            msg.header("Session-Expires").map(parse_session_expires)
        {
            if secs < self.config.min_se.as_secs() {
                let min_se = self.config.min_se.as_secs().to_string();
                self.respond(&key, 422, &[h("Min-SE", min_se)], b"", now);
                return;
            }
            let we_refresh = if c.is_uas {
                refresher.as_deref() == Some("uas")
            } else {
                refresher.as_deref() == Some("uac")
            };
            if let Some(c) = self.calls.get_mut(&call) {
                c.granted_session = Some((session_interval(secs), we_refresh));
            }
        }
        self.restart_session_timer(call, now);
        if let Some(target) = msg.contact().map(|a| a.uri) {
            if let Some(c) = self.calls.get_mut(&call) {
                c.remote_target = target; // RFC 3261 §12.2.2: target refresh.
            }
        }
        match sdp_body(&msg) {
            Some(Err(e)) => {
                let code = if msg.content_type().as_deref() == Some("application/sdp") {
                    400
                } else {
                    415
                };
                let w = h(
                    "Warning",
                    format!(
                        "399 {} \"{}\"",
                        self.config.local_addr,
                        e.to_string().replace('"', "'")
                    ),
                );
                self.respond(&key, code, &[w, h("Accept", "application/sdp")], b"", now);
            }
            Some(Ok(offer)) => {
                let unchanged = self.calls.get(&call).and_then(|c| c.remote_sdp_version)
                    == Some(offer.session_version);
                let has_local = self.calls.get(&call).is_some_and(|c| c.local_sdp.is_some());
                if let Some(c) = self.calls.get_mut(&call) {
                    c.remote_sdp_version = Some(offer.session_version);
                }
                if unchanged && has_local {
                    // RFC 3264 §8: an unchanged offer (a session refresh) gets our unchanged answer.
                    self.answer_offer_request(call, key, None, now);
                } else {
                    if method == Method::Invite {
                        // The application answers; stop the re-INVITE's retransmissions now.
                        self.respond(&key, 100, &[], b"", now);
                    }
                    if let Some(c) = self.calls.get_mut(&call) {
                        c.pending_offer = Some(key);
                    }
                    self.events.push_back(Event::OfferReceived {
                        call,
                        method,
                        offer,
                    });
                }
            }
            None => self.answer_offer_request(call, key, None, now),
        }
    }

    /// 2xx to a re-INVITE/UPDATE with `sdp` (or our current SDP).
    fn answer_offer_request(
        &mut self,
        call: CallHandle,
        key: ServerKey,
        sdp: Option<Vec<u8>>,
        now: Instant,
    ) {
        let contact = self.contact(
            self.calls
                .get(&call)
                .map(|c| c.transport)
                .unwrap_or(Transport::Udp),
        );
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        if let Some(s) = sdp {
            c.local_sdp = Some(s);
        }
        let body = c.local_sdp.clone().unwrap_or_default();
        let mut extra = vec![h("Contact", contact)];
        if !body.is_empty() {
            extra.push(h("Content-Type", "application/sdp"));
        }
        if let Some((d, we_refresh)) = c.granted_session {
            let who = if we_refresh == c.is_uas { "uas" } else { "uac" };
            extra.push(h(
                "Session-Expires",
                format!("{};refresher={who}", d.as_secs()),
            ));
        }
        let is_invite = self
            .server
            .get(&key)
            .is_some_and(|t| t.method == Method::Invite);
        if is_invite {
            let cseq = self
                .server
                .get(&key)
                .map(|t| t.request.cseq().0)
                .unwrap_or_default();
            self.respond(&key, 200, &extra, &body, now);
            self.start_2xx_retransmission(call, &key, cseq, now);
        } else {
            self.respond(&key, 200, &extra, &body, now);
        }
    }

    fn start_2xx_retransmission(
        &mut self,
        call: CallHandle,
        key: &ServerKey,
        cseq: u32,
        now: Instant,
    ) {
        let Some(tx) = self.server.get(key) else {
            return;
        };
        let Some(resp) = tx.last_response.clone() else {
            return;
        };
        let (destination, transport) = (tx.destination, tx.transport);
        let reliable = transport.reliable();
        let t = self.config.timers;
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        c.reinvite_in_progress = c.state == CallState::Established;
        // RFC 3261 §13.3.1.4: the TU retransmits the 2xx (T1 doubling to T2) until the ACK,
        // for 64·T1; over TCP only the give-up timer runs.
        c.pending_2xx = Some(Pending2xx {
            response: resp,
            destination,
            transport,
            cseq,
            interval: t.t1,
            next_at: if reliable { now + t.t64() } else { now + t.t1 },
            give_up_at: now + t.t64(),
        });
    }

    /// Remembers the peer's SDP version, so a later offer with the same `o=` version is known
    /// to be a refresh (RFC 3264 §8).
    fn note_remote_sdp(&mut self, call: CallHandle, sdp: Option<&SessionDescription>) {
        if let (Some(c), Some(sdp)) = (self.calls.get_mut(&call), sdp) {
            c.remote_sdp_version = Some(sdp.session_version);
        }
    }

    fn end_call(&mut self, call: CallHandle, now: Instant, reason: EndReason) {
        if let Some(c) = self.calls.remove(&call) {
            // RFC 3261 §15.1.2: requests still pending in the dialog are answered 487.
            if let Some(key) = &c.pending_offer {
                self.respond(key, 487, &[], b"", now);
            }
            self.dialogs.remove(&(c.call_id, c.local_tag));
            self.events.push_back(Event::Ended { call, reason });
        }
    }

    // ------------------------------------------------------------ responses

    fn on_response(&mut self, msg: Message, now: Instant) {
        let Some(via) = msg.top_via() else { return };
        let Some(branch) = via.branch() else { return };
        let (_, cseq_method) = msg.cseq();
        let key = (branch.to_string(), cseq_method.as_str().to_string());
        let code = msg.status().unwrap_or(0);
        let timers = self.config.timers;
        let Some(tx) = self.client.get_mut(&key) else {
            // A 2xx retransmission after the transaction ended: ACK again (RFC 3261 §13.2.2.4).
            self.reack(&msg);
            return;
        };
        let owner = tx.owner;
        let is_invite = tx.method == Method::Invite;
        match (tx.state, code) {
            (ClientState::Completed, 300..) => {
                if let Some(ack) = tx.ack.clone() {
                    let (d, t) = (tx.destination, tx.transport);
                    self.send(d, t, ack);
                }
                return;
            }
            (ClientState::Completed, _) => return,
            (ClientState::Accepted, 200..=299) => {
                self.reack(&msg);
                return;
            }
            (ClientState::Accepted, _) => return,
            (_, 100..=199) => {
                tx.state = ClientState::Proceeding;
                if is_invite {
                    // RFC 3261 §17.1.1.2: Proceeding has neither timer A nor B; a call may ring
                    // as long as the callee likes (the application cancels when it wants).
                    tx.retransmit_at = None;
                    tx.timeout_at = None;
                } else if tx.retransmit_at.is_some() {
                    tx.interval = timers.t2; // RFC 3261 §17.1.2.2: T2 in Proceeding.
                }
            }
            (_, 200..=299) if is_invite => {
                // RFC 6026: Accepted, pass every 2xx up for 64·T1 (timer M).
                tx.state = ClientState::Accepted;
                tx.retransmit_at = None;
                tx.timeout_at = None;
                tx.end_at = Some(now + timers.t64());
            }
            (_, _) => {
                tx.state = ClientState::Completed;
                tx.retransmit_at = None;
                tx.timeout_at = None;
                if is_invite {
                    // RFC 3261 §17.1.1.3: ACK the non-2xx in the transaction; timer D.
                    let ack = self.non_2xx_ack(&key.0, &msg);
                    let tx = self.client.get_mut(&key).expect("ok: looked up just above");
                    tx.ack = ack.clone();
                    tx.end_at = Some(timer_end(tx.transport, Duration::from_secs(32), now));
                    if let Some(ack) = ack {
                        let (d, t) = (tx.destination, tx.transport);
                        self.send(d, t, ack);
                    }
                } else {
                    tx.end_at = Some(timer_end(tx.transport, timers.t4, now));
                }
            }
        }
        self.on_client_result(owner, Some(&msg), now);
    }

    fn non_2xx_ack(&self, branch_key: &str, resp: &Message) -> Option<Vec<u8>> {
        let tx = self
            .client
            .get(&(branch_key.to_string(), "INVITE".to_string()))?;
        let req = crate::message::parse_message(&tx.request, &UNLIMITED, Framing::Datagram).ok()?;
        let mut headers: HeaderList = Vec::new();
        for (n, v) in &req.headers {
            match n.as_str() {
                "Via" if headers.iter().all(|(n, _)| n != "Via") => {
                    headers.push((n.clone(), v.clone()))
                }
                "From" | "Call-ID" | "Route" | "Max-Forwards" => {
                    headers.push((n.clone(), v.clone()))
                }
                _ => {}
            }
        }
        headers.push(h("To", resp.header("To").unwrap_or_default()));
        headers.push(h("CSeq", format!("{} ACK", req.cseq().0)));
        build::request(&Method::Ack, req.request_uri()?, &headers, b"").ok()
    }

    fn reack(&mut self, msg: &Message) {
        if !msg.status().is_some_and(|c| (200..300).contains(&c)) || msg.cseq().1 != Method::Invite
        {
            return;
        }
        let Some(tag) = msg.from().and_then(|f| f.tag().map(str::to_string)) else {
            return;
        };
        let Some(call) = self.dialogs.get(&(msg.call_id().to_string(), tag)).copied() else {
            return;
        };
        let Some(c) = self.calls.get(&call) else {
            return;
        };
        if let Some((cseq, ack)) = &c.last_ack {
            if *cseq == msg.cseq().0 && !ack.is_empty() {
                let (d, t, a) = (self.in_dialog_destination(c), c.transport, ack.clone());
                self.send(d, t, a);
            }
        }
    }

    fn on_client_result(&mut self, owner: Owner, msg: Option<&Message>, now: Instant) {
        let code = msg.and_then(Message::status).unwrap_or(408);
        match owner {
            Owner::Invite(call) => self.on_invite_result(call, msg, code, now),
            Owner::ReInvite(call) => {
                if (200..300).contains(&code) {
                    if let Some(m) = msg {
                        let answer = sdp_body(m).and_then(|r| r.ok());
                        self.note_remote_sdp(call, answer.as_ref());
                        self.send_ack(call, m);
                        if let Some(Some((secs, refresher))) =
                            m.header("Session-Expires").map(parse_session_expires)
                        {
                            let is_uas = self.calls.get(&call).is_some_and(|c| c.is_uas);
                            let we = if is_uas { "uas" } else { "uac" };
                            if let Some(c) = self.calls.get_mut(&call) {
                                c.granted_session = Some((
                                    session_interval(secs),
                                    refresher.as_deref() == Some(we),
                                ));
                            }
                        }
                        self.restart_session_timer(call, now);
                        if let Some(c) = self.calls.get_mut(&call) {
                            c.reinvite_in_progress = false;
                        }
                        self.events
                            .push_back(Event::UpdateAnswered { call, answer });
                    }
                } else if code >= 200 {
                    if let Some(c) = self.calls.get_mut(&call) {
                        c.reinvite_in_progress = false;
                    }
                    if code == 481 || code == 408 {
                        self.hangup_inner(call, now, EndReason::DialogGone { status: code });
                    } else {
                        self.events
                            .push_back(Event::UpdateFailed { call, status: code });
                    }
                }
            }
            Owner::Bye(call) => {
                if code >= 200 {
                    self.end_call(
                        call,
                        now,
                        EndReason::LocalHangup {
                            confirmed: msg.is_some(),
                        },
                    );
                }
            }
            Owner::Options(request) => {
                if code >= 200 {
                    self.events.push_back(Event::OptionsResponse {
                        request,
                        status: code,
                    });
                }
            }
            Owner::Cancel(_) | Owner::InDialog(_) => {}
        }
    }

    fn on_invite_result(
        &mut self,
        call: CallHandle,
        msg: Option<&Message>,
        code: u16,
        now: Instant,
    ) {
        // A call already ended (timer B) has no transaction left to deliver to us.
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        match code {
            100 => {}
            101..=199 => {
                c.got_provisional = true;
                let sdp = msg.and_then(sdp_body).and_then(|r| r.ok());
                if c.cancel_wanted {
                    self.send_cancel(call, now);
                }
                self.events.push_back(Event::Progress {
                    call,
                    status: code,
                    sdp,
                });
            }
            200..=299 => {
                let Some(m) = msg else { return };
                let first = c.remote_tag.is_none() || c.state == CallState::Outgoing;
                if !first {
                    return;
                }
                c.remote_tag = m.to().and_then(|t| t.tag().map(str::to_string));
                c.route_set = m
                    .list_values("Record-Route")
                    .into_iter()
                    .rev()
                    .map(str::to_string)
                    .collect();
                if let Some(contact) = m.contact() {
                    c.remote_target = contact.uri;
                }
                c.state = CallState::Established;
                if let Some((secs, refresher)) =
                    m.header("Session-Expires").and_then(parse_session_expires)
                {
                    c.granted_session =
                        Some((session_interval(secs), refresher.as_deref() != Some("uas")));
                }
                let cancelled = c.cancel_wanted;
                self.send_ack(call, m);
                self.restart_session_timer(call, now);
                if cancelled {
                    // RFC 3261 §9.1: our CANCEL lost the race with the 2xx; end with BYE.
                    self.hangup_inner(call, now, EndReason::Cancelled);
                } else {
                    let answer = sdp_body(m).and_then(|r| r.ok());
                    self.note_remote_sdp(call, answer.as_ref());
                    self.events.push_back(Event::Answered { call, answer });
                }
            }
            _ => {
                let reason = if c.cancel_wanted && code == 487 {
                    EndReason::Cancelled
                } else if msg.is_none() {
                    EndReason::Timeout
                } else {
                    let reason = match msg.map(|m| &m.start) {
                        Some(crate::message::StartLine::Response { reason, .. }) => reason.clone(),
                        _ => String::new(),
                    };
                    EndReason::Refused {
                        status: code,
                        reason,
                    }
                };
                self.end_call(call, now, reason);
            }
        }
    }

    // ------------------------------------------------------------ timers

    /// Fires every timer due at `now`: retransmissions (A, E, G, 2xx), timeouts (B, F, H, and
    /// the 2xx give-up), waits (D, I, J, K, L, M) and session timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        let timers = self.config.timers;
        // Client transactions.
        let keys: Vec<(String, String)> = self
            .client
            .iter()
            .filter(|(_, t)| t.deadline().is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(tx) = self.client.get_mut(&key) else {
                continue;
            };
            if tx.end_at.is_some_and(|d| d <= now) {
                self.client.remove(&key);
                continue;
            }
            if tx.timeout_at.is_some_and(|d| d <= now) {
                // Timer B/F: no final response.
                let owner = tx.owner;
                self.client.remove(&key);
                self.on_client_result(owner, None, now);
                continue;
            }
            if tx.retransmit_at.is_some_and(|d| d <= now) {
                let is_invite = tx.method == Method::Invite;
                tx.interval = if is_invite {
                    tx.interval.saturating_mul(2)
                } else if tx.state == ClientState::Proceeding {
                    timers.t2
                } else {
                    (tx.interval.saturating_mul(2)).min(timers.t2)
                };
                tx.retransmit_at = Some(now + tx.interval);
                let (d, t, b) = (tx.destination, tx.transport, tx.request.clone());
                self.send(d, t, b);
            }
        }
        // Server transactions.
        let keys: Vec<ServerKey> = self
            .server
            .iter()
            .filter(|(_, t)| t.deadline().is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(tx) = self.server.get_mut(&key) else {
                continue;
            };
            if tx.end_at.is_some_and(|d| d <= now) || tx.timeout_at.is_some_and(|d| d <= now) {
                // Timer H (no ACK for our non-2xx) just ends the transaction (§17.2.1).
                self.server.remove(&key);
                continue;
            }
            if tx.retransmit_at.is_some_and(|d| d <= now) {
                tx.interval = (tx.interval.saturating_mul(2)).min(timers.t2);
                tx.retransmit_at = Some(now + tx.interval);
                if let Some(r) = tx.last_response.clone() {
                    let (d, t) = (tx.destination, tx.transport);
                    self.send(d, t, r);
                }
            }
        }
        // Calls: 2xx retransmission and session timers.
        let handles: Vec<CallHandle> = self.calls.keys().copied().collect();
        for call in handles {
            let Some(c) = self.calls.get_mut(&call) else {
                continue;
            };
            if let Some(p) = &mut c.pending_2xx {
                if p.give_up_at <= now {
                    c.pending_2xx = None;
                    let first = !c.reinvite_in_progress;
                    c.reinvite_in_progress = false;
                    if first {
                        self.hangup_inner(call, now, EndReason::NoAck);
                        continue;
                    }
                } else if p.next_at <= now {
                    p.interval = (p.interval.saturating_mul(2)).min(timers.t2);
                    p.next_at = (now + p.interval).min(p.give_up_at);
                    let (r, d, t) = (p.response.clone(), p.destination, p.transport);
                    self.send(d, t, r);
                }
            }
            let Some(c) = self.calls.get_mut(&call) else {
                continue;
            };
            if let Some(st) = &c.session_timer {
                if st.fire_at <= now {
                    if st.we_refresh {
                        // RFC 4028 §7.4/§9: refresh with a re-INVITE carrying our current SDP.
                        let sdp = c.local_sdp.clone();
                        c.session_timer = None;
                        if self.send_reinvite(call, sdp, now).is_err() {
                            self.hangup_inner(call, now, EndReason::SessionExpired);
                        }
                    } else {
                        self.hangup_inner(call, now, EndReason::SessionExpired);
                    }
                }
            }
        }
    }

    fn restart_session_timer(&mut self, call: CallHandle, now: Instant) {
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        let Some((interval, we_refresh)) = c.granted_session else {
            return;
        };
        // RFC 4028 §10: the refresher refreshes at half the interval; the other side gives up
        // at the interval minus min(32 s, interval/3).
        let fire = if we_refresh {
            interval / 2
        } else {
            interval - (interval / 3).min(Duration::from_secs(32))
        };
        c.session_timer = Some(SessionTimer {
            we_refresh,
            fire_at: now + fire,
        });
    }

    // ------------------------------------------------------------ commands

    fn call_mut(&mut self, call: CallHandle) -> Result<&mut Call> {
        self.calls.get_mut(&call).ok_or(Error::UnknownCall(call.0))
    }

    /// Sends 180 Ringing for an incoming call.
    pub fn ring(&mut self, call: CallHandle, now: Instant) -> Result<()> {
        self.provisional(call, 180, now)
    }

    /// Sends a provisional response (101..=199) for an incoming call.
    pub fn provisional(&mut self, call: CallHandle, status: u16, now: Instant) -> Result<()> {
        if !(101..=199).contains(&status) {
            return Err(Error::InvalidStatus {
                code: status,
                allowed: "101..=199",
            });
        }
        let transport = self.call_mut(call)?.transport;
        let contact = self.contact(transport);
        let c = self.call_mut(call)?;
        if c.state != CallState::Incoming {
            return Err(Error::InvalidState {
                action: "ring",
                state: c.state.name(),
            });
        }
        let key = c.invite_server.clone().ok_or(Error::InvalidState {
            action: "ring",
            state: "outgoing",
        })?;
        self.respond(&key, status, &[h("Contact", contact)], b"", now);
        Ok(())
    }

    /// Answers an incoming call with 200 and our SDP answer (see [`crate::sdp::answer_offer`]).
    /// The 2xx is retransmitted until the ACK ([`Event::Established`]) or for 64·T1, after which
    /// the call ends with [`EndReason::NoAck`].
    pub fn answer(
        &mut self,
        call: CallHandle,
        answer: &SessionDescription,
        now: Instant,
    ) -> Result<()> {
        let transport = self.call_mut(call)?.transport;
        let contact = self.contact(transport);
        let server_header = self.config.user_agent.clone();
        let c = self.call_mut(call)?;
        if c.state != CallState::Incoming {
            return Err(Error::InvalidState {
                action: "answer",
                state: c.state.name(),
            });
        }
        let key = c.invite_server.take().ok_or(Error::InvalidState {
            action: "answer",
            state: "outgoing",
        })?;
        let body = answer.to_sdp_string().into_bytes();
        c.local_sdp = Some(body.clone());
        c.state = CallState::Established;
        let mut extra = vec![
            h("Contact", contact),
            h("Allow", ALLOW),
            h("Supported", SUPPORTED),
            h("Server", server_header),
        ];
        // RFC 3261 §12.1.1: the 2xx copies the Record-Route of the INVITE.
        if let Some(tx) = self.server.get(&key) {
            for rr in tx.request.headers_named("Record-Route") {
                extra.push(h("Record-Route", rr));
            }
        }
        let c = self.call_mut(call)?;
        if let Some((d, we_refresh)) = c.granted_session {
            extra.push(h(
                "Session-Expires",
                format!(
                    "{};refresher={}",
                    d.as_secs(),
                    if we_refresh { "uas" } else { "uac" }
                ),
            ));
            if c.peer_supports_timer {
                extra.push(h("Require", "timer"));
            }
        }
        extra.push(h("Content-Type", "application/sdp"));
        let cseq = c.invite_cseq;
        self.respond(&key, 200, &extra, &body, now);
        self.start_2xx_retransmission(call, &key, cseq, now);
        if let Some(c) = self.calls.get_mut(&call) {
            c.reinvite_in_progress = false;
        }
        self.restart_session_timer(call, now);
        Ok(())
    }

    /// Rejects an incoming call with a final status (300..=699) and extra headers (e.g.
    /// `("Retry-After", "30")` with 503, design.md §9). The call ends with
    /// [`EndReason::Rejected`].
    pub fn reject(
        &mut self,
        call: CallHandle,
        status: u16,
        headers: &[(String, String)],
        now: Instant,
    ) -> Result<()> {
        if !(300..=699).contains(&status) {
            return Err(Error::InvalidStatus {
                code: status,
                allowed: "300..=699",
            });
        }
        let c = self.call_mut(call)?;
        if c.state != CallState::Incoming {
            return Err(Error::InvalidState {
                action: "reject",
                state: c.state.name(),
            });
        }
        let key = c.invite_server.take().ok_or(Error::InvalidState {
            action: "reject",
            state: "outgoing",
        })?;
        self.respond(&key, status, headers, b"", now);
        self.end_call(call, now, EndReason::Rejected { status });
        Ok(())
    }

    /// Ends a call: BYE when established, CANCEL for our unanswered call, 480 for an
    /// unanswered incoming one. [`Event::Ended`] follows.
    pub fn hangup(&mut self, call: CallHandle, now: Instant) -> Result<()> {
        self.hangup_with_headers(call, &[], now)
    }

    /// [`Endpoint::hangup`] with extra headers on the BYE (or the 480 of an unanswered incoming
    /// call), e.g. `("Reason", "Q.850;cause=41")` (RFC 3326). A CANCEL gets none: RFC 3261
    /// §9.1 builds it from the INVITE.
    pub fn hangup_with_headers(
        &mut self,
        call: CallHandle,
        headers: &[(String, String)],
        now: Instant,
    ) -> Result<()> {
        let c = self.call_mut(call)?;
        match c.state {
            CallState::Incoming => self.reject(call, 480, headers, now),
            CallState::Outgoing => self.cancel(call, now),
            CallState::Established => {
                self.hangup_inner_with(
                    call,
                    now,
                    EndReason::LocalHangup { confirmed: false },
                    headers,
                );
                Ok(())
            }
            CallState::Terminating => Err(Error::InvalidState {
                action: "hang up",
                state: c.state.name(),
            }),
        }
    }

    /// Cancels our call before its final response (RFC 3261 §9.1). The CANCEL goes out once a
    /// provisional response has arrived; the call ends when the 487 (or a racing 2xx + BYE) does.
    pub fn cancel(&mut self, call: CallHandle, now: Instant) -> Result<()> {
        let c = self.call_mut(call)?;
        if c.state != CallState::Outgoing {
            return Err(Error::InvalidState {
                action: "cancel",
                state: c.state.name(),
            });
        }
        if c.cancel_wanted {
            return Ok(());
        }
        c.cancel_wanted = true;
        if c.got_provisional {
            self.send_cancel(call, now);
        }
        Ok(())
    }

    fn send_cancel(&mut self, call: CallHandle, now: Instant) {
        let Some(c) = self.calls.get(&call) else {
            return;
        };
        let (Some(branch), Some(req)) = (c.invite_branch.clone(), c.invite_request.clone()) else {
            return;
        };
        let unlimited = UNLIMITED;
        let Ok(inv) = parse_message(&req, &unlimited, Framing::Datagram) else {
            return;
        };
        let mut headers: HeaderList = Vec::new();
        for (n, v) in &inv.headers {
            match n.as_str() {
                "Via" if headers.iter().all(|(n, _)| n != "Via") => {
                    headers.push((n.clone(), v.clone()))
                }
                "From" | "To" | "Call-ID" | "Route" | "Max-Forwards" => {
                    headers.push((n.clone(), v.clone()))
                }
                _ => {}
            }
        }
        headers.push(h("CSeq", format!("{} CANCEL", inv.cseq().0)));
        let Ok(bytes) = build::request(
            &Method::Cancel,
            inv.request_uri().unwrap_or_default(),
            &headers,
            b"",
        ) else {
            return;
        };
        let (dest, transport) = match self.client.get(&(branch.clone(), "INVITE".to_string())) {
            Some(tx) => (tx.destination, tx.transport),
            None => (c.peer, c.transport),
        };
        self.start_client_tx(
            branch,
            Method::Cancel,
            bytes,
            dest,
            transport,
            Owner::Cancel(call),
            now,
        );
        if let Some(c) = self.calls.get_mut(&call) {
            c.invite_request = None;
        }
    }

    fn hangup_inner(&mut self, call: CallHandle, now: Instant, reason: EndReason) {
        self.hangup_inner_with(call, now, reason, &[]);
    }

    fn hangup_inner_with(
        &mut self,
        call: CallHandle,
        now: Instant,
        reason: EndReason,
        extra: &[(String, String)],
    ) {
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        if c.state == CallState::Terminating {
            return;
        }
        c.state = CallState::Terminating;
        c.session_timer = None;
        c.pending_2xx = None;
        match self.in_dialog_request(call, Method::Bye, extra, b"") {
            Ok((branch, bytes, dest, transport)) => {
                self.start_client_tx(
                    branch,
                    Method::Bye,
                    bytes,
                    dest,
                    transport,
                    Owner::Bye(call),
                    now,
                );
                if !matches!(reason, EndReason::LocalHangup { .. }) {
                    // The application learns the real reason now; the BYE completes unseen.
                    if let Some(tx) = self
                        .client
                        .values_mut()
                        .find(|t| t.owner == Owner::Bye(call))
                    {
                        tx.owner = Owner::InDialog(call);
                    }
                    self.end_call(call, now, reason);
                }
            }
            Err(_) => self.end_call(call, now, reason),
        }
    }

    /// Sends a re-INVITE with a new offer (hold: our offer with `sendonly`/`inactive`;
    /// resume: `sendrecv`). [`Event::UpdateAnswered`] or [`Event::UpdateFailed`] follows.
    pub fn reinvite(
        &mut self,
        call: CallHandle,
        offer: &SessionDescription,
        now: Instant,
    ) -> Result<()> {
        let c = self.call_mut(call)?;
        if c.state != CallState::Established || c.reinvite_in_progress || c.pending_offer.is_some()
        {
            let state = if c.state == CallState::Established {
                "renegotiating"
            } else {
                c.state.name()
            };
            return Err(Error::InvalidState {
                action: "re-INVITE",
                state,
            });
        }
        self.send_reinvite(call, Some(offer.to_sdp_string().into_bytes()), now)
    }

    fn send_reinvite(
        &mut self,
        call: CallHandle,
        sdp: Option<Vec<u8>>,
        now: Instant,
    ) -> Result<()> {
        let transport = self.call_mut(call)?.transport;
        let contact = self.contact(transport);
        let mut extra = vec![
            h("Contact", contact),
            h("Allow", ALLOW),
            h("Supported", SUPPORTED),
        ];
        let c = self.call_mut(call)?;
        if let Some((d, we_refresh)) = c.granted_session {
            let who = if we_refresh == c.is_uas { "uas" } else { "uac" };
            extra.push(h(
                "Session-Expires",
                format!("{};refresher={who}", d.as_secs()),
            ));
        }
        if let Some(s) = &sdp {
            c.local_sdp = Some(s.clone());
            extra.push(h("Content-Type", "application/sdp"));
        }
        c.reinvite_in_progress = true;
        let body = sdp.unwrap_or_default();
        let (branch, bytes, dest, transport) =
            self.in_dialog_request(call, Method::Invite, &extra, &body)?;
        self.start_client_tx(
            branch,
            Method::Invite,
            bytes,
            dest,
            transport,
            Owner::ReInvite(call),
            now,
        );
        Ok(())
    }

    /// Answers the peer's re-INVITE/UPDATE offer ([`Event::OfferReceived`]) with our SDP.
    pub fn answer_update(
        &mut self,
        call: CallHandle,
        answer: &SessionDescription,
        now: Instant,
    ) -> Result<()> {
        let c = self.call_mut(call)?;
        let key = c.pending_offer.take().ok_or(Error::InvalidState {
            action: "answer an update of",
            state: "without an offer pending",
        })?;
        self.answer_offer_request(call, key, Some(answer.to_sdp_string().into_bytes()), now);
        Ok(())
    }

    /// Rejects the peer's re-INVITE/UPDATE offer (e.g. 488); the previous session stays.
    pub fn reject_update(&mut self, call: CallHandle, status: u16, now: Instant) -> Result<()> {
        if !(300..=699).contains(&status) {
            return Err(Error::InvalidStatus {
                code: status,
                allowed: "300..=699",
            });
        }
        let c = self.call_mut(call)?;
        let key = c.pending_offer.take().ok_or(Error::InvalidState {
            action: "reject an update of",
            state: "without an offer pending",
        })?;
        self.respond(&key, status, &[], b"", now);
        Ok(())
    }

    /// Places a call: sends an INVITE with the offer. Events follow: [`Event::Progress`],
    /// [`Event::Answered`] (the ACK is sent for you) or [`Event::Ended`].
    pub fn place_call(&mut self, params: CallParams, now: Instant) -> Result<CallHandle> {
        if !crate::message::is_valid_sip_uri(&params.target) {
            return Err(Error::InvalidUri(params.target));
        }
        let call = CallHandle(self.new_id());
        let local_tag = self.random_token();
        let call_id = format!("{}@{}", self.random_token(), self.config.local_addr.ip());
        let from_uri = params
            .from
            .clone()
            .unwrap_or_else(|| format!("sip:{}@{}", self.config.user, self.config.local_addr));
        let local_party = format!("<{from_uri}>");
        let remote_party = format!("<{}>", params.target);
        let branch = self.new_branch();
        let cseq = 1;
        let body = params.offer.to_sdp_string().into_bytes();
        let via = format!(
            "SIP/2.0/{} {};branch={branch};rport",
            params.transport.via_token(),
            self.config.local_addr
        );
        let mut headers = vec![
            h("Via", via),
            h("Max-Forwards", "70"),
            h("From", format!("{local_party};tag={local_tag}")),
            h("To", remote_party.clone()),
            h("Call-ID", call_id.clone()),
            h("CSeq", format!("{cseq} INVITE")),
            h("Contact", self.contact(params.transport)),
            h("Allow", ALLOW),
            h("Supported", SUPPORTED),
            h("User-Agent", self.config.user_agent.clone()),
        ];
        if let Some(se) = self.config.session_expires {
            headers.push(h("Session-Expires", se.as_secs().to_string()));
            headers.push(h("Min-SE", self.config.min_se.as_secs().to_string()));
        }
        headers.push(h("Content-Type", "application/sdp"));
        let bytes = build::request(&Method::Invite, &params.target, &headers, &body)?;
        self.calls.insert(
            call,
            Call {
                state: CallState::Outgoing,
                is_uas: false,
                call_id: call_id.clone(),
                local_tag: local_tag.clone(),
                remote_tag: None,
                local_party,
                remote_party,
                local_cseq: cseq,
                remote_cseq: None,
                route_set: Vec::new(),
                remote_target: params.target.clone(),
                peer: params.destination,
                transport: params.transport,
                invite_server: None,
                invite_branch: Some(branch.clone()),
                invite_request: Some(bytes.clone()),
                invite_cseq: cseq,
                pending_2xx: None,
                last_ack: None,
                pending_offer: None,
                reinvite_in_progress: false,
                cancel_wanted: false,
                got_provisional: false,
                session_timer: None,
                local_sdp: Some(body),
                remote_sdp_version: None,
                granted_session: None,
                acked: false,
                peer_supports_timer: true,
            },
        );
        self.dialogs.insert((call_id, local_tag), call);
        self.start_client_tx(
            branch,
            Method::Invite,
            bytes,
            params.destination,
            params.transport,
            Owner::Invite(call),
            now,
        );
        Ok(call)
    }

    /// Sends an out-of-dialog OPTIONS (a ping) to `target` at `destination`.
    pub fn send_options(
        &mut self,
        target: &str,
        destination: SocketAddr,
        transport: Transport,
        now: Instant,
    ) -> Result<RequestHandle> {
        let request = RequestHandle(self.new_id());
        let branch = self.new_branch();
        let tag = self.random_token();
        let call_id = format!("{}@{}", self.random_token(), self.config.local_addr.ip());
        let headers = vec![
            h(
                "Via",
                format!(
                    "SIP/2.0/{} {};branch={branch};rport",
                    transport.via_token(),
                    self.config.local_addr
                ),
            ),
            h("Max-Forwards", "70"),
            h(
                "From",
                format!(
                    "<sip:{}@{}>;tag={tag}",
                    self.config.user, self.config.local_addr
                ),
            ),
            h("To", format!("<{target}>")),
            h("Call-ID", call_id),
            h("CSeq", "1 OPTIONS"),
            h("Accept", "application/sdp"),
            h("User-Agent", self.config.user_agent.clone()),
        ];
        let bytes = build::request(&Method::Options, target, &headers, b"")?;
        self.start_client_tx(
            branch,
            Method::Options,
            bytes,
            destination,
            transport,
            Owner::Options(request),
            now,
        );
        Ok(request)
    }

    /// Sends an OPTIONS inside a call's dialog (a keep-alive); the response is absorbed.
    pub fn send_options_in_dialog(&mut self, call: CallHandle, now: Instant) -> Result<()> {
        let (branch, bytes, dest, transport) = self.in_dialog_request(
            call,
            Method::Options,
            &[h("Accept", "application/sdp")],
            b"",
        )?;
        self.start_client_tx(
            branch,
            Method::Options,
            bytes,
            dest,
            transport,
            Owner::InDialog(call),
            now,
        );
        Ok(())
    }

    /// Sends a DTMF digit with SIP INFO (`application/dtmf-relay`).
    pub fn send_info_dtmf(
        &mut self,
        call: CallHandle,
        digit: char,
        duration_ms: u32,
        now: Instant,
    ) -> Result<()> {
        if !is_dtmf_digit(digit) {
            return Err(Error::Message(format!("{digit:?} is not a DTMF digit")));
        }
        let body = format!("Signal={digit}\r\nDuration={duration_ms}\r\n");
        let extra = [h("Content-Type", "application/dtmf-relay")];
        let (branch, bytes, dest, transport) =
            self.in_dialog_request(call, Method::Info, &extra, body.as_bytes())?;
        self.start_client_tx(
            branch,
            Method::Info,
            bytes,
            dest,
            transport,
            Owner::InDialog(call),
            now,
        );
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn start_client_tx(
        &mut self,
        branch: String,
        method: Method,
        request: Vec<u8>,
        destination: SocketAddr,
        transport: Transport,
        owner: Owner,
        now: Instant,
    ) {
        let t = self.config.timers;
        let retransmit_at = (!transport.reliable()).then_some(now + t.t1);
        metrics::counter!("ontime_sip_messages_total", "method" => method.as_str().to_string(), "direction" => "out").increment(1);
        self.send(destination, transport, request.clone());
        self.client.insert(
            (branch, method.as_str().to_string()),
            ClientTx {
                method,
                request,
                destination,
                transport,
                state: ClientState::Calling,
                interval: t.t1,
                retransmit_at,
                timeout_at: Some(now + t.t64()),
                end_at: None,
                ack: None,
                owner,
            },
        );
    }

    fn in_dialog_destination(&self, c: &Call) -> SocketAddr {
        // Without DNS here: the first route's or the target's IP literal, else the peer.
        let first = c
            .route_set
            .first()
            .and_then(|r| parse_name_addr(r).ok())
            .map(|a| a.uri);
        first
            .as_deref()
            .and_then(uri_socket_addr)
            .or_else(|| uri_socket_addr(&c.remote_target))
            .unwrap_or(c.peer)
    }

    /// Builds a request inside the dialog (RFC 3261 §12.2.1.1, loose routing).
    fn in_dialog_request(
        &mut self,
        call: CallHandle,
        method: Method,
        extra: &[(String, String)],
        body: &[u8],
    ) -> Result<(String, Vec<u8>, SocketAddr, Transport)> {
        let branch = self.new_branch();
        let local_addr = self.config.local_addr;
        let c = self
            .calls
            .get_mut(&call)
            .ok_or(Error::UnknownCall(call.0))?;
        if method != Method::Ack {
            c.local_cseq += 1;
        }
        let cseq = if method == Method::Ack {
            c.invite_cseq
        } else {
            c.local_cseq
        };
        if method == Method::Invite {
            c.invite_cseq = cseq;
        }
        let remote_tag = c
            .remote_tag
            .clone()
            .map(|t| format!(";tag={t}"))
            .unwrap_or_default();
        let (from, to) = (
            format!("{};tag={}", c.local_party, c.local_tag),
            format!("{}{remote_tag}", c.remote_party),
        );
        let mut headers = vec![
            h(
                "Via",
                format!(
                    "SIP/2.0/{} {local_addr};branch={branch};rport",
                    c.transport.via_token()
                ),
            ),
            h("Max-Forwards", "70"),
            h("From", from),
            h("To", to),
            h("Call-ID", c.call_id.clone()),
            h("CSeq", format!("{cseq} {method}")),
        ];
        for r in &c.route_set {
            headers.push(h("Route", r.clone()));
        }
        headers.extend(extra.iter().cloned());
        let bytes = build::request(&method, &c.remote_target, &headers, body)?;
        let c = self.calls.get(&call).ok_or(Error::UnknownCall(call.0))?;
        Ok((branch, bytes, self.in_dialog_destination(c), c.transport))
    }

    fn send_ack(&mut self, call: CallHandle, resp: &Message) {
        let cseq = resp.cseq().0;
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        let saved = c.invite_cseq;
        c.invite_cseq = cseq;
        if let Ok((_, bytes, dest, transport)) = self.in_dialog_request(call, Method::Ack, &[], b"")
        {
            self.send(dest, transport, bytes.clone());
            if let Some(c) = self.calls.get_mut(&call) {
                c.last_ack = Some((cseq, bytes));
                c.invite_cseq = saved.max(cseq);
            }
        }
    }
}
