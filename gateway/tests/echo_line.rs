//! Barge-in on a line that echoes (issue #23): on PSTN lines the bot's own voice comes back in the
//! caller's audio from the 2-wire hybrid, 20-300 ms later and 6-25 dB down, and local barge-in
//! must not take that echo for the caller. A real UDP caller (`common::echo_line`) returns the
//! gateway's reply through a simulated echo path with line noise, and says what it heard.
//!
//! The asserted expectation is the gateway with its echo canceller (on by default). The gateway's
//! flags can be extended through `ONTIME_ECHO_TEST_GW_ARGS` (e.g. `--echo-canceller false`, to
//! measure the line without it); `make test` does not set it. `ONTIME_ECHO_TEST_LOG_DIR` keeps
//! each call's gateway log. The control on a line without echo
//! (`a_whole_reply_on_a_line_without_echo_is_heard_whole`) holds on any gateway; (b), (c) and (d)
//! were checked to hold on such a line too.

#[path = "common/bot.rs"]
mod bot;
mod common;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bot::{reply_ulaw, Step, TestBot};
use common::echo_line::{
    caller_utterance, cdr_end, stub_reply_frames, voiced_cut, Cue, EchoCall, EchoLine,
};
use common::pipecat::wav_speech_frames;
use common::*;
use serde_json::Value;

/// Extra gateway flags for a before/after comparison (whitespace-separated).
const GW_ARGS_ENV: &str = "ONTIME_ECHO_TEST_GW_ARGS";

/// A directory to write each call's whole gateway log to, as `<Call-ID>.log`: where the echo
/// path was placed and when, to read a rare failure against the calls that passed.
const LOG_DIR_ENV: &str = "ONTIME_ECHO_TEST_LOG_DIR";

/// The echo under the interruptions and the backchannel of (b) and (c): delay (ms), ERL (dB), the
/// issue's line.
const ECHO: (u32, f32) = (150, 12.0);

/// Where the caller starts talking over a reply: well inside the stub's 5.2 s sentence.
const INTO_REPLY: Duration = Duration::from_millis(1500);

static ONE_CALL_AT_A_TIME: Mutex<()> = Mutex::new(());

/// One test at a time: each starts a gateway running the models, on a machine of two cores, and
/// a loaded machine would move the reply's cut against the caller's clock.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_CALL_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A gateway with the stub agent, `extra` flags and those of [`GW_ARGS_ENV`].
fn gateway(extra: &[&str]) -> Gateway {
    let env = std::env::var(GW_ARGS_ENV).unwrap_or_default();
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(env.split_whitespace());
    if !env.trim().is_empty() {
        eprintln!("gateway flags from {GW_ARGS_ENV}: {env}");
    }
    start_gateway(&args)
}

/// The caller's first turn: a whole question, so Smart Turn ends the turn at once.
fn question() -> Arc<[i16]> {
    caller_utterance(2)
}

/// A finished call: what the caller heard and the gateway's record and counters.
struct Done {
    call: EchoCall,
    cdr: Value,
    metrics: String,
    /// The gateway's log lines about barge-ins (each with what the canceller knew then).
    barge_in_log: String,
}

impl Done {
    fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics, series).unwrap_or(-1.0)
    }

    /// An exact count, with the call's facts when it is off.
    fn expect<T: PartialEq + std::fmt::Debug>(&self, what: &str, got: T, want: T) {
        assert_eq!(got, want, "{what}: {}", self.context());
    }

    /// What to print when a check fails.
    fn context(&self) -> String {
        let voiced = self.call.voiced();
        format!(
            "onsets {:?}, ends {:?}; {} packets received, {} voiced ({:?} .. {:?}); {} sent, {} late; CDR {}\ngateway: {}",
            self.call.onsets,
            self.call.ends,
            self.call.received.len(),
            voiced.len(),
            voiced.first(),
            voiced.last(),
            self.call.sent,
            self.call.late_sends,
            self.cdr,
            self.barge_in_log
        )
    }
}

/// Place the call on `gw`, wait for its end record, scrape the metrics.
fn run(gw: &Gateway, line: &EchoLine) -> Done {
    let call = line
        .run(gw.sip)
        .unwrap_or_else(|e| panic!("call refused: {e}"));
    assert!(
        call.bye
            .as_deref()
            .is_some_and(|r| r.starts_with("SIP/2.0 200")),
        "BYE answered 200: {:?}",
        call.bye
    );
    let cdr = cdr_end(gw, &call.ids.call_id, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no end record for {}:\n{}", call.ids.call_id, gw.stdout()));
    let metrics = gw.metrics_text();
    if let Some(dir) = std::env::var_os(LOG_DIR_ENV) {
        let path = std::path::Path::new(&dir).join(format!("{}.log", call.ids.call_id));
        if let Err(e) = std::fs::write(&path, gw.stdout()) {
            eprintln!("{LOG_DIR_ENV}: cannot write {}: {e}", path.display());
        }
    }
    let barge_in_log = gw
        .stdout()
        .lines()
        .filter(|l| l.contains("barge-in"))
        .collect::<Vec<_>>()
        .join("\n");
    Done {
        call,
        cdr,
        metrics,
        barge_in_log,
    }
}

/// The stub's reply: how many of its frames are voiced.
fn reply_voiced_frames() -> usize {
    wav_speech_frames(&workspace().join("gateway/assets/stub_reply.wav"), None)
}

/// One caller turn on `line`, then the whole reply over its echo: no barge-in, one turn, and
/// every voiced frame of the reply reached the caller. `what` names the line in the output.
fn whole_reply_heard(line: &EchoLine, what: &str) {
    let _one = one_at_a_time();
    let gw = gateway(&[]);
    let done = run(&gw, line);
    let barge_ins = done.metric("ontime_barge_ins_total");
    let turns = done.metric("ontime_turns_total");
    let voiced = done.call.voiced().len();
    eprintln!(
        "{what}: {barge_ins} barge-ins, {turns} turns, {voiced} voiced packets heard (the reply has {}); CDR {}",
        reply_voiced_frames(),
        done.cdr
    );
    done.expect("barge-ins on the echo", barge_ins, 0.0);
    done.expect("turns", turns, 1.0);
    done.expect("reply heard whole", voiced, reply_voiced_frames());
}

/// (a) The whole reply on a line echoing it `delay_ms` later `erl_db` down.
fn whole_reply_over_echo(delay_ms: u32, erl_db: f32) {
    let line = EchoLine::new(delay_ms, erl_db).say(Cue::At(Duration::from_millis(500)), question());
    whole_reply_heard(&line, &format!("echo {delay_ms} ms, {erl_db} dB"));
}

/// (e) The whole reply on the [`ECHO`] line while the caller's packets stall for `hold` 2 s
/// into it, then arrive back to back: the gateway's jitter buffer conceals, then grows. Placed
/// by playout, the caller's audio moved under the converged filter (by up to 100 ms), and
/// the concealment's digital silence was taken for the line's noise floor.
#[test]
fn a_stall_of_the_callers_packets_mid_reply_does_not_barge_in() {
    for hold in [60, 120, 250] {
        let mut line =
            EchoLine::new(ECHO.0, ECHO.1).say(Cue::At(Duration::from_millis(500)), question());
        line.stall = Some((Duration::from_secs(2), Duration::from_millis(hold)));
        whole_reply_heard(&line, &format!("stall of {hold} ms"));
    }
}

/// The control: the same call on a line with its noise but no echo (an infinite return loss)
/// passes with or without a canceller, so a failure of (a) is the echo's.
#[test]
fn a_whole_reply_on_a_line_without_echo_is_heard_whole() {
    whole_reply_over_echo(0, f32::INFINITY);
}

#[test]
fn a_whole_reply_on_a_150ms_12db_echo_is_not_barged_in() {
    whole_reply_over_echo(150, 12.0);
}

#[test]
fn a_whole_reply_on_a_40ms_6db_echo_is_not_barged_in() {
    whole_reply_over_echo(40, 6.0);
}

#[test]
fn a_whole_reply_on_a_300ms_20db_echo_is_not_barged_in() {
    whole_reply_over_echo(300, 20.0);
}

/// The last voiced packet of the reply the caller cut with utterance 1: after the onset, before
/// that utterance ended (the answer to it cannot start earlier: the VAD needs its stop time
/// first), so a later packet would belong to the next reply. None when no reply was playing in
/// the half second before the onset (the echo had cut it already).
fn last_of_cut_reply(call: &EchoCall) -> Option<Duration> {
    let (onset, end) = (call.onset(1), call.end(1));
    call.voiced()
        .into_iter()
        .filter(|t| *t < end)
        .max()
        .filter(|t| *t > onset.saturating_sub(Duration::from_millis(500)))
}

/// How long after the interruption's onset the reply it cut went quiet, in ms (None: nothing was
/// playing at the onset).
fn cut_after_onset_ms(call: &EchoCall) -> Option<u128> {
    last_of_cut_reply(call).map(|last| last.saturating_sub(call.onset(1)).as_millis())
}

/// Voiced packets of the first reply the caller heard (the answer to its first utterance): the
/// reply's frames counted from its first packet, placed by its first voiced one (0: no reply).
fn first_reply_voiced(call: &EchoCall) -> usize {
    let (frames, first_voiced) = stub_reply_frames();
    call.first_voiced_after(call.end(0)).map_or(0, |onset| {
        call.voiced_in_seq_span(onset.seq.wrapping_sub(first_voiced as u16), frames)
    })
}

/// A call on the [`ECHO`] line to a gateway with `gw_args`: the caller's question, then `over`
/// 1.5 s into the reply to it.
fn talk_over(gw_args: &[&str], over: Arc<[i16]>) -> Done {
    talk_over_for(gw_args, over, EchoLine::new(ECHO.0, ECHO.1).max_duration)
}

/// [`talk_over`], the caller hanging up at `max_duration` at the latest.
fn talk_over_for(gw_args: &[&str], over: Arc<[i16]>, max_duration: Duration) -> Done {
    let gw = gateway(gw_args);
    let mut line = EchoLine::new(ECHO.0, ECHO.1)
        .say(Cue::At(Duration::from_millis(500)), question())
        .say(Cue::IntoReply(INTO_REPLY), over);
    line.max_duration = max_duration;
    run(&gw, &line)
}

/// Calls the interruption bound of (b) is taken over (its median). Five, not three: single
/// calls scatter across the bound (248-340 ms in 18 calls on 2026-12-06, before and after the
/// quiet hand-off alike), and a median of three went over it once in a loaded CI run (280, 305,
/// 321 ms).
const CUT_CALLS: usize = 5;

/// (b) The caller asks again 1.5 s into the reply, over its echo (150 ms, 12 dB): the reply
/// stops within 300 ms (15 packets) of the onset, measured on the caller's own clock, in the
/// median of five calls (single calls measured 256-315 ms on 2026-12-02: the VAD's start
/// window and a tick or two of the sender's ring sit close to the bound); on every call one
/// barge-in, two turns, and the answer to the interruption is heard whole.
#[test]
fn an_interruption_over_the_echo_cuts_the_reply_within_15_packets() {
    let _one = one_at_a_time();
    let mut cuts = Vec::new();
    for _ in 0..CUT_CALLS {
        let done = talk_over(&[], question());
        let call = &done.call;
        let onset = call.onset(1);
        let cut_ms = cut_after_onset_ms(call);
        let barge_ins = done.metric("ontime_barge_ins_total");
        let turns = done.metric("ontime_turns_total");
        // The answer to the interruption: every voiced packet after it ended.
        let after = call.voiced().iter().filter(|t| **t > call.end(1)).count();
        eprintln!(
            "interruption at {onset:?}: reply's last voiced packet {cut_ms:?} ms later; {barge_ins} barge-ins, {turns} turns, {after} voiced packets after it"
        );
        let Some(ms) = cut_ms else {
            panic!("the reply was not cut: {}", done.context());
        };
        eprintln!("CDR {}", done.cdr);
        cuts.push(ms);
        done.expect("barge-ins", barge_ins, 1.0);
        done.expect("turns", turns, 2.0);
        done.expect("the answer heard whole", after, reply_voiced_frames());
    }
    cuts.sort();
    let median = cuts[CUT_CALLS / 2];
    assert!(median <= 300, "reply cut {cuts:?} ms after the onset");
}

/// The echo gate's hangover, in ms: the VAD may hear it as the caller's speech going on.
const HANGOVER_MS: u128 = ontime_echo::CALLER_HANGOVER_TIME.as_millis();

/// The backchannel window of (c), as `--barge-in-min-speech` takes it.
const MIN_SPEECH: &str = "400ms";

/// (c) With a 400 ms backchannel window, a 300 ms "mm-hmm" over the reply (on a 150 ms, 12 dB
/// echo) leaves it playing: no barge-in, one backchannel, and the reply heard whole. (The
/// backchannel is a turn of its own once it stops, answered after the first reply: queued right
/// behind it, the second reply's frames are cut at other sample offsets, so only the first
/// reply's frames are counted against the WAV's.)
#[test]
fn a_300ms_backchannel_over_the_echo_leaves_the_reply_playing() {
    let _one = one_at_a_time();
    let mm_hmm = voiced_cut(&caller_utterance(3), Duration::from_millis(300));
    // The caller hangs up once the first reply (5.2 s from about 3.7 s) has played: the
    // backchannel is a turn the stub answers, and that answer's own echo is (a) and (b)'s
    // business, not this test's.
    let done = talk_over_for(
        &["--barge-in-min-speech", MIN_SPEECH],
        mm_hmm,
        Duration::from_millis(10_500),
    );
    let call = &done.call;
    let barge_ins = done.metric("ontime_barge_ins_total");
    let backchannels = done.metric("ontime_backchannels_total");
    let turns = done.metric("ontime_turns_total");
    let first_reply = first_reply_voiced(call);
    let voiced = call.voiced().len();
    eprintln!(
        "backchannel at {:?}: {barge_ins} barge-ins, {backchannels} backchannels, {turns} turns; first reply {first_reply} voiced packets, {voiced} in all (a reply has {})",
        call.onset(1),
        reply_voiced_frames()
    );
    done.expect("barge-ins", barge_ins, 0.0);
    done.expect("backchannels", backchannels, 1.0);
    done.expect("first reply whole", first_reply, reply_voiced_frames());
}

/// (c) With the same window, a 1 s interruption cuts the reply: one barge-in, decided once the
/// speech has lasted the window and the VAD's stop time (200 ms) and the echo gate's hangover
/// (120 ms, which the VAD may hear as speech going on) have passed without a stop, so the
/// reply ends within window + 200 ms + 120 ms + the 300 ms of (b) of the onset.
#[test]
fn a_1s_interruption_over_the_echo_cuts_the_reply_past_the_backchannel_window() {
    let _one = one_at_a_time();
    let interruption = voiced_cut(&caller_utterance(4), Duration::from_secs(1));
    let done = talk_over(&["--barge-in-min-speech", MIN_SPEECH], interruption);
    let call = &done.call;
    let onset = call.onset(1);
    let cut_ms = cut_after_onset_ms(call);
    let barge_ins = done.metric("ontime_barge_ins_total");
    let backchannels = done.metric("ontime_backchannels_total");
    eprintln!(
        "1 s interruption at {onset:?}: reply's last voiced packet {cut_ms:?} ms later; {barge_ins} barge-ins, {backchannels} backchannels"
    );
    assert!(
        cut_ms.is_some_and(|ms| ms <= 400 + 200 + HANGOVER_MS + 300),
        "reply cut {cut_ms:?} ms after the onset: {}",
        done.context()
    );
    done.expect("barge-ins", barge_ins, 1.0);
    done.expect("backchannels", backchannels, 0.0);
}

/// How far `heardMs` may be from what the caller heard, in the median of [`HEARD_CALLS`]
/// calls (the issue's bound). Single calls were 10-18 ms under it in 10 of 12 runs on
/// 2026-12-02; in the others the gate held back more of the speech's start (up to 300 ms of it,
/// quieter than the echo early in the call's first reply) than the walk back to the onset
/// crosses, and `heardMs` came that much late, or echo alone barged in.
const HEARD_MS_TOLERANCE: u64 = 40;
/// Calls the median of `heardMs` is taken over.
const HEARD_CALLS: usize = 3;

/// (d) A bot (WebSocket agent) plays the stub's sentence as soon as the call starts; the caller
/// asks its question 1.5 s into it over the [`ECHO`] line. The one `ontime.barge_in` the bot is
/// told of on each call says it was heard for as long as the caller heard it: from the reply's
/// first packet to the caller's onset, on the caller's clock (the median of three calls).
#[test]
fn a_barge_in_over_the_echo_tells_the_bot_how_much_the_caller_heard() {
    let _one = one_at_a_time();
    let mut errors: Vec<i64> = Vec::new();
    let mut lines = String::new();
    for _ in 0..HEARD_CALLS {
        let bot = TestBot::start(vec![
            Step::WaitMedia(1),
            Step::Media {
                ulaw: Arc::new(reply_ulaw()),
                chunk: 8000,
            },
            Step::Mark("reply".into()),
        ]);
        let gw = gateway(&["--agent", &bot.url(), "--ws-ontime-events", "true"]);
        let mut line = EchoLine::new(ECHO.0, ECHO.1).say(Cue::IntoReply(INTO_REPLY), question());
        // Nothing answers the question: hang up once it was asked and its turn taken.
        line.max_duration = Duration::from_secs(10);
        let done = run(&gw, &line);
        let call = &done.call;
        let until = Instant::now() + Duration::from_secs(5);
        while bot
            .connection(0)
            .is_none_or(|c| c.events("stop").is_empty())
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let conn = bot.connection(0).expect("the gateway connected to the bot");
        let heard_ms: Vec<u64> = conn
            .events("ontime.barge_in")
            .iter()
            .filter_map(|(_, v)| v["bargeIn"]["heardMs"].as_u64())
            .collect();
        let (_, first_voiced) = stub_reply_frames();
        let reply_onset = call
            .first_voiced_after(Duration::ZERO)
            .unwrap_or_else(|| panic!("no reply: {}", done.context()));
        let reply_start = reply_onset
            .at
            .saturating_sub(Duration::from_millis(20) * first_voiced as u32);
        let expected = call.onset(0).saturating_sub(reply_start).as_millis() as i64;
        let barge_ins = done.metric("ontime_barge_ins_total");
        lines += &format!(
            "barge-in {expected} ms into the reply by the caller's clock: the bot was told {heard_ms:?} ms; {barge_ins} barge-ins\n"
        );
        done.expect("ontime.barge_in events", heard_ms.len(), 1);
        errors.push(heard_ms[0] as i64 - expected);
    }
    errors.sort();
    let median = errors[HEARD_CALLS / 2];
    eprintln!("{lines}heardMs less what was heard (ms): {errors:?}, median {median}");
    assert!(
        median.unsigned_abs() <= HEARD_MS_TOLERANCE,
        "median heardMs error {median} ms over {HEARD_CALLS} calls:\n{lines}"
    );
}

/// Delays (ms) and echo return losses (dB) of the sweep's grid.
const SWEEP_DELAYS_MS: [u32; 5] = [20, 80, 150, 300, 500];
const SWEEP_ERL_DB: [f32; 3] = [6.0, 12.0, 20.0];
/// Calls per grid cell, placed at once on one gateway.
const SWEEP_CALLS: usize = 5;
/// Each sweep call hangs up this long after it began: its turn, the turn latency, the whole
/// reply (5.2 s) and a turn the gateway may take on the echo of the reply's tail (3.2 s).
const SWEEP_CALL: Duration = Duration::from_secs(17);

/// False barge-ins on echo alone, for the docs: on a grid of echo delay × ERL (line noise at
/// -60 dBFS), `SWEEP_CALLS` calls per cell each say one question and then only listen for the
/// rest of `SWEEP_CALL`, so every barge-in is on the gateway's own echo. Prints false barge-ins
/// per 100 replies (a reply is a turn the stub answered) per cell. Before and after:
///
/// ```text
/// ONTIME_ECHO_TEST_GW_ARGS="--echo-canceller false" cargo test -p ontime-gateway --test echo_line -- --ignored --nocapture echo_sweep
/// cargo test -p ontime-gateway --test echo_line -- --ignored --nocapture echo_sweep
/// ```
#[test]
#[ignore = "a measurement for the docs (about 5 minutes), not a check"]
fn echo_sweep() {
    let _one = one_at_a_time();
    let gw = gateway(&[]);
    let flags = std::env::var(GW_ARGS_ENV).unwrap_or_default();
    let mut rows = Vec::new();
    for &delay in &SWEEP_DELAYS_MS {
        for &erl in &SWEEP_ERL_DB {
            let calls: Vec<Done> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..SWEEP_CALLS)
                    .map(|i| {
                        let gw = &gw;
                        s.spawn(move || {
                            let mut line = EchoLine::new(delay, erl)
                                .say(Cue::At(Duration::from_millis(500)), question());
                            line.seed ^= (i as u64 + 1) << 40;
                            line.quiet = SWEEP_CALL;
                            line.max_duration = SWEEP_CALL;
                            run(gw, &line)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let sum =
                |key: &str| -> u64 { calls.iter().map(|d| d.cdr[key].as_u64().unwrap_or(0)).sum() };
            let (barge_ins, turns) = (sum("barge_ins"), sum("turns"));
            let late: usize = calls.iter().map(|d| d.call.late_sends).sum();
            let whole = calls
                .iter()
                .filter(|d| first_reply_voiced(&d.call) == reply_voiced_frames())
                .count();
            let per_100 = if turns == 0 {
                f64::NAN
            } else {
                100.0 * barge_ins as f64 / turns as f64
            };
            eprintln!("{delay} ms, {erl} dB: {barge_ins} barge-ins over {turns} replies, {whole} first replies whole ({late} late caller packets)");
            rows.push((delay, erl, barge_ins, turns, per_100, whole));
        }
    }
    println!("\nfalse barge-ins on echo alone, {SWEEP_CALLS} calls per cell, line noise -60 dBFS, gateway flags: {:?}", flags.trim());
    println!(
        "| delay | ERL | calls | replies | barge-ins | per 100 replies | first reply heard whole |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (delay, erl, barge_ins, turns, per_100, whole) in rows {
        println!(
            "| {delay} ms | {erl} dB | {SWEEP_CALLS} | {turns} | {barge_ins} | {per_100:.0} | {whole} of {SWEEP_CALLS} |"
        );
    }
}
