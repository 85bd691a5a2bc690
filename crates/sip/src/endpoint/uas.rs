//! The UAS side: requests the peer sends us (a new INVITE, CANCEL, the ACK of our 2xx, and inside
//! a dialog BYE, OPTIONS, INFO, re-INVITE, UPDATE and NOTIFY, the last read in `refer`) and the
//! application's answers to them (ring, answer, reject, answer or reject an update).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::Rng;

use crate::build::{h, HeaderList};
use crate::error::{Error, Result};
use crate::message::{is_sip_uri, uri_scheme, Message, Method};
use crate::sdp::SessionDescription;

use super::dialog::{
    parse_session_expires, sdp_body, session_interval, Call, CallState, DialogMatch, Pending2xx,
};
use super::dtmf::parse_dtmf;
use super::stats::Refusal;
use super::transaction::{invite_key, ServerKey};
use super::{CallHandle, EndReason, Endpoint, Event, IncomingCall, Transport, ALLOW, SUPPORTED};

impl Endpoint {
    /// A request that opened a new server transaction: CANCEL, checks every request must pass
    /// (RFC 3261 §8.2), then dispatch by method and dialog.
    pub(super) fn on_new_request(
        &mut self,
        key: ServerKey,
        msg: Message,
        method: Method,
        source: SocketAddr,
        transport: Transport,
        now: Instant,
    ) {
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
            let extra = [
                h("Unsupported", unsupported.join(", ")),
                self.warning(&format!(
                    "unsupported extension: {}",
                    unsupported.join(", ")
                )),
            ];
            self.respond(&key, 420, &extra, b"", now);
            return;
        }
        let to_tag = msg.to().and_then(|t| t.tag().map(str::to_string));
        match (&method, to_tag) {
            (Method::Invite, None) => self.on_new_invite(key, msg, source, transport, now),
            (Method::Options, None) => self.on_options(&key, now),
            (
                Method::Invite
                | Method::Update
                | Method::Info
                | Method::Bye
                | Method::Options
                | Method::Notify,
                Some(_),
            ) => match self.match_dialog(&msg, source) {
                DialogMatch::Found(call) => self.on_in_dialog(call, key, msg, now),
                DialogMatch::None => self.respond(&key, 481, &[], b"", now),
                // RFC 3261 §12.2.2: not the peer's dialog, so no such dialog.
                DialogMatch::WrongTag => {
                    self.stats.count_refused(Refusal::WrongTag);
                    self.respond(&key, 481, &[], b"", now);
                }
                DialogMatch::WrongSource => {
                    self.stats.count_refused(Refusal::WrongSource);
                    tracing::debug!(%source, call_id = msg.call_id(), "in-dialog request from an untrusted source");
                    self.respond(&key, 403, &[], b"", now);
                }
            },
            // RFC 6665 §4.1.3: a NOTIFY that matches no subscription gets 481 too.
            (Method::Bye | Method::Update | Method::Info | Method::Notify, None) => {
                self.respond(&key, 481, &[], b"", now)
            }
            (Method::Extension(_), _) => self.respond(&key, 501, &[h("Allow", ALLOW)], b"", now),
            _ => self.respond(&key, 405, &[h("Allow", ALLOW)], b"", now),
        }
    }

    fn capability_headers(&self) -> HeaderList {
        let mut headers = vec![
            h("Allow", ALLOW),
            h("Accept", "application/sdp"),
            h("Supported", SUPPORTED),
        ];
        headers.extend(self.product_header("Server"));
        headers
    }

    fn on_options(&mut self, key: &ServerKey, now: Instant) {
        let code = if self.accepting { 200 } else { 503 };
        let mut extra = self.capability_headers();
        extra.extend(self.options_headers.iter().cloned());
        self.respond(key, code, &extra, b"", now);
    }

    fn on_new_invite(
        &mut self,
        key: ServerKey,
        msg: Message,
        source: SocketAddr,
        transport: Transport,
        now: Instant,
    ) {
        // RFC 3261 §22.4: a trunk that must authenticate does so before anything else.
        if !self.admit_invite(&key, &msg, source, now) {
            return;
        }
        // RFC 3261 §8.2.3: content we cannot read gets 415 with what we accept.
        if !msg.body.is_empty() && msg.content_type().as_deref() != Some("application/sdp") {
            let extra = [
                h("Accept", "application/sdp"),
                self.warning_header(304, "only application/sdp bodies are accepted"),
            ];
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
                let warning = self.warning(&e.to_string());
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
                let w = self.warning("bad Session-Expires");
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
                referral: None,
                auth: Default::default(),
                invite_auth: Vec::new(),
                late_offer: offer.is_none(),
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
                transport,
                offer,
                headers: msg.headers.clone(),
            })));
    }

    fn on_cancel(&mut self, key: &ServerKey, now: Instant) {
        // RFC 3261 §9.2: the CANCEL matches the INVITE's server transaction by everything but
        // the method.
        let invite_key = invite_key(key);
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

    pub(super) fn on_dialog_ack(&mut self, msg: &Message, source: SocketAddr, now: Instant) {
        let call = match self.match_dialog(msg, source) {
            DialogMatch::Found(call) => call,
            DialogMatch::None => return,
            DialogMatch::WrongTag => return self.stats.count_refused(Refusal::WrongTag),
            DialogMatch::WrongSource => return self.stats.count_refused(Refusal::WrongSource),
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
        if !first {
            return;
        }
        if c.late_offer {
            // RFC 3264 §5 / RFC 3261 §13.2.1: our 2xx carried the offer, so the ACK carries the
            // answer; without one there is no session, and §13.3.1.4 says to end the dialog.
            match sdp_body(msg) {
                Some(Ok(answer)) => {
                    self.note_remote_sdp(call, Some(&answer));
                    self.events.push_back(Event::AckAnswer { call, answer });
                }
                _ => {
                    tracing::debug!(
                        call_id = msg.call_id(),
                        "ACK without an answer to our offer"
                    );
                    self.hangup_inner(call, now, EndReason::AckWithoutAnswer);
                    return;
                }
            }
        }
        self.events.push_back(Event::Established { call });
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
                            let w = self.warning("unreadable DTMF body");
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
            Method::Notify => self.on_notify(call, &key, &msg, now),
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
                let w = self.warning(&e.to_string());
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
    ///
    /// Late offer: when the INVITE had no SDP ([`IncomingCall::offer`] is `None`), `answer` is
    /// our *offer* (e.g. [`crate::sdp::build_offer`]) and the caller's answer comes in the ACK:
    /// [`Event::AckAnswer`], then [`Event::Established`] (RFC 3261 §13.2.1, RFC 3264). An ACK
    /// without a usable answer ends the call with BYE and [`EndReason::AckWithoutAnswer`].
    pub fn answer(
        &mut self,
        call: CallHandle,
        answer: &SessionDescription,
        now: Instant,
    ) -> Result<()> {
        let transport = self.call_mut(call)?.transport;
        let contact = self.contact(transport);
        let server_header = self.product_header("Server");
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
        ];
        extra.extend(server_header);
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
    /// `("Retry-After", "30")` with 503, so that a full or draining instance tells the caller's
    /// proxy when to try again). The call ends with [`EndReason::Rejected`].
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
        self.reject_update_with_headers(call, status, &[], now)
    }

    /// [`Endpoint::reject_update`] with extra headers, e.g. an
    /// [`Endpoint::warning_header`] saying why (`305`, "no common codec").
    pub fn reject_update_with_headers(
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
        let key = c.pending_offer.take().ok_or(Error::InvalidState {
            action: "reject an update of",
            state: "without an offer pending",
        })?;
        self.respond(&key, status, headers, b"", now);
        Ok(())
    }
}
