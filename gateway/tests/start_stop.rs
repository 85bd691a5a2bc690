//! Starting and stopping the real binary as an operator does: a setting out of its range stops
//! the start with a message naming the field (flag and environment twin alike), and a gateway
//! stopped with SIGTERM frees its ports at once, so the next one binds the same SIP (UDP and
//! TCP), metrics and API ports right after.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BINARY: &str = env!("CARGO_BIN_EXE_ontime-gateway");

/// The binary's exit code and standard error for these flags and environment variables.
fn run_to_exit(flags: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(BINARY)
        .args(flags)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run ontime-gateway");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_setting_out_of_range_stops_the_start_naming_its_field() {
    let (code, stderr) = run_to_exit(&["--max-calls", "99999999999"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "ontime-gateway: config field `max_calls`: 99999999999 is outside 1–10000\n"
    );
    // The environment twin meets the same range.
    let (code, stderr) = run_to_exit(&[], &[("ONTIME_ANSWER_DELAY", "1h")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "ontime-gateway: config field `answer_delay`: `1h` is outside 0s–1m\n"
    );
}

/// A gateway on exactly these ports, up once `/healthz` answers (SIP is bound before the ops
/// endpoint serves).
fn start_on(
    sip: SocketAddr,
    metrics: SocketAddr,
    api: SocketAddr,
    rtp: (u16, u16),
    log: &Path,
) -> Proc {
    let models = workspace().join(".cache/models");
    let mut cmd = Command::new(BINARY);
    cmd.args(["--sip-listen", &sip.to_string()])
        .args(["--sip-listen-tcp", &sip.to_string()])
        .args(["--metrics-listen", &metrics.to_string()])
        .args(["--api-listen", &api.to_string()])
        .args(["--rtp-ports", &format!("{}-{}", rtp.0, rtp.1)])
        .env("ONTIME_ADMISSION_RESERVE", "0")
        // The API's token is a secret: environment only, never a flag.
        .env("ONTIME_API_AUTH_TOKEN", "restart-test-token")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(std::fs::File::create(log.with_extension("err")).unwrap());
    if std::env::var_os("ORT_DYLIB_PATH").is_none() {
        cmd.env("ORT_DYLIB_PATH", models.join("libonnxruntime.so.1.31.1"));
    }
    if std::env::var_os("ONTIME_MODELS_DIR").is_none() {
        cmd.env("ONTIME_MODELS_DIR", &models);
    }
    let mut proc = Proc {
        child: cmd.spawn().expect("spawn ontime-gateway"),
        name: "ontime-gateway".into(),
    };
    let until = Instant::now() + Duration::from_secs(30);
    while http_get(metrics, "/healthz").map(|(s, _)| s) != Some(200) {
        if let Ok(Some(status)) = proc.child.try_wait() {
            panic!(
                "gateway exited with {status}: {}",
                std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < until, "gateway not up in 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    proc
}

/// A port free for both UDP and TCP on loopback.
fn free_sip_port() -> u16 {
    loop {
        let port = free_udp_port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

#[test]
fn a_restarted_gateway_binds_its_ports_at_once() {
    let sip: SocketAddr = format!("127.0.0.1:{}", free_sip_port()).parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
    let api: SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
    let rtp = free_port_range(20);
    let dir = std::env::temp_dir().join(format!("ontime-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut first = start_on(sip, metrics, api, rtp, &dir.join("first.log"));
    // What a user does before stopping it: an OPTIONS over UDP (its answered transaction stays
    // in the endpoint for Timer J, 32 s) and a TCP connection left open.
    let uac = uac::RawUac::new("127.0.0.1", sip);
    uac.send(&uac.options_text("restart-probe"));
    let answer = uac.final_response("OPTIONS", Duration::from_secs(5));
    assert!(answer.is_some(), "no answer to OPTIONS over UDP");
    let mut tcp = TcpStream::connect(sip).unwrap();
    let local = tcp.local_addr().unwrap();
    write!(
        tcp,
        "OPTIONS sip:ontime@{sip} SIP/2.0\r\nVia: SIP/2.0/TCP {local};branch=z9hG4bK-restart\r\n\
         From: <sip:probe@{local}>;tag=r1\r\nTo: <sip:ontime@{sip}>\r\nCall-ID: restart@test\r\n\
         CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 12];
    tcp.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"SIP/2.0 200 ", "OPTIONS over TCP");

    let stopped = Instant::now();
    first.signal("TERM");
    let status = first
        .wait_timeout(Duration::from_secs(10))
        .expect("the gateway exits after SIGTERM");
    let took = stopped.elapsed();
    assert!(status.success(), "exit status {status}");
    // No call was up: nothing to drain and no retransmission to wait for.
    assert!(
        took < Duration::from_secs(2),
        "SIGTERM to exit took {took:?}"
    );

    // The same ports at once: UDP and TCP SIP (the old side of the TCP connection may sit in
    // TIME_WAIT), metrics, API.
    let second = start_on(sip, metrics, api, rtp, &dir.join("second.log"));
    drop(second);
    drop(tcp);
    let _ = std::fs::remove_dir_all(&dir);
}
