//! A real pipecat 1.14 bot behind the gateway (`integrations/pipecat/examples/reply_bot.py`, run
//! in the venv `scripts/setup.sh` makes): FastAPI + `FastAPIWebsocketTransport` + Twilio (or
//! ontime's) serializer, its turn taken by its own Silero VAD + Smart Turn v3 or by ontime's
//! events, a canned reply pushed as TTS audio frames. sipp callers speak fresh speech, tshark
//! captures the caller's media port, the bot records what it saw.
//!
//! Each test gathers every check and reports all failures at once, so one missing gateway
//! feature does not hide the others. The calls run one at a time (they share two cores with a
//! Python bot, and the barge-in check is timed). `pipecat_package_tests_pass` runs the
//! `ontime_pipecat` package's own pytest suite.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::pipecat::*;
use common::*;
use serde_json::Value;

static ONE_CALL_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_CALL_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn tools() -> bool {
    require("sipp") && require("tshark") && require("sox") && require_pipecat()
}

fn stub_reply() -> PathBuf {
    workspace().join("gateway/assets/stub_reply.wav")
}

/// Every failed check of a test, reported together at its end.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn check(&mut self, ok: bool, what: String) {
        eprintln!("{} {what}", if ok { "ok:    " } else { "FAILED:" });
        if !ok {
            self.0.push(what);
        }
    }
    fn finish(self, context: impl FnOnce() -> String) {
        assert!(
            self.0.is_empty(),
            "{} check(s) failed:\n  {}\n{}",
            self.0.len(),
            self.0.join("\n  "),
            context()
        );
    }
}

/// What a finished call left behind.
struct Call {
    agent: Vec<RtpRow>,
    caller: Vec<RtpRow>,
    bye_at: Option<f64>,
    records: Vec<Value>,
    metrics: String,
    cdrs: Vec<Value>,
    context: String,
}

impl Call {
    /// Reply packets (not silent) the caller received.
    fn heard(&self) -> Vec<f64> {
        self.agent
            .iter()
            .filter(|r| !r.silent)
            .map(|r| r.time)
            .collect()
    }
    fn last_caller_speech(&self) -> f64 {
        self.caller
            .iter()
            .filter(|r| !r.silent)
            .map(|r| r.time)
            .fold(f64::MIN, f64::max)
    }
    fn record(&self) -> &Value {
        self.records.first().unwrap_or(&Value::Null)
    }
    fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics, series).unwrap_or(f64::NAN)
    }
}

/// The gateway's BYE (sent from its SIP port), as captured.
fn bye_time(pcap: &Path, sip_port: u16) -> Option<f64> {
    let out = std::process::Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={sip_port},sip")])
        .args([
            "-Y",
            &format!("sip.Method == \"BYE\" && udp.srcport == {sip_port}"),
        ])
        .args(["-T", "fields", "-e", "frame.time_epoch"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next()
}

/// Start the bot and a gateway pointed at it, place one sipp call with `scenario_name` and its
/// placeholders (`@SPEECH@` etc. filled by the caller), and collect what happened.
fn run_call(
    bot_args: &[&str],
    gw_args: &[&str],
    scenario_name: &str,
    replacements: &[(&str, String)],
) -> Call {
    let bot = start_bot(bot_args);
    let url = bot.url();
    let mut args = vec!["--agent", url.as_str()];
    args.extend_from_slice(gw_args);
    let gw = start_gateway(&args);
    let media_port = free_media_port();
    let cap = capture(&[media_port, gw.sip.port()]);
    let reps: Vec<(&str, &str)> = replacements.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let scen = scenario(scenario_name, &reps);
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(60));
    let pcap = cap.finish();
    let records = bot.wait_records(1, Duration::from_secs(15));
    // The end record is written when the call's task ends, just after the BYE exchange.
    wait_until(Duration::from_secs(5), || !cdr_end_records(&gw).is_empty());
    let rows = rtp_rows(&pcap, media_port);
    let context = format!(
        "sipp ok={ok}:\n{log}\nbot records: {records:?}\nbot log (tail):\n{}\ngateway stderr:\n{}",
        tail(&bot.stderr(), 40),
        gw.stderr()
    );
    assert!(ok, "sipp call failed\n{context}");
    Call {
        agent: rows
            .iter()
            .filter(|r| r.dst_port == media_port)
            .copied()
            .collect(),
        caller: rows
            .iter()
            .filter(|r| r.src_port == media_port)
            .copied()
            .collect(),
        bye_at: bye_time(&pcap, gw.sip.port()),
        records,
        metrics: gw.metrics_text(),
        cdrs: cdr_end_records(&gw),
        context,
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `heard` is within a few frames of `expected` (resampling and frame alignment move the
/// edges of the reply by a frame or two).
fn whole(heard: usize, expected: usize) -> bool {
    heard + 6 >= expected && heard <= expected + 6
}

/// One call: the caller speaks `sentence` (fresh speech) and listens 14 s, then hangs up.
fn one_utterance_call(label: &str, sentence: &str, bot_args: &[&str], gw_args: &[&str]) -> Call {
    let speech = fresh_speech(&tempdir(label), sentence);
    run_call(
        bot_args,
        gw_args,
        "caller_speaks.xml",
        &[
            ("@SPEECH@", speech.display().to_string()),
            ("@LISTEN_MS@", "14000".into()),
        ],
    )
}

/// The caller heard the stub reply whole, after its turn (the latency is printed).
fn check_reply_whole_after_the_turn(c: &mut Checks, call: &Call) {
    eprintln!(
        "gateway underruns: metric {}, CDR {}",
        call.metric("ontime_sender_underruns_total"),
        call.cdrs
            .first()
            .map_or(Value::Null, |r| r["underruns"].clone())
    );
    let expected = wav_speech_frames(&stub_reply(), None);
    let heard = call.heard();
    c.check(
        whole(heard.len(), expected),
        format!(
            "reply heard whole: {} packets, the WAV has {expected}",
            heard.len()
        ),
    );
    if let Some(first) = heard.first() {
        let latency = first - call.last_caller_speech();
        eprintln!("turn latency (last caller speech to first reply packet): {latency:.3} s");
        c.check(
            latency > -0.5,
            format!("reply after the caller's turn ({latency:.3} s)"),
        );
    } else {
        c.check(false, "the caller heard a reply".into());
    }
}

/// (a) The bot takes the turn with its own Silero VAD and Smart Turn v3: the caller hears the
/// reply whole, with no underrun, and the bot sees close code 1000 when the caller hangs up.
#[test]
fn own_vad_and_turn_reply_heard_whole_no_underruns_close_1000() {
    if !tools() {
        return;
    }
    let _one = one_at_a_time();
    let call = one_utterance_call(
        "own",
        "I would like to check the status of my order please.",
        &["--turn", "own"],
        &[],
    );
    let mut c = Checks::default();
    check_reply_whole_after_the_turn(&mut c, &call);
    let underruns = call.metric("ontime_sender_underruns_total");
    c.check(
        underruns == 0.0,
        format!("ontime_sender_underruns_total == 0 (is {underruns})"),
    );
    let cdr = call.cdrs.first().cloned().unwrap_or(Value::Null);
    c.check(
        cdr["underruns"] == 0,
        format!("CDR underruns == 0 (is {})", cdr["underruns"]),
    );
    let rec = call.record();
    c.check(
        rec["replies"] == 1,
        format!("the bot replied once (replies {})", rec["replies"]),
    );
    c.check(
        rec["closed_by"] == "gateway" && rec["close_code"] == 1000,
        format!(
            "the bot saw close code 1000 from the gateway on the caller's hang-up (closed_by {}, code {})",
            rec["closed_by"], rec["close_code"]
        ),
    );
    c.check(
        rec["from_number"]
            .as_str()
            .is_some_and(|s| s.contains("caller"))
            && rec["to_number"].as_str().is_some_and(|s| s.contains("bot")),
        format!(
            "parse_telephony_websocket found from_number/to_number in customParameters ({}, {})",
            rec["from_number"], rec["to_number"]
        ),
    );
    c.finish(|| call.context.clone());
}

/// (b) The bot's VAD and turn model are off; ontime's events, through `OntimeFrameSerializer`,
/// open and end the user turn, and the bot replies.
#[test]
fn ontime_events_take_the_turn_with_the_bots_vad_off() {
    if !tools() {
        return;
    }
    let _one = one_at_a_time();
    let call = one_utterance_call(
        "ontime",
        "Could you tell me when the next train to the airport leaves?",
        &["--turn", "ontime"],
        &["--ws-ontime-events", "true"],
    );
    let rec = call.record();
    let mut c = Checks::default();
    c.check(
        rec["ontime_events"]["ontime.speech_started"].as_u64() >= Some(1)
            && rec["ontime_events"]["ontime.turn_ended"].as_u64() >= Some(1),
        format!("the bot got ontime's events: {}", rec["ontime_events"]),
    );
    c.check(
        rec["user_turns_ended"].as_u64() >= Some(1) && rec["replies"].as_u64() >= Some(1),
        format!(
            "the user aggregator ended the turn and the bot replied (turns ended {}, replies {})",
            rec["user_turns_ended"], rec["replies"]
        ),
    );
    check_reply_whole_after_the_turn(&mut c, &call);
    c.finish(|| call.context.clone());
}

/// (b') The same at 16 kHz: the gateway streams `audio/l16;rate=16000` both ways and the bot's
/// `OntimeFrameSerializer` takes it (`--audio l16_16k`): pipecat hears the caller at its
/// pipeline's 16 kHz, ontime's events end the turn, and the caller hears the reply whole.
#[test]
fn a_bot_at_16k_takes_the_turn_and_its_reply_is_heard_whole() {
    if !tools() {
        return;
    }
    let _one = one_at_a_time();
    let call = one_utterance_call(
        "l16",
        "I would like to check the status of my order please.",
        &["--turn", "ontime", "--audio", "l16_16k"],
        &[
            "--ws-ontime-events",
            "true",
            "--ws-content-type",
            "audio/l16;rate=16000",
        ],
    );
    let rec = call.record();
    let mut c = Checks::default();
    c.check(
        rec["audio_format"] == "l16_16k",
        format!(
            "the bot ran at 16 kHz (audio_format {})",
            rec["audio_format"]
        ),
    );
    let turns = rec["ontime_events"]["ontime.turn_ended"].as_u64();
    c.check(
        turns == Some(1)
            && rec["user_turns_ended"].as_u64() == turns
            && rec["replies"].as_u64() == turns,
        format!(
            "each ontime.turn_ended ({turns:?}) ended a user turn ({}) and got a reply ({})",
            rec["user_turns_ended"], rec["replies"]
        ),
    );
    check_reply_whole_after_the_turn(&mut c, &call);
    c.finish(|| call.context.clone());
}

/// (c) After its reply the bot says a 3 s goodbye and closes the WebSocket with 1000: the caller
/// hears the goodbye whole, and the gateway's BYE (Reason cause 16, agent hung up) within
/// 300 ms of its last packet.
#[test]
fn goodbye_then_close_1000_is_heard_whole_before_the_bye() {
    if !tools() {
        return;
    }
    let _one = one_at_a_time();
    let dir = tempdir("goodbye");
    let speech = fresh_speech(
        &dir,
        "That is all I needed thank you very much for your help.",
    );
    let call = run_call(
        &["--turn", "own", "--goodbye"],
        &[],
        "caller_speaks_waits_bye.xml",
        &[
            ("@SPEECH@", speech.display().to_string()),
            ("@BYE_WITHIN_MS@", "40000".into()),
            ("@REASON@", "cause=16".into()),
        ],
    );
    let reply = wav_speech_frames(&stub_reply(), None);
    let goodbye = wav_speech_frames(&stub_reply(), Some(3.0));
    let heard = call.heard();
    let rec = call.record();
    let mut c = Checks::default();
    c.check(
        rec["replies"] == 1 && rec["goodbyes"] == 1,
        format!(
            "the bot replied and said goodbye (replies {}, goodbyes {})",
            rec["replies"], rec["goodbyes"]
        ),
    );
    c.check(
        rec["closed_by"] == "bot" && rec["bot_close_code"] == 1000,
        format!(
            "the bot closed with 1000 (closed_by {}, code {})",
            rec["closed_by"], rec["bot_close_code"]
        ),
    );
    c.check(
        whole(heard.len(), reply + goodbye),
        format!(
            "reply and goodbye heard whole: {} packets, the WAVs have {reply} + {goodbye}",
            heard.len()
        ),
    );
    match (call.bye_at, heard.last()) {
        // The BYE follows the goodbye's last packet within 300 ms (no dead air: the bot sends
        // no trailing silence, and the gateway hangs up once what it sent has played).
        (Some(bye), Some(last)) => c.check(
            *last <= bye && bye - last <= 0.3,
            format!(
                "the goodbye ended before the BYE, within 300 ms (last packet {:.3} s before it)",
                bye - last
            ),
        ),
        (bye, last) => c.check(
            false,
            format!("BYE captured ({bye:?}), reply heard ({last:?})"),
        ),
    }
    let normal = call.metric("ontime_ws_disconnects_total{how=\"normal\"}");
    c.check(
        normal == 1.0,
        format!("ontime_ws_disconnects_total{{how=\"normal\"}} == 1 (is {normal})"),
    );
    c.finish(|| call.context.clone());
}

/// A call where the caller speaks twice, the second time `after_ms` after the end of the
/// first utterance, over the bot's (doubled) reply.
fn talk_over_call(
    label: &str,
    first: &str,
    second: &str,
    after_ms: u64,
    bot_args: &[&str],
    gw_args: &[&str],
) -> Call {
    let first = fresh_speech(&tempdir(&format!("{label}1")), first);
    let second = fresh_speech(&tempdir(&format!("{label}2")), second);
    let second_at_ms = (ulaw_wav_secs(&first) * 1000.0) as u64 + after_ms;
    run_call(
        bot_args,
        gw_args,
        "caller_speaks_twice.xml",
        &[
            ("@SPEECH@", first.display().to_string()),
            ("@SPEECH2@", second.display().to_string()),
            ("@SECOND_AT_MS@", second_at_ms.to_string()),
            ("@LISTEN_MS@", "9000".into()),
        ],
    )
}

/// The bound on one call's barge-in cut: echo_line.rs's 300 ms median, plus one VAD chunk
/// (32 ms) and one sender tick (20 ms).
const BARGE_IN_CUT_ONE_CALL_S: f64 = 0.352;

/// (d) Local barge-in with pipecat's interruptions off: the caller talks over the reply; the
/// gateway stops it within 352 ms of the caller's speech onset, and nothing more of that reply
/// plays (though the bot, not interrupted, goes on sending it).
#[test]
fn local_barge_in_cuts_the_reply_with_pipecats_interruptions_off() {
    if !tools() {
        return;
    }
    let _one = one_at_a_time();
    // The reply is the stub WAV twice (10.5 s); speak again 5 s after the first utterance: the
    // bot's turn latency (Silero stop plus Smart Turn, or its 3 s fallback when the model says
    // incomplete) was measured at 0.5-3.5 s, so the reply is playing then.
    let call = talk_over_call(
        "barge",
        "I am calling about the invoice you sent me yesterday.",
        "Sorry wait that is not what I asked about at all.",
        5000,
        &[
            "--turn",
            "own",
            "--interruptions",
            "off",
            "--reply-repeat",
            "2",
        ],
        // The cut's own latency from the onset: without the backchannel window, which waits
        // for the speech to last `barge_in_min_speech` first (tested on simulated time).
        &["--barge-in", "local", "--barge-in-min-speech", "0"],
    );
    let caller: Vec<&RtpRow> = call.caller.iter().collect();
    let onsets = utterance_onsets(&caller, 0.8);
    let heard = call.heard();
    let rec = call.record();
    let mut c = Checks::default();
    c.check(
        onsets.len() >= 2,
        format!("two caller utterances in the capture ({onsets:?})"),
    );
    let Some(&onset) = onsets.get(1) else {
        return c.finish(|| call.context.clone());
    };
    let second_end = call.last_caller_speech();
    let before = heard.iter().filter(|t| **t < onset).count();
    c.check(
        heard.iter().any(|t| *t < onset && *t > onset - 0.5),
        format!("the reply was playing when the caller spoke again ({before} packets before)"),
    );
    let last_of_reply = heard
        .iter()
        .copied()
        // Before the caller's second turn ends: the answer to that turn cannot start earlier
        // (the VAD needs 160-192 ms of quiet), and with ontime's turn latency it may start
        // within 300 ms of it, so a later cut-off would count the new reply as the cut one.
        .filter(|t| *t < second_end)
        .fold(f64::MIN, f64::max);
    let cut_after = last_of_reply - onset;
    eprintln!(
        "barge-in: reply's last packet {:.0} ms after the caller's onset",
        cut_after * 1e3
    );
    // One call's cut, not a median: echo_line.rs holds the median of three calls to 300 ms;
    // a single call lands anywhere in the VAD's 32 ms chunk and the sender's 20 ms tick, so it
    // gets one of each on top (single cuts measured 256-323 ms, the last on a Zen 1 EPYC).
    c.check(
        cut_after <= BARGE_IN_CUT_ONE_CALL_S,
        format!(
            "the reply stopped within {:.0} ms of the caller's onset ({:.0} ms)",
            BARGE_IN_CUT_ONE_CALL_S * 1e3,
            cut_after * 1e3
        ),
    );
    // After the caller's second turn the bot may answer it (a new reply, at most one whole one);
    // the rest of the first reply must not come back.
    let expected = 2 * wav_speech_frames(&stub_reply(), None);
    let after = heard.iter().filter(|t| **t >= second_end + 0.3).count();
    c.check(
        after <= expected + 4,
        format!("nothing of the cut reply played afterwards ({after} packets after the caller's second turn; a new reply has {expected})"),
    );
    c.check(
        rec["interruptions"] == 0,
        format!(
            "pipecat did not interrupt itself (interruptions {})",
            rec["interruptions"]
        ),
    );
    let barge = call.metric("ontime_barge_ins_total");
    c.check(
        barge >= 1.0,
        format!("ontime_barge_ins_total >= 1 (is {barge})"),
    );
    c.finish(|| call.context.clone());
}

/// The reply's words for (f): `w1 w2 …`, one every `HEARD_WORD_MS` of the reply's audio.
const HEARD_WORDS: usize = 50;
const HEARD_WORD_MS: u64 = 200;

/// (f) Local barge-in, pipecat's interruptions off, ontime's events on: `ontime.barge_in`
/// interrupts pipecat, and `HeardReplyTrimmer` leaves in the bot's context only the words begun
/// before the `heardMs` the gateway sent (`w1` at 0 ms, `w2` at 200 ms…), then `…`, where
/// pipecat itself had committed every word its output had released.
#[test]
fn local_barge_in_leaves_only_the_heard_words_in_the_bots_context() {
    if !tools() {
        return;
    }
    let _one = one_at_a_time();
    let words: Vec<String> = (1..=HEARD_WORDS).map(|i| format!("w{i}")).collect();
    let text = words.join(" ");
    let word_ms = HEARD_WORD_MS.to_string();
    // As in (d): the caller speaks again 5 s after the first utterance, into the 10.5 s reply.
    let call = talk_over_call(
        "heard",
        "I am calling about the invoice you sent me yesterday.",
        "Sorry wait that is not what I asked about at all.",
        5000,
        &[
            "--turn",
            "ontime",
            "--interruptions",
            "off",
            "--reply-repeat",
            "2",
            "--reply-text",
            &text,
            "--reply-word-ms",
            &word_ms,
        ],
        &[
            "--barge-in",
            "local",
            "--barge-in-min-speech",
            "0",
            "--ws-ontime-events",
            "true",
        ],
    );
    let rec = call.record();
    let mut c = Checks::default();
    let barge_ins = rec["barge_ins"].as_array().cloned().unwrap_or_default();
    c.check(
        barge_ins.len() == 1,
        format!("the bot got one ontime.barge_in ({barge_ins:?})"),
    );
    let Some(heard_ms) = barge_ins.first().and_then(|b| b["heard_ms"].as_u64()) else {
        c.check(false, "the barge-in carried heardMs".into());
        return c.finish(|| call.context.clone());
    };
    let first_turn = &rec["assistant_turns"][0];
    c.check(
        first_turn["interrupted"] == true,
        format!("pipecat committed the first reply as interrupted ({first_turn})"),
    );
    // What pipecat alone would have kept: every word its output had released.
    let released = first_turn["content"]
        .as_str()
        .map_or(0, |t| t.split_whitespace().count());
    let heard = (0..HEARD_WORDS as u64)
        .filter(|i| i * HEARD_WORD_MS < heard_ms)
        .count();
    eprintln!("heardMs {heard_ms}: {heard} words heard, pipecat had released {released}");
    c.check(
        0 < heard && heard < released,
        format!("the caller heard some of the words pipecat had released, not all ({heard} of {released} in {heard_ms} ms)"),
    );
    let expected = format!("{}…", words[..heard].join(" "));
    let kept = &rec["assistant_messages"][0];
    c.check(
        kept.as_str() == Some(expected.as_str()),
        format!("the context's message for the cut reply is {expected:?} (is {kept})"),
    );
    c.finish(|| call.context.clone());
}

/// (e) The bot with its own VAD and turn model off, on ontime's events, is interrupted the
/// pipecat way: with `--barge-in bot` the gateway does not cut locally; `ontime.speech_started`
/// (through `OntimeFrameSerializer`) interrupts pipecat, which stops its reply and sends `clear`.
#[test]
fn ontime_events_interrupt_the_bot_with_its_vad_off() {
    if !tools() {
        return;
    }
    let _one = one_at_a_time();
    // ontime's turn latency is ~0.3 s: 3 s after the first utterance the reply is playing.
    let call = talk_over_call(
        "interrupt",
        "I need to change the address on my account please.",
        "No stop I meant the billing address and not the delivery one.",
        3000,
        &[
            "--turn",
            "ontime",
            "--interruptions",
            "on",
            "--reply-repeat",
            "2",
        ],
        &["--barge-in", "bot", "--ws-ontime-events", "true"],
    );
    let caller: Vec<&RtpRow> = call.caller.iter().collect();
    let onsets = utterance_onsets(&caller, 0.8);
    let heard = call.heard();
    let rec = call.record();
    let mut c = Checks::default();
    let Some(&onset) = onsets.get(1) else {
        c.check(
            false,
            format!("two caller utterances in the capture ({onsets:?})"),
        );
        return c.finish(|| call.context.clone());
    };
    c.check(
        heard.iter().any(|t| *t < onset && *t > onset - 0.5),
        "the reply was playing when the caller spoke again".to_string(),
    );
    let second_end = call.last_caller_speech();
    let last_of_reply = heard
        .iter()
        .copied()
        // Before the caller's second turn ends: the answer to that turn cannot start earlier
        // (the VAD needs 160-192 ms of quiet), and with ontime's turn latency it may start
        // within 300 ms of it, so a later cut-off would count the new reply as the cut one.
        .filter(|t| *t < second_end)
        .fold(f64::MIN, f64::max);
    let cut_after = last_of_reply - onset;
    eprintln!(
        "ontime-events interruption: reply's last packet {:.0} ms after the caller's onset",
        cut_after * 1e3
    );
    c.check(
        cut_after <= 1.0,
        format!(
            "pipecat stopped its reply within 1 s of the caller's onset ({:.0} ms)",
            cut_after * 1e3
        ),
    );
    c.check(
        rec["interruptions"].as_u64() >= Some(1),
        format!(
            "pipecat interrupted itself (interruptions {})",
            rec["interruptions"]
        ),
    );
    // After the caller's second turn at most the bot's new reply plays, not the cut one's rest.
    let expected = 2 * wav_speech_frames(&stub_reply(), None);
    let after = heard.iter().filter(|t| **t >= second_end + 0.3).count();
    c.check(
        after <= expected + 4,
        format!("nothing of the cut reply played afterwards ({after} packets; a new reply has {expected})"),
    );
    c.check(
        call.metric("ontime_barge_ins_total") == 0.0,
        "the gateway left the barge-in to the bot".to_string(),
    );
    c.finish(|| call.context.clone());
}

/// The `ontime_pipecat` package's own tests (pytest, no network), in the venv.
#[test]
fn pipecat_package_tests_pass() {
    if !require_pipecat() {
        return;
    }
    let (ok, out) = run_pytest();
    eprintln!("{}", tail(&out, 5));
    assert!(ok, "pytest integrations/pipecat failed:\n{out}");
}

fn tempdir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("ontime-pipecat-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
