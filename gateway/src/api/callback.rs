//! Requests ontime makes to the bot's web server, as Twilio makes them: TwiML fetches (a
//! `Url=` given to the API, or the gateway's `--voice-url`) and status callbacks. Both carry
//! Twilio's form parameters and an `X-Twilio-Signature`, so a server written for Twilio (and
//! validating with its helper libraries) takes them unchanged.
//!
//! Every request is bounded: a connect-and-answer timeout, a response body limit, a bounded
//! number of status callbacks in flight (beyond it they are dropped and counted, never queued
//! without bound), and a bounded number of retries. Nothing here blocks a call: status
//! callbacks run on their own tasks. The auth token and any credentials in a URL are never
//! logged.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ontime_twilio::webhook::status_params;
use ontime_twilio::{
    signature, twiml, CallView, StatusCallback, StatusCallbackEvent, TwimlError, Verb,
};
use tokio::sync::Semaphore;

use crate::tls::TlsError;

const FORM: &str = "application/x-www-form-urlencoded";
const AGENT: &str = concat!("ontime-gateway/", env!("CARGO_PKG_VERSION"));

/// Bounds of the callback client.
#[derive(Debug, Clone)]
pub struct CallbackConfig {
    /// Connect plus the whole answer, per attempt (Twilio allows 15 s for TwiML; a bot's
    /// server answering slower than 5 s leaves the caller in silence too long).
    pub timeout: Duration,
    /// Largest response body read (a TwiML document is at most 64 KiB).
    pub max_body: usize,
    /// Retries of a status callback after a connection error, a timeout or a 5xx.
    pub retries: u32,
    /// Delay before the first retry; doubled before each next one.
    pub backoff: Duration,
    /// Status callbacks in flight at once (including their retries); more are dropped.
    pub max_in_flight: usize,
    /// TLS for https:// (the gateway's client config: system roots plus `tls_ca_file`);
    /// `None`: the system's roots.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for CallbackConfig {
    fn default() -> Self {
        CallbackConfig {
            timeout: Duration::from_secs(5),
            max_body: twiml::MAX_TWIML_BYTES,
            retries: 3,
            backoff: Duration::from_millis(500),
            tls: None,
            max_in_flight: 256,
        }
    }
}

/// Why a TwiML fetch failed (the API answers 400 with the reason; the call is untouched).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The URL is not an absolute `http://` or `https://` URL.
    #[error("the URL is not valid: {0}")]
    InvalidUrl(&'static str),
    /// No connection, or the connection failed.
    #[error("the request failed: {0}")]
    Request(String),
    /// No complete answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server answered with a status other than 2xx.
    #[error("the server answered HTTP {0}")]
    Status(u16),
    /// The answer was larger than the limit.
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    /// The answer is not UTF-8 text.
    #[error("the answer is not UTF-8 text")]
    NotUtf8,
    /// The answer is not TwiML ontime runs.
    #[error(transparent)]
    Twiml(#[from] TwimlError),
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The client for TwiML fetches and status callbacks. Cheap to clone (shared inside).
#[derive(Clone)]
pub struct Callbacks {
    inner: Arc<Inner>,
}

struct Inner {
    auth_token: String,
    config: CallbackConfig,
    client: HttpClient,
    in_flight: Arc<Semaphore>,
    dropped: AtomicU64,
}

impl std::fmt::Debug for Callbacks {
    // By hand: the auth token must not reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callbacks")
            .field("config", &self.inner.config)
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

/// A request ready to send (again, on a retry).
struct Prepared {
    method_get: bool,
    uri: Uri,
    signature: String,
    basic: Option<HeaderValue>,
    body: Bytes,
    /// Scheme, host and path only: what logs may show.
    redacted: String,
}

/// How one attempt ended.
enum Attempt {
    Answered(StatusCode, Bytes),
    TooLarge,
    Failed(String),
    TimedOut,
}

impl Callbacks {
    /// A client signing with `auth_token`, with these bounds.
    pub fn with_config(
        auth_token: impl Into<String>,
        config: CallbackConfig,
    ) -> Result<Callbacks, TlsError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.timeout));
        // ring named explicitly: rustls' process-wide default is ambiguous (and panics) if
        // another crate ever enables its aws-lc-rs provider too.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // The host's trust store, so that bot servers behind a private CA work (as the
        // agents' wss:// does). A host without one still gets http:// callbacks; https://
        // ones then fail with a certificate error, which is logged.
        let builder = match config.tls.clone().map_or_else(
            || {
                hyper_rustls::HttpsConnectorBuilder::new()
                    .with_provider_and_native_roots(provider.clone())
            },
            |tls| Ok(hyper_rustls::HttpsConnectorBuilder::new().with_tls_config((*tls).clone())),
        ) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "no system root certificates: https:// callbacks will fail");
                let tls = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(TlsError::Rustls)?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls)
            }
        };
        let connector = builder.https_or_http().enable_http1().wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(Callbacks {
            inner: Arc::new(Inner {
                auth_token: auth_token.into(),
                in_flight: Arc::new(Semaphore::new(config.max_in_flight)),
                config,
                client,
                dropped: AtomicU64::new(0),
            }),
        })
    }

    /// Status callbacks dropped so far because [`CallbackConfig::max_in_flight`] were in
    /// flight, or because no runtime was there to send them.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    /// Fetch TwiML from `url` (`POST` with `params` as a form, or `GET` with them in the
    /// query), signed, bounded by the configured timeout and body limit, and parse it.
    pub async fn fetch_twiml(
        &self,
        url: &str,
        method_get: bool,
        params: &[(String, String)],
    ) -> Result<Vec<Verb>, FetchError> {
        let prepared = self.prepare(url, method_get, params)?;
        match self.attempt(&prepared).await {
            Attempt::Answered(status, body) if status.is_success() => {
                let text = std::str::from_utf8(&body).map_err(|_| FetchError::NotUtf8)?;
                Ok(twiml::parse(text.strip_prefix('\u{feff}').unwrap_or(text))?)
            }
            Attempt::Answered(status, _) => Err(FetchError::Status(status.as_u16())),
            Attempt::TooLarge => Err(FetchError::TooLarge(self.inner.config.max_body)),
            Attempt::Failed(why) => Err(FetchError::Request(why)),
            Attempt::TimedOut => Err(FetchError::Timeout(self.inner.config.timeout)),
        }
    }

    /// Send one status callback with these form parameters on its own task, retrying a
    /// connection error, timeout or 5xx up to [`CallbackConfig::retries`] times. Returns at
    /// once; `false` if it was dropped (too many in flight, no runtime, or an invalid URL).
    pub fn send(&self, target: &StatusCallback, params: Vec<(String, String)>) -> bool {
        let prepared = match self.prepare(&target.url, target.method_get, &params) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "status callback not sent");
                return false;
            }
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        let Ok(permit) = self.inner.in_flight.clone().try_acquire_owned() else {
            let n = self.inner.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(url = %prepared.redacted, dropped = n, "status callback dropped: too many in flight");
            return false;
        };
        let this = self.clone();
        runtime.spawn(async move {
            let _permit = permit;
            this.deliver(&prepared).await;
        });
        true
    }

    /// A reporter of one call's progress to `target` (numbering its callbacks from 0).
    pub fn reporter(&self, target: StatusCallback) -> StatusReporter {
        StatusReporter {
            callbacks: self.clone(),
            target,
            sequence: AtomicU32::new(0),
        }
    }

    async fn deliver(&self, prepared: &Prepared) {
        let mut delay = self.inner.config.backoff;
        let attempts = self.inner.config.retries.saturating_add(1);
        for attempt in 1..=attempts {
            let why = match self.attempt(prepared).await {
                Attempt::Answered(status, _) if !status.is_server_error() => {
                    if !status.is_success() {
                        // A 4xx will not get better by asking again.
                        tracing::warn!(url = %prepared.redacted, %status, "status callback refused");
                    }
                    return;
                }
                Attempt::Answered(status, _) => format!("HTTP {status}"),
                // The answer was read in full; whatever it was, the callback arrived.
                Attempt::TooLarge => return,
                Attempt::Failed(why) => why,
                Attempt::TimedOut => "timed out".to_string(),
            };
            if attempt == attempts {
                tracing::warn!(url = %prepared.redacted, attempt, reason = %why, "status callback failed; giving up");
                return;
            }
            tracing::debug!(url = %prepared.redacted, attempt, reason = %why, "status callback failed; retrying");
            tokio::time::sleep(delay).await;
            delay = delay.saturating_mul(2);
        }
    }

    fn prepare(
        &self,
        url: &str,
        method_get: bool,
        params: &[(String, String)],
    ) -> Result<Prepared, FetchError> {
        let target = parse_url(url)?;
        let form = || {
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(params.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .finish()
        };
        let token = &self.inner.auth_token;
        let (full, signature, body) = if method_get {
            // A GET carries the parameters in the query and signs the URL alone.
            let full = if params.is_empty() {
                target.url
            } else if target.url.contains('?') {
                format!("{}&{}", target.url, form())
            } else {
                format!("{}?{}", target.url, form())
            };
            let sig = signature::compute(token, &full, &[]);
            (full, sig, Bytes::new())
        } else {
            let sig = signature::compute(token, &target.url, params);
            (target.url, sig, Bytes::from(form()))
        };
        let uri = full
            .parse::<Uri>()
            .map_err(|_| FetchError::InvalidUrl("not a URL"))?;
        Ok(Prepared {
            method_get,
            uri,
            signature,
            basic: target.basic,
            body,
            redacted: target.redacted,
        })
    }

    async fn attempt(&self, p: &Prepared) -> Attempt {
        let mut req = Request::new(Full::new(p.body.clone()));
        *req.method_mut() = if p.method_get {
            Method::GET
        } else {
            Method::POST
        };
        *req.uri_mut() = p.uri.clone();
        let headers = req.headers_mut();
        headers.insert(USER_AGENT, HeaderValue::from_static(AGENT));
        if !p.method_get {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(FORM));
        }
        if let Ok(sig) = HeaderValue::from_str(&p.signature) {
            headers.insert(signature::HEADER, sig);
        }
        if let Some(basic) = &p.basic {
            headers.insert(AUTHORIZATION, basic.clone());
        }
        let limit = self.inner.config.max_body;
        let exchange = async {
            let resp = match self.inner.client.request(req).await {
                Ok(r) => r,
                Err(e) => return Attempt::Failed(error_chain(&e)),
            };
            let status = resp.status();
            match Limited::new(resp.into_body(), limit).collect().await {
                Ok(body) => Attempt::Answered(status, body.to_bytes()),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => Attempt::TooLarge,
                Err(e) => Attempt::Failed(e.to_string()),
            }
        };
        tokio::time::timeout(self.inner.config.timeout, exchange)
            .await
            .unwrap_or(Attempt::TimedOut)
    }
}

/// An error and its sources, for a log line (hyper's top-level message alone says only
/// "client error (Connect)").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// A URL split for sending: credentials (`https://user:pass@host/...`, which Twilio honours
/// as Basic auth) become a header, and are kept out of the signed URL and of logs.
struct Target {
    url: String,
    basic: Option<HeaderValue>,
    redacted: String,
}

/// Whether `url` is one ontime can send a callback to (absolute `http://` or `https://`).
pub(crate) fn check_url(url: &str) -> Result<(), FetchError> {
    parse_url(url).map(|_| ())
}

fn parse_url(url: &str) -> Result<Target, FetchError> {
    let uri: Uri = url
        .trim()
        .parse()
        .map_err(|_| FetchError::InvalidUrl("not a URL"))?;
    let scheme = match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("http") => "http",
        Some(s) if s.eq_ignore_ascii_case("https") => "https",
        _ => return Err(FetchError::InvalidUrl("the scheme must be http or https")),
    };
    let authority = uri
        .authority()
        .map(|a| a.as_str())
        .ok_or(FetchError::InvalidUrl("no host"))?;
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if host.is_empty() {
        return Err(FetchError::InvalidUrl("no host"));
    }
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
    let basic = match userinfo {
        Some(u) => {
            let encoded = base64::engine::general_purpose::STANDARD.encode(u);
            let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
                .map_err(|_| FetchError::InvalidUrl("bad credentials"))?;
            value.set_sensitive(true);
            Some(value)
        }
        None => None,
    };
    Ok(Target {
        url: format!("{scheme}://{host}{path_and_query}"),
        basic,
        redacted: format!("{scheme}://{host}{}", uri.path()),
    })
}

/// One call's status callbacks: sends the events the call subscribed to, numbered from 0.
#[derive(Debug)]
pub struct StatusReporter {
    callbacks: Callbacks,
    target: StatusCallback,
    sequence: AtomicU32,
}

impl StatusReporter {
    /// Report `event` if the call subscribed to it (returns at once; see [`Callbacks::send`]).
    /// Returns whether a callback was handed to a task.
    pub fn report(
        &self,
        event: StatusCallbackEvent,
        call: &CallView,
        sip_response_code: Option<u16>,
    ) -> bool {
        if !self.target.events.contains(&event) {
            return false;
        }
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let params = status_params(call, event, sequence, sip_response_code, SystemTime::now());
        self.callbacks.send(&self.target, params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::test_support::{call, Answer, WebServer, TOKEN};
    use ontime_twilio::webhook::call_params;
    use ontime_twilio::{CallStatus, API_VERSION};

    fn quick() -> CallbackConfig {
        CallbackConfig {
            timeout: Duration::from_millis(500),
            backoff: Duration::from_millis(10),
            ..CallbackConfig::default()
        }
    }

    fn client(config: CallbackConfig) -> Callbacks {
        Callbacks::with_config(TOKEN, config).expect("ok: client builds")
    }

    const TWIML: &str = "<Response><Play digits=\"1\"/><Hangup/></Response>";

    #[tokio::test]
    async fn fetch_posts_signed_form_and_parses() {
        let mut server = WebServer::start(vec![Answer::new(200, TWIML)]).await;
        let url = server.url("/twiml?x=1");
        let params = call_params(&call("CA1", CallStatus::InProgress));
        let verbs = client(quick())
            .fetch_twiml(&url, false, &params)
            .await
            .expect("ok: TwiML fetched");
        assert_eq!(verbs, vec![Verb::PlayDigits("1".into()), Verb::Hangup]);
        let req = server.next().await;
        assert_eq!(req.method, "POST");
        assert_eq!(req.uri, "/twiml?x=1");
        assert_eq!(req.header("content-type"), FORM);
        assert_eq!(req.param("CallSid").as_deref(), Some("CA1"));
        assert_eq!(req.param("CallStatus").as_deref(), Some("in-progress"));
        assert_eq!(req.param("ApiVersion").as_deref(), Some(API_VERSION));
        assert!(req.signed_for(&url));
    }

    #[tokio::test]
    async fn fetch_get_signs_the_url_with_its_query() {
        let mut server = WebServer::start(vec![Answer::new(200, TWIML)]).await;
        let params = call_params(&call("CA1", CallStatus::Ringing));
        let verbs = client(quick())
            .fetch_twiml(&server.url("/t"), true, &params)
            .await
            .expect("ok: fetched");
        assert_eq!(verbs.len(), 2);
        let req = server.next().await;
        assert_eq!(req.method, "GET");
        assert_eq!(req.body, "");
        assert_eq!(req.param("From").as_deref(), Some("+14158675308"));
        let full = server.url(&req.uri);
        assert!(req.signed_for(&full));
    }

    #[tokio::test]
    async fn credentials_in_the_url_become_basic_auth() {
        let mut server = WebServer::start(vec![Answer::new(200, TWIML)]).await;
        let url = format!("http://user:pa%20ss@{}/t", server.addr);
        client(quick())
            .fetch_twiml(&url, false, &[])
            .await
            .expect("ok: fetched");
        let req = server.next().await;
        let expected = base64::engine::general_purpose::STANDARD.encode("user:pa%20ss");
        assert_eq!(req.header("authorization"), format!("Basic {expected}"));
        // Signed as the server sees the URL: without the credentials.
        assert!(req.signed_for(&server.url("/t")));
    }

    #[tokio::test]
    async fn fetch_failures_say_why() {
        let c = client(quick());
        let mut server = WebServer::start(vec![
            Answer::new(500, "oops"),
            Answer::new(200, "<Response><Say>hi</Say></Response>"),
            Answer::new(200, &"x".repeat(twiml::MAX_TWIML_BYTES + 1)),
            Answer {
                delay: Duration::from_secs(2),
                ..Answer::new(200, TWIML)
            },
        ])
        .await;
        let url = server.url("/t");
        assert_eq!(
            c.fetch_twiml(&url, false, &[]).await,
            Err(FetchError::Status(500))
        );
        let e = c.fetch_twiml(&url, false, &[]).await;
        assert!(matches!(&e, Err(FetchError::Twiml(_))), "{e:?}");
        assert!(e.map_err(|e| e.to_string()).unwrap_err().contains("<Say>"));
        assert_eq!(
            c.fetch_twiml(&url, false, &[]).await,
            Err(FetchError::TooLarge(twiml::MAX_TWIML_BYTES))
        );
        assert!(matches!(
            c.fetch_twiml(&url, false, &[]).await,
            Err(FetchError::Timeout(_))
        ));
        for _ in 0..4 {
            server.next().await;
        }
        for bad in [
            "",
            "ftp://h/x",
            "/relative",
            "http://",
            "not a url",
            "wss://h/x",
        ] {
            assert!(
                matches!(
                    c.fetch_twiml(bad, false, &[]).await,
                    Err(FetchError::InvalidUrl(_))
                ),
                "{bad}"
            );
        }
        // Nothing listens on a port just released.
        let free = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("ok: bind")
            .local_addr()
            .expect("ok: addr");
        let e = c.fetch_twiml(&format!("http://{free}/t"), false, &[]).await;
        assert!(matches!(e, Err(FetchError::Request(_))), "{e:?}");
    }

    #[tokio::test]
    async fn status_callback_retries_a_5xx_then_stops() {
        let mut server = WebServer::start(vec![
            Answer::new(500, ""),
            Answer::new(503, ""),
            Answer::new(200, ""),
        ])
        .await;
        let target = StatusCallback {
            url: server.url("/status"),
            method_get: false,
            events: vec![StatusCallbackEvent::Completed],
        };
        let c = client(quick());
        let params = status_params(
            &call("CA9", CallStatus::Completed),
            StatusCallbackEvent::Completed,
            0,
            None,
            SystemTime::now(),
        );
        assert!(c.send(&target, params));
        let mut seen = Vec::new();
        for _ in 0..3 {
            let req = server.next().await;
            assert!(req.signed_for(&target.url));
            seen.push(req.param("SequenceNumber"));
        }
        assert_eq!(seen, vec![Some("0".to_string()); 3]);
        // The 200 ended it: no fourth attempt.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(server.requests.try_recv().is_err());
    }

    #[tokio::test]
    async fn status_callback_gives_up_after_the_retries_and_not_on_4xx() {
        let mut server = WebServer::start(vec![Answer::new(500, "")]).await;
        let target = StatusCallback {
            url: server.url("/s"),
            method_get: true,
            events: vec![StatusCallbackEvent::Completed],
        };
        let c = client(CallbackConfig {
            retries: 2,
            ..quick()
        });
        assert!(c.send(&target, vec![("a".into(), "b".into())]));
        for _ in 0..3 {
            assert_eq!(server.next().await.method, "GET");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(server.requests.try_recv().is_err());

        let mut refusing = WebServer::start(vec![Answer::new(404, "")]).await;
        let target = StatusCallback {
            url: refusing.url("/s"),
            ..target
        };
        assert!(c.send(&target, vec![]));
        refusing.next().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(refusing.requests.try_recv().is_err());
    }

    #[tokio::test]
    async fn in_flight_callbacks_are_bounded() {
        let mut server = WebServer::start(vec![Answer {
            delay: Duration::from_millis(300),
            ..Answer::new(200, "")
        }])
        .await;
        let target = StatusCallback {
            url: server.url("/s"),
            method_get: false,
            events: vec![],
        };
        let c = client(CallbackConfig {
            max_in_flight: 1,
            ..quick()
        });
        assert!(c.send(&target, vec![]));
        assert!(!c.send(&target, vec![]));
        assert_eq!(c.dropped(), 1);
        server.next().await;
        // Once the first is answered, there is room again.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(c.send(&target, vec![]));
        server.next().await;
        assert!(!format!("{c:?}").contains(TOKEN));
    }

    #[tokio::test]
    async fn reporter_sends_subscribed_events_numbered_from_zero() {
        let mut server = WebServer::start(vec![Answer::new(200, "")]).await;
        let reporter = client(quick()).reporter(StatusCallback {
            url: server.url("/s"),
            method_get: false,
            events: vec![
                StatusCallbackEvent::Answered,
                StatusCallbackEvent::Completed,
            ],
        });
        let ringing = call("CA5", CallStatus::Ringing);
        assert!(!reporter.report(StatusCallbackEvent::Ringing, &ringing, Some(180)));
        assert!(reporter.report(
            StatusCallbackEvent::Answered,
            &call("CA5", CallStatus::InProgress),
            Some(200)
        ));
        let first = server.next().await;
        assert!(reporter.report(
            StatusCallbackEvent::Completed,
            &call("CA5", CallStatus::Busy),
            Some(486)
        ));
        let second = server.next().await;

        assert_eq!(first.param("SequenceNumber").as_deref(), Some("0"));
        assert_eq!(first.param("CallStatus").as_deref(), Some("in-progress"));
        assert_eq!(first.param("SipResponseCode").as_deref(), Some("200"));
        assert_eq!(first.param("CallDuration"), None);
        assert_eq!(
            first.param("CallbackSource").as_deref(),
            Some("call-progress-events")
        );
        assert!(first
            .param("Timestamp")
            .is_some_and(|t| t.ends_with(" +0000")));

        assert_eq!(second.param("SequenceNumber").as_deref(), Some("1"));
        assert_eq!(second.param("CallStatus").as_deref(), Some("busy"));
        assert_eq!(second.param("CallDuration").as_deref(), Some("15"));
        assert_eq!(second.param("SipResponseCode").as_deref(), Some("486"));
        assert_eq!(second.param("Direction").as_deref(), Some("inbound"));
    }
}
