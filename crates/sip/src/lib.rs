//! # ontime-sip
//!
//! Owns SIP signalling, sans-IO, on `rsip`: RFC 3261 transactions and timers, dialogs, SDP
//! offer/answer (RFC 3264) and the hardening of the parser against hostile input. State machines
//! are fed bytes, source addresses and `Instant`s and return messages to send, timers and events.
