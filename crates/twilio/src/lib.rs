//! # ontime-twilio
//!
//! The Twilio-compatible surface of a voice stack, sans-IO: a subset of Twilio's 2010-04-01
//! REST API (the Calls resource) and TwiML, so that bots written against Twilio (pipecat's
//! `TwilioFrameSerializer`, Twilio's helper libraries) drive another stack unchanged. No
//! sockets, no async runtime, no clock: an HTTP server hands in paths, header values and form
//! bodies and gets back typed requests or Twilio-shaped errors; whatever owns the calls
//! implements [`CallControl`].
//!
//! - [`twiml`]: the TwiML verbs ontime runs ([`Verb`]) and their parser ([`parse_twiml`]);
//! - [`call`]: the Calls resource ([`CallView`], [`CallStatus`], [`Direction`]), what can be
//!   asked of calls ([`NewCall`], [`CallUpdate`], [`CallFilter`]) and [`CallControl`];
//! - [`request`]: paths, HTTP Basic, forms, and the requests they make up
//!   ([`CreateRequest`], [`UpdateRequest`], [`ListRequest`]);
//! - [`json`]: the Call resource and list pages as Twilio writes them; [`Error`]: Twilio's
//!   error codes and bodies;
//! - [`webhook`]: the parameters of TwiML fetches and status callbacks; [`signature`]:
//!   `X-Twilio-Signature`; [`date`]: RFC 2822 dates as Twilio writes them;
//! - [`sip_headers`]: SIP `X-` headers, inbound to `SipHeader_X-…` webhook parameters and
//!   outbound from a SIP URI's header part ([`SipTarget`], [`XHeaders`]), bounded.
//!
//! ```
//! use ontime_twilio::{parse_twiml, request::Params, signature, UpdateRequest, Verb};
//!
//! // A bot redirects a call: its form is read into verbs, anything unsupported refused by name.
//! let form = Params::parse(b"Twiml=%3CResponse%3E%3CPause%20length%3D%222%22/%3E%3CHangup/%3E%3C/Response%3E");
//! let UpdateRequest::Apply(update) = UpdateRequest::parse(&form)? else { unreachable!() };
//! println!("{update:?}");
//! assert!(parse_twiml("<Response><Say>hi</Say></Response>").is_err());
//! assert_eq!(parse_twiml("<Response><Hangup/></Response>")?, [Verb::Hangup]);
//!
//! // A status callback is signed as Twilio signs it, so the bot's validator accepts it.
//! let params = vec![("CallSid".to_string(), "CA1".to_string())];
//! let sig = signature::compute("token", "https://bot.example/status", &params);
//! assert!(signature::validate("token", "https://bot.example/status", &params, &sig));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// The README's examples are compiled and run with the doctests, so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod call;
pub mod date;
mod error;
pub mod json;
pub mod request;
pub mod signature;
pub mod sip_headers;
pub mod twiml;
pub mod webhook;

pub use call::{
    AmdStatusCallback, CallControl, CallFilter, CallStatus, CallUpdate, CallView, ControlError,
    Direction, MachineDetection, NewCall, StatusCallback, StatusCallbackEvent,
};
pub use error::{Error, Result};
pub use request::{CreateRequest, ListRequest, Params, TwimlSource, UpdateRequest};
pub use sip_headers::{HeaderError, SipTarget, XHeaders};
pub use twiml::{
    parse as parse_twiml, Dial, DialNoun, DialTarget, LegTwiml, StreamAudio, TwimlError, Verb,
    DIAL_TIMEOUT_DEFAULT, DIAL_TIME_LIMIT_MAX, MAX_DIAL_NOUNS, MAX_TWIML_BYTES,
};
pub use webhook::API_VERSION;

/// `(name, value)` pairs as the crate's functions take and give them, for its unit tests.
#[cfg(test)]
pub(crate) fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}
