//! The call-control API (a subset of Twilio's 2010-04-01 REST API and TwiML) against real peers:
//! sipp callers and callees on loopback, tshark on their ports, a WebSocket bot, a real pipecat
//! bot with pipecat's own `TwilioFrameSerializer`, and status callbacks checked with Twilio's own
//! `RequestValidator` (the `twilio` helper library in the pipecat venv).
//!
//! - `POST …/Calls/{CallSid}.json` with `Status=completed` hangs a sipp caller up (BYE with Q.850
//!   cause 16), and the call then reads `completed`;
//! - `<Play digits="w159#"/>` reaches the caller as RFC 4733 events 1, 5, 9, 11 (tshark decodes
//!   them in the caller's capture), 100 ms each;
//! - `<Refer><Sip>` is a blind transfer by REFER: a caller playing the trunk accepts (202, NOTIFY
//!   `100 Trying` then `200 OK`, the gateway then leaves with BYE) or declines (603: the call stays
//!   up and the WebSocket bot gets `ontime.transfer`);
//! - `--voice-url` asks a webhook (signed, Twilio's parameters) and runs the TwiML it returns;
//! - `POST …/Calls.json` dials out through `--trunk-uri` to a sipp UAS that answers and speaks;
//!   the stub's reply is heard by the callee and the status callbacks arrive signed;
//! - wrong credentials, unknown calls and unsupported TwiML get Twilio's errors, and the API
//!   answers as soon as `/readyz` says the gateway is ready;
//! - a pipecat bot whose pipeline ends hangs the SIP call up through the API, pipecat unchanged;
//! - SIP X- headers both ways: an inbound INVITE's reach the voice webhook as `SipHeader_X-…`,
//!   a `<Refer><Sip>` URI's ride the REFER's Refer-To, a SIP `To`'s go onto the INVITE once;
//! - answering-machine detection on dial-out (`MachineDetection`): a sipp callee playing a
//!   voicemail greeting and a beep is `machine_start` in the held TwiML fetch and
//!   `machine_end_beep` in the async callback and the bot's `ontime.amd`; one saying "Hello?"
//!   is `human`; one that never sends RTP is `unknown` at the silence timeout;
//! - every `sh` block of docs/call-control.md, run with the real `curl` as a reader would, does
//!   what the page says;
//! - bridged `<Dial>`: caller and callee hear each other frame for frame, digits are relayed,
//!   the `action` hears completed, busy or no-answer, and the caller hanging up while the leg
//!   rings cancels it.

#[path = "common/bot.rs"]
mod bot;
mod common;
#[path = "common/doc_sh.rs"]
mod doc_sh;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bot::{Step, TestBot};
use common::pipecat::{cdr_end_records, require_pipecat, start_example, venv_python};
use common::*;
use serde_json::Value;

/// Where the transfers go (TEST-NET-1: only ever named in a Refer-To, never dialled).
const TRANSFER_TARGET: &str = "sip:agent@192.0.2.55";
/// [`TRANSFER_TARGET`] as the regular expression a caller's scenario matches the Refer-To with.
const TRANSFER_TARGET_RE: &str = "sip:agent@192\\.0\\.2\\.55";
/// `Reason` of the BYE an API hang-up sends (a regular expression for sipp's `ereg`; the dots
/// stand for the quotes, which cannot go into the scenario's XML attribute as they are).
const REASON_API_HANGUP: &str = "Q\\.850;cause=16;text=.Normal call clearing.";

fn tools() -> bool {
    require("sipp") && require("tshark") && require("sox") && require("espeak-ng")
}

static ONE_CALL_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The calls run one at a time: each test's gateway runs the stub's models (or a Python bot) on
/// a machine of two cores, and `cargo test` runs tests in parallel.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_CALL_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A test's start: its tools are there (else a printed skip, a failure in CI), and its turn.
fn begin() -> Option<MutexGuard<'static, ()>> {
    tools().then(one_at_a_time)
}

// ---------------------------------------------------------------------------------------------
// The API client: HTTP/1.1 over std, Basic auth, form bodies, Twilio's JSON.

/// A gateway with its API on, and the credentials it was given.
struct ApiGateway {
    gw: Gateway,
    api: SocketAddr,
    account: String,
    token: String,
}

/// A response of the API.
#[derive(Debug)]
struct Resp {
    status: u16,
    body: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): HTTP {} {}", self.status, self.body))
    }
}

/// 32 random lowercase hex digits.
fn hex32() -> String {
    let half = || {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos(),
        );
        h.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}

/// `application/x-www-form-urlencoded`, as Twilio's clients send it.
fn form_encode(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                b' ' => "+".to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The pairs of a form body, in order (repeated names kept).
fn form_decode(body: &str) -> Vec<(String, String)> {
    let dec = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (dec(k), dec(v))
        })
        .collect()
}

/// The body of an HTTP/1.1 message whose head says `Transfer-Encoding: chunked`.
fn dechunk(mut raw: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = raw.split_once("\r\n") {
        let n = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        raw = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One HTTP request to `addr`, `Connection: close`; what went wrong when nothing answered.
fn http(
    addr: SocketAddr,
    method: &str,
    target: &str,
    auth: Option<(&str, &str)>,
    form: Option<&str>,
) -> Result<Resp, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .map_err(|e| e.to_string())?;
    let mut req = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\n"
    );
    if let Some((user, pass)) = auth {
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        req.push_str(&format!("Authorization: Basic {b64}\r\n"));
    }
    let body = form.unwrap_or("");
    if form.is_some() {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)
        .map_err(|e| format!("read: {e} (after {raw:?})"))?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {raw:?}"))?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .replace(' ', "")
            .starts_with("transfer-encoding:chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(Resp { status, body })
}

/// Start the gateway with its API on `api_port`, fresh credentials (the token in the
/// environment, never on the command line) and `extra` flags.
fn start_with_api(extra: &[&str], api_port: u16) -> ApiGateway {
    start_with_api_env(extra, api_port, &[])
}

/// [`start_with_api`] with more environment variables (secrets).
fn start_with_api_env(extra: &[&str], api_port: u16, env: &[(&str, &str)]) -> ApiGateway {
    let account = format!("AC{}", hex32());
    let token = hex32();
    let api: SocketAddr = format!("127.0.0.1:{api_port}").parse().unwrap();
    let listen = api.to_string();
    let mut args = vec!["--api-listen", &listen, "--api-account-sid", &account];
    args.extend_from_slice(extra);
    let mut all_env = vec![("ONTIME_API_AUTH_TOKEN", token.as_str())];
    all_env.extend_from_slice(env);
    let gw = start_gateway_env(&args, &all_env);
    ApiGateway {
        gw,
        api,
        account,
        token,
    }
}

impl ApiGateway {
    fn calls_path(&self) -> String {
        format!("/2010-04-01/Accounts/{}/Calls.json", self.account)
    }
    fn call_path(&self, sid: &str) -> String {
        format!("/2010-04-01/Accounts/{}/Calls/{sid}.json", self.account)
    }
    fn auth(&self) -> Option<(&str, &str)> {
        Some((self.account.as_str(), self.token.as_str()))
    }
    fn request(&self, method: &str, target: &str, form: Option<&[(&str, &str)]>) -> Resp {
        let body = form.map(form_encode);
        http(self.api, method, target, self.auth(), body.as_deref()).unwrap_or_else(|e| {
            panic!(
                "the API at {} did not answer {method} {target}: {e}",
                self.api
            )
        })
    }
    /// `GET …/Calls/{sid}.json`.
    fn get_call(&self, sid: &str) -> Resp {
        self.request("GET", &self.call_path(sid), None)
    }
    /// `POST …/Calls/{sid}.json` with this form.
    fn update(&self, sid: &str, form: &[(&str, &str)]) -> Resp {
        self.request("POST", &self.call_path(sid), Some(form))
    }
    /// The single call the API lists as `in-progress` (waits for it, bounded: 20 s).
    fn live_call(&self) -> Value {
        let target = format!("{}?Status=in-progress", self.calls_path());
        let mut last = String::new();
        let mut found = None;
        wait_until(Duration::from_secs(20), || {
            let r = self.request("GET", &target, None);
            last = format!("HTTP {} {}", r.status, r.body);
            if r.status == 200 {
                found = r.json()["calls"]
                    .as_array()
                    .filter(|calls| calls.len() == 1)
                    .map(|calls| calls[0].clone());
            }
            found.is_some()
        });
        found.unwrap_or_else(|| {
            panic!(
                "no single in-progress call listed in 20 s; last answer: {last}\n{}",
                self.context()
            )
        })
    }
    /// Wait (bounded) until `GET` shows the call with this status; the last view.
    fn wait_status(&self, sid: &str, status: &str, limit: Duration) -> Value {
        let mut view = Value::Null;
        wait_until(limit, || {
            let r = self.get_call(sid);
            view = if r.status == 200 {
                r.json()
            } else {
                Value::String(format!("HTTP {} {}", r.status, r.body))
            };
            view["status"] == status
        });
        view
    }
    fn metric(&self, series: &str) -> f64 {
        let body = self.gw.metrics_text();
        metric_value(&body, series).unwrap_or_else(|| panic!("{series} missing from /metrics"))
    }
    /// What to print when a check fails: the gateway's output, last lines.
    fn context(&self) -> String {
        format!(
            "gateway stderr (tail):\n{}\ngateway log (tail):\n{}",
            tail(&self.gw.stderr(), 30),
            tail(&self.gw.stdout(), 30)
        )
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The sum of a counter over every label set that contains `label` (e.g. `status="401"`).
fn metric_sum(body: &str, name: &str, label: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// A folder for this test's files.
fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ontime-cc-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The SIP messages of a capture on `sip_port`, one line each (first line, CSeq, and the
/// headers the transfer tests care about): printed when a check fails.
fn sip_flow(pcap: &Path, sip_port: u16) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={sip_port},sip"), "-Y", "sip"])
        .args(["-T", "fields", "-E", "separator=|", "-e", "udp.srcport"])
        .args(["-e", "udp.dstport", "-e", "sip.Request-Line"])
        .args([
            "-e",
            "sip.Status-Line",
            "-e",
            "sip.CSeq",
            "-e",
            "sip.Refer-To",
        ])
        .args(["-e", "sip.Event", "-e", "sip.Subscription-State"])
        .args(["-e", "sip.Reason", "-e", "sipfrag.line"])
        .stderr(Stdio::null())
        .output()
        .expect("tshark -r");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fresh caller speech in `dir` (no inner commas: see [`fresh_speech`]).
fn speech(dir: &Path) -> PathBuf {
    fresh_speech(
        dir,
        "I would like to change the address on my account please.",
    )
}

/// A sipp caller speaking fresh speech (`@SPEECH@`) in `scenario_name`, with its other
/// placeholders, running in the background against the gateway (bounded: 60 s).
fn caller(
    cc: &ApiGateway,
    scenario_name: &str,
    placeholders: &[(&str, &str)],
    media_port: u16,
) -> SippCall {
    let label = format!("{}-{media_port}", scenario_name.trim_end_matches(".xml"));
    let speech = speech(&tempdir(&label));
    let mut reps = vec![("@SPEECH@", speech.to_str().unwrap())];
    reps.extend_from_slice(placeholders);
    let scen = scenario(scenario_name, &reps);
    spawn_sipp(cc.gw.sip, &scen, 1, media_port, Duration::from_secs(60))
}

/// A caller that speaks, then waits (up to 40 s) for a BYE whose Reason is the API hang-up's.
fn caller_hung_up_by_api(cc: &ApiGateway, media_port: u16) -> SippCall {
    caller(
        cc,
        "caller_speaks_waits_bye.xml",
        &[
            ("@BYE_WITHIN_MS@", "40000"),
            ("@REASON@", REASON_API_HANGUP),
        ],
        media_port,
    )
}

/// `Status=completed` for the call, then the caller must get the BYE (with the Reason its
/// scenario checks): the API's answer.
fn hang_up(cc: &ApiGateway, sid: &str, caller: SippCall) -> Value {
    let r = cc.update(sid, &[("Status", "completed")]);
    assert_eq!(
        r.status, 200,
        "Status=completed: HTTP {} {}",
        r.status, r.body
    );
    let (ok, log) = caller.finish(Duration::from_secs(30));
    assert!(
        ok,
        "the caller did not get the API's BYE:\n{log}\n{}",
        cc.context()
    );
    r.json()
}

/// Check a Twilio error body: `{code, message, more_info, status}` with this code and status.
fn check_twilio_error(r: &Resp, status: u16, code: u64, what: &str) -> Value {
    assert_eq!(r.status, status, "{what}: HTTP {} {}", r.status, r.body);
    let v = r.json();
    assert_eq!(v["code"], code, "{what}: {v}");
    assert_eq!(v["status"], status, "{what}: {v}");
    assert!(
        v["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {v}"
    );
    assert!(
        v["more_info"]
            .as_str()
            .is_some_and(|m| m.contains(&code.to_string())),
        "{what}: more_info should point to the code's page: {v}"
    );
    v
}

// ---------------------------------------------------------------------------------------------
// 1. Hang up through the API.

#[test]
fn api_hangup_sends_bye_with_cause_16_and_the_call_reads_completed() {
    let Some(_one) = begin() else { return };
    let cc = start_with_api(&[], free_tcp_port());
    let caller = caller_hung_up_by_api(&cc, free_media_port());
    let call = cc.live_call();
    let sid = call["sid"].as_str().unwrap_or_default().to_string();
    assert!(sid.starts_with("CA") && sid.len() == 34, "sid {call}");
    assert_eq!(call["account_sid"], cc.account.as_str(), "{call}");
    assert_eq!(call["status"], "in-progress", "{call}");
    assert_eq!(call["direction"], "inbound", "{call}");
    assert!(
        call["from"].as_str().is_some_and(|f| f.contains("caller")),
        "{call}"
    );
    assert!(
        call["to"].as_str().is_some_and(|t| t.contains("bot")),
        "{call}"
    );
    assert!(
        call["sip_call_id"].as_str().is_some_and(|c| !c.is_empty()),
        "{call}"
    );
    // The same call by its SID.
    let one = cc.get_call(&sid);
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.json()["sid"], sid.as_str());

    // The caller gets the BYE, with Reason Q.850 cause 16 (sipp's ereg checks it).
    let answer = hang_up(&cc, &sid, caller);
    assert_eq!(answer["sid"], sid.as_str(), "{answer}");
    let view = cc.wait_status(&sid, "completed", Duration::from_secs(5));
    assert_eq!(view["status"], "completed", "GET after the hang-up: {view}");
    assert_eq!(
        cc.metric("ontime_api_requests_total{route=\"call_update\",status=\"200\"}"),
        1.0
    );
    assert!(wait_until(Duration::from_secs(5), || cc
        .gw
        .metric("ontime_calls_total{result=\"completed\"}")
        == Some(1.0)));
}

// ---------------------------------------------------------------------------------------------
// 2. <Play digits> as RFC 4733 events.

/// One RTP packet sent to the caller, as tshark decodes it.
#[derive(Debug, Clone, Copy)]
struct RtpPkt {
    pt: u8,
    ssrc: u32,
    marker: bool,
    ts: u32,
    /// RFC 4733: (event, end bit, duration), for telephone-events.
    event: Option<(u8, bool, u32)>,
}

/// The RTP packets sent to `media_port`; tshark reads payload type 101 as RFC 4733
/// (Wireshark's default), which is what the caller offered.
fn rtp_to(pcap: &Path, media_port: u16) -> Vec<RtpPkt> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={media_port},rtp")])
        .args(["-Y", &format!("rtp && udp.dstport == {media_port}")])
        .args(["-T", "fields", "-e", "rtp.p_type", "-e", "rtp.ssrc"])
        .args(["-e", "rtp.marker", "-e", "rtp.timestamp"])
        .args(["-e", "rtpevent.event_id", "-e", "rtpevent.end_of_event"])
        .args(["-e", "rtpevent.duration"])
        .stderr(Stdio::null())
        .output()
        .expect("tshark -r");
    let flag = |f: &str| matches!(f, "1" | "True");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let event = match (f.get(4), f.get(5), f.get(6)) {
                (Some(e), Some(end), Some(d)) if !e.is_empty() => {
                    Some((e.parse().ok()?, flag(end), d.parse().ok()?))
                }
                _ => None,
            };
            Some(RtpPkt {
                pt: f.first()?.parse().ok()?,
                ssrc: u32::from_str_radix(f.get(1)?.trim_start_matches("0x"), 16).ok()?,
                marker: flag(f.get(2)?),
                ts: f.get(3)?.parse().ok()?,
                event,
            })
        })
        .collect()
}

/// RFC 4733 events grouped by digit: one digit's packets share an RTP timestamp; arrival order.
fn digit_groups<'a>(events: &[&'a RtpPkt]) -> Vec<Vec<&'a RtpPkt>> {
    let mut digits: Vec<Vec<&RtpPkt>> = Vec::new();
    for e in events {
        match digits.last_mut() {
            Some(rows) if rows[0].ts == e.ts => rows.push(e),
            _ => digits.push(vec![e]),
        }
    }
    digits
}

#[test]
fn play_digits_reach_the_caller_as_rfc4733_events_in_order() {
    let Some(_one) = begin() else { return };
    let cc = start_with_api(&[], free_tcp_port());
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    // The caller offers `a=rtpmap:101 telephone-event/8000`.
    let caller = caller_hung_up_by_api(&cc, media_port);
    let sid = cc.live_call()["sid"].as_str().unwrap().to_string();
    let r = cc.update(
        &sid,
        &[("Twiml", r#"<Response><Play digits="w159#"/></Response>"#)],
    );
    assert_eq!(r.status, 200, "Play digits: HTTP {} {}", r.status, r.body);
    let sent = wait_until(Duration::from_secs(15), || {
        cc.gw.metric("ontime_dtmf_sent_total") == Some(4.0)
    });
    assert!(
        sent,
        "ontime_dtmf_sent_total is {:?}, not 4\n{}",
        cc.gw.metric("ontime_dtmf_sent_total"),
        cc.context()
    );
    // The sequence lasts 1.3 s (0.5 s pause, four 100 ms tones 100 ms apart) from its start;
    // let it and the last end packets go out, then hang up.
    std::thread::sleep(Duration::from_secs(2));
    hang_up(&cc, &sid, caller);
    let pcap = cap.finish();

    let packets = rtp_to(&pcap, media_port);
    let audio_ssrc = packets.iter().find(|p| p.pt == 0).map(|p| p.ssrc);
    let events: Vec<&RtpPkt> = packets.iter().filter(|p| p.event.is_some()).collect();
    assert!(!events.is_empty(), "the caller heard no RFC 4733 event");
    for e in &events {
        assert_eq!(
            e.pt, 101,
            "an event on payload type {} (offered 101): {e:?}",
            e.pt
        );
        // The events belong to the call's audio stream (one SSRC, one clock).
        assert_eq!(Some(e.ssrc), audio_ssrc, "event SSRC vs audio SSRC: {e:?}");
    }
    let digits = digit_groups(&events);
    let id = |p: &RtpPkt| p.event.map_or(255, |e| e.0);
    let ids: Vec<u8> = digits.iter().map(|rows| id(rows[0])).collect();
    assert_eq!(ids, vec![1, 5, 9, 11], "digits heard (11 is #): {events:?}");
    for rows in &digits {
        let digit = id(rows[0]);
        assert!(
            rows.iter().all(|r| id(r) == digit),
            "two events under one timestamp: {rows:?}"
        );
        // RFC 4733 2.5.1.3: the first packet of an event has the marker bit.
        assert!(
            rows[0].marker,
            "digit {digit} starts without the marker: {rows:?}"
        );
        let ends: Vec<u32> = rows
            .iter()
            .filter_map(|r| r.event.filter(|e| e.1).map(|e| e.2))
            .collect();
        assert!(
            !ends.is_empty(),
            "digit {digit} has no end packet: {rows:?}"
        );
        // 100 ms tones: the end packets' duration is 800 timestamp units at 8 kHz.
        assert!(
            ends.iter().all(|d| *d == 800),
            "digit {digit} lasted {ends:?} units: {rows:?}"
        );
        eprintln!(
            "digit {digit}: timestamp {}, {} packets, {} end packets of duration 800",
            rows[0].ts,
            rows.len(),
            ends.len()
        );
    }
    assert!(
        digits.windows(2).all(|w| w[1][0].ts > w[0][0].ts),
        "events not in timestamp order: {events:?}"
    );
    assert_eq!(cc.metric("ontime_dtmf_sent_total"), 4.0);
    assert_eq!(
        cc.metric("ontime_api_requests_total{route=\"call_update\",status=\"200\"}"),
        2.0
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Blind transfer by REFER.

#[test]
fn refer_accepted_then_notify_200_and_the_gateway_leaves_with_bye() {
    let Some(_one) = begin() else { return };
    let cc = start_with_api(&[], free_tcp_port());
    let cap = capture(&[cc.gw.sip.port()]);
    let caller = caller(
        &cc,
        "caller_refer_accept.xml",
        &[
            ("@REFER_WITHIN_MS@", "30000"),
            ("@REFER_TO_RE@", TRANSFER_TARGET_RE),
        ],
        free_media_port(),
    );
    let sid = cc.live_call()["sid"].as_str().unwrap().to_string();
    let twiml = format!("<Response><Refer><Sip>{TRANSFER_TARGET}</Sip></Refer></Response>");
    let r = cc.update(&sid, &[("Twiml", &twiml)]);
    assert_eq!(r.status, 200, "Dial: HTTP {} {}", r.status, r.body);
    let flow = finish_transfer(&cc, caller, cap, "the transfer flow failed");
    eprintln!("SIP flow:\n{flow}");
    let m = |s: &str| cc.metric(s);
    assert_eq!(m("ontime_transfers_total{result=\"completed\"}"), 1.0);
    assert_eq!(m("ontime_transfers_total{result=\"rejected\"}"), 0.0);
    assert_eq!(m("ontime_transfers_total{result=\"failed\"}"), 0.0);
    assert_eq!(
        m("ontime_sip_messages_total{method=\"REFER\",direction=\"out\"}"),
        1.0
    );
    assert_eq!(
        m("ontime_sip_messages_total{method=\"NOTIFY\",direction=\"in\"}"),
        2.0
    );
    assert_eq!(
        m("ontime_api_requests_total{route=\"call_update\",status=\"200\"}"),
        1.0
    );
    let view = cc.wait_status(&sid, "completed", Duration::from_secs(5));
    assert_eq!(
        view["status"], "completed",
        "GET after the transfer: {view}"
    );
    let cdr = completed_transfer_record(&cc);
    assert_eq!(cdr["call_sid"], sid.as_str(), "CDR {cdr}");
    assert_eq!(cdr["direction"], "inbound", "CDR {cdr}");
}

/// The call's end record (waited for, bounded: 5 s), which must name a completed transfer to
/// [`TRANSFER_TARGET`].
fn completed_transfer_record(cc: &ApiGateway) -> Value {
    assert!(wait_until(Duration::from_secs(5), || !cdr_end_records(
        &cc.gw
    )
    .is_empty()));
    let cdr = cdr_end_records(&cc.gw).remove(0);
    assert_eq!(cdr["transfer_target"], TRANSFER_TARGET, "CDR {cdr}");
    assert_eq!(cdr["transfer_result"], "completed", "CDR {cdr}");
    cdr
}

/// Wait for a transfer's caller (bounded: 60 s) and stop the capture of the gateway's SIP port;
/// the SIP flow, one message a line. A failed caller fails the test with `what`, its log, the
/// flow and the gateway's output.
fn finish_transfer(cc: &ApiGateway, caller: SippCall, cap: Capture, what: &str) -> String {
    let (ok, log) = caller.finish(Duration::from_secs(60));
    let pcap = cap.finish();
    let flow = sip_flow(&pcap, cc.gw.sip.port());
    assert!(
        ok,
        "{what}:\n{log}\nSIP (src|dst|request|status|CSeq|Refer-To|Event|Subscription-State|Reason|sipfrag):\n{flow}\n{}",
        cc.context()
    );
    flow
}

/// Wait (bounded) until the bot's first connection has a message with this `event`.
fn wait_event(bot: &TestBot, event: &str, limit: Duration) -> Option<Value> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(v) = bot
            .connection(0)
            .and_then(|c| c.events(event).first().map(|(_, v)| v.clone()))
        {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn refer_declined_603_keeps_the_call_up_and_tells_the_bot() {
    let Some(_one) = begin() else { return };
    // A bot that only listens: it acts through the API with the SIDs of its `start` message.
    // `ontime.transfer` comes without `--ws-ontime-events`: a bot that asked for a transfer
    // must learn it did not happen.
    let bot = TestBot::start(vec![Step::WaitMedia(1)]);
    let cc = start_with_api(&["--agent", &bot.url()], free_tcp_port());
    let cap = capture(&[cc.gw.sip.port()]);
    let caller = caller(
        &cc,
        "caller_refer_decline.xml",
        &[("@REFER_WITHIN_MS@", "30000"), ("@STAY_MS@", "5000")],
        free_media_port(),
    );
    let start = wait_event(&bot, "start", Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the bot got no start message\n{}", cc.context()));
    let sid = start["start"]["callSid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let stream_sid = start["start"]["streamSid"].clone();
    assert_eq!(
        start["start"]["accountSid"],
        cc.account.as_str(),
        "start carries the configured account SID: {start}"
    );
    let view = cc.wait_status(&sid, "in-progress", Duration::from_secs(10));
    assert_eq!(
        view["status"], "in-progress",
        "the start message's callSid is the API's CallSid: {view}"
    );

    let twiml = format!("<Response><Refer><Sip>{TRANSFER_TARGET}</Sip></Refer></Response>");
    let r = cc.update(&sid, &[("Twiml", &twiml)]);
    assert_eq!(r.status, 200, "Refer: HTTP {} {}", r.status, r.body);
    let event = wait_event(&bot, "ontime.transfer", Duration::from_secs(15));
    // While the caller stays (it hangs up itself after 5 s), the call is up.
    let during = cc.get_call(&sid).json();
    finish_transfer(
        &cc,
        caller,
        cap,
        "the declined transfer flow failed (a BYE from the gateway would fail it)",
    );
    let event = event.unwrap_or_else(|| {
        panic!(
            "the bot got no ontime.transfer event; it got {:?}\n{}",
            bot.connection(0).map(|c| c
                .received
                .iter()
                .map(|(_, v)| v["event"].clone())
                .collect::<Vec<_>>()),
            cc.context()
        )
    });
    assert_eq!(event["streamSid"], stream_sid, "{event}");
    assert_eq!(
        event["transfer"],
        serde_json::json!({"target": TRANSFER_TARGET, "result": "rejected", "sipStatus": 603}),
        "{event}"
    );
    assert_eq!(during["status"], "in-progress", "after the 603: {during}");
    let m = |s: &str| cc.metric(s);
    assert_eq!(m("ontime_transfers_total{result=\"rejected\"}"), 1.0);
    assert_eq!(m("ontime_transfers_total{result=\"completed\"}"), 0.0);
    assert_eq!(m("ontime_transfers_total{result=\"failed\"}"), 0.0);
    // The caller hung up: completed.
    let view = cc.wait_status(&sid, "completed", Duration::from_secs(5));
    assert_eq!(view["status"], "completed", "{view}");
}

// ---------------------------------------------------------------------------------------------
// 4. Dial out, with signed status callbacks.

/// One request a [`HttpSink`] received.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn param(&self, name: &str) -> Option<String> {
        form_decode(&self.body)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
}

/// A webhook receiver on loopback: records every request and answers 200 with the same TwiML.
struct HttpSink {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpSink {
    fn start(twiml: &str) -> HttpSink {
        let twiml = twiml.to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s) = (got.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((tcp, _)) => {
                        if let Some(r) = read_request(tcp, &twiml) {
                            g.lock().unwrap().push(r);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        HttpSink {
            addr,
            got,
            stop,
            thread: Some(thread),
        }
    }
    fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

impl Drop for HttpSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Read one request (head, then `Content-Length` bytes of body) and answer 200 with `reply`.
fn read_request(mut tcp: TcpStream, reply: &str) -> Option<Received> {
    tcp.set_nonblocking(false).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = tcp.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next()?.split_whitespace();
    let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            Some((n.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = raw[head_end + 4..].to_vec();
    while body.len() < len {
        let n = tcp.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    let _ = write!(
        tcp,
        "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
    Some(Received {
        method,
        target,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A request the gateway made as Twilio makes them: a signed form POST to `target` with the
/// account and the call's direction.
fn check_webhook(r: &Received, target: &str, account: &str, direction: &str) {
    assert_eq!(r.method, "POST", "{r:?}");
    assert_eq!(r.target, target, "{r:?}");
    assert!(
        r.header("Content-Type")
            .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded")),
        "{r:?}"
    );
    assert_eq!(r.param("AccountSid").as_deref(), Some(account), "{r:?}");
    assert_eq!(r.param("Direction").as_deref(), Some(direction), "{r:?}");
    assert!(r.header("X-Twilio-Signature").is_some(), "unsigned: {r:?}");
}

/// Validate each request's `X-Twilio-Signature` with Twilio's own `RequestValidator` (the `twilio`
/// helper library in the pipecat venv), once with the right token and once with a wrong one:
/// `(valid with the token, valid with a wrong token)` per request. `None` (with a printed
/// reason) when the library is missing outside CI.
fn twilio_validate(url: &str, requests: &[Received], token: &str) -> Option<Vec<(bool, bool)>> {
    let has_twilio = Command::new(venv_python())
        .args(["-c", "import twilio.request_validator"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_twilio {
        if std::env::var_os("CI").is_some() {
            panic!("the twilio package in .cache/pipecat-venv is required in CI (scripts/setup.sh installs it)");
        }
        eprintln!(
            "SKIP signature check: no twilio package in .cache/pipecat-venv (run scripts/setup.sh)"
        );
        return None;
    }
    let items: Vec<Value> = requests
        .iter()
        .map(|r| {
            serde_json::json!({
                "url": url,
                "params": form_decode(&r.body),
                "signature": r.header("X-Twilio-Signature").unwrap_or(""),
            })
        })
        .collect();
    let file = tempdir("signatures").join("requests.json");
    std::fs::write(&file, Value::Array(items).to_string()).unwrap();
    // A status callback never repeats a parameter: a repeated one fails loudly here rather
    // than being folded into a dict.
    let script = r#"
import json, os, sys
from twilio.request_validator import RequestValidator
token = os.environ["TWILIO_AUTH_TOKEN"]
out = []
for r in json.load(open(sys.argv[1])):
    params = {}
    for k, v in r["params"]:
        assert k not in params, f"repeated parameter {k}"
        params[k] = v
    out.append([RequestValidator(token).validate(r["url"], params, r["signature"]),
                RequestValidator(token + "x").validate(r["url"], params, r["signature"])])
print(json.dumps(out))
"#;
    let out = Command::new(venv_python())
        .args(["-c", script])
        .arg(&file)
        .env("TWILIO_AUTH_TOKEN", token)
        .output()
        .expect("run the venv's python");
    assert!(
        out.status.success(),
        "RequestValidator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<(bool, bool)> = serde_json::from_slice(&out.stdout).expect("validator output");
    Some(v)
}

/// A gateway whose `--trunk-uri` is a loopback port for a sipp callee yet to start (`extra`
/// arguments and `env` as [`start_with_api_env`]): the gateway, the callee's SIP port and an
/// even port for its media.
fn with_trunk(extra: &[&str], env: &[(&str, &str)]) -> (ApiGateway, u16, u16) {
    let trunk_sip = free_udp_port();
    let media = free_media_port();
    let trunk = format!("sip:127.0.0.1:{trunk_sip}");
    let mut args = vec!["--trunk-uri", trunk.as_str()];
    args.extend_from_slice(extra);
    (
        start_with_api_env(&args, free_tcp_port(), env),
        trunk_sip,
        media,
    )
}

/// A sipp callee on `callee_sip` (its media on `callee_media`) standing for the trunk: its
/// INVITE's Request-URI must be `sip:<user_re>@127.0.0.1:<callee_sip>` exactly (`user_re` a
/// regular expression), and it answers, speaks `text`, listens `listen_ms`, then hangs up.
/// Bounded: 60 s. Returns once sipp has had a moment to bind its port.
fn spawn_callee(
    callee_sip: u16,
    callee_media: u16,
    user_re: &str,
    text: &str,
    listen_ms: &str,
) -> SippCall {
    let uri_re = format!("sip:{user_re}@127\\.0\\.0\\.1:{callee_sip}");
    spawn_callee_at(callee_sip, callee_media, &uri_re, text, listen_ms)
}

/// [`spawn_callee`] for an INVITE whose Request-URI matches `uri_re` (a regular expression)
/// exactly, whatever its host.
fn spawn_callee_at(
    callee_sip: u16,
    callee_media: u16,
    uri_re: &str,
    text: &str,
    listen_ms: &str,
) -> SippCall {
    let speech = fresh_speech(&tempdir(&format!("callee-{callee_sip}")), text);
    spawn_callee_playing(callee_sip, callee_media, uri_re, Some(&speech), listen_ms)
}

/// [`spawn_callee_at`] playing `speech` (an 8 kHz µ-law WAV) instead of fresh speech, or, with
/// `None`, sending no RTP at all.
fn spawn_callee_playing(
    callee_sip: u16,
    callee_media: u16,
    uri_re: &str,
    speech: Option<&Path>,
    listen_ms: &str,
) -> SippCall {
    let rtp_stream = match speech {
        Some(wav) => format!(r#"<exec rtp_stream="{},1,0"/>"#, wav.display()),
        None => String::new(),
    };
    let scen = scenario(
        "callee_answers_speaks.xml",
        &[
            (r#"<exec rtp_stream="@SPEECH@,1,0"/>"#, rtp_stream.as_str()),
            ("@RURI_RE@", &format!("^INVITE {uri_re} SIP/2\\.0")),
            ("@LISTEN_MS@", listen_ms),
        ],
    );
    let callee = spawn_sipp_uas(&scen, callee_sip, 1, callee_media, Duration::from_secs(60));
    // sipp binds its port at start; give it a moment before the INVITE can arrive.
    std::thread::sleep(Duration::from_millis(500));
    callee
}

#[test]
fn outbound_call_rings_answers_hears_the_stub_and_sends_signed_callbacks() {
    let Some(_one) = begin() else { return };
    let (cc, callee_sip, callee_media) = with_trunk(&[], &[]);
    let sink = HttpSink::start("<Response/>");
    let callback_url = format!("http://{}/status?leg=outbound", sink.addr);
    let cap = capture(&[callee_media]);
    let callee = spawn_callee(
        callee_sip,
        callee_media,
        "\\+15551234567",
        "Hello this is the pharmacy returning your call about the prescription.",
        "14000",
    );
    let form = [
        ("To", "+15551234567"),
        ("From", "+15557654321"),
        ("Twiml", r#"<Response><Pause length="1"/></Response>"#),
        ("StatusCallback", callback_url.as_str()),
        ("StatusCallbackEvent", "initiated"),
        ("StatusCallbackEvent", "ringing"),
        ("StatusCallbackEvent", "answered"),
        ("StatusCallbackEvent", "completed"),
        ("StatusCallbackMethod", "POST"),
    ];
    let r = cc.request("POST", &cc.calls_path(), Some(&form));
    assert_eq!(
        r.status,
        201,
        "Calls.json create: HTTP {} {}\n{}",
        r.status,
        r.body,
        cc.context()
    );
    let created = r.json();
    let sid = created["sid"].as_str().unwrap_or_default().to_string();
    assert!(sid.starts_with("CA") && sid.len() == 34, "{created}");
    assert_eq!(created["direction"], "outbound-api", "{created}");
    assert_eq!(created["to"], "+15551234567", "{created}");
    assert_eq!(created["from"], "+15557654321", "{created}");
    assert_eq!(created["account_sid"], cc.account.as_str(), "{created}");

    let (ok, log) = callee.finish(Duration::from_secs(60));
    let pcap = cap.finish();
    assert!(ok, "the callee's call failed:\n{log}\n{}", cc.context());

    // The callee heard the stub's reply: sounding audio from the gateway after it spoke.
    let rows = rtp_rows(&pcap, callee_media);
    let callee_rows: Vec<&RtpRow> = rows.iter().filter(|r| r.src_port == callee_media).collect();
    let heard: Vec<&RtpRow> = rows.iter().filter(|r| r.dst_port == callee_media).collect();
    assert!(
        callee_rows.len() > 50,
        "the callee sent {} packets",
        callee_rows.len()
    );
    let first_speech = callee_rows
        .iter()
        .filter(|r| !r.silent)
        .map(|r| r.time)
        .fold(f64::MAX, f64::min);
    let reply: Vec<&&RtpRow> = heard.iter().filter(|r| !r.silent).collect();
    assert!(
        reply.len() > 100,
        "the callee heard {} sounding packets (of {}), not the stub's reply\n{}",
        reply.len(),
        heard.len(),
        cc.context()
    );
    assert!(
        reply[0].time > first_speech,
        "a reply before the callee spoke"
    );
    eprintln!(
        "callee heard {} sounding packets of {}, the first {:.2} s after it began to speak",
        reply.len(),
        heard.len(),
        reply[0].time - first_speech
    );

    // The callbacks: initiated, ringing, in-progress (answered), completed; once each.
    wait_until(Duration::from_secs(10), || {
        sink.received()
            .iter()
            .any(|r| r.param("CallStatus").as_deref() == Some("completed"))
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut got = sink.received();
    let summary: Vec<String> = got
        .iter()
        .map(|r| format!("{} {} {}", r.method, r.target, r.body))
        .collect();
    assert_eq!(
        got.len(),
        4,
        "status callbacks received:\n{}",
        summary.join("\n")
    );
    got.sort_by_key(|r| {
        r.param("SequenceNumber")
            .and_then(|s| s.parse::<u32>().ok())
    });
    let statuses: Vec<String> = got.iter().filter_map(|r| r.param("CallStatus")).collect();
    assert_eq!(
        statuses,
        ["initiated", "ringing", "in-progress", "completed"],
        "by SequenceNumber:\n{}",
        summary.join("\n")
    );
    for (i, r) in got.iter().enumerate() {
        check_webhook(r, "/status?leg=outbound", &cc.account, "outbound-api");
        assert_eq!(r.param("SequenceNumber"), Some(i.to_string()), "{r:?}");
        assert_eq!(r.param("CallSid").as_deref(), Some(sid.as_str()), "{r:?}");
        assert_eq!(r.param("To").as_deref(), Some("+15551234567"), "{r:?}");
        assert_eq!(r.param("From").as_deref(), Some("+15557654321"), "{r:?}");
    }
    assert!(
        got[3]
            .param("CallDuration")
            .is_some_and(|d| d.parse::<u64>().is_ok()),
        "completed without CallDuration: {:?}",
        got[3]
    );
    if let Some(verdicts) = twilio_validate(&callback_url, &got, &cc.token) {
        for (r, (valid, valid_wrong)) in got.iter().zip(verdicts) {
            assert!(valid, "RequestValidator rejects the signature of {r:?}");
            assert!(!valid_wrong, "a wrong token validates {r:?}");
            eprintln!(
                "callback {} {:?}: RequestValidator accepts its X-Twilio-Signature",
                r.param("SequenceNumber").unwrap_or_default(),
                r.param("CallStatus").unwrap_or_default()
            );
        }
    }

    let view = cc.wait_status(&sid, "completed", Duration::from_secs(5));
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["direction"], "outbound-api", "{view}");
    assert_eq!(
        cc.metric("ontime_outbound_calls_total{result=\"answered\"}"),
        1.0
    );
    assert_eq!(
        cc.metric("ontime_outbound_calls_total{result=\"failed\"}"),
        0.0
    );
    assert_eq!(
        cc.metric("ontime_api_requests_total{route=\"calls_create\",status=\"201\"}"),
        1.0
    );
}

/// A call routed by `--voice-url` (at `path` of a webhook answering
/// `<Refer><Sip>{sip}</Sip></Refer>`, `sip` XML-escaped) from a caller playing the trunk, which
/// accepts the REFER if its Refer-To matches `refer_to_re`: the gateway, the webhook's request
/// (one, its signature checked with Twilio's own validator) and the SIP flow.
fn routed_transfer(
    path: &str,
    sip: &str,
    refer_to_re: &str,
) -> (ApiGateway, Vec<Received>, String) {
    let sink = HttpSink::start(&format!(
        "<Response><Refer><Sip>{sip}</Sip></Refer></Response>"
    ));
    let voice_url = format!("http://{}{path}", sink.addr);
    let cc = start_with_api(&["--voice-url", &voice_url], free_tcp_port());
    let cap = capture(&[cc.gw.sip.port()]);
    let caller = caller(
        &cc,
        "caller_refer_accept.xml",
        &[
            ("@REFER_WITHIN_MS@", "30000"),
            ("@REFER_TO_RE@", refer_to_re),
        ],
        free_media_port(),
    );
    let failed = format!(
        "the routed call's transfer failed (webhook requests: {:?})",
        sink.received()
    );
    let flow = finish_transfer(&cc, caller, cap, &failed);
    let got = sink.received();
    assert_eq!(got.len(), 1, "webhook requests: {got:?}");
    if let Some(verdicts) = twilio_validate(&voice_url, &got, &cc.token) {
        assert_eq!(verdicts, vec![(true, false)], "RequestValidator on {got:?}");
    }
    (cc, got, flow)
}

/// Inbound routing by `--voice-url`: the gateway asks the webhook what to do with the call (a
/// signed POST with Twilio's parameters, before answering), and runs the TwiML it gets back:
/// here a transfer, which the caller playing the trunk accepts.
#[test]
fn voice_url_webhook_is_signed_and_its_twiml_transfers_the_call() {
    let Some(_one) = begin() else { return };
    let (cc, got, _) = routed_transfer("/voice?tenant=acme", TRANSFER_TARGET, TRANSFER_TARGET_RE);
    let hook = &got[0];
    check_webhook(hook, "/voice?tenant=acme", &cc.account, "inbound");
    let sid = hook.param("CallSid").unwrap_or_default();
    assert!(sid.starts_with("CA") && sid.len() == 34, "{hook:?}");
    // Twilio asks while the call rings (so the answer may still be <Reject>).
    assert_eq!(
        hook.param("CallStatus").as_deref(),
        Some("ringing"),
        "{hook:?}"
    );
    assert!(
        hook.param("From").is_some_and(|f| f.contains("caller")),
        "{hook:?}"
    );
    assert!(
        hook.param("To").is_some_and(|t| t.contains("bot")),
        "{hook:?}"
    );
    assert_eq!(
        cc.metric("ontime_transfers_total{result=\"completed\"}"),
        1.0
    );
    let view = cc.wait_status(&sid, "completed", Duration::from_secs(5));
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["direction"], "inbound", "{view}");
}

// ---------------------------------------------------------------------------------------------
// 5. Twilio's errors, and an API that is there once the gateway says it is ready.

/// `/readyz` is what an orchestrator (and [`start_gateway`]) waits for: once it says 200, the API
/// must answer too. Polled every 5 ms here, so a window between the two cannot hide between
/// the harness's 100 ms polls; three starts.
#[test]
fn the_api_answers_as_soon_as_readyz_says_ready() {
    let models = workspace().join(".cache/models");
    let err = std::env::temp_dir().join(format!("ontime-readyz-{}.err", std::process::id()));
    let (mut start, mut port_races) = (0, 0);
    while start < 3 {
        let sip = format!("127.0.0.1:{}", free_udp_port());
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
        let api: SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
        let rtp = free_port_range(8);
        let account = format!("AC{}", hex32());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ontime-gateway"));
        // As in common::start_gateway: admission by headroom is tested on its own.
        cmd.env("ONTIME_ADMISSION_RESERVE", "0");
        cmd.args([
            "--sip-listen",
            &sip,
            "--metrics-listen",
            &metrics.to_string(),
        ])
        .args(["--rtp-ports", &format!("{}-{}", rtp.0, rtp.1)])
        .args([
            "--api-listen",
            &api.to_string(),
            "--api-account-sid",
            &account,
        ])
        .env("ONTIME_API_AUTH_TOKEN", hex32())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
        if std::env::var_os("ORT_DYLIB_PATH").is_none() {
            cmd.env("ORT_DYLIB_PATH", models.join("libonnxruntime.so.1.31.1"));
        }
        if std::env::var_os("ONTIME_MODELS_DIR").is_none() {
            cmd.env("ONTIME_MODELS_DIR", &models);
        }
        let mut gw = Proc {
            child: cmd.spawn().expect("spawn ontime-gateway"),
            name: "ontime-gateway".into(),
        };
        let until = Instant::now() + Duration::from_secs(30);
        let mut exited = None;
        while http_get(metrics, "/readyz").map(|r| r.0) != Some(200) {
            assert!(Instant::now() < until, "not ready in 30 s");
            if gw.child.try_wait().ok().flatten().is_some() {
                exited = Some(std::fs::read_to_string(&err).unwrap_or_default());
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // A port probed free and taken by another test's client before the gateway bound it
        // (as common::start_gateway, it starts again on other ports).
        if let Some(stderr) = exited {
            assert!(
                lost_a_port(&stderr) && port_races < 2,
                "start {start}: the gateway exited: {stderr}"
            );
            port_races += 1;
            eprintln!("start {start}: a port was taken, again on others: {stderr}");
            continue;
        }
        let path = format!("/2010-04-01/Accounts/{account}/Calls.json");
        let answer = http(api, "GET", &path, None, None);
        assert!(
            matches!(answer, Ok(Resp { status: 401, .. })),
            "start {start}: /readyz said 200, then GET {path} without credentials got {answer:?}"
        );
        start += 1;
    }
    let _ = std::fs::remove_file(&err);
}

#[test]
fn wrong_credentials_unknown_calls_and_unsupported_twiml_get_twilios_errors() {
    let Some(_one) = begin() else { return };
    // The token from a file this time (`--api-auth-token-file`), not the environment.
    let dir = tempdir("errors");
    let account = format!("AC{}", hex32());
    let token = hex32();
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let api: SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
    let gw = start_gateway(&[
        "--api-listen",
        &api.to_string(),
        "--api-account-sid",
        &account,
        "--api-auth-token-file",
        token_file.to_str().unwrap(),
    ]);
    let cc = ApiGateway {
        gw,
        api,
        account,
        token,
    };

    // Wrong credentials and none at all: 401, code 20003.
    let wrong = http(
        cc.api,
        "GET",
        &cc.calls_path(),
        Some((&cc.account, "0123456789abcdef0123456789abcdef")),
        None,
    )
    .unwrap_or_else(|e| panic!("the API did not answer: {e}"));
    check_twilio_error(&wrong, 401, 20003, "wrong token");
    let none = http(cc.api, "GET", &cc.calls_path(), None, None)
        .unwrap_or_else(|e| panic!("the API did not answer: {e}"));
    check_twilio_error(&none, 401, 20003, "no credentials");

    // An unknown call: 404, code 20404, for GET and POST.
    let unknown = format!("CA{}", "0".repeat(32));
    check_twilio_error(&cc.get_call(&unknown), 404, 20404, "GET unknown call");
    check_twilio_error(
        &cc.update(&unknown, &[("Status", "completed")]),
        404,
        20404,
        "POST unknown call",
    );

    // A live call and a verb ontime does not run: 400 naming it, the call untouched.
    let caller = caller_hung_up_by_api(&cc, free_media_port());
    let sid = cc.live_call()["sid"].as_str().unwrap().to_string();
    let say = cc.update(
        &sid,
        &[("Twiml", "<Response><Say>Hello there</Say></Response>")],
    );
    assert_eq!(say.status, 400, "<Say>: HTTP {} {}", say.status, say.body);
    let v = say.json();
    assert_eq!(v["status"], 400, "{v}");
    assert!(
        v["message"].as_str().is_some_and(|m| m.contains("Say")),
        "the 400 should name the verb: {v}"
    );
    let view = cc.get_call(&sid).json();
    assert_eq!(
        view["status"], "in-progress",
        "after the refused TwiML: {view}"
    );
    hang_up(&cc, &sid, caller);

    let m = |s: &str| cc.metric(s);
    assert_eq!(
        m("ontime_api_requests_total{route=\"call_get\",status=\"404\"}"),
        1.0
    );
    assert_eq!(
        m("ontime_api_requests_total{route=\"call_update\",status=\"404\"}"),
        1.0
    );
    assert_eq!(
        m("ontime_api_requests_total{route=\"call_update\",status=\"400\"}"),
        1.0
    );
    assert_eq!(
        m("ontime_api_requests_total{route=\"call_update\",status=\"200\"}"),
        1.0
    );
    assert_eq!(
        metric_sum(
            &cc.gw.metrics_text(),
            "ontime_api_requests_total",
            "status=\"401\""
        ),
        2.0,
        "401s counted"
    );

    // The secret stays secret: not on the command line, not in the logs.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", cc.gw.proc.child.id()))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    assert!(
        !cmdline.contains(&cc.token),
        "the token is on the command line"
    );
    assert!(
        !cc.gw.stdout().contains(&cc.token) && !cc.gw.stderr().contains(&cc.token),
        "the token is in the gateway's logs"
    );
}

// ---------------------------------------------------------------------------------------------
// 6. A real pipecat bot hangs up through the API.

#[test]
fn pipecat_twilio_serializer_hangs_up_the_sip_call_through_the_api() {
    let Some(_one) = begin().filter(|_| require_pipecat()) else {
        return;
    };
    // The bot must know the API's address before the gateway starts (it is its base_url).
    let api_port = free_tcp_port();
    let base_url = format!("http://127.0.0.1:{api_port}");
    let account = format!("AC{}", hex32());
    let token = hex32();
    let bot = start_example(
        "hangup_bot.py",
        &["--api-base-url", &base_url, "--end-after", "3"],
        &[("TWILIO_AUTH_TOKEN", &token)],
    );
    let url = bot.url();
    let listen = format!("127.0.0.1:{api_port}");
    let gw = start_gateway_env(
        &[
            "--agent",
            &url,
            "--api-listen",
            &listen,
            "--api-account-sid",
            &account,
        ],
        &[("ONTIME_API_AUTH_TOKEN", &token)],
    );
    let cc = ApiGateway {
        gw,
        api: listen.parse().unwrap(),
        account,
        token,
    };
    // The BYE must be the API's (Normal call clearing), not the one a closed WebSocket brings.
    let (ok, log) = caller_hung_up_by_api(&cc, free_media_port()).finish(Duration::from_secs(70));
    let records = bot.wait_records(1, Duration::from_secs(15));
    let context = format!(
        "bot records: {records:?}\nbot log (tail):\n{}\n{}",
        tail(&bot.stderr(), 30),
        cc.context()
    );
    assert!(
        ok,
        "the caller did not get the API's BYE:\n{log}\n{context}"
    );
    assert_eq!(records.len(), 1, "{context}");
    let sid = records[0]["call_sid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(sid.starts_with("CA"), "{context}");
    assert_eq!(records[0]["account_sid"], cc.account.as_str(), "{context}");
    assert!(
        bot.stderr()
            .contains(&format!("Successfully terminated Twilio call {sid}")),
        "pipecat did not log a successful hang-up\n{context}"
    );
    assert_eq!(
        cc.metric("ontime_api_requests_total{route=\"call_update\",status=\"200\"}"),
        1.0,
        "{context}"
    );
    let view = cc.wait_status(&sid, "completed", Duration::from_secs(5));
    assert_eq!(view["status"], "completed", "{view}");
}

#[test]
fn an_outbound_call_challenged_by_the_trunk_is_answered_with_digest() {
    let Some(_one) = begin() else { return };
    let password = "trunk-pw-5c1d";
    let (cc, trunk_sip, callee_media) = with_trunk(
        &["--register-user", "carol"],
        &[("ONTIME_REGISTER_PASSWORD", password)],
    );
    let dir = tempdir("challenged");
    let speech = fresh_speech(
        &dir,
        "Hello this is the clinic calling to confirm your visit.",
    );
    let scen = scenario(
        "callee_challenges.xml",
        &[
            ("@USER@", "carol"),
            ("@PASSWORD@", password),
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "3000"),
        ],
    );
    let callee = spawn_sipp_uas(&scen, trunk_sip, 1, callee_media, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(500));
    let form = [
        ("To", "+15551230000"),
        ("From", "+15557654321"),
        ("Twiml", r#"<Response><Pause length="1"/></Response>"#),
    ];
    let r = cc.request("POST", &cc.calls_path(), Some(&form));
    assert_eq!(r.status, 201, "{} {}", r.body, cc.context());
    let sid = r.json()["sid"].as_str().unwrap_or_default().to_string();
    let (ok, log) = callee.finish(Duration::from_secs(60));
    assert!(
        ok,
        "the challenging trunk's call failed:\n{log}\n{}",
        cc.context()
    );
    assert!(wait_until(Duration::from_secs(10), || {
        cc.request("GET", &cc.call_path(&sid), None).json()["status"] == "completed"
    }));
    let body = cc.gw.metrics_text();
    assert_eq!(
        metric_value(&body, "ontime_outbound_calls_total{result=\"answered\"}"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        metric_value(
            &body,
            "ontime_sip_auth_challenges_received_total{outcome=\"answered\"}"
        ),
        Some(1.0),
        "{body}"
    );
    let logs = std::fs::read_to_string(&cc.gw.log).unwrap() + &cc.gw.stderr();
    assert!(!logs.contains(password), "the password reached the log");
}

// ---------------------------------------------------------------------------------------------
// 7. SIP X- headers both ways.

/// The INVITE's X- headers reach the voice webhook as Twilio's `SipHeader_X-…` parameters (the
/// caller's `P-Tenant` does not: only X- headers pass), signed like the rest; the X- headers of
/// the `<Refer><Sip>` URI the webhook answers with ride the REFER's Refer-To, which the caller's
/// scenario matches exactly; the call record names the target without them.
#[test]
fn x_headers_reach_the_webhook_and_ride_the_refer_to() {
    let Some(_one) = begin() else { return };
    let (cc, got, flow) = routed_transfer(
        "/voice",
        &format!("{TRANSFER_TARGET}?X-Campaign=7&amp;X-Account=a1"),
        &format!("{TRANSFER_TARGET_RE}\\?X-Campaign=7&amp;X-Account=a1"),
    );
    eprintln!("SIP flow:\n{flow}");
    let params = form_decode(&got[0].body);
    let sip_headers: Vec<(&str, &str)> = params
        .iter()
        .filter(|(k, _)| k.starts_with("SipHeader_"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        sip_headers,
        [("SipHeader_X-Campaign", "7"), ("SipHeader_X-Account", "a1")],
        "{params:?}"
    );
    assert!(
        !params
            .iter()
            .any(|(k, v)| k.contains("Tenant") || v == "acme"),
        "a non-X header reached the webhook: {params:?}"
    );
    assert_eq!(cc.metric("ontime_sip_x_headers_dropped_total"), 0.0);
    // The record names the target without the headers.
    completed_transfer_record(&cc);
}

/// `Calls.json` with a SIP `To` carrying `?X-Campaign=7`: the INVITE the sipp callee receives
/// has `X-Campaign: 7` exactly once, and neither its Request-URI (the scenario matches it) nor
/// its To carries the header part. A `To` naming any other header is refused with Twilio's 400
/// before anything is dialled.
#[test]
fn a_sip_to_with_x_headers_puts_them_on_the_invite_once() {
    let Some(_one) = begin() else { return };
    let (cc, callee_sip, callee_media) = with_trunk(&[], &[]);
    let bob = format!("sip:bob@127.0.0.1:{callee_sip}");
    let refused = format!("{bob}?X-Campaign=7&Route=%3Csip:evil@192.0.2.66%3E");
    let form = [
        ("To", refused.as_str()),
        ("From", "+15557654321"),
        ("Twiml", "<Response/>"),
    ];
    let r = cc.request("POST", &cc.calls_path(), Some(&form));
    let v = check_twilio_error(&r, 400, 21201, "a Route header in To");
    assert_eq!(
        v["message"],
        "Parameter 'To' is invalid: only X- headers can be set in a SIP URI, not 'Route'"
    );

    // The Request-URI is `sip:bob@…` to its end: no header part.
    let cap = capture(&[callee_sip]);
    let callee = spawn_callee(callee_sip, callee_media, "bob", "Hello there.", "1000");
    let to = format!("{bob}?X-Campaign=7");
    let form = [
        ("To", to.as_str()),
        ("From", "+15557654321"),
        ("Twiml", r#"<Response><Pause length="1"/></Response>"#),
    ];
    let r = cc.request("POST", &cc.calls_path(), Some(&form));
    assert_eq!(r.status, 201, "Calls.json: HTTP {} {}", r.status, r.body);
    assert_eq!(r.json()["to"], bob.as_str(), "{}", r.body);
    let (ok, log) = callee.finish(Duration::from_secs(60));
    let pcap = cap.finish();
    assert!(ok, "the callee's call failed:\n{log}\n{}", cc.context());

    let (to_header, headers) = first_invite(&pcap, callee_sip);
    assert_eq!(
        headers.matches("X-Campaign:").count(),
        1,
        "the INVITE's headers: {headers}"
    );
    assert!(headers.contains("X-Campaign: 7"), "{headers}");
    assert_eq!(to_header, format!("<{bob}>"), "the INVITE's To");
}

// ---------------------------------------------------------------------------------------------
// 5. Answering-machine detection on dial-out.

/// A voicemail greeting (espeak-ng, about 6.7 s) and, if `beep`, 300 ms of silence then a
/// 1000 Hz beep of 400 ms, as an 8 kHz µ-law WAV for sipp's `rtp_stream`.
fn voicemail_greeting(dir: &Path, beep: bool) -> PathBuf {
    let raw = dir.join("greeting-raw.wav");
    let pcm = dir.join("greeting.wav");
    let gap = dir.join("gap.wav");
    let tone = dir.join("beep.wav");
    let out = dir.join("voicemail.ulaw.wav");
    let run = |cmd: &mut Command| {
        let status = cmd.status().expect("run espeak-ng/sox");
        assert!(status.success(), "{cmd:?}: {status}");
    };
    run(Command::new("espeak-ng")
        .args(["-v", "en-us", "-s", "170", "-w"])
        .arg(&raw)
        .arg("Hi, you have reached the voicemail of Jordan Smith. I cannot take your call right now, please leave a message."));
    // Every part as 8 kHz mono 16-bit PCM, so that sox can join them.
    const PCM_8K: [&str; 8] = ["-r", "8000", "-c", "1", "-b", "16", "-e", "signed-integer"];
    run(Command::new("sox").arg(&raw).args(PCM_8K).arg(&pcm));
    let mut parts = vec![pcm];
    if beep {
        run(Command::new("sox")
            .arg("-n")
            .args(PCM_8K)
            .arg(&gap)
            .args(["trim", "0", "0.3"]));
        run(Command::new("sox")
            .arg("-n")
            .args(PCM_8K)
            .arg(&tone)
            .args(["synth", "0.4", "sine", "1000", "vol", "0.4"]));
        parts.extend([gap, tone]);
    }
    run(Command::new("sox")
        .args(&parts)
        .args(["-r", "8000", "-c", "1", "-e", "mu-law"])
        .arg(&out));
    out
}

/// Dial out to a sipp callee playing `speech` (`None`: sending no RTP) then listening
/// `listen_ms`, with `form` added to
/// `To` and `From`: the gateway and its call's SID, once the callee has hung up and the call
/// reads `completed`.
fn dial_out_with_amd(
    speech: Option<&Path>,
    listen_ms: &str,
    form: &[(&str, &str)],
) -> (ApiGateway, String) {
    let (cc, callee_sip, callee_media) = with_trunk(&[], &[]);
    let callee = spawn_callee_playing(
        callee_sip,
        callee_media,
        &format!("sip:\\+15551234567@127\\.0\\.0\\.1:{callee_sip}"),
        speech,
        listen_ms,
    );
    let mut all = vec![("To", "+15551234567"), ("From", "+15557654321")];
    all.extend_from_slice(form);
    let r = cc.request("POST", &cc.calls_path(), Some(&all));
    assert_eq!(
        r.status,
        201,
        "Calls.json: HTTP {} {}\n{}",
        r.status,
        r.body,
        cc.context()
    );
    let sid = r.json()["sid"].as_str().unwrap_or_default().to_string();
    let (ok, log) = callee.finish(Duration::from_secs(60));
    assert!(ok, "the callee's call failed:\n{log}\n{}", cc.context());
    let view = cc.wait_status(&sid, "completed", Duration::from_secs(5));
    assert_eq!(view["status"], "completed", "{view}");
    // Callbacks are posted from their own tasks: let the last arrive.
    std::thread::sleep(Duration::from_millis(500));
    (cc, sid)
}

/// The requests of `sink` to `path` (its target before any query).
fn requests_to(sink: &HttpSink, path: &str) -> Vec<Received> {
    sink.received()
        .into_iter()
        .filter(|r| r.target.split('?').next() == Some(path))
        .collect()
}

/// The one request of `sink` to `path`, a signed webhook of the call `sid` carrying
/// `AnsweredBy=answered_by`.
fn one_verdict(
    cc: &ApiGateway,
    sink: &HttpSink,
    path: &str,
    sid: &str,
    answered_by: &str,
) -> Received {
    let got = requests_to(sink, path);
    assert_eq!(got.len(), 1, "{got:?}\n{}", cc.context());
    let r = got[0].clone();
    check_webhook(&r, path, &cc.account, "outbound-api");
    assert_eq!(r.param("CallSid").as_deref(), Some(sid), "{r:?}");
    assert_eq!(
        r.param("AnsweredBy").as_deref(),
        Some(answered_by),
        "{r:?}\n{}",
        cc.context()
    );
    // The Call resource shows it too.
    let view = cc.get_call(sid).json();
    assert_eq!(view["answered_by"], answered_by, "{view}");
    r
}

/// `MachineDetectionDuration` of a request, in ms, checked to be within `expected`.
fn detection_ms(r: &Received, expected: std::ops::Range<u64>) -> u64 {
    let ms = r
        .param("MachineDetectionDuration")
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no MachineDetectionDuration: {r:?}"));
    eprintln!(
        "AnsweredBy {} after {ms} ms",
        r.param("AnsweredBy").unwrap_or_default()
    );
    assert!(
        expected.contains(&ms),
        "detected after {ms} ms, not in {expected:?}"
    );
    ms
}

/// Twilio's `AnsweredBy` values, each a series of `ontime_amd_verdicts_total`.
const ANSWERED_BY: [&str; 7] = [
    "human",
    "machine_start",
    "machine_end_beep",
    "machine_end_silence",
    "machine_end_other",
    "fax",
    "unknown",
];

/// The gateway counted one verdict, `answered_by`, and its one end record carries it.
fn check_counted(cc: &ApiGateway, answered_by: &str) {
    for value in ANSWERED_BY {
        assert_eq!(
            cc.metric(&format!(
                "ontime_amd_verdicts_total{{answered_by=\"{value}\"}}"
            )),
            f64::from(u8::from(value == answered_by)),
            "ontime_amd_verdicts_total{{answered_by=\"{value}\"}}"
        );
    }
    let records: Vec<Value> = cdr_end_records(&cc.gw)
        .into_iter()
        .map(|r| r["answered_by"].clone())
        .collect();
    assert_eq!(records, [Value::from(answered_by)]);
}

#[test]
fn a_voicemail_greeting_with_a_beep_is_machine_start_in_the_held_twiml_fetch() {
    let Some(_one) = begin() else { return };
    let speech = voicemail_greeting(&tempdir("amd-voicemail"), true);
    let sink = HttpSink::start("<Response/>");
    let url = format!("http://{}/twiml", sink.addr);
    let (cc, sid) = dial_out_with_amd(
        Some(&speech),
        "9000",
        &[("Url", url.as_str()), ("MachineDetection", "Enable")],
    );
    // Not async: one fetch, after the verdict, carrying it.
    let fetch = one_verdict(&cc, &sink, "/twiml", &sid, "machine_start");
    assert_eq!(fetch.param("CallStatus").as_deref(), Some("in-progress"));
    // The greeting's speech has lasted MachineDetectionSpeechThreshold (2.4 s).
    detection_ms(&fetch, 2400..6000);
    check_counted(&cc, "machine_start");
}

#[test]
fn detect_message_end_posts_machine_end_beep_to_the_async_callback_and_the_bot() {
    let Some(_one) = begin() else { return };
    let speech = voicemail_greeting(&tempdir("amd-message-end"), true);
    let sink = HttpSink::start("<Response/>");
    let amd_url = format!("http://{}/amd", sink.addr);
    // Async: the bot is on the call from the answer and hears the verdict as `ontime.amd`.
    let bot = TestBot::start(vec![Step::WaitMedia(1)]);
    let twiml = format!(
        r#"<Response><Connect><Stream url="{}"/></Connect></Response>"#,
        bot.url()
    );
    let (cc, sid) = dial_out_with_amd(
        Some(&speech),
        "10000",
        &[
            ("Twiml", twiml.as_str()),
            ("MachineDetection", "DetectMessageEnd"),
            ("AsyncAmd", "true"),
            ("AsyncAmdStatusCallback", amd_url.as_str()),
        ],
    );
    let verdict = one_verdict(&cc, &sink, "/amd", &sid, "machine_end_beep");
    // The beep follows the whole greeting (about 6.7 s) and takes 250 ms to be one.
    let ms = detection_ms(&verdict, 6000..9000);
    let amd = bot
        .connection(0)
        .map(|c| {
            c.events("ontime.amd")
                .into_iter()
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    assert_eq!(amd.len(), 1, "{amd:?}\n{}", cc.context());
    assert_eq!(
        amd[0]["amd"],
        serde_json::json!({"answeredBy": "machine_end_beep", "machineDetectionDurationMs": ms}),
        "{}",
        amd[0]
    );
    if let Some(checked) = twilio_validate(&amd_url, &[verdict], &cc.token) {
        assert_eq!(checked, [(true, false)], "the callback's signature");
    }
    check_counted(&cc, "machine_end_beep");
}

#[test]
fn a_short_hello_then_silence_is_human_in_the_async_callback() {
    let Some(_one) = begin() else { return };
    let speech = fresh_speech(&tempdir("amd-hello"), "Hello?");
    let sink = HttpSink::start("<Response/>");
    let amd_url = format!("http://{}/amd", sink.addr);
    let twiml_url = format!("http://{}/twiml", sink.addr);
    let (cc, sid) = dial_out_with_amd(
        Some(&speech),
        "6000",
        &[
            ("Url", twiml_url.as_str()),
            ("MachineDetection", "Enable"),
            ("AsyncAmd", "true"),
            ("AsyncAmdStatusCallback", amd_url.as_str()),
        ],
    );
    // Async: the TwiML was fetched before dialling, without a verdict.
    let fetches = requests_to(&sink, "/twiml");
    assert_eq!(fetches.len(), 1, "{fetches:?}");
    assert_eq!(fetches[0].param("AnsweredBy"), None);
    let verdict = one_verdict(&cc, &sink, "/amd", &sid, "human");
    // "Hello?" (under a second), then 1.2 s of silence (MachineDetectionSpeechEndThreshold).
    detection_ms(&verdict, 1200..4000);
    check_counted(&cc, "human");
}

#[test]
fn a_callee_that_never_sends_rtp_is_unknown_at_the_silence_timeout() {
    let Some(_one) = begin() else { return };
    let sink = HttpSink::start("<Response/>");
    let twiml_url = format!("http://{}/twiml", sink.addr);
    let (cc, sid) = dial_out_with_amd(
        None,
        "8000",
        &[
            ("Url", twiml_url.as_str()),
            ("MachineDetection", "DetectMessageEnd"),
            ("MachineDetectionSilenceTimeout", "3000"),
        ],
    );
    // The held fetch comes at the silence timeout; the call went on until the callee hung up.
    let fetch = one_verdict(&cc, &sink, "/twiml", &sid, "unknown");
    detection_ms(&fetch, 3000..3100);
    check_counted(&cc, "unknown");
}

// ---------------------------------------------------------------------------------------------
// Bridged <Dial>: a second leg through the trunk, bridged through the real-time sender.

/// The payloads (µ-law, PCMU) of the RTP packets in `pcap` that `filter` keeps (a tshark
/// display filter on the UDP ports), in order, without silent ones.
fn voiced_payloads(pcap: &Path, port: u16, filter: &str) -> Vec<Vec<u8>> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={port},rtp")])
        .args(["-Y", &format!("rtp && rtp.p_type == 0 && {filter}")])
        .args(["-T", "fields", "-e", "rtp.payload"])
        .stderr(Stdio::null())
        .output()
        .expect("tshark -r");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            // tshark prints the payload as hex, with or without colons between bytes.
            let hex: Vec<u8> = l.trim().bytes().filter(|b| *b != b':').collect();
            hex.chunks(2)
                .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
                .collect::<Option<Vec<u8>>>()
        })
        .filter(|p| p.len() == 160 && !ulaw_is_silent(p))
        .collect()
}

/// How many of `sent` (voiced frames one party sent) are missing from `heard` (what the other
/// party received): relayed through the bridge, a frame arrives byte for byte (µ-law decoded
/// and encoded again is the identity).
fn missing(sent: &[Vec<u8>], heard: &[Vec<u8>]) -> usize {
    let heard: std::collections::HashSet<&Vec<u8>> = heard.iter().collect();
    sent.iter().filter(|f| !heard.contains(f)).count()
}

/// A gateway whose inbound calls run `twiml`, dialling out through a trunk on `trunk_sip`.
fn dialling_gateway(trunk_sip: u16, twiml: &str) -> ApiGateway {
    let dir = tempdir(&format!("dial-{trunk_sip}"));
    let file = dir.join("voice.xml");
    std::fs::write(&file, twiml).unwrap();
    let trunk = format!("sip:127.0.0.1:{trunk_sip}");
    start_with_api(
        &[
            "--trunk-uri",
            &trunk,
            "--voice-twiml",
            file.to_str().unwrap(),
        ],
        free_tcp_port(),
    )
}

/// The Request-URI a `<Dial><Sip>sip:desk@127.0.0.1:PORT</Sip></Dial>` INVITE must carry.
fn desk_ruri(trunk_sip: u16) -> String {
    format!("^INVITE sip:desk@127\\.0\\.0\\.1:{trunk_sip} SIP/2\\.0")
}

/// A gateway whose inbound calls `<Dial>` desk@ the trunk (ringing at most `timeout_s`, its
/// action answering `<Hangup/>`), and a sipp callee on that trunk running `callee_scenario`
/// with `reps`: the action's sink, the gateway and the callee.
fn dial_to_callee(
    timeout_s: u32,
    callee_scenario: &str,
    reps: &[(&str, &str)],
) -> (HttpSink, ApiGateway, SippCall) {
    let sink = HttpSink::start("<Response><Hangup/></Response>");
    let timeout = format!(r#" timeout="{timeout_s}""#);
    let (cc, callee, _) = dial_desk(&timeout, "", &sink, callee_scenario, reps);
    (sink, cc, callee)
}

/// The one request the `<Dial>`'s action got.
fn the_action(sink: &HttpSink, cc: &ApiGateway) -> Received {
    let mut got = Vec::new();
    wait_until(Duration::from_secs(10), || {
        got = requests_to(sink, "/after");
        !got.is_empty()
    });
    std::thread::sleep(Duration::from_millis(300));
    let got = requests_to(sink, "/after");
    assert_eq!(got.len(), 1, "action requests: {got:?}\n{}", cc.context());
    got[0].clone()
}

/// `<Dial>` bridges the caller to a callee through the trunk: the caller hears ringback, then
/// the two hear each other frame for frame (checked on the capture), a digit the caller
/// presses reaches the callee as an RFC 4733 event, and when the callee hangs up the `action`
/// gets `DialCallStatus=completed` and its TwiML runs (a digit, then the hang-up). The dialled
/// leg is in `Calls.json` as `outbound-dial` with the caller's call as its parent.
#[test]
fn dial_bridges_the_caller_and_the_callee_then_runs_the_action() {
    let Some(_one) = begin() else { return };
    let sink = HttpSink::start(r#"<Response><Play digits="7"/><Hangup/></Response>"#);
    let trunk_sip = free_udp_port();
    let (callee_media, caller_media) = (free_media_port(), free_media_port());
    let cc = dialling_gateway(
        trunk_sip,
        &format!(
            r#"<Response><Dial action="http://{}/after" timeout="20"><Sip>sip:desk@127.0.0.1:{trunk_sip}</Sip></Dial></Response>"#,
            sink.addr
        ),
    );
    let callee_speech = fresh_speech(
        &tempdir(&format!("dial-callee-{trunk_sip}")),
        "Front desk, this is Sam speaking, how can I help you today?",
    );
    let ruri = desk_ruri(trunk_sip);
    let callee_scen = scenario(
        "callee_bridged.xml",
        &[
            ("@RURI_RE@", ruri.as_str()),
            ("@SPEECH@", callee_speech.to_str().unwrap()),
            ("@LISTEN_MS@", "6000"),
        ],
    );
    let callee = spawn_sipp_uas(
        &callee_scen,
        trunk_sip,
        1,
        callee_media,
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(500));
    let cap = capture(&[caller_media, callee_media]);
    let caller = caller(
        &cc,
        "caller_bridged.xml",
        &[
            ("@SPEAK_AFTER_MS@", "2000"),
            ("@DIGIT@", "5"),
            ("@BYE_WITHIN_MS@", "40000"),
            ("@REASON@", "cause=16"),
        ],
        caller_media,
    );
    let (callee_ok, callee_log) = callee.finish(Duration::from_secs(60));
    let (caller_ok, caller_log) = caller.finish(Duration::from_secs(30));
    let pcap = cap.finish();
    assert!(callee_ok, "callee:\n{callee_log}\n{}", cc.context());
    assert!(caller_ok, "caller:\n{caller_log}\n{}", cc.context());

    // Both ways, frame for frame.
    let said = voiced_payloads(
        &pcap,
        caller_media,
        &format!("udp.srcport == {caller_media}"),
    );
    let callee_heard = voiced_payloads(
        &pcap,
        callee_media,
        &format!("udp.dstport == {callee_media}"),
    );
    let answered = voiced_payloads(
        &pcap,
        callee_media,
        &format!("udp.srcport == {callee_media}"),
    );
    let caller_heard = voiced_payloads(
        &pcap,
        caller_media,
        &format!("udp.dstport == {caller_media}"),
    );
    let (lost_to_callee, lost_to_caller) = (
        missing(&said, &callee_heard),
        missing(&answered, &caller_heard),
    );
    eprintln!(
        "caller said {} voiced frames, {lost_to_callee} not heard by the callee; the callee said {}, {lost_to_caller} not heard by the caller; the caller got {} voiced frames in all",
        said.len(),
        answered.len(),
        caller_heard.len()
    );
    assert!(said.len() > 50 && answered.len() > 50, "both spoke");
    // A frame or two may fall to the jitter buffers' start on a loaded machine; no more.
    assert!(
        lost_to_callee <= 2,
        "{lost_to_callee} of the caller's frames lost"
    );
    assert!(
        lost_to_caller <= 2,
        "{lost_to_caller} of the callee's frames lost"
    );
    // Ringback: voiced frames the caller got that the callee never said.
    let ringback = caller_heard.len() - (answered.len() - lost_to_caller);
    assert!(ringback >= 25, "ringback frames: {ringback}");

    // The caller's digit at the callee, and the action's digit at the caller.
    let events = |port: u16| -> Vec<u8> {
        let mut ids: Vec<u8> = rtp_to(&pcap, port)
            .iter()
            .filter_map(|p| p.event.map(|(id, _, _)| id))
            .collect();
        ids.dedup();
        ids
    };
    assert_eq!(events(callee_media), vec![5], "digits at the callee");
    assert_eq!(events(caller_media), vec![7], "digits at the caller");

    let action = the_action(&sink, &cc);
    assert_eq!(
        action.param("DialCallStatus").as_deref(),
        Some("completed"),
        "{action:?}"
    );
    let parent = action.param("CallSid").unwrap_or_default();
    let leg = action.param("DialCallSid").unwrap_or_default();
    assert!(leg.starts_with("CA") && leg != parent, "{action:?}");
    let secs: u64 = action
        .param("DialCallDuration")
        .and_then(|d| d.parse().ok())
        .unwrap_or(0);
    assert!(
        (6..=20).contains(&secs),
        "DialCallDuration {secs}: {action:?}"
    );
    let view = cc.wait_status(&leg, "completed", Duration::from_secs(5));
    assert_eq!(view["direction"], "outbound-dial", "{view}");
    assert_eq!(view["parent_call_sid"], parent.as_str(), "{view}");
    let parent_view = cc.wait_status(&parent, "completed", Duration::from_secs(5));
    assert_eq!(parent_view["parent_call_sid"], Value::Null, "{parent_view}");
}

/// A gateway whose inbound calls `<Dial>` desk@ the trunk with `<Sip url>` pointing at
/// `whisper` (the leg's own TwiML), the action at `action`, and a sipp callee on the trunk
/// running `callee_scenario`.
fn dial_with_leg_twiml(
    whisper: &HttpSink,
    action: &HttpSink,
    callee_scenario: &str,
    reps: &[(&str, &str)],
) -> (ApiGateway, SippCall) {
    let sip_attrs = format!(r#" url="http://{}/whisper""#, whisper.addr);
    let (cc, callee, _) = dial_desk(
        r#" timeout="20""#,
        &sip_attrs,
        action,
        callee_scenario,
        reps,
    );
    (cc, callee)
}

/// A gateway whose inbound calls run `<Dial{dial_attrs} action>` of
/// `<Sip{sip_attrs}>sip:desk@…</Sip>` through its trunk, and a sipp callee on that trunk running
/// `callee_scenario` (its Request-URI checked): the gateway, the callee and the trunk's port.
fn dial_desk(
    dial_attrs: &str,
    sip_attrs: &str,
    action: &HttpSink,
    callee_scenario: &str,
    reps: &[(&str, &str)],
) -> (ApiGateway, SippCall, u16) {
    let trunk_sip = free_udp_port();
    let cc = dialling_gateway(
        trunk_sip,
        &format!(
            r#"<Response><Dial{dial_attrs} action="http://{}/after"><Sip{sip_attrs}>sip:desk@127.0.0.1:{trunk_sip}</Sip></Dial></Response>"#,
            action.addr
        ),
    );
    let ruri = desk_ruri(trunk_sip);
    let mut all = vec![("@RURI_RE@", ruri.as_str())];
    all.extend_from_slice(reps);
    let callee = spawn_sipp_uas(
        &scenario(callee_scenario, &all),
        trunk_sip,
        1,
        free_media_port(),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(500));
    (cc, callee, trunk_sip)
}

/// The one request the leg's own TwiML was fetched with: for the leg (its CallSid, not the
/// caller's; `outbound-dial`, `in-progress`), naming the caller's call as its parent.
fn the_whisper_fetch(whisper: &HttpSink, cc: &ApiGateway) -> Received {
    let got = requests_to(whisper, "/whisper");
    assert_eq!(got.len(), 1, "whisper requests: {got:?}\n{}", cc.context());
    let w = got[0].clone();
    assert_eq!(
        w.param("Direction").as_deref(),
        Some("outbound-dial"),
        "{w:?}"
    );
    assert_eq!(
        w.param("CallStatus").as_deref(),
        Some("in-progress"),
        "{w:?}"
    );
    w
}

/// A caller (speaking, then waiting for the gateway's BYE) calls `cc`, whose `<Dial>` reaches
/// `callees`; both sipp runs must pass. The one request of the `<Dial>`'s `action`, whose
/// `DialCallStatus` must be `status`.
fn call_through_dial(
    cc: &ApiGateway,
    callees: SippCall,
    action: &HttpSink,
    status: &str,
) -> Received {
    let caller = caller(
        cc,
        "caller_speaks_waits_bye.xml",
        &[("@BYE_WITHIN_MS@", "30000"), ("@REASON@", "cause=16")],
        free_media_port(),
    );
    let (callees_ok, callees_log) = callees.finish(Duration::from_secs(40));
    let (caller_ok, caller_log) = caller.finish(Duration::from_secs(30));
    assert!(callees_ok, "callees:\n{callees_log}\n{}", cc.context());
    assert!(caller_ok, "caller:\n{caller_log}\n{}", cc.context());
    let after = the_action(action, cc);
    assert_eq!(
        after.param("DialCallStatus").as_deref(),
        Some(status),
        "{after:?}"
    );
    after
}

/// `<Sip url>`: once the callee answers, the leg runs its own TwiML (a one-second pause) and
/// only then is bridged; the callee talks and hangs up, and the `action` hears `completed`
/// (a leg never bridged would be `no-answer`). The TwiML was fetched once, for the leg.
#[test]
fn dial_runs_the_legs_own_twiml_then_bridges() {
    let Some(_one) = begin() else { return };
    let whisper = HttpSink::start(r#"<Response><Pause length="1"/></Response>"#);
    let action = HttpSink::start("<Response><Hangup/></Response>");
    let speech = fresh_speech(&tempdir("dial-whisper-callee"), "Front desk, Sam speaking.");
    let (cc, callee) = dial_with_leg_twiml(
        &whisper,
        &action,
        "callee_answers_speaks.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "3000"),
        ],
    );
    let after = call_through_dial(&cc, callee, &action, "completed");
    let w = the_whisper_fetch(&whisper, &cc);
    assert_eq!(w.param("CallSid"), after.param("DialCallSid"), "{w:?}");
    assert_eq!(w.param("ParentCallSid"), after.param("CallSid"), "{w:?}");
}

/// `<Sip url>` whose TwiML hangs up declines the call: the callee, who answered, gets the
/// gateway's BYE, and the caller's `action` hears `DialCallStatus=no-answer`.
#[test]
fn dial_whose_leg_twiml_hangs_up_is_no_answer() {
    let Some(_one) = begin() else { return };
    let whisper = HttpSink::start("<Response><Hangup/></Response>");
    let action = HttpSink::start("<Response><Hangup/></Response>");
    let (cc, callee) = dial_with_leg_twiml(
        &whisper,
        &action,
        "callee_answers_hung_up.xml",
        &[("@BYE_WITHIN_MS@", "10000")],
    );
    let after = call_through_dial(&cc, callee, &action, "no-answer");
    let w = the_whisper_fetch(&whisper, &cc);
    assert_eq!(w.param("CallSid"), after.param("DialCallSid"), "{w:?}");
}

/// `<Dial>` of two parties behind the trunk, at once: one rings on, the other answers after a
/// second. The one that answers is bridged (it talks, hangs up, and the `action` hears
/// `completed` with its CallSid); the one still ringing is cancelled (the callee got the
/// CANCEL) and reads `canceled`. Both legs name the caller's call as their parent.
#[test]
fn dial_of_two_bridges_the_one_that_answers_and_cancels_the_other() {
    let Some(_one) = begin() else { return };
    let action = HttpSink::start("<Response><Hangup/></Response>");
    let trunk_sip = free_udp_port();
    let cc = dialling_gateway(
        trunk_sip,
        &format!(
            r#"<Response><Dial action="http://{}/after" timeout="20"><Sip>sip:ring@127.0.0.1:{trunk_sip}</Sip><Sip>sip:desk@127.0.0.1:{trunk_sip}</Sip></Dial></Response>"#,
            action.addr
        ),
    );
    let speech = fresh_speech(&tempdir("dial-two-callee"), "Front desk, Sam speaking.");
    let callees = spawn_sipp_uas(
        &scenario(
            "callee_one_of_two.xml",
            &[
                ("@CANCEL_WITHIN_MS@", "15000"),
                ("@SPEECH@", speech.to_str().unwrap()),
                ("@LISTEN_MS@", "3000"),
            ],
        ),
        trunk_sip,
        2,
        free_media_port(),
        Duration::from_secs(40),
    );
    std::thread::sleep(Duration::from_millis(500));
    let after = call_through_dial(&cc, callees, &action, "completed");
    let parent = after.param("CallSid").unwrap_or_default();
    let bridged = after.param("DialCallSid").unwrap_or_default();
    let view = cc.wait_status(&bridged, "completed", Duration::from_secs(5));
    assert!(
        view["to"]
            .as_str()
            .is_some_and(|t| t.starts_with("sip:desk@")),
        "{view}"
    );
    // The other leg: listed by its To, cancelled.
    let target = format!(
        "{}?To={}",
        cc.calls_path(),
        form_encode(&[("x", &format!("sip:ring@127.0.0.1:{trunk_sip}"))]).trim_start_matches("x=")
    );
    let listed = cc.request("GET", &target, None).json();
    let rung: Vec<&Value> = listed["calls"]
        .as_array()
        .map_or(Vec::new(), |c| c.iter().collect());
    assert_eq!(rung.len(), 1, "{listed}");
    assert_eq!(rung[0]["status"], "canceled", "{listed}");
    assert_eq!(rung[0]["parent_call_sid"], parent.as_str(), "{listed}");
    assert_eq!(view["parent_call_sid"], parent.as_str(), "{view}");
}

/// `<Dial answerOnBridge="true">`: the caller's INVITE rings (180) and is answered only once
/// the callee has answered the gateway's INVITE, checked on the wire (the callee's 200 comes
/// first); then the two are bridged, and when the callee hangs up the `action` hears
/// `completed` and hangs the caller up.
#[test]
fn dial_answer_on_bridge_answers_the_caller_after_the_callee() {
    let Some(_one) = begin() else { return };
    let action = HttpSink::start("<Response><Hangup/></Response>");
    let speech = fresh_speech(&tempdir("dial-aob-callee"), "Front desk, Sam speaking.");
    let (cc, callee, trunk_sip) = dial_desk(
        r#" answerOnBridge="true" timeout="20""#,
        "",
        &action,
        "callee_answers_speaks.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "3000"),
        ],
    );
    let gw_sip = cc.gw.sip.port();
    let cap = capture(&[gw_sip, trunk_sip]);
    call_through_dial(&cc, callee, &action, "completed");
    let pcap = cap.finish();
    let flow = sip_flow(&pcap, gw_sip);
    // src|dst|request line|status line|CSeq|...
    let at = |status: &str, from_callee: bool| {
        flow.lines().position(|l| {
            let f: Vec<&str> = l.split('|').collect();
            f.len() > 4
                && f[3].starts_with(status)
                && f[4].ends_with("INVITE")
                && (f[0] == trunk_sip.to_string()) == from_callee
                && (from_callee || f[1] != trunk_sip.to_string())
        })
    };
    let (callee_200, caller_180, caller_200) = (
        at("SIP/2.0 200", true),
        at("SIP/2.0 180", false),
        at("SIP/2.0 200", false),
    );
    assert!(
        caller_180.is_some() && callee_200.is_some() && caller_200.is_some(),
        "{flow}"
    );
    assert!(caller_180 < callee_200 && callee_200 < caller_200, "{flow}");
    let answers_to_caller = flow
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split('|').collect();
            f.len() > 4
                && f[3].starts_with("SIP/2.0 200")
                && f[4].ends_with("INVITE")
                && f[0] == gw_sip.to_string()
                && f[1] != trunk_sip.to_string()
        })
        .count();
    assert_eq!(answers_to_caller, 1, "{flow}");
}

/// A busy callee: the `action` hears `DialCallStatus=busy` with the 486, and the caller's call
/// runs its TwiML (here a hang-up).
#[test]
fn dial_to_a_busy_callee_tells_the_action_busy() {
    let Some(_one) = begin() else { return };
    let (sink, cc, callee) = dial_to_callee(30, "callee_busy.xml", &[]);
    let caller = caller(
        &cc,
        "caller_speaks_waits_bye.xml",
        &[("@BYE_WITHIN_MS@", "20000"), ("@REASON@", "cause=16")],
        free_media_port(),
    );
    let (callee_ok, callee_log) = callee.finish(Duration::from_secs(30));
    let (caller_ok, caller_log) = caller.finish(Duration::from_secs(30));
    assert!(callee_ok, "callee:\n{callee_log}\n{}", cc.context());
    assert!(caller_ok, "caller:\n{caller_log}\n{}", cc.context());
    let action = the_action(&sink, &cc);
    assert_eq!(
        action.param("DialCallStatus").as_deref(),
        Some("busy"),
        "{action:?}"
    );
    assert_eq!(
        action.param("DialSipResponseCode").as_deref(),
        Some("486"),
        "{action:?}"
    );
    assert_eq!(
        action.param("DialCallDuration").as_deref(),
        Some("0"),
        "{action:?}"
    );
    let leg = action.param("DialCallSid").unwrap_or_default();
    let view = cc.wait_status(&leg, "busy", Duration::from_secs(5));
    assert_eq!(view["status"], "busy", "{view}");
}

/// A callee that never answers: at the `<Dial timeout>` the leg is cancelled and the `action`
/// hears `no-answer`.
#[test]
fn dial_unanswered_at_its_timeout_tells_the_action_no_answer() {
    let Some(_one) = begin() else { return };
    let (sink, cc, callee) = dial_to_callee(
        5,
        "callee_rings_until_cancel.xml",
        &[("@CANCEL_WITHIN_MS@", "15000")],
    );
    let started = Instant::now();
    let caller = caller(
        &cc,
        "caller_speaks_waits_bye.xml",
        &[("@BYE_WITHIN_MS@", "20000"), ("@REASON@", "cause=16")],
        free_media_port(),
    );
    let (callee_ok, callee_log) = callee.finish(Duration::from_secs(30));
    let cancelled_after = started.elapsed();
    let (caller_ok, caller_log) = caller.finish(Duration::from_secs(30));
    assert!(callee_ok, "callee:\n{callee_log}\n{}", cc.context());
    assert!(caller_ok, "caller:\n{caller_log}\n{}", cc.context());
    assert!(
        cancelled_after >= Duration::from_secs(5),
        "cancelled after {cancelled_after:?}, before the timeout"
    );
    let action = the_action(&sink, &cc);
    assert_eq!(
        action.param("DialCallStatus").as_deref(),
        Some("no-answer"),
        "{action:?}"
    );
}

/// The caller hangs up while the dialled leg rings: the leg is cancelled (the callee gets the
/// CANCEL), it reads `canceled`, and no `action` is asked (the call it would run on is over).
#[test]
fn the_caller_hanging_up_while_the_dial_rings_cancels_the_leg() {
    let Some(_one) = begin() else { return };
    let (sink, cc, callee) = dial_to_callee(
        30,
        "callee_rings_until_cancel.xml",
        &[("@CANCEL_WITHIN_MS@", "15000")],
    );
    let caller = caller(
        &cc,
        "caller_speaks.xml",
        &[("@LISTEN_MS@", "1500")],
        free_media_port(),
    );
    let (caller_ok, caller_log) = caller.finish(Duration::from_secs(30));
    let (callee_ok, callee_log) = callee.finish(Duration::from_secs(30));
    assert!(caller_ok, "caller:\n{caller_log}\n{}", cc.context());
    assert!(
        callee_ok,
        "callee (the CANCEL):\n{callee_log}\n{}",
        cc.context()
    );
    let calls = cc.request("GET", &cc.calls_path(), None).json();
    let legs: Vec<&Value> = calls["calls"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|c| c["direction"] == "outbound-dial")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(legs.len(), 1, "{calls}");
    let leg = legs[0]["sid"].as_str().unwrap_or_default().to_string();
    let view = cc.wait_status(&leg, "canceled", Duration::from_secs(5));
    assert_eq!(view["status"], "canceled", "{view}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(requests_to(&sink, "/after").len(), 0);
}

/// The first INVITE to `sip_port` in a capture: its To and its header block.
fn first_invite(pcap: &Path, sip_port: u16) -> (String, String) {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={sip_port},sip")])
        .args(["-Y", "sip.Method == \"INVITE\""])
        .args(["-T", "fields", "-E", "separator=|"])
        .args(["-e", "sip.To", "-e", "sip.msg_hdr"])
        .stderr(Stdio::null())
        .output()
        .expect("tshark -r");
    let text = String::from_utf8_lossy(&out.stdout);
    let invite = text.lines().next().unwrap_or_default();
    let (to, headers) = invite.split_once('|').unwrap_or_default();
    (to.to_string(), headers.to_string())
}

// ---------------------------------------------------------------------------------------------
// 8. The curl examples of docs/call-control.md, run as a reader would run them.

/// What a block of the docs sends for credentials. Written out, it would put the token on
/// curl's command line, where every local user can read it (`/proc/<pid>/cmdline`, `ps`) and
/// where this test's printed commands would show it; the test hands curl the same user and
/// password in a config file of its own instead (`-K`).
const CREDENTIALS: &str = "\"$ACCOUNT_SID:$ONTIME_API_AUTH_TOKEN\"";
/// The variables the docs' setup block exports, which the test provides itself.
const SETUP_VARIABLES: [&str; 3] = ["ONTIME_API", "ACCOUNT_SID", "ONTIME_API_AUTH_TOKEN"];
/// Where the docs' examples point a bot's WebSocket (replaced with the test's bot).
const DOC_BOT_WS: &str = "wss://bot.example/ws";
/// Where the docs' examples point a bot's web server (replaced with the test's webhook sink).
const DOC_BOT_WEB: &str = "https://bot.example/";

/// The `sh` blocks of docs/call-control.md by name, and what the test puts in place of the
/// reader's setup: the API's address, the account, the credentials file, the bot's URLs.
struct DocExamples {
    blocks: Vec<doc_sh::ShBlock>,
    ran: Vec<String>,
    api: String,
    account: String,
    /// Only to check that it never reaches curl's command line.
    token: String,
    credentials: PathBuf,
    bot_ws: String,
    bot_web: String,
}

impl DocExamples {
    /// Read the page; every `sh` block must be named (`<!-- runs: NAME -->`), each name once.
    fn load(cc: &ApiGateway, bot_ws: &str, bot_web: &str) -> DocExamples {
        let page = std::fs::read_to_string(workspace().join("docs/call-control.md"))
            .expect("read docs/call-control.md");
        let blocks = doc_sh::sh_blocks(&page);
        let mut names = Vec::new();
        for b in &blocks {
            let name = b.name.clone().unwrap_or_else(|| {
                panic!(
                    "docs/call-control.md:{}: an sh block without a <!-- runs: NAME --> line before it",
                    b.line
                )
            });
            assert!(
                !names.contains(&name),
                "docs/call-control.md:{}: a second block named {name}",
                b.line
            );
            names.push(name);
        }
        // Readable by this user only, as a reader's own netrc or curlrc would be.
        let credentials = tempdir("doc-curl").join("credentials.curlrc");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&credentials)
            .unwrap();
        writeln!(file, "user = \"{}:{}\"", cc.account, cc.token).unwrap();
        DocExamples {
            blocks,
            ran: Vec::new(),
            api: format!("http://{}", cc.api),
            account: cc.account.clone(),
            token: cc.token.clone(),
            credentials,
            bot_ws: bot_ws.to_string(),
            bot_web: bot_web.to_string(),
        }
    }

    fn block(&mut self, name: &str) -> doc_sh::ShBlock {
        let block = self
            .blocks
            .iter()
            .find(|b| b.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("docs/call-control.md has no block named {name}"))
            .clone();
        self.ran.push(name.to_string());
        block
    }

    /// The setup block exports exactly the variables the test provides, and runs nothing else.
    fn check_setup(&mut self) {
        let block = self.block("setup");
        let mut exported = Vec::new();
        for command in doc_sh::commands(&block.text) {
            let words = doc_sh::raw_words(&command);
            assert!(
                matches!(words.first().map(String::as_str), Some("export" | "read")),
                "the setup block runs {command:?}"
            );
            for pair in words.windows(2).filter(|w| w[0] == "export") {
                exported.push(pair[1].split('=').next().unwrap_or_default().to_string());
            }
        }
        exported.sort();
        let mut expected = SETUP_VARIABLES.map(String::from).to_vec();
        expected.sort();
        assert_eq!(exported, expected, "the setup block's variables");
    }

    /// Run the block `name` with the real curl: its one command, the variables the setup block
    /// sets and `CALL_SID` (when given) filled in, the credentials from the test's file.
    fn run(&mut self, name: &str, call_sid: Option<&str>) -> Resp {
        let block = self.block(name);
        let commands = doc_sh::commands(&block.text);
        let [command] = commands.as_slice() else {
            panic!("block {name}: one command expected, found {commands:?}");
        };
        let raw = doc_sh::raw_words(command);
        assert_eq!(
            raw.first().map(String::as_str),
            Some("curl"),
            "block {name}"
        );
        let mut var = |v: &str| match v {
            "ONTIME_API" => self.api.clone(),
            "ACCOUNT_SID" => self.account.clone(),
            "CALL_SID" => call_sid
                .unwrap_or_else(|| panic!("block {name} uses $CALL_SID; no call given"))
                .to_string(),
            other => panic!("block {name} uses ${other}, which the test does not provide"),
        };
        let mut args: Vec<String> = Vec::new();
        let mut words = raw.iter().skip(1);
        while let Some(word) = words.next() {
            if word == "-u" {
                let user = words.next().map(String::as_str);
                assert_eq!(user, Some(CREDENTIALS), "block {name}: -u");
                args.push("-K".into());
                args.push(self.credentials.to_string_lossy().into_owned());
            } else {
                let arg = doc_sh::expand(word, &mut var)
                    .replace(DOC_BOT_WS, &self.bot_ws)
                    .replace(DOC_BOT_WEB, &self.bot_web);
                args.push(arg);
            }
        }
        assert!(
            args.iter().any(|a| a == "-K"),
            "block {name} sends no credentials"
        );
        assert!(
            !args.iter().any(|a| a.contains(&self.token)),
            "block {name} puts the token on curl's command line"
        );
        eprintln!("{name}: curl {}", args.join(" "));
        let out = Command::new("curl")
            .args(&args)
            .args(["-S", "--max-time", "20", "-w", "\n%{http_code}"])
            .output()
            .expect("run curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "block {name}: curl failed: {}{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        let status = status
            .parse()
            .unwrap_or_else(|_| panic!("block {name}: no status in {text:?}"));
        eprintln!("{name}: HTTP {status}");
        Resp {
            status,
            body: body.to_string(),
        }
    }

    /// Every block of the page ran, each once.
    fn check_all_ran(&self) {
        let mut ran = self.ran.clone();
        ran.sort();
        let mut all: Vec<String> = self.blocks.iter().filter_map(|b| b.name.clone()).collect();
        all.sort();
        assert_eq!(ran, all, "the blocks the test ran vs the page's blocks");
    }
}

/// A caller playing the trunk that accepts a REFER whose Refer-To matches `refer_to_re`.
fn refer_accepting_caller(cc: &ApiGateway, refer_to_re: &str) -> SippCall {
    caller(
        cc,
        "caller_refer_accept.xml",
        &[
            ("@REFER_WITHIN_MS@", "20000"),
            ("@REFER_TO_RE@", refer_to_re),
        ],
        free_media_port(),
    )
}

/// Run the block `name` on the call `sid`: 200 with the call, then `peer`'s scenario must pass
/// (bounded: 30 s) and the call must end as `final_status`.
fn run_to_the_end(
    docs: &mut DocExamples,
    cc: &ApiGateway,
    (name, sid): (&str, &str),
    peer: SippCall,
    final_status: &str,
) {
    let r = docs.run(name, Some(sid));
    assert_eq!(r.status, 200, "{name}: {}", r.body);
    assert_eq!(r.json()["sid"], sid, "{name}: {}", r.body);
    let (ok, log) = peer.finish(Duration::from_secs(30));
    assert!(
        ok,
        "{name}: the peer's scenario failed:\n{log}\n{}",
        cc.context()
    );
    let view = cc.wait_status(sid, final_status, Duration::from_secs(5));
    assert_eq!(view["status"], final_status, "{name}: {view}");
}

/// [`run_to_the_end`] on the one live call, from `caller`, which ends `completed`.
fn run_on_a_call(docs: &mut DocExamples, cc: &ApiGateway, name: &str, caller: SippCall) {
    let sid = cc.live_call()["sid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    run_to_the_end(docs, cc, (name, &sid), caller, "completed");
}

/// A callee's "Hello?" (fresh speech, about half a second): answering-machine detection's
/// person.
fn voicemail_free_hello(callee_sip: u16) -> PathBuf {
    fresh_speech(&tempdir(&format!("hello-{callee_sip}")), "Hello?")
}

/// The bot's `start` message on connection `i` (waited for, bounded: 15 s).
fn bot_start(bot: &TestBot, i: usize, cc: &ApiGateway) -> Value {
    let mut start = None;
    wait_until(Duration::from_secs(15), || {
        start = bot
            .connection(i)
            .and_then(|c| c.events("start").first().map(|(_, v)| v.clone()));
        start.is_some()
    });
    start.unwrap_or_else(|| panic!("the bot's connection {i} got no start\n{}", cc.context()))
}

/// Every `sh` block of docs/call-control.md, run with the real curl against a real gateway
/// (its `--trunk-uri` a sipp callee) and sipp callers: each answer's status and fields, and
/// each one's effect on the call (digits heard as RFC 4733 events, a BYE with its Reason, a
/// REFER's Refer-To, a bot's `start`, an INVITE's headers, a CANCEL). A block the test does
/// not run fails it.
#[test]
fn the_curl_examples_of_the_docs_do_what_they_say() {
    let Some(_one) = begin().filter(|_| require("curl")) else {
        return;
    };
    let bot = TestBot::start(vec![Step::WaitMedia(1)]);
    let sink = HttpSink::start("<Response><Hangup/></Response>");
    let (cc, callee_sip, callee_media) = with_trunk(&[], &[]);
    let mut docs = DocExamples::load(&cc, &bot.url(), &format!("http://{}/", sink.addr));
    docs.check_setup();

    // A call for the list, the read, the digits and the pause.
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    let first = caller_hung_up_by_api(&cc, media_port);
    let sid = cc.live_call()["sid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let list = docs.run("list-calls", None);
    assert_eq!(list.status, 200, "{}", list.body);
    let page = list.json();
    let listed: Vec<&str> = page["calls"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["sid"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(listed, [sid.as_str()], "{page}");
    assert_eq!(page["page_size"], 20, "{page}");
    assert_eq!(page["page"], 0, "{page}");
    let one = docs.run("get-call", Some(&sid));
    assert_eq!(one.status, 200, "{}", one.body);
    let view = one.json();
    assert_eq!(view["sid"], sid.as_str(), "{view}");
    assert_eq!(view["status"], "in-progress", "{view}");
    assert_eq!(view["direction"], "inbound", "{view}");

    let played = docs.run("play-digits", Some(&sid));
    assert_eq!(played.status, 200, "{}", played.body);
    assert!(
        wait_until(Duration::from_secs(10), || cc
            .gw
            .metric("ontime_dtmf_sent_total")
            == Some(4.0)),
        "ontime_dtmf_sent_total is {:?}, not 4\n{}",
        cc.gw.metric("ontime_dtmf_sent_total"),
        cc.context()
    );
    // The sequence lasts 1.3 s from its start: let it and its end packets go out first, since
    // new TwiML replaces what the call runs.
    std::thread::sleep(Duration::from_millis(1500));
    let paused = docs.run("pause-hangup", Some(&sid));
    let asked = Instant::now();
    assert_eq!(paused.status, 200, "{}", paused.body);
    std::thread::sleep(Duration::from_millis(500));
    let during = cc.get_call(&sid).json();
    assert_eq!(
        during["status"], "in-progress",
        "within the pause: {during}"
    );
    let (ok, log) = first.finish(Duration::from_secs(15));
    let took = asked.elapsed();
    assert!(
        ok,
        "pause-hangup: no BYE with cause 16:\n{log}\n{}",
        cc.context()
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(3),
        "the BYE came {took:?} after the request; the pause is 1 s"
    );
    let view = cc.wait_status(&sid, "completed", Duration::from_secs(5));
    assert_eq!(view["status"], "completed", "{view}");
    let packets = rtp_to(&cap.finish(), media_port);
    let events: Vec<&RtpPkt> = packets.iter().filter(|p| p.event.is_some()).collect();
    let heard: Vec<u8> = digit_groups(&events)
        .iter()
        .filter_map(|rows| rows[0].event.map(|e| e.0))
        .collect();
    assert_eq!(heard, [1, 5, 9, 11], "digits heard (11 is #): {events:?}");

    // <Reject> on an answered call: a BYE with cause 21.
    let rejected = caller(
        &cc,
        "caller_speaks_waits_bye.xml",
        &[
            ("@BYE_WITHIN_MS@", "20000"),
            ("@REASON@", "Q\\.850;cause=21;text=.Call rejected."),
        ],
        free_media_port(),
    );
    run_on_a_call(&mut docs, &cc, "reject", rejected);

    // <Dial> to a number: the callee on the trunk answers, speaks and hangs up; with no
    // action and no verb after it, the caller's call ends (cause 16).
    let callee = spawn_callee(
        callee_sip,
        callee_media,
        "\\+15551234567",
        "Front desk.",
        "1000",
    );
    let bridged = caller_hung_up_by_api(&cc, free_media_port());
    run_on_a_call(&mut docs, &cc, "dial-number", bridged);
    let (ok, log) = callee.finish(Duration::from_secs(30));
    assert!(
        ok,
        "dial-number: the callee failed:\n{log}\n{}",
        cc.context()
    );

    // <Dial> to a SIP URI with an X- header: on the leg's INVITE (its To without it), and the
    // action hears the leg completed; its TwiML (the webhook's <Hangup/>) ends the call.
    let cap = capture(&[callee_sip]);
    let callee = spawn_callee_at(
        callee_sip,
        callee_media,
        "sip:agent@pbx\\.example",
        "Agent speaking.",
        "1000",
    );
    let bridged = caller_hung_up_by_api(&cc, free_media_port());
    run_on_a_call(&mut docs, &cc, "dial-sip", bridged);
    let (ok, log) = callee.finish(Duration::from_secs(30));
    assert!(ok, "dial-sip: the callee failed:\n{log}\n{}", cc.context());
    let (to, headers) = first_invite(&cap.finish(), callee_sip);
    assert_eq!(to, "<sip:agent@pbx.example>", "the leg's To");
    assert_eq!(headers.matches("X-Campaign: 7").count(), 1, "{headers}");
    let after: Vec<Received> = requests_to(&sink, "/after-dial");
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(
        after[0].param("DialCallStatus").as_deref(),
        Some("completed")
    );

    // <Refer>: a REFER, its Refer-To exactly as the docs say.
    let transferred = refer_accepting_caller(&cc, "sip:agent@pbx\\.example");
    run_on_a_call(&mut docs, &cc, "refer-sip", transferred);
    assert_eq!(
        cc.metric("ontime_transfers_total{result=\"completed\"}"),
        1.0
    );

    // <Connect><Stream>: the bot gets the call, with its parameter; then the API hangs up.
    let streamed = caller_hung_up_by_api(&cc, free_media_port());
    let sid = cc.live_call()["sid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let connected = docs.run("connect-stream", Some(&sid));
    assert_eq!(connected.status, 200, "{}", connected.body);
    let start = bot_start(&bot, 0, &cc);
    assert_eq!(start["start"]["callSid"], sid.as_str(), "{start}");
    assert_eq!(
        start["start"]["customParameters"]["campaign"], "7",
        "{start}"
    );
    run_to_the_end(
        &mut docs,
        &cc,
        ("complete-call", &sid),
        streamed,
        "completed",
    );

    // Url=: the gateway fetches the TwiML (the sink's <Hangup/>) with a signed POST.
    let fetched = caller_hung_up_by_api(&cc, free_media_port());
    run_on_a_call(&mut docs, &cc, "update-url", fetched);
    let fetches: Vec<Received> = sink
        .received()
        .into_iter()
        .filter(|r| r.target == "/twiml")
        .collect();
    assert_eq!(fetches.len(), 1, "{fetches:?}");
    check_webhook(&fetches[0], "/twiml", &cc.account, "inbound");

    // Dial out to a number: 201, the callee answers, the bot gets the call, the callbacks come.
    let callee = spawn_callee(callee_sip, callee_media, "\\+15551234567", "Hello.", "1000");
    let created = docs.run("create-call", None);
    assert_eq!(created.status, 201, "{}\n{}", created.body, cc.context());
    let call = created.json();
    let out_sid = call["sid"].as_str().unwrap_or_default().to_string();
    assert_eq!(call["direction"], "outbound-api", "{call}");
    assert_eq!(call["to"], "+15551234567", "{call}");
    assert_eq!(call["from"], "+15557654321", "{call}");
    let (ok, log) = callee.finish(Duration::from_secs(30));
    assert!(
        ok,
        "create-call: the callee failed:\n{log}\n{}",
        cc.context()
    );
    let start = bot_start(&bot, 1, &cc);
    assert_eq!(start["start"]["callSid"], out_sid.as_str(), "{start}");
    let view = cc.wait_status(&out_sid, "completed", Duration::from_secs(5));
    assert_eq!(view["status"], "completed", "{view}");
    let statuses = |sink: &HttpSink| -> Vec<String> {
        let mut got: Vec<Received> = sink
            .received()
            .into_iter()
            .filter(|r| r.target == "/status")
            .collect();
        got.sort_by_key(|r| {
            r.param("SequenceNumber")
                .and_then(|n| n.parse::<u32>().ok())
        });
        got.iter().filter_map(|r| r.param("CallStatus")).collect()
    };
    wait_until(Duration::from_secs(5), || statuses(&sink).len() >= 4);
    assert_eq!(
        statuses(&sink),
        ["initiated", "ringing", "in-progress", "completed"],
        "the status callbacks"
    );

    // Dial out to a SIP URI with X- headers: they are on the INVITE, not in its URIs.
    let cap = capture(&[callee_sip]);
    let callee = spawn_callee_at(
        callee_sip,
        callee_media,
        "sip:bob@pbx\\.example",
        "Hello.",
        "1000",
    );
    let created = docs.run("create-call-x-headers", None);
    assert_eq!(created.status, 201, "{}\n{}", created.body, cc.context());
    assert_eq!(
        created.json()["to"],
        "sip:bob@pbx.example",
        "{}",
        created.body
    );
    let (ok, log) = callee.finish(Duration::from_secs(30));
    assert!(
        ok,
        "create-call-x-headers: the callee failed:\n{log}\n{}",
        cc.context()
    );
    let (to, headers) = first_invite(&cap.finish(), callee_sip);
    assert_eq!(to, "<sip:bob@pbx.example>", "the INVITE's To");
    assert_eq!(headers.matches("X-Campaign: 7").count(), 1, "{headers}");
    assert_eq!(headers.matches("X-Account: a1").count(), 1, "{headers}");

    // Cancel a call that rings: the callee gets the CANCEL, the call ends canceled.
    let scen = scenario(
        "callee_rings_until_cancel.xml",
        &[("@CANCEL_WITHIN_MS@", "20000")],
    );
    let callee = spawn_sipp_uas(&scen, callee_sip, 1, callee_media, Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    let form = [
        ("To", "+15551234567"),
        ("From", "+15557654321"),
        ("Twiml", "<Response/>"),
    ];
    let r = cc.request("POST", &cc.calls_path(), Some(&form));
    assert_eq!(r.status, 201, "{}", r.body);
    let ringing_sid = r.json()["sid"].as_str().unwrap_or_default().to_string();
    let view = cc.wait_status(&ringing_sid, "ringing", Duration::from_secs(10));
    assert_eq!(view["status"], "ringing", "{view}");
    run_to_the_end(
        &mut docs,
        &cc,
        ("cancel-call", &ringing_sid),
        callee,
        "canceled",
    );

    // Answering-machine detection: a callee saying "Hello?" is a person. Its webhook answers
    // with a pause (the callee hangs up first, as its scenario expects).
    let amd_sink = HttpSink::start(r#"<Response><Pause length="20"/></Response>"#);
    docs.bot_web = format!("http://{}/", amd_sink.addr);
    let hello = voicemail_free_hello(callee_sip);
    for (name, verdict_path) in [
        ("create-call-amd", "/outbound-twiml"),
        ("create-call-amd-async", "/amd"),
    ] {
        let callee = spawn_callee_playing(
            callee_sip,
            callee_media,
            &format!("sip:\\+15551234567@127\\.0\\.0\\.1:{callee_sip}"),
            Some(&hello),
            "4000",
        );
        let created = docs.run(name, None);
        assert_eq!(
            created.status,
            201,
            "{name}: {}\n{}",
            created.body,
            cc.context()
        );
        let (ok, log) = callee.finish(Duration::from_secs(30));
        assert!(ok, "{name}: the callee failed:\n{log}\n{}", cc.context());
        let sid = created.json()["sid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let view = cc.wait_status(&sid, "completed", Duration::from_secs(5));
        assert_eq!(view["answered_by"], "human", "{name}: {view}");
        std::thread::sleep(Duration::from_millis(300));
        let got = requests_to(&amd_sink, verdict_path);
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        assert_eq!(
            got[0].param("AnsweredBy").as_deref(),
            Some("human"),
            "{name}"
        );
    }

    docs.check_all_ran();
    let m = |s: &str| cc.metric(s);
    // play, pause, reject, two dials and a transfer, connect, complete, url, cancel.
    assert_eq!(
        m("ontime_api_requests_total{route=\"call_update\",status=\"200\"}"),
        10.0
    );
    assert_eq!(
        m("ontime_api_requests_total{route=\"calls_create\",status=\"201\"}"),
        5.0
    );
    // Two dial-outs, two <Dial> legs, two dial-outs with detection.
    assert_eq!(m("ontime_outbound_calls_total{result=\"answered\"}"), 6.0);
    assert_eq!(m("ontime_outbound_calls_total{result=\"canceled\"}"), 1.0);
    assert_eq!(m("ontime_dtmf_sent_total"), 4.0);
}
