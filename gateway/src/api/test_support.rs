//! Test doubles shared by the API's tests: a local web server standing in for a bot's
//! (answers scripted, requests recorded), and a fake call registry.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use ontime_twilio::{
    signature, CallControl, CallFilter, CallStatus, CallUpdate, CallView, ControlError, Direction,
    NewCall,
};
use tokio::sync::mpsc;

/// One request the server received.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The form body's (or, for a GET, the query's) parameters.
    pub fn params(&self) -> Vec<(String, String)> {
        let raw = if self.method == "GET" {
            self.uri.split_once('?').map_or("", |(_, q)| q)
        } else {
            &self.body
        };
        form_urlencoded::parse(raw.as_bytes())
            .into_owned()
            .collect()
    }

    /// Whether `X-Twilio-Signature` is valid for `url` (as the server was asked it, query
    /// included) and [`TOKEN`].
    pub fn signed_for(&self, url: &str) -> bool {
        let params = if self.method == "GET" {
            Vec::new()
        } else {
            self.params()
        };
        signature::validate(TOKEN, url, &params, self.header("x-twilio-signature"))
    }

    pub fn param(&self, name: &str) -> Option<String> {
        self.params()
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
}

/// A scripted answer: status, body, and a delay before answering.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: String,
    pub delay: Duration,
}

impl Answer {
    pub fn new(status: u16, body: &str) -> Answer {
        Answer {
            status,
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }
}

/// A local HTTP server answering from a script (the last answer repeats) and reporting each
/// request on a channel.
pub(crate) struct WebServer {
    pub addr: SocketAddr,
    pub requests: mpsc::UnboundedReceiver<Received>,
}

impl WebServer {
    pub async fn start(script: Vec<Answer>) -> WebServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("ok: bind loopback");
        let addr = listener.local_addr().expect("ok: bound");
        let (tx, requests) = mpsc::unbounded_channel();
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (tx, script) = (tx.clone(), script.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (tx, script) = (tx.clone(), script.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await.map(|b| b.to_bytes());
                            let body = String::from_utf8_lossy(&body.unwrap_or_default()).into();
                            let _ = tx.send(Received {
                                method: parts.method.to_string(),
                                uri: parts.uri.to_string(),
                                headers: parts.headers,
                                body,
                            });
                            let answer = {
                                let mut s = script.lock().expect("ok: not poisoned");
                                if s.len() > 1 {
                                    s.pop_front()
                                } else {
                                    s.front().cloned()
                                }
                            }
                            .unwrap_or_else(|| Answer::new(200, ""));
                            tokio::time::sleep(answer.delay).await;
                            let mut resp = Response::new(Full::new(Bytes::from(answer.body)));
                            *resp.status_mut() =
                                StatusCode::from_u16(answer.status).expect("ok: valid status");
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        WebServer { addr, requests }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The next request, or a panic after 5 s.
    pub async fn next(&mut self) -> Received {
        tokio::time::timeout(Duration::from_secs(5), self.requests.recv())
            .await
            .expect("ok: a request within 5 s")
            .expect("ok: server running")
    }
}

pub(crate) const ACCOUNT: &str = "AC0123456789abcdef0123456789abcdef";
pub(crate) const TOKEN: &str = "test-auth-token";

/// A call as the fake registry holds it.
pub(crate) fn call(sid: &str, status: CallStatus) -> CallView {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_283_286_988);
    CallView {
        sid: sid.to_string(),
        account_sid: ACCOUNT.to_string(),
        from: "+14158675308".to_string(),
        to: "sip:bot@example.com".to_string(),
        status,
        direction: Direction::Inbound,
        date_created: t,
        date_updated: t + Duration::from_secs(16),
        start_time: Some(t + Duration::from_secs(1)),
        end_time: status.is_final().then(|| t + Duration::from_secs(16)),
        duration_secs: status.is_final().then_some(15),
        sip_call_id: format!("{sid}@ontime"),
        answered_by: None,
        parent_call_sid: None,
    }
}

/// A call registry that records what it is asked.
#[derive(Default)]
pub(crate) struct FakeControl {
    pub calls: Mutex<Vec<CallView>>,
    pub updates: Mutex<Vec<(String, CallUpdate)>>,
    pub created: Mutex<Vec<NewCall>>,
    /// What `update`/`create` answer instead of succeeding.
    pub fail_with: Mutex<Option<ControlError>>,
}

impl CallControl for FakeControl {
    fn account_sid(&self) -> &str {
        ACCOUNT
    }

    fn get(&self, sid: &str) -> Option<CallView> {
        let calls = self.calls.lock().expect("ok: not poisoned");
        calls.iter().find(|c| c.sid == sid).cloned()
    }

    fn list(&self, filter: &CallFilter) -> Vec<CallView> {
        let calls = self.calls.lock().expect("ok: not poisoned");
        calls
            .iter()
            .filter(|c| filter.status.is_none_or(|s| s == c.status))
            .filter(|c| filter.to.as_ref().is_none_or(|t| *t == c.to))
            .filter(|c| filter.from.as_ref().is_none_or(|f| *f == c.from))
            .cloned()
            .collect()
    }

    fn update(&self, sid: &str, update: CallUpdate) -> Result<CallView, ControlError> {
        if let Some(e) = self.fail_with.lock().expect("ok: not poisoned").clone() {
            return Err(e);
        }
        let view = self
            .get(sid)
            .ok_or_else(|| ControlError::NotFound(sid.to_string()))?;
        let mut updates = self.updates.lock().expect("ok: not poisoned");
        updates.push((sid.to_string(), update));
        Ok(view)
    }

    fn create(&self, new: NewCall) -> Result<CallView, ControlError> {
        if let Some(e) = self.fail_with.lock().expect("ok: not poisoned").clone() {
            return Err(e);
        }
        let mut view = call("CAffffffffffffffffffffffffffffffff", CallStatus::Queued);
        view.direction = Direction::OutboundApi;
        view.from = new.from.clone();
        view.to = new.to.clone();
        view.start_time = None;
        self.created.lock().expect("ok: not poisoned").push(new);
        Ok(view)
    }
}
