//! The crate's error: a request refused as Twilio refuses it.

use crate::call::ControlError;
use crate::twiml::TwimlError;

/// A refused request, as Twilio answers one: the HTTP status, Twilio's error code, and a
/// message naming what is wrong. [`Error::body`] is the JSON Twilio's helper libraries read
/// (they raise it with the code, so a bot sees the same error it would get from Twilio).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (HTTP {status}, Twilio error {code})")]
#[non_exhaustive]
pub struct Error {
    /// The HTTP status (400, 401, 404, 405, 413, 429).
    pub status: u16,
    /// Twilio's error code (21201 for a bad parameter, 20404 for no such resource, ...).
    pub code: u32,
    /// What is wrong, naming the parameter, verb or resource at fault.
    pub message: String,
}

impl Error {
    /// An error with this HTTP status, Twilio code and message.
    pub fn new(status: u16, code: u32, message: impl Into<String>) -> Error {
        Error {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with `code` (21201 for a bad parameter, as [`ControlError::Invalid`]).
    pub fn bad(code: u32, message: impl Into<String>) -> Error {
        Error::new(400, code, message)
    }

    /// 401 (code 20003); the answer carries `WWW-Authenticate` ([`Error::WWW_AUTHENTICATE`]).
    pub fn unauthorized(message: impl Into<String>) -> Error {
        Error::new(401, 20003, message)
    }

    /// 404 (code 20404) for the resource at `path`.
    pub fn not_found(path: &str) -> Error {
        Error::new(
            404,
            20404,
            format!("The requested resource {path} was not found"),
        )
    }

    /// What a [`CallControl`](crate::CallControl) refusal of a request to `path` answers.
    pub fn control(e: ControlError, path: &str) -> Error {
        match e {
            ControlError::NotFound(_) => Error::not_found(path),
            ControlError::NotInProgress => Error::bad(21220, e.to_string()),
            ControlError::NoTrunk => Error::bad(21210, e.to_string()),
            ControlError::AtCapacity => Error::new(429, 20429, e.to_string()),
            ControlError::Invalid(m) => Error::bad(21201, m),
        }
    }

    /// The `WWW-Authenticate` value of a 401, the realm Twilio names.
    pub const WWW_AUTHENTICATE: &'static str = "Basic realm=\"Twilio API\"";

    /// Twilio's error body: `code`, `message`, `more_info`, `status`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "code": self.code,
            "message": self.message,
            "more_info": format!("https://www.twilio.com/docs/errors/{}", self.code),
            "status": self.status,
        })
    }
}

/// A document that is not TwiML ontime runs: 400, code 12100.
impl From<TwimlError> for Error {
    fn from(e: TwimlError) -> Error {
        Error::bad(12100, format!("Document parse failure: {e}"))
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_twilios() {
        let e = Error::control(ControlError::AtCapacity, "/x");
        assert_eq!((e.status, e.code), (429, 20429));
        assert_eq!(
            e.body(),
            serde_json::json!({
                "code": 20429,
                "message": "the gateway is at capacity; retry later",
                "more_info": "https://www.twilio.com/docs/errors/20429",
                "status": 429,
            })
        );
        let e = Error::control(ControlError::NotFound("CA1".into()), "/p/CA1.json");
        assert_eq!(
            (e.status, e.code, e.message.as_str()),
            (
                404,
                20404,
                "The requested resource /p/CA1.json was not found"
            )
        );
        let e = Error::from(TwimlError::Root("Foo".into()));
        assert_eq!((e.status, e.code), (400, 12100));
        assert!(e.message.starts_with("Document parse failure: "));
    }
}
