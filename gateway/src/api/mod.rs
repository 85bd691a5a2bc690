//! The call-control API: a subset of Twilio's 2010-04-01 REST API and TwiML, so bots written
//! against Twilio (pipecat's `TwilioFrameSerializer`, Twilio's helper libraries) hang up,
//! send digits, transfer and dial out through ontime unchanged.
//!
//! - `control`: the contract between the HTTP layer and the gateway's calls ([`CallControl`]);
//! - `twiml`: the TwiML verbs ontime runs, and their parser;
//! - `http`: the HTTP server (routes, Basic auth, Twilio's JSON shapes and errors);
//! - `callback`: status callbacks and TwiML fetches (signed, bounded retries);
//! - `signature`: `X-Twilio-Signature`.

pub mod callback;
pub(crate) mod control;
mod date;
pub mod signature;
#[cfg(test)]
mod test_support;
pub(crate) mod twiml;

pub use control::{
    CallControl, CallFilter, CallStatus, CallUpdate, CallView, ControlError, Direction, NewCall,
    StatusCallback, StatusCallbackEvent,
};
pub use twiml::{parse as parse_twiml, DialTarget, TwimlError, Verb};
