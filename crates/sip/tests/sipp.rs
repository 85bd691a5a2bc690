//! Interop with a real peer: SIPp's built-in `uac` scenario against our UAS, and our UAC against
//! SIPp's `uas` scenario, over loopback UDP. Skips with a printed reason when `sipp` is missing.

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use ontime_sip::sdp::{self, LocalMedia};
use ontime_sip::{CallParams, Event, Transport};

fn sipp() -> Option<&'static str> {
    match Command::new("sipp")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => Some("sipp"),
        Err(e) => {
            println!("skipped: sipp is not installed ({e})");
            None
        }
    }
}

/// Kills the child on drop, so a failed assertion leaves no sipp behind.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sipp_uac_calls_our_uas() {
    let Some(sipp) = sipp() else { return };
    const CALLS: usize = 5;
    let mut uas = UdpPeer::bind();
    let uas_addr = uas.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_uas = stop.clone();
    // The tiny harness: answer every call at once (180, then 200 with our SDP answer).
    let server = std::thread::spawn(move || {
        let local = LocalMedia::new(addr("127.0.0.1:50000"), 7);
        let mut answered = 0;
        let mut ended = 0;
        while !stop_uas.load(Ordering::Relaxed) {
            uas.step();
            for e in std::mem::take(&mut uas.events) {
                match e {
                    Event::IncomingCall(c) => {
                        let now = Instant::now();
                        uas.ep.ring(c.call, now).unwrap();
                        let (answer, _) =
                            sdp::answer_offer(c.offer.as_ref().unwrap(), &local).unwrap();
                        uas.ep.answer(c.call, &answer, now).unwrap();
                        answered += 1;
                    }
                    Event::Ended { .. } => ended += 1,
                    _ => {}
                }
            }
        }
        (answered, ended, uas.ep.invalid_messages())
    });
    let child = Command::new(sipp)
        .args([
            "-sn",
            "uac",
            "-i",
            "127.0.0.1",
            "-p",
            "0",
            "-m",
            &CALLS.to_string(),
            "-r",
            "10",
            "-d",
            "200",
        ])
        .args(["-timeout", "20s", "-timeout_error", "-nostdin"])
        .arg(uas_addr.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sipp runs");
    let guard = ChildGuard(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut guard = guard;
    let status = loop {
        if let Some(s) = guard.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "sipp did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    stop.store(true, Ordering::Relaxed);
    let (answered, ended, invalid) = server.join().unwrap();
    let mut out = String::new();
    if let Some(mut s) = guard.0.stdout.take() {
        use std::io::Read;
        let _ = s.read_to_string(&mut out);
    }
    assert!(
        status.success(),
        "sipp failed ({status}):\n{}",
        &out[out.len().saturating_sub(3000)..]
    );
    assert_eq!(answered, CALLS);
    assert_eq!(ended, CALLS, "every call ended by sipp's BYE");
    assert_eq!(invalid, 0);
}

#[test]
fn our_uac_calls_sipp_uas() {
    let Some(sipp) = sipp() else { return };
    const CALLS: usize = 3;
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(sipp)
        .args([
            "-sn",
            "uas",
            "-i",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-m",
            &CALLS.to_string(),
        ])
        .args(["-timeout", "20s", "-timeout_error", "-nostdin"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sipp runs");
    let mut guard = ChildGuard(child);
    std::thread::sleep(Duration::from_millis(300)); // let sipp bind
    let mut uac = UdpPeer::bind();
    let sipp_addr = addr(&format!("127.0.0.1:{port}"));
    let local = LocalMedia::new(addr("127.0.0.1:40000"), 3);
    let mut answered = 0;
    let mut ended = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    for _ in 0..CALLS {
        let params = CallParams {
            headers: Vec::new(),
            target: format!("sip:service@{sipp_addr}"),
            from: None,
            destination: sipp_addr,
            transport: Transport::Udp,
            offer: sdp::build_offer(&local),
        };
        uac.ep.place_call(params, Instant::now()).unwrap();
        let mut done = false;
        while !done {
            assert!(
                Instant::now() < deadline,
                "timed out: sent {:?} got {:?}",
                uac.sent_lines,
                uac.received_lines
            );
            uac.step();
            for e in std::mem::take(&mut uac.events) {
                match e {
                    Event::Answered { call, answer } => {
                        let media = sdp::read_answer(answer.as_ref().unwrap(), &local).unwrap();
                        assert!(media.remote_rtp.is_some());
                        answered += 1;
                        uac.ep.hangup(call, Instant::now()).unwrap();
                    }
                    Event::Ended { reason, .. } => {
                        assert_eq!(
                            reason,
                            ontime_sip::EndReason::LocalHangup { confirmed: true }
                        );
                        ended += 1;
                        done = true;
                    }
                    _ => {}
                }
            }
        }
    }
    let status = loop {
        if let Some(s) = guard.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "sipp uas did not finish");
        uac.step();
    };
    assert!(status.success(), "sipp uas failed: {status}");
    assert_eq!((answered, ended), (CALLS, CALLS));
}
