//! Connecting to a provider, against real sipp peers: a REGISTER with digest authentication
//! verified by the registrar (sipp's `verifyauth`), refreshed before the granted expiry and
//! taken away (Expires: 0) when the gateway stops; INVITEs challenged by `--trunk-auth`; a
//! late-offer INVITE (no SDP) completed with our offer in the 200 and the answer in the ACK.
//! Passwords come from the environment and must never reach the gateway's log.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const REGISTER_PASSWORD: &str = "reg-s3cret-7f2a";
const TRUNK_PASSWORD: &str = "trunk-s3cret-91bc";

#[test]
fn register_with_digest_refreshes_before_expiry_and_unregisters_on_sigterm() {
    if !require("sipp") {
        return;
    }
    let registrar_port = free_udp_port();
    let scen = scenario(
        "registrar_digest.xml",
        &[
            ("@USER@", "alice"),
            ("@PASSWORD@", REGISTER_PASSWORD),
            // Granted 4 s: the gateway refreshes at half of it.
            ("@EXPIRES@", "4"),
            ("@REFRESH_WITHIN_MS@", "4000"),
        ],
    );
    let registrar = spawn_sipp_uas(
        &scen,
        registrar_port,
        1,
        free_media_port(),
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(500));
    let aor = format!("sip:alice@127.0.0.1:{registrar_port}");
    let mut gw = start_gateway_env(
        &["--register", &aor],
        &[("ONTIME_REGISTER_PASSWORD", REGISTER_PASSWORD)],
    );
    let up = format!("ontime_registration_up{{registrar=\"{aor}\"}}");
    assert!(
        wait_until(Duration::from_secs(10), || gw.metric(&up) == Some(1.0)),
        "not registered: {}\n{}",
        gw.metrics_text(),
        gw.stderr()
    );
    // The refresh before the 4 s run out (the registrar checks it and its credentials).
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(gw.metric(&up), Some(1.0));
    gw.proc.signal("TERM");
    let exited = gw.proc.wait_timeout(Duration::from_secs(40));
    assert!(exited.is_some(), "the gateway did not stop");
    let (ok, log) = registrar.finish(Duration::from_secs(20));
    assert!(ok, "registrar scenario failed:\n{log}\n{}", gw.stderr());
    let log = std::fs::read_to_string(&gw.log).unwrap() + &gw.stderr();
    assert!(
        !log.contains(REGISTER_PASSWORD),
        "the password reached the log"
    );
    assert!(log.contains("\"registered\""), "{log}");
    assert!(log.contains("\"unregistered\""), "{log}");
}

#[test]
fn trunk_auth_challenges_invites_and_admits_the_right_credentials() {
    if !require("sipp") {
        return;
    }
    let gw = start_gateway_env(
        // sipp answers only the first challenge it sees and knows MD5 alone.
        &["--trunk-auth", "bob", "--trunk-auth-algorithms", "MD5"],
        &[("ONTIME_TRUNK_AUTH_PASSWORD", TRUNK_PASSWORD)],
    );
    let scen = scenario("caller_digest.xml", &[("@HOLD_MS@", "1000")]);
    let run = |password: &str| {
        Command::new("timeout")
            .arg("30")
            .arg("sipp")
            .arg(gw.sip.to_string())
            .args(["-sf", scen.to_str().unwrap(), "-m", "1"])
            .args(["-au", "bob", "-ap", password])
            // The digest uri must be the Request-URI (sipp's default leaves out the user).
            .args(["-auth_uri", &format!("bot@{}", gw.sip)])
            .args(["-i", "127.0.0.1", "-p", &free_udp_port().to_string()])
            .args(["-mi", "127.0.0.1", "-mp", &(free_media_port()).to_string()])
            .args(["-timeout", "20s", "-timeout_error", "-nostdin"])
            .stdin(Stdio::null())
            .output()
            .expect("run sipp")
    };
    let good = run(TRUNK_PASSWORD);
    assert!(
        good.status.success(),
        "authenticated call failed:\n{}\n{}",
        String::from_utf8_lossy(&good.stdout),
        gw.stderr()
    );
    // Wrong credentials: challenged again, never answered.
    let bad = run("not-the-password");
    assert!(!bad.status.success(), "a wrong password was admitted");
    let body = gw.metrics_text();
    assert_eq!(
        metric_value(
            &body,
            "ontime_calls_answered_total{transport=\"udp\",media=\"rtp\"}"
        ),
        Some(1.0),
        "{body}"
    );
    let log = std::fs::read_to_string(&gw.log).unwrap() + &gw.stderr();
    assert!(
        !log.contains(TRUNK_PASSWORD),
        "the password reached the log"
    );
}

#[test]
fn a_late_offer_call_hears_the_reply() {
    if !require("sipp") || !require("tshark") || !require("espeak-ng") {
        return;
    }
    let gw = start_gateway(&[]);
    let dir = gw.log.parent().unwrap().to_path_buf();
    let speech = fresh_speech(&dir, "I need to change the address on my insurance policy.");
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    let scen = scenario(
        "caller_late_offer.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "10000"),
        ],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(40));
    let pcap = cap.finish();
    assert!(ok, "late-offer call failed:\n{log}\n{}", gw.stderr());
    let rows = rtp_rows(&pcap, media_port);
    let reply = rows
        .iter()
        .filter(|r| r.dst_port == media_port && !r.silent)
        .count();
    assert!(reply > 100, "the caller heard {reply} sounding packets");
}
