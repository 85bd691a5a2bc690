//! One call: the sans-IO [`CallCore`] (every per-call decision) and the thin tokio task that
//! drives it (`driver`), with the caller's inbound media, the agent's outbound queue and RTCP.

mod core;
pub(crate) mod driver;
mod inbound;
mod outbound;
mod rtcp;

pub use self::core::{
    AgentNotice, CallCore, CallOutput, CallSettings, DialogEvent, SipRequest, BURST, HANGUP_WAIT,
    PREBUFFER, REPLY_GAP,
};
pub use outbound::StreamTotals;

#[cfg(test)]
mod tests;
