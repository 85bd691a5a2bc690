//! The call-control API: a subset of Twilio's 2010-04-01 REST API and TwiML, so bots written
//! against Twilio (pipecat's `TwilioFrameSerializer`, Twilio's helper libraries) hang up,
//! send digits, transfer and dial out through ontime unchanged.
//!
//! - `control`: the contract between the HTTP layer and the gateway's calls ([`CallControl`]);
//! - `twiml`: the TwiML verbs ontime runs, and their parser;
//! - `http`: the HTTP server (routes, Basic auth, Twilio's JSON shapes and errors);
//! - `callback`: status callbacks and TwiML fetches (signed, bounded retries);
//! - `signature`: `X-Twilio-Signature`.

pub(crate) mod control;
pub(crate) mod twiml;

pub use control::{
    CallControl, CallFilter, CallStatus, CallUpdate, CallView, ControlError, Direction, NewCall,
    StatusCallback, StatusCallbackEvent,
};
pub use twiml::{DialTarget, Verb};

// ---- wiring placeholders, replaced when the HTTP layer lands ----
use std::sync::Arc;

/// Serve the API on `addr` (bound address and task).
pub(crate) async fn serve(
    addr: std::net::SocketAddr,
    _control: Arc<dyn CallControl>,
    _config: &crate::config::Config,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let l = tokio::net::TcpListener::bind(addr).await?;
    let a = l.local_addr()?;
    Ok((a, tokio::spawn(async move { drop(l) })))
}

/// The status-callback sink.
pub(crate) fn status_callbacks(
    _config: &crate::config::Config,
) -> Option<crate::registry::CallbackSink> {
    None
}

/// The voice webhook fetcher.
pub(crate) fn voice_fetcher(_config: &crate::config::Config) -> crate::routing::Fetcher {
    Arc::new(|_, _| Box::pin(async { Err("not yet".to_string()) }))
}
