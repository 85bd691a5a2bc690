//! Blind transfer (RFC 3515): the REFER we send inside a call, what its final response means, and
//! the NOTIFYs of the implicit subscription it creates (RFC 6665), which report how the transfer
//! goes with a `message/sipfrag` status line.
//!
//! One REFER at a time per call, and one subscription remembered: a later REFER replaces the
//! subscription of the earlier one, whose NOTIFYs are then answered 481 (which ends it at the
//! peer, RFC 6665 §4.1.3).

use std::time::Instant;

use crate::build::h;
use crate::error::{Error, Result};
use crate::message::{
    is_valid_sip_uri, parse_token_params, sipfrag_status, uri_scheme, Message, Method,
};

use super::transaction::{Owner, ServerKey};
use super::{CallHandle, Endpoint, Event};

/// The event package of REFER's subscription (RFC 3515 §2.4.4).
const REFER_PACKAGE: &str = "refer";
/// The body type of its NOTIFYs (RFC 3515 §2.4.5).
const SIPFRAG: &str = "message/sipfrag";

/// Our latest REFER in a call and the subscription it made.
#[derive(Debug)]
pub(super) struct Referral {
    /// The REFER's CSeq number, which its NOTIFYs may name as `Event: refer;id=<n>` (RFC 3515
    /// §2.4.6).
    pub(super) cseq: u32,
    /// No final response to the REFER yet.
    pending: bool,
    /// A NOTIFY said `Subscription-State: terminated` (possibly before the REFER's 2xx, which
    /// RFC 3515 §2.4.5 allows).
    terminated: bool,
}

/// What may stand between the angle brackets of Refer-To and Referred-By: a `sip:`/`sips:` URI
/// we could send to ourselves (a `?Replaces=` header included), or a `tel:` URI, with nothing
/// that could end the header early.
fn is_referable_uri(uri: &str) -> bool {
    is_valid_sip_uri(uri)
        || (uri_scheme(uri).is_some_and(|s| s.eq_ignore_ascii_case("tel"))
            && !uri.contains(|c: char| c.is_whitespace() || c.is_control() || "<>\"".contains(c)))
}

impl Endpoint {
    /// Asks the peer to transfer itself to `refer_to` (blind transfer, RFC 3515): sends a REFER
    /// in the call's dialog with `Refer-To: <refer_to>` and, when given, `Referred-By:
    /// <referred_by>` (`sip:`, `sips:` or `tel:` URIs). [`Event::ReferResponse`] follows with
    /// the final response, and [`Event::ReferProgress`] for every NOTIFY the peer sends about
    /// the transfer (these may come first). The call itself goes on until someone hangs up;
    /// after a successful transfer the peer usually sends BYE.
    ///
    /// Errors: [`Error::InvalidUri`] for a URI that is not one of those,
    /// [`Error::UnknownCall`], and [`Error::InvalidState`] unless the call is established with
    /// no REFER of ours waiting for its final response.
    pub fn refer(
        &mut self,
        call: CallHandle,
        refer_to: &str,
        referred_by: Option<&str>,
        now: Instant,
    ) -> Result<()> {
        if let Some(bad) = std::iter::once(refer_to)
            .chain(referred_by)
            .find(|u| !is_referable_uri(u))
        {
            return Err(Error::InvalidUri(bad.to_string()));
        }
        let c = self.call_mut(call)?;
        let transferring = c.referral.as_ref().is_some_and(|r| r.pending);
        c.ready_for("transfer", transferring, "already transferring")?;
        let transport = c.transport;
        let mut extra = vec![h("Refer-To", format!("<{refer_to}>"))];
        if let Some(by) = referred_by {
            extra.push(h("Referred-By", format!("<{by}>")));
        }
        // RFC 6665 §4.1.1: a request that creates a subscription carries a Contact.
        extra.push(h("Contact", self.contact(transport)));
        let (branch, bytes, dest, transport) =
            self.in_dialog_request(call, Method::Refer, &extra, b"")?;
        let c = self.call_mut(call)?;
        c.referral = Some(Referral {
            cseq: c.local_cseq,
            pending: true,
            terminated: false,
        });
        self.start_client_tx(
            branch,
            Method::Refer,
            bytes,
            dest,
            transport,
            Owner::Refer(call),
            now,
        );
        Ok(())
    }

    /// The result of our REFER (`code` 408 when none came).
    pub(super) fn on_refer_result(&mut self, call: CallHandle, code: u16, now: Instant) {
        if code < 200 {
            return;
        }
        // A call that ended meanwhile has no handle left to report on.
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        match &mut c.referral {
            // Accepted: the subscription lives on until a NOTIFY ends it (unless one already did).
            Some(r) if (200..300).contains(&code) && !r.terminated => r.pending = false,
            // Refused, or accepted with its last NOTIFY already in: nothing more to expect.
            _ => c.referral = None,
        }
        self.events
            .push_back(Event::ReferResponse { call, status: code });
        self.end_if_dialog_gone(call, code, now);
    }

    /// A NOTIFY in a call's dialog (RFC 6665 §4.1.3): the progress of our REFER when it names
    /// the `refer` package and our subscription, with a `message/sipfrag` body.
    pub(super) fn on_notify(
        &mut self,
        call: CallHandle,
        key: &ServerKey,
        msg: &Message,
        now: Instant,
    ) {
        let Some((package, params)) = msg.header("Event").and_then(parse_token_params) else {
            let w = self.warning("missing or unreadable Event header");
            self.respond(key, 400, &[w], b"", now);
            return;
        };
        if !package.eq_ignore_ascii_case(REFER_PACKAGE) {
            // RFC 6665 §8.3.1: a package we do not know gets 489 with those we do.
            self.respond(key, 489, &[h("Allow-Events", REFER_PACKAGE)], b"", now);
            return;
        }
        let id = params
            .iter()
            .find(|(n, _)| n == "id")
            .and_then(|(_, v)| v.as_deref());
        // Without an id the NOTIFY names the dialog's only subscription, which is ours.
        let ours = self
            .calls
            .get(&call)
            .and_then(|c| c.referral.as_ref())
            .is_some_and(|r| {
                !r.terminated && id.is_none_or(|id| id.parse::<u32>().ok() == Some(r.cseq))
            });
        if !ours {
            // RFC 6665 §4.1.3: no such subscription.
            self.respond(key, 481, &[], b"", now);
            return;
        }
        if !msg.body.is_empty() && msg.content_type().as_deref() != Some(SIPFRAG) {
            self.respond(key, 415, &[h("Accept", SIPFRAG)], b"", now);
            return;
        }
        let Some(status) = sipfrag_status(&msg.body) else {
            self.stats.count_unreadable_body();
            let w = self.warning("body is not a message/sipfrag status line");
            self.respond(key, 400, &[w], b"", now);
            return;
        };
        let terminated = msg
            .header("Subscription-State")
            .and_then(parse_token_params)
            .is_some_and(|(state, _)| state.eq_ignore_ascii_case("terminated"));
        if let (true, Some(c)) = (terminated, self.calls.get_mut(&call)) {
            match &mut c.referral {
                // Until its final response the REFER is still outstanding: no second one yet.
                Some(r) if r.pending => r.terminated = true,
                _ => c.referral = None,
            }
        }
        self.respond(key, 200, &[], b"", now);
        self.events.push_back(Event::ReferProgress {
            call,
            status,
            terminated,
        });
    }
}
