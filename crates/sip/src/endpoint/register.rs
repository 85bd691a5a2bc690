//! Registration with a registrar (RFC 3261 §10): REGISTER with one Call-ID and a rising CSeq per
//! registration, digest challenges answered (see `auth`), the granted expiry read from the 2xx,
//! refreshes at half of it, exponential back-off after failures, 423 answered with the
//! registrar's Min-Expires, and the unregistration (`Expires: 0`).
//!
//! No DNS here (the crate is sans-IO): the application resolves the registrar (RFC 3263: NAPTR,
//! SRV, then A/AAAA) and passes the address in [`RegistrationParams::destination`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::build::{self, h};
use crate::error::{Error, Result};
use crate::message::{is_valid_sip_uri, parse_name_addr, split_list, Message, Method};

use super::auth::AuthCache;
use super::transaction::Owner;
use super::{Endpoint, Event, RegistrationHandle, Transport, ALLOW, SUPPORTED};

/// First wait after a failed REGISTER, doubled with each failure in a row (RFC 5626 §4.5 uses
/// the same base when there is no flow to watch).
const RETRY_BASE: Duration = Duration::from_secs(30);
/// Longest wait between attempts (RFC 5626 §4.5 max-time).
const RETRY_MAX: Duration = Duration::from_secs(1800);
/// Longest expiry we ask for or honour: keeps `Instant` arithmetic far from overflow whatever
/// a registrar writes.
const MAX_EXPIRES_SECS: u64 = 86_400 * 7;

/// What to register: `contact` as a binding of `aor` at the registrar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationParams {
    /// The Request-URI of the REGISTERs (e.g. `sip:provider.example`); `None`: the domain of
    /// the AOR (RFC 3261 §10.2: the Request-URI names the domain of the registrar).
    pub registrar_uri: Option<String>,
    /// The address of record, From and To of the REGISTERs (e.g. `sip:alice@provider.example`).
    pub aor: String,
    /// The Contact URI to bind (`None`: ours, `sip:<user>@<local_addr>`).
    pub contact: Option<String>,
    /// Where to send the REGISTERs: the registrar (or outbound proxy) as resolved by the
    /// application. The endpoint does no DNS (RFC 3263 resolution is the caller's).
    pub destination: SocketAddr,
    /// Transport.
    pub transport: Transport,
    /// The expiry to ask for; the registrar may grant less (or more, up to its policy), and a
    /// 423 raises it to the registrar's Min-Expires.
    pub expires: Duration,
}

/// What a registration is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Registering, registered, or waiting to try again.
    Active,
    /// The application asked to unregister; the `Expires: 0` REGISTER goes once the one in
    /// flight (if any) has its final response (RFC 3261 §10.2: one REGISTER at a time).
    UnregisterWanted,
    /// The `Expires: 0` REGISTER is in flight.
    Unregistering,
}

#[derive(Debug)]
pub(super) struct Registration {
    registrar_uri: String,
    aor: String,
    /// The Contact URI, without angle brackets.
    contact: String,
    destination: SocketAddr,
    transport: Transport,
    /// The expiry we ask for, in seconds (raised by a 423).
    expires_secs: u64,
    call_id: String,
    from_tag: String,
    pub(super) cseq: u32,
    pub(super) auth: AuthCache,
    /// A REGISTER of ours waits for its final response.
    in_flight: bool,
    phase: Phase,
    /// When to refresh or to try again (`None` while a REGISTER is in flight).
    next_at: Option<Instant>,
    /// Failures in a row.
    failures: u32,
}

impl Registration {
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.next_at
    }
}

/// The domain URI of an AOR: `sip:alice@example.com;x=y` → `sip:example.com`.
fn domain_of(aor: &str) -> Option<String> {
    let (scheme, rest) = aor.split_once(':')?;
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = host.split([';', '?']).next()?;
    let uri = format!("{scheme}:{host}");
    is_valid_sip_uri(&uri).then_some(uri)
}

/// The expiry granted to `contact` by a 2xx (RFC 3261 §10.2.4): its Contact's `expires`
/// parameter, else the Expires header, else what we asked for.
fn granted_expiry(msg: &Message, contact: &str, asked: u64) -> u64 {
    let ours = msg
        .headers_named("Contact")
        .flat_map(split_list)
        .filter_map(|v| parse_name_addr(v).ok())
        .find(|a| same_uri(&a.uri, contact));
    let from_contact = ours.and_then(|a| {
        a.params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("expires"))
            .and_then(|(_, v)| v.as_deref()?.trim().parse::<u64>().ok())
    });
    let from_header = || msg.header("Expires")?.trim().parse::<u64>().ok();
    from_contact
        .or_else(from_header)
        .unwrap_or(asked)
        .min(MAX_EXPIRES_SECS)
}

/// URI comparison good enough to find our binding among those a registrar lists: scheme and
/// host are case-insensitive (RFC 3261 §19.1.4), the user part is not; parameters are ignored,
/// as registrars add or reorder them.
fn same_uri(a: &str, b: &str) -> bool {
    let key = |u: &str| -> (String, String) {
        let base = u.split([';', '?']).next().unwrap_or_default();
        match base.rsplit_once('@') {
            Some((user, host)) => {
                let (scheme, user) = user.split_once(':').unwrap_or(("", user));
                (
                    format!("{}:{user}", scheme.to_ascii_lowercase()),
                    host.to_ascii_lowercase(),
                )
            }
            None => (String::new(), base.to_ascii_lowercase()),
        }
    };
    key(a) == key(b)
}

/// How long to wait after `failures` failures in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_BASE.saturating_mul(1 << doublings).min(RETRY_MAX)
}

impl Endpoint {
    /// Registers `params.contact` for `params.aor` (RFC 3261 §10) and keeps it registered:
    /// sends a REGISTER now, answers digest challenges with [`crate::Config::credentials`],
    /// refreshes at half the expiry the registrar grants, and after a failure tries again
    /// after 30 s, 60 s, 120 s … up to 30 minutes (a 423 is answered at once with the
    /// registrar's Min-Expires). Events: [`Event::Registered`] after every 2xx,
    /// [`Event::RegistrationFailed`] after every failure. [`Endpoint::poll_timeout`] covers
    /// the refresh and retry timers.
    ///
    /// The endpoint does no DNS: resolve the registrar (RFC 3263) and pass its address in
    /// `params.destination`. Several bindings for one AOR are several registrations.
    ///
    /// Errors: [`Error::InvalidUri`] for an AOR, registrar or contact that is not a usable
    /// `sip:`/`sips:` URI, [`Error::Message`] for a zero expiry (that is
    /// [`Endpoint::unregister`]).
    pub fn register(
        &mut self,
        params: RegistrationParams,
        now: Instant,
    ) -> Result<RegistrationHandle> {
        if !is_valid_sip_uri(&params.aor) {
            return Err(Error::InvalidUri(params.aor));
        }
        let registrar_uri = match params.registrar_uri {
            Some(u) if is_valid_sip_uri(&u) => u,
            Some(u) => return Err(Error::InvalidUri(u)),
            None => domain_of(&params.aor).ok_or_else(|| Error::InvalidUri(params.aor.clone()))?,
        };
        let contact = match params.contact {
            Some(c) if is_valid_sip_uri(&c) => c,
            Some(c) => return Err(Error::InvalidUri(c)),
            None => self
                .contact(params.transport)
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string(),
        };
        let expires_secs = params.expires.as_secs().min(MAX_EXPIRES_SECS);
        if expires_secs == 0 {
            return Err(Error::Message(
                "a registration needs a non-zero expiry".into(),
            ));
        }
        let handle = RegistrationHandle(self.new_id());
        let call_id = format!("{}@{}", self.random_token(), self.config.local_addr.ip());
        let from_tag = self.random_token();
        self.registrations.insert(
            handle,
            Registration {
                registrar_uri,
                aor: params.aor,
                contact,
                destination: params.destination,
                transport: params.transport,
                expires_secs,
                call_id,
                from_tag,
                cseq: 0,
                auth: AuthCache::default(),
                in_flight: false,
                phase: Phase::Active,
                next_at: None,
                failures: 0,
            },
        );
        self.send_register(handle, now)?;
        Ok(handle)
    }

    /// Removes the binding of a registration (`Expires: 0`, after the REGISTER in flight, if
    /// any, has its answer). [`Event::Unregistered`] follows whatever the registrar answers;
    /// the handle is then no longer valid.
    pub fn unregister(&mut self, handle: RegistrationHandle, now: Instant) -> Result<()> {
        let r = self
            .registrations
            .get_mut(&handle)
            .ok_or(Error::UnknownRegistration(handle.0))?;
        if r.phase != Phase::Active {
            return Ok(());
        }
        r.phase = Phase::UnregisterWanted;
        if !r.in_flight {
            self.send_register(handle, now)?;
        }
        Ok(())
    }

    /// Registrations alive (from [`Endpoint::register`] to [`Event::Unregistered`]).
    pub fn active_registrations(&self) -> usize {
        self.registrations.len()
    }

    /// Sends the next REGISTER of a registration: a refresh, or the unregistration when asked.
    fn send_register(&mut self, handle: RegistrationHandle, now: Instant) -> Result<()> {
        let branch = self.new_branch();
        let user_agent = self.product_header("User-Agent");
        let r = self
            .registrations
            .get_mut(&handle)
            .ok_or(Error::UnknownRegistration(handle.0))?;
        if r.phase == Phase::UnregisterWanted {
            r.phase = Phase::Unregistering;
        }
        let expires = if r.phase == Phase::Unregistering {
            0
        } else {
            r.expires_secs
        };
        r.cseq = r.cseq.saturating_add(1);
        let mut headers = vec![
            h(
                "Via",
                format!(
                    "SIP/2.0/{} {};branch={branch};rport",
                    r.transport.via_token(),
                    self.config.addr_for(r.transport)
                ),
            ),
            h("Max-Forwards", "70"),
            h("From", format!("<{}>;tag={}", r.aor, r.from_tag)),
            h("To", format!("<{}>", r.aor)),
            h("Call-ID", r.call_id.clone()),
            h("CSeq", format!("{} REGISTER", r.cseq)),
            h("Contact", format!("<{}>", r.contact)),
            h("Expires", expires.to_string()),
            h("Allow", ALLOW),
            h("Supported", SUPPORTED),
        ];
        headers.extend(user_agent);
        let uri = r.registrar_uri.clone();
        headers.extend(r.auth.sign(
            self.config.credentials.as_ref(),
            &mut self.rng,
            &Method::Register,
            &uri,
        ));
        let bytes = build::request(&Method::Register, &uri, &headers, b"")?;
        r.in_flight = true;
        r.next_at = None;
        let (destination, transport) = (r.destination, r.transport);
        self.start_client_tx(
            branch,
            Method::Register,
            bytes,
            destination,
            transport,
            Owner::Register(handle),
            now,
        );
        Ok(())
    }

    /// The final response to a REGISTER (`code` 408 and no message on timeout).
    pub(super) fn on_register_result(
        &mut self,
        handle: RegistrationHandle,
        msg: Option<&Message>,
        code: u16,
        now: Instant,
    ) {
        if code < 200 {
            return;
        }
        let Some(r) = self.registrations.get_mut(&handle) else {
            return;
        };
        r.in_flight = false;
        self.stats.count_registration((200..300).contains(&code));
        match r.phase {
            Phase::Unregistering => {
                self.registrations.remove(&handle);
                self.events.push_back(Event::Unregistered { handle });
                return;
            }
            Phase::UnregisterWanted => {
                if self.send_register(handle, now).is_err() {
                    self.registrations.remove(&handle);
                    self.events.push_back(Event::Unregistered { handle });
                }
                return;
            }
            Phase::Active => {}
        }
        if let (200..=299, Some(m)) = (code, msg) {
            let granted = granted_expiry(m, &r.contact, r.expires_secs);
            if granted > 0 {
                r.failures = 0;
                let expires = Duration::from_secs(granted);
                // Half the granted time leaves room for a refresh that is itself challenged,
                // delayed or retransmitted.
                r.next_at = Some(now + (expires / 2).max(Duration::from_secs(1)));
                self.events.push_back(Event::Registered { handle, expires });
                return;
            }
        }
        // RFC 3261 §10.2.8: 423 names the shortest expiry the registrar accepts; ask again
        // with it at once, unless it is no longer than what we asked for.
        if code == 423 {
            let min = msg
                .and_then(|m| m.header("Min-Expires"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|m| m.min(MAX_EXPIRES_SECS));
            if let Some(min) = min.filter(|m| *m > r.expires_secs) {
                r.expires_secs = min;
                if self.send_register(handle, now).is_ok() {
                    return;
                }
            }
        }
        let Some(r) = self.registrations.get_mut(&handle) else {
            return;
        };
        r.failures = r.failures.saturating_add(1);
        let retry_in = backoff(r.failures);
        r.next_at = Some(now + retry_in);
        tracing::debug!(status = code, ?retry_in, aor = %r.aor, "REGISTER failed");
        self.events.push_back(Event::RegistrationFailed {
            handle,
            status: code,
            retry_in,
        });
    }

    /// Sends the refreshes and retries due at `now`.
    pub(super) fn registration_timeouts(&mut self, now: Instant) {
        let due: Vec<RegistrationHandle> = self
            .registrations
            .iter()
            .filter(|(_, r)| !r.in_flight && r.next_at.is_some_and(|t| t <= now))
            .map(|(h, _)| *h)
            .collect();
        for handle in due {
            if self.send_register(handle, now).is_err() {
                // Cannot happen with URIs checked in `register`; never retry a broken one.
                if let Some(r) = self.registrations.get_mut(&handle) {
                    r.next_at = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_and_uris() {
        assert_eq!(
            domain_of("sip:alice@example.com;x=y").as_deref(),
            Some("sip:example.com")
        );
        assert_eq!(
            domain_of("sips:alice@[2001:db8::1]:5061").as_deref(),
            Some("sips:[2001:db8::1]:5061")
        );
        assert!(same_uri(
            "sip:ontime@10.0.0.1:5060;transport=udp",
            "SIP:ontime@10.0.0.1:5060"
        ));
        assert!(!same_uri("sip:Ontime@10.0.0.1", "sip:ontime@10.0.0.1"));
    }

    #[test]
    fn backoff_doubles_to_a_ceiling() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [30, 60, 120, 240, 480, 960, 1800, 1800]);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);
    }
}
