//! # ontime
//!
//! Facade over the ontime crates: on-time outgoing audio for AI voice bots answering calls from a
//! company's own SIP trunk. Each crate owns one concern; `docs/architecture.md` in the repository
//! says which, and how a call flows through them.

pub use ontime_amd as amd;
pub use ontime_cgroup as cgroup;
pub use ontime_echo as echo;
pub use ontime_inference as inference;
pub use ontime_jitter as jitter;
pub use ontime_rtp as rtp;
pub use ontime_sender as sender;
pub use ontime_sip as sip;
pub use ontime_srtp as srtp;
pub use ontime_twilio as twilio;
