//! One call: the sans-IO [`CallCore`] (every per-call decision) and the thin tokio task that
//! drives it (`driver`), with the caller's inbound media, the agent's outbound queue and RTCP.

mod core;
mod inbound;
mod outbound;
pub(crate) mod program;
mod rtcp;
mod stats;

pub use self::core::{
    AgentNotice, CallCommand, CallCore, CallOutput, CallSettings, DialogEvent, SipRequest, BURST,
    HANGUP_WAIT, PREBUFFER, REPLY_GAP,
};
pub use outbound::StreamTotals;
pub use program::TransferOutcome;
pub use stats::{CallStats, PeerReport, Tally};

/// A fresh call SID in Twilio's shape (`CA` and 32 hex digits).
pub fn new_call_sid() -> String {
    format!("CA{:032x}", rand::random::<u128>())
}

#[cfg(test)]
pub(crate) mod tests;
