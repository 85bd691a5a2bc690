//! # ontime-sip
//!
//! Owns SIP signalling, sans-IO, on `rsip`: RFC 3261 transactions and timers, dialogs, SDP
//! offer/answer (RFC 3264) and the hardening of the parser against hostile input. State machines
//! are fed bytes, source addresses and `Instant`s and return messages to send, timers and events.
//!
//! The shape is str0m's and quinn-proto's: feed input, then drain output until it is empty.
//!
//! ```
//! use std::time::Instant;
//! use ontime_sip::{sdp, Config, Endpoint, Event};
//!
//! let mut uas = Endpoint::new(Config::new("127.0.0.1:5060".parse().unwrap()));
//! let sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
//! m=audio 4000 RTP/AVP 0\r\n";
//! let invite = format!("INVITE sip:bot@127.0.0.1 SIP/2.0\r\n\
//! Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK1\r\nMax-Forwards: 70\r\n\
//! From: <sip:alice@127.0.0.1:5070>;tag=a\r\nTo: <sip:bot@127.0.0.1>\r\nCall-ID: doc-1\r\n\
//! CSeq: 1 INVITE\r\nContact: <sip:alice@127.0.0.1:5070>\r\nContent-Type: application/sdp\r\n\
//! Content-Length: {}\r\n\r\n{sdp}", sdp.len());
//! let now = Instant::now();
//! uas.handle_datagram(invite.as_bytes(), "127.0.0.1:5070".parse().unwrap(), now);
//! // 100 Trying goes out at once; a real caller sends each Transmit with its socket.
//! assert!(uas.poll_transmit().unwrap().payload.starts_with(b"SIP/2.0 100 Trying"));
//! let Some(Event::IncomingCall(call)) = uas.poll_event() else { panic!("no call") };
//! {
//!     let local = sdp::LocalMedia::new("127.0.0.1:20000".parse().unwrap(), 1);
//!     let (answer, media) = sdp::answer_offer(call.offer.as_ref().unwrap(), &local).unwrap();
//!     assert_eq!(media.remote_rtp, Some("127.0.0.1:4000".parse().unwrap()));
//!     uas.answer(call.call, &answer, now).unwrap();
//! }
//! let ok = uas.poll_transmit().unwrap();
//! assert!(ok.payload.starts_with(b"SIP/2.0 200 OK"));
//! ```

mod build;
pub mod digest;
pub mod endpoint;
mod error;
pub mod message;
pub mod sdp;

pub use digest::{Credentials, Password};
pub use endpoint::{
    stateless_response, stateless_response_with_headers, warning_header, Budget, CallHandle,
    CallParams, Config, EndReason, Endpoint, EndpointStats, Event, IncomingCall, MessageCounts,
    MessageKind, RegistrationHandle, RegistrationParams, RequestHandle, Timers, Transmit,
    Transport, TrustedPeer, NONCE_LIFETIME,
};
pub use error::{Error, Result};
pub use message::{
    parse_message, Framing, Limits, Message, Method, ParseError, StreamError, StreamFramer,
};
pub use sdp::{Codec, Direction, LocalMedia, NegotiatedMedia, SessionDescription, SrtpPolicy};
