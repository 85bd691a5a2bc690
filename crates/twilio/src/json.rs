//! The Calls resource as Twilio's API writes it in JSON: one call ([`call`]) and a page of the
//! list ([`calls_page`]). Twilio's helper libraries read these shapes, so a bot written for
//! Twilio reads ontime's answers unchanged.

use serde_json::{json, Value};

use crate::call::CallView;
use crate::date::rfc2822;
use crate::request::{ListRequest, PREFIX};
use crate::webhook::API_VERSION;

/// Twilio's Call resource. What ontime does not know (price, caller name, phone number SID,
/// ...) is null as Twilio leaves it; `sip_call_id` is ontime's own addition.
pub fn call(call: &CallView) -> Value {
    let base = format!("{PREFIX}{}/Calls/{}", call.account_sid, call.sid);
    json!({
        "account_sid": call.account_sid,
        "annotation": null,
        "answered_by": call.answered_by,
        "api_version": API_VERSION,
        "caller_name": null,
        "date_created": rfc2822(call.date_created),
        "date_updated": rfc2822(call.date_updated),
        "direction": call.direction.as_str(),
        "duration": call.duration_secs.map(|d| d.to_string()),
        "end_time": call.end_time.map(rfc2822),
        "forwarded_from": null,
        "from": call.from,
        "from_formatted": formatted(&call.from),
        "group_sid": null,
        "parent_call_sid": call.parent_call_sid,
        "phone_number_sid": null,
        "price": null,
        "price_unit": "USD",
        "queue_time": "0",
        "sid": call.sid,
        "sip_call_id": call.sip_call_id,
        "start_time": call.start_time.map(rfc2822),
        "status": call.status.as_str(),
        "subresource_uris": {
            "notifications": format!("{base}/Notifications.json"),
            "recordings": format!("{base}/Recordings.json"),
        },
        "to": call.to,
        "to_formatted": formatted(&call.to),
        "trunk_sid": null,
        "uri": format!("{base}.json"),
    })
}

/// The page `list` asks for of `calls` (every call matching its filter, newest first), with
/// Twilio's paging fields; each page URI repeats the filters, so that following
/// `next_page_uri` keeps them.
pub fn calls_page(account_sid: &str, list: &ListRequest, calls: &[CallView]) -> Value {
    let ListRequest {
        filter,
        page_size,
        page,
    } = list;
    let (page_size, page) = (*page_size, *page);
    let start = page.saturating_mul(page_size);
    let shown: Vec<Value> = calls.iter().skip(start).take(page_size).map(call).collect();
    let filters = {
        let mut s = form_urlencoded::Serializer::new(String::new());
        let status = filter.status.map(|s| s.as_str());
        for (name, value) in [
            ("Status", status),
            ("To", filter.to.as_deref()),
            ("From", filter.from.as_deref()),
        ] {
            if let Some(v) = value {
                s.append_pair(name, v);
            }
        }
        s.finish()
    };
    let base = format!("{PREFIX}{account_sid}/Calls.json");
    let page_uri = |n: usize| {
        let sep = if filters.is_empty() { "" } else { "&" };
        format!("{base}?{filters}{sep}PageSize={page_size}&Page={n}")
    };
    let more = calls.len() > start.saturating_add(shown.len());
    json!({
        "calls": shown,
        "end": start + shown.len().saturating_sub(1),
        "first_page_uri": page_uri(0),
        "next_page_uri": more.then(|| page_uri(page + 1)),
        "page": page,
        "page_size": page_size,
        "previous_page_uri": (page > 0).then(|| page_uri(page - 1)),
        "start": start,
        "uri": page_uri(page),
    })
}

/// A number as Twilio formats North American ones (`(415) 867-5309`); anything else as is.
fn formatted(number: &str) -> String {
    match number.strip_prefix("+1") {
        Some(d) if d.len() == 10 && d.bytes().all(|b| b.is_ascii_digit()) => {
            format!("({}) {}-{}", &d[..3], &d[3..6], &d[6..])
        }
        _ => number.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::call::{CallFilter, CallStatus, Direction};

    #[test]
    fn formatted_numbers() {
        assert_eq!(formatted("+14158675309"), "(415) 867-5309");
        assert_eq!(formatted("+442071234567"), "+442071234567");
    }

    fn view(sid: &str) -> CallView {
        let t = UNIX_EPOCH + Duration::from_secs(1_283_286_988);
        CallView {
            sid: sid.into(),
            account_sid: "AC1".into(),
            from: "+14158675308".into(),
            to: "sip:bot@example.com".into(),
            status: CallStatus::Completed,
            direction: Direction::OutboundApi,
            date_created: t,
            date_updated: t,
            start_time: Some(t),
            end_time: Some(t + Duration::from_secs(61)),
            duration_secs: Some(61),
            sip_call_id: "abc@host".into(),
            answered_by: None,
            parent_call_sid: None,
        }
    }

    #[test]
    fn a_call_as_twilio_writes_it() {
        let j = call(&view("CA2"));
        assert_eq!(j["uri"], "/2010-04-01/Accounts/AC1/Calls/CA2.json");
        assert_eq!(j["status"], "completed");
        assert_eq!(j["direction"], "outbound-api");
        assert_eq!(j["duration"], "61");
        assert_eq!(j["date_created"], "Tue, 31 Aug 2010 20:36:28 +0000");
        assert_eq!(j["end_time"], "Tue, 31 Aug 2010 20:37:29 +0000");
        assert_eq!(j["from_formatted"], "(415) 867-5308");
        assert_eq!(j["price"], Value::Null);
    }

    #[test]
    fn pages_keep_their_filters() {
        let calls: Vec<CallView> = (0..5).map(|i| view(&format!("CA{i}"))).collect();
        let list = ListRequest {
            filter: CallFilter {
                status: Some(CallStatus::Completed),
                to: None,
                from: Some("+1 415".into()),
            },
            page_size: 2,
            page: 1,
        };
        let j = calls_page("AC1", &list, &calls);
        let sids: Vec<&str> = j["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["sid"].as_str().unwrap())
            .collect();
        assert_eq!(sids, ["CA2", "CA3"]);
        assert_eq!((j["start"].as_u64(), j["end"].as_u64()), (Some(2), Some(3)));
        let uri = "/2010-04-01/Accounts/AC1/Calls.json?Status=completed&From=%2B1+415&PageSize=2";
        assert_eq!(j["next_page_uri"], format!("{uri}&Page=2"));
        assert_eq!(j["previous_page_uri"], format!("{uri}&Page=0"));
        let last = calls_page("AC1", &ListRequest { page: 2, ..list }, &calls);
        assert_eq!(last["next_page_uri"], Value::Null);
    }
}
