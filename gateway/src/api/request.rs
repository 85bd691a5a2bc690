//! What the API reads from a request, parsed without hyper: the path router, HTTP Basic
//! credentials, the form content type, form (or query) parameters and their values (`Status`,
//! `Timeout`, `StatusCallbackEvent`, `PageSize`, `Page`, `Method`-like ones).
//!
//! http.rs hands header values over as text. This file keeps to std, base64, form_urlencoded
//! and [`super::control`] (itself std and [`super::twiml`]), so that gateway/fuzz's
//! `api_request` target compiles it alone through `#[path]`, with those two files as its
//! siblings, rather than the whole gateway.

use base64::Engine as _;

use super::control::{CallStatus, CallUpdate, StatusCallbackEvent};

/// Where every API path starts.
pub(crate) const PREFIX: &str = "/2010-04-01/Accounts/";
/// `PageSize` of `GET Calls.json`: Twilio's default and maximum.
pub(crate) const DEFAULT_PAGE_SIZE: usize = 50;
pub(crate) const MAX_PAGE_SIZE: usize = 1000;
/// `Timeout` of `POST Calls.json`: Twilio's default and maximum, in seconds.
pub(crate) const DEFAULT_RING_SECS: u64 = 60;
pub(crate) const MAX_RING_SECS: u64 = 600;

/// A parameter Twilio would refuse: HTTP 400 with Twilio's `code` and a message naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadParam {
    /// Twilio's error code (21201 for a bad parameter, 21208 for a bad `Timeout`).
    pub(crate) code: u32,
    /// What is wrong, naming the parameter.
    pub(crate) message: String,
}

impl BadParam {
    fn new(code: u32, message: impl Into<String>) -> BadParam {
        BadParam {
            code,
            message: message.into(),
        }
    }
}

/// Which resource a path names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Resource<'a> {
    /// `Calls/{CallSid}.json`.
    Call(&'a str),
    /// `Calls.json`.
    Calls,
}

/// `(AccountSid, resource)` of an API path. The `.json` suffix is optional: without it
/// Twilio answers XML, which ontime does not speak, so those paths answer JSON too.
pub(crate) fn parse_path(path: &str) -> Option<(&str, Resource<'_>)> {
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
pub(crate) fn basic_credentials(header: &str) -> (Vec<u8>, Vec<u8>) {
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

/// Whether a `Content-Type` is `application/x-www-form-urlencoded` (any case, any parameters).
pub(crate) fn is_form(content_type: &str) -> bool {
    content_type.split(';').next().is_some_and(|m| {
        m.trim()
            .eq_ignore_ascii_case("application/x-www-form-urlencoded")
    })
}

/// A request's form (or query) parameters, in order, repeats kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Params(pub(crate) Vec<(String, String)>);

impl Params {
    /// An `application/x-www-form-urlencoded` body or query string (invalid UTF-8 lossily).
    pub(crate) fn parse(form: &[u8]) -> Params {
        Params(form_urlencoded::parse(form).into_owned().collect())
    }

    /// The first value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Refuse a parameter ontime does not honour, naming it (Twilio ignores unknown ones;
    /// a bot that asked for `Record=true` must not believe it is recording).
    pub(crate) fn only(&self, known: &[&str]) -> Result<(), BadParam> {
        match self.0.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            Some((k, _)) => Err(BadParam::new(
                21201,
                format!("Parameter '{k}' is not supported"),
            )),
            None => Ok(()),
        }
    }

    /// `Method`-like parameters: `GET` or `POST` (default), as `method_get`.
    pub(crate) fn method_get(&self, name: &str) -> Result<bool, BadParam> {
        match self.get(name) {
            None => Ok(false),
            Some(m) if m.eq_ignore_ascii_case("POST") => Ok(false),
            Some(m) if m.eq_ignore_ascii_case("GET") => Ok(true),
            Some(m) => Err(BadParam::new(
                21201,
                format!("{name} must be GET or POST, got '{m}'"),
            )),
        }
    }

    /// `Timeout` of a dial-out, in seconds: [`DEFAULT_RING_SECS`] when absent, at most
    /// [`MAX_RING_SECS`] (longer asks ring for the maximum, as Twilio's do).
    pub(crate) fn timeout_secs(&self) -> Result<u64, BadParam> {
        match self.get("Timeout") {
            None => Ok(DEFAULT_RING_SECS),
            Some(t) => match t.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(n.min(MAX_RING_SECS)),
                _ => Err(BadParam::new(
                    21208,
                    format!("Timeout must be a positive whole number of seconds, got '{t}'"),
                )),
            },
        }
    }

    /// The `StatusCallbackEvent`s asked for (each parameter a space-separated list), repeats
    /// dropped, in order; Twilio's default, `completed` only, when none is.
    pub(crate) fn status_callback_events(&self) -> Result<Vec<StatusCallbackEvent>, BadParam> {
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
                    return Err(BadParam::new(
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

    /// `Status` of a call update: `completed` or `canceled` (None when absent).
    pub(crate) fn update_status(&self) -> Result<Option<CallUpdate>, BadParam> {
        match self.get("Status") {
            None => Ok(None),
            Some("completed") => Ok(Some(CallUpdate::Complete)),
            Some("canceled") => Ok(Some(CallUpdate::Cancel)),
            Some(other) => Err(BadParam::new(
                21201,
                format!("Status must be completed or canceled, got '{other}'"),
            )),
        }
    }

    /// `Status` filter of a list: one of Twilio's call statuses.
    pub(crate) fn status_filter(&self) -> Result<Option<CallStatus>, BadParam> {
        match self.get("Status") {
            None => Ok(None),
            Some(s) => CallStatus::parse(s)
                .map(Some)
                .ok_or_else(|| BadParam::new(21201, format!("Status '{s}' is not a call status"))),
        }
    }

    /// `(PageSize, Page)` of a list: the size clamped to 1..=[`MAX_PAGE_SIZE`]
    /// ([`DEFAULT_PAGE_SIZE`] when absent), the page 0 when absent.
    pub(crate) fn paging(&self) -> Result<(usize, usize), BadParam> {
        let number = |name: &str, default: usize| -> Result<usize, BadParam> {
            match self.get(name) {
                None => Ok(default),
                Some(v) => v.trim().parse::<usize>().map_err(|_| {
                    BadParam::new(21201, format!("{name} must be a whole number, got '{v}'"))
                }),
            }
        };
        let page_size = number("PageSize", DEFAULT_PAGE_SIZE)?.clamp(1, MAX_PAGE_SIZE);
        let page = number("Page", 0)?;
        Ok((page_size, page))
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
}
