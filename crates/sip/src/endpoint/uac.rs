//! The UAC side: requests we originate (INVITE, CANCEL, BYE, re-INVITE, OPTIONS, INFO and the ACK
//! of a 2xx) and what the results of their client transactions mean for the call.

use std::net::SocketAddr;
use std::time::Instant;

use crate::build::{self, h, HeaderList};
use crate::error::{Error, Result};
use crate::message::{parse_message, Framing, Message, Method};
use crate::sdp::SessionDescription;

use super::dialog::{parse_session_expires, sdp_body, session_interval, Call, CallState};
use super::dtmf::is_dtmf_digit;
use super::transaction::{Owner, UNLIMITED};
use super::{
    CallHandle, CallParams, EndReason, Endpoint, Event, RequestHandle, Transport, ALLOW, SUPPORTED,
};

impl Endpoint {
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

    pub(super) fn hangup_inner(&mut self, call: CallHandle, now: Instant, reason: EndReason) {
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
        let busy = c.reinvite_in_progress || c.pending_offer.is_some();
        c.ready_for("re-INVITE", busy, "renegotiating")?;
        self.send_reinvite(call, Some(offer.to_sdp_string().into_bytes()), now)
    }

    pub(super) fn send_reinvite(
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

    /// Places a call: sends an INVITE with the offer. Events follow: [`Event::Progress`],
    /// [`Event::Answered`] (the ACK is sent for you) or [`Event::Ended`].
    pub fn place_call(&mut self, params: CallParams, now: Instant) -> Result<CallHandle> {
        if !crate::message::is_valid_sip_uri(&params.target) {
            return Err(Error::InvalidUri(params.target));
        }
        if let Some((name, _)) = params.headers.iter().find(|(n, v)| !is_addable(n, v)) {
            return Err(Error::InvalidHeader(name.clone()));
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
            self.config.addr_for(params.transport)
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
        ];
        headers.extend(self.product_header("User-Agent"));
        if let Some(se) = self.config.session_expires {
            headers.push(h("Session-Expires", se.as_secs().to_string()));
            headers.push(h("Min-SE", self.config.min_se.as_secs().to_string()));
        }
        headers.extend(params.headers.iter().cloned());
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
                referral: None,
                auth: Default::default(),
                invite_auth: Vec::new(),
                late_offer: false,
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
        let mut headers = vec![
            h(
                "Via",
                format!(
                    "SIP/2.0/{} {};branch={branch};rport",
                    transport.via_token(),
                    self.config.addr_for(transport)
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
        ];
        headers.extend(self.product_header("User-Agent"));
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

    pub(super) fn reack(&mut self, msg: &Message) {
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

    pub(super) fn on_client_result(&mut self, owner: Owner, msg: Option<&Message>, now: Instant) {
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
                    if !self.end_if_dialog_gone(call, code, now) {
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
            Owner::Refer(call) => self.on_refer_result(call, code, now),
            Owner::Register(handle) => self.on_register_result(handle, msg, code, now),
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
}

/// Headers the endpoint writes on an INVITE itself: one more of them from the application would
/// contradict ours (a second Via or Call-ID) or change where the dialog goes (Route, Contact).
const OWN_HEADERS: &[&str] = &[
    "via",
    "v",
    "max-forwards",
    "from",
    "f",
    "to",
    "t",
    "call-id",
    "i",
    "cseq",
    "contact",
    "m",
    "route",
    "record-route",
    "allow",
    "supported",
    "k",
    "user-agent",
    "session-expires",
    "x",
    "min-se",
    "content-type",
    "c",
    "content-length",
    "l",
    "authorization",
    "proxy-authorization",
];

/// A header the application may add to an INVITE: a token name that is not one of
/// [`OWN_HEADERS`], a value that cannot end the header early.
fn is_addable(name: &str, value: &str) -> bool {
    crate::message::is_token(name)
        && !OWN_HEADERS.iter().any(|o| o.eq_ignore_ascii_case(name))
        && !value.contains(['\r', '\n', '\0'])
}

#[cfg(test)]
mod tests {
    use super::is_addable;

    #[test]
    fn only_headers_the_endpoint_does_not_write_can_be_added() {
        assert!(is_addable("X-Campaign", "7"));
        assert!(is_addable("P-Asserted-Identity", "<sip:a@b>"));
        for (name, value) in [
            ("Via", "SIP/2.0/UDP x"),
            ("call-id", "1"),
            ("i", "1"),
            ("Route", "<sip:x>"),
            ("Content-Length", "0"),
            ("X A", "1"),
            ("", "1"),
            ("X-A", "1\r\nVia: x"),
            ("X-A", "a\0"),
        ] {
            assert!(!is_addable(name, value), "{name:?}: {value:?}");
        }
    }
}
