//! The call-control API as the gateway serves it: Twilio's 2010-04-01 REST API and TwiML, so
//! bots written against Twilio (pipecat's `TwilioFrameSerializer`, Twilio's helper libraries)
//! hang up, send digits, transfer and dial out through ontime unchanged. What requests mean,
//! TwiML, Twilio's JSON and errors and signatures are `ontime_twilio`'s (sans-IO); here is
//! what does I/O:
//!
//! - `http`: the HTTP server ([`serve`]: hyper, bounded bodies and connections, counted);
//! - `callback`: TwiML fetches and status callbacks to the bot's server ([`Callbacks`]:
//!   signed, bounded).

mod callback;
mod http;
#[cfg(test)]
mod test_support;

pub(crate) use callback::{CallbackConfig, Callbacks, StatusReporter};
pub(crate) use http::{serve, ApiState};

/// The gateway's side of the API: bind and serve it, build its callback client.
pub(crate) mod wiring {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use ontime_twilio::CallControl;

    use super::{serve, ApiState, Callbacks};
    use crate::config::Config;

    /// The callback client of the gateway: signs with the API's auth token (empty without an
    /// API: voice-webhook fetches then carry a signature nobody can check).
    pub(crate) fn callbacks(config: &Config) -> Result<Callbacks, crate::tls::TlsError> {
        let token = config
            .api_auth_token
            .as_ref()
            .map_or(String::new(), |t| t.expose().to_string());
        let tls = crate::tls::client_config(config.tls_ca_file.as_deref())?;
        Callbacks::with_config(
            token,
            super::CallbackConfig {
                tls: Some(tls),
                ..super::CallbackConfig::default()
            },
        )
    }

    /// Bind the API on `addr` and serve it until the task is aborted.
    pub(crate) async fn start(
        addr: SocketAddr,
        control: Arc<dyn CallControl>,
        config: &Config,
        callbacks: Callbacks,
    ) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        let token = config
            .api_auth_token
            .as_ref()
            .map_or(String::new(), |t| t.expose().to_string());
        let state = Arc::new(ApiState::new(control, token, callbacks));
        let task = tokio::spawn(serve(listener, state, std::future::pending::<()>()));
        Ok((bound, task))
    }
}
