//! SIP over TCP and TLS against the real binary: a sipp call over TCP hears the stub's reply;
//! a TLS client (rustls, verifying the gateway's certificate against a test CA) gets its OPTIONS
//! answered on the same connection; keep-alive pings are answered; a message that never
//! completes, a handshake of garbage and a connection from outside the trunk networks are each
//! closed and counted once.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::*;

fn options(transport: &str, local: std::net::SocketAddr, gw: std::net::SocketAddr) -> String {
    format!(
        "OPTIONS sip:ontime@{gw} SIP/2.0\r\nVia: SIP/2.0/{transport} {local};branch=z9hG4bK-opt-{n}\r\n\
         From: <sip:probe@{local}>;tag=p{n}\r\nTo: <sip:ontime@{gw}>\r\nCall-ID: opt-{n}@test\r\n\
         CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
        n = std::process::id()
    )
}

/// Read from `r` until a whole response head arrived (or the peer closed).
fn read_response(r: &mut impl Read) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn a_call_over_tcp_hears_the_reply_and_its_record_says_tcp() {
    if !require("sipp") || !require("tshark") || !require("espeak-ng") {
        return;
    }
    let tcp = free_tcp_port();
    let gw = start_gateway(&["--sip-listen-tcp", &format!("127.0.0.1:{tcp}")]);
    let dir = gw.log.parent().unwrap().to_path_buf();
    let speech = fresh_speech(
        &dir,
        "Please tell me when the next train to the airport leaves.",
    );
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    let scen = scenario(
        "caller_speaks.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "10000"),
        ],
    );
    let out = Command::new("timeout")
        .arg("45")
        .arg("sipp")
        .arg(format!("127.0.0.1:{tcp}"))
        .args(["-sf", scen.to_str().unwrap(), "-t", "t1", "-m", "1"])
        .args(["-i", "127.0.0.1", "-p", &free_tcp_port().to_string()])
        .args(["-mi", "127.0.0.1", "-mp", &media_port.to_string()])
        .args(["-timeout", "40s", "-timeout_error", "-nostdin"])
        .stdin(Stdio::null())
        .output()
        .expect("run sipp");
    let pcap = cap.finish();
    assert!(
        out.status.success(),
        "sipp over TCP failed:\n{}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        gw.stderr()
    );
    let rows = rtp_rows(&pcap, media_port);
    let reply = rows.iter().filter(|r| r.dst_port == media_port).count();
    assert!(reply > 100, "the gateway sent {reply} RTP packets");
    let body = gw.metrics_text();
    assert_eq!(
        metric_value(
            &body,
            "ontime_sip_messages_total{method=\"INVITE\",direction=\"in\"}"
        ),
        Some(1.0)
    );
    let log = std::fs::read_to_string(&gw.log).unwrap();
    let ends: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\\\"record\\\":\\\"end\\\""))
        .collect();
    assert_eq!(ends.len(), 1, "{log}");
    assert!(
        ends[0].contains("\\\"transport\\\":\\\"tcp\\\""),
        "{}",
        ends[0]
    );
}

#[test]
fn tls_options_are_answered_on_the_connection_verified_by_ca() {
    let tls_port = free_tcp_port();
    let dir = std::env::temp_dir().join(format!("ontime-sip-tls-{}", std::process::id()));
    let pki = common::pki::test_pki(&dir);
    let gw = start_gateway(&[
        "--sip-listen-tls",
        &format!("127.0.0.1:{tls_port}"),
        "--tls-cert",
        pki.cert.to_str().unwrap(),
        "--tls-key",
        pki.key.to_str().unwrap(),
    ]);
    let mut roots = rustls::RootCertStore::empty();
    {
        use rustls_pki_types::pem::PemObject;
        for c in rustls_pki_types::CertificateDer::pem_file_iter(&pki.ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let local = tcp.local_addr().unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(options("TLS", local, gw.sip).as_bytes())
        .unwrap();
    let response = read_response(&mut tls);
    assert!(response.starts_with("SIP/2.0 200"), "{response}");
    assert!(response.contains("SIP/2.0/TLS"), "{response}");
    // RFC 5626 keep-alive on the same connection: a CRLF pong.
    tls.write_all(b"\r\n\r\n").unwrap();
    let mut pong = [0u8; 2];
    tls.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"\r\n");
    drop(tls);

    // Garbage instead of a ClientHello: the handshake fails, once, and is counted.
    let mut raw = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    raw.write_all(b"INVITE sip:x SIP/2.0\r\n\r\n").unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sink = Vec::new();
    let _ = raw.read_to_end(&mut sink);
    assert!(wait_until(Duration::from_secs(5), || {
        gw.metric("ontime_sip_tls_handshake_failures_total{side=\"server\"}") == Some(1.0)
    }));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tcp_closes_slow_messages_and_strangers_and_answers_keepalives() {
    let tcp = free_tcp_port();
    let gw = start_gateway(&["--sip-listen-tcp", &format!("127.0.0.1:{tcp}")]);
    // A keep-alive ping gets a pong; an OPTIONS after it is answered on the same connection.
    let mut s = TcpStream::connect(("127.0.0.1", tcp)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"\r\n\r\n").unwrap();
    let mut pong = [0u8; 2];
    s.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"\r\n");
    let local = s.local_addr().unwrap();
    s.write_all(options("TCP", local, gw.sip).as_bytes())
        .unwrap();
    let response = read_response(&mut s);
    assert!(response.starts_with("SIP/2.0 200"), "{response}");

    // Half a message, never finished: the connection is closed after the message timeout.
    let mut slow = TcpStream::connect(("127.0.0.1", tcp)).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    slow.write_all(b"OPTIONS sip:ontime@127.0.0.1 SIP/2.0\r\nContent-Length: 0\r\n")
        .unwrap();
    let mut rest = Vec::new();
    let n = slow.read_to_end(&mut rest).unwrap_or(0);
    assert_eq!(n, 0, "nothing is answered to half a message");
    assert_eq!(
        gw.metric("ontime_sip_dropped_total{reason=\"slow_message\"}"),
        Some(1.0)
    );
    drop(gw);

    // From outside the trunk networks: closed at once, counted, nothing read.
    let tcp = free_tcp_port();
    let gw = start_gateway(&[
        "--sip-listen-tcp",
        &format!("127.0.0.1:{tcp}"),
        "--trunk-cidr",
        "192.0.2.0/24",
    ]);
    let mut stranger = TcpStream::connect(("127.0.0.1", tcp)).unwrap();
    stranger
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = stranger.write_all(options("TCP", local, gw.sip).as_bytes());
    let mut got = Vec::new();
    let _ = stranger.read_to_end(&mut got);
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    assert_eq!(
        gw.metric("ontime_sip_dropped_total{reason=\"untrusted\"}"),
        Some(1.0)
    );
}
