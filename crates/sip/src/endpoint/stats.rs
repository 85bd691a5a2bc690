//! The endpoint's counters, as plain numbers: [`EndpointStats`], read with
//! [`Endpoint::stats`](super::Endpoint::stats) or drained as increments with
//! [`Endpoint::poll_stats`](super::Endpoint::poll_stats). The endpoint counts and the application
//! records (str0m's way): no metrics facade, no global recorder, and two endpoints in one process
//! count apart. The gateway exports them under `ontime_sip_*` (`gateway/src/ops/sip_stats.rs`).

use crate::message::Message;

use super::Budget;

/// What a SIP message is, for counting: a request by its method, a response by its status class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum MessageKind {
    /// An INVITE request.
    Invite,
    /// An ACK request.
    Ack,
    /// A BYE request.
    Bye,
    /// A CANCEL request.
    Cancel,
    /// An OPTIONS request.
    Options,
    /// An INFO request.
    Info,
    /// An UPDATE request.
    Update,
    /// A REFER request.
    Refer,
    /// A NOTIFY request.
    Notify,
    /// A REGISTER request.
    Register,
    /// A 1xx response.
    Status1xx,
    /// A 2xx response.
    Status2xx,
    /// A 3xx response.
    Status3xx,
    /// A 4xx response.
    Status4xx,
    /// A 5xx response.
    Status5xx,
    /// A 6xx response.
    Status6xx,
    /// Any other method, or a start line that names neither a method nor a status class.
    Other,
}

impl MessageKind {
    /// Every kind, in the order of [`MessageCounts::iter`].
    pub const ALL: [MessageKind; 17] = [
        MessageKind::Invite,
        MessageKind::Ack,
        MessageKind::Bye,
        MessageKind::Cancel,
        MessageKind::Options,
        MessageKind::Info,
        MessageKind::Update,
        MessageKind::Refer,
        MessageKind::Notify,
        MessageKind::Register,
        MessageKind::Status1xx,
        MessageKind::Status2xx,
        MessageKind::Status3xx,
        MessageKind::Status4xx,
        MessageKind::Status5xx,
        MessageKind::Status6xx,
        MessageKind::Other,
    ];

    /// The method token (`INVITE`), the status class (`1xx` … `6xx`) or `other`: the `method`
    /// label of `ontime_sip_messages_total`.
    pub fn label(self) -> &'static str {
        match self {
            MessageKind::Invite => "INVITE",
            MessageKind::Ack => "ACK",
            MessageKind::Bye => "BYE",
            MessageKind::Cancel => "CANCEL",
            MessageKind::Options => "OPTIONS",
            MessageKind::Info => "INFO",
            MessageKind::Update => "UPDATE",
            MessageKind::Refer => "REFER",
            MessageKind::Notify => "NOTIFY",
            MessageKind::Register => "REGISTER",
            MessageKind::Status1xx => "1xx",
            MessageKind::Status2xx => "2xx",
            MessageKind::Status3xx => "3xx",
            MessageKind::Status4xx => "4xx",
            MessageKind::Status5xx => "5xx",
            MessageKind::Status6xx => "6xx",
            MessageKind::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The kind of a request method's token (case-sensitive, as RFC 3261 §7.1 says).
    fn of_method(token: &[u8]) -> MessageKind {
        match token {
            b"INVITE" => MessageKind::Invite,
            b"ACK" => MessageKind::Ack,
            b"BYE" => MessageKind::Bye,
            b"CANCEL" => MessageKind::Cancel,
            b"OPTIONS" => MessageKind::Options,
            b"INFO" => MessageKind::Info,
            b"UPDATE" => MessageKind::Update,
            b"REFER" => MessageKind::Refer,
            b"NOTIFY" => MessageKind::Notify,
            b"REGISTER" => MessageKind::Register,
            _ => MessageKind::Other,
        }
    }

    /// The kind of a response by the first digit of its status code.
    fn of_status(first_digit: u8) -> MessageKind {
        match first_digit {
            b'1' => MessageKind::Status1xx,
            b'2' => MessageKind::Status2xx,
            b'3' => MessageKind::Status3xx,
            b'4' => MessageKind::Status4xx,
            b'5' => MessageKind::Status5xx,
            b'6' => MessageKind::Status6xx,
            _ => MessageKind::Other,
        }
    }

    /// The kind of a parsed message.
    pub(super) fn of_message(msg: &Message) -> MessageKind {
        match (msg.method(), msg.status()) {
            (Some(method), _) => MessageKind::of_method(method.as_str().as_bytes()),
            (None, Some(code)) if (100..=699).contains(&code) => {
                MessageKind::of_status(b'0' + (code / 100) as u8)
            }
            _ => MessageKind::Other,
        }
    }

    /// The kind read from the start line of raw bytes (what we send, or what we could not parse),
    /// without parsing the rest.
    pub(super) fn of_start_line(bytes: &[u8]) -> MessageKind {
        let line = bytes
            .trim_ascii_start()
            .split(|b| *b == b'\r' || *b == b'\n')
            .next()
            .unwrap_or_default();
        let mut words = line.split(|b| *b == b' ');
        let first = words.next().unwrap_or_default();
        if first == b"SIP/2.0" {
            let code = words.next().unwrap_or_default();
            if code.len() == 3 && code.iter().all(u8::is_ascii_digit) {
                return MessageKind::of_status(code[0]);
            }
            return MessageKind::Other;
        }
        MessageKind::of_method(first)
    }
}

/// Messages counted by [`MessageKind`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageCounts([u64; MessageKind::ALL.len()]);

impl MessageCounts {
    /// The count of one kind.
    pub fn get(&self, kind: MessageKind) -> u64 {
        self.0[kind.index()]
    }

    /// Every kind with its count, zeros included, in [`MessageKind::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (MessageKind, u64)> + '_ {
        MessageKind::ALL.iter().map(|&k| (k, self.get(k)))
    }

    /// The sum over every kind.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    fn add(&mut self, kind: MessageKind) {
        self.0[kind.index()] += 1;
    }

    fn since(&self, earlier: &MessageCounts) -> MessageCounts {
        MessageCounts(std::array::from_fn(|i| {
            self.0[i].saturating_sub(earlier.0[i])
        }))
    }
}

/// The endpoint's counters: monotonic from [`Endpoint::new`](super::Endpoint::new) in
/// [`Endpoint::stats`](super::Endpoint::stats), increments in
/// [`Endpoint::poll_stats`](super::Endpoint::poll_stats). Each field names the Prometheus series
/// the gateway records it in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStats {
    /// Every message handed to [`Endpoint::handle_datagram`](super::Endpoint::handle_datagram)
    /// or [`Endpoint::handle_message`](super::Endpoint::handle_message), readable or not (an
    /// unreadable one by its start line): `ontime_sip_messages_total{direction="in"}`.
    pub messages_in: MessageCounts,
    /// Every message handed out by [`Endpoint::poll_transmit`](super::Endpoint::poll_transmit),
    /// retransmissions included (they are on the wire too):
    /// `ontime_sip_messages_total{direction="out"}`.
    pub messages_out: MessageCounts,
    /// Messages received that could not be parsed (answered 400 or the like when they can be
    /// answered, else dropped), and NOTIFYs of our REFER whose `message/sipfrag` body could not
    /// be (answered 400); each also counts once in `messages_in`:
    /// `ontime_sip_invalid_messages_total`.
    pub invalid_messages: u64,
    /// In-dialog requests whose Call-ID and our To tag name a live dialog but whose From tag is
    /// not the peer's (answered 481; ACKs dropped):
    /// `ontime_sip_dialog_requests_refused_total{reason="wrong_tag"}`.
    pub refused_wrong_tag: u64,
    /// In-dialog requests from an address the dialog does not trust
    /// ([`Config::trusted_peer`](super::Config::trusted_peer); answered 403, ACKs dropped):
    /// `ontime_sip_dialog_requests_refused_total{reason="wrong_source"}`.
    pub refused_wrong_source: u64,
    /// New requests answered with a stateless 503 because their transaction budget
    /// ([`Budget`]) was full, out of dialog then in dialog:
    /// `ontime_sip_budget_exhausted_total{budget}`; read with [`EndpointStats::budget_exhausted`].
    budget_exhausted: [u64; 2],
    /// New INVITEs answered 401 ([`Config::trunk_auth`](super::Config::trunk_auth)) without
    /// credentials for our realm: `ontime_sip_auth_challenges_sent_total{reason="missing"}`.
    pub challenges_sent_missing: u64,
    /// New INVITEs answered 401 with right credentials and an expired nonce of ours
    /// (`stale=true`): `ontime_sip_auth_challenges_sent_total{reason="stale"}`.
    pub challenges_sent_stale: u64,
    /// New INVITEs answered 401 with credentials that failed (wrong user or password, a nonce
    /// not ours, a uri that is not the Request-URI, an unreadable header), the ones to watch:
    /// `ontime_sip_auth_challenges_sent_total{reason="invalid"}`.
    pub challenges_sent_invalid: u64,
    /// 401/407 to our requests that we answered by sending the request again with
    /// credentials: `ontime_sip_auth_challenges_received_total{outcome="answered"}`.
    pub challenges_answered: u64,
    /// 401/407 to our requests that could not be answered (no credentials for the realm, only
    /// `auth-int` or unknown algorithms, a second challenge without `stale=true`), so the
    /// challenge is the request's final response:
    /// `ontime_sip_auth_challenges_received_total{outcome="failed"}`.
    pub challenges_failed: u64,
    /// Final 2xx results of our REGISTERs (a registration, its refreshes, the unregistration):
    /// `ontime_sip_registrations_total{result="ok"}`.
    pub registrations_ok: u64,
    /// Final results of our REGISTERs other than 2xx, timeouts included:
    /// `ontime_sip_registrations_total{result="failed"}`.
    pub registrations_failed: u64,
}

impl EndpointStats {
    /// New requests refused (503) because `budget` was full.
    pub fn budget_exhausted(&self, budget: Budget) -> u64 {
        self.budget_exhausted[budget.index()]
    }

    /// What was counted after `earlier` (an earlier reading of the same endpoint): field by
    /// field, never below zero.
    pub fn since(&self, earlier: &EndpointStats) -> EndpointStats {
        // Destructured so that a new field cannot be forgotten here.
        let EndpointStats {
            messages_in,
            messages_out,
            invalid_messages,
            refused_wrong_tag,
            refused_wrong_source,
            budget_exhausted,
            challenges_sent_missing,
            challenges_sent_stale,
            challenges_sent_invalid,
            challenges_answered,
            challenges_failed,
            registrations_ok,
            registrations_failed,
        } = *self;
        EndpointStats {
            messages_in: messages_in.since(&earlier.messages_in),
            messages_out: messages_out.since(&earlier.messages_out),
            invalid_messages: invalid_messages.saturating_sub(earlier.invalid_messages),
            refused_wrong_tag: refused_wrong_tag.saturating_sub(earlier.refused_wrong_tag),
            refused_wrong_source: refused_wrong_source.saturating_sub(earlier.refused_wrong_source),
            budget_exhausted: std::array::from_fn(|i| {
                budget_exhausted[i].saturating_sub(earlier.budget_exhausted[i])
            }),
            challenges_sent_missing: challenges_sent_missing
                .saturating_sub(earlier.challenges_sent_missing),
            challenges_sent_stale: challenges_sent_stale
                .saturating_sub(earlier.challenges_sent_stale),
            challenges_sent_invalid: challenges_sent_invalid
                .saturating_sub(earlier.challenges_sent_invalid),
            challenges_answered: challenges_answered.saturating_sub(earlier.challenges_answered),
            challenges_failed: challenges_failed.saturating_sub(earlier.challenges_failed),
            registrations_ok: registrations_ok.saturating_sub(earlier.registrations_ok),
            registrations_failed: registrations_failed.saturating_sub(earlier.registrations_failed),
        }
    }

    /// Whether every counter is zero.
    pub fn is_zero(&self) -> bool {
        *self == EndpointStats::default()
    }

    /// Counts a message in or out.
    pub(super) fn count_message(&mut self, kind: MessageKind, direction: Direction) {
        match direction {
            Direction::In => self.messages_in.add(kind),
            Direction::Out => self.messages_out.add(kind),
        }
    }

    /// Counts a received message that could not be parsed: in `invalid_messages` and in
    /// `messages_in` under the kind of its start line.
    pub(super) fn count_invalid(&mut self, bytes: &[u8]) {
        self.messages_in.add(MessageKind::of_start_line(bytes));
        self.invalid_messages += 1;
    }

    /// Counts a received message whose body the endpoint must read but could not (a NOTIFY's
    /// `message/sipfrag`); the message itself already counted in `messages_in` on arrival.
    pub(super) fn count_unreadable_body(&mut self) {
        self.invalid_messages += 1;
    }

    /// Counts a refused in-dialog request.
    pub(super) fn count_refused(&mut self, refusal: Refusal) {
        match refusal {
            Refusal::WrongTag => self.refused_wrong_tag += 1,
            Refusal::WrongSource => self.refused_wrong_source += 1,
        }
    }

    /// Counts a request refused because its budget was full.
    pub(super) fn count_budget_exhausted(&mut self, budget: Budget) {
        self.budget_exhausted[budget.index()] += 1;
    }

    /// Counts an INVITE we challenged.
    pub(super) fn count_challenge_sent(&mut self, reason: ChallengeReason) {
        match reason {
            ChallengeReason::Missing => self.challenges_sent_missing += 1,
            ChallengeReason::Stale => self.challenges_sent_stale += 1,
            ChallengeReason::Invalid => self.challenges_sent_invalid += 1,
        }
    }

    /// Counts a challenge to one of our requests: answered or not.
    pub(super) fn count_challenge_received(&mut self, answered: bool) {
        if answered {
            self.challenges_answered += 1;
        } else {
            self.challenges_failed += 1;
        }
    }

    /// Counts the final result of a REGISTER.
    pub(super) fn count_registration(&mut self, ok: bool) {
        if ok {
            self.registrations_ok += 1;
        } else {
            self.registrations_failed += 1;
        }
    }
}

/// Why we challenged an INVITE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChallengeReason {
    /// No credentials for our realm.
    Missing,
    /// Valid credentials, expired nonce.
    Stale,
    /// Credentials that failed.
    Invalid,
}

/// Why an in-dialog request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The From tag is not the dialog's remote tag.
    WrongTag,
    /// The source is not one the dialog trusts.
    WrongSource,
}

/// Which way a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    /// Received.
    In,
    /// Handed out to be sent.
    Out,
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::endpoint::{Config, Endpoint, Event};

    /// The messages in `counts` that are not zero, by label, sorted.
    fn nonzero(counts: &MessageCounts) -> Vec<(&'static str, u64)> {
        let mut all: Vec<_> = counts
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.label(), n))
            .collect();
        all.sort();
        all
    }

    const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
                       m=audio 4000 RTP/AVP 0\r\n";

    fn request(method: &str, cseq: u32, to_tag: &str, body: &str) -> String {
        let content_type = if body.is_empty() {
            ""
        } else {
            "Content-Type: application/sdp\r\n"
        };
        format!(
            "{method} sip:bot@127.0.0.1 SIP/2.0\r\n\
             Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK{method}{cseq}\r\nMax-Forwards: 70\r\n\
             From: <sip:alice@127.0.0.1:5070>;tag=a\r\nTo: <sip:bot@127.0.0.1>{to_tag}\r\n\
             Call-ID: counters-1\r\nCSeq: {cseq} {method}\r\n\
             Contact: <sip:alice@127.0.0.1:5070>\r\n{content_type}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// Answers the incoming call the endpoint reported.
    fn answer_incoming(uas: &mut Endpoint, now: Instant) {
        let Some(Event::IncomingCall(call)) = uas.poll_event() else {
            panic!("no call")
        };
        let local = crate::sdp::LocalMedia::new("127.0.0.1:20000".parse().unwrap(), 1);
        let (answer, _) = crate::sdp::answer_offer(call.offer.as_ref().unwrap(), &local).unwrap();
        uas.answer(call.call, &answer, now).unwrap();
    }

    /// `;tag=<our tag>` from the To of a response.
    fn to_tag_param(payload: &[u8]) -> String {
        String::from_utf8_lossy(payload)
            .lines()
            .find_map(|l| l.strip_prefix("To: ").map(str::to_string))
            .and_then(|to| to.split_once(";tag=").map(|(_, t)| format!(";tag={t}")))
            .unwrap()
    }

    #[test]
    fn kinds_of_start_lines() {
        let kind = |b: &[u8]| MessageKind::of_start_line(b).label();
        assert_eq!(kind(b"INVITE sip:a@b SIP/2.0\r\n"), "INVITE");
        assert_eq!(kind(b"\r\nBYE sip:a@b SIP/2.0\r\n"), "BYE");
        assert_eq!(kind(b"SIP/2.0 183 Session Progress\r\n"), "1xx");
        assert_eq!(kind(b"SIP/2.0 603 Decline\r\n"), "6xx");
        assert_eq!(kind(b"SIP/2.0 99 Odd\r\n"), "other");
        assert_eq!(kind(b"SIP/2.0 7000 Odd\r\n"), "other");
        assert_eq!(kind(b"MESSAGE sip:a@b SIP/2.0\r\n"), "other");
        assert_eq!(kind(b"REFER sip:a@b SIP/2.0\r\n"), "REFER");
        assert_eq!(kind(b"NOTIFY sip:a@b SIP/2.0\r\n"), "NOTIFY");
        assert_eq!(kind(b"REGISTER sip:a@b SIP/2.0\r\n"), "REGISTER");
        assert_eq!(kind(b"invite sip:a@b SIP/2.0\r\n"), "other");
        assert_eq!(kind(b""), "other");
        // Every kind has its own label, in ALL's order.
        for (i, k) in MessageKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
            assert_eq!(
                MessageKind::ALL
                    .iter()
                    .filter(|o| o.label() == k.label())
                    .count(),
                1
            );
        }
    }

    #[test]
    fn every_message_in_and_out_counts_once() {
        let mut uas = Endpoint::new(Config::new("127.0.0.1:5060".parse().unwrap()));
        let peer = "127.0.0.1:5070".parse().unwrap();
        let now = Instant::now();
        uas.handle_datagram(request("INVITE", 1, "", SDP).as_bytes(), peer, now);
        // Out counts when handed out, not when queued.
        assert_eq!(uas.stats().messages_in.get(MessageKind::Invite), 1);
        assert_eq!(uas.stats().messages_out.total(), 0);
        let trying = uas.poll_transmit().unwrap();
        assert!(trying.payload.starts_with(b"SIP/2.0 100 Trying"));
        assert_eq!(uas.stats().messages_out.get(MessageKind::Status1xx), 1);

        answer_incoming(&mut uas, now);
        let ok = uas.poll_transmit().unwrap();
        assert_eq!(uas.stats().messages_out.get(MessageKind::Status2xx), 1);
        // The 2xx retransmission is on the wire too.
        uas.handle_timeout(now + Duration::from_millis(500));
        assert_eq!(uas.poll_transmit().unwrap().payload, ok.payload);
        assert_eq!(uas.stats().messages_out.get(MessageKind::Status2xx), 2);

        let to_tag = to_tag_param(&ok.payload);
        uas.handle_datagram(request("ACK", 1, &to_tag, "").as_bytes(), peer, now);
        uas.handle_datagram(request("BYE", 2, &to_tag, "").as_bytes(), peer, now);
        while uas.poll_transmit().is_some() {}

        // Unparseable: once in invalid_messages, once in messages_in under its start line.
        assert_eq!(uas.stats().invalid_messages, 0);
        uas.handle_datagram(b"INVITE sip:bot@127.0.0.1 SIP/2.0\r\n\r\n", peer, now);
        assert_eq!(uas.stats().invalid_messages, 1);
        uas.handle_datagram(b"\x00\x01 garbage", peer, now);
        assert_eq!(uas.invalid_messages(), 2);

        // A response in.
        uas.handle_datagram(
            b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKx\r\n\
              From: <sip:bot@127.0.0.1>;tag=b\r\nTo: <sip:alice@127.0.0.1:5070>;tag=c\r\n\
              Call-ID: counters-2\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
            peer,
            now,
        );
        while uas.poll_transmit().is_some() {}
        let stats = *uas.stats();
        assert_eq!(
            nonzero(&stats.messages_in),
            [
                ("2xx", 1),
                ("ACK", 1),
                ("BYE", 1),
                ("INVITE", 2),
                ("other", 1)
            ]
        );
        assert_eq!(nonzero(&stats.messages_out), [("1xx", 1), ("2xx", 3)]);
        // Nothing else was counted.
        let expected = EndpointStats {
            messages_in: stats.messages_in,
            messages_out: stats.messages_out,
            invalid_messages: 2,
            ..EndpointStats::default()
        };
        assert_eq!(stats, expected);
    }

    #[test]
    fn poll_stats_hands_out_each_increment_once() {
        let mut uas = Endpoint::new(Config::new("127.0.0.1:5060".parse().unwrap()));
        let peer = "127.0.0.1:5070".parse().unwrap();
        let now = Instant::now();
        assert_eq!(uas.poll_stats(), None);
        uas.handle_datagram(b"\x00 not sip", peer, now);
        let first = uas.poll_stats().expect("one unreadable message");
        assert_eq!(first.invalid_messages, 1);
        assert_eq!(nonzero(&first.messages_in), [("other", 1)]);
        assert_eq!(uas.poll_stats(), None);

        uas.handle_datagram(request("OPTIONS", 1, "", "").as_bytes(), peer, now);
        // Not yet handed out: the 200 is not counted yet.
        let second = uas.poll_stats().expect("the OPTIONS");
        assert_eq!(nonzero(&second.messages_in), [("OPTIONS", 1)]);
        assert_eq!(second.messages_out.total(), 0);
        assert_eq!(second.invalid_messages, 0);
        while uas.poll_transmit().is_some() {}
        let third = uas.poll_stats().expect("the 200");
        assert_eq!(nonzero(&third.messages_out), [("2xx", 1)]);
        assert_eq!(third.messages_in.total(), 0);
        assert_eq!(uas.poll_stats(), None);

        // The increments add up to the running totals.
        assert_eq!(uas.stats().messages_in.total(), 2);
        assert_eq!(uas.stats().messages_out.total(), 1);
        assert_eq!(uas.stats().invalid_messages, 1);
        assert_eq!(uas.stats().since(uas.stats()), EndpointStats::default());
    }

    #[test]
    fn digest_challenges_count_by_reason() {
        let peer = "127.0.0.1:5070".parse().unwrap();
        let now = Instant::now();
        let mut cfg = Config::new("127.0.0.1:5060".parse().unwrap());
        cfg.trunk_auth = Some(crate::Credentials::new("trunk", "pw"));
        let mut uas = Endpoint::new(cfg);
        uas.handle_datagram(request("INVITE", 1, "", SDP).as_bytes(), peer, now);
        let bad = request("INVITE", 2, "", SDP).replace(
            "Contact:",
            "Authorization: Digest username=\"trunk\", realm=\"127.0.0.1\", nonce=\"x\", \
             uri=\"sip:bot@127.0.0.1\", response=\"00\"\r\nContact:",
        );
        uas.handle_datagram(bad.as_bytes(), peer, now);
        let stats = uas.stats();
        assert_eq!(stats.challenges_sent_missing, 1);
        assert_eq!(stats.challenges_sent_invalid, 1);
        assert_eq!(stats.challenges_sent_stale, 0);
        assert_eq!(stats.challenges_answered + stats.challenges_failed, 0);
        assert!(uas.poll_event().is_none());
    }

    #[test]
    fn refusals_and_exhausted_budgets_count_exactly() {
        let peer = "127.0.0.1:5070".parse().unwrap();
        let stranger = "127.0.0.9:5070".parse().unwrap();
        let now = Instant::now();
        let mut cfg = Config::new("127.0.0.1:5060".parse().unwrap());
        cfg.limits.max_transactions = 2;
        let mut uas = Endpoint::new(cfg);
        uas.handle_datagram(request("INVITE", 1, "", SDP).as_bytes(), peer, now);
        answer_incoming(&mut uas, now);
        let mut ok = None;
        while let Some(t) = uas.poll_transmit() {
            ok = Some(t);
        }
        let to_tag = to_tag_param(&ok.unwrap().payload);
        // The From tag only: our random To tag may begin with an `a` too.
        let wrong_tag = request("INFO", 2, &to_tag, "").replace(";tag=a\r\nTo:", ";tag=z\r\nTo:");
        uas.handle_datagram(wrong_tag.as_bytes(), peer, now);
        uas.handle_datagram(request("ACK", 1, &to_tag, "").as_bytes(), stranger, now);
        assert_eq!(uas.stats().refused_wrong_tag, 1);
        assert_eq!(uas.stats().refused_wrong_source, 1);
        // INVITE and INFO hold the out-of-dialog budget of 2: the next OPTIONS is refused.
        uas.handle_datagram(request("OPTIONS", 3, "", "").as_bytes(), peer, now);
        assert_eq!(uas.stats().budget_exhausted(Budget::OutOfDialog), 1);
        assert_eq!(uas.stats().budget_exhausted(Budget::InDialog), 0);
        assert_eq!(uas.budget_exhausted_since(), Some(now));
        // An INFO naming the dialog from an untrusted source is no request of a live dialog: it
        // cannot take the in-dialog budget, so the full out-of-dialog one refuses it first.
        uas.handle_datagram(request("INFO", 4, &to_tag, "").as_bytes(), stranger, now);
        assert_eq!(uas.stats().budget_exhausted(Budget::OutOfDialog), 2);
        assert_eq!(uas.stats().budget_exhausted(Budget::InDialog), 0);
        assert_eq!(uas.stats().refused_wrong_source, 1);
        assert_eq!(uas.stats().refused_wrong_tag, 1);
        assert_eq!(uas.stats().invalid_messages, 0);
    }
}
