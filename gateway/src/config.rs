//! Gateway configuration: defaults, then a TOML file (`--config`), then environment variables and
//! flags (clap; each flag has an `ONTIME_*` twin). Every error names the field it is about.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;
use serde::Deserialize;

/// A configuration error that names the field at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field's value could not be parsed or is out of range.
    #[error("config field `{field}`: {reason}")]
    Invalid {
        /// The field's name as written in TOML (flags use the same name with dashes).
        field: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The config file could not be read.
    #[error("config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for this schema (toml's message names the key).
    #[error("config file {path}: {message}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// toml's message, which names the offending key and line.
        message: String,
    },
}

/// An inclusive UDP port range for RTP (`20000-20999`). RTP uses the even ports, RTCP the odd one
/// above (RFC 3550 §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// First port (inclusive).
    pub first: u16,
    /// Last port (inclusive).
    pub last: u16,
}

impl FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, b) = s
            .split_once('-')
            .ok_or_else(|| format!("`{s}` is not FIRST-LAST, e.g. 20000-20999"))?;
        let first: u16 = a
            .trim()
            .parse()
            .map_err(|e| format!("first port `{a}`: {e}"))?;
        let last: u16 = b
            .trim()
            .parse()
            .map_err(|e| format!("last port `{b}`: {e}"))?;
        if first == 0 || last < first.saturating_add(1) {
            return Err(format!(
                "`{s}` must hold at least one even/odd pair with 0 < first < last"
            ));
        }
        Ok(PortRange { first, last })
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Which agent answers the calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentKind {
    /// The built-in stub: plays a fixed reply after each completed turn.
    Stub,
    /// A Twilio-Media-Streams bot at this WebSocket URL (separate issue).
    WebSocket(String),
}

impl FromStr for AgentKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "stub" {
            Ok(AgentKind::Stub)
        } else if let Some(rest) = s.strip_prefix("ws://").or_else(|| s.strip_prefix("wss://")) {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            let host = authority.rsplit('@').next().unwrap_or("");
            if host.is_empty() || host.starts_with(':') {
                return Err(format!("`{s}` has no host"));
            }
            Ok(AgentKind::WebSocket(s.to_string()))
        } else {
            Err(format!("`{s}` is neither `stub` nor a ws:// or wss:// URL"))
        }
    }
}

/// Who stops the agent's audio when the caller talks over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BargeIn {
    /// The gateway clears queued agent audio the moment local VAD hears the caller, and tells
    /// the agent.
    Local,
    /// The gateway leaves it to the agent (a bot's `clear`).
    Bot,
}

/// What a call gets when its agent's bot cannot be reached at call start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum AgentUnreachable {
    /// 503 (with Retry-After) before answering, so the trunk can route elsewhere.
    Reject,
    /// Answer, play the fallback message, hang up.
    Fallback,
}

/// Whether call media is SRTP (RFC 3711, keyed by SDES in the SDP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SrtpMode {
    /// Plain RTP only; SRTP offers get 488 with a Warning.
    Off,
    /// Answer SRTP offers (RTP/SAVP, or best-effort crypto on RTP/AVP) in kind, plain ones
    /// plainly.
    Optional,
    /// SRTP only; plain offers get 488 with `Warning: 305 ... "SRTP required"`.
    Required,
}

impl SrtpMode {
    /// The SDP layer's policy.
    pub fn policy(self) -> ontime_sip::SrtpPolicy {
        match self {
            SrtpMode::Off => ontime_sip::SrtpPolicy::Off,
            SrtpMode::Optional => ontime_sip::SrtpPolicy::Optional,
            SrtpMode::Required => ontime_sip::SrtpPolicy::Required,
        }
    }
}

/// What SIP from outside the trunk networks gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum UntrustedSip {
    /// Nothing: dropped before any transaction exists, counted (the default: a public SIP port
    /// is scanned within minutes, and every answer tells a scanner something).
    Drop,
    /// One stateless 403 per request, rate-limited, never retransmitted.
    Reject,
}

/// Command-line flags; each has an environment twin. Unset flags fall back to the file, then defaults.
#[derive(Debug, Default, Parser)]
#[command(
    name = "ontime-gateway",
    version,
    about = "SIP/RTP gateway for AI voice bots that keeps outgoing audio on time"
)]
pub struct Args {
    /// TOML configuration file (flags and environment override it).
    #[arg(long, env = "ONTIME_CONFIG")]
    pub config: Option<PathBuf>,
    /// SIP UDP listen address.
    #[arg(long, env = "ONTIME_SIP_LISTEN")]
    pub sip_listen: Option<String>,
    /// IP written into SDP `c=` and Contact (default: the SIP listen IP).
    #[arg(long, env = "ONTIME_PUBLIC_IP")]
    pub public_ip: Option<String>,
    /// RTP port range FIRST-LAST (even ports RTP, odd RTCP).
    #[arg(long, env = "ONTIME_RTP_PORTS")]
    pub rtp_ports: Option<String>,
    /// Prometheus /metrics, /healthz and /readyz listen address.
    #[arg(long, env = "ONTIME_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// `stub` or a ws:// URL.
    #[arg(long, env = "ONTIME_AGENT")]
    pub agent: Option<String>,
    /// Calls admitted at once; above it INVITEs get 503 with Retry-After.
    #[arg(long, env = "ONTIME_MAX_CALLS")]
    pub max_calls: Option<usize>,
    /// Trunk networks allowed to send INVITEs (repeatable; default loopback only).
    #[arg(long = "trunk-cidr", env = "ONTIME_TRUNK_CIDR", value_delimiter = ',')]
    pub trunk_cidr: Vec<String>,
    /// CPU the real-time sender is pinned to (default: the last CPU of the affinity mask).
    #[arg(long, env = "ONTIME_SENDER_CORE")]
    pub sender_core: Option<usize>,
    /// Record both directions of every call as WAV files into this folder.
    #[arg(long, env = "ONTIME_RECORD")]
    pub record: Option<PathBuf>,
    /// Grace period for calls on SIGTERM before they are hung up (e.g. `30s`).
    #[arg(long, env = "ONTIME_DRAIN_TIMEOUT")]
    pub drain_timeout: Option<String>,
    /// No RTP from the caller for this long ends the call with BYE (e.g. `30s`).
    #[arg(long, env = "ONTIME_RTP_TIMEOUT")]
    pub rtp_timeout: Option<String>,
    /// Longest call before the gateway hangs up (e.g. `1h`).
    #[arg(long, env = "ONTIME_MAX_CALL_DURATION")]
    pub max_call_duration: Option<String>,
    /// Silence after speech stops that ends a turn even if Smart Turn says incomplete (e.g. `2s`).
    #[arg(long, env = "ONTIME_TURN_STOP_TIMEOUT")]
    pub turn_stop_timeout: Option<String>,
    /// Ring time before answering (180 first; e.g. `2s`); 0 answers at once.
    #[arg(long, env = "ONTIME_ANSWER_DELAY")]
    pub answer_delay: Option<String>,
    /// Log format.
    #[arg(long, env = "ONTIME_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// ONNX Runtime shared library (libonnxruntime.so).
    #[arg(long, env = "ORT_DYLIB_PATH")]
    pub ort_dylib_path: Option<PathBuf>,
    /// Folder holding silero_vad.onnx and smart-turn-v3.2-cpu.onnx.
    #[arg(long, env = "ONTIME_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// WAV (8 kHz mono 16-bit) the stub agent replies with (default: the built-in reply).
    #[arg(long, env = "ONTIME_STUB_REPLY")]
    pub stub_reply: Option<PathBuf>,
    /// Barge-in: `local` clears queued agent audio when the caller speaks; `bot` leaves it to
    /// the bot's `clear`.
    #[arg(long, env = "ONTIME_BARGE_IN", value_enum)]
    pub barge_in: Option<BargeIn>,
    /// Most agent audio queued per call, in seconds; beyond it the oldest is dropped.
    #[arg(long, env = "ONTIME_MAX_BUFFERED_SECONDS")]
    pub max_buffered_seconds: Option<f64>,
    /// Bot unreachable at call start: `reject` (503 before answering) or `fallback` (answer,
    /// play the fallback message, hang up).
    #[arg(long, env = "ONTIME_AGENT_UNREACHABLE", value_enum)]
    pub agent_unreachable: Option<AgentUnreachable>,
    /// Longest wait for a bot's WebSocket to open (e.g. `2s`).
    #[arg(long, env = "ONTIME_WS_CONNECT_TIMEOUT")]
    pub ws_connect_timeout: Option<String>,
    /// Bot messages longer than this many bytes are dropped and counted.
    #[arg(long, env = "ONTIME_WS_MAX_MESSAGE_BYTES")]
    pub ws_max_message_bytes: Option<usize>,
    /// Caller frames (20 ms each) queued for a slow bot before new ones are dropped.
    #[arg(long, env = "ONTIME_WS_SEND_QUEUE_FRAMES")]
    pub ws_send_queue_frames: Option<usize>,
    /// Send ontime's own events (speech started/stopped, turn ended, barge-in) to the bot.
    #[arg(long, env = "ONTIME_WS_ONTIME_EVENTS")]
    pub ws_ontime_events: Option<bool>,
    /// Extra `customParameters` in the bot's `start` message, KEY=VALUE (repeatable).
    #[arg(
        long = "ws-custom-parameter",
        env = "ONTIME_WS_CUSTOM_PARAMETER",
        value_delimiter = ','
    )]
    pub ws_custom_parameter: Vec<String>,
    /// INVITE headers copied into the bot's `customParameters` (repeatable), e.g.
    /// `P-Asserted-Identity`; the key is the name as written here.
    #[arg(
        long = "ws-forward-header",
        env = "ONTIME_WS_FORWARD_HEADER",
        value_delimiter = ','
    )]
    pub ws_forward_header: Vec<String>,
    /// PEM file of extra CA certificates trusted for `wss://` bots (besides the system's).
    #[arg(long, env = "ONTIME_WS_CA_FILE")]
    pub ws_ca_file: Option<PathBuf>,
    /// SIP from outside the trunk networks: `drop` (silently, the default) or `reject`
    /// (one stateless 403 per request, rate-limited).
    #[arg(long, env = "ONTIME_UNTRUSTED_SIP", value_enum)]
    pub untrusted_sip: Option<UntrustedSip>,
    /// Messages per second one trusted source may send before the excess is dropped.
    #[arg(long, env = "ONTIME_SIP_RATE_LIMIT")]
    pub sip_rate_limit: Option<u32>,
    /// `Server`/`User-Agent` header value (default `ontime-gateway`, no version; empty: none).
    #[arg(long, env = "ONTIME_SIP_SERVER_HEADER")]
    pub sip_server_header: Option<String>,
    /// Interval of the interim call records written while a call is up (e.g. `60s`); 0: none.
    #[arg(long, env = "ONTIME_INTERIM_RECORD_INTERVAL")]
    pub interim_record_interval: Option<String>,
    /// Listen address of the Twilio-compatible call-control API (off unless set). Its auth
    /// token comes from `ONTIME_API_AUTH_TOKEN` or `--api-auth-token-file`, never a flag.
    #[arg(long, env = "ONTIME_API_LISTEN")]
    pub api_listen: Option<String>,
    /// The API's account SID (`AC` and 32 hex digits): the Basic-auth user, the `{AccountSid}`
    /// of every API path and the `accountSid` bots are told.
    #[arg(long, env = "ONTIME_API_ACCOUNT_SID")]
    pub api_account_sid: Option<String>,
    /// File holding the API's auth token (instead of `ONTIME_API_AUTH_TOKEN`).
    #[arg(long, env = "ONTIME_API_AUTH_TOKEN_FILE")]
    pub api_auth_token_file: Option<PathBuf>,
    /// SIP URI of the provider or SBC that outbound calls (the API's dial-out) go through,
    /// e.g. `sip:192.0.2.1:5060`.
    #[arg(long, env = "ONTIME_TRUNK_URI")]
    pub trunk_uri: Option<String>,
    /// Voice webhook: each inbound call is POSTed here (Twilio's parameters) and runs the TwiML
    /// it answers with (`<Connect><Stream>` to a bot, `<Reject>`, `<Dial>`...).
    #[arg(long, env = "ONTIME_VOICE_URL")]
    pub voice_url: Option<String>,
    /// TwiML file every inbound call runs (instead of `--voice-url`).
    #[arg(long, env = "ONTIME_VOICE_TWIML")]
    pub voice_twiml: Option<PathBuf>,
    /// SRTP for call media: `off`, `optional` (the default: answer in kind) or `required`.
    #[arg(long, env = "ONTIME_SRTP", value_enum)]
    pub srtp: Option<SrtpMode>,
    /// Symmetric RTP, `true` or `false` (the default): latch each call's media to the first
    /// address that sends it a run of valid RTP, whatever its SDP said (trunks behind NAT whose
    /// SDP names a private address). Off, only the SDP's IP is heard.
    #[arg(long, env = "ONTIME_SYMMETRIC_RTP")]
    pub symmetric_rtp: Option<bool>,
    /// Register with this registrar as this address of record (`sip:user@provider`;
    /// repeatable). The password comes from `ONTIME_REGISTER_PASSWORD` or
    /// `--register-password-file`, never a flag.
    #[arg(long = "register", env = "ONTIME_REGISTER", value_delimiter = ',')]
    pub register: Vec<String>,
    /// Digest user name for the registrations (default: each URI's user part).
    #[arg(long, env = "ONTIME_REGISTER_USER")]
    pub register_user: Option<String>,
    /// File holding the registration password (instead of `ONTIME_REGISTER_PASSWORD`).
    #[arg(long, env = "ONTIME_REGISTER_PASSWORD_FILE")]
    pub register_password_file: Option<PathBuf>,
    /// Registration expiry to ask for, in seconds (re-registered at half what is granted).
    #[arg(long, env = "ONTIME_REGISTER_EXPIRES")]
    pub register_expires: Option<u64>,
    /// Challenge INVITEs with digest authentication for this user (on top of the trunk
    /// networks); its password from `ONTIME_TRUNK_AUTH_PASSWORD` or
    /// `--trunk-auth-password-file`.
    #[arg(long, env = "ONTIME_TRUNK_AUTH")]
    pub trunk_auth: Option<String>,
    /// File holding the trunk-auth password.
    #[arg(long, env = "ONTIME_TRUNK_AUTH_PASSWORD_FILE")]
    pub trunk_auth_password_file: Option<PathBuf>,
    /// Digest algorithms the trunk-auth challenges offer, in order (`SHA-256,MD5` by default;
    /// `MD5` alone for clients that answer only the first challenge).
    #[arg(long, env = "ONTIME_TRUNK_AUTH_ALGORITHMS", value_delimiter = ',')]
    pub trunk_auth_algorithms: Vec<String>,
    /// Refuse new calls (503, OPTIONS 503, `/readyz` 503) while the measured headroom is
    /// below this many calls (default 1; 0: measure and report only). `--max-calls` stays a
    /// hard ceiling on top.
    #[arg(long, env = "ONTIME_ADMISSION_RESERVE")]
    pub admission_reserve: Option<usize>,
    /// SIP over TCP listen address (off unless set).
    #[arg(long, env = "ONTIME_SIP_LISTEN_TCP")]
    pub sip_listen_tcp: Option<String>,
    /// SIP over TLS listen address (off unless set; needs `--tls-cert` and `--tls-key`).
    #[arg(long, env = "ONTIME_SIP_LISTEN_TLS")]
    pub sip_listen_tls: Option<String>,
    /// PEM certificate chain the SIP TLS listener presents.
    #[arg(long, env = "ONTIME_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "ONTIME_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// PEM file of extra CA certificates trusted for TLS we originate (SIP over TLS, `wss://`
    /// bots, https callbacks), besides the system's.
    #[arg(long, env = "ONTIME_TLS_CA_FILE")]
    pub tls_ca_file: Option<PathBuf>,
}

/// A secret from `file` (its field named in errors) or else the environment variable `env`.
fn secret(
    field: &'static str,
    file: Option<PathBuf>,
    env: &str,
) -> Result<Option<Secret>, ConfigError> {
    let value = match file {
        Some(path) => std::fs::read_to_string(&path)
            .map_err(|e| ConfigError::Invalid {
                field,
                reason: format!("{}: {e}", path.display()),
            })?
            .trim()
            .to_string(),
        None => std::env::var(env).unwrap_or_default().trim().to_string(),
    };
    Ok((!value.is_empty()).then(|| Secret::new(value)))
}

/// A secret read from the environment or a file: it never reaches a log line (`Debug` hides
/// it) or a command line (there is no flag for its value).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that needs it (authentication, signing).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Where outbound calls go: the trunk's SIP URI and the address it resolved to at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrunkUri {
    /// `host[:port]` of the URI, for the Request-URI of numbers (`sip:+1555...@host:port`).
    pub host_port: String,
    /// Where INVITEs are sent.
    pub addr: SocketAddr,
    /// Over what: `;transport=tcp|tls` or a `sips:` URI, else UDP.
    pub transport: ontime_sip::Transport,
}

impl FromStr for TrunkUri {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use std::net::ToSocketAddrs;
        let t = crate::resolve::SipTarget::parse(s)?;
        let port = t.port.unwrap_or(t.default_port());
        // Resolved once at start-up by the system resolver (A/AAAA): a trunk URI names the
        // proxy itself. Registrars get RFC 3263's SRV lookup (`resolve`).
        let addr = (t.host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| format!("`{s}`: {e}"))?
            .next()
            .ok_or_else(|| format!("`{s}`: the host has no address"))?;
        let host = if t.host.contains(':') {
            format!("[{}]", t.host)
        } else {
            t.host.clone()
        };
        let host_port = match t.port {
            Some(p) => format!("{host}:{p}"),
            None => host,
        };
        Ok(TrunkUri {
            host_port,
            addr,
            transport: t.transport,
        })
    }
}

/// The account SID bots are told when no API is configured (Twilio's shape, all zeros).
pub const DEFAULT_ACCOUNT_SID: &str = "AC00000000000000000000000000000000";

/// The TOML file: the same names as the flags, with underscores.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    sip_listen: Option<String>,
    public_ip: Option<String>,
    rtp_ports: Option<String>,
    metrics_listen: Option<String>,
    agent: Option<String>,
    max_calls: Option<usize>,
    trunk_cidr: Option<Vec<String>>,
    sender_core: Option<usize>,
    record: Option<PathBuf>,
    drain_timeout: Option<String>,
    rtp_timeout: Option<String>,
    max_call_duration: Option<String>,
    turn_stop_timeout: Option<String>,
    answer_delay: Option<String>,
    log_format: Option<LogFormat>,
    ort_dylib_path: Option<PathBuf>,
    models_dir: Option<PathBuf>,
    stub_reply: Option<PathBuf>,
    barge_in: Option<BargeIn>,
    max_buffered_seconds: Option<f64>,
    agent_unreachable: Option<AgentUnreachable>,
    ws_connect_timeout: Option<String>,
    ws_max_message_bytes: Option<usize>,
    ws_send_queue_frames: Option<usize>,
    ws_ontime_events: Option<bool>,
    ws_custom_parameter: Option<Vec<String>>,
    ws_forward_header: Option<Vec<String>>,
    ws_ca_file: Option<PathBuf>,
    untrusted_sip: Option<UntrustedSip>,
    sip_rate_limit: Option<u32>,
    sip_server_header: Option<String>,
    api_listen: Option<String>,
    api_account_sid: Option<String>,
    api_auth_token_file: Option<PathBuf>,
    trunk_uri: Option<String>,
    voice_url: Option<String>,
    voice_twiml: Option<PathBuf>,
    srtp: Option<SrtpMode>,
    symmetric_rtp: Option<bool>,
    register: Option<Vec<String>>,
    register_user: Option<String>,
    register_password_file: Option<PathBuf>,
    register_expires: Option<u64>,
    trunk_auth: Option<String>,
    trunk_auth_password_file: Option<PathBuf>,
    trunk_auth_algorithms: Option<Vec<String>>,
    admission_reserve: Option<usize>,
    sip_listen_tcp: Option<String>,
    sip_listen_tls: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca_file: Option<PathBuf>,
    interim_record_interval: Option<String>,
}

/// The resolved configuration the gateway runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// SIP UDP listen address.
    pub sip_listen: SocketAddr,
    /// IP advertised in SDP and Contact.
    pub public_ip: IpAddr,
    /// RTP port range.
    pub rtp_ports: PortRange,
    /// Metrics/health HTTP listen address.
    pub metrics_listen: SocketAddr,
    /// The agent.
    pub agent: AgentKind,
    /// Admission limit.
    pub max_calls: usize,
    /// Trunk networks allowed to call.
    pub trunk_cidrs: Vec<IpNet>,
    /// Sender core (None: last CPU of the affinity mask).
    pub sender_core: Option<usize>,
    /// Recording folder.
    pub record_dir: Option<PathBuf>,
    /// Drain grace period.
    pub drain_timeout: Duration,
    /// RTP inactivity timeout (None: `rtp_timeout = 0`, never).
    pub rtp_timeout: Option<Duration>,
    /// Maximum call length.
    pub max_call_duration: Duration,
    /// End-of-turn fallback after speech stops.
    pub turn_stop_timeout: Duration,
    /// Ring time before answering.
    pub answer_delay: Duration,
    /// Log format.
    pub log_format: LogFormat,
    /// ONNX Runtime library path (None: ort's default lookup).
    pub ort_dylib_path: Option<PathBuf>,
    /// Models folder (None: the inference crate's default).
    pub models_dir: Option<PathBuf>,
    /// Stub reply WAV (None: built in).
    pub stub_reply: Option<PathBuf>,
    /// Who clears agent audio when the caller talks over it.
    pub barge_in: BargeIn,
    /// Most agent audio queued per call; beyond it the oldest is dropped.
    pub max_buffered: Duration,
    /// What a call gets when its bot is unreachable.
    pub agent_unreachable: AgentUnreachable,
    /// WebSocket connect timeout.
    pub ws_connect_timeout: Duration,
    /// Largest bot message accepted, in bytes.
    pub ws_max_message_bytes: usize,
    /// Per-call queue of caller frames to the bot.
    pub ws_send_queue_frames: usize,
    /// Send ontime's own events to the bot.
    pub ws_ontime_events: bool,
    /// Extra `customParameters` for the bot.
    pub ws_custom_parameters: Vec<(String, String)>,
    /// INVITE headers copied into the bot's `customParameters`.
    pub ws_forward_headers: Vec<String>,
    /// Extra CA certificates (PEM) for `wss://` bots.
    pub ws_ca_file: Option<PathBuf>,
    /// What SIP from outside the trunk networks gets.
    pub untrusted_sip: UntrustedSip,
    /// Messages per second one trusted source may send.
    pub sip_rate_limit: u32,
    /// `Server`/`User-Agent` header value (None: no header).
    pub sip_server_header: Option<String>,
    /// Interim call records while a call is up (None: none).
    pub interim_record_interval: Option<Duration>,
    /// Call-control API listen address (None: no API).
    pub api_listen: Option<SocketAddr>,
    /// The account SID (API user, API paths, `accountSid` for bots).
    pub api_account_sid: String,
    /// The API's auth token (required when the API listens).
    pub api_auth_token: Option<Secret>,
    /// Where outbound calls go.
    pub trunk_uri: Option<TrunkUri>,
    /// Voice webhook for inbound calls.
    pub voice_url: Option<String>,
    /// TwiML every inbound call runs (the file's text).
    pub voice_twiml: Option<String>,
    /// SRTP policy of call media.
    pub srtp: ontime_sip::SrtpPolicy,
    /// Latch call media to its first source instead of requiring the SDP's IP.
    pub symmetric_rtp: bool,
    /// Measured headroom (calls) a new call needs.
    pub admission_reserve: usize,
    /// Registrations: address-of-record URIs.
    pub register: Vec<String>,
    /// Digest user of the registrations (None: each URI's user).
    pub register_user: Option<String>,
    /// Digest password of the registrations (and of challenges to our calls).
    pub register_password: Option<Secret>,
    /// Registration expiry asked for.
    pub register_expires: Duration,
    /// Digest credentials INVITEs must carry (user, password).
    pub trunk_auth: Option<(String, Secret)>,
    /// The algorithms its challenges offer, in order.
    pub trunk_auth_algorithms: Vec<ontime_sip::digest::Algorithm>,
    /// SIP over TCP listen address.
    pub sip_listen_tcp: Option<SocketAddr>,
    /// SIP over TLS listen address.
    pub sip_listen_tls: Option<SocketAddr>,
    /// The TLS listener's certificate chain (PEM).
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Extra CA certificates for TLS we originate (PEM).
    pub tls_ca_file: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sip_listen: SocketAddr::from(([127, 0, 0, 1], 5060)),
            public_ip: IpAddr::from([127, 0, 0, 1]),
            rtp_ports: PortRange {
                first: 20000,
                last: 20999,
            },
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            agent: AgentKind::Stub,
            max_calls: 100,
            trunk_cidrs: vec![
                IpNet::from_str("127.0.0.0/8").expect("ok: literal CIDR"),
                IpNet::from_str("::1/128").expect("ok: literal CIDR"),
            ],
            sender_core: None,
            record_dir: None,
            drain_timeout: Duration::from_secs(30),
            rtp_timeout: Some(Duration::from_secs(30)),
            max_call_duration: Duration::from_secs(3600),
            turn_stop_timeout: Duration::from_secs(3),
            answer_delay: Duration::ZERO,
            log_format: LogFormat::Text,
            ort_dylib_path: None,
            models_dir: None,
            stub_reply: None,
            barge_in: BargeIn::Local,
            max_buffered: Duration::from_secs(60),
            agent_unreachable: AgentUnreachable::Reject,
            ws_connect_timeout: Duration::from_secs(2),
            ws_max_message_bytes: 1 << 20,
            ws_send_queue_frames: 250,
            ws_ontime_events: false,
            ws_custom_parameters: Vec::new(),
            ws_forward_headers: Vec::new(),
            ws_ca_file: None,
            untrusted_sip: UntrustedSip::Drop,
            sip_rate_limit: 500,
            sip_server_header: Some("ontime-gateway".into()),
            interim_record_interval: Some(Duration::from_secs(60)),
            api_listen: None,
            api_account_sid: DEFAULT_ACCOUNT_SID.into(),
            api_auth_token: None,
            trunk_uri: None,
            voice_url: None,
            voice_twiml: None,
            srtp: ontime_sip::SrtpPolicy::Optional,
            symmetric_rtp: false,
            // One call: refuse the call that the measured headroom says would not fit
            // (docs/capacity.md: 128 offered, the excess refused, every admitted call ok on a
            // dedicated core and under 1.0/0.5-CPU quotas). 0 measures and reports only.
            admission_reserve: 1,
            register: Vec::new(),
            register_user: None,
            register_password: None,
            register_expires: Duration::from_secs(3600),
            trunk_auth: None,
            trunk_auth_algorithms: vec![
                ontime_sip::digest::Algorithm::Sha256,
                ontime_sip::digest::Algorithm::Md5,
            ],
            sip_listen_tcp: None,
            sip_listen_tls: None,
            tls_cert: None,
            tls_key: None,
            tls_ca_file: None,
        }
    }
}

fn parse<T: FromStr>(field: &'static str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value.trim().parse::<T>().map_err(|e| ConfigError::Invalid {
        field,
        reason: format!("`{value}`: {e}"),
    })
}

/// A network (`10.0.0.0/8`, `2001:db8::/32`) or one address; the error says which part is
/// wrong (an address, or a prefix too long for its family).
fn parse_cidr(field: &'static str, value: &str) -> Result<IpNet, ConfigError> {
    let value = value.trim();
    let invalid = |reason: String| ConfigError::Invalid { field, reason };
    let (ip, prefix) = match value.split_once('/') {
        Some((ip, prefix)) => (ip, Some(prefix)),
        None => (value, None),
    };
    let ip: IpAddr = ip
        .parse()
        .map_err(|e| invalid(format!("`{value}`: `{ip}` is not an IP address: {e}")))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => max,
        Some(p) => p
            .parse::<u8>()
            .map_err(|_| invalid(format!("`{value}`: prefix length `{p}` is not a number")))?,
    };
    if prefix > max {
        let family = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
        return Err(invalid(format!(
            "`{value}`: prefix length {prefix} is longer than {max}, the most for {family}"
        )));
    }
    IpNet::new(ip, prefix).map_err(|e| invalid(format!("`{value}`: {e}")))
}

fn parse_duration(field: &'static str, value: &str) -> Result<Duration, ConfigError> {
    // A bare number is seconds; otherwise humantime ("500ms", "30s", "1h").
    if let Ok(secs) = value.trim().parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(value.trim()).map_err(|e| ConfigError::Invalid {
        field,
        reason: format!("`{value}`: {e}"),
    })
}

impl Config {
    /// Resolve flags (with their env twins) over the file over the defaults.
    pub fn resolve(args: Args) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                toml::from_str::<FileConfig>(&text).map_err(|e| ConfigError::Toml {
                    path: path.clone(),
                    message: e.to_string(),
                })?
            }
            None => FileConfig::default(),
        };
        let mut c = Config::default();
        macro_rules! pick {
            ($name:ident) => {
                args.$name.clone().or(file.$name.clone())
            };
        }
        if let Some(v) = pick!(sip_listen) {
            c.sip_listen = parse("sip_listen", &v)?;
        }
        c.public_ip = match pick!(public_ip) {
            Some(v) => parse("public_ip", &v)?,
            None => c.sip_listen.ip(),
        };
        if c.public_ip.is_unspecified() {
            return Err(ConfigError::Invalid {
                field: "public_ip",
                reason: "must be set to a routable address when sip_listen is a wildcard".into(),
            });
        }
        if let Some(v) = pick!(rtp_ports) {
            c.rtp_ports = parse("rtp_ports", &v)?;
        }
        if let Some(v) = pick!(metrics_listen) {
            c.metrics_listen = parse("metrics_listen", &v)?;
        }
        if let Some(v) = pick!(agent) {
            c.agent = parse("agent", &v)?;
        }
        if let Some(v) = pick!(max_calls) {
            if v == 0 {
                return Err(ConfigError::Invalid {
                    field: "max_calls",
                    reason: "must be at least 1".into(),
                });
            }
            c.max_calls = v;
        }
        let cidrs = if args.trunk_cidr.is_empty() {
            file.trunk_cidr.clone()
        } else {
            Some(args.trunk_cidr.clone())
        };
        if let Some(list) = cidrs {
            c.trunk_cidrs = list
                .iter()
                .map(|v| parse_cidr("trunk_cidr", v))
                .collect::<Result<_, _>>()?;
        }
        c.sender_core = pick!(sender_core);
        if let Some(core) = c.sender_core {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            if core >= cpus.max(1) * 64 {
                return Err(ConfigError::Invalid {
                    field: "sender_core",
                    reason: format!("CPU {core} does not exist"),
                });
            }
        }
        c.record_dir = pick!(record);
        if let Some(v) = pick!(drain_timeout) {
            c.drain_timeout = parse_duration("drain_timeout", &v)?;
        }
        if let Some(v) = pick!(rtp_timeout) {
            // 0 turns the timeout off (it does not hang up every call at once).
            c.rtp_timeout = Some(parse_duration("rtp_timeout", &v)?).filter(|t| !t.is_zero());
        }
        if let Some(v) = pick!(interim_record_interval) {
            c.interim_record_interval =
                Some(parse_duration("interim_record_interval", &v)?).filter(|t| !t.is_zero());
        }
        if let Some(v) = args.untrusted_sip.or(file.untrusted_sip) {
            c.untrusted_sip = v;
        }
        if let Some(v) = pick!(sip_rate_limit) {
            if v == 0 {
                return Err(ConfigError::Invalid {
                    field: "sip_rate_limit",
                    reason: "must be at least 1 message per second".into(),
                });
            }
            c.sip_rate_limit = v;
        }
        if let Some(v) = pick!(sip_server_header) {
            let v = v.trim().to_string();
            if v.chars().any(|ch| ch.is_control()) {
                return Err(ConfigError::Invalid {
                    field: "sip_server_header",
                    reason: "must not contain control characters".into(),
                });
            }
            c.sip_server_header = (!v.is_empty()).then_some(v);
        }
        if let Some(v) = pick!(max_call_duration) {
            c.max_call_duration = parse_duration("max_call_duration", &v)?;
        }
        if let Some(v) = pick!(turn_stop_timeout) {
            c.turn_stop_timeout = parse_duration("turn_stop_timeout", &v)?;
        }
        if let Some(v) = pick!(answer_delay) {
            c.answer_delay = parse_duration("answer_delay", &v)?;
        }
        if let Some(v) = args.log_format.or(file.log_format) {
            c.log_format = v;
        }
        c.ort_dylib_path = pick!(ort_dylib_path);
        c.models_dir = pick!(models_dir);
        c.stub_reply = pick!(stub_reply);
        if let Some(v) = args.barge_in.or(file.barge_in) {
            c.barge_in = v;
        }
        if let Some(v) = pick!(max_buffered_seconds) {
            // At least one frame; at most a day (Duration::from_secs_f64 panics on overflow).
            if !(0.02..=86_400.0).contains(&v) {
                return Err(ConfigError::Invalid {
                    field: "max_buffered_seconds",
                    reason: format!("{v} is outside 0.02..=86400 seconds"),
                });
            }
            c.max_buffered = Duration::from_secs_f64(v);
        }
        if let Some(v) = args.agent_unreachable.or(file.agent_unreachable) {
            c.agent_unreachable = v;
        }
        if let Some(v) = pick!(ws_connect_timeout) {
            c.ws_connect_timeout = parse_duration("ws_connect_timeout", &v)?;
            if c.ws_connect_timeout.is_zero() {
                return Err(ConfigError::Invalid {
                    field: "ws_connect_timeout",
                    reason: "must be more than 0".into(),
                });
            }
        }
        if let Some(v) = pick!(ws_max_message_bytes) {
            if v < 1024 {
                return Err(ConfigError::Invalid {
                    field: "ws_max_message_bytes",
                    reason: format!("{v} is below 1024 (a single media frame needs ~300)"),
                });
            }
            c.ws_max_message_bytes = v;
        }
        if let Some(v) = pick!(ws_send_queue_frames) {
            if v == 0 {
                return Err(ConfigError::Invalid {
                    field: "ws_send_queue_frames",
                    reason: "must be at least 1".into(),
                });
            }
            c.ws_send_queue_frames = v;
        }
        if let Some(v) = pick!(ws_ontime_events) {
            c.ws_ontime_events = v;
        }
        let custom = if args.ws_custom_parameter.is_empty() {
            file.ws_custom_parameter.clone()
        } else {
            Some(args.ws_custom_parameter.clone())
        };
        if let Some(list) = custom {
            c.ws_custom_parameters = list
                .iter()
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) if !k.trim().is_empty() => {
                        Ok((k.trim().to_string(), v.to_string()))
                    }
                    _ => Err(ConfigError::Invalid {
                        field: "ws_custom_parameter",
                        reason: format!("`{kv}` is not KEY=VALUE"),
                    }),
                })
                .collect::<Result<_, _>>()?;
        }
        let forward = if args.ws_forward_header.is_empty() {
            file.ws_forward_header.clone()
        } else {
            Some(args.ws_forward_header.clone())
        };
        if let Some(list) = forward {
            for name in &list {
                // RFC 3261 §25.1: a header name is a token.
                let token = |ch: char| ch.is_ascii_alphanumeric() || "-.!%*_+`'~".contains(ch);
                if name.is_empty() || !name.chars().all(token) {
                    return Err(ConfigError::Invalid {
                        field: "ws_forward_header",
                        reason: format!("`{name}` is not a SIP header name"),
                    });
                }
            }
            c.ws_forward_headers = list;
        }
        c.ws_ca_file = pick!(ws_ca_file);
        c.resolve_call_control(&args, &file)?;
        c.resolve_transports(&args, &file)?;
        Ok(c)
    }

    /// The SIP transports and TLS files.
    fn resolve_transports(&mut self, args: &Args, file: &FileConfig) -> Result<(), ConfigError> {
        let c = self;
        macro_rules! pick {
            ($name:ident) => {
                args.$name.clone().or(file.$name.clone())
            };
        }
        if let Some(v) = pick!(sip_listen_tcp) {
            c.sip_listen_tcp = Some(parse("sip_listen_tcp", &v)?);
        }
        if let Some(v) = pick!(sip_listen_tls) {
            c.sip_listen_tls = Some(parse("sip_listen_tls", &v)?);
        }
        if let Some(v) = pick!(admission_reserve) {
            c.admission_reserve = v;
        }
        if let Some(v) = args.srtp.or(file.srtp) {
            c.srtp = v.policy();
        }
        if let Some(v) = pick!(symmetric_rtp) {
            c.symmetric_rtp = v;
        }
        let register = if args.register.is_empty() {
            file.register.clone().unwrap_or_default()
        } else {
            args.register.clone()
        };
        for uri in &register {
            crate::resolve::SipTarget::parse(uri).map_err(|reason| ConfigError::Invalid {
                field: "register",
                reason,
            })?;
        }
        c.register = register;
        c.register_user = pick!(register_user);
        c.register_password = secret(
            "register_password_file",
            pick!(register_password_file),
            "ONTIME_REGISTER_PASSWORD",
        )?;
        if !c.register.is_empty() && c.register_password.is_none() {
            return Err(ConfigError::Invalid {
                field: "register_password",
                reason: "registering needs a password: set ONTIME_REGISTER_PASSWORD or \
                         register_password_file"
                    .into(),
            });
        }
        if let Some(v) = pick!(register_expires) {
            if !(60..=86_400).contains(&v) {
                return Err(ConfigError::Invalid {
                    field: "register_expires",
                    reason: format!("{v} is outside 60..=86400 seconds"),
                });
            }
            c.register_expires = Duration::from_secs(v);
        }
        if let Some(user) = pick!(trunk_auth) {
            let password = secret(
                "trunk_auth_password_file",
                pick!(trunk_auth_password_file),
                "ONTIME_TRUNK_AUTH_PASSWORD",
            )?
            .ok_or_else(|| ConfigError::Invalid {
                field: "trunk_auth",
                reason: "needs a password: set ONTIME_TRUNK_AUTH_PASSWORD or \
                         trunk_auth_password_file"
                    .into(),
            })?;
            c.trunk_auth = Some((user, password));
        }
        let algorithms = if args.trunk_auth_algorithms.is_empty() {
            file.trunk_auth_algorithms.clone()
        } else {
            Some(args.trunk_auth_algorithms.clone())
        };
        if let Some(list) = algorithms {
            c.trunk_auth_algorithms = list
                .iter()
                .map(|a| match ontime_sip::digest::Algorithm::parse(a.trim()) {
                    Some(
                        alg @ (ontime_sip::digest::Algorithm::Md5
                        | ontime_sip::digest::Algorithm::Sha256),
                    ) => Ok(alg),
                    _ => Err(ConfigError::Invalid {
                        field: "trunk_auth_algorithms",
                        reason: format!("`{a}` is not MD5 or SHA-256"),
                    }),
                })
                .collect::<Result<_, _>>()?;
            if c.trunk_auth_algorithms.is_empty() {
                return Err(ConfigError::Invalid {
                    field: "trunk_auth_algorithms",
                    reason: "needs at least one algorithm".into(),
                });
            }
        }
        c.tls_cert = pick!(tls_cert);
        c.tls_key = pick!(tls_key);
        c.tls_ca_file = pick!(tls_ca_file).or(c.ws_ca_file.clone());
        if c.sip_listen_tls.is_some() {
            for (field, value) in [("tls_cert", &c.tls_cert), ("tls_key", &c.tls_key)] {
                if value.is_none() {
                    return Err(ConfigError::Invalid {
                        field,
                        reason: "sip_listen_tls needs a PEM certificate and key".into(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The call-control fields: API, trunk, voice webhook.
    fn resolve_call_control(&mut self, args: &Args, file: &FileConfig) -> Result<(), ConfigError> {
        let c = self;
        macro_rules! pick {
            ($name:ident) => {
                args.$name.clone().or(file.$name.clone())
            };
        }
        if let Some(v) = pick!(api_listen) {
            c.api_listen = Some(parse("api_listen", &v)?);
        }
        if let Some(v) = pick!(api_account_sid) {
            let v = v.trim();
            let ok = v.len() == 34
                && v.starts_with("AC")
                && v[2..].chars().all(|ch| ch.is_ascii_hexdigit());
            if !ok {
                return Err(ConfigError::Invalid {
                    field: "api_account_sid",
                    reason: "must be AC followed by 32 hex digits, as Twilio's".into(),
                });
            }
            c.api_account_sid = v.to_string();
        }
        c.api_auth_token = secret(
            "api_auth_token_file",
            pick!(api_auth_token_file),
            "ONTIME_API_AUTH_TOKEN",
        )?;
        if c.api_listen.is_some() && c.api_auth_token.is_none() {
            return Err(ConfigError::Invalid {
                field: "api_auth_token",
                reason: "the API needs an auth token: set ONTIME_API_AUTH_TOKEN or \
                         api_auth_token_file"
                    .into(),
            });
        }
        if let Some(v) = pick!(trunk_uri) {
            c.trunk_uri = Some(parse("trunk_uri", &v)?);
        }
        if let Some(v) = pick!(voice_url) {
            if !(v.starts_with("http://") || v.starts_with("https://")) {
                return Err(ConfigError::Invalid {
                    field: "voice_url",
                    reason: format!("`{v}` is not an http:// or https:// URL"),
                });
            }
            c.voice_url = Some(v);
        }
        if let Some(path) = pick!(voice_twiml) {
            if c.voice_url.is_some() {
                return Err(ConfigError::Invalid {
                    field: "voice_twiml",
                    reason: "set voice_url or voice_twiml, not both".into(),
                });
            }
            let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::Invalid {
                field: "voice_twiml",
                reason: format!("{}: {e}", path.display()),
            })?;
            c.voice_twiml = Some(text);
        }
        Ok(())
    }

    /// Whether `ip` is inside one of the trunk networks.
    pub fn is_trunk(&self, ip: IpAddr) -> bool {
        self.trunk_cidrs.iter().any(|net| net.contains(&ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Args {
        let mut v = vec!["ontime-gateway"];
        v.extend_from_slice(list);
        Args::parse_from(v)
    }

    fn err(list: &[&str]) -> String {
        Config::resolve(args(list)).unwrap_err().to_string()
    }

    #[test]
    fn provider_fields_resolve_and_bad_ones_are_named() {
        let c = Config::resolve(args(&[
            "--srtp",
            "required",
            "--sip-listen-tcp",
            "127.0.0.1:5060",
            "--trunk-uri",
            "sip:127.0.0.1:5070;transport=tcp",
            "--trunk-auth-algorithms",
            "MD5",
        ]))
        .unwrap();
        assert_eq!(c.srtp, ontime_sip::SrtpPolicy::Required);
        assert_eq!(c.sip_listen_tcp, Some("127.0.0.1:5060".parse().unwrap()));
        let trunk = c.trunk_uri.unwrap();
        assert_eq!(trunk.transport, ontime_sip::Transport::Tcp);
        assert_eq!(trunk.host_port, "127.0.0.1:5070");
        assert_eq!(
            c.trunk_auth_algorithms,
            vec![ontime_sip::digest::Algorithm::Md5]
        );
        // sips: defaults to TLS on 5061.
        let c = Config::resolve(args(&["--trunk-uri", "sips:127.0.0.1"])).unwrap();
        let trunk = c.trunk_uri.unwrap();
        assert_eq!(trunk.transport, ontime_sip::Transport::Tls);
        assert_eq!(trunk.addr, "127.0.0.1:5061".parse().unwrap());
        assert!(err(&["--sip-listen-tls", "127.0.0.1:5061"]).starts_with("config field `tls_cert`"));
        assert!(err(&["--trunk-uri", "http://x"]).starts_with("config field `trunk_uri`"));
        assert!(err(&["--register", "mailto:x"]).starts_with("config field `register`"));
        assert!(err(&["--trunk-auth-algorithms", "SHA-512"])
            .starts_with("config field `trunk_auth_algorithms`"));
        assert!(err(&["--api-account-sid", "AC12"]).starts_with("config field `api_account_sid`"));
        // Secrets come from files or the environment; the file's field is named when unreadable.
        assert!(err(&["--api-auth-token-file", "/nonexistent/token"])
            .starts_with("config field `api_auth_token_file`"));
        let dir = std::env::temp_dir().join(format!("ontime-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let c = Config::resolve(args(&[
            "--register",
            "sip:alice@127.0.0.1",
            "--register-password-file",
            file.to_str().unwrap(),
        ]))
        .unwrap();
        assert_eq!(
            c.register_password.as_ref().map(Secret::expose),
            Some("s3cret")
        );
        assert!(!format!("{c:?}").contains("s3cret"), "a secret in Debug");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hardening_fields_resolve_and_bad_ones_are_named() {
        let c = Config::resolve(args(&[])).unwrap();
        assert_eq!(c.untrusted_sip, UntrustedSip::Drop);
        assert_eq!(c.sip_server_header.as_deref(), Some("ontime-gateway"));
        assert_eq!(c.rtp_timeout, Some(Duration::from_secs(30)));
        let c = Config::resolve(args(&[
            "--rtp-timeout",
            "0",
            "--untrusted-sip",
            "reject",
            "--sip-server-header",
            "",
            "--interim-record-interval",
            "0",
        ]))
        .unwrap();
        assert_eq!(c.rtp_timeout, None, "0 turns the RTP timeout off");
        assert_eq!(c.untrusted_sip, UntrustedSip::Reject);
        assert_eq!(c.sip_server_header, None);
        assert_eq!(c.interim_record_interval, None);
        let err = |a: &[&str]| Config::resolve(args(a)).unwrap_err().to_string();
        assert_eq!(
            err(&["--trunk-cidr", "10.0.0.0/33"]),
            "config field `trunk_cidr`: `10.0.0.0/33`: prefix length 33 is longer than 32, the most for IPv4"
        );
        assert!(
            err(&["--trunk-cidr", "10.0.0.300/8"]).contains("`10.0.0.300` is not an IP address")
        );
        assert_eq!(
            err(&["--agent", "ws://"]),
            "config field `agent`: `ws://`: `ws://` has no host"
        );
        assert!(err(&["--agent", "wss://:443/bot"]).contains("has no host"));
        assert!(Config::resolve(args(&["--agent", "ws://bot:8765/media"])).is_ok());
        assert!(err(&["--sip-rate-limit", "0"]).starts_with("config field `sip_rate_limit`"));
        let c = Config::resolve(args(&["--trunk-cidr", "192.0.2.7"])).unwrap();
        assert!(c.is_trunk("192.0.2.7".parse().unwrap()));
        assert!(!c.is_trunk("192.0.2.8".parse().unwrap()));
    }

    #[test]
    fn defaults_are_loopback_and_stub() {
        let c = Config::resolve(args(&[])).unwrap();
        assert_eq!(c.sip_listen.to_string(), "127.0.0.1:5060");
        assert_eq!(c.agent, AgentKind::Stub);
        assert!(c.is_trunk("127.0.0.1".parse().unwrap()));
        assert!(!c.is_trunk("192.0.2.1".parse().unwrap()));
    }

    #[test]
    fn bad_flag_names_the_field() {
        let e = Config::resolve(args(&["--rtp-ports", "20000"])).unwrap_err();
        assert!(e.to_string().contains("`rtp_ports`"), "{e}");
        let e = Config::resolve(args(&["--trunk-cidr", "10.0.0.0/33"])).unwrap_err();
        assert!(e.to_string().contains("`trunk_cidr`"), "{e}");
        let e = Config::resolve(args(&["--drain-timeout", "soon"])).unwrap_err();
        assert!(e.to_string().contains("`drain_timeout`"), "{e}");
    }

    #[test]
    fn websocket_agent_fields_resolve_and_bad_ones_are_named() {
        let c = Config::resolve(args(&[
            "--agent",
            "ws://127.0.0.1:8765/media",
            "--barge-in",
            "bot",
            "--max-buffered-seconds",
            "2.5",
            "--agent-unreachable",
            "fallback",
            "--ws-connect-timeout",
            "500ms",
            "--ws-ontime-events",
            "true",
            "--ws-custom-parameter",
            "tenant=acme,lang=en",
        ]))
        .unwrap();
        assert_eq!(
            c.agent,
            AgentKind::WebSocket("ws://127.0.0.1:8765/media".into())
        );
        assert_eq!(c.barge_in, BargeIn::Bot);
        assert_eq!(c.max_buffered, Duration::from_millis(2500));
        assert_eq!(c.agent_unreachable, AgentUnreachable::Fallback);
        assert_eq!(c.ws_connect_timeout, Duration::from_millis(500));
        assert!(c.ws_ontime_events);
        assert_eq!(
            c.ws_custom_parameters,
            vec![
                ("tenant".into(), "acme".into()),
                ("lang".into(), "en".into())
            ]
        );
        for (flag, value, field) in [
            ("--max-buffered-seconds", "0", "max_buffered_seconds"),
            ("--max-buffered-seconds", "NaN", "max_buffered_seconds"),
            ("--ws-connect-timeout", "0", "ws_connect_timeout"),
            ("--ws-max-message-bytes", "10", "ws_max_message_bytes"),
            ("--ws-send-queue-frames", "0", "ws_send_queue_frames"),
            ("--ws-custom-parameter", "novalue", "ws_custom_parameter"),
            ("--ws-forward-header", "Bad Header", "ws_forward_header"),
        ] {
            let e = Config::resolve(args(&[flag, value])).unwrap_err();
            assert!(e.to_string().contains(&format!("`{field}`")), "{e}");
        }
    }

    #[test]
    fn file_is_overridden_by_flags_and_bad_keys_are_named() {
        let dir = std::env::temp_dir().join(format!("ontime-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("gw.toml");
        std::fs::write(&f, "max_calls = 7\nrtp_ports = \"30000-30099\"\n").unwrap();
        let c =
            Config::resolve(args(&["--config", f.to_str().unwrap(), "--max-calls", "9"])).unwrap();
        assert_eq!(c.max_calls, 9);
        assert_eq!(
            c.rtp_ports,
            PortRange {
                first: 30000,
                last: 30099
            }
        );
        std::fs::write(&f, "max_cals = 7\n").unwrap();
        let e = Config::resolve(args(&["--config", f.to_str().unwrap()])).unwrap_err();
        assert!(e.to_string().contains("max_cals"), "{e}");
        std::fs::write(&f, "max_calls = \"many\"\n").unwrap();
        let e = Config::resolve(args(&["--config", f.to_str().unwrap()])).unwrap_err();
        assert!(e.to_string().contains("max_calls"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn symmetric_rtp_is_off_unless_asked_by_flag_or_file() {
        assert!(!Config::resolve(args(&[])).unwrap().symmetric_rtp);
        assert!(
            Config::resolve(args(&["--symmetric-rtp", "true"]))
                .unwrap()
                .symmetric_rtp
        );
        assert!(Args::try_parse_from(["ontime-gateway", "--symmetric-rtp", "yes"]).is_err());
        let dir = std::env::temp_dir().join(format!("ontime-cfg-sym-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("gw.toml");
        std::fs::write(&f, "symmetric_rtp = true\n").unwrap();
        let file = f.to_str().unwrap();
        assert!(
            Config::resolve(args(&["--config", file]))
                .unwrap()
                .symmetric_rtp
        );
        // The flag wins over the file.
        let c = Config::resolve(args(&["--config", file, "--symmetric-rtp", "false"])).unwrap();
        assert!(!c.symmetric_rtp);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
