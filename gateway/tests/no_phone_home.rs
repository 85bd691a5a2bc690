//! A telephony box must not phone home. The gateway runs in a network namespace whose only way
//! out is a veth pair to this host, with a default route through it (so any DNS lookup or
//! connection it tried would cross the veth); a call with speech runs inside the namespace on
//! its loopback. tshark on the host side of the veth must see nothing but the metrics scrapes
//! the test itself makes.
//!
//! Needs root (namespaces), `ip`, `sipp`, `tshark`; skips with a printed reason otherwise (in
//! CI a missing tool fails). Everything it creates is removed on drop, pass or fail.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A namespace with a veth to the host, removed on drop.
struct Namespace {
    name: String,
    host_if: String,
    host_ip: String,
    ns_ip: String,
}

fn run(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Namespace {
    fn create() -> Namespace {
        let id = std::process::id() % 10_000;
        let ns = Namespace {
            name: format!("ontime-nph-{id}"),
            host_if: format!("onph{id}h"),
            host_ip: format!("10.254.{}.1", id % 250),
            ns_ip: format!("10.254.{}.2", id % 250),
        };
        let ns_if = format!("onph{id}n");
        let n = ns.name.as_str();
        let steps: Vec<Vec<String>> = vec![
            vec!["ip", "netns", "add", n],
            vec![
                "ip",
                "link",
                "add",
                &ns.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &ns_if,
            ],
            vec!["ip", "link", "set", &ns_if, "netns", n],
            vec![
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{}.disable_ipv6=1", ns.host_if),
            ],
            vec![
                "ip",
                "addr",
                "add",
                &format!("{}/30", ns.host_ip),
                "dev",
                &ns.host_if,
            ],
            vec!["ip", "link", "set", &ns.host_if, "up"],
            vec![
                "ip",
                "netns",
                "exec",
                n,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
            ],
            vec!["ip", "netns", "exec", n, "ip", "link", "set", "lo", "up"],
            vec![
                "ip",
                "netns",
                "exec",
                n,
                "ip",
                "addr",
                "add",
                &format!("{}/30", ns.ns_ip),
                "dev",
                &ns_if,
            ],
            vec!["ip", "netns", "exec", n, "ip", "link", "set", &ns_if, "up"],
            vec![
                "ip",
                "netns",
                "exec",
                n,
                "ip",
                "route",
                "add",
                "default",
                "via",
                &ns.host_ip,
            ],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(str::to_owned).collect())
        .collect();
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            assert!(run(&args), "namespace set-up failed at: {}", step.join(" "));
        }
        ns
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "pids", &self.name]); // best effort below
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = run(&["kill", "-9", pid]);
            }
        }
        let _ = run(&["ip", "link", "del", &self.host_if]);
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[test]
fn the_gateway_sends_nothing_it_was_not_configured_to_send() {
    if !require("ip") || !require("sipp") || !require("tshark") {
        return;
    }
    if !is_root() {
        if std::env::var_os("CI").is_some() {
            panic!("the no-phone-home test needs root in CI");
        }
        eprintln!("SKIP: network namespaces need root");
        return;
    }
    let ns = Namespace::create();
    let metrics_port = free_tcp_port();
    // Capture everything that leaves the namespace except our own scrapes of /metrics.
    let pcap = std::env::temp_dir().join(format!("ontime-nph-{}.pcap", std::process::id()));
    let filter = format!("not (tcp port {metrics_port}) and not arp");
    let mut tshark = Proc {
        child: Command::new("tshark")
            .args(["-q", "-i", &ns.host_if, "-f", &filter, "-w"])
            .arg(&pcap)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tshark"),
        name: "tshark".into(),
    };
    std::thread::sleep(Duration::from_secs(2)); // tshark attaches

    let dir = std::env::temp_dir().join(format!("ontime-nph-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let models = workspace().join(".cache/models");
    let metrics = format!("{}:{metrics_port}", ns.ns_ip);
    let (rtp_first, rtp_last) = (30_000u16, 30_099u16);
    let log = dir.join("gateway.log");
    let mut gateway = Proc {
        child: Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(env!("CARGO_BIN_EXE_ontime-gateway"))
            // As in common::start_gateway: admission by headroom is tested on its own.
            .env("ONTIME_ADMISSION_RESERVE", "0")
            .args([
                "--sip-listen",
                "127.0.0.1:5060",
                "--metrics-listen",
                &metrics,
            ])
            .args(["--rtp-ports", &format!("{rtp_first}-{rtp_last}")])
            .args(["--log-format", "json"])
            .env(
                "ORT_DYLIB_PATH",
                std::env::var_os("ORT_DYLIB_PATH")
                    .unwrap_or_else(|| models.join("libonnxruntime.so.1.31.1").into()),
            )
            .env(
                "ONTIME_MODELS_DIR",
                std::env::var_os("ONTIME_MODELS_DIR").unwrap_or_else(|| models.clone().into()),
            )
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("gateway.err")).unwrap())
            .spawn()
            .expect("gateway in the namespace"),
        name: "ontime-gateway".into(),
    };
    let metrics_addr = metrics.parse().unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while http_get(metrics_addr, "/readyz").map(|r| r.0) != Some(200) {
        assert!(Instant::now() < until, "gateway not ready in the namespace");
        std::thread::sleep(Duration::from_millis(200));
    }

    // A call with speech inside the namespace: SIP, RTP, VAD and Smart Turn all run.
    let speech = fresh_speech(&dir, "Hello, I would like to check my order please.");
    let scen = scenario(
        "caller_speaks.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "12000"),
        ],
    );
    let sipp = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "timeout",
            "60",
            "sipp",
            "127.0.0.1:5060",
        ])
        .args(["-sf", scen.to_str().unwrap(), "-m", "1", "-l", "1"])
        .args([
            "-i",
            "127.0.0.1",
            "-p",
            "5070",
            "-mi",
            "127.0.0.1",
            "-mp",
            "40000",
        ])
        .args(["-timeout", "50s", "-timeout_error", "-nostdin"])
        .stdin(Stdio::null())
        .output()
        .expect("sipp in the namespace");
    assert!(
        sipp.status.success(),
        "the call failed: {}",
        String::from_utf8_lossy(&sipp.stderr)
    );
    let turns = metric_value(
        &http_get(metrics_addr, "/metrics").unwrap().1,
        "ontime_turns_total",
    );
    // Idle a little longer: periodic lookups would come now.
    std::thread::sleep(Duration::from_secs(12));
    gateway.signal("TERM");
    let _ = gateway.wait_timeout(Duration::from_secs(40));
    // One datagram from the namespace (to the discard port) proves the capture sees what
    // leaves it.
    let probe = format!("echo probe > /dev/udp/{}/9", ns.host_ip);
    let _ = run(&["ip", "netns", "exec", &ns.name, "bash", "-c", &probe]);
    std::thread::sleep(Duration::from_millis(500));
    tshark.signal("INT");
    let _ = tshark.wait_timeout(Duration::from_secs(10));

    assert!(
        turns.unwrap_or(0.0) >= 1.0,
        "no turn: the models did not run"
    );
    let summary = packets(&pcap);
    let _ = std::fs::remove_file(&pcap);
    let _ = std::fs::remove_dir_all(&dir);
    // The probe and the host's ICMP answer to it.
    let (probe, others): (Vec<&String>, Vec<&String>) = summary
        .iter()
        .partition(|l| l.contains(" → 9 ") || l.contains("Destination unreachable"));
    assert!(
        !probe.is_empty(),
        "the capture saw not even the test's probe: {summary:?}"
    );
    assert!(
        others.is_empty(),
        "the gateway sent packets nobody configured:\n{}",
        others
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// One line per captured packet (empty: nothing left the namespace).
fn packets(pcap: &Path) -> Vec<String> {
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(pcap)
        .output()
        .expect("tshark -r");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}
