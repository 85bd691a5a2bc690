//! The crate on its own, as another voice stack would use it: read a bot's TwiML, check a
//! webhook's signature with Twilio's documented example, and answer the Calls resource from a
//! registry of one's own through `CallControl`, with no HTTP library.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use ontime_twilio::request::{self, parse_path, Resource};
use ontime_twilio::{
    json, parse_twiml, signature, CallControl, CallFilter, CallStatus, CallUpdate, CallView,
    ControlError, CreateRequest, DialTarget, Direction, Error, NewCall, Params, TwimlSource,
    UpdateRequest, Verb,
};

#[test]
fn a_bots_twiml_becomes_verbs() {
    let verbs = parse_twiml(
        r#"<?xml version="1.0" encoding="UTF-8"?>
        <Response>
          <Pause length="2"/>
          <Play digits="w12#"/>
          <Connect><Stream url="wss://bot.example/ws"><Parameter name="lang" value="en"/></Stream></Connect>
          <Refer><Sip>sip:agent@pbx.example</Sip></Refer>
        </Response>"#,
    )
    .unwrap();
    assert_eq!(
        verbs,
        [
            Verb::Pause(Duration::from_secs(2)),
            Verb::PlayDigits("w12#".into()),
            Verb::ConnectStream {
                url: "wss://bot.example/ws".into(),
                parameters: vec![("lang".into(), "en".into())],
                audio: ontime_twilio::StreamAudio::Mulaw8k,
            },
            Verb::Transfer(DialTarget::Sip("sip:agent@pbx.example".into())),
        ]
    );
    let e = parse_twiml(r#"<Response><Say voice="alice">Hi</Say></Response>"#).unwrap_err();
    assert_eq!(e.to_string(), "<Say> is not supported");
}

/// The worked example of Twilio's webhook-security documentation.
#[test]
fn twilios_documented_signature_validates() {
    let url = "https://mycompany.com/myapp.php?foo=1&bar=2";
    let params: Vec<(String, String)> = [
        ("Digits", "1234"),
        ("To", "+18005551212"),
        ("From", "+14158675309"),
        ("Caller", "+14158675309"),
        ("CallSid", "CA1234567890ABCDE"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let sig = "RSOYDt4T1cUTdK1PDd93/VVr8B8=";
    assert!(signature::validate("12345", url, &params, sig));
    assert!(!signature::validate("54321", url, &params, sig));
    assert_eq!(signature::HEADER, "X-Twilio-Signature");
}

/// A registry of one's own: calls are placed and updated in memory.
struct Registry(Mutex<Vec<CallView>>);

impl CallControl for Registry {
    fn account_sid(&self) -> &str {
        "AC1"
    }
    fn get(&self, sid: &str) -> Option<CallView> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|c| c.sid == sid)
            .cloned()
    }
    fn list(&self, filter: &CallFilter) -> Vec<CallView> {
        let calls = self.0.lock().unwrap();
        let status = |c: &&CallView| filter.status.is_none_or(|s| s == c.status);
        calls.iter().filter(status).cloned().collect()
    }
    fn update(&self, sid: &str, update: CallUpdate) -> Result<CallView, ControlError> {
        let mut calls = self.0.lock().unwrap();
        let call = calls
            .iter_mut()
            .find(|c| c.sid == sid)
            .ok_or_else(|| ControlError::NotFound(sid.into()))?;
        if update == CallUpdate::Complete {
            call.status = CallStatus::Completed;
        }
        Ok(call.clone())
    }
    fn create(&self, call: NewCall) -> Result<CallView, ControlError> {
        let now = SystemTime::now();
        let view = CallView {
            sid: "CA2".into(),
            account_sid: "AC1".into(),
            from: call.from,
            to: call.to,
            status: CallStatus::Queued,
            direction: Direction::OutboundApi,
            date_created: now,
            date_updated: now,
            start_time: None,
            end_time: None,
            duration_secs: None,
            sip_call_id: String::new(),
            answered_by: None,
            parent_call_sid: None,
        };
        self.0.lock().unwrap().push(view.clone());
        Ok(view)
    }
}

/// What an HTTP server's handler does with a POST, minus the HTTP.
fn post(control: &dyn CallControl, path: &str, form: &str) -> Result<serde_json::Value, Error> {
    let (account, resource) = parse_path(path).ok_or_else(|| Error::not_found(path))?;
    if account != control.account_sid() {
        return Err(Error::not_found(path));
    }
    let params = Params::parse(form.as_bytes());
    let call = match resource {
        Resource::Calls => {
            let create = CreateRequest::parse(&params)?;
            let TwimlSource::Inline(verbs) = create.twiml.clone() else {
                unreachable!("this example passes Twiml=");
            };
            control.create(create.into_new_call(verbs))
        }
        Resource::Call(sid) => match UpdateRequest::parse(&params)? {
            UpdateRequest::Apply(update) => control.update(sid, update),
            _ => unreachable!("this example passes Status="),
        },
    };
    call.map(|c| json::call(&c))
        .map_err(|e| Error::control(e, path))
}

#[test]
fn the_calls_resource_over_a_registry_of_ones_own() {
    let registry = Registry(Mutex::new(Vec::new()));
    let calls = "/2010-04-01/Accounts/AC1/Calls.json";
    request::authenticate(Some("Basic QUMxOnRvaw=="), "AC1", "tok").unwrap();

    let created = post(
        &registry,
        calls,
        "To=%2B15551234567&From=%2B15550000000&Twiml=%3CResponse%3E%3CHangup%2F%3E%3C%2FResponse%3E",
    )
    .unwrap();
    assert_eq!(created["status"], "queued");
    assert_eq!(created["to_formatted"], "(555) 123-4567");

    let path = "/2010-04-01/Accounts/AC1/Calls/CA2.json";
    let updated = post(&registry, path, "Status=completed").unwrap();
    assert_eq!(updated["status"], "completed");

    let e = post(
        &registry,
        "/2010-04-01/Accounts/AC1/Calls/CA9.json",
        "Status=completed",
    )
    .unwrap_err();
    assert_eq!((e.status, e.code), (404, 20404));
    let e = post(&registry, calls, "To=x&From=y&Twiml=%3CGather%2F%3E").unwrap_err();
    assert_eq!(e.code, 12100);

    let list = request::ListRequest::parse(&Params::parse(b"Status=completed")).unwrap();
    let page = json::calls_page("AC1", &list, &registry.list(&list.filter));
    assert_eq!(page["calls"][0]["sid"], "CA2");
}
