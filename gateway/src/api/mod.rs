//! The call-control API: a subset of Twilio's 2010-04-01 REST API and TwiML, so bots written
//! against Twilio (pipecat's `TwilioFrameSerializer`, Twilio's helper libraries) hang up,
//! send digits, transfer and dial out through ontime unchanged.
//!
//! - `control`: the contract between the HTTP layer and the gateway's calls ([`CallControl`]);
//! - `twiml`: the TwiML verbs ontime runs, and their parser ([`parse_twiml`]);
//! - `http`: the HTTP server ([`serve`]: routes, Basic auth, Twilio's JSON shapes and errors);
//! - `callback`: TwiML fetches and status callbacks to the bot's server ([`Callbacks`]:
//!   signed, bounded);
//! - [`signature`], `X-Twilio-Signature`;
//! - `date`: RFC 2822 dates as Twilio writes them.

mod callback;
pub(crate) mod control;
mod date;
mod http;
pub mod signature;
#[cfg(test)]
mod test_support;
pub(crate) mod twiml;

pub use callback::{
    call_params, status_params, CallbackConfig, CallbackError, Callbacks, FetchError,
    StatusReporter, API_VERSION,
};
pub use control::{
    CallControl, CallFilter, CallStatus, CallUpdate, CallView, ControlError, Direction, NewCall,
    StatusCallback, StatusCallbackEvent,
};
pub use http::{serve, ApiState};
pub use twiml::{parse as parse_twiml, DialTarget, TwimlError, Verb, MAX_TWIML_BYTES};
