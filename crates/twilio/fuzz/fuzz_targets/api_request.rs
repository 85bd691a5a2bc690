//! What the call-control API parses from a request (ontime-twilio's request.rs), without sockets:
//! the path router, the `Authorization` header's Basic credentials, the form content type, and
//! form bodies with the values read from them (`Status`, `Timeout`, `StatusCallbackEvent`,
//! `PageSize`/`Page`, `Method`-like ones). No panic (arithmetic overflow included), and:
//! - a routed path is `PREFIX{AccountSid}/Calls[/{CallSid}][.json]` with non-empty SIDs without
//!   `/`, and any such path routes to its SIDs;
//! - Basic credentials split at the first colon and survive a round trip through base64;
//! - a form survives a round trip through form_urlencoded's serializer;
//! - `Timeout` is 1..=600 s (60 when absent), `PageSize` 1..=1000, the events are known, distinct
//!   and never none, statuses are Twilio's spellings, and a refusal names the value at fault.
//!
//! Input: four parts split at the first three line feeds (UTF-8, lossily when not valid): the
//! path, the `Authorization` header, the `Content-Type`, and the form body (as bytes).
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;

use ontime_twilio::request::{
    basic_credentials, is_form, parse_path, Params, Resource, DEFAULT_PAGE_SIZE, DEFAULT_RING_SECS,
    MAX_PAGE_SIZE, MAX_RING_SECS, PREFIX,
};
use ontime_twilio::{CallStatus, CallUpdate, StatusCallbackEvent};

const EVENTS: [&str; 4] = ["initiated", "ringing", "answered", "completed"];

fn check_path(path: &str) {
    let Some((account, resource)) = parse_path(path) else {
        return;
    };
    assert!(!account.is_empty() && !account.contains('/'), "{path:?}");
    let base = match resource {
        Resource::Calls => format!("{PREFIX}{account}/Calls"),
        Resource::Call(sid) => {
            assert!(!sid.is_empty() && !sid.contains('/'), "{path:?}");
            format!("{PREFIX}{account}/Calls/{sid}")
        }
    };
    assert!(
        path == base || path == format!("{base}.json"),
        "{path:?} routed as {base:?}"
    );
}

/// Paths built from arbitrary SIDs route to those SIDs.
fn check_routes(account: &str, sid: &str) {
    let account = account.replace('/', "");
    let sid = sid.replace('/', "");
    if account.is_empty() {
        return;
    }
    for suffix in ["", ".json"] {
        assert_eq!(
            parse_path(&format!("{PREFIX}{account}/Calls{suffix}")),
            Some((account.as_str(), Resource::Calls))
        );
        let path = format!("{PREFIX}{account}/Calls/{sid}{suffix}");
        let routed = parse_path(&path);
        // Without a suffix of ours, the SID's own `.json` is taken for it.
        let expected = match suffix {
            "" => sid.strip_suffix(".json").unwrap_or(&sid),
            _ => &sid,
        };
        if expected.is_empty() {
            assert_eq!(routed, None, "{path:?}: `Calls/.json` names no call");
        } else {
            assert_eq!(
                routed,
                Some((account.as_str(), Resource::Call(expected))),
                "{path:?}"
            );
        }
    }
}

fn basic(user: &[u8], password: &[u8]) -> String {
    let mut both = user.to_vec();
    both.push(b':');
    both.extend_from_slice(password);
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(both)
    )
}

fn check_auth(header: &str, other: &[u8]) {
    let (user, password) = basic_credentials(header);
    assert!(
        !user.contains(&b':'),
        "user {user:?} split at the first colon"
    );
    assert_eq!(
        basic_credentials(&basic(&user, &password)),
        (user, password)
    );
    // Arbitrary credentials, the scheme in any case, padded with spaces.
    let user: Vec<u8> = other.iter().copied().filter(|&b| b != b':').collect();
    let header = format!("  bAsIc  {}  ", &basic(&user, other)["Basic ".len()..]);
    assert_eq!(basic_credentials(&header), (user, other.to_vec()));
}

fn check_params(p: &Params) {
    // Round trip through the serializer.
    let again = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(p.pairs())
        .finish();
    assert_eq!(&Params::parse(again.as_bytes()), p, "{again:?}");

    let known = ["To", "From", "Twiml", "Url", "Method", "Timeout"];
    match p.only(&known) {
        Ok(()) => assert!(p.pairs().iter().all(|(k, _)| known.contains(&k.as_str()))),
        Err(e) => {
            assert_eq!(e.code, 21201);
            let (k, _) =
                p.pairs().iter()
                    .find(|(k, _)| !known.contains(&k.as_str()))
                    .expect("an unknown parameter");
            assert!(e.message.contains(&format!("'{k}'")), "{}", e.message);
        }
    }
    match (p.method_get("Method"), p.get("Method")) {
        (Ok(get), Some(m)) => {
            assert_eq!(get, m.eq_ignore_ascii_case("GET"));
            assert!(get || m.eq_ignore_ascii_case("POST"));
        }
        (Ok(get), None) => assert!(!get),
        (Err(e), m) => {
            assert!(m.is_some_and(|m| e.message.contains(m)), "{}", e.message);
        }
    }
    match (p.timeout_secs(), p.get("Timeout")) {
        (Ok(secs), Some(_)) => assert!((1..=MAX_RING_SECS).contains(&secs), "{secs}"),
        (Ok(secs), None) => assert_eq!(secs, DEFAULT_RING_SECS),
        (Err(e), t) => {
            assert_eq!(e.code, 21208);
            assert!(t.is_some_and(|t| e.message.contains(t)), "{}", e.message);
        }
    }
    let tokens: Vec<&str> = p
        .all("StatusCallbackEvent")
        .flat_map(str::split_whitespace)
        .collect();
    match p.status_callback_events() {
        Ok(events) => {
            assert!(tokens.iter().all(|t| EVENTS.contains(t)), "{tokens:?}");
            let names: Vec<&str> = events.iter().map(|e| e.as_str()).collect();
            if tokens.is_empty() {
                assert_eq!(events, [StatusCallbackEvent::Completed]);
            } else {
                let mut expected: Vec<&str> = Vec::new();
                for t in &tokens {
                    if !expected.contains(t) {
                        expected.push(t);
                    }
                }
                assert_eq!(names, expected);
            }
        }
        Err(e) => {
            let bad = tokens
                .iter()
                .find(|t| !EVENTS.contains(t))
                .expect("a refused event");
            assert!(e.message.contains(&format!("'{bad}'")), "{}", e.message);
        }
    }
    match (p.update_status(), p.get("Status")) {
        (Ok(None), s) => assert!(s.is_none()),
        (Ok(Some(CallUpdate::Complete)), s) => assert_eq!(s, Some("completed")),
        (Ok(Some(CallUpdate::Cancel)), s) => assert_eq!(s, Some("canceled")),
        (Ok(Some(other)), _) => panic!("Status gave {other:?}"),
        (Err(e), s) => assert!(s.is_some_and(|s| e.message.contains(s))),
    }
    match (p.status_filter(), p.get("Status")) {
        (Ok(Some(status)), s) => assert_eq!(Some(status.as_str()), s),
        (Ok(None), s) => assert!(s.is_none()),
        (Err(e), s) => {
            assert!(s.is_some_and(|s| CallStatus::parse(s).is_none() && e.message.contains(s)))
        }
    }
    match p.paging() {
        Ok((size, _page)) => {
            assert!((1..=MAX_PAGE_SIZE).contains(&size), "{size}");
            if p.get("PageSize").is_none() {
                assert_eq!(size, DEFAULT_PAGE_SIZE);
            }
        }
        Err(e) => assert_eq!(e.code, 21201),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |&b| b == b'\n');
    let path = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let auth = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let content_type = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let body = parts.next().unwrap_or_default();

    check_path(&path);
    check_routes(&content_type, &auth);
    check_auth(&auth, body);
    if is_form(&content_type) {
        let media = content_type.split(';').next().unwrap_or_default();
        assert!(media
            .trim()
            .eq_ignore_ascii_case("application/x-www-form-urlencoded"));
    }
    check_params(&Params::parse(body));
    // The query string of a GET, after the path's `?`.
    if let Some((_, query)) = path.split_once('?') {
        check_params(&Params::parse(query.as_bytes()));
    }
});
