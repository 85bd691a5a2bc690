//! What the API reads from a request, without an HTTP library: the path router, HTTP Basic
//! credentials and their check, the form content type, form (or query) parameters and their
//! values (`Status`, `Timeout`, `StatusCallbackEvent`, `PageSize`, `Page`, `Method`-like ones),
//! and the three requests they make up: dial out ([`CreateRequest`]), act on a call
//! ([`UpdateRequest`]), list calls ([`ListRequest`]). An HTTP server hands header values and
//! bodies over as text and bytes, and carries out what comes back.

use std::time::Duration;

use base64::Engine as _;
use subtle::ConstantTimeEq;

use crate::call::{
    AmdStatusCallback, CallFilter, CallStatus, CallUpdate, Direction, MachineDetection, NewCall,
    StatusCallback, StatusCallbackEvent,
};
use crate::error::{Error, Result};
use crate::sip_headers::{SipTarget, XHeaders};
use crate::twiml::{self, Verb};
use crate::webhook::API_VERSION;

/// Where every API path starts.
pub const PREFIX: &str = "/2010-04-01/Accounts/";
/// `PageSize` of `GET Calls.json` when absent: Twilio's default.
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// Largest `PageSize` of `GET Calls.json`: Twilio's maximum (larger asks get this many).
pub const MAX_PAGE_SIZE: usize = 1000;
/// `Timeout` of `POST Calls.json` when absent, in seconds: Twilio's default.
pub const DEFAULT_RING_SECS: u64 = 60;
/// Longest `Timeout` of `POST Calls.json`, in seconds: Twilio's maximum.
pub const MAX_RING_SECS: u64 = 600;

/// Twilio's code for a `MachineDetection…` parameter it does not accept ("Invalid Machine
/// Detection configuration value").
pub const INVALID_MACHINE_DETECTION: u32 = 21234;

/// Which resource a path names.
#[derive(Debug, PartialEq, Eq)]
pub enum Resource<'a> {
    /// `Calls/{CallSid}.json`.
    Call(&'a str),
    /// `Calls.json`.
    Calls,
}

/// `(AccountSid, resource)` of an API path. The `.json` suffix is optional: without it
/// Twilio answers XML, which ontime does not speak, so those paths answer JSON too.
pub fn parse_path(path: &str) -> Option<(&str, Resource<'_>)> {
    let rest = path.strip_prefix(PREFIX)?;
    let (account, rest) = rest.split_once('/')?;
    let rest = rest.strip_suffix(".json").unwrap_or(rest);
    let resource = match rest.split_once('/') {
        None if rest == "Calls" => Resource::Calls,
        Some(("Calls", sid)) if !sid.is_empty() && !sid.contains('/') => Resource::Call(sid),
        _ => return None,
    };
    (!account.is_empty()).then_some((account, resource))
}

/// `(user, password)` of an `Authorization` header's text: `Basic` (any case) and base64 of
/// `user:password`, split at the first colon. Anything else is two empty strings, which no
/// account matches.
pub fn basic_credentials(header: &str) -> (Vec<u8>, Vec<u8>) {
    let mut decoded = header
        .trim()
        .split_once(' ')
        .and_then(|(scheme, value)| scheme.eq_ignore_ascii_case("basic").then_some(value))
        .and_then(|v| {
            base64::engine::general_purpose::STANDARD
                .decode(v.trim())
                .ok()
        })
        .unwrap_or_default();
    match decoded.iter().position(|&b| b == b':') {
        Some(i) => {
            let password = decoded.split_off(i + 1);
            decoded.truncate(i);
            (decoded, password)
        }
        None => (decoded, Vec::new()),
    }
}

/// Check an `Authorization` header's text (`None`: no header) against HTTP Basic with
/// `account_sid` and `auth_token`, as Twilio's API authenticates. Both are compared in constant
/// time, so that response times do not reveal how much of a guess was right; an empty
/// `auth_token` lets nobody in (an unset token must not let an empty password in).
pub fn authenticate(
    authorization: Option<&str>,
    account_sid: &str,
    auth_token: &str,
) -> Result<()> {
    let Some(header) = authorization else {
        return Err(Error::unauthorized(
            "Authentication Error - No credentials provided",
        ));
    };
    let (user, password) = basic_credentials(header);
    if auth_token.is_empty() {
        return Err(Error::unauthorized(
            "Authentication Error - no auth token is configured",
        ));
    }
    let user_ok = user.ct_eq(account_sid.as_bytes());
    let password_ok = password.ct_eq(auth_token.as_bytes());
    // `&` on `Choice`: both comparisons always run.
    if bool::from(user_ok & password_ok) {
        Ok(())
    } else {
        Err(Error::unauthorized(
            "Authentication Error - invalid username or password",
        ))
    }
}

/// Whether a `Content-Type` is `application/x-www-form-urlencoded` (any case, any parameters).
pub fn is_form(content_type: &str) -> bool {
    content_type.split(';').next().is_some_and(|m| {
        m.trim()
            .eq_ignore_ascii_case("application/x-www-form-urlencoded")
    })
}

/// A request's form (or query) parameters, in order, repeats kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// An `application/x-www-form-urlencoded` body or query string (invalid UTF-8 lossily).
    pub fn parse(form: &[u8]) -> Params {
        Params(form_urlencoded::parse(form).into_owned().collect())
    }

    /// Every parameter, in order, repeats kept.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Refuse a parameter ontime does not honour, naming it (Twilio ignores unknown ones;
    /// a bot that asked for `Record=true` must not believe it is recording).
    pub fn only(&self, known: &[&str]) -> Result<()> {
        match self.0.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            Some((k, _)) => Err(Error::bad(
                21201,
                format!("Parameter '{k}' is not supported"),
            )),
            None => Ok(()),
        }
    }

    /// `Method`-like parameters: `GET` or `POST` (default), as `method_get`.
    pub fn method_get(&self, name: &str) -> Result<bool> {
        match self.get(name) {
            None => Ok(false),
            Some(m) if m.eq_ignore_ascii_case("POST") => Ok(false),
            Some(m) if m.eq_ignore_ascii_case("GET") => Ok(true),
            Some(m) => Err(Error::bad(
                21201,
                format!("{name} must be GET or POST, got '{m}'"),
            )),
        }
    }

    /// `Timeout` of a dial-out, in seconds: [`DEFAULT_RING_SECS`] when absent, at most
    /// [`MAX_RING_SECS`] (longer asks ring for the maximum, as Twilio's do).
    pub fn timeout_secs(&self) -> Result<u64> {
        match self.get("Timeout") {
            None => Ok(DEFAULT_RING_SECS),
            Some(t) => match t.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(n.min(MAX_RING_SECS)),
                _ => Err(Error::bad(
                    21208,
                    format!("Timeout must be a positive whole number of seconds, got '{t}'"),
                )),
            },
        }
    }

    /// The `StatusCallbackEvent`s asked for (each parameter a space-separated list), repeats
    /// dropped, in order; Twilio's default, `completed` only, when none is.
    pub fn status_callback_events(&self) -> Result<Vec<StatusCallbackEvent>> {
        let mut events = Vec::new();
        for name in self
            .all("StatusCallbackEvent")
            .flat_map(str::split_whitespace)
        {
            let event = match name {
                "initiated" => StatusCallbackEvent::Initiated,
                "ringing" => StatusCallbackEvent::Ringing,
                "answered" => StatusCallbackEvent::Answered,
                "completed" => StatusCallbackEvent::Completed,
                other => {
                    return Err(Error::bad(
                        21201,
                        format!(
                            "StatusCallbackEvent '{other}' is not one of initiated, ringing, answered, completed"
                        ),
                    ))
                }
            };
            if !events.contains(&event) {
                events.push(event);
            }
        }
        if events.is_empty() {
            // Twilio's default.
            events.push(StatusCallbackEvent::Completed);
        }
        Ok(events)
    }

    /// A whole number `name` within `range` (`unit` names it in the error), `default` when
    /// absent; anything else is Twilio's 400 naming the parameter.
    fn bounded(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<u64>,
        unit: &str,
        default: u64,
    ) -> Result<u64> {
        let Some(v) = self.get(name) else {
            return Ok(default);
        };
        match v.trim().parse::<u64>() {
            Ok(n) if range.contains(&n) => Ok(n),
            _ => Err(Error::bad(
                INVALID_MACHINE_DETECTION,
                format!(
                    "{name} must be a whole number of {unit} from {} to {}, got '{v}'",
                    range.start(),
                    range.end()
                ),
            )),
        }
    }

    /// `MachineDetection` and its settings, with Twilio's ranges and defaults (None when
    /// `MachineDetection` is absent: the other `MachineDetection…` and `AsyncAmd…` parameters
    /// mean nothing without it, as on Twilio).
    pub fn machine_detection(&self) -> Result<Option<MachineDetection>> {
        let detect_message_end = match self.get("MachineDetection").map(str::trim) {
            None => return Ok(None),
            Some("Enable") => false,
            Some("DetectMessageEnd") => true,
            Some(other) => {
                return Err(Error::bad(
                    INVALID_MACHINE_DETECTION,
                    format!("MachineDetection must be Enable or DetectMessageEnd, got '{other}'"),
                ))
            }
        };
        let asynchronous = match self.get("AsyncAmd").map(str::trim) {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") => false,
            Some(other) => {
                return Err(Error::bad(
                    INVALID_MACHINE_DETECTION,
                    format!("AsyncAmd must be true or false, got '{other}'"),
                ))
            }
        };
        let status_callback = match self
            .get("AsyncAmdStatusCallback")
            .map(str::trim)
            .filter(|u| !u.is_empty())
        {
            None => None,
            Some(url) => Some(AmdStatusCallback {
                url: url.to_string(),
                method_get: self.method_get("AsyncAmdStatusCallbackMethod")?,
            }),
        };
        let millis = |name, range, default| {
            self.bounded(name, range, "milliseconds", default)
                .map(Duration::from_millis)
        };
        Ok(Some(MachineDetection {
            detect_message_end,
            timeout: Duration::from_secs(self.bounded(
                "MachineDetectionTimeout",
                3..=59,
                "seconds",
                30,
            )?),
            speech_threshold: millis("MachineDetectionSpeechThreshold", 1000..=6000, 2400)?,
            speech_end_threshold: millis("MachineDetectionSpeechEndThreshold", 500..=5000, 1200)?,
            silence_timeout: millis("MachineDetectionSilenceTimeout", 2000..=10000, 5000)?,
            asynchronous,
            status_callback,
        }))
    }

    /// `Status` of a call update: `completed` or `canceled` (None when absent).
    pub fn update_status(&self) -> Result<Option<CallUpdate>> {
        match self.get("Status") {
            None => Ok(None),
            Some("completed") => Ok(Some(CallUpdate::Complete)),
            Some("canceled") => Ok(Some(CallUpdate::Cancel)),
            Some(other) => Err(Error::bad(
                21201,
                format!("Status must be completed or canceled, got '{other}'"),
            )),
        }
    }

    /// `Status` filter of a list: one of Twilio's call statuses.
    pub fn status_filter(&self) -> Result<Option<CallStatus>> {
        match self.get("Status") {
            None => Ok(None),
            Some(s) => CallStatus::parse(s)
                .map(Some)
                .ok_or_else(|| Error::bad(21201, format!("Status '{s}' is not a call status"))),
        }
    }

    /// `(PageSize, Page)` of a list: the size clamped to 1..=[`MAX_PAGE_SIZE`]
    /// ([`DEFAULT_PAGE_SIZE`] when absent), the page 0 when absent.
    pub fn paging(&self) -> Result<(usize, usize)> {
        let number = |name: &str, default: usize| -> Result<usize> {
            match self.get(name) {
                None => Ok(default),
                Some(v) => v.trim().parse::<usize>().map_err(|_| {
                    Error::bad(21201, format!("{name} must be a whole number, got '{v}'"))
                }),
            }
        };
        let page_size = number("PageSize", DEFAULT_PAGE_SIZE)?.clamp(1, MAX_PAGE_SIZE);
        let page = number("Page", 0)?;
        Ok((page_size, page))
    }
}

/// Where the TwiML of a call comes from.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TwimlSource {
    /// `Twiml=`: the document itself, parsed.
    Inline(Vec<Verb>),
    /// `Url=` (with `Method`): the bot's server answers it; fetch it (signed, see
    /// [`crate::signature`]) and parse the answer with [`crate::parse_twiml`].
    Fetch {
        /// The URL, trimmed; not checked here (the HTTP client that will fetch it decides
        /// which URLs it can reach).
        url: String,
        /// `Method=GET` (the default is `POST`).
        method_get: bool,
    },
}

/// `POST Calls.json`: dial out.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CreateRequest {
    /// `To`: a number or SIP URI (trimmed, not empty), without a SIP URI's header part.
    pub to: String,
    /// The `X-` headers of a SIP `To`'s header part (`sip:bob@host?X-Campaign=7`), checked
    /// ([`crate::sip_headers`]): they go onto the INVITE.
    pub sip_headers: XHeaders,
    /// `From` (trimmed, not empty).
    pub from: String,
    /// `Timeout`: how long to ring.
    pub timeout: Duration,
    /// `StatusCallback` with its method and events, if asked for. Its URL is not checked here,
    /// as for [`TwimlSource::Fetch`].
    pub status_callback: Option<StatusCallback>,
    /// What the call runs once answered.
    pub twiml: TwimlSource,
    /// `MachineDetection` and its settings, if asked for.
    pub machine_detection: Option<MachineDetection>,
}

impl CreateRequest {
    /// Read a dial-out from its form, refusing what Twilio refuses (a missing `To` or `From`,
    /// both or neither of `Twiml` and `Url`) and what ontime does not honour.
    pub fn parse(params: &Params) -> Result<CreateRequest> {
        params.only(&[
            "To",
            "From",
            "Twiml",
            "Url",
            "Method",
            "Timeout",
            "StatusCallback",
            "StatusCallbackEvent",
            "StatusCallbackMethod",
            "MachineDetection",
            "MachineDetectionTimeout",
            "MachineDetectionSpeechThreshold",
            "MachineDetectionSpeechEndThreshold",
            "MachineDetectionSilenceTimeout",
            "AsyncAmd",
            "AsyncAmdStatusCallback",
            "AsyncAmdStatusCallbackMethod",
        ])?;
        let present = |name| params.get(name).map(str::trim).filter(|v| !v.is_empty());
        let to = present("To").ok_or_else(|| Error::bad(21201, "No 'To' number is specified"))?;
        let (to, sip_headers) = split_sip_to(to)?;
        let from =
            present("From").ok_or_else(|| Error::bad(21213, "No 'From' number is specified"))?;
        let timeout = Duration::from_secs(params.timeout_secs()?);
        let status_callback = match present("StatusCallback") {
            None => None,
            Some(url) => Some(StatusCallback {
                url: url.to_string(),
                events: params.status_callback_events()?,
                method_get: params.method_get("StatusCallbackMethod")?,
            }),
        };
        let twiml = match (params.get("Twiml"), present("Url")) {
            (Some(_), Some(_)) => return Err(Error::bad(21201, "Pass Twiml or Url, not both")),
            (Some(xml), None) => TwimlSource::Inline(twiml::parse(xml)?),
            (None, Some(url)) => TwimlSource::Fetch {
                url: url.to_string(),
                method_get: params.method_get("Method")?,
            },
            (None, None) => {
                return Err(Error::bad(
                    21205,
                    "A 'Url' or 'Twiml' parameter is required",
                ))
            }
        };
        let machine_detection = params.machine_detection()?;
        Ok(CreateRequest {
            to,
            sip_headers,
            from: from.to_string(),
            timeout,
            status_callback,
            twiml,
            machine_detection,
        })
    }

    /// Whether a `Url=` is fetched once the call has been answered and detection has given
    /// its verdict (detection that is not asynchronous), rather than before dialling.
    pub fn fetch_waits_for_verdict(&self) -> bool {
        matches!(self.twiml, TwimlSource::Fetch { .. })
            && self
                .machine_detection
                .as_ref()
                .is_some_and(|amd| !amd.asynchronous)
    }

    /// The parameters of the `Url=` fetch. The call does not exist yet, so they describe it
    /// as queued, without a `CallSid` (Twilio fetches on answer, with one).
    pub fn fetch_params(&self, account_sid: &str) -> Vec<(String, String)> {
        let p = |k: &str, v: &str| (k.to_string(), v.to_string());
        vec![
            p("AccountSid", account_sid),
            p("ApiVersion", API_VERSION),
            p("CallStatus", CallStatus::Queued.as_str()),
            p("Called", &self.to),
            p("Caller", &self.from),
            p("Direction", Direction::OutboundApi.as_str()),
            p("From", &self.from),
            p("To", &self.to),
        ]
    }

    /// The call to place, running `twiml` (the inline document, or the fetched one; nothing
    /// when [`CreateRequest::fetch_waits_for_verdict`], the URL then goes with the call).
    pub fn into_new_call(self, twiml: Vec<Verb>) -> NewCall {
        let twiml_url = match (&self.twiml, self.fetch_waits_for_verdict()) {
            (TwimlSource::Fetch { url, method_get }, true) => Some((url.clone(), *method_get)),
            _ => None,
        };
        NewCall {
            twiml_url,
            machine_detection: self.machine_detection,
            to: self.to,
            sip_headers: self.sip_headers,
            from: self.from,
            twiml,
            timeout: self.timeout,
            status_callback: self.status_callback,
        }
    }
}

/// A SIP `To` split from its headers (Twilio's form for headers on a SIP call it places); a
/// number as it is. Headers that may not be set refuse the request (400, code 21201): sending
/// the call without them would lose what the bot asked for without telling it.
fn split_sip_to(to: &str) -> Result<(String, XHeaders)> {
    let scheme = to.split(':').next().unwrap_or_default();
    if !(scheme.eq_ignore_ascii_case("sip") || scheme.eq_ignore_ascii_case("sips")) {
        return Ok((to.to_string(), XHeaders::default()));
    }
    let target = SipTarget::parse(to)
        .map_err(|e| Error::bad(21201, format!("Parameter 'To' is invalid: {e}")))?;
    Ok((target.uri, target.headers))
}

/// `POST Calls/{CallSid}.json`: `Status=completed|canceled`, `Twiml=` or `Url=` (+ `Method`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum UpdateRequest {
    /// `Status=` or `Twiml=`: act on the call at once.
    Apply(CallUpdate),
    /// `Url=`: fetch the TwiML and run it ([`CallUpdate::Run`]), unless the call has ended
    /// (fetching TwiML for a call that cannot run it would only cost the bot a request).
    Fetch {
        /// The URL, not checked here (as [`TwimlSource::Fetch`]).
        url: String,
        /// `Method=GET` (the default is `POST`).
        method_get: bool,
    },
    /// Nothing asked: Twilio answers the call as it is.
    Show,
}

impl UpdateRequest {
    /// Read an update from its form: one of `Status`, `Twiml` and `Url` at most.
    pub fn parse(params: &Params) -> Result<UpdateRequest> {
        params.only(&["Status", "Twiml", "Url", "Method"])?;
        let asked = ["Status", "Twiml", "Url"]
            .iter()
            .filter(|p| params.get(p).is_some())
            .count();
        if asked > 1 {
            return Err(Error::bad(
                21201,
                "Pass one of Status, Twiml or Url, not several",
            ));
        }
        Ok(if let Some(update) = params.update_status()? {
            UpdateRequest::Apply(update)
        } else if let Some(xml) = params.get("Twiml") {
            UpdateRequest::Apply(CallUpdate::Run(twiml::parse(xml)?))
        } else if let Some(url) = params.get("Url") {
            UpdateRequest::Fetch {
                url: url.to_string(),
                method_get: params.method_get("Method")?,
            }
        } else {
            UpdateRequest::Show
        })
    }
}

/// `GET Calls.json`: filtered by `Status`, `To`, `From`; paged by `PageSize` and `Page`
/// (rendered by [`crate::json::calls_page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListRequest {
    /// The filters.
    pub filter: CallFilter,
    /// Calls per page, 1..=[`MAX_PAGE_SIZE`].
    pub page_size: usize,
    /// Which page, from 0.
    pub page: usize,
}

impl ListRequest {
    /// Read a list request from its query.
    pub fn parse(params: &Params) -> Result<ListRequest> {
        // PageToken is what Twilio's own next_page_uri carries; ontime's carries Page, so a
        // token is accepted and Page decides.
        params.only(&["Status", "To", "From", "PageSize", "Page", "PageToken"])?;
        let status = params.status_filter()?;
        let (page_size, page) = params.paging()?;
        Ok(ListRequest {
            filter: CallFilter {
                status,
                to: params.get("To").map(str::to_string),
                from: params.get("From").map(str::to_string),
            },
            page_size,
            page,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(form: &str) -> Params {
        Params::parse(form.as_bytes())
    }

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("/2010-04-01/Accounts/AC1/Calls.json"),
            Some(("AC1", Resource::Calls))
        );
        assert_eq!(
            parse_path("/2010-04-01/Accounts/AC1/Calls"),
            Some(("AC1", Resource::Calls))
        );
        assert_eq!(
            parse_path("/2010-04-01/Accounts/AC1/Calls/CA2.json"),
            Some(("AC1", Resource::Call("CA2")))
        );
        for bad in [
            "/",
            "/2010-04-01/Accounts/AC1",
            "/2010-04-01/Accounts//Calls.json",
            "/2010-04-01/Accounts/AC1/Calls/.json",
            "/2010-04-01/Accounts/AC1/Calls/CA2/Streams.json",
            "/2010-04-01/Accounts/AC1/Messages.json",
        ] {
            assert_eq!(parse_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn basic_credentials_split_at_the_first_colon() {
        // base64("AC1:tok:en"), "AC1" and "nocolon".
        assert_eq!(
            basic_credentials("basic QUMxOnRvazplbg=="),
            (b"AC1".to_vec(), b"tok:en".to_vec())
        );
        assert_eq!(
            basic_credentials("  Basic   QUMx "),
            (b"AC1".to_vec(), vec![])
        );
        for bad in [
            "",
            "Basic",
            "Bearer QUMxOnRvaw==",
            "Basic !!!",
            "QUMxOnRvaw==",
        ] {
            assert_eq!(basic_credentials(bad), (vec![], vec![]), "{bad}");
        }
    }

    #[test]
    fn form_content_types() {
        assert!(is_form("application/x-www-form-urlencoded"));
        assert!(is_form(
            " Application/X-WWW-Form-Urlencoded ; charset=utf-8"
        ));
        assert!(!is_form("application/json"));
        assert!(!is_form(""));
    }

    #[test]
    fn values() {
        let p = params("Timeout=+30&StatusCallbackEvent=ringing+answered&StatusCallbackEvent=ringing&Method=get");
        assert_eq!(p.timeout_secs(), Ok(30), "'+' is a space");
        assert_eq!(params("Timeout=%2B30").timeout_secs(), Ok(30));
        assert_eq!(params("Timeout=9999").timeout_secs(), Ok(MAX_RING_SECS));
        for bad in ["Timeout=0", "Timeout=-1", "Timeout=soon", "Timeout="] {
            assert_eq!(params(bad).timeout_secs().map_err(|e| e.code), Err(21208));
        }
        assert_eq!(
            p.status_callback_events(),
            Ok(vec![
                StatusCallbackEvent::Ringing,
                StatusCallbackEvent::Answered
            ])
        );
        assert_eq!(
            params("").status_callback_events(),
            Ok(vec![StatusCallbackEvent::Completed])
        );
        let e = params("StatusCallbackEvent=bogus").status_callback_events();
        assert!(e.is_err_and(|e| e.message.contains("'bogus'")));
        assert_eq!(p.method_get("Method"), Ok(true));
        assert_eq!(p.method_get("Other"), Ok(false));
        assert!(params("Method=PUT").method_get("Method").is_err());
        assert_eq!(
            params("PageSize=0&Page=3").paging(),
            Ok((1, 3)),
            "a page size is at least 1"
        );
        assert_eq!(params("").paging(), Ok((DEFAULT_PAGE_SIZE, 0)));
        assert!(params("Page=-1").paging().is_err());
        assert_eq!(
            params("Status=no-answer").status_filter(),
            Ok(Some(CallStatus::NoAnswer))
        );
        assert!(params("Status=talking").status_filter().is_err());
        assert_eq!(
            params("Status=canceled").update_status(),
            Ok(Some(CallUpdate::Cancel))
        );
        assert!(params("Status=busy").update_status().is_err());
        assert_eq!(
            params("To=a&Record=true")
                .only(&["To"])
                .map_err(|e| e.message),
            Err("Parameter 'Record' is not supported".to_string())
        );
    }

    #[test]
    fn basic_auth_checks_both_halves() {
        // base64("AC1:tok") and base64("AC1:").
        let ok = "Basic QUMxOnRvaw==";
        assert_eq!(authenticate(Some(ok), "AC1", "tok"), Ok(()));
        for (header, token, message) in [
            (None, "tok", "No credentials provided"),
            (Some(ok), "other", "invalid username or password"),
            (Some("Basic QUMxOg=="), "", "no auth token is configured"),
            (Some(""), "tok", "invalid username or password"),
        ] {
            let e = authenticate(header, "AC1", token).unwrap_err();
            assert_eq!((e.status, e.code), (401, 20003));
            assert!(e.message.ends_with(message), "{}", e.message);
        }
        assert!(authenticate(Some(ok), "AC2", "tok").is_err());
    }

    #[test]
    fn dial_out_forms() {
        let c = CreateRequest::parse(&params(
            "To=+%2B15551234567+&From=sip%3Abot%40x&Url=https%3A%2F%2Fb%2Ft&Method=GET&Timeout=5\
             &StatusCallback=https%3A%2F%2Fb%2Fs&StatusCallbackEvent=answered",
        ))
        .unwrap();
        assert_eq!(
            (c.to.as_str(), c.from.as_str()),
            ("+15551234567", "sip:bot@x")
        );
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(
            c.twiml,
            TwimlSource::Fetch {
                url: "https://b/t".into(),
                method_get: true
            }
        );
        let cb = c.status_callback.clone().unwrap();
        assert_eq!(cb.events, [StatusCallbackEvent::Answered]);
        assert!(!cb.method_get);
        let fetch = c.fetch_params("AC1");
        assert!(fetch.contains(&("CallStatus".into(), "queued".into())));
        assert!(!fetch.iter().any(|(k, _)| k == "CallSid"));
        let call = c.into_new_call(vec![Verb::Hangup]);
        assert_eq!(call.twiml, [Verb::Hangup]);

        for (form, code) in [
            ("From=a&Twiml=%3CResponse%2F%3E", 21201),
            ("To=a&Twiml=%3CResponse%2F%3E", 21213),
            ("To=a&From=b", 21205),
            ("To=a&From=b&Twiml=%3CResponse%2F%3E&Url=u", 21201),
            ("To=a&From=b&Twiml=%3CSay%2F%3E", 12100),
            ("To=a&From=b&Url=u&Record=true", 21201),
            ("To=a&From=b&Url=u&MachineDetection=Off", 21234),
        ] {
            assert_eq!(
                CreateRequest::parse(&params(form)).map_err(|e| e.code),
                Err(code),
                "{form}"
            );
        }
    }

    #[test]
    fn a_sip_to_carries_x_headers_onto_the_call() {
        // As a bot's form encodes it: the URI's own `%40` stays an escape inside the header.
        let form = "To=sip%3Abob%40pbx.example%3FX-Campaign%3D7%26X-Note%3Da%2540b&From=%2B1\
                    &Twiml=%3CResponse%2F%3E";
        let c = CreateRequest::parse(&params(form)).unwrap();
        assert_eq!(c.to, "sip:bob@pbx.example");
        assert_eq!(
            c.sip_headers.pairs(),
            [
                ("X-Campaign".to_string(), "7".to_string()),
                ("X-Note".to_string(), "a@b".to_string())
            ]
        );
        assert!(c
            .fetch_params("AC1")
            .contains(&("To".into(), "sip:bob@pbx.example".into())));
        let call = c.into_new_call(Vec::new());
        assert_eq!(
            (call.to.as_str(), call.sip_headers.len()),
            ("sip:bob@pbx.example", 2)
        );
        // A number has no header part; its `?` is left for the trunk to refuse.
        let c = CreateRequest::parse(&params("To=%2B1555&From=a&Twiml=%3CResponse%2F%3E")).unwrap();
        assert!(c.sip_headers.is_empty());
        // Anything but X- headers, or past the bounds: 400, naming the header, never its value.
        for (to, message) in [
            (
                "sip%3Ab%40h%3FRoute%3D%253Csip%3Aevil%253E",
                "Parameter 'To' is invalid: only X- headers can be set in a SIP URI, not 'Route'",
            ),
            (
                "sip%3Ab%40h%3FX-A%3Dx%250D%250AVia%3A1",
                "Parameter 'To' is invalid: the value of header 'X-A' contains a control character",
            ),
        ] {
            let e =
                CreateRequest::parse(&params(&format!("To={to}&From=a&Twiml=%3CResponse%2F%3E")))
                    .unwrap_err();
            assert_eq!(
                (e.status, e.code, e.message.as_str()),
                (400, 21201, message)
            );
        }
    }

    #[test]
    fn machine_detection_reads_twilio_parameters_and_ranges() {
        let base = "To=%2B1&From=%2B2&Url=https%3A%2F%2Fb%2Ft";
        let c = CreateRequest::parse(&params(base)).unwrap();
        assert_eq!(c.machine_detection, None);
        assert!(!c.fetch_waits_for_verdict());

        let c = CreateRequest::parse(&params(&format!("{base}&MachineDetection=Enable"))).unwrap();
        assert_eq!(
            c.machine_detection,
            Some(MachineDetection {
                detect_message_end: false,
                timeout: Duration::from_secs(30),
                speech_threshold: Duration::from_millis(2400),
                speech_end_threshold: Duration::from_millis(1200),
                silence_timeout: Duration::from_millis(5000),
                asynchronous: false,
                status_callback: None,
            })
        );
        assert!(c.fetch_waits_for_verdict());
        let call = c.into_new_call(Vec::new());
        assert_eq!(call.twiml_url, Some(("https://b/t".to_string(), false)));

        let c = CreateRequest::parse(&params(&format!(
            "{base}&MachineDetection=DetectMessageEnd&AsyncAmd=true\
             &AsyncAmdStatusCallback=https%3A%2F%2Fb%2Famd&AsyncAmdStatusCallbackMethod=GET\
             &MachineDetectionTimeout=3&MachineDetectionSpeechThreshold=6000\
             &MachineDetectionSpeechEndThreshold=500&MachineDetectionSilenceTimeout=10000"
        )))
        .unwrap();
        let amd = c.machine_detection.clone().unwrap();
        assert!(amd.detect_message_end && amd.asynchronous);
        assert_eq!(
            (
                amd.timeout,
                amd.speech_threshold,
                amd.speech_end_threshold,
                amd.silence_timeout
            ),
            (
                Duration::from_secs(3),
                Duration::from_millis(6000),
                Duration::from_millis(500),
                Duration::from_millis(10000)
            )
        );
        assert_eq!(
            amd.status_callback,
            Some(AmdStatusCallback {
                url: "https://b/amd".into(),
                method_get: true
            })
        );
        assert!(
            !c.fetch_waits_for_verdict(),
            "async: the TwiML is fetched at once"
        );
        assert_eq!(c.into_new_call(Vec::new()).twiml_url, None);

        for (extra, message) in [
            (
                "MachineDetection=Yes",
                "MachineDetection must be Enable or DetectMessageEnd, got 'Yes'",
            ),
            (
                "MachineDetection=Enable&MachineDetectionTimeout=60",
                "MachineDetectionTimeout must be a whole number of seconds from 3 to 59, got '60'",
            ),
            (
                "MachineDetection=Enable&MachineDetectionSpeechThreshold=999",
                "MachineDetectionSpeechThreshold must be a whole number of milliseconds from 1000 to 6000, got '999'",
            ),
            (
                "MachineDetection=Enable&MachineDetectionSpeechEndThreshold=5001",
                "MachineDetectionSpeechEndThreshold must be a whole number of milliseconds from 500 to 5000, got '5001'",
            ),
            (
                "MachineDetection=Enable&MachineDetectionSilenceTimeout=soon",
                "MachineDetectionSilenceTimeout must be a whole number of milliseconds from 2000 to 10000, got 'soon'",
            ),
            (
                "MachineDetection=Enable&AsyncAmd=maybe",
                "AsyncAmd must be true or false, got 'maybe'",
            ),
        ] {
            let e = CreateRequest::parse(&params(&format!("{base}&{extra}"))).unwrap_err();
            assert_eq!(
                (e.status, e.code, e.message.as_str()),
                (400, INVALID_MACHINE_DETECTION, message),
                "{extra}"
            );
        }
    }

    #[test]
    fn update_forms() {
        assert_eq!(UpdateRequest::parse(&params("")), Ok(UpdateRequest::Show));
        assert_eq!(
            UpdateRequest::parse(&params("Status=completed")),
            Ok(UpdateRequest::Apply(CallUpdate::Complete))
        );
        assert_eq!(
            UpdateRequest::parse(&params(
                "Twiml=%3CResponse%3E%3CHangup%2F%3E%3C%2FResponse%3E"
            )),
            Ok(UpdateRequest::Apply(CallUpdate::Run(vec![Verb::Hangup])))
        );
        assert_eq!(
            UpdateRequest::parse(&params("Url=u")),
            Ok(UpdateRequest::Fetch {
                url: "u".into(),
                method_get: false
            })
        );
        assert!(UpdateRequest::parse(&params("Status=completed&Url=u")).is_err());
        assert!(UpdateRequest::parse(&params("Status=busy")).is_err());
    }

    #[test]
    fn list_queries() {
        let l = ListRequest::parse(&params("Status=busy&To=x&PageSize=5000&PageToken=t")).unwrap();
        assert_eq!(l.filter.status, Some(CallStatus::Busy));
        assert_eq!(l.filter.to.as_deref(), Some("x"));
        assert_eq!((l.page_size, l.page), (MAX_PAGE_SIZE, 0));
        assert!(ListRequest::parse(&params("Sort=asc")).is_err());
    }
}
