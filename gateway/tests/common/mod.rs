//! Shared harness of the gateway's integration tests: start the real binary on free loopback
//! ports, wait for `/readyz`, drive it with sipp, capture with tshark, scrape `/metrics`.
//! Every child process is killed on drop, so a failing test leaves nothing running.

#![allow(dead_code)]

pub mod echo_line;
pub mod linphone;
pub mod pipecat;
pub mod pki;
pub mod uac;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("gateway sits in the workspace")
        .to_path_buf()
}

/// Whether a tool is on PATH; in CI a missing tool is a failure, elsewhere a printed skip.
pub fn require(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !found {
        if std::env::var_os("CI").is_some() {
            panic!("{tool} is required in CI (scripts/setup.sh installs it)");
        }
        eprintln!("SKIP: {tool} not installed (run scripts/setup.sh)");
    }
    found
}

/// A free UDP port on loopback (bound then released; good enough on a test machine).
pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free even UDP port on loopback for a peer's RTP (sipp's `-mp`, a softphone's media port),
/// with the three ports above it free too: RTCP on the next, and sipp binds its video pair at
/// `+2`.
///
/// Masking the low bit off [`free_udp_port`] is not the same: the even port below an odd free
/// one was never probed, and may be the gateway's own SIP port.
pub fn free_media_port() -> u16 {
    for _ in 0..200 {
        let probe = free_udp_port();
        let base = probe & !1;
        if base != probe || u32::from(base) + 3 > u32::from(u16::MAX) {
            continue;
        }
        if (base..base + 4).all(|p| UdpSocket::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    panic!("no free media port");
}

/// A free TCP port on loopback.
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free block of `n` even-aligned UDP ports (RTP/RTCP pairs) on loopback.
///
/// Taken below the kernel's ephemeral range (32768-60999 by default), where [`free_udp_port`]'s
/// ports come from: the gateway hands out RTP ports at random within its range, and a sipp media
/// port probed a moment earlier must never be one of them.
pub fn free_port_range(n: u16) -> (u16, u16) {
    let (low, high) = (20_000u32, 32_000u32);
    let span = (high - low) / 2;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    for attempt in 0..200u32 {
        let pick = seed.wrapping_add(attempt.wrapping_mul(7_919)) % span;
        let base = (low + pick * 2) as u16;
        if u32::from(base) + u32::from(n) > high {
            continue;
        }
        let ok = (base..base + n).all(|p| UdpSocket::bind(("127.0.0.1", p)).is_ok());
        if ok {
            return (base, base + n - 1);
        }
    }
    panic!("no free port range");
}

/// A running process killed on drop.
pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Proc {
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status();
    }

    /// Wait for exit up to `limit`.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A gateway under test.
pub struct Gateway {
    pub proc: Proc,
    pub sip: SocketAddr,
    pub metrics: SocketAddr,
    pub rtp_ports: (u16, u16),
    pub log: PathBuf,
}

/// Start `ontime-gateway` with free ports and extra flags; waits for `/readyz`.
pub fn start_gateway(extra: &[&str]) -> Gateway {
    start_program(Path::new(env!("CARGO_BIN_EXE_ontime-gateway")), extra)
}

/// Start `ontime-gateway` like [`start_gateway`], with extra environment variables (secrets such
/// as `ONTIME_API_AUTH_TOKEN` never go on the command line).
pub fn start_gateway_env(extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    start_program_env(Path::new(env!("CARGO_BIN_EXE_ontime-gateway")), extra, env)
}

/// Start a program that takes the gateway's flags (the binary, or a program embedding the
/// library) with free ports and extra flags; waits for `/readyz`.
pub fn start_program(program: &Path, extra: &[&str]) -> Gateway {
    start_program_env(program, extra, &[])
}

/// Start the gateway and wait for `/healthz` only: for a gateway that is up but, by design,
/// not ready for calls (e.g. no measured headroom to spare).
pub fn start_gateway_alive(extra: &[&str]) -> Gateway {
    start_until(
        Path::new(env!("CARGO_BIN_EXE_ontime-gateway")),
        extra,
        &[],
        "/healthz",
    )
}

/// [`start_program`] with extra environment variables.
pub fn start_program_env(program: &Path, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    start_until(program, extra, env, "/readyz")
}

/// Whether a gateway's standard error says it could not bind an address another process took.
pub fn lost_a_port(stderr: &str) -> bool {
    stderr.contains("Address already in use") || stderr.contains("os error 98")
}

/// Starts to try when a port probed free is taken before the gateway binds it.
const PORT_RACE_ATTEMPTS: u32 = 3;

fn start_until(program: &Path, extra: &[&str], env: &[(&str, &str)], until_200: &str) -> Gateway {
    // The ports are probed free and released before the gateway binds them: another test's
    // client may take one in between (the SIP and metrics ports come from the ephemeral range
    // every client socket draws from). Then the gateway exits saying so, and it starts again on
    // other ports; any other early exit fails the test.
    for attempt in 1..=PORT_RACE_ATTEMPTS {
        match try_start(program, extra, env, until_200) {
            Ok(gw) => return gw,
            Err(stderr) if lost_a_port(&stderr) && attempt < PORT_RACE_ATTEMPTS => {
                eprintln!("gateway start {attempt}: a port was taken, again on others: {stderr}");
            }
            Err(stderr) => panic!("gateway exited early: {stderr}"),
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// One start: the gateway once ready, or its standard error if it exited first.
fn try_start(
    program: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
    until_200: &str,
) -> Result<Gateway, String> {
    let sip: SocketAddr = format!("127.0.0.1:{}", free_udp_port()).parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
    let rtp_ports = free_port_range(80);
    let dir = std::env::temp_dir().join(format!("ontime-gw-{}-{}", std::process::id(), sip.port()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("gateway.log");
    let models = workspace().join(".cache/models");
    let mut cmd = Command::new(program);
    cmd.args([
        "--sip-listen",
        &sip.to_string(),
        "--metrics-listen",
        &metrics.to_string(),
        "--rtp-ports",
        &format!("{}-{}", rtp_ports.0, rtp_ports.1),
        "--log-format",
        "json",
    ])
    .args(extra)
    // Admission by measured headroom is tested on its own (kamailio_dispatch.rs, the headroom
    // unit tests): elsewhere a debug build sharing two cores with parallel tests must not see
    // a late tick or a slow second refuse the call under test. A test's own flag wins.
    .env("ONTIME_ADMISSION_RESERVE", "0")
    .envs(env.iter().copied())
    .env("RUST_LOG", "info")
    .stdin(Stdio::null())
    .stdout(std::fs::File::create(&log).unwrap())
    .stderr(std::fs::File::create(dir.join("gateway.err")).unwrap());
    if std::env::var_os("ORT_DYLIB_PATH").is_none() {
        cmd.env("ORT_DYLIB_PATH", models.join("libonnxruntime.so.1.31.1"));
    }
    if std::env::var_os("ONTIME_MODELS_DIR").is_none() {
        cmd.env("ONTIME_MODELS_DIR", &models);
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    let mut gw = Gateway {
        proc: Proc {
            child,
            name: "ontime-gateway".into(),
        },
        sip,
        metrics,
        rtp_ports,
        log,
    };
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((200, _)) = http_get(metrics, until_200) {
            return Ok(gw);
        }
        if let Ok(Some(status)) = gw.proc.child.try_wait() {
            return Err(format!("{status}: {}", gw.stderr()));
        }
        assert!(
            Instant::now() < until,
            "gateway not ready in 30 s: {}",
            gw.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Gateway {
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.log.with_file_name("gateway.err")).unwrap_or_default()
    }
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// Scrape `/metrics` and return the value of a sample (exact name with labels, as rendered).
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = http_get(self.metrics, "/metrics")?;
        metric_value(&body, series)
    }
    pub fn metrics_text(&self) -> String {
        http_get(self.metrics, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }
}

/// Find `series` (e.g. `ontime_calls_active` or `ontime_calls_rejected_total{reason="max_calls"}`).
pub fn metric_value(body: &str, series: &str) -> Option<f64> {
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// The turns of one call playing `fixtures/callers/utterance_1` ("Hello, I would like to check
/// the status of my order please."), from the gateway's `/metrics` body: one, or two when the
/// pause after "Hello," ended a turn early (Smart Turn calls "Hello" complete; whether the
/// pause reaches the early end's 160 ms of quiet depends on where the VAD's 32 ms chunks fall
/// and on the model's last digits on the host's CPU) and the caller's next words then cut the
/// reply. Either way, exactly: every turn but the last was cut by a barge-in.
pub fn assert_utterance_1_turns(body: &str, who: &str) -> f64 {
    let turns = metric_value(body, "ontime_turns_total").unwrap_or(0.0);
    let barge_ins = metric_value(body, "ontime_barge_ins_total").unwrap_or(0.0);
    assert!(
        turns == 1.0 || turns == 2.0,
        "{who}: {turns} turns for one utterance:\n{body}"
    );
    assert_eq!(
        barge_ins,
        turns - 1.0,
        "{who}: turns other than the last not cut by the caller:\n{body}"
    );
    turns
}

/// A minimal HTTP/1.1 GET over std (tests only): status and body.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// A sipp scenario from `fixtures/sipp`, with placeholders replaced, written to a temp file.
pub fn scenario(name: &str, replacements: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(workspace().join("fixtures/sipp").join(name)).unwrap();
    for (k, v) in replacements {
        text = text.replace(k, v);
    }
    // One file per call of this: tests of one binary run in parallel, and two filling the same
    // scenario differently must not share a path.
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("ontime-{}-{n}-{name}", std::process::id()));
    std::fs::write(&out, text).unwrap();
    out
}

/// Run sipp with a scenario against the gateway: `calls` calls, bounded by `timeout`.
pub fn sipp(
    gw: &impl SipTarget,
    scenario: &Path,
    calls: u32,
    media_port: u16,
    timeout: Duration,
) -> (bool, String) {
    let local = free_udp_port();
    let out = Command::new("timeout")
        .arg(format!("{}", timeout.as_secs() + 5))
        .arg("sipp")
        .arg(gw.sip_addr().to_string())
        .args(["-sf", scenario.to_str().unwrap()])
        .args([
            "-m",
            &calls.to_string(),
            "-l",
            &calls.to_string(),
            "-r",
            "10",
        ])
        .args(["-i", "127.0.0.1", "-p", &local.to_string()])
        .args(["-mi", "127.0.0.1", "-mp", &media_port.to_string()])
        .args([
            "-timeout",
            &format!("{}s", timeout.as_secs()),
            "-timeout_error",
        ])
        .args(["-nostdin", "-trace_err", "-error_file", "/dev/stderr"])
        .stdin(Stdio::null())
        .output()
        .expect("run sipp");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A tshark capture of loopback UDP on the given ports, stopped (SIGINT) and flushed on `finish`.
pub struct Capture {
    proc: Proc,
    pub file: PathBuf,
}

pub fn capture(ports: &[u16]) -> Capture {
    let file = std::env::temp_dir().join(format!(
        "ontime-cap-{}-{}.pcap",
        std::process::id(),
        ports[0]
    ));
    let filter = ports
        .iter()
        .map(|p| format!("udp port {p}"))
        .collect::<Vec<_>>()
        .join(" or ");
    let child = Command::new("tshark")
        .args([
            "-i",
            "lo",
            "-f",
            &filter,
            "-w",
            file.to_str().unwrap(),
            "-F",
            "pcap",
            "-q",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tshark");
    // tshark prints "Capturing on 'Loopback'" once the capture runs.
    let mut proc = Proc {
        child,
        name: "tshark".into(),
    };
    let mut err = proc.child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let until = Instant::now() + Duration::from_secs(15);
    let mut byte = [0u8; 1];
    while Instant::now() < until && !String::from_utf8_lossy(&seen).contains("Capturing on") {
        match err.read(&mut byte) {
            Ok(1) => seen.push(byte[0]),
            _ => break,
        }
    }
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = err.read_to_end(&mut sink);
    });
    Capture { proc, file }
}

impl Capture {
    pub fn finish(mut self) -> PathBuf {
        std::thread::sleep(Duration::from_millis(300));
        self.proc.signal("INT");
        let _ = self.proc.wait_timeout(Duration::from_secs(10));
        self.file.clone()
    }
}

impl Gateway {
    /// A view of a gateway owned elsewhere (for sipp runs from another thread): only the SIP
    /// address is meaningful, and dropping it kills nothing.
    pub fn borrowed(sip: SocketAddr) -> BorrowedGateway {
        BorrowedGateway { sip }
    }
}

/// See [`Gateway::borrowed`].
pub struct BorrowedGateway {
    pub sip: SocketAddr,
}

/// Something sipp can dial.
pub trait SipTarget {
    fn sip_addr(&self) -> SocketAddr;
}
impl SipTarget for Gateway {
    fn sip_addr(&self) -> SocketAddr {
        self.sip
    }
}
impl SipTarget for BorrowedGateway {
    fn sip_addr(&self) -> SocketAddr {
        self.sip
    }
}

/// A sipp caller running in the background (one process, killed on drop): start it with
/// [`spawn_sipp`], collect its verdict with [`SippCall::finish`].
pub struct SippCall {
    proc: Proc,
    out: PathBuf,
}

/// Start sipp with a scenario against `target` without waiting for it: `calls` calls, one at a
/// time, bounded by `timeout` (sipp's own `-timeout`, and the process is killed on drop).
pub fn spawn_sipp(
    target: SocketAddr,
    scenario: &Path,
    calls: u32,
    media_port: u16,
    timeout: Duration,
) -> SippCall {
    let local = free_udp_port();
    let out = std::env::temp_dir().join(format!("ontime-sipp-{}-{local}.log", std::process::id()));
    let log = std::fs::File::create(&out).unwrap();
    let child = Command::new("sipp")
        .arg(target.to_string())
        .args(["-sf", scenario.to_str().unwrap()])
        .args(["-m", &calls.to_string(), "-l", "1", "-r", "10"])
        .args(["-i", "127.0.0.1", "-p", &local.to_string()])
        .args(["-mi", "127.0.0.1", "-mp", &media_port.to_string()])
        .args([
            "-timeout",
            &format!("{}s", timeout.as_secs()),
            "-timeout_error",
        ])
        .args(["-nostdin", "-trace_err", "-error_file", "/dev/stderr"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn sipp");
    SippCall {
        proc: Proc {
            child,
            name: "sipp".into(),
        },
        out,
    }
}

/// Start sipp as a UAS (its scenario begins with a `recv`) listening on `127.0.0.1:sip_port`,
/// for `calls` calls, its media on `media_port`, bounded by `timeout` (killed on drop).
pub fn spawn_sipp_uas(
    scenario: &Path,
    sip_port: u16,
    calls: u32,
    media_port: u16,
    timeout: Duration,
) -> SippCall {
    let out = std::env::temp_dir().join(format!(
        "ontime-sipp-uas-{}-{sip_port}.log",
        std::process::id()
    ));
    let log = std::fs::File::create(&out).unwrap();
    let child = Command::new("sipp")
        .args(["-sf", scenario.to_str().unwrap(), "-m", &calls.to_string()])
        .args(["-i", "127.0.0.1", "-p", &sip_port.to_string()])
        .args(["-mi", "127.0.0.1", "-mp", &media_port.to_string()])
        .args(["-timeout", &format!("{}s", timeout.as_secs())])
        .args(["-timeout_error", "-nostdin", "-trace_err"])
        .args(["-error_file", "/dev/stderr"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn sipp (UAS)");
    SippCall {
        proc: Proc {
            child,
            name: "sipp-uas".into(),
        },
        out,
    }
}

impl SippCall {
    /// Wait for sipp to exit (up to `limit`, then it is killed): success and its output.
    pub fn finish(mut self, limit: Duration) -> (bool, String) {
        let status = self.proc.wait_timeout(limit);
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let _ = std::fs::remove_file(&self.out);
        match status {
            Some(s) => (s.success(), text),
            None => (false, format!("sipp still running after {limit:?}\n{text}")),
        }
    }

    /// Whether sipp has exited already.
    pub fn exited(&mut self) -> bool {
        matches!(self.proc.child.try_wait(), Ok(Some(_)))
    }
}

/// Kamailio running `deploy/kamailio/kamailio.cfg` on a free loopback port, dispatching to the
/// given gateways. It runs in its own process group (the main process forks workers), and the
/// whole group is stopped on drop.
pub struct Kamailio {
    child: Child,
    /// The front door's SIP address.
    pub sip: SocketAddr,
    /// The run folder (config copy, dispatcher list, control socket, log).
    pub dir: PathBuf,
    ctl: PathBuf,
}

/// Start Kamailio with the project's config, `gateways` as dispatcher set 1, and extra `-A`
/// defines (e.g. `PING_INTERVAL=2`); waits until its control socket answers.
pub fn start_kamailio(gateways: &[SocketAddr], defines: &[&str]) -> Kamailio {
    use std::os::unix::process::CommandExt;
    let sip: SocketAddr = format!("127.0.0.1:{}", free_udp_port()).parse().unwrap();
    let dir =
        std::env::temp_dir().join(format!("ontime-kam-{}-{}", std::process::id(), sip.port()));
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let list: String = gateways
        .iter()
        .enumerate()
        .map(|(i, gw)| format!("1 sip:{gw} 0 0 duid=gw{i}\n"))
        .collect();
    let list_file = dir.join("dispatcher.list");
    std::fs::write(&list_file, list).unwrap();
    let ctl = dir.join("run/kamailio_ctl");
    let cfg = workspace().join("deploy/kamailio/kamailio.cfg");
    let mut cmd = Command::new("kamailio");
    cmd.args([
        "-f",
        cfg.to_str().unwrap(),
        "-DD",
        "-E",
        "-m",
        "32",
        "-M",
        "8",
    ])
    .args(["-P", dir.join("run/kamailio.pid").to_str().unwrap()])
    .args(["-Y", dir.join("run").to_str().unwrap()])
    .args(["-w", dir.to_str().unwrap()])
    .args(["-A", &format!("LISTEN=udp:{sip}")])
    .args([
        "-A",
        &format!("DISPATCHER_LIST=\"{}\"", list_file.display()),
    ])
    .args(["-A", &format!("CTL_SOCKET=\"unix:{}\"", ctl.display())]);
    for d in defines {
        cmd.args(["-A", d]);
    }
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("kamailio.log")).unwrap())
        .stderr(std::fs::File::create(dir.join("kamailio.err")).unwrap())
        .process_group(0);
    let child = cmd.spawn().expect("spawn kamailio");
    let mut kam = Kamailio {
        child,
        sip,
        dir,
        ctl,
    };
    let until = Instant::now() + Duration::from_secs(15);
    while kam.kamcmd(&["core.version"]).is_none() {
        if let Ok(Some(status)) = kam.child.try_wait() {
            panic!("kamailio exited early with {status}: {}", kam.log());
        }
        assert!(
            Instant::now() < until,
            "kamailio not up in 15 s: {}",
            kam.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    kam
}

impl Kamailio {
    /// Kamailio's log (stderr, where `-E` sends it).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kamailio.err")).unwrap_or_default()
    }

    /// Run `kamcmd` against this instance's control socket; its output when it succeeded.
    pub fn kamcmd(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("kamcmd")
            .arg("-s")
            .arg(format!("unix:{}", self.ctl.display()))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The dispatcher's view of each destination: (URI, flags), flags like `AP` (active,
    /// probing) or `IP` (inactive, probing).
    pub fn destinations(&self) -> Vec<(String, String)> {
        let text = self.kamcmd(&["dispatcher.list"]).unwrap_or_default();
        let mut out = Vec::new();
        let mut uri: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if let Some(u) = line.strip_prefix("URI:") {
                uri = Some(u.trim().to_string());
            } else if let Some(f) = line.strip_prefix("FLAGS:") {
                if let Some(u) = uri.take() {
                    out.push((u, f.trim().to_string()));
                }
            }
        }
        out
    }

    /// Whether the dispatcher currently sends calls to `gw` (its flags start with `A`).
    pub fn is_active(&self, gw: SocketAddr) -> Option<bool> {
        let uri = format!("sip:{gw}");
        self.destinations()
            .into_iter()
            .find(|(u, _)| *u == uri)
            .map(|(_, flags)| flags.starts_with('A'))
    }
}

impl Drop for Kamailio {
    fn drop(&mut self) {
        // The main process stops its workers on SIGTERM; KILL the group if that did not work.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
        // Keep the log of a failed test for reading; remove the run folder otherwise.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Caller speech the gateway has never heard: `text` spoken by espeak-ng now, as an 8 kHz µ-law
/// WAV in `dir` (a committed utterance when espeak-ng or sox is missing).
///
/// Keep the caller's sentences free of inner pauses (commas): Smart Turn may rightly judge
/// "Hello," a complete turn, and the reply then starts mid-sentence.
pub fn fresh_speech(dir: &Path, text: &str) -> PathBuf {
    let raw = dir.join("fresh.wav");
    let out = dir.join("fresh.ulaw.wav");
    let ok = Command::new("espeak-ng")
        .args(["-v", "en-us", "-s", "170", "-w"])
        .arg(&raw)
        .arg(text)
        .status()
        .is_ok_and(|s| s.success())
        // No dither (`-D`): sox's default dither is random noise, so each run's caller said
        // something slightly different, and Smart Turn's verdicts can move with it (on the
        // inference tests' turns they did, by up to 0.3). Without it, one source of run-to-run
        // change is gone from a test whose turn once ended at a 160 ms pause inside the
        // sentence in CI (`pipecat_bot`, 2026-12-04; the cause there is not established).
        && Command::new("sox")
            .arg("-D")
            .arg(&raw)
            .args(["-r", "8000", "-c", "1", "-e", "mu-law"])
            .arg(&out)
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        out
    } else {
        eprintln!("espeak-ng/sox missing: using a committed utterance");
        workspace().join("fixtures/callers/utterance_1.ulaw.wav")
    }
}

/// One RTP packet of a capture.
#[derive(Debug, Clone, Copy)]
pub struct RtpRow {
    /// Capture time, Unix seconds.
    pub time: f64,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Below -45 dBFS RMS: silence, comfort level or an espeak tail, not speech.
    pub silent: bool,
}

/// Whether a µ-law frame is below -45 dBFS RMS (silence, comfort level or an espeak tail).
pub fn ulaw_is_silent(frame: &[u8]) -> bool {
    let energy: f64 = frame
        .iter()
        .map(|&b| f64::from(ontime_rtp::g711::ulaw_decode(b)).powi(2))
        .sum();
    (energy / frame.len().max(1) as f64).sqrt() < 32768.0 * 10f64.powf(-45.0 / 20.0)
}

/// The RTP packets (µ-law) of a capture on `media_port`, decoded as RTP by tshark.
pub fn rtp_rows(pcap: &Path, media_port: u16) -> Vec<RtpRow> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={media_port},rtp")])
        .args([
            "-Y",
            "rtp",
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
            "-e",
            "udp.srcport",
        ])
        .args(["-e", "udp.dstport", "-e", "rtp.payload"])
        .output()
        .expect("tshark -r");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() < 4 {
                return None;
            }
            let hex = f[3].replace(':', "");
            let bytes: Vec<u8> = (0..hex.len() / 2)
                .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
                .collect();
            Some(RtpRow {
                time: f[0].parse().ok()?,
                src_port: f[1].parse().ok()?,
                dst_port: f[2].parse().ok()?,
                silent: ulaw_is_silent(&bytes),
            })
        })
        .collect()
}

/// Poll `f` every 100 ms until it holds or `limit` passes; its last verdict.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

/// The RTP port of a call, from the gateway's log ("call admitted" carries `rtp_port`).
pub fn gw_rtp_port(gw: &Gateway, call_id: &str) -> u16 {
    let log = gw.stdout();
    let line = log
        .lines()
        .find(|l| l.contains("call admitted") && l.contains(call_id))
        .unwrap_or_else(|| panic!("no admission line for {call_id}:\n{log}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["fields"]["rtp_port"].as_u64().expect("rtp_port") as u16
}
