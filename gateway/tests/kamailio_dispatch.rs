//! Scale-out through the SIP front door: Kamailio (`deploy/kamailio/kamailio.cfg`) dispatching six
//! sipp callers over two real gateways with `--max-calls 2` each, on loopback.
//!
//! What it shows, in order:
//! 1. calls spread over both gateways (round-robin; each gateway's `ontime_calls_active`);
//! 2. an INVITE that reaches a full gateway gets its 503 and is failed over to the other one, and
//!    the caller is answered;
//! 3. SIGTERM on one gateway: its OPTIONS answers turn 503, the dispatcher takes it out, the next
//!    caller is not offered to it (its INVITE counter does not move) and, with the other gateway
//!    full, is refused with 503 + Retry-After; the draining gateway's own calls run to their end
//!    (the callers hang up) and it exits 0.
//!
//! Skips with a printed reason when kamailio or sipp is missing; in CI (`CI` set) both are required.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;

fn active(gw: &Gateway) -> f64 {
    gw.metric("ontime_calls_active").unwrap_or(-1.0)
}

fn options_in(gw: &Gateway) -> f64 {
    gw.metric("ontime_sip_messages_total{method=\"OPTIONS\",direction=\"in\"}")
        .unwrap_or(0.0)
}

fn invites_in(gw: &Gateway) -> f64 {
    gw.metric("ontime_sip_messages_total{method=\"INVITE\",direction=\"in\"}")
        .unwrap_or(0.0)
}

/// Resident memory of a process in MiB (reported, not asserted: docs/scale-out.md quotes it).
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn rejected_full(gw: &Gateway) -> f64 {
    gw.metric("ontime_calls_rejected_total{reason=\"max_calls\"}")
        .unwrap_or(0.0)
}

/// A caller through the front door that stays `hold` on the line, then hangs up.
fn caller(kam: SocketAddr, hold: Duration) -> SippCall {
    let scen = scenario(
        "caller_holds_then_hangs_up.xml",
        &[("@HOLD_MS@", &hold.as_millis().to_string())],
    );
    // Each caller gets its own copy (the file name is per scenario, the hold differs).
    let own = scen.with_extension(format!("{}.xml", free_udp_port()));
    std::fs::rename(&scen, &own).unwrap();
    spawn_sipp(kam, &own, 1, free_media_port(), Duration::from_secs(60))
}

fn report(kam: &Kamailio, gws: &[&Gateway]) -> String {
    let mut s = format!(
        "dispatcher: {:?}\n--- kamailio log (tail) ---\n{}\n",
        kam.destinations(),
        tail(&kam.log(), 60)
    );
    for (i, gw) in gws.iter().enumerate() {
        s += &format!(
            "--- gateway {i} at {} metrics: active {:?}, INVITE in {}, OPTIONS in {}, 503 max_calls {}\n{}\n",
            gw.sip,
            gw.metric("ontime_calls_active"),
            invites_in(gw),
            options_in(gw),
            rejected_full(gw),
            tail(&gw.stderr(), 20)
        );
    }
    s
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[test]
fn kamailio_spreads_fails_over_and_drains() {
    if !require("kamailio") || !require("kamcmd") || !require("sipp") {
        return;
    }
    let started = Instant::now();
    let gw_flags = [
        "--max-calls",
        "2",
        "--rtp-timeout",
        "60s",
        "--drain-timeout",
        "30s",
    ];
    let mut gws = [start_gateway(&gw_flags), start_gateway(&gw_flags)];
    let (a, b) = (&gws[0], &gws[1]);
    eprintln!(
        "RSS idle: {:.1} MiB and {:.1} MiB",
        rss_mib(a.proc.child.id()),
        rss_mib(b.proc.child.id())
    );
    // The shipped defaults: a ping every 5 s, the first 503 takes a gateway out. (The interval is
    // also the window in which a gateway that just filled up still gets INVITEs, which step 2
    // needs.)
    let kam = start_kamailio(&[a.sip, b.sip], &[]);
    assert!(
        wait_until(Duration::from_secs(15), || kam.is_active(a.sip)
            == Some(true)
            && kam.is_active(b.sip) == Some(true)
            && options_in(a) >= 1.0
            && options_in(b) >= 1.0),
        "both gateways should be pinged and active:\n{}",
        report(&kam, &[a, b])
    );

    // 1. Spread: two callers land on different gateways (round-robin).
    let c1 = caller(kam.sip, Duration::from_secs(26));
    assert!(
        wait_until(Duration::from_secs(10), || active(a) + active(b) == 1.0),
        "caller 1 not answered:\n{}",
        report(&kam, &[a, b])
    );
    // `x` took the first call, `y` is the other.
    let a_first = active(a) == 1.0;
    let c2 = caller(kam.sip, Duration::from_secs(1));
    let (xi, yi) = if a_first { (0, 1) } else { (1, 0) };
    let (x, y) = (&gws[xi], &gws[yi]);
    assert!(
        wait_until(Duration::from_secs(10), || active(y) == 1.0),
        "caller 2 should be spread to the other gateway:\n{}",
        report(&kam, &[a, b])
    );
    assert_eq!(active(x), 1.0, "caller 2 went to the busy gateway");
    let (ok, log) = c2.finish(Duration::from_secs(15));
    assert!(ok, "caller 2 failed:\n{log}\n{}", report(&kam, &[a, b]));
    assert!(wait_until(Duration::from_secs(5), || active(y) == 0.0));

    // 2. Failover. Right after a ping round (both answered 200), the dispatcher still counts `x`
    //    as active for a whole ping interval. Caller 3 fills `x`, caller 4 goes to `y`, caller 5
    //    is sent to the full `x` by the round-robin, gets 503 there and fails over to `y`.
    let pings = options_in(x);
    assert!(
        wait_until(Duration::from_secs(8), || options_in(x) > pings),
        "no OPTIONS ping within 8 s"
    );
    let window = Instant::now();
    let c3 = caller(kam.sip, Duration::from_secs(18));
    assert!(
        wait_until(Duration::from_secs(5), || active(x) == 2.0),
        "caller 3 should fill the first gateway:\n{}",
        report(&kam, &[a, b])
    );
    let c4 = caller(kam.sip, Duration::from_secs(18));
    assert!(
        wait_until(Duration::from_secs(5), || active(y) == 1.0),
        "caller 4 should go to the second gateway:\n{}",
        report(&kam, &[a, b])
    );
    let refused_before = rejected_full(x);
    let c5 = caller(kam.sip, Duration::from_secs(18));
    eprintln!(
        "callers 3-5 sent within {:.2} s of a ping round",
        window.elapsed().as_secs_f64()
    );
    assert!(
        wait_until(Duration::from_secs(5), || active(y) == 2.0),
        "caller 5 should end up answered by the second gateway:\n{}",
        report(&kam, &[a, b])
    );
    assert_eq!(
        rejected_full(x),
        refused_before + 1.0,
        "caller 5 should first have been refused (503) by the full gateway, then failed over:\n{}",
        report(&kam, &[a, b])
    );
    assert!(
        kam.log().contains("failover ->"),
        "Kamailio should log the failover:\n{}",
        report(&kam, &[a, b])
    );
    assert_eq!(active(x), 2.0);
    eprintln!(
        "RSS with 2 calls each: {:.1} MiB and {:.1} MiB",
        rss_mib(x.proc.child.id()),
        rss_mib(y.proc.child.id())
    );

    // 3. Drain the first gateway. It answers OPTIONS with 503 at once; the dispatcher takes it out
    //    at its next ping.
    x.proc.signal("TERM");
    assert!(
        wait_until(Duration::from_secs(15), || kam.is_active(x.sip)
            == Some(false)),
        "the draining gateway should be taken out by the OPTIONS probing:\n{}",
        report(&kam, &[a, b])
    );
    let x_invites = invites_in(x);
    // Caller 6: the draining gateway is out and the other is full: 503 with Retry-After from the
    // front door, and nothing reaches the draining gateway.
    let refused = scenario("caller_expects_503.xml", &[]);
    let (ok, log) = spawn_sipp(
        kam.sip,
        &refused,
        1,
        free_media_port(),
        Duration::from_secs(15),
    )
    .finish(Duration::from_secs(20));
    assert!(
        ok,
        "caller 6 should be refused with 503 + Retry-After while no gateway has room:\n{log}\n{}",
        report(&kam, &[a, b])
    );
    assert_eq!(
        invites_in(x),
        x_invites,
        "no INVITE may reach the draining gateway:\n{}",
        report(&kam, &[a, b])
    );

    // The draining gateway's calls (1 and 3) and the others' (4 and 5) end when their callers
    // hang up, BYE through the front door (Record-Route).
    for (name, call) in [("1", c1), ("3", c3), ("4", c4), ("5", c5)] {
        let (ok, log) = call.finish(Duration::from_secs(30));
        assert!(
            ok,
            "caller {name} should finish its call:\n{log}\n{}",
            report(&kam, &[a, b])
        );
    }
    let drained = &mut gws[xi];
    let status = drained
        .proc
        .wait_timeout(Duration::from_secs(15))
        .expect("the draining gateway should exit once its calls ended");
    assert!(
        status.success(),
        "exit status {status}: {}",
        drained.stderr()
    );
    let cdrs = drained.stdout();
    assert_eq!(
        cdrs.matches("caller_bye").count(),
        2,
        "the draining gateway's two calls should end by the callers' BYE, not by the drain:\n{cdrs}"
    );
    assert!(!cdrs.contains("\\\"cause\\\":\\\"drained\\\""));
    eprintln!(
        "kamailio dispatch test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Every metric the Grafana dashboard (`deploy/grafana/ontime.json`) queries is served by a
/// running gateway, so no panel stays empty for a name that does not exist.
#[test]
fn grafana_dashboard_metrics_are_served() {
    let text = std::fs::read_to_string(workspace().join("deploy/grafana/ontime.json"))
        .expect("deploy/grafana/ontime.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let mut wanted = std::collections::BTreeSet::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    for target in panels
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
    {
        let expr = target["expr"].as_str().expect("expr");
        let mut rest = expr;
        while let Some(at) = rest.find("ontime_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            wanted.insert(name);
        }
    }
    // The metric names the dashboard's panels query today: a panel added or dropped changes
    // this count with it, so the scan cannot silently find fewer.
    assert_eq!(wanted.len(), 22, "metrics found: {wanted:?}");
    let gw = start_gateway(&[]);
    let body = gw.metrics_text();
    let served: std::collections::BTreeSet<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|n| !served.contains(n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics the gateway does not serve: {missing:?}\nserved: {served:?}"
    );
}

/// The Dockerfile's build steps (`deploy/docker/stage.sh`, which the Dockerfile runs) lay out a
/// runtime tree whose gateway starts as an unprivileged user with the staged ONNX Runtime and
/// models and answers `/readyz` — the image's contents, checked without a Docker engine.
#[test]
fn docker_stage_script_builds_a_runnable_tree() {
    let models = workspace().join(".cache/models");
    if !models.join("libonnxruntime.so.1.31.1").exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "models are required in CI (scripts/fetch-models.sh)"
        );
        eprintln!("SKIP: .cache/models missing (run scripts/fetch-models.sh)");
        return;
    }
    let dest = std::env::temp_dir().join(format!("ontime-stage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dest);
    let (first, last) = free_port_range(20);
    let out = std::process::Command::new("bash")
        .arg(workspace().join("deploy/docker/stage.sh"))
        .arg(&dest)
        .env("ONTIME_GATEWAY_BIN", env!("CARGO_BIN_EXE_ontime-gateway"))
        .env("ONTIME_MODELS_FROM", &models)
        .env("SMOKE", "1")
        .env("SMOKE_METRICS_PORT", free_tcp_port().to_string())
        .env("SMOKE_RTP_PORTS", format!("{first}-{last}"))
        .output()
        .expect("run deploy/docker/stage.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dest);
    assert!(out.status.success(), "stage.sh failed:\n{text}");
    assert!(
        text.contains("answered /readyz"),
        "the staged gateway was not run:\n{text}"
    );
}

/// Two gateways behind the front door, one without headroom to spare (its measured headroom is
/// below its `--admission-reserve`): its OPTIONS answers say 503 with `X-Ontime-Headroom`, the
/// dispatcher takes it out, and every new call goes to the other one.
#[test]
fn kamailio_sends_new_calls_to_the_gateway_with_headroom() {
    if !require("kamailio") || !require("kamcmd") || !require("sipp") {
        return;
    }
    // `tight` needs more measured headroom than any machine has: it stands for a pod loaded
    // near its limit, without loading it.
    let tight = start_gateway_alive(&["--admission-reserve", "10000"]);
    let roomy = start_gateway(&["--admission-reserve", "1"]);
    // Its own OPTIONS answer says why: 503 and the headroom it measured.
    let probe = common::uac::RawUac::new("127.0.0.1", tight.sip);
    probe.send(&probe.options_text("headroom-probe"));
    let answer = probe
        .final_response("OPTIONS", Duration::from_secs(5))
        .expect("an OPTIONS answer");
    assert!(
        common::uac::start_line(&answer).starts_with("SIP/2.0 503"),
        "{answer}"
    );
    let advertised = common::uac::header(&answer, "X-Ontime-Headroom")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("X-Ontime-Headroom on the OPTIONS answer");
    assert!(advertised < 1_000_000, "{answer}");
    let kam = start_kamailio(&[tight.sip, roomy.sip], &[]);
    assert!(
        wait_until(Duration::from_secs(15), || kam.is_active(tight.sip)
            == Some(false)
            && kam.is_active(roomy.sip) == Some(true)),
        "the dispatcher should take the gateway without headroom out:\n{}",
        report(&kam, &[&tight, &roomy])
    );
    let callers: Vec<SippCall> = (0..3)
        .map(|_| caller(kam.sip, Duration::from_secs(2)))
        .collect();
    for c in callers {
        let (ok, log) = c.finish(Duration::from_secs(40));
        assert!(
            ok,
            "a caller failed:\n{log}\n{}",
            report(&kam, &[&tight, &roomy])
        );
    }
    assert_eq!(
        invites_in(&tight),
        0.0,
        "{}",
        report(&kam, &[&tight, &roomy])
    );
    assert_eq!(
        invites_in(&roomy),
        3.0,
        "{}",
        report(&kam, &[&tight, &roomy])
    );
    assert!(
        roomy
            .metric("ontime_admission_headroom_calls")
            .unwrap_or(0.0)
            >= 1.0
    );
}

fn responses_out(gw: &Gateway, class: &str) -> f64 {
    gw.metric(&format!(
        "ontime_sip_messages_total{{method=\"{class}\",direction=\"out\"}}"
    ))
    .unwrap_or(0.0)
}

/// The front door in front of a gateway started just before it, with no warm-up: the very first
/// OPTIONS ping is answered 200 (the readiness `/readyz` reports from the start), so the
/// dispatcher keeps the gateway and the first caller is answered. A gateway that answered its
/// first ping from stale state (503, headroom 0) was taken out until the next ping, and every
/// caller in between got `503 No Destination Available`.
#[test]
fn kamailio_keeps_a_gateway_from_its_first_ping() {
    if !require("kamailio") || !require("kamcmd") || !require("sipp") {
        return;
    }
    // Up (`/healthz`), not waited on for readiness: the front door starts right after.
    let gw = start_gateway_alive(&["--admission-reserve", "1"]);
    let kam = start_kamailio(&[gw.sip], &[]);
    assert!(
        wait_until(Duration::from_secs(10), || responses_out(&gw, "2xx")
            + responses_out(&gw, "5xx")
            >= 1.0),
        "no OPTIONS ping answered:\n{}",
        report(&kam, &[&gw])
    );
    assert_eq!(options_in(&gw), 1.0, "{}", report(&kam, &[&gw]));
    assert_eq!(
        responses_out(&gw, "5xx"),
        0.0,
        "the first ping was refused:\n{}",
        report(&kam, &[&gw])
    );
    assert_eq!(responses_out(&gw, "2xx"), 1.0, "{}", report(&kam, &[&gw]));
    // Before the next ping (5 s): the dispatcher still has the gateway, and a caller gets it.
    let (ok, log) = caller(kam.sip, Duration::from_secs(1)).finish(Duration::from_secs(20));
    assert!(
        ok,
        "the first caller failed:\n{log}\n{}",
        report(&kam, &[&gw])
    );
    assert_eq!(
        kam.is_active(gw.sip),
        Some(true),
        "{}",
        report(&kam, &[&gw])
    );
    assert_eq!(invites_in(&gw), 1.0, "{}", report(&kam, &[&gw]));
}
