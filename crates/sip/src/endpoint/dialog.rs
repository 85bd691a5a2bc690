//! Call and dialog state (RFC 3261 §12): the dialog's parties, route set, target and CSeq, the
//! requests we build inside it, the 2xx retransmission and the session timer (RFC 4028).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::build::{self, h, HeaderList};
use crate::error::{Error, Result};
use crate::message::{parse_name_addr, uri_socket_addr, Message, Method};
use crate::sdp::SessionDescription;

use super::auth::AuthCache;
use super::refer::Referral;
use super::transaction::ServerKey;
use super::{CallHandle, EndReason, Endpoint, Event, Transport};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallState {
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
    pub(super) fn name(self) -> &'static str {
        match self {
            CallState::Incoming => "ringing in",
            CallState::Outgoing => "ringing out",
            CallState::Established => "established",
            CallState::Terminating => "hanging up",
        }
    }
}

#[derive(Debug)]
pub(super) struct Pending2xx {
    pub(super) response: Vec<u8>,
    /// Where the INVITE's responses go (RFC 3261 §18.2.2).
    pub(super) destination: SocketAddr,
    pub(super) transport: Transport,
    pub(super) cseq: u32,
    pub(super) interval: Duration,
    pub(super) next_at: Instant,
    pub(super) give_up_at: Instant,
}

#[derive(Debug)]
pub(super) struct SessionTimer {
    pub(super) we_refresh: bool,
    /// When we refresh (we_refresh) or give up (peer refreshes).
    pub(super) fire_at: Instant,
}

#[derive(Debug)]
pub(super) struct Call {
    pub(super) state: CallState,
    pub(super) is_uas: bool,
    pub(super) call_id: String,
    pub(super) local_tag: String,
    pub(super) remote_tag: Option<String>,
    /// From of our requests (URI with params except tag, wrapped in <>).
    pub(super) local_party: String,
    /// To of our requests (without tag).
    pub(super) remote_party: String,
    pub(super) local_cseq: u32,
    pub(super) remote_cseq: Option<u32>,
    pub(super) route_set: Vec<String>,
    pub(super) remote_target: String,
    pub(super) peer: SocketAddr,
    pub(super) transport: Transport,
    /// UAS: the INVITE's server transaction; UAC: the INVITE's branch.
    pub(super) invite_server: Option<ServerKey>,
    pub(super) invite_branch: Option<String>,
    pub(super) invite_request: Option<Vec<u8>>,
    pub(super) invite_cseq: u32,
    pub(super) pending_2xx: Option<Pending2xx>,
    pub(super) last_ack: Option<(u32, Vec<u8>)>,
    /// An incoming re-INVITE/UPDATE waiting for the application's answer.
    pub(super) pending_offer: Option<ServerKey>,
    pub(super) reinvite_in_progress: bool,
    pub(super) cancel_wanted: bool,
    pub(super) got_provisional: bool,
    pub(super) session_timer: Option<SessionTimer>,
    pub(super) local_sdp: Option<Vec<u8>>,
    pub(super) remote_sdp_version: Option<u64>,
    /// Session-Expires we put in our 2xx (UAS).
    pub(super) granted_session: Option<(Duration, bool)>,
    /// UAS: the initial 2xx was acknowledged.
    pub(super) acked: bool,
    /// The peer listed `timer` in Supported (RFC 4028 §9: only then may we Require it).
    pub(super) peer_supports_timer: bool,
    /// Our latest REFER and the subscription it made.
    pub(super) referral: Option<Referral>,
    /// The digest challenges our requests in this dialog answer (RFC 3261 §22.3).
    pub(super) auth: AuthCache,
    /// The credentials of our latest INVITE, which the ACK of its 2xx repeats (RFC 3261
    /// §13.2.2.4: the ACK carries the INVITE's credentials).
    pub(super) invite_auth: HeaderList,
    /// UAS: the INVITE had no SDP, so our 2xx carries the offer and the ACK the answer (RFC
    /// 3261 §13.2.1).
    pub(super) late_offer: bool,
}

impl Call {
    /// Whether our INVITE may go out again (answering a digest challenge): it is still ringing
    /// out and the application has not cancelled it. Asked by `auth`, which knows no call state.
    pub(super) fn may_resend_invite(&self) -> bool {
        !self.cancel_wanted && self.state == CallState::Outgoing
    }

    /// What a command inside the call needs: the call established and not `busy` with an earlier
    /// command, else [`Error::InvalidState`] naming `busy_state` or the call's state.
    pub(super) fn ready_for(
        &self,
        action: &'static str,
        busy: bool,
        busy_state: &'static str,
    ) -> Result<()> {
        match (self.state, busy) {
            (CallState::Established, false) => Ok(()),
            (CallState::Established, true) => Err(Error::InvalidState {
                action,
                state: busy_state,
            }),
            (state, _) => Err(Error::InvalidState {
                action,
                state: state.name(),
            }),
        }
    }
}

/// Longest session interval we honour (RFC 4028 sets no ceiling; a day keeps `Instant`
/// arithmetic far from overflow whatever a peer writes).
const MAX_SESSION_INTERVAL_SECS: u64 = 86_400;

pub(super) fn session_interval(secs: u64) -> Duration {
    Duration::from_secs(secs.min(MAX_SESSION_INTERVAL_SECS))
}

/// Parses `Session-Expires: 1800;refresher=uac` (RFC 4028 §4).
pub(super) fn parse_session_expires(v: &str) -> Option<(u64, Option<String>)> {
    let mut parts = v.split(';');
    let secs = parts.next()?.trim().parse::<u64>().ok()?;
    let refresher = parts
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("refresher"))
        .map(|(_, v)| v.trim().to_ascii_lowercase());
    Some((secs, refresher))
}

pub(super) fn sdp_body(msg: &Message) -> Option<std::result::Result<SessionDescription, Error>> {
    if msg.body.is_empty() {
        return None;
    }
    match msg.content_type().as_deref() {
        Some("application/sdp") => Some(SessionDescription::parse(&msg.body)),
        _ => Some(Err(Error::Sdp("body is not application/sdp".into()))),
    }
}

/// What an in-dialog request (one with a To tag) names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DialogMatch {
    /// No live dialog has this Call-ID and our To tag.
    None,
    /// A live dialog has this Call-ID and our To tag, but the From tag is not the peer's.
    WrongTag,
    /// Call-ID and both tags match, but the source is not one the dialog trusts.
    WrongSource,
    /// The request belongs to this call.
    Found(CallHandle),
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

impl Endpoint {
    /// RFC 3261 §12.2.2: the dialog of a request is named by its Call-ID, its To tag (our local
    /// tag) and its From tag (the remote tag); then the source must be one the dialog trusts.
    pub(super) fn match_dialog(&self, msg: &Message, source: SocketAddr) -> DialogMatch {
        let Some(to_tag) = msg.to().and_then(|t| t.tag().map(str::to_string)) else {
            return DialogMatch::None;
        };
        let Some(call) = self
            .dialogs
            .get(&(msg.call_id().to_string(), to_tag))
            .copied()
        else {
            return DialogMatch::None;
        };
        let Some(c) = self.calls.get(&call) else {
            return DialogMatch::None;
        };
        let from = msg.from();
        if c.remote_tag.as_deref() != from.as_ref().and_then(|f| f.tag()) {
            return DialogMatch::WrongTag;
        }
        if !self.trusts(c, source.ip()) {
            return DialogMatch::WrongSource;
        }
        DialogMatch::Found(call)
    }

    /// Whether a dialog accepts requests from `ip`: the address its INVITE came from (or went
    /// to, for a call we placed), the IP literal of its remote target or first route, or one the
    /// configuration trusts.
    fn trusts(&self, c: &Call, ip: IpAddr) -> bool {
        if same_ip(c.peer.ip(), ip) {
            return true;
        }
        let first_route = c
            .route_set
            .first()
            .and_then(|r| parse_name_addr(r).ok())
            .and_then(|a| uri_socket_addr(&a.uri));
        let target = uri_socket_addr(&c.remote_target);
        if [first_route, target]
            .into_iter()
            .flatten()
            .any(|a| same_ip(a.ip(), ip))
        {
            return true;
        }
        self.config.trusted_peer.as_ref().is_some_and(|f| f(ip))
    }

    /// Remembers the peer's SDP version, so a later offer with the same `o=` version is known
    /// to be a refresh (RFC 3264 §8).
    pub(super) fn note_remote_sdp(&mut self, call: CallHandle, sdp: Option<&SessionDescription>) {
        if let (Some(c), Some(sdp)) = (self.calls.get_mut(&call), sdp) {
            c.remote_sdp_version = Some(sdp.session_version);
        }
    }

    pub(super) fn end_call(&mut self, call: CallHandle, now: Instant, reason: EndReason) {
        if let Some(c) = self.calls.remove(&call) {
            // RFC 3261 §15.1.2: requests still pending in the dialog are answered 487.
            if let Some(key) = &c.pending_offer {
                self.respond(key, 487, &[], b"", now);
            }
            self.dialogs.remove(&(c.call_id, c.local_tag));
            self.events.push_back(Event::Ended { call, reason });
        }
    }

    /// RFC 3261 §12.2.1.2: a 481 or 408 to a request inside the dialog means the dialog is gone,
    /// so the call ends (with a BYE, in case the peer is still there). Whether it did.
    pub(super) fn end_if_dialog_gone(
        &mut self,
        call: CallHandle,
        status: u16,
        now: Instant,
    ) -> bool {
        if status != 481 && status != 408 {
            return false;
        }
        self.hangup_inner(call, now, EndReason::DialogGone { status });
        true
    }

    pub(super) fn restart_session_timer(&mut self, call: CallHandle, now: Instant) {
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

    pub(super) fn call_mut(&mut self, call: CallHandle) -> Result<&mut Call> {
        self.calls.get_mut(&call).ok_or(Error::UnknownCall(call.0))
    }

    pub(super) fn header_without_tag(&self, value: &str) -> String {
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

    pub(super) fn in_dialog_destination(&self, c: &Call) -> SocketAddr {
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
    pub(super) fn in_dialog_request(
        &mut self,
        call: CallHandle,
        method: Method,
        extra: &[(String, String)],
        body: &[u8],
    ) -> Result<(String, Vec<u8>, SocketAddr, Transport)> {
        let branch = self.new_branch();
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
                    "SIP/2.0/{} {};branch={branch};rport",
                    c.transport.via_token(),
                    self.config.addr_for(c.transport)
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
        match method {
            Method::Ack => headers.extend(c.invite_auth.iter().cloned()),
            _ => {
                let auth = c.auth.sign(
                    self.config.credentials.as_ref(),
                    &mut self.rng,
                    &method,
                    &c.remote_target,
                );
                if method == Method::Invite {
                    c.invite_auth = auth.clone();
                }
                headers.extend(auth);
            }
        }
        headers.extend(extra.iter().cloned());
        let bytes = build::request(&method, &c.remote_target, &headers, body)?;
        let c = self.calls.get(&call).ok_or(Error::UnknownCall(call.0))?;
        Ok((branch, bytes, self.in_dialog_destination(c), c.transport))
    }

    /// Fires the calls' timers due at `now`: the 2xx retransmission and its give-up (RFC 3261
    /// §13.3.1.4), and the session timer (RFC 4028 §10).
    pub(super) fn call_timeouts(&mut self, now: Instant) {
        let timers = self.config.timers;
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
}
