//! The user agent core: transactions (RFC 3261 §17), dialogs (§12), calls (§13–§15), session
//! timers (RFC 4028), sans-IO.
//!
//! Feed it what arrived with [`Endpoint::handle_datagram`] / [`Endpoint::handle_message`], the
//! time with [`Endpoint::handle_timeout`], and commands; drain [`Endpoint::poll_transmit`] and
//! [`Endpoint::poll_event`] until both are empty, then sleep until [`Endpoint::poll_timeout`].
//!
//! The code is split by concern, each module adding methods to [`Endpoint`]:
//!
//! - `config` and `event`: the public types (configuration, handles, events, what to send);
//! - `transaction`: server and client transactions and their timers (RFC 3261 §17);
//! - `dialog`: call and dialog state, in-dialog requests, session timers (RFC 4028);
//! - `uas`: requests the peer sends us and our answers to them (INVITE, CANCEL, ACK, re-INVITE,
//!   UPDATE, INFO, OPTIONS, BYE, NOTIFY);
//! - `uac`: requests we originate (INVITE, CANCEL, BYE, re-INVITE, OPTIONS, INFO, ACK) and what
//!   their responses mean for the call;
//! - `refer`: blind transfer (RFC 3515): the REFER we send, its result, and the NOTIFYs that
//!   report the transfer's progress;
//! - `auth`: digest authentication (RFC 3261 §22): challenges to our requests answered, new
//!   INVITEs challenged;
//! - `register`: registrations with a registrar (RFC 3261 §10);
//! - `dtmf`: DTMF bodies of SIP INFO;
//! - `stateless`: stateless responses for requests the application keeps from the endpoint;
//! - `stats`: the endpoint's counters ([`EndpointStats`]), which the application records.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::build::{self, h};
use crate::message::{parse_message, Framing, Method, ParseError, MAGIC_COOKIE};

mod auth;
mod config;
mod dialog;
mod dtmf;
mod event;
mod refer;
mod register;
mod stateless;
mod stats;
mod transaction;
mod uac;
mod uas;

pub use config::{Config, Timers, Transport, TrustedPeer, NONCE_LIFETIME};
pub use event::{
    CallHandle, CallParams, EndReason, Event, IncomingCall, RegistrationHandle, RequestHandle,
    Transmit,
};
pub use register::RegistrationParams;
pub use stateless::{stateless_response, stateless_response_with_headers, warning_header};
pub use stats::{EndpointStats, MessageCounts, MessageKind};

use dialog::{session_interval, Call, DialogMatch};
use register::Registration;
use stats::Direction;
use transaction::{ClientState, ClientTx, ServerKey, ServerState, ServerTx};

/// Methods this UA serves (RFC 3261 §20.5 Allow).
const ALLOW: &str = "INVITE, ACK, BYE, CANCEL, OPTIONS, UPDATE, INFO, NOTIFY";
/// Option tags we support (RFC 3261 §20.37).
const SUPPORTED: &str = "timer";

/// The transaction budgets of [`crate::Limits`]: a new request takes a server transaction from
/// one of them, and when that one is full it is answered 503 statelessly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    /// Requests outside a live dialog ([`crate::Limits::max_transactions`]).
    OutOfDialog,
    /// Requests of live dialogs and CANCELs of INVITE transactions we hold
    /// ([`crate::Limits::max_in_dialog_transactions`]).
    InDialog,
}

impl Budget {
    /// `out_of_dialog` or `in_dialog`: the `budget` label of `ontime_sip_budget_exhausted_total`.
    pub fn label(self) -> &'static str {
        match self {
            Budget::OutOfDialog => "out_of_dialog",
            Budget::InDialog => "in_dialog",
        }
    }

    fn index(self) -> usize {
        match self {
            Budget::OutOfDialog => 0,
            Budget::InDialog => 1,
        }
    }
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
    /// Counted since start.
    stats: EndpointStats,
    /// `stats` as [`Endpoint::poll_stats`] last handed it out.
    stats_reported: EndpointStats,
    /// Server transactions held, by [`Budget::index`].
    budget_in_use: [usize; 2],
    /// When each budget last became full (cleared once it is back to 90 % or less).
    exhausted_since: [Option<Instant>; 2],
    /// Extra headers of our OPTIONS answers (e.g. a load report a front door reads).
    options_headers: Vec<(String, String)>,
    registrations: HashMap<RegistrationHandle, Registration>,
    /// The key of our nonces' HMAC ([`Config::trunk_auth`]), drawn at start.
    nonce_secret: [u8; 32],
    /// The time our nonces count from: the first one's.
    nonce_epoch: Option<Instant>,
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
        let mut rng = match config.rng_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        let nonce_secret = rng.random();
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
            stats: EndpointStats::default(),
            stats_reported: EndpointStats::default(),
            budget_in_use: [0; 2],
            exhausted_since: [None; 2],
            options_headers: Vec::new(),
            registrations: HashMap::new(),
            nonce_secret,
            nonce_epoch: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Extra headers every OPTIONS answer carries from now on (200 or 503), e.g. how many
    /// more calls this endpoint takes, for a dispatcher that probes with OPTIONS.
    pub fn set_options_headers(&mut self, headers: Vec<(String, String)>) {
        self.options_headers = headers;
    }

    /// Whether OPTIONS are answered 200 (accepting) or 503 (full or draining: a
    /// dispatcher that pings with OPTIONS then takes this instance out of its set).
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

    /// Transactions whose outcome a peer or we still wait for: our requests without a final
    /// response, the peer's requests not answered yet, and an INVITE refused whose ACK has not
    /// come (we resend the refusal until it does). Every other transaction only absorbs
    /// retransmissions of what is settled (Timers D, I, J, K and L, up to 64·T1 on UDP): a
    /// process that is leaving waits for these, not for those, and a retransmission meeting
    /// its closed port is one whose answer was already sent.
    pub fn unsettled_transactions(&self) -> usize {
        let client = self
            .client
            .values()
            .filter(|tx| matches!(tx.state, ClientState::Calling | ClientState::Proceeding))
            .count();
        let server = self
            .server
            .values()
            .filter(|tx| match tx.state {
                ServerState::Proceeding => true,
                ServerState::Completed => tx.method == Method::Invite,
                ServerState::Confirmed | ServerState::Accepted => false,
            })
            .count();
        client + server
    }

    /// Server transactions held in `budget` (at most its limit in [`crate::Limits`]).
    pub fn transactions_in_budget(&self, budget: Budget) -> usize {
        self.budget_in_use[budget.index()]
    }

    /// Since when a transaction budget has been full: the `now` of the first request refused
    /// (503) for a full budget, `None` again once every budget that was full is back to 90 % of
    /// its limit or less. For a readiness check: an instance whose budget has been exhausted for
    /// a while is flooded or stuck. The earliest of both budgets.
    pub fn budget_exhausted_since(&self) -> Option<Instant> {
        self.exhausted_since.iter().flatten().min().copied()
    }

    fn budget_limit(&self, budget: Budget) -> usize {
        match budget {
            Budget::OutOfDialog => self.config.limits.max_transactions,
            Budget::InDialog => self.config.limits.max_in_dialog_transactions,
        }
    }

    /// Whether `budget` has room for one more transaction; when not, counts and remembers it.
    pub(super) fn take_budget(&mut self, budget: Budget, now: Instant) -> bool {
        let i = budget.index();
        if self.budget_in_use[i] < self.budget_limit(budget) {
            self.budget_in_use[i] += 1;
            return true;
        }
        self.stats.count_budget_exhausted(budget);
        self.exhausted_since[i].get_or_insert(now);
        false
    }

    /// Gives a transaction's place back to its budget.
    pub(super) fn release_budget(&mut self, budget: Budget) {
        let i = budget.index();
        self.budget_in_use[i] = self.budget_in_use[i].saturating_sub(1);
        let limit = self.budget_limit(budget);
        if self.budget_in_use[i].saturating_mul(10) <= limit.saturating_mul(9) {
            self.exhausted_since[i] = None;
        }
    }

    /// Messages that could not be parsed (answered 400 or dropped) since start, and NOTIFYs of
    /// our REFER whose `message/sipfrag` body could not be (answered 400): the number in
    /// `ontime_sip_invalid_messages_total`.
    pub fn invalid_messages(&self) -> u64 {
        self.stats.invalid_messages
    }

    /// Everything counted since [`Endpoint::new`]: messages in and out, unreadable ones, refused
    /// in-dialog requests, full budgets, digest challenges, registrations.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// What was counted since the last call (since [`Endpoint::new`] for the first), or `None`
    /// when nothing was. For an application that adds the increments to its own counters (the
    /// gateway's Prometheus series): call it after draining [`Endpoint::poll_transmit`], which
    /// counts what it hands out.
    pub fn poll_stats(&mut self) -> Option<EndpointStats> {
        let delta = self.stats.since(&self.stats_reported);
        self.stats_reported = self.stats;
        (!delta.is_zero()).then_some(delta)
    }

    /// The Call-ID of a live call.
    pub fn call_id(&self, call: CallHandle) -> Option<&str> {
        self.calls.get(&call).map(|c| c.call_id.as_str())
    }

    /// The next message to send. Every message handed out here counts in
    /// [`EndpointStats::messages_out`], retransmissions included.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let transmit = self.transmits.pop_front()?;
        self.stats.count_message(
            MessageKind::of_start_line(&transmit.payload),
            Direction::Out,
        );
        Some(transmit)
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
        let regs = self
            .registrations
            .values()
            .filter_map(Registration::deadline);
        tx.chain(stx).chain(calls).chain(regs).min()
    }

    pub(super) fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub(super) fn random_token(&mut self) -> String {
        format!("{:016x}", self.rng.random::<u64>())
    }

    pub(super) fn new_branch(&mut self) -> String {
        format!("{MAGIC_COOKIE}{}", self.random_token())
    }

    pub(super) fn send(&mut self, destination: SocketAddr, transport: Transport, payload: Vec<u8>) {
        if let Some(line) = payload.split(|b| *b == b'\r').next() {
            tracing::trace!(%destination, line = %String::from_utf8_lossy(line), "sip send");
        }
        self.transmits.push_back(Transmit {
            destination,
            transport,
            payload,
        });
    }

    /// `User-Agent`/`Server` with the configured product, if one is configured.
    pub(super) fn product_header(&self, name: &str) -> Option<(String, String)> {
        self.config
            .user_agent
            .as_ref()
            .map(|ua| h(name, ua.clone()))
    }

    /// `Warning: 399 <our address> "<text>"` (RFC 3261 §20.43): why a request was refused, for
    /// the peer's logs.
    pub(super) fn warning(&self, text: &str) -> (String, String) {
        self.warning_header(399, text)
    }

    /// A `Warning` header (RFC 3261 §20.43) with our address as the agent, for the headers of
    /// [`Endpoint::reject`], [`Endpoint::reject_update_with_headers`] or
    /// [`stateless_response_with_headers`]: e.g. `warning_header(305, "SRTP required")` with a
    /// 488 gives `Warning: 305 192.0.2.1:5060 "SRTP required"`. `code` is a 3xx warning code
    /// (300..=399; anything else becomes 399, miscellaneous); the text is quoted safely.
    pub fn warning_header(&self, code: u16, text: &str) -> (String, String) {
        warning_header(code, &self.config.local_addr.to_string(), text)
    }

    pub(super) fn contact(&self, transport: Transport) -> String {
        let t = match transport {
            Transport::Udp => "",
            Transport::Tcp => ";transport=tcp",
            Transport::Tls => ";transport=tls",
        };
        format!(
            "<sip:{}@{}{t}>",
            self.config.user,
            self.config.addr_for(transport)
        )
    }

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
            Transport::Tcp | Transport::Tls => Framing::Stream,
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
                self.stats
                    .count_message(MessageKind::of_message(&msg), Direction::In);
                if msg.method().is_some() {
                    let in_live_dialog =
                        matches!(self.match_dialog(&msg, source), DialogMatch::Found(_));
                    self.on_request(msg, source, transport, in_live_dialog, now);
                } else {
                    self.on_response(msg, now);
                }
            }
            Err(e) => {
                self.stats.count_invalid(bytes);
                tracing::debug!(%source, reason = %e.reason, "invalid SIP message");
                self.answer_invalid(e, source, transport);
            }
        }
    }

    /// RFC 3261 §8.2 / §16.3: a request we cannot read gets 400 (or 505...) with the reason in a
    /// Warning, when enough of it is readable to address a response.
    fn answer_invalid(&mut self, mut e: ParseError, source: SocketAddr, transport: Transport) {
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
        let warning = self.warning(&reason);
        let tag = self.random_token();
        build::stamp_top_via(&mut e.headers, source);
        let bytes = build::response(&e.headers, status, Some(&tag), &[warning], b"");
        self.send(destination, transport, bytes);
    }

    /// Fires every timer due at `now`: retransmissions (A, E, G, 2xx), timeouts (B, F, H, and
    /// the 2xx give-up), waits (D, I, J, K, L, M) and session timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.transaction_timeouts(now);
        self.call_timeouts(now);
        self.registration_timeouts(now);
    }
}
