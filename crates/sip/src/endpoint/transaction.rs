//! The transaction layer (RFC 3261 §17): server transactions that absorb retransmitted requests
//! and retransmit our responses, client transactions that retransmit our requests and match their
//! responses, with their timers (A to M). What a transaction means for a call is decided in
//! `uas` (requests) and `uac` (results of our requests).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::build::{self, h, HeaderList};
use crate::message::{parse_message, Framing, Limits, Message, Method};

use super::{Budget, CallHandle, Endpoint, RegistrationHandle, RequestHandle, Transport};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClientState {
    Calling,
    Proceeding,
    Completed,
    Accepted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owner {
    Invite(CallHandle),
    ReInvite(CallHandle),
    Bye(CallHandle),
    Cancel(CallHandle),
    InDialog(CallHandle),
    Refer(CallHandle),
    Options(RequestHandle),
    Register(RegistrationHandle),
}

#[derive(Debug)]
pub(super) struct ClientTx {
    pub(super) method: Method,
    pub(super) request: Vec<u8>,
    pub(super) destination: SocketAddr,
    pub(super) transport: Transport,
    pub(super) state: ClientState,
    pub(super) interval: Duration,
    pub(super) retransmit_at: Option<Instant>,
    pub(super) timeout_at: Option<Instant>,
    pub(super) end_at: Option<Instant>,
    pub(super) ack: Option<Vec<u8>>,
    pub(super) owner: Owner,
    /// How many digest challenges this request already answers (0: a first attempt).
    pub(super) auth_tries: u8,
}

impl ClientTx {
    pub(super) fn deadline(&self) -> Option<Instant> {
        [self.retransmit_at, self.timeout_at, self.end_at]
            .into_iter()
            .flatten()
            .min()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ServerState {
    Proceeding,
    Completed,
    Confirmed,
    Accepted,
}

/// RFC 3261 §17.2.3 server transaction key: branch + sent-by + method (ACK matches INVITE),
/// or for RFC 2543 peers a digest of the identifying fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum ServerKey {
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
pub(super) struct ServerTx {
    pub(super) method: Method,
    pub(super) request: Message,
    pub(super) state: ServerState,
    pub(super) last_response: Option<Vec<u8>>,
    pub(super) final_code: Option<u16>,
    pub(super) destination: SocketAddr,
    pub(super) transport: Transport,
    pub(super) interval: Duration,
    pub(super) retransmit_at: Option<Instant>,
    pub(super) timeout_at: Option<Instant>,
    pub(super) end_at: Option<Instant>,
    pub(super) to_tag: String,
    /// The budget this transaction takes its place from.
    pub(super) budget: Budget,
}

impl ServerTx {
    pub(super) fn deadline(&self) -> Option<Instant> {
        [self.retransmit_at, self.timeout_at, self.end_at]
            .into_iter()
            .flatten()
            .min()
    }
}

/// RFC 3261 §9.2: the INVITE server transaction a CANCEL matches: the same key but the method.
pub(super) fn invite_key(key: &ServerKey) -> ServerKey {
    match key.clone() {
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
    }
}

fn timer_end(transport: Transport, wait: Duration, now: Instant) -> Instant {
    if transport.reliable() {
        now
    } else {
        now + wait
    }
}

/// Our own stored requests are re-read without limits.
pub(super) const UNLIMITED: Limits = Limits {
    max_message_bytes: usize::MAX,
    max_headers: usize::MAX,
    max_body_bytes: usize::MAX,
    max_transactions: usize::MAX,
    max_in_dialog_transactions: usize::MAX,
};

impl Endpoint {
    /// RFC 3261 §18.2.2 with RFC 3581: reply to the source address when `rport` is present or
    /// the transport is a stream, else to the source IP and the Via port.
    pub(super) fn response_destination(
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

    /// A request arrived: absorbs retransmissions, else opens a server transaction in its budget
    /// and hands the request to the UAS. `in_live_dialog`: whether the request belongs to a live
    /// dialog (the dialog layer's answer, which the transaction layer does not ask itself).
    pub(super) fn on_request(
        &mut self,
        msg: Message,
        source: SocketAddr,
        transport: Transport,
        in_live_dialog: bool,
        now: Instant,
    ) {
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
            self.on_dialog_ack(&msg, source, now);
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

        // The Via as the responses must echo it (RFC 3261 §18.2.1, RFC 3581 §4).
        let mut stamped = msg.clone();
        build::stamp_top_via(&mut stamped.headers, source);
        // Requests of live dialogs (and CANCELs of INVITE transactions we hold) have a budget of their own,
        // which requests that merely name a dialog cannot take from.
        let in_dialog = if method == Method::Cancel {
            self.server.contains_key(&invite_key(&key))
        } else {
            in_live_dialog
        };
        let budget = if in_dialog {
            Budget::InDialog
        } else {
            Budget::OutOfDialog
        };
        if !self.take_budget(budget, now) {
            // Full: answer statelessly (RFC 3261 §21.5.4) rather than grow without bound.
            let tag = self.random_token();
            let bytes =
                build::response_to(&stamped, 503, Some(&tag), &[h("Retry-After", "5")], b"");
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
                request: stamped,
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
                budget,
            },
        );
        // The transaction exists; what the request means is the UAS's business.
        self.on_new_request(key, msg, method, source, transport, now);
    }

    /// Sends a response in a server transaction and moves its state (RFC 3261 §17.2).
    pub(super) fn respond(
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
        self.send(d, t, bytes);
    }

    pub(super) fn on_response(&mut self, msg: Message, now: Instant) {
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
                // A digest challenge we can answer is not the request's result: the request
                // goes again with credentials (RFC 3261 §22.2).
                if matches!(code, 401 | 407) && self.answer_challenge(&key, &msg, now) {
                    return;
                }
            }
        }
        self.on_client_result(owner, Some(&msg), now);
    }

    fn non_2xx_ack(&self, branch_key: &str, resp: &Message) -> Option<Vec<u8>> {
        let tx = self
            .client
            .get(&(branch_key.to_string(), "INVITE".to_string()))?;
        let req = parse_message(&tx.request, &UNLIMITED, Framing::Datagram).ok()?;
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_client_tx(
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
                auth_tries: 0,
            },
        );
    }

    /// Fires the transactions' timers due at `now`: retransmissions (A, E, G), timeouts (B, F,
    /// H) and the waits that end a transaction (D, I, J, K, L, M).
    pub(super) fn transaction_timeouts(&mut self, now: Instant) {
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
                let budget = tx.budget;
                self.server.remove(&key);
                self.release_budget(budget);
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
    }
}
