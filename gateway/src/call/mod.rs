//! One call: the sans-IO [`CallCore`] (every per-call decision) and the thin tokio task that
//! drives it (`driver`), with the caller's inbound media, the agent's outbound queue and RTCP.

mod codec;
mod core;
pub(crate) mod dial;
mod events;
pub(crate) mod hold_back;
mod inbound;
mod outbound;
pub(crate) mod program;
mod rtcp;
mod stats;
pub(crate) mod words;

// Crate-private: the call core is the gateway's machinery, not its embedding surface (that is
// `Gateway`, `Agent` and `Config`), so it can change without a semver break.
pub(crate) use self::core::CallCore;
#[cfg(test)]
pub(crate) use self::events::AgentNotice;
pub(crate) use self::events::{CallCommand, CallOutput, CallSettings, DialogEvent, SipRequest};
pub(crate) use program::TransferOutcome;
pub(crate) use stats::CallStats;

/// A fresh call SID in Twilio's shape (`CA` and 32 hex digits).
pub(crate) fn new_call_sid() -> String {
    format!("CA{:032x}", rand::random::<u128>())
}

#[cfg(test)]
pub(crate) mod tests;
