//! The WebSocket agent against a bot written from the Twilio Media Streams protocol alone
//! (`common/bot.rs`), driven by real sipp callers, with tshark on the caller's media port:
//! every message both ways, the paced burst and its mark, local and bot barge-in, clear, junk,
//! size and buffer limits, an unreachable bot (503 or fallback) and a bot that goes away.

#[path = "common/bot.rs"]
mod bot;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bot::{epoch_of, reply_ulaw, SilentListener, Step, TestBot};
use common::*;
use serde_json::Value;

/// Half a second of µ-law digital silence: a caller that sends RTP but never speaks.
fn silence(dir: &Path) -> PathBuf {
    let out = dir.join("silence.ulaw.wav");
    let ok = Command::new("sox")
        .args(["-n", "-r", "8000", "-c", "1", "-e", "mu-law"])
        .arg(&out)
        .args(["trim", "0", "0.5"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "sox could not make silence");
    out
}

fn tools() -> bool {
    require("sipp") && require("tshark") && require("sox")
}

fn dir_of(gw: &Gateway) -> PathBuf {
    gw.log.parent().unwrap().to_path_buf()
}

fn seconds(samples: usize) -> f64 {
    samples as f64 / 8000.0
}

fn metric(body: &str, series: &str) -> f64 {
    metric_value(body, series).unwrap_or_else(|| panic!("{series} missing from /metrics"))
}

/// Bot connections that ended mid-call, however they ended.
fn disconnects(body: &str) -> f64 {
    ["normal", "abnormal", "lost"]
        .iter()
        .map(|h| metric(body, &format!("ontime_ws_disconnects_total{{how=\"{h}\"}}")))
        .sum()
}

/// Wait (bounded) until the bot's connection `i` has a message satisfying `f`.
fn wait_for(bot: &TestBot, i: usize, limit: Duration, f: impl Fn(&bot::Connection) -> bool) {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if bot.connection(i).is_some_and(|c| f(&c)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn burst_reply_is_paced_and_its_mark_returns_after_it_played() {
    if !tools() {
        return;
    }
    let reply = Arc::new(reply_ulaw());
    let reply_s = seconds(reply.len());
    // The caller speaks for ~4 s from the first frame; the bot answers in one burst after 6 s,
    // in chunks of an odd size (any length is allowed), then marks the end.
    let bot = TestBot::start(vec![
        Step::WaitMedia(1),
        Step::Sleep(Duration::from_secs(6)),
        Step::Media {
            ulaw: reply.clone(),
            chunk: 1234,
        },
        Step::Mark("reply-1".into()),
    ]);
    let gw = start_gateway(&[
        "--agent",
        &bot.url(),
        "--ws-forward-header",
        "X-Customer-Id",
        "--ws-custom-parameter",
        "tenant=acme",
    ]);
    let speech = fresh_speech(
        &dir_of(&gw),
        "I would like to know when my parcel will arrive please.",
    );
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    let scen = scenario(
        "caller_speaks_dtmf.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "14000"),
            ("@DIGIT@", "7"),
        ],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(45));
    let pcap = cap.finish();
    assert!(ok, "sipp call failed:\n{log}\ngateway:\n{}", gw.stderr());
    wait_for(&bot, 0, Duration::from_secs(5), |c| {
        !c.events("stop").is_empty()
    });
    let conn = bot.connection(0).expect("the gateway never connected");
    let msgs: Vec<&Value> = conn.received.iter().map(|(_, v)| v).collect();
    // The caller hung up: `stop`, then a close frame with 1000 (normal closure).
    wait_for(&bot, 0, Duration::from_secs(5), |c| c.close_code.is_some());
    assert_eq!(bot.connection(0).unwrap().close_code, Some(Some(1000)));

    // connected, then start with the media format and the call's parameters.
    assert_eq!(
        msgs[0],
        &serde_json::json!({"event":"connected","protocol":"Call","version":"1.0.0"})
    );
    let start = msgs[1];
    assert_eq!(start["event"], "start");
    assert_eq!(start["sequenceNumber"], "1");
    let sid = start["streamSid"].as_str().unwrap();
    assert!(sid.starts_with("MZ") && sid.len() == 34, "{sid}");
    assert_eq!(start["start"]["streamSid"], sid);
    assert!(start["start"]["callSid"]
        .as_str()
        .unwrap()
        .starts_with("CA"));
    assert!(start["start"]["accountSid"]
        .as_str()
        .unwrap()
        .starts_with("AC"));
    assert_eq!(start["start"]["tracks"], serde_json::json!(["inbound"]));
    assert_eq!(
        start["start"]["mediaFormat"],
        serde_json::json!({"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1})
    );
    let custom = &start["start"]["customParameters"];
    assert!(custom["From"].as_str().unwrap().contains("caller@"));
    assert!(custom["To"].as_str().unwrap().contains("bot@"));
    assert!(!custom["CallId"].as_str().unwrap().is_empty());
    // The numbers pipecat's runner reads: the user parts of From and To.
    assert_eq!(custom["from_number"], "caller");
    assert_eq!(custom["to_number"], "bot");
    assert_eq!(custom["X-Customer-Id"], "4711", "{custom}");
    // Every X- header comes too without naming it, as the voice webhook names it.
    assert_eq!(custom["SipHeader_X-Customer-Id"], "4711", "{custom}");
    assert_eq!(custom["tenant"], "acme", "{custom}");

    // Every later message carries the stream and the next sequence number.
    for (i, m) in msgs.iter().enumerate().skip(1) {
        assert_eq!(m["streamSid"], sid, "{m}");
        assert_eq!(m["sequenceNumber"], i.to_string(), "{m}");
    }

    // media every 20 ms: 160 µ-law bytes, chunks from 1, timestamps in ms of media time.
    let media = conn.events("media");
    assert!(media.len() > 300, "only {} media messages", media.len());
    for (i, (_, m)) in media.iter().enumerate() {
        assert_eq!(m["media"]["track"], "inbound");
        assert_eq!(m["media"]["chunk"], (i + 1).to_string());
        assert_eq!(m["media"]["timestamp"], (i * 20).to_string());
        let payload = base64::engine::general_purpose::STANDARD
            .decode(m["media"]["payload"].as_str().unwrap())
            .unwrap();
        assert_eq!(payload.len(), 160);
    }
    let mut gaps: Vec<f64> = media
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).as_secs_f64() * 1e3)
        .collect();
    gaps.sort_by(f64::total_cmp);
    let median = gaps[gaps.len() / 2];
    assert!(
        (15.0..=25.0).contains(&median),
        "media every {median:.1} ms (median)"
    );

    // The DTMF digit from SIP INFO.
    let dtmf = conn.events("dtmf");
    assert_eq!(dtmf.len(), 1);
    assert_eq!(
        dtmf[0].1["dtmf"],
        serde_json::json!({"track":"inbound_track","digit":"7"})
    );
    // No ontime events unless enabled; stop at the end.
    assert!(msgs
        .iter()
        .all(|m| !m["event"].as_str().unwrap().starts_with("ontime.")));
    let stop = conn.events("stop");
    assert_eq!(stop.len(), 1);
    assert_eq!(stop[0].1["stop"]["callSid"], start["start"]["callSid"]);

    // The mark comes back once, when the reply has been played, not when it arrived.
    let burst_end = conn.step_done(2).expect("burst sent");
    let marks = conn.marks_named("reply-1");
    assert_eq!(marks.len(), 1, "mark returned {} times", marks.len());
    let mark_after = (marks[0] - burst_end).as_secs_f64();
    eprintln!("reply {reply_s:.2} s; mark back {mark_after:.3} s after the burst");
    assert!(
        (mark_after - reply_s).abs() <= 0.3,
        "mark {mark_after:.3} s after the burst for a {reply_s:.2} s reply"
    );

    // The caller heard it paced: from the first reply packet on, no gap over 40 ms.
    let rows = rtp_rows(&pcap, media_port);
    let heard: Vec<_> = rows.iter().filter(|r| r.dst_port == media_port).collect();
    let burst_epoch = epoch_of(burst_end);
    let reply_rows: Vec<_> = heard
        .iter()
        .filter(|r| !r.silent && r.time >= burst_epoch - 0.1)
        .collect();
    // Every sounding frame of the reply reached the caller (judged as the capture is).
    let sounding = reply.chunks(160).filter(|f| !ulaw_is_silent(f)).count();
    assert!(
        reply_rows.len() + 2 >= sounding,
        "caller heard {} reply packets of {sounding}",
        reply_rows.len()
    );
    let first = reply_rows[0].time;
    let last = reply_rows[reply_rows.len() - 1].time;
    let span: Vec<f64> = heard
        .iter()
        .map(|r| r.time)
        .filter(|t| *t >= first && *t <= last)
        .collect();
    let worst_gap_ms = span
        .windows(2)
        .map(|w| (w[1] - w[0]) * 1e3)
        .fold(0.0, f64::max);
    eprintln!(
        "reply packets {}, worst gap {worst_gap_ms:.1} ms, played over {:.2} s",
        reply_rows.len(),
        last - first
    );
    // The worst gap is printed, not asserted (wall-clock spacing on a shared machine is a
    // measurement); pacing is asserted by the span.
    assert!(
        last - first >= reply_s - 0.5,
        "reply played in {:.2} s: not paced",
        last - first
    );

    let body = gw.metrics_text();
    assert_eq!(
        metric(&body, "ontime_ws_messages_sent_total{event=\"connected\"}"),
        1.0
    );
    assert!(metric(&body, "ontime_ws_messages_sent_total{event=\"media\"}") > 300.0);
    assert_eq!(
        metric(&body, "ontime_ws_messages_received_total{event=\"media\"}"),
        reply.len().div_ceil(1234) as f64
    );
    assert_eq!(
        metric(&body, "ontime_ws_messages_received_total{event=\"mark\"}"),
        1.0
    );
    assert_eq!(metric(&body, "ontime_ws_connect_seconds_count"), 1.0);
    assert_eq!(disconnects(&body), 0.0);
    // One reading of the reply's queue per media message the bot sent.
    assert_eq!(
        metric(&body, "ontime_agent_buffered_audio_seconds_count"),
        reply.len().div_ceil(1234) as f64
    );
    assert_eq!(
        metric(&body, "ontime_calls_total{result=\"completed\"}"),
        1.0
    );
}

/// A bot that answers as soon as the caller's audio starts, with a long reply (two sentences).
fn eager_bot(reply: &Arc<Vec<u8>>) -> TestBot {
    let mut long = reply.as_ref().clone();
    long.extend_from_slice(reply);
    TestBot::start(vec![
        Step::WaitMedia(1),
        Step::Media {
            ulaw: Arc::new(long),
            chunk: 8000,
        },
        Step::Mark("long".into()),
    ])
}

#[test]
fn local_barge_in_clears_the_reply_and_tells_the_bot() {
    if !tools() {
        return;
    }
    let reply = Arc::new(reply_ulaw());
    let bot = eager_bot(&reply);
    let gw = start_gateway(&["--agent", &bot.url(), "--ws-ontime-events", "true"]);
    let speech = fresh_speech(
        &dir_of(&gw),
        "Sorry to interrupt, but I need to speak to a person about my bill.",
    );
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    let scen = scenario(
        "caller_speaks.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "9000"),
        ],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(30));
    let pcap = cap.finish();
    assert!(ok, "sipp call failed:\n{log}\ngateway:\n{}", gw.stderr());
    wait_for(&bot, 0, Duration::from_secs(5), |c| {
        !c.events("stop").is_empty()
    });
    let conn = bot.connection(0).unwrap();
    let burst_end = conn.step_done(1).expect("burst sent");
    let long_s = seconds(reply.len() * 2);

    // The mark came back at once (the reply was cleared), not after the 10 s reply.
    let marks = conn.marks_named("long");
    assert_eq!(marks.len(), 1);
    let back_after = (marks[0] - burst_end).as_secs_f64();
    assert!(
        back_after < long_s - 3.0,
        "mark {back_after:.2} s after a {long_s:.1} s burst: not cleared"
    );
    // ontime's events: speech started, the barge-in (right after the mark), speech stopped and
    // the turn with Smart Turn's probability.
    let barge = conn.events("ontime.barge_in");
    assert_eq!(barge.len(), 1);
    assert!((barge[0].0 - marks[0]).as_secs_f64().abs() < 0.2);
    assert!(!conn.events("ontime.speech_started").is_empty());
    assert!(!conn.events("ontime.speech_stopped").is_empty());
    let turns = conn.events("ontime.turn_ended");
    assert!(!turns.is_empty(), "no turn ended event");
    let p = &turns[0].1["turn"]["probability"];
    assert!(
        p.is_null() || (0.0..=1.0).contains(&p.as_f64().unwrap()),
        "{p}"
    );

    // The caller heard only the start of the reply.
    let heard = rtp_rows(&pcap, media_port)
        .into_iter()
        .filter(|r| r.dst_port == media_port && !r.silent)
        .count();
    eprintln!("barge-in: mark back after {back_after:.2} s, caller heard {heard} reply packets");
    assert!(
        (heard as f64) < long_s * 50.0 * 0.6,
        "caller heard {heard} packets of the reply"
    );
    let body = gw.metrics_text();
    assert_eq!(metric(&body, "ontime_barge_ins_total"), 1.0);
    assert_eq!(
        metric(
            &body,
            "ontime_ws_messages_sent_total{event=\"ontime.barge_in\"}"
        ),
        1.0
    );
}

#[test]
fn bot_barge_in_leaves_the_reply_to_the_bot() {
    if !tools() {
        return;
    }
    let reply = Arc::new(reply_ulaw());
    let bot = TestBot::start(vec![
        Step::WaitMedia(1),
        Step::Media {
            ulaw: reply.clone(),
            chunk: 8000,
        },
        Step::Mark("whole".into()),
    ]);
    let gw = start_gateway(&["--agent", &bot.url(), "--barge-in", "bot"]);
    let speech = fresh_speech(
        &dir_of(&gw),
        "I am talking over you and you should keep going anyway.",
    );
    let media_port = free_media_port();
    let scen = scenario(
        "caller_speaks.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            // From the speech's start: 4.9 s of it, perhaps the 3 s stop timeout (Smart Turn
            // may call the robot voice's end incomplete), then the 5.2 s reply.
            ("@LISTEN_MS@", "15000"),
        ],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(45));
    assert!(ok, "sipp call failed:\n{log}\ngateway:\n{}", gw.stderr());
    wait_for(&bot, 0, Duration::from_secs(5), |c| {
        !c.events("stop").is_empty()
    });
    let conn = bot.connection(0).unwrap();
    let burst_end = conn.step_done(1).unwrap();
    let marks = conn.marks_named("whole");
    assert_eq!(marks.len(), 1);
    let after = (marks[0] - burst_end).as_secs_f64();
    let reply_s = seconds(reply.len());
    assert!(
        (after - reply_s).abs() <= 0.3,
        "bot mode: mark {after:.2} s after a {reply_s:.2} s reply"
    );
    assert!(conn
        .received
        .iter()
        .all(|(_, m)| !m["event"].as_str().unwrap().starts_with("ontime.")));
    assert_eq!(metric(&gw.metrics_text(), "ontime_barge_ins_total"), 0.0);
}

#[test]
fn junk_is_counted_clear_returns_marks_and_the_buffer_is_bounded() {
    if !tools() {
        return;
    }
    let reply = Arc::new(reply_ulaw());
    let one_second = Arc::new(reply[..8000].to_vec());
    let oversize = serde_json::json!({"event":"media","streamSid":"MZbot",
        "media":{"payload": base64::engine::general_purpose::STANDARD.encode(vec![0xFFu8; 4000])}})
    .to_string();
    assert!(oversize.len() > 4096);
    let bot = TestBot::start(vec![
        Step::WaitMedia(1),
        Step::Text("this is not json".into()),
        Step::Text(r#"{"event":"dance","streamSid":"MZbot"}"#.into()),
        Step::Text(r#"{"event":"media","streamSid":"MZbot","media":{}}"#.into()),
        Step::Binary(vec![1, 2, 3]),
        Step::Text(oversize),
        // 5.2 s in one burst against a 3 s limit: the oldest 2.2 s are dropped.
        Step::Media {
            ulaw: reply.clone(),
            chunk: 800,
        },
        Step::Mark("long".into()),
        Step::Sleep(Duration::from_secs(1)),
        Step::Clear,
        Step::Media {
            ulaw: one_second.clone(),
            chunk: 160,
        },
        Step::Mark("short".into()),
    ]);
    let gw = start_gateway(&[
        "--agent",
        &bot.url(),
        "--max-buffered-seconds",
        "3",
        "--ws-max-message-bytes",
        "4096",
    ]);
    let quiet = silence(&dir_of(&gw));
    let media_port = free_media_port();
    let scen = scenario(
        "caller_speaks.xml",
        &[
            ("@SPEECH@", quiet.to_str().unwrap()),
            ("@LISTEN_MS@", "6000"),
        ],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(30));
    assert!(ok, "sipp call failed:\n{log}\ngateway:\n{}", gw.stderr());
    wait_for(&bot, 0, Duration::from_secs(5), |c| {
        !c.events("stop").is_empty()
    });
    let conn = bot.connection(0).unwrap();

    // The clear returned the pending mark at once; the call went on and played the next one.
    let clear_at = conn.step_done(9).unwrap();
    let long = conn.marks_named("long");
    assert_eq!(long.len(), 1);
    let long_after = (long[0] - clear_at).as_secs_f64();
    assert!(
        long_after < 0.3,
        "mark returned {long_after:.2} s after clear"
    );
    let short_sent = conn.step_done(10).unwrap();
    let short = conn.marks_named("short");
    assert_eq!(short.len(), 1, "the call did not go on after the junk");
    let short_after = (short[0] - short_sent).as_secs_f64();
    assert!(
        (short_after - 1.0).abs() <= 0.3,
        "1 s reply marked after {short_after:.2} s"
    );

    let body = gw.metrics_text();
    let invalid = |r: &str| {
        metric(
            &body,
            &format!("ontime_ws_messages_invalid_total{{reason=\"{r}\"}}"),
        )
    };
    assert_eq!(invalid("malformed"), 2.0);
    assert_eq!(invalid("unknown_event"), 1.0);
    assert_eq!(invalid("binary"), 1.0);
    assert_eq!(invalid("oversize"), 1.0);
    assert_eq!(
        metric(&body, "ontime_ws_messages_received_total{event=\"clear\"}"),
        1.0
    );
    let dropped = metric(&body, "ontime_agent_audio_dropped_frames_total");
    let expected = (seconds(reply.len()) - 3.0) * 50.0;
    assert!(
        (dropped - expected).abs() <= 6.0,
        "dropped {dropped} frames, expected about {expected:.0}"
    );
    assert_eq!(disconnects(&body), 0.0);
}

#[test]
fn unreachable_bot_gets_503_after_ringing_within_the_connect_timeout() {
    if !require("sipp") {
        return;
    }
    // Accepts TCP and never answers the upgrade: only the connect timeout ends the wait.
    let silent = SilentListener::start();
    let gw = start_gateway(&["--agent", &silent.url(), "--ws-connect-timeout", "1s"]);
    // Every WebSocket-agent series is there at zero before any call: a dashboard sees 0, not an absent series.
    let before = gw.metrics_text();
    for series in [
        "ontime_ws_messages_sent_total{event=\"media\"}",
        "ontime_ws_messages_received_total{event=\"clear\"}",
        "ontime_ws_messages_invalid_total{reason=\"oversize\"}",
        "ontime_ws_send_queue_dropped_total",
        "ontime_ws_connect_seconds_count",
        "ontime_ws_connect_failures_total{reason=\"timeout\"}",
        "ontime_ws_disconnects_total{how=\"lost\"}",
        "ontime_ws_fallback_calls_total",
        "ontime_agent_buffered_audio_seconds_count",
        "ontime_agent_audio_dropped_frames_total",
        "ontime_calls_rejected_total{reason=\"agent_unavailable\"}",
    ] {
        assert_eq!(metric(&before, series), 0.0, "{series}");
    }
    assert!(
        before.contains("ontime_ws_connect_seconds_bucket"),
        "not a histogram"
    );
    let scen = scenario("caller_expects_ring_503.xml", &[]);
    let started = Instant::now();
    let (ok, log) = sipp(&gw, &scen, 1, free_media_port(), Duration::from_secs(20));
    let took = started.elapsed();
    assert!(ok, "503 flow failed:\n{log}\n{}", gw.stderr());
    assert!(took < Duration::from_secs(6), "503 took {took:?}");
    let body = gw.metrics_text();
    assert_eq!(
        metric(
            &body,
            "ontime_calls_rejected_total{reason=\"agent_unavailable\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &body,
            "ontime_ws_connect_failures_total{reason=\"timeout\"}"
        ),
        1.0
    );
    // calls_active is published once a second.
    let until = Instant::now() + Duration::from_secs(3);
    while gw.metric("ontime_calls_active") != Some(0.0) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(gw.metric("ontime_calls_active"), Some(0.0));
    // The gateway still takes calls (the SIP loop never waited).
    assert_eq!(http_get(gw.metrics, "/readyz").map(|r| r.0), Some(200));
}

#[test]
fn unreachable_bot_with_fallback_plays_the_message_and_hangs_up_with_a_reason() {
    if !require("sipp") || !require("tshark") {
        return;
    }
    // A port nobody listens on: connection refused.
    let closed = free_tcp_port();
    let gw = start_gateway(&[
        "--agent",
        &format!("ws://127.0.0.1:{closed}/media-stream"),
        "--agent-unreachable",
        "fallback",
    ]);
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    let scen = scenario(
        "caller_waits_bye_reason.xml",
        &[("@REASON@", "cause=41;text=\"agent unreachable\"")],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(30));
    let pcap = cap.finish();
    assert!(ok, "fallback flow failed:\n{log}\n{}", gw.stderr());
    let heard = rtp_rows(&pcap, media_port)
        .into_iter()
        .filter(|r| r.dst_port == media_port && !r.silent)
        .count();
    assert!(heard > 200, "caller heard {heard} packets of the fallback");
    let body = gw.metrics_text();
    assert_eq!(metric(&body, "ontime_ws_fallback_calls_total"), 1.0);
    assert_eq!(
        metric(&body, "ontime_ws_connect_failures_total{reason=\"error\"}"),
        1.0
    );
}

#[test]
fn a_goodbye_then_a_normal_close_is_heard_whole_before_the_bye() {
    if !tools() {
        return;
    }
    let reply = Arc::new(reply_ulaw());
    // The goodbye's frames with sound in them (its quiet edges count as silence on the wire too).
    let frames = reply.chunks(160).filter(|c| !ulaw_is_silent(c)).count();
    let bot = TestBot::start(vec![
        Step::Sleep(Duration::from_secs(1)),
        Step::Media {
            ulaw: reply.clone(),
            chunk: 640,
        },
        Step::CloseNormal,
    ]);
    let gw = start_gateway(&["--agent", &bot.url()]);
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    let scen = scenario(
        "caller_waits_bye_reason.xml",
        &[("@REASON@", "Q.850;cause=16;text=\"agent hung up\"")],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(30));
    let pcap = cap.finish();
    assert!(ok, "goodbye flow failed:\n{log}\n{}", gw.stderr());
    let heard = rtp_rows(&pcap, media_port)
        .iter()
        .filter(|r| r.dst_port == media_port && !r.silent)
        .count();
    // Every frame of the goodbye, before the BYE.
    assert_eq!(heard, frames, "goodbye frames heard");
    let conn = bot.connection(0).unwrap();
    assert_eq!(
        conn.close_code,
        Some(Some(1000)),
        "the gateway's close reply"
    );
    assert_eq!(
        metric(
            &gw.metrics_text(),
            "ontime_ws_disconnects_total{how=\"normal\"}"
        ),
        1.0
    );
}

#[test]
fn bot_that_goes_away_mid_call_gets_the_caller_a_bye_with_a_reason() {
    if !require("sipp") {
        return;
    }
    let bot = TestBot::start(vec![Step::Sleep(Duration::from_secs(1)), Step::Close]);
    let gw = start_gateway(&["--agent", &bot.url()]);
    let scen = scenario(
        "caller_waits_bye_reason.xml",
        &[("@REASON@", "Q.850;cause=41;text=\"agent disconnected\"")],
    );
    let (ok, log) = sipp(&gw, &scen, 1, free_media_port(), Duration::from_secs(20));
    assert!(ok, "disconnect flow failed:\n{log}\n{}", gw.stderr());
    let conn = bot.connection(0).unwrap();
    assert_eq!(conn.events("connected").len(), 1);
    assert_eq!(conn.events("start").len(), 1);
    let body = gw.metrics_text();
    assert_eq!(
        metric(&body, "ontime_ws_disconnects_total{how=\"abnormal\"}"),
        1.0
    );
}

#[test]
fn wss_bot_is_reached_with_its_ca_and_refused_without_it() {
    if !tools() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ontime-wss-{}", std::process::id()));
    let pki = common::pki::test_pki(&dir);
    let reply = Arc::new(reply_ulaw());
    let bot = TestBot::start_tls(
        vec![
            Step::WaitMedia(1),
            Step::Media {
                ulaw: Arc::new(reply[..8000].to_vec()),
                chunk: 800,
            },
            Step::Mark("over-tls".into()),
        ],
        &pki.cert,
        &pki.key,
    );
    let url = format!("wss://localhost:{}/media-stream", bot.addr.port());

    // Trusted through --ws-ca-file: a normal call, the mark comes back after 1 s of audio.
    let gw = start_gateway(&["--agent", &url, "--ws-ca-file", pki.ca.to_str().unwrap()]);
    let quiet = silence(&dir_of(&gw));
    let scen = scenario(
        "caller_speaks.xml",
        &[
            ("@SPEECH@", quiet.to_str().unwrap()),
            ("@LISTEN_MS@", "4000"),
        ],
    );
    let (ok, log) = sipp(&gw, &scen, 1, free_media_port(), Duration::from_secs(20));
    assert!(ok, "wss call failed:\n{log}\n{}", gw.stderr());
    wait_for(&bot, 0, Duration::from_secs(5), |c| {
        !c.events("stop").is_empty()
    });
    let conn = bot.connection(0).expect("no TLS connection");
    assert_eq!(conn.events("start").len(), 1);
    let sent = conn.step_done(1).unwrap();
    let marks = conn.marks_named("over-tls");
    assert_eq!(marks.len(), 1);
    let after = (marks[0] - sent).as_secs_f64();
    assert!(
        (after - 1.0).abs() <= 0.3,
        "mark {after:.2} s after 1 s of audio"
    );
    drop(gw);

    // Without the CA the certificate is not trusted: no connection, 503.
    let gw = start_gateway(&["--agent", &url]);
    let scen = scenario("caller_expects_ring_503.xml", &[]);
    let (ok, log) = sipp(&gw, &scen, 1, free_media_port(), Duration::from_secs(20));
    assert!(ok, "untrusted wss did not get 503:\n{log}\n{}", gw.stderr());
    assert_eq!(
        metric(
            &gw.metrics_text(),
            "ontime_ws_connect_failures_total{reason=\"error\"}"
        ),
        1.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The caller's speech: each part said by espeak-ng (SSML allowed), followed by its seconds of
/// digital silence, joined (8 kHz µ-law).
fn spoken(dir: &Path, parts: &[(&str, f64)]) -> PathBuf {
    let mut pieces = Vec::new();
    for (i, (text, pause)) in parts.iter().enumerate() {
        let raw = dir.join(format!("part{i}.wav"));
        let ok = Command::new("espeak-ng")
            .args(["-m", "-v", "en-us", "-s", "170", "-w"])
            .arg(&raw)
            .arg(text)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "espeak-ng could not speak");
        // Resampled to 8 kHz mono, the pause after it as padding.
        let piece = dir.join(format!("part{i}_8k.wav"));
        let ok = Command::new("sox")
            .arg(&raw)
            .args(["-r", "8000", "-c", "1"])
            .arg(&piece)
            .args(["pad", "0", &pause.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "sox could not resample");
        pieces.push(piece);
    }
    let out = dir.join("spoken.ulaw.wav");
    let ok = Command::new("sox")
        .args(&pieces)
        .args(["-e", "mu-law"])
        .arg(&out)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "sox could not join the parts");
    out
}

/// A sentence Smart Turn ends in its pause after "and", sure of it (0.98 on the same audio
/// offline, 0.94 in the gateway): the first part and the rest.
const PAUSED_FIRST: &str = "My parcel never arrived and";
const PAUSED_REST: &str = "I have been waiting since Monday.";

fn transcript(text: &str) -> Step {
    Step::Text(
        serde_json::json!({"event": "ontime.transcript", "streamSid": "MZbot",
            "transcript": {"text": text, "final": true}})
        .to_string(),
    )
}

/// Smart Turn ends this caller's turn in their pause after "and"; the bot's transcript says the
/// sentence is not over, so its reply is held, and dropped unheard when the caller goes on. The
/// second reply is heard whole.
#[test]
fn a_transcript_that_stops_on_and_holds_the_reply_until_the_caller_goes_on() {
    if !tools() || !require("espeak-ng") {
        return;
    }
    let reply = Arc::new(reply_ulaw());
    let bot = TestBot::start(vec![
        Step::WaitEvent("ontime.speech_stopped", 1),
        transcript(PAUSED_FIRST),
        Step::WaitEvent("ontime.turn_ended", 1),
        Step::Media {
            ulaw: reply.clone(),
            chunk: 8000,
        },
        Step::Mark("first".into()),
        Step::WaitEvent("ontime.turn_ended", 2),
        transcript("My parcel never arrived and I have been waiting since Monday."),
        Step::Media {
            ulaw: reply.clone(),
            chunk: 8000,
        },
        Step::Mark("second".into()),
    ]);
    let gw = start_gateway(&["--agent", &bot.url(), "--ws-ontime-events", "true"]);
    let speech = spoken(&dir_of(&gw), &[(PAUSED_FIRST, 1.0), (PAUSED_REST, 0.0)]);
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    let scen = scenario(
        "caller_speaks.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            // From the speech's start: 4.9 s of it, perhaps the 3 s stop timeout (Smart Turn
            // may call the robot voice's end incomplete), then the 5.2 s reply.
            ("@LISTEN_MS@", "15000"),
        ],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(45));
    let pcap = cap.finish();
    assert!(ok, "sipp call failed:\n{log}\ngateway:\n{}", gw.stderr());
    wait_for(&bot, 0, Duration::from_secs(5), |c| {
        !c.events("stop").is_empty()
    });
    let conn = bot.connection(0).unwrap();
    let turns = conn.events("ontime.turn_ended");
    assert_eq!(turns.len(), 2, "gateway:\n{}", gw.stderr());
    let resumed = conn.events("ontime.turn_resumed");
    assert_eq!(resumed.len(), 1, "gateway:\n{}", gw.stderr());
    // The whole first reply was dropped unheard; its mark came back with the event.
    let reply_ms = (reply.len() * 1000 / 8000) as u64;
    assert_eq!(
        resumed[0].1["turnResumed"]["droppedMs"].as_u64(),
        Some(reply_ms)
    );
    assert_eq!(conn.marks_named("first").len(), 1);
    assert_eq!(conn.marks_named("second").len(), 1);
    // The caller heard the second reply, and only it.
    let voiced = |frames: &[u8]| frames.chunks(160).filter(|f| !ulaw_is_silent(f)).count();
    let heard = rtp_rows(&pcap, media_port)
        .into_iter()
        .filter(|r| r.dst_port == media_port && !r.silent)
        .count();
    assert_eq!(heard, voiced(&reply));
    let body = gw.metrics_text();
    assert_eq!(
        metric(&body, "ontime_replies_held_total{reason=\"words\"}"),
        1.0
    );
    assert_eq!(metric(&body, "ontime_held_replies_dropped_total"), 1.0);
    assert_eq!(metric(&body, "ontime_turns_resumed_total"), 1.0);
    assert_eq!(
        metric(&body, "ontime_transcripts_total{cue=\"incomplete\"}"),
        1.0
    );
    assert_eq!(
        metric(&body, "ontime_transcripts_total{cue=\"complete\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &body,
            "ontime_ws_messages_received_total{event=\"transcript\"}"
        ),
        2.0
    );
}

/// No transcript: the caller pauses mid-sentence once, over the reply's start (a barge-in the
/// hold-back learns from), and the next time their reply is held for that pause and dropped
/// unheard when they go on.
#[test]
fn a_caller_who_paused_once_has_the_next_reply_held_and_dropped_when_they_go_on() {
    if !tools() || !require("espeak-ng") {
        return;
    }
    let reply = Arc::new(reply_ulaw());
    // A bot that replies at once to every turn end (at most 8).
    let mut script = Vec::new();
    for turn in 1..=8 {
        script.push(Step::WaitEvent("ontime.turn_ended", turn));
        script.push(Step::Media {
            ulaw: reply.clone(),
            chunk: 8000,
        });
        script.push(Step::Mark(format!("r{turn}")));
    }
    let bot = TestBot::start(script);
    let gw = start_gateway(&["--agent", &bot.url(), "--ws-ontime-events", "true"]);
    // The same sentence twice, 10 s apart (room for the stop timeout and the 5.2 s reply),
    // said in one go with a 1 s break after "and": the voice stays up in the break (−1.7
    // semitones, against −4.3 at the sentence's end), so the pitch cue leaves the hold alone.
    // (Said as two utterances, the first ends falling, −3.7: a statement's end.)
    let sentence = format!("{PAUSED_FIRST} <break time=\"1000ms\"/> {PAUSED_REST}");
    let speech = spoken(&dir_of(&gw), &[(&sentence, 10.0), (&sentence, 0.0)]);
    let media_port = free_media_port();
    let scen = scenario(
        "caller_speaks.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "28000"),
        ],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(60));
    assert!(ok, "sipp call failed:\n{log}\ngateway:\n{}", gw.stderr());
    wait_for(&bot, 0, Duration::from_secs(5), |c| {
        !c.events("stop").is_empty()
    });
    let conn = bot.connection(0).unwrap();
    let start = conn.received[0].0;
    let second_sentence = |t: Instant| t - start > Duration::from_secs(10);
    // The first sentence's pause ended a turn whose reply the caller spoke over: learned.
    let first_end = conn.events("ontime.turn_ended")[0].0;
    let barge_ins = conn.events("ontime.barge_in");
    assert!(!second_sentence(first_end));
    assert!(
        !barge_ins.is_empty() && !second_sentence(barge_ins[0].0),
        "no barge-in on the first pause; gateway:\n{}",
        gw.stdout()
    );
    // The second sentence's pause: the reply held for that pause and dropped whole when the
    // caller went on. (What happens in the first sentence after the barge-in depends on how
    // fast the bot's next reply arrives, so it is not counted.)
    let reply_ms = (reply.len() * 1000 / 8000) as u64;
    let dropped_later: Vec<_> = conn
        .events("ontime.turn_resumed")
        .into_iter()
        .filter(|(t, _)| second_sentence(*t))
        .map(|(_, v)| v["turnResumed"]["droppedMs"].as_u64())
        .collect();
    assert_eq!(
        dropped_later,
        vec![Some(reply_ms)],
        "gateway:\n{}",
        gw.stdout()
    );
    let body = gw.metrics_text();
    assert_eq!(
        metric(&body, "ontime_replies_held_total{reason=\"habit\"}"),
        1.0
    );
    assert_eq!(
        metric(&body, "ontime_reply_holds_lifted_total{cue=\"fall\"}"),
        0.0
    );
}
