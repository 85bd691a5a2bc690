//! Inbound routing, like Twilio's voice webhook: each inbound call runs the TwiML the voice
//! route gives it (`--voice-url`, fetched per call, or `--voice-twiml`, one document for every
//! call); without one, the configured agent takes every call. Decided while the call rings, so
//! `<Reject>` refuses it before an answer and `<Connect><Stream>` picks its bot.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ontime_twilio::Verb;
use tracing::warn;

use crate::agent::{Admission, Agent, CallInfo};

/// Fetches TwiML: `(url, Twilio's form parameters)` → the verbs, or why not.
pub(crate) type Fetcher = Arc<
    dyn Fn(
            String,
            Vec<(String, String)>,
        ) -> Pin<Box<dyn Future<Output = Result<Vec<Verb>, String>> + Send>>
        + Send
        + Sync,
>;

/// What a ringing call is answered with: the verdict and the TwiML it runs once answered.
pub(crate) type Routed = Pin<Box<dyn Future<Output = (Admission, Vec<Verb>)> + Send>>;

/// Where inbound calls' TwiML comes from.
#[derive(Clone)]
pub(crate) enum VoiceRoute {
    /// No TwiML: the agent takes every call.
    Agent,
    /// The same document for every call.
    Twiml(Arc<Vec<Verb>>),
    /// A webhook asked per call.
    Url {
        /// The URL.
        url: String,
        /// How to ask it.
        fetch: Fetcher,
    },
}

impl VoiceRoute {
    /// What to wait for while the call rings; `None`: nothing, answer at once.
    pub(crate) fn prepare(&self, info: &CallInfo, agent: Arc<dyn Agent>) -> Option<Routed> {
        let program: Pin<Box<dyn Future<Output = Result<Vec<Verb>, String>> + Send>> = match self {
            VoiceRoute::Agent => {
                let prepared = agent.prepare_call(info)?;
                return Some(Box::pin(async move { (prepared.await, Vec::new()) }));
            }
            VoiceRoute::Twiml(verbs) => {
                let verbs = verbs.as_ref().clone();
                Box::pin(async move { Ok(verbs) })
            }
            VoiceRoute::Url { url, fetch } => fetch(url.clone(), webhook_params(info)),
        };
        let info = info.clone();
        Some(Box::pin(async move {
            let verbs = match program.await {
                Ok(v) => v,
                Err(why) => {
                    // Twilio would play "an application error has occurred"; a 503 lets the
                    // trunk try another route instead.
                    warn!(%why, "voice route failed: 503");
                    return (Admission::Reject, Vec::new());
                }
            };
            match verbs.first() {
                Some(Verb::Reject { busy }) => (Admission::Refuse { busy: *busy }, Vec::new()),
                // The call's own bot: the default agent is not prepared (or used).
                Some(Verb::ConnectStream { .. }) => (Admission::Answer, verbs),
                _ => match agent.prepare_call(&info) {
                    Some(prepared) => (prepared.await, verbs),
                    None => (Admission::Answer, verbs),
                },
            }
        }))
    }
}

/// Twilio's voice webhook parameters for a ringing inbound call, with each of the INVITE's
/// `X-` headers as `SipHeader_X-…`, as Twilio sends those of calls to its SIP domains.
pub(crate) fn webhook_params(info: &CallInfo) -> Vec<(String, String)> {
    let mut params = vec![
        ("CallSid".into(), info.call_sid.clone()),
        ("AccountSid".into(), info.account_sid.clone()),
        ("From".into(), info.from.clone()),
        ("To".into(), info.to.clone()),
        ("CallStatus".into(), "ringing".into()),
        ("Direction".into(), info.direction.as_str().into()),
        ("ApiVersion".into(), "2010-04-01".into()),
    ];
    params.extend(info.x_headers.webhook_params());
    params
}
