//! Harness correctness: `ontime-load`'s runner against a small in-test gateway (a UAS built from
//! `ontime-sip` that answers calls and replies to each caller turn over real loopback UDP) that
//! is well-behaved, gets slower with more calls, or sends its reply with stalls like a late
//! sender. The harness must call the first ok and the others degraded, for the right reason —
//! a harness that can only say "ok" is worthless. The fake answers SRTP offers in kind (like the
//! gateway's `--srtp optional`), so the callers' SRTP is checked end to end too: what they send
//! must authenticate, and a forged packet they receive must be counted. With an admission limit
//! it refuses calls beyond it with 503 + Retry-After, like the gateway's `--max-calls`, and
//! publishes its headroom on a metrics page: the harness must count those calls refused, not
//! failed, and judge the step over the calls admitted.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use ontime_loadgen::audio::{self, Ear, G722Speech};
use ontime_loadgen::caller::{CallerCodec, CallerSetup, Media};
use ontime_loadgen::http::MetricsUrl;
use ontime_loadgen::run::{self, GatewayView, RunPlan, RunResults, Windows};
use ontime_loadgen::sip::SipClient;
use ontime_rtp::{g722, Codec, Packetizer, FRAME, FRAME_BYTES};
use ontime_sender::{EngineConfig, Sender, SenderConfig};
use ontime_sip::sdp::{self, LocalMedia};
use ontime_sip::{Config, Endpoint, Event, SrtpPolicy};
use ontime_srtp::{SdesKeys, SrtpContext};

fn fixture(name: &str) -> Arc<[u8]> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/callers");
    audio::load_ulaw_wav(&dir.join(name)).unwrap().ulaw
}

/// How the fake gateway misbehaves.
#[derive(Clone)]
struct Behaviour {
    reply: Arc<[u8]>,
    /// Delay from the caller's end of speech (after 300 ms of silence) to the reply, per call
    /// active beyond the first: `base + per_extra_call × (active − 1)`.
    base_delay: Duration,
    per_extra_call: Duration,
    /// Every this many reply frames, stop sending for `stall`, then send what is due at once.
    stall_every: Option<(u32, Duration)>,
    /// SRTP calls: flip a byte of the authentication tag of the first this many reply packets
    /// of each call, as a forger would.
    forge_first: u64,
    /// Answer at most this many calls at once; refuse the rest with 503 + Retry-After and
    /// serve `ontime_admission_headroom_calls` (the limit minus the calls up) on /metrics.
    admit_limit: Option<usize>,
    /// The codec the fake speaks (it answers an offer with the first of PCMU, PCMA, G722 in it,
    /// like the gateway's default, but sends only this one): PCMU, or G.722 encoded from the
    /// after-silence state, as the gateway does after a run of line silence.
    codec: Codec,
}

impl Behaviour {
    fn prompt(reply: &str) -> Behaviour {
        Behaviour {
            reply: fixture(reply),
            base_delay: Duration::from_millis(100),
            per_extra_call: Duration::ZERO,
            stall_every: None,
            forge_first: 0,
            admit_limit: None,
            codec: Codec::Pcmu,
        }
    }
}

/// What the fake saw of the callers' SRTP and codecs, over all calls.
#[derive(Default)]
struct SrtpSeen {
    /// Calls answered with SRTP.
    calls: AtomicUsize,
    /// Caller packets that unprotected.
    authentic: AtomicU64,
    /// Caller packets that did not.
    refused: AtomicU64,
    /// Reply packets the fake forged.
    forged: AtomicU64,
    /// Caller packets whose payload type was not the call's codec's.
    foreign_payload_types: AtomicU64,
    /// Calls answered with G.722.
    g722_calls: AtomicUsize,
}

struct FakeGateway {
    addr: SocketAddr,
    /// The metrics page, with an admission limit.
    metrics: Option<SocketAddr>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    srtp: Arc<SrtpSeen>,
    /// INVITEs refused with 503.
    refused: Arc<AtomicUsize>,
}

impl Drop for FakeGateway {
    fn drop(&mut self) {
        self.stop.store(true, Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Serve `ontime_admission_headroom_calls` (`limit` − calls up) to each GET until `stop`, one
/// connection at a time: the harness scrapes twice a step.
fn serve_headroom(
    listener: TcpListener,
    limit: usize,
    active: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    listener.set_nonblocking(true).unwrap();
    while !stop.load(Acquire) {
        let Ok((mut conn, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        conn.set_nonblocking(false).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        // Read the request head; its contents do not matter.
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
            head.push(byte[0]);
        }
        let headroom = limit.saturating_sub(active.load(Acquire));
        let body = format!("# TYPE ontime_admission_headroom_calls gauge\nontime_admission_headroom_calls {headroom}\n");
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

/// One call's media: continuous 20 ms packets (silence or the reply), paced on absolute
/// deadlines, listening to the caller for the end of each turn.
fn media(
    socket: UdpSocket,
    remote: SocketAddr,
    b: Behaviour,
    active: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    srtp: Option<(SdesKeys, Arc<SrtpSeen>)>,
    seen: Arc<SrtpSeen>,
) {
    let mut contexts: Option<(SrtpContext, SrtpContext)> =
        srtp.as_ref().map(|(k, _)| (k.outbound(), k.inbound()));
    let mut forged = 0u64;
    socket.set_nonblocking(true).unwrap();
    let (reply, silence_byte): (Arc<[u8]>, u8) = match b.codec {
        Codec::G722 => (
            G722Speech::new(&audio::Utterance::new("reply", Arc::clone(&b.reply)))
                .whole
                .clone(),
            g722::SILENCE_BYTE,
        ),
        _ => (Arc::clone(&b.reply), 0xFF),
    };
    // What the fake hears of the caller: G.722 through one decoder, in order.
    let mut ear = Ear::new(b.codec);
    let mut packetizer = Packetizer::new(b.codec.payload_type());
    let start = Instant::now();
    let mut slot = 0u32;
    let mut heard_speech = false;
    let mut last_voice = Instant::now();
    let mut reply_at: Option<Instant> = None;
    let mut playing: Option<usize> = None;
    let mut played_frames = 0u32;
    let mut stalled_until: Option<Instant> = None;
    let mut buf = [0u8; 2048];
    let mut packet = [0u8; 512];
    while !stop.load(Acquire) {
        let now = Instant::now();
        while let Ok((mut n, _)) = socket.recv_from(&mut buf) {
            if let (Some((_, inbound)), Some((_, seen))) = (contexts.as_mut(), srtp.as_ref()) {
                match inbound.unprotect(&mut buf[..n]) {
                    Ok(len) => {
                        seen.authentic.fetch_add(1, AcqRel);
                        n = len;
                    }
                    Err(_) => {
                        seen.refused.fetch_add(1, AcqRel);
                        continue;
                    }
                }
            }
            if let Ok(p) = ontime_rtp::parse_rtp(&buf[..n]) {
                if p.payload_type != b.codec.payload_type() {
                    seen.foreign_payload_types.fetch_add(1, AcqRel);
                }
                if !ear.is_silent(p.payload, p.payload_type) {
                    heard_speech = true;
                    last_voice = now;
                }
            }
        }
        if heard_speech
            && playing.is_none()
            && reply_at.is_none()
            && now - last_voice > Duration::from_millis(300)
        {
            let extra = active.load(Acquire).saturating_sub(1) as u32;
            reply_at = Some(now + b.base_delay + b.per_extra_call * extra);
            heard_speech = false;
        }
        if reply_at.is_some_and(|t| now >= t) {
            reply_at = None;
            playing = Some(0);
            played_frames = 0;
        }
        // Send every slot that is due (after a stall: all of them at once, like a catch-up).
        if stalled_until.is_some_and(|t| now < t) {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        stalled_until = None;
        while start + FRAME * (slot + 1) <= Instant::now() {
            let mut payload = [silence_byte; FRAME_BYTES];
            if let Some(at) = playing {
                let end = (at + FRAME_BYTES).min(reply.len());
                payload[..end - at].copy_from_slice(&reply[at..end]);
                playing = (end < reply.len()).then_some(end);
                played_frames += 1;
            }
            let mut len = packetizer.write_frame(&payload, &mut packet).unwrap();
            if let (Some((outbound, _)), Some((_, seen))) = (contexts.as_mut(), srtp.as_ref()) {
                len = outbound.protect(&mut packet, len).unwrap();
                if playing.is_some() && forged < b.forge_first {
                    packet[len - 1] ^= 0x01;
                    forged += 1;
                    seen.forged.fetch_add(1, AcqRel);
                }
            }
            let _ = socket.send_to(&packet[..len], remote);
            slot += 1;
            if let (Some((every, stall)), Some(_)) = (b.stall_every, playing) {
                if played_frames.is_multiple_of(every) {
                    stalled_until = Some(Instant::now() + stall);
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn start_fake(b: Behaviour) -> FakeGateway {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let srtp = Arc::new(SrtpSeen::default());
    let srtp2 = Arc::clone(&srtp);
    let refused = Arc::new(AtomicUsize::new(0));
    let refused2 = Arc::clone(&refused);
    let active = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    let mut metrics = None;
    if let Some(limit) = b.admit_limit {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        metrics = Some(listener.local_addr().unwrap());
        let (active, stop) = (Arc::clone(&active), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            serve_headroom(listener, limit, active, stop);
        }));
    }
    threads.push(std::thread::spawn(move || {
        let mut ep = Endpoint::new(Config::new(addr));
        let mut calls: Vec<(ontime_sip::CallHandle, Arc<AtomicBool>, JoinHandle<()>)> = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while !stop2.load(Acquire) {
            if let Ok((n, from)) = socket.recv_from(&mut buf) {
                ep.handle_datagram(&buf[..n], from, Instant::now());
            }
            ep.handle_timeout(Instant::now());
            while let Some(ev) = ep.poll_event() {
                match ev {
                    // Full, as the gateway at `--max-calls`: 503 with a Retry-After.
                    Event::IncomingCall(c)
                        if b.admit_limit.is_some_and(|l| active.load(Acquire) >= l) =>
                    {
                        ep.reject(
                            c.call,
                            503,
                            &[("Retry-After".into(), "5".into())],
                            Instant::now(),
                        )
                        .unwrap();
                        refused2.fetch_add(1, AcqRel);
                    }
                    Event::IncomingCall(c) => {
                        let rtp = UdpSocket::bind("127.0.0.1:0").unwrap();
                        let local = LocalMedia::new(rtp.local_addr().unwrap(), 9);
                        // SRTP offers are answered in kind, keyed like the gateway does.
                        let mut keys = None;
                        let (answer, media_info) = sdp::answer_offer_srtp(
                            c.offer.as_ref().unwrap(),
                            &local,
                            SrtpPolicy::Optional,
                            &mut |_, section| {
                                let k =
                                    ontime_srtp::answer_offer(section.attribute_values("crypto"))
                                        .ok()?;
                                let line = k.local.to_string();
                                keys = Some(k);
                                Some(line)
                            },
                        )
                        .unwrap();
                        let srtp = keys.filter(|_| media_info.srtp).map(|k| {
                            srtp2.calls.fetch_add(1, AcqRel);
                            (k, Arc::clone(&srtp2))
                        });
                        if media_info.codec == Codec::G722 {
                            srtp2.g722_calls.fetch_add(1, AcqRel);
                        }
                        let seen = Arc::clone(&srtp2);
                        ep.answer(c.call, &answer, Instant::now()).unwrap();
                        active.fetch_add(1, AcqRel);
                        let call_stop = Arc::new(AtomicBool::new(false));
                        let (b, a, s) = (b.clone(), Arc::clone(&active), Arc::clone(&call_stop));
                        let remote = media_info.remote_rtp.unwrap();
                        calls.push((
                            c.call,
                            call_stop,
                            std::thread::spawn(move || media(rtp, remote, b, a, s, srtp, seen)),
                        ));
                    }
                    Event::Ended { call, .. } => {
                        if let Some(i) = calls.iter().position(|c| c.0 == call) {
                            let (_, s, t) = calls.remove(i);
                            s.store(true, Release);
                            let _ = t.join();
                            active.fetch_sub(1, AcqRel);
                        }
                    }
                    _ => {}
                }
            }
            while let Some(t) = ep.poll_transmit() {
                let _ = socket.send_to(&t.payload, t.destination);
            }
        }
        for (_, s, t) in calls {
            s.store(true, Release);
            let _ = t.join();
        }
    }));
    FakeGateway {
        addr,
        metrics,
        stop,
        threads,
        srtp,
        refused,
    }
}

/// One run at a time: each is real time (a sender thread, a fake gateway's media threads), and
/// four at once on a 2-core machine left the harness's own sender late, failing steps for it.
static ONE_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_against(fake: &FakeGateway, steps: &[usize], media: &[Media], measure_s: f64) -> RunResults {
    run_against_codec(fake, steps, media, measure_s, Codec::Pcmu)
}

fn run_against_codec(
    fake: &FakeGateway,
    steps: &[usize],
    media: &[Media],
    measure_s: f64,
    codec: Codec,
) -> RunResults {
    let _turn = ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let sender = Sender::start(SenderConfig {
        engine: EngineConfig {
            metrics: false,
            ..EngineConfig::default()
        },
        ..SenderConfig::default()
    })
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let controller = sender.controller();
    let destination = fake.addr;
    let metrics = fake.metrics.map(|addr| MetricsUrl {
        addr,
        path: "/metrics".into(),
    });
    let results = rt.block_on(async move {
        let sip = SipClient::start("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        // "Yes." (0.7 s): many turns in a short window.
        let utterances: Arc<[audio::Utterance]> = vec![audio::Utterance {
            name: "utterance_3".into(),
            ulaw: fixture("utterance_3.ulaw.wav"),
        }]
        .into();
        let setup = Arc::new(CallerSetup {
            sip,
            sender: controller,
            codec: CallerCodec::new(codec, &utterances).unwrap(),
            utterances,
            target_uri: format!("sip:bot@{destination}"),
            destination,
            local_ip: "127.0.0.1".parse().unwrap(),
            origin: Instant::now(),
            answer_timeout: Duration::from_secs(4),
            media: Media::Rtp,
            mid_pause: None,
            mid_pause_share: 1.0,
        });
        let plan = RunPlan {
            steps: steps.to_vec(),
            windows: Windows {
                ramp_s: 0.5,
                warmup_s: 1.5,
                measure_s,
            },
            stop_on_degrade: false,
            seed: 7,
            media: media.to_vec(),
        };
        run::run(
            &plan,
            setup,
            &GatewayView {
                metrics,
                ..GatewayView::default()
            },
            &ProgressBar::hidden(),
            |s| {
                eprintln!("{}", ontime_loadgen::report::table(std::slice::from_ref(s)));
            },
        )
        .await
    });
    sender.stop();
    results
}

#[test]
fn a_prompt_gateway_is_ok_and_one_that_slows_with_load_is_not() {
    let fake = start_fake(Behaviour {
        reply: fixture("utterance_3.ulaw.wav"),
        base_delay: Duration::from_millis(100),
        per_extra_call: Duration::from_millis(600),
        stall_every: None,
        forge_first: 0,
        admit_limit: None,
        codec: Codec::Pcmu,
    });
    let r = run_against(&fake, &[1, 3], &[Media::Rtp], 12.0);
    let (one, three) = (&r.steps[0], &r.steps[1]);
    assert!(one.ok, "1 call against a prompt gateway: {:?}", one.reasons);
    assert_eq!(one.underruns, 0);
    assert!(one.turns >= 2, "{one:?}");
    // Caller stops → 300 ms silence detection → 100 ms delay → first frame.
    let p50 = one.lat_p50_ms.unwrap();
    assert!((350.0..800.0).contains(&p50), "p50 {p50}");
    // 3 calls: +1.2 s per turn, beyond the 300 ms margin.
    assert!(!three.ok);
    assert!(three.lat_p50_ms.unwrap() > p50 + 900.0, "{three:?}");
    assert!(
        three.reasons.iter().any(|r| r.contains("p95 turn latency")),
        "{:?}",
        three.reasons
    );
    assert_eq!(three.underruns, 0);
    // The step failed on the gateway's latency; it is laid to the harness instead only when
    // the harness's own sender was late in it (a loaded test machine), as `run` defines.
    let blamed = if three.client_bound {
        "harness"
    } else {
        "gateway"
    };
    assert_eq!(
        (r.capacity, r.limited_by.as_str()),
        (1, blamed),
        "{three:?}"
    );
}

#[test]
fn a_gateway_whose_sender_stalls_mid_reply_has_underruns() {
    // A 3.7 s reply with a 150 ms stall every 0.6 s: longer than the 60 ms playout buffer.
    let fake = start_fake(Behaviour {
        reply: fixture("utterance_1.ulaw.wav"),
        base_delay: Duration::from_millis(100),
        per_extra_call: Duration::ZERO,
        stall_every: Some((30, Duration::from_millis(150))),
        forge_first: 0,
        admit_limit: None,
        codec: Codec::Pcmu,
    });
    let r = run_against(&fake, &[2], &[Media::Rtp], 12.0);
    let s = &r.steps[0];
    assert!(!s.ok, "{s:?}");
    assert!(s.underruns_per_min > 1.0, "{s:?}");
    assert!(
        s.reasons.iter().any(|r| r.contains("underruns")),
        "{:?}",
        s.reasons
    );
    // About one underrun per stall: 6 stalls in 3.7 s of reply ≈ 97 per minute of agent audio.
    assert!(
        s.underruns_per_min > 40.0 && s.underruns_per_min < 140.0,
        "{s:?}"
    );
    assert_eq!(r.capacity, 0);
}

#[test]
fn g722_callers_are_heard_and_answered_in_g722() {
    // A prompt fake that speaks G.722 only: it hears the caller through its own decoder and
    // replies with G.722 encoded from the after-silence state, as the gateway does.
    let fake = start_fake(Behaviour {
        codec: Codec::G722,
        ..Behaviour::prompt("utterance_3.ulaw.wav")
    });
    let r = run_against_codec(&fake, &[1], &[Media::Rtp], 8.0, Codec::G722);
    let s = &r.steps[0];
    assert!(s.ok, "{:?}", s.reasons);
    assert_eq!(
        (s.offered, s.admitted, s.refused, s.failed_calls),
        (1, 1, 0, 0),
        "{s:?}"
    );
    assert_eq!((s.unanswered_turns, s.underruns), (0, 0), "{s:?}");
    assert!(s.turns >= 2, "{s:?}");
    // As with PCMU: the caller stops → 300 ms of silence → 100 ms delay → first frame.
    let p50 = s.lat_p50_ms.unwrap();
    assert!((350.0..800.0).contains(&p50), "p50 {p50}");
    // The one call was G.722, and every packet the caller sent was payload type 9.
    assert_eq!(fake.srtp.g722_calls.load(Acquire), 1);
    assert_eq!(fake.srtp.foreign_payload_types.load(Acquire), 0);
    assert_eq!(r.capacity, 1);
}

#[test]
fn srtp_calls_are_protected_both_ways_and_counted_ok_next_to_plain_ones() {
    let fake = start_fake(Behaviour::prompt("utterance_3.ulaw.wav"));
    // `--media both`: the step runs plain, then SRTP.
    let r = run_against(&fake, &[1], &[Media::Rtp, Media::Srtp], 8.0);
    assert_eq!(r.steps.len(), 2, "{:?}", r.steps);
    let (plain, srtp) = (&r.steps[0], &r.steps[1]);
    assert_eq!((plain.media, srtp.media), (Media::Rtp, Media::Srtp));
    for s in [plain, srtp] {
        assert!(s.ok, "{}: {:?}", s.media, s.reasons);
        assert_eq!((s.answered_calls, s.failed_calls), (1, 0), "{s:?}");
        assert_eq!((s.offered, s.admitted, s.refused), (1, 1, 0), "{s:?}");
        assert_eq!(s.gateway_headroom_calls, None, "no metrics page");
        assert_eq!((s.srtp_auth_failures, s.srtp_other_drops), (0, 0));
        assert_eq!(s.underruns, 0);
        assert!(s.turns >= 1, "{s:?}");
    }
    // Exactly the one SRTP call was SRTP, and everything its caller sent authenticated.
    assert_eq!(fake.srtp.calls.load(Acquire), 1);
    assert_eq!(fake.srtp.refused.load(Acquire), 0);
    // 0.5 s ramp + 1.5 s warm-up + 8 s measured at 50 packets a second.
    let authentic = fake.srtp.authentic.load(Acquire);
    assert!(authentic >= 400, "{authentic} SRTP packets from the caller");
    assert_eq!(r.capacity, 1);
}

#[test]
fn forged_srtp_packets_are_counted_and_the_step_is_not_ok() {
    let fake = start_fake(Behaviour {
        forge_first: 5,
        ..Behaviour::prompt("utterance_3.ulaw.wav")
    });
    let r = run_against(&fake, &[1], &[Media::Srtp], 6.0);
    let s = &r.steps[0];
    assert_eq!(fake.srtp.forged.load(Acquire), 5);
    assert_eq!((s.srtp_auth_failures, s.srtp_other_drops), (5, 0), "{s:?}");
    assert!(!s.ok);
    assert!(
        s.reasons.iter().any(
            |r| r.contains("5 SRTP packets from the gateway refused (5 failed authentication)")
        ),
        "{:?}",
        s.reasons
    );
    assert_eq!(r.capacity, 0);
}

#[test]
fn calls_refused_over_the_admission_limit_are_counted_apart_and_the_admitted_ones_judged() {
    let fake = start_fake(Behaviour {
        admit_limit: Some(4),
        ..Behaviour::prompt("utterance_3.ulaw.wav")
    });
    let r = run_against(&fake, &[6], &[Media::Rtp], 8.0);
    let s = &r.steps[0];
    assert_eq!(fake.refused.load(Acquire), 2, "the fake refused");
    assert_eq!(
        (s.calls, s.offered, s.admitted, s.refused, s.failed_calls),
        (6, 6, 4, 2, 0),
        "{s:?}"
    );
    assert_eq!(s.answered_calls, 4);
    // Scraped at the end of the window, with the 4 calls up: the fake is full.
    assert_eq!(s.gateway_headroom_calls, Some(0.0), "{s:?}");
    // The 4 admitted calls are served promptly: the refusals alone do not fail the step.
    assert!(s.ok, "{:?}", s.reasons);
    assert!(s.turns >= 4, "{s:?}");
    assert_eq!((s.unanswered_turns, s.underruns), (0, 0), "{s:?}");
    // It carried 4, and what held it there was admission.
    assert_eq!((r.capacity, r.limited_by.as_str()), (4, "admission"));
    let table = ontime_loadgen::report::table(&r.steps);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    let column = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(
        (column("offr"), column("adm"), column("ref"), column("fail")),
        ("6", "4", "2", "0"),
        "{table}"
    );
}
