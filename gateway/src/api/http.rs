//! The API's HTTP server: Twilio's 2010-04-01 Calls resource (fetch, update, list, create)
//! with HTTP Basic auth, Twilio's JSON shapes and Twilio's error codes, so that Twilio's helper
//! libraries and pipecat's `TwilioFrameSerializer` (given ontime as `base_url`) work
//! unchanged. hyper directly, like the ops endpoint: four routes need no framework. What a
//! request means and what its answer says is `ontime_twilio`'s (sans-IO); this file reads
//! bodies, fetches `Url=` TwiML and writes responses.
//!
//! Every request is bounded (body size, header and body read time, connections) and counted
//! in `ontime_api_requests_total{route,status}`. Nothing here waits on a call: the
//! [`CallControl`] methods return at once; only a `Url=` fetch awaits the bot's server, under
//! the callback client's timeout.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use ontime_twilio::request::{authenticate, is_form, parse_path, Resource};
use ontime_twilio::{
    json, webhook, CallControl, CallUpdate, ControlError, CreateRequest, Error, ListRequest,
    Params, TwimlSource, UpdateRequest,
};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::callback::{self, Callbacks, FetchError};
use crate::ops::metrics::API_REQUESTS_TOTAL;

/// Largest request body read (a form carrying a 64 KiB TwiML document fits, URL-encoded, in
/// most cases; Twilio's own request limit is of the same order).
const MAX_BODY: usize = 64 * 1024;
/// Time a client has to send a request's headers, and then its body.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed on accept (bots make a handful of calls).
const MAX_CONNECTIONS: usize = 256;

/// What the server needs: the calls, the credentials, and the client for `Url=` fetches.
pub struct ApiState {
    control: Arc<dyn CallControl>,
    auth_token: String,
    callbacks: Callbacks,
}

impl ApiState {
    /// Requests authenticate as `control.account_sid()` with `auth_token`; `Url=` TwiML is
    /// fetched with `callbacks`.
    pub fn new(
        control: Arc<dyn CallControl>,
        auth_token: impl Into<String>,
        callbacks: Callbacks,
    ) -> ApiState {
        ApiState {
            control,
            auth_token: auth_token.into(),
            callbacks,
        }
    }
}

impl std::fmt::Debug for ApiState {
    // By hand: the auth token must not reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("account_sid", &self.control.account_sid())
            .finish_non_exhaustive()
    }
}

/// Serve the API on `listener` until `shutdown` completes. Connections already open finish
/// on their own tasks.
pub async fn serve(
    listener: TcpListener,
    state: Arc<ApiState>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and the like: pause rather than spin.
                    tracing::warn!(error = %e, "API accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::warn!("API connection refused: {MAX_CONNECTIONS} open");
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req).await) }
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// An API answer that is not a success: Twilio's error as hyper's response.
fn error_response(e: &Error) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut r = json_response(status, &e.body());
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static(Error::WWW_AUTHENTICATE),
        );
    }
    r
}

/// A `Url=` that could not be fetched or run: the call is left as it was.
fn fetch_error(e: FetchError) -> Error {
    match e {
        FetchError::Twiml(t) => t.into(),
        FetchError::InvalidUrl(_) => Error::bad(21205, format!("Url is not valid: {e}")),
        other => Error::bad(11200, format!("HTTP retrieval failure: {other}")),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

/// Handle one request and count it.
async fn handle(state: &ApiState, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let resource = parse_path(&path);
    let route = match (&resource, req.method()) {
        (Some((_, Resource::Call(_))), &Method::GET) => "call_get",
        (Some((_, Resource::Call(_))), &Method::POST) => "call_update",
        (Some((_, Resource::Calls)), &Method::GET) => "calls_list",
        (Some((_, Resource::Calls)), &Method::POST) => "calls_create",
        _ => "unknown",
    };
    let response = match route_request(state, req, resource, &path).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    metrics::counter!(
        API_REQUESTS_TOTAL,
        "route" => route,
        "status" => response.status().as_u16().to_string()
    )
    .increment(1);
    response
}

async fn route_request(
    state: &ApiState,
    req: Request<Incoming>,
    resource: Option<(&str, Resource<'_>)>,
    path: &str,
) -> Result<Response<Full<Bytes>>, Error> {
    // A header that is not visible ASCII is no credentials at all.
    let authorization = req
        .headers()
        .get(AUTHORIZATION)
        .map(|h| h.to_str().unwrap_or(""));
    authenticate(
        authorization,
        state.control.account_sid(),
        &state.auth_token,
    )?;
    let Some((account, resource)) = resource else {
        return Err(Error::not_found(path));
    };
    if account != state.control.account_sid() {
        return Err(Error::not_found(path));
    }
    let method = req.method().clone();
    if method != Method::GET && method != Method::POST {
        return Err(Error::new(
            405,
            20004,
            format!("Method {method} not allowed on {path}"),
        ));
    }
    let params = if method == Method::POST {
        read_form(req).await?
    } else {
        Params::parse(req.uri().query().unwrap_or("").as_bytes())
    };
    let control = &*state.control;
    match (resource, method == Method::GET) {
        (Resource::Call(sid), true) => {
            params.only(&[])?;
            let call = control.get(sid).ok_or_else(|| Error::not_found(path))?;
            Ok(json_response(StatusCode::OK, &json::call(&call)))
        }
        (Resource::Call(sid), false) => update(state, sid, &params, path).await,
        (Resource::Calls, true) => {
            let list = ListRequest::parse(&params)?;
            let calls = control.list(&list.filter);
            let page = json::calls_page(control.account_sid(), &list, &calls);
            Ok(json_response(StatusCode::OK, &page))
        }
        (Resource::Calls, false) => create(state, &params, path).await,
    }
}

/// Read a form body: `application/x-www-form-urlencoded` only, at most [`MAX_BODY`] bytes,
/// within [`READ_TIMEOUT`].
async fn read_form(req: Request<Incoming>) -> Result<Params, Error> {
    let too_large = || {
        Error::new(
            413,
            20001,
            format!("The request body is larger than {MAX_BODY} bytes"),
        )
    };
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?").to_string());
    let declared: Option<usize> = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        return Err(too_large());
    }
    let is_form = content_type.as_deref().is_some_and(is_form);
    let body = match tokio::time::timeout(
        READ_TIMEOUT,
        Limited::new(req.into_body(), MAX_BODY).collect(),
    )
    .await
    {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Ok(Err(_)) | Err(_) => return Err(Error::bad(20001, "The request body could not be read")),
    };
    // A POST without a body (no parameters) needs no Content-Type.
    let empty = body.is_empty() && content_type.is_none();
    if !is_form && !empty {
        return Err(Error::bad(
            20001,
            format!(
                "Content-Type must be application/x-www-form-urlencoded, got '{}'",
                content_type.as_deref().unwrap_or("")
            ),
        ));
    }
    Ok(Params::parse(&body))
}

/// `POST Calls/{CallSid}.json`: what [`UpdateRequest`] reads, a `Url=` fetched here.
async fn update(
    state: &ApiState,
    sid: &str,
    params: &Params,
    path: &str,
) -> Result<Response<Full<Bytes>>, Error> {
    let control = &*state.control;
    let update = match UpdateRequest::parse(params)? {
        UpdateRequest::Apply(update) => update,
        UpdateRequest::Fetch { url, method_get } => {
            let call = control.get(sid).ok_or_else(|| Error::not_found(path))?;
            // Fetching TwiML for a call that cannot run it would only cost the bot a request.
            if call.status.is_final() {
                return Err(Error::control(ControlError::NotInProgress, path));
            }
            let verbs = state
                .callbacks
                .fetch_twiml(&url, method_get, &webhook::call_params(&call))
                .await
                .map_err(fetch_error)?;
            CallUpdate::Run(verbs)
        }
        // Nothing asked (or a kind of update this server does not know): the call as it is.
        _ => {
            let call = control.get(sid).ok_or_else(|| Error::not_found(path))?;
            return Ok(json_response(StatusCode::OK, &json::call(&call)));
        }
    };
    let call = control
        .update(sid, update)
        .map_err(|e| Error::control(e, path))?;
    Ok(json_response(StatusCode::OK, &json::call(&call)))
}

/// `POST Calls.json`: dial out, with what [`CreateRequest`] reads; a `Url=` fetched here.
async fn create(
    state: &ApiState,
    params: &Params,
    path: &str,
) -> Result<Response<Full<Bytes>>, Error> {
    let request = CreateRequest::parse(params)?;
    if let Some(cb) = &request.status_callback {
        callback::check_url(&cb.url)
            .map_err(|e| Error::bad(21205, format!("StatusCallback is not valid: {e}")))?;
    }
    let amd_callback = request
        .machine_detection
        .as_ref()
        .and_then(|amd| amd.status_callback.as_ref());
    if let Some(cb) = amd_callback {
        callback::check_url(&cb.url)
            .map_err(|e| Error::bad(21205, format!("AsyncAmdStatusCallback is not valid: {e}")))?;
    }
    let twiml = match &request.twiml {
        TwimlSource::Inline(verbs) => verbs.clone(),
        // Fetched once answered, with the verdict (answering-machine detection, not async).
        TwimlSource::Fetch { url, .. } if request.fetch_waits_for_verdict() => {
            callback::check_url(url)
                .map_err(|e| Error::bad(21205, format!("Url is not valid: {e}")))?;
            Vec::new()
        }
        TwimlSource::Fetch { url, method_get } => state
            .callbacks
            .fetch_twiml(
                url,
                *method_get,
                &request.fetch_params(state.control.account_sid()),
            )
            .await
            .map_err(fetch_error)?,
        _ => {
            return Err(Error::bad(
                21205,
                "A 'Url' or 'Twiml' parameter is required",
            ))
        }
    };
    let call = state
        .control
        .create(request.into_new_call(twiml))
        .map_err(|e| Error::control(e, path))?;
    Ok(json_response(StatusCode::CREATED, &json::call(&call)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::test_support::{call, Answer, FakeControl, WebServer, ACCOUNT, TOKEN};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
    use ontime_twilio::request::PREFIX;
    use ontime_twilio::{CallStatus, Direction, StatusCallbackEvent, Verb};

    use base64::Engine as _;

    const CALL: &str = "CA0123456789abcdef0123456789abcdef";

    /// A server on 127.0.0.1:0 over a fake registry holding one in-progress call.
    struct Harness {
        addr: std::net::SocketAddr,
        control: Arc<FakeControl>,
        callbacks: Callbacks,
        _stop: tokio::sync::oneshot::Sender<()>,
    }

    async fn start() -> Harness {
        start_with(TOKEN).await
    }

    async fn start_with(auth_token: &str) -> Harness {
        let control = Arc::new(FakeControl::default());
        control
            .calls
            .lock()
            .expect("ok: not poisoned")
            .push(call(CALL, CallStatus::InProgress));
        let callbacks = Callbacks::with_config(
            TOKEN,
            callback::CallbackConfig {
                timeout: Duration::from_secs(2),
                backoff: Duration::from_millis(10),
                ..Default::default()
            },
        )
        .expect("ok: client builds");
        let state = Arc::new(ApiState::new(
            control.clone(),
            auth_token,
            callbacks.clone(),
        ));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("ok: bind");
        let addr = listener.local_addr().expect("ok: bound");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, state, async {
            let _ = stopped.await;
        }));
        Harness {
            addr,
            control,
            callbacks,
            _stop: stop,
        }
    }

    struct Reply {
        status: u16,
        headers: hyper::HeaderMap,
        json: Value,
    }

    impl Reply {
        fn code(&self) -> u64 {
            self.json["code"].as_u64().unwrap_or(0)
        }
        fn message(&self) -> &str {
            self.json["message"].as_str().unwrap_or("")
        }
    }

    const FORM: Option<&str> = Some("application/x-www-form-urlencoded");
    const CREDS: Option<(&str, &str)> = Some((ACCOUNT, TOKEN));

    impl Harness {
        async fn send(
            &self,
            method: &str,
            path: &str,
            creds: Option<(&str, &str)>,
            content_type: Option<&str>,
            body: &str,
        ) -> Reply {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let mut req = Request::new(Full::new(Bytes::from(body.to_string())));
            *req.method_mut() = method.parse().expect("ok: method");
            *req.uri_mut() = format!("http://{}{path}", self.addr)
                .parse()
                .expect("ok: uri");
            if let Some((user, password)) = creds {
                let b64 =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                req.headers_mut().insert(
                    AUTHORIZATION,
                    format!("Basic {b64}").parse().expect("ok: header"),
                );
            }
            if let Some(ct) = content_type {
                req.headers_mut()
                    .insert(CONTENT_TYPE, ct.parse().expect("ok: header"));
            }
            let resp = client.request(req).await.expect("ok: the server answers");
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp
                .into_body()
                .collect()
                .await
                .expect("ok: body")
                .to_bytes();
            let json = serde_json::from_slice(&body).expect("ok: every answer is JSON");
            Reply {
                status,
                headers,
                json,
            }
        }

        async fn get(&self, path: &str) -> Reply {
            self.send("GET", path, CREDS, None, "").await
        }

        async fn post(&self, path: &str, form: &[(&str, &str)]) -> Reply {
            let body = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish();
            self.send("POST", path, CREDS, FORM, &body).await
        }

        fn updates(&self) -> Vec<(String, CallUpdate)> {
            self.control
                .updates
                .lock()
                .expect("ok: not poisoned")
                .clone()
        }
    }

    fn call_path(sid: &str) -> String {
        format!("{PREFIX}{ACCOUNT}/Calls/{sid}.json")
    }

    fn calls_path() -> String {
        format!("{PREFIX}{ACCOUNT}/Calls.json")
    }

    /// Counts of `ontime_api_requests_total` read from a Prometheus rendering.
    fn count(recorder: &PrometheusRecorder, route: &str, status: u16) -> u64 {
        let text = recorder.handle().render();
        text.lines()
            .filter(|l| l.starts_with(&format!("{API_REQUESTS_TOTAL}{{")))
            .filter(|l| l.contains(&format!("route=\"{route}\"")))
            .filter(|l| l.contains(&format!("status=\"{status}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Runs `test` on a one-thread runtime with `recorder` as that thread's recorder, so that
    /// the server's tasks (on the same thread) count into it.
    fn with_recorder<F: Future<Output = ()>>(recorder: &PrometheusRecorder, test: F) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("ok: runtime");
        metrics::with_local_recorder(recorder, || rt.block_on(test));
    }

    #[test]
    fn auth_routes_errors_and_counts() {
        let recorder = PrometheusBuilder::new().build_recorder();
        with_recorder(&recorder, async {
            let h = start().await;
            let path = call_path(CALL);

            // No credentials, wrong token, wrong user.
            for creds in [None, Some((ACCOUNT, "wrong")), Some(("ACother", TOKEN))] {
                let r = h.send("GET", &path, creds, None, "").await;
                assert_eq!((r.status, r.code()), (401, 20003), "{creds:?}");
                assert_eq!(
                    r.headers
                        .get(WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok()),
                    Some("Basic realm=\"Twilio API\"")
                );
                assert_eq!(r.json["status"], 401);
                assert_eq!(
                    r.json["more_info"],
                    "https://www.twilio.com/docs/errors/20003"
                );
            }
            let r = h.send("GET", &path, None, None, "").await;
            assert!(r.message().contains("No credentials"));

            // Unknown call; another account's path.
            let r = h.get(&call_path("CAnope")).await;
            assert_eq!((r.status, r.code()), (404, 20404));
            assert!(r.message().contains("CAnope"), "{}", r.message());
            let other = format!("{PREFIX}AC0000000000000000000000000000000/Calls/{CALL}.json");
            let r = h.get(&other).await;
            assert_eq!((r.status, r.code()), (404, 20404));

            // The Call resource, with and without `.json`.
            let r = h.get(&path).await;
            assert_eq!(r.status, 200);
            let j = &r.json;
            assert_eq!(j["sid"], CALL);
            assert_eq!(j["account_sid"], ACCOUNT);
            assert_eq!(j["status"], "in-progress");
            assert_eq!(j["direction"], "inbound");
            assert_eq!(j["api_version"], "2010-04-01");
            assert_eq!(j["date_created"], "Tue, 31 Aug 2010 20:36:28 +0000");
            assert_eq!(j["start_time"], "Tue, 31 Aug 2010 20:36:29 +0000");
            assert_eq!(j["end_time"], Value::Null);
            assert_eq!(j["duration"], Value::Null);
            assert_eq!(j["from"], "+14158675308");
            assert_eq!(j["from_formatted"], "(415) 867-5308");
            assert_eq!(j["to_formatted"], "sip:bot@example.com");
            assert_eq!(j["sip_call_id"], format!("{CALL}@ontime"));
            assert_eq!(j["uri"], path);
            for null in [
                "annotation",
                "answered_by",
                "caller_name",
                "forwarded_from",
                "group_sid",
                "parent_call_sid",
                "phone_number_sid",
                "price",
                "trunk_sid",
            ] {
                assert_eq!(j[null], Value::Null, "{null}");
            }
            assert_eq!(j["price_unit"], "USD");
            assert_eq!(j["queue_time"], "0");
            assert!(j["subresource_uris"]["recordings"].is_string());
            let r = h.get(path.trim_end_matches(".json")).await;
            assert_eq!(r.status, 200);

            // pipecat's hang-up: a form POST of Status=completed.
            let r = h.post(&path, &[("Status", "completed")]).await;
            assert_eq!(r.status, 200);
            assert_eq!(r.json["sid"], CALL);
            assert_eq!(h.updates(), vec![(CALL.to_string(), CallUpdate::Complete)]);

            // TwiML ontime does not run: 400 naming the verb, the call untouched.
            let r = h
                .post(&path, &[("Twiml", "<Response><Say>Hi</Say></Response>")])
                .await;
            assert_eq!((r.status, r.code()), (400, 12100));
            assert!(r.message().contains("Say"), "{}", r.message());
            // Wrong content type, too large, several asks at once, an unknown parameter.
            let r = h
                .send(
                    "POST",
                    &path,
                    CREDS,
                    Some("application/json"),
                    "{\"Status\":\"completed\"}",
                )
                .await;
            assert_eq!(r.status, 400);
            assert!(r.message().contains("Content-Type"));
            let big = format!("Twiml={}", "a".repeat(MAX_BODY));
            let r = h.send("POST", &path, CREDS, FORM, &big).await;
            assert_eq!(r.status, 413);
            let r = h
                .post(&path, &[("Status", "completed"), ("Twiml", "<Response/>")])
                .await;
            assert_eq!(r.status, 400);
            let r = h.post(&path, &[("FallbackUrl", "http://x/")]).await;
            assert_eq!(r.status, 400);
            assert!(r.message().contains("FallbackUrl"));
            let r = h.post(&path, &[("Status", "busy")]).await;
            assert_eq!((r.status, r.code()), (400, 21201));
            assert_eq!(h.updates().len(), 1);

            // What the registry refuses, in Twilio's codes.
            *h.control.fail_with.lock().expect("ok: not poisoned") =
                Some(ControlError::NotInProgress);
            let r = h
                .post(&path, &[("Twiml", "<Response><Hangup/></Response>")])
                .await;
            assert_eq!((r.status, r.code()), (400, 21220));
            let dial = [
                ("To", "+15551234567"),
                ("From", "+15557654321"),
                ("Twiml", "<Response/>"),
            ];
            for (refusal, status, code) in [
                (ControlError::AtCapacity, 429, 20429),
                (ControlError::NoTrunk, 400, 21210),
            ] {
                *h.control.fail_with.lock().expect("ok: not poisoned") = Some(refusal);
                let r = h.post(&calls_path(), &dial).await;
                assert_eq!((r.status, r.code()), (status, code));
            }

            // Other methods and paths.
            let r = h.send("DELETE", &path, CREDS, None, "").await;
            assert_eq!((r.status, r.code()), (405, 20004));
            let r = h.get("/2010-04-01/Accounts").await;
            assert_eq!(r.status, 404);
            let r = h
                .get(&format!("{PREFIX}{ACCOUNT}/Calls/{CALL}/Recordings.json"))
                .await;
            assert_eq!(r.status, 404);
        });
        for (route, status, n) in [
            ("call_get", 401, 4),
            ("call_get", 404, 2),
            ("call_get", 200, 2),
            ("call_update", 200, 1),
            ("call_update", 400, 6),
            ("call_update", 413, 1),
            ("calls_create", 429, 1),
            ("calls_create", 400, 1),
            ("unknown", 405, 1),
            ("unknown", 404, 2),
        ] {
            assert_eq!(count(&recorder, route, status), n, "{route} {status}");
        }
        let total: u64 = recorder
            .handle()
            .render()
            .lines()
            .filter(|l| l.starts_with(&format!("{API_REQUESTS_TOTAL}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        assert_eq!(total, 21);
    }

    #[tokio::test]
    async fn url_runs_the_fetched_twiml_or_leaves_the_call_alone() {
        let h = start().await;
        let path = call_path(CALL);
        let mut web = WebServer::start(vec![
            Answer::new(200, "<Response><Play digits=\"9\"/><Hangup/></Response>"),
            Answer::new(500, "down"),
            Answer::new(200, "<Response><Gather/></Response>"),
        ])
        .await;
        let url = web.url("/voice");

        let r = h.post(&path, &[("Url", &url), ("Method", "POST")]).await;
        assert_eq!(r.status, 200);
        assert_eq!(
            h.updates(),
            vec![(
                CALL.to_string(),
                CallUpdate::Run(vec![Verb::PlayDigits("9".into()), Verb::Hangup])
            )]
        );
        let fetch = web.next().await;
        assert_eq!(fetch.param("CallSid").as_deref(), Some(CALL));
        assert!(fetch.signed_for(&url));

        let r = h.post(&path, &[("Url", &url)]).await;
        assert_eq!((r.status, r.code()), (400, 11200));
        assert!(r.message().contains("500"), "{}", r.message());
        let r = h.post(&path, &[("Url", &url)]).await;
        assert_eq!((r.status, r.code()), (400, 12100));
        assert!(r.message().contains("Gather"), "{}", r.message());
        let r = h.post(&path, &[("Url", "ftp://example.com/x")]).await;
        assert_eq!((r.status, r.code()), (400, 21205));
        let r = h.post(&path, &[("Url", &url), ("Method", "PUT")]).await;
        assert_eq!(r.status, 400);
        assert!(r.message().contains("Method"));
        assert_eq!(h.updates().len(), 1, "failed fetches leave the call alone");

        // An ended call: refused before anything is fetched.
        h.control
            .calls
            .lock()
            .expect("ok: not poisoned")
            .push(call("CAended", CallStatus::Completed));
        let r = h.post(&call_path("CAended"), &[("Url", &url)]).await;
        assert_eq!((r.status, r.code()), (400, 21220));
        // Fetched: the first, the 500 and the <Gather>; nothing for the others.
        for _ in 0..2 {
            assert_eq!(web.next().await.uri, "/voice");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(web.requests.try_recv().is_err());
    }

    #[tokio::test]
    async fn list_pages_like_twilio() {
        let h = start().await;
        {
            let mut calls = h.control.calls.lock().expect("ok: not poisoned");
            for i in 1..5 {
                calls.push(call(&format!("CA{i}"), CallStatus::Completed));
            }
        }
        let base = calls_path();
        let r = h.get(&format!("{base}?PageSize=2&Page=1")).await;
        assert_eq!(r.status, 200);
        let j = &r.json;
        assert_eq!(j["calls"].as_array().map(Vec::len), Some(2));
        assert_eq!(j["calls"][0]["sid"], "CA2");
        assert_eq!(
            (j["page"].clone(), j["page_size"].clone()),
            (1.into(), 2.into())
        );
        assert_eq!((j["start"].clone(), j["end"].clone()), (2.into(), 3.into()));
        assert_eq!(j["first_page_uri"], format!("{base}?PageSize=2&Page=0"));
        assert_eq!(j["previous_page_uri"], format!("{base}?PageSize=2&Page=0"));
        assert_eq!(j["next_page_uri"], format!("{base}?PageSize=2&Page=2"));
        assert_eq!(j["uri"], format!("{base}?PageSize=2&Page=1"));

        // Following next_page_uri as the helper libraries do.
        let next = j["next_page_uri"].as_str().unwrap_or("").to_string();
        let r = h.get(&next).await;
        assert_eq!(r.json["calls"].as_array().map(Vec::len), Some(1));
        assert_eq!(r.json["next_page_uri"], Value::Null);
        assert_eq!(r.json["end"], 4);

        // Defaults, the maximum, filters kept in the URIs.
        let r = h.get(&base).await;
        assert_eq!(r.json["page_size"], 50);
        assert_eq!(r.json["calls"].as_array().map(Vec::len), Some(5));
        assert_eq!(r.json["previous_page_uri"], Value::Null);
        let r = h.get(&format!("{base}?PageSize=5000")).await;
        assert_eq!(r.json["page_size"], 1000);
        let r = h
            .get(&format!("{base}?Status=in-progress&PageSize=1"))
            .await;
        assert_eq!(r.json["calls"].as_array().map(Vec::len), Some(1));
        assert_eq!(r.json["calls"][0]["sid"], CALL);
        assert_eq!(
            r.json["uri"],
            format!("{base}?Status=in-progress&PageSize=1&Page=0")
        );
        let r = h.get(&format!("{base}?To=%2B1&Page=0")).await;
        assert_eq!(r.json["calls"].as_array().map(Vec::len), Some(0));
        assert_eq!(
            (r.json["start"].clone(), r.json["end"].clone()),
            (0.into(), 0.into())
        );
        let r = h.get(&format!("{base}?Status=talking")).await;
        assert_eq!((r.status, r.code()), (400, 21201));
        let r = h.get(&format!("{base}?StartTime=2020-01-01")).await;
        assert!(r.message().contains("StartTime"));
    }

    #[tokio::test]
    async fn create_dials_out_and_its_callbacks_are_signed() {
        let h = start().await;
        let mut web = WebServer::start(vec![
            Answer::new(
                200,
                "<Response><Connect><Stream url=\"wss://bot/ws\"/></Connect></Response>",
            ),
            Answer::new(500, ""),
            Answer::new(200, ""),
        ])
        .await;
        let twiml_url = web.url("/answer");
        let status_url = web.url("/status?call=1");
        let r = h
            .post(
                &calls_path(),
                &[
                    ("To", "+15551234567"),
                    ("From", "+15557654321"),
                    ("Url", &twiml_url),
                    ("Timeout", "30"),
                    ("StatusCallback", &status_url),
                    ("StatusCallbackEvent", "initiated ringing"),
                    ("StatusCallbackEvent", "answered"),
                ],
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.json);
        assert_eq!(r.json["direction"], "outbound-api");
        assert_eq!(r.json["status"], "queued");
        assert_eq!(r.json["to"], "+15551234567");
        let fetch = web.next().await;
        assert_eq!(fetch.param("To").as_deref(), Some("+15551234567"));
        assert_eq!(fetch.param("Direction").as_deref(), Some("outbound-api"));

        let created = h.control.created.lock().expect("ok: not poisoned").clone();
        let [new] = created.as_slice() else {
            panic!("one call created: {created:?}");
        };
        assert_eq!(new.timeout, Duration::from_secs(30));
        assert_eq!(
            new.twiml,
            vec![Verb::ConnectStream {
                url: "wss://bot/ws".into(),
                parameters: vec![],
                audio: Default::default(),
            }]
        );
        let target = new.status_callback.clone().expect("ok: asked for");
        assert_eq!(
            target.events,
            vec![
                StatusCallbackEvent::Initiated,
                StatusCallbackEvent::Ringing,
                StatusCallbackEvent::Answered
            ]
        );
        assert!(!target.method_get);

        // The call's first callback: 500, retried, then 200; both signed.
        let reporter = h.callbacks.reporter(target);
        let mut view = call("CAffffffffffffffffffffffffffffffff", CallStatus::Queued);
        view.direction = Direction::OutboundApi;
        assert!(reporter.report(StatusCallbackEvent::Initiated, &view, None));
        for _ in 0..2 {
            let cb = web.next().await;
            assert_eq!(cb.uri, "/status?call=1");
            assert_eq!(cb.param("CallStatus").as_deref(), Some("initiated"));
            assert!(cb.signed_for(&status_url));
        }

        // Defaults: 60 s, `completed` only, TwiML given inline.
        let r = h
            .post(
                &calls_path(),
                &[
                    ("To", "sip:alice@example.com"),
                    ("From", "+15557654321"),
                    ("Twiml", "<Response><Pause/></Response>"),
                    ("StatusCallback", &status_url),
                    ("StatusCallbackMethod", "GET"),
                ],
            )
            .await;
        assert_eq!(r.status, 201);
        let created = h.control.created.lock().expect("ok: not poisoned").clone();
        assert_eq!(created[1].timeout, Duration::from_secs(60));
        let target = created[1].status_callback.clone().expect("ok: asked for");
        assert_eq!(target.events, vec![StatusCallbackEvent::Completed]);
        assert!(target.method_get);

        // Refusals name what is wrong.
        let ok = [
            ("To", "+15551234567"),
            ("From", "+15557654321"),
            ("Twiml", "<Response/>"),
        ];
        let with = |extra: (&'static str, &'static str)| {
            let mut v = ok.to_vec();
            v.push(extra);
            v
        };
        let r = h.post(&calls_path(), &ok[1..]).await;
        assert_eq!((r.status, r.code()), (400, 21201));
        let r = h.post(&calls_path(), &[ok[0], ok[2]]).await;
        assert_eq!((r.status, r.code()), (400, 21213));
        let r = h.post(&calls_path(), &ok[..2]).await;
        assert_eq!((r.status, r.code()), (400, 21205));
        let r = h.post(&calls_path(), &with(("Timeout", "soon"))).await;
        assert_eq!((r.status, r.code()), (400, 21208));
        let r = h.post(&calls_path(), &with(("Url", "http://x/"))).await;
        assert_eq!(r.status, 400);
        let r = h.post(&calls_path(), &with(("Record", "true"))).await;
        assert!(r.message().contains("Record"));
        let r = h
            .post(&calls_path(), &with(("StatusCallback", "nope")))
            .await;
        assert_eq!((r.status, r.code()), (400, 21205));
        let mut v = with(("StatusCallback", "http://x/s"));
        v.push(("StatusCallbackEvent", "initiated bogus"));
        let r = h.post(&calls_path(), &v).await;
        assert!(r.message().contains("bogus"));
        let r = h.post(&calls_path(), &with(("Timeout", "0"))).await;
        assert_eq!(r.code(), 21208);
        assert_eq!(h.control.created.lock().expect("ok: not poisoned").len(), 2);
    }

    #[tokio::test]
    async fn machine_detection_holds_the_url_for_the_verdict() {
        let h = start().await;
        let mut web = WebServer::start(vec![Answer::new(200, "<Response/>")]).await;
        let twiml_url = web.url("/answer");
        let base = [
            ("To", "+15551234567"),
            ("From", "+15557654321"),
            ("Url", twiml_url.as_str()),
            ("MachineDetection", "Enable"),
        ];
        let r = h.post(&calls_path(), &base).await;
        assert_eq!(r.status, 201, "{}", r.json);
        // Not fetched before dialling: the URL goes with the call, fetched after the verdict.
        assert!(web.requests.try_recv().is_err());
        let created = h.control.created.lock().expect("ok: not poisoned").clone();
        let [new] = created.as_slice() else {
            panic!("one call created: {created:?}");
        };
        assert_eq!(new.twiml, []);
        assert_eq!(new.twiml_url, Some((twiml_url.clone(), false)));
        let amd = new.machine_detection.clone().expect("ok: asked for");
        assert!(!amd.asynchronous && !amd.detect_message_end);

        // Async: fetched at once, as without detection.
        let mut asynchronous = base.to_vec();
        asynchronous.push(("AsyncAmd", "true"));
        let r = h.post(&calls_path(), &asynchronous).await;
        assert_eq!(r.status, 201, "{}", r.json);
        assert_eq!(web.next().await.uri, "/answer");
        let created = h.control.created.lock().expect("ok: not poisoned").clone();
        assert!(created[1].twiml.is_empty(), "the fetched <Response/>");
        assert_eq!(created[1].twiml_url, None);

        // Out of Twilio's ranges, or a callback that cannot be reached: refused, named.
        for (extra, code, named) in [
            (
                ("MachineDetectionTimeout", "60"),
                21234,
                "MachineDetectionTimeout",
            ),
            (
                ("MachineDetectionSilenceTimeout", "1999"),
                21234,
                "MachineDetectionSilenceTimeout",
            ),
            (
                ("AsyncAmdStatusCallback", "nope"),
                21205,
                "AsyncAmdStatusCallback",
            ),
        ] {
            let mut form = base.to_vec();
            form.push(extra);
            let r = h.post(&calls_path(), &form).await;
            assert_eq!((r.status, r.code()), (400, code), "{extra:?}");
            assert!(r.message().starts_with(named), "{}", r.message());
        }
        assert_eq!(h.control.created.lock().expect("ok: not poisoned").len(), 2);
        assert!(web.requests.try_recv().is_err(), "nothing else fetched");
    }

    #[tokio::test]
    async fn an_unset_token_lets_nobody_in() {
        let h = start_with("").await;
        for creds in [Some((ACCOUNT, "")), Some((ACCOUNT, TOKEN)), None] {
            let r = h.send("GET", &call_path(CALL), creds, None, "").await;
            assert_eq!((r.status, r.code()), (401, 20003));
        }
    }
}
