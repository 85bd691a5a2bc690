//! Digest authentication in the endpoint (RFC 3261 §22): as a client, a 401/407 to a request of
//! ours is answered by sending the request again with credentials, and the challenge is kept to
//! sign the later requests of the same dialog or registration; as a server, new INVITEs are
//! challenged when [`super::Config::trunk_auth`] is set, with nonces that need no state.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use hmac::{Hmac, Mac};
use rand::rngs::StdRng;
use rand::Rng;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::build::{self, h, HeaderList};
use crate::digest::{self, Algorithm, Challenge, Credentials, DigestResponse};
use crate::message::{parse_message, Framing, Message, Method};

use super::config::NONCE_LIFETIME;
use super::stats::ChallengeReason;
use super::transaction::{Owner, ServerKey, UNLIMITED};
use super::Endpoint;

/// How many times one request is sent again for challenges: once for the first challenge, and
/// again only while the server says the nonce was stale, so a server that keeps challenging
/// cannot keep us sending.
const MAX_AUTH_TRIES: u8 = 3;

/// Which header a challenge came in, which names the header its answer goes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AuthKind {
    /// 401, `WWW-Authenticate` → `Authorization` (the UAS or registrar).
    Www,
    /// 407, `Proxy-Authenticate` → `Proxy-Authorization` (a proxy on the path).
    Proxy,
}

impl AuthKind {
    fn challenge_header(self) -> &'static str {
        match self {
            AuthKind::Www => "WWW-Authenticate",
            AuthKind::Proxy => "Proxy-Authenticate",
        }
    }

    fn credential_header(self) -> &'static str {
        match self {
            AuthKind::Www => "Authorization",
            AuthKind::Proxy => "Proxy-Authorization",
        }
    }
}

#[derive(Debug)]
struct Cached {
    kind: AuthKind,
    challenge: Challenge,
    /// Times this nonce has been used (RFC 7616 §3.4: nc counts per nonce).
    nc: u32,
}

/// The challenges a dialog or a registration answers with every request (RFC 3261 §22.3:
/// credentials are reused for later requests to the same realm), one per kind and realm.
#[derive(Debug, Default)]
pub(super) struct AuthCache {
    entries: Vec<Cached>,
}

impl AuthCache {
    /// Keeps `challenge` in place of any earlier one of the same kind and realm; its nonce
    /// counts from zero.
    fn learn(&mut self, kind: AuthKind, challenge: Challenge) {
        self.entries
            .retain(|e| !(e.kind == kind && e.challenge.realm == challenge.realm));
        self.entries.push(Cached {
            kind,
            challenge,
            nc: 0,
        });
    }

    /// One credential header per challenge kept, each with its nonce count advanced, for
    /// `method` to `uri`. Empty without credentials.
    pub(super) fn sign(
        &mut self,
        credentials: Option<&Credentials>,
        rng: &mut StdRng,
        method: &Method,
        uri: &str,
    ) -> HeaderList {
        let Some(credentials) = credentials else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in &mut self.entries {
            e.nc = e.nc.saturating_add(1);
            let cnonce = format!("{:016x}{:016x}", rng.random::<u64>(), rng.random::<u64>());
            if let Ok(v) =
                e.challenge
                    .authorization(credentials, method.as_str(), uri, &cnonce, e.nc)
            {
                out.push(h(e.kind.credential_header(), v));
            }
        }
        out
    }
}

/// What a nonce we receive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NonceCheck {
    /// Not one of ours (or for another source).
    Foreign,
    /// Ours, older than [`NONCE_LIFETIME`].
    Stale,
    /// Ours and fresh.
    Fresh,
}

fn nonce_mac(secret: &[u8; 32], secs: u64, ip: IpAddr) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("ok: HMAC takes any key length");
    mac.update(&secs.to_be_bytes());
    match ip.to_canonical() {
        IpAddr::V4(v4) => mac.update(&v4.octets()),
        IpAddr::V6(v6) => mac.update(&v6.octets()),
    }
    let tag = mac.finalize().into_bytes();
    tag[..16].iter().map(|b| format!("{b:02x}")).collect()
}

impl Endpoint {
    /// A 401/407 to a request of ours (its client transaction `key` already completed): send
    /// the request again with credentials, with a new branch and the next CSeq (RFC 3261
    /// §22.2; for an INVITE the transaction has already ACKed the challenge, §17.1.1.3).
    /// Whether it went; when it did, the challenge is not the request's result.
    pub(super) fn answer_challenge(
        &mut self,
        key: &(String, String),
        resp: &Message,
        now: Instant,
    ) -> bool {
        let kind = match resp.status() {
            Some(401) => AuthKind::Www,
            Some(407) => AuthKind::Proxy,
            _ => return false,
        };
        let Some(tx) = self.client.get(key) else {
            return false;
        };
        let (owner, tries, destination, transport, method) = (
            tx.owner,
            tx.auth_tries,
            tx.destination,
            tx.transport,
            tx.method.clone(),
        );
        let answered = self.resend_with_credentials(key, resp, kind);
        self.stats.count_challenge_received(answered.is_some());
        let Some((branch, bytes)) = answered else {
            tracing::debug!(
                status = resp.status().unwrap_or_default(),
                %method,
                "digest challenge not answered"
            );
            return false;
        };
        self.start_client_tx(
            branch.clone(),
            method.clone(),
            bytes,
            destination,
            transport,
            owner,
            now,
        );
        if let Some(tx) = self.client.get_mut(&(branch, method.as_str().to_string())) {
            tx.auth_tries = tries.saturating_add(1);
        }
        true
    }

    /// The request of transaction `key` rebuilt with credentials for the challenges in `resp`,
    /// and the owner's state (CSeq, branch, kept challenges) updated; `None` when we cannot or
    /// must not answer.
    fn resend_with_credentials(
        &mut self,
        key: &(String, String),
        resp: &Message,
        kind: AuthKind,
    ) -> Option<(String, Vec<u8>)> {
        let tx = self.client.get(key)?;
        let (owner, tries, method) = (tx.owner, tx.auth_tries, tx.method.clone());
        let mut req = parse_message(&tx.request, &UNLIMITED, Framing::Datagram).ok()?;
        match owner {
            // A CANCEL is never challenged for real (RFC 3261 §22.1: it cannot be resubmitted).
            Owner::Cancel(_) => return None,
            // A call the application cancelled meanwhile ends with the challenge.
            Owner::Invite(call) if !self.calls.get(&call)?.may_resend_invite() => return None,
            _ => {}
        }
        let credentials = self.config.credentials.as_ref()?;
        let challenges: Vec<Challenge> = resp
            .headers_named(kind.challenge_header())
            .flat_map(digest::parse_challenges)
            .filter_map(Result::ok)
            .collect();
        let chosen = digest::choose(&challenges, credentials);
        if chosen.is_empty() {
            return None;
        }
        // A second challenge for the same request means the credentials were refused, unless
        // the server only found our nonce stale (RFC 7616 §3.3).
        if tries >= MAX_AUTH_TRIES || (tries > 0 && !chosen.iter().any(|c| c.stale)) {
            return None;
        }
        let uri = req.request_uri()?.to_string();
        let old_cseq = req.cseq().0;
        let mut cache = self.take_auth_cache(owner);
        for c in chosen {
            cache.learn(kind, c);
        }
        let cseq = self.next_auth_cseq(owner, old_cseq);
        let auth = cache.sign(
            self.config.credentials.as_ref(),
            &mut self.rng,
            &method,
            &uri,
        );
        let branch = self.new_branch();
        req.headers
            .retain(|(n, _)| n != "Authorization" && n != "Proxy-Authorization");
        let mut top_via = true;
        for (n, v) in &mut req.headers {
            match n.as_str() {
                "Via" if top_via => {
                    // Our own Via: its branch is the transaction's, written by us.
                    *v = v.replace(&key.0, &branch);
                    top_via = false;
                }
                "CSeq" => *v = format!("{cseq} {method}"),
                _ => {}
            }
        }
        // Before the body's headers, which read better last.
        let at = req
            .headers
            .iter()
            .position(|(n, _)| n == "Content-Type")
            .unwrap_or(req.headers.len());
        for (i, a) in auth.iter().enumerate() {
            req.headers.insert(at + i, a.clone());
        }
        let bytes = build::request(&method, &uri, &req.headers, &req.body).ok()?;
        self.put_auth_cache(owner, cache, cseq, &branch, &bytes, auth);
        Some((branch, bytes))
    }

    /// The challenges kept for `owner` (taken out; [`Endpoint::put_auth_cache`] puts them back).
    fn take_auth_cache(&mut self, owner: Owner) -> AuthCache {
        match owner {
            Owner::Invite(call)
            | Owner::ReInvite(call)
            | Owner::Bye(call)
            | Owner::InDialog(call)
            | Owner::Refer(call) => self
                .calls
                .get_mut(&call)
                .map(|c| std::mem::take(&mut c.auth))
                .unwrap_or_default(),
            Owner::Register(reg) => self
                .registrations
                .get_mut(&reg)
                .map(|r| std::mem::take(&mut r.auth))
                .unwrap_or_default(),
            Owner::Cancel(_) | Owner::Options(_) => AuthCache::default(),
        }
    }

    /// The CSeq of the request sent again: above the one challenged and above any the dialog or
    /// registration has used since (RFC 3261 §22.2: CSeq incremented).
    fn next_auth_cseq(&self, owner: Owner, challenged: u32) -> u32 {
        let used = match owner {
            Owner::Invite(call)
            | Owner::ReInvite(call)
            | Owner::Bye(call)
            | Owner::InDialog(call)
            | Owner::Refer(call) => self.calls.get(&call).map(|c| c.local_cseq),
            Owner::Register(reg) => self.registrations.get(&reg).map(|r| r.cseq),
            Owner::Cancel(_) | Owner::Options(_) => None,
        };
        used.unwrap_or(0).max(challenged).saturating_add(1)
    }

    /// Records the request sent again in its owner's state.
    fn put_auth_cache(
        &mut self,
        owner: Owner,
        cache: AuthCache,
        cseq: u32,
        branch: &str,
        bytes: &[u8],
        auth: HeaderList,
    ) {
        match owner {
            Owner::Invite(call)
            | Owner::ReInvite(call)
            | Owner::Bye(call)
            | Owner::InDialog(call)
            | Owner::Refer(call) => {
                let Some(c) = self.calls.get_mut(&call) else {
                    return;
                };
                c.auth = cache;
                c.local_cseq = cseq;
                match owner {
                    Owner::Invite(_) => {
                        c.invite_cseq = cseq;
                        c.invite_branch = Some(branch.to_string());
                        c.invite_request = Some(bytes.to_vec());
                        // A CANCEL waits for a 1xx of the new transaction.
                        c.got_provisional = false;
                        c.invite_auth = auth;
                    }
                    Owner::ReInvite(_) => {
                        c.invite_cseq = cseq;
                        c.invite_auth = auth;
                    }
                    Owner::Refer(_) => {
                        if let Some(r) = &mut c.referral {
                            r.cseq = cseq;
                        }
                    }
                    _ => {}
                }
            }
            Owner::Register(reg) => {
                if let Some(r) = self.registrations.get_mut(&reg) {
                    r.auth = cache;
                    r.cseq = cseq;
                }
            }
            Owner::Cancel(_) | Owner::Options(_) => {}
        }
    }

    /// A nonce for `ip` at `now`: the seconds since this endpoint's first nonce and an HMAC of
    /// them and the IP under the endpoint's random key, so checking it needs no state.
    fn mint_nonce(&mut self, ip: IpAddr, now: Instant) -> String {
        let epoch = *self.nonce_epoch.get_or_insert(now);
        let secs = now.saturating_duration_since(epoch).as_secs();
        format!("{secs:016x}{}", nonce_mac(&self.nonce_secret, secs, ip))
    }

    fn check_nonce(&self, nonce: &str, ip: IpAddr, now: Instant) -> NonceCheck {
        let Some(epoch) = self.nonce_epoch else {
            return NonceCheck::Foreign;
        };
        if nonce.len() != 48 || !nonce.is_ascii() {
            return NonceCheck::Foreign;
        }
        let (secs_hex, mac) = nonce.split_at(16);
        let Ok(secs) = u64::from_str_radix(secs_hex, 16) else {
            return NonceCheck::Foreign;
        };
        let expected = nonce_mac(&self.nonce_secret, secs, ip);
        if !bool::from(expected.as_bytes().ct_eq(mac.as_bytes())) {
            return NonceCheck::Foreign;
        }
        let age = now
            .saturating_duration_since(epoch)
            .as_secs()
            .saturating_sub(secs);
        if age > NONCE_LIFETIME.as_secs() {
            NonceCheck::Stale
        } else {
            NonceCheck::Fresh
        }
    }

    /// [`super::Config::trunk_auth`] for a new INVITE: whether it may proceed; when not, it has
    /// been answered 401 with a fresh challenge (RFC 3261 §22.4).
    pub(super) fn admit_invite(
        &mut self,
        key: &ServerKey,
        msg: &Message,
        source: SocketAddr,
        now: Instant,
    ) -> bool {
        let Some(trunk) = self.config.trunk_auth.as_ref() else {
            return true;
        };
        let realm = trunk
            .realm
            .clone()
            .unwrap_or_else(|| self.config.local_addr.ip().to_string());
        let ruri = msg.request_uri().unwrap_or_default();
        let mut reason = ChallengeReason::Missing;
        for value in msg.headers_named("Authorization") {
            let Ok(r) = DigestResponse::parse(value) else {
                reason = ChallengeReason::Invalid;
                continue;
            };
            if r.realm != realm {
                continue;
            }
            let right = matches!(r.algorithm, Algorithm::Md5 | Algorithm::Sha256)
                && r.uri == ruri
                && r.names_user(&trunk.username)
                && r.verify("INVITE", &trunk.username, &trunk.password);
            match (right, self.check_nonce(&r.nonce, source.ip(), now)) {
                (true, NonceCheck::Fresh) => return true,
                (true, NonceCheck::Stale) => reason = ChallengeReason::Stale,
                _ if reason != ChallengeReason::Stale => reason = ChallengeReason::Invalid,
                _ => {}
            }
        }
        self.stats.count_challenge_sent(reason);
        tracing::debug!(%source, call_id = msg.call_id(), reason = ?reason, "INVITE challenged");
        let nonce = self.mint_nonce(source.ip(), now);
        let extra: HeaderList = self
            .config
            .trunk_auth_algorithms
            .clone()
            .into_iter()
            .map(|algorithm| {
                let c = Challenge {
                    realm: realm.clone(),
                    nonce: nonce.clone(),
                    opaque: None,
                    algorithm,
                    qop: vec!["auth".into()],
                    stale: reason == ChallengeReason::Stale,
                    userhash: false,
                };
                h("WWW-Authenticate", c.to_header_value())
            })
            .collect();
        self.respond(key, 401, &extra, b"", now);
        false
    }
}
