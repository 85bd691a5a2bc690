//! `X-Twilio-Signature`: how a webhook receiver knows a request came from whoever holds the
//! auth token. ontime signs its status callbacks and TwiML fetches this way so that bot
//! servers written for Twilio (which validate with Twilio's helper libraries) accept them.
//!
//! The signature is the base64 of HMAC-SHA1, keyed with the auth token, over the full URL
//! (query included) followed, for a POST, by every form parameter sorted by name, each name
//! immediately followed by its value. A GET signs the URL alone.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use subtle::ConstantTimeEq;

/// The header carrying the signature.
pub const HEADER: &str = "X-Twilio-Signature";

/// The signature of a request to `url` with form `params` (empty for a GET).
///
/// Parameters with the same name are sorted by value too, as Twilio's helper libraries do, so
/// that the order they were sent in does not matter.
pub fn compute(auth_token: &str, url: &str, params: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = params.iter().collect();
    sorted.sort();
    // HMAC accepts keys of any length, so this never fails; an empty signature never
    // validates (see `validate`).
    let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(auth_token.as_bytes()) else {
        return String::new();
    };
    mac.update(url.as_bytes());
    for (name, value) in sorted {
        mac.update(name.as_bytes());
        mac.update(value.as_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Whether `signature` is the one `compute` gives, compared in constant time so that a
/// forger cannot learn it byte by byte from response times.
pub fn validate(auth_token: &str, url: &str, params: &[(String, String)], signature: &str) -> bool {
    let expected = compute(auth_token, url, params);
    !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(signature.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairs;

    const URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";

    /// The worked example of Twilio's webhook-security documentation and helper libraries.
    #[test]
    fn twilio_documented_vector() {
        let params = pairs(&[
            ("CallSid", "CA1234567890ABCDE"),
            ("Caller", "+14158675309"),
            ("Digits", "1234"),
            ("From", "+14158675309"),
            ("To", "+18005551212"),
        ]);
        assert_eq!(
            compute("12345", URL, &params),
            "RSOYDt4T1cUTdK1PDd93/VVr8B8="
        );
        assert!(validate(
            "12345",
            URL,
            &params,
            "RSOYDt4T1cUTdK1PDd93/VVr8B8="
        ));
    }

    /// Order of sending does not matter; repeated names sort by value (the helper libraries'
    /// vector for a repeated `Digits`).
    #[test]
    fn order_and_repeated_names() {
        let a = pairs(&[
            ("Sid", "CA123"),
            ("SidAccount", "AC123"),
            ("Digits", "5678"),
            ("Digits", "1234"),
        ]);
        let mut b = a.clone();
        b.reverse();
        assert_eq!(compute("12345", URL, &a), "IK+Dwps556ElfBT0I3Rgjkr1wJU=");
        assert_eq!(compute("12345", URL, &a), compute("12345", URL, &b));
    }

    #[test]
    fn tampering_fails() {
        let params = pairs(&[("CallSid", "CA1"), ("CallStatus", "completed")]);
        let sig = compute("secret", "http://h/cb", &params);
        assert!(validate("secret", "http://h/cb", &params, &sig));
        assert!(!validate("other", "http://h/cb", &params, &sig));
        assert!(!validate("secret", "http://h/cb2", &params, &sig));
        let changed = pairs(&[("CallSid", "CA1"), ("CallStatus", "busy")]);
        assert!(!validate("secret", "http://h/cb", &changed, &sig));
        assert!(!validate("secret", "http://h/cb", &params, ""));
        assert!(!validate(
            "secret",
            "http://h/cb",
            &params,
            &sig[..sig.len() - 1]
        ));
        // A GET signs the URL with its query, no body.
        let get = compute("secret", "http://h/cb?CallSid=CA1", &[]);
        assert!(validate("secret", "http://h/cb?CallSid=CA1", &[], &get));
    }
}
