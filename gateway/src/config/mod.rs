//! Gateway configuration: defaults, then a TOML file (`--config`), then environment variables and
//! flags (clap; each flag has an `ONTIME_*` twin). Every error names the field it is about.
//!
//! `Args` is the one schema for all three. Its clap derive and attributes sit behind the `cli`
//! feature (`cfg_attr`), so a library build without `cli` keeps the same fields and TOML keys and
//! needs no clap: an embedder fills `Args` in code or from a file and resolves it the same way.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

mod args;
mod bounds;

pub use args::Args;
use bounds::*;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum BargeIn {
    /// The gateway clears queued agent audio the moment local VAD hears the caller, and tells
    /// the agent.
    Local,
    /// The gateway leaves it to the agent (a bot's `clear`).
    Bot,
}

/// What a call gets when its agent's bot cannot be reached at call start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum AgentUnreachable {
    /// 503 (with Retry-After) before answering, so the trunk can route elsewhere.
    Reject,
    /// Answer, play the fallback message, hang up.
    Fallback,
}

/// Whether call media is SRTP (RFC 3711, keyed by SDES in the SDP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum UntrustedSip {
    /// Nothing: dropped before any transaction exists, counted (the default: a public SIP port
    /// is scanned within minutes, and every answer tells a scanner something).
    Drop,
    /// One stateless 403 per request, rate-limited, never retransmitted.
    Reject,
}

/// `--codecs`: names from [`ontime_sip::Codec::ALL`], comma-separated, each once, at least one.
fn parse_codecs(value: &str) -> Result<Vec<ontime_sip::Codec>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        field: "codecs",
        reason,
    };
    let known = || ontime_sip::Codec::ALL.map(|c| c.encoding_name()).join(", ");
    let mut codecs = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let codec = ontime_sip::Codec::from_name(name).ok_or_else(|| {
            invalid(format!(
                "`{name}` is not a codec ontime speaks ({})",
                known()
            ))
        })?;
        if codecs.contains(&codec) {
            return Err(invalid(format!("`{name}` is listed twice")));
        }
        codecs.push(codec);
    }
    if codecs.is_empty() {
        return Err(invalid(format!("no codec given (from {})", known())));
    }
    Ok(codecs)
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
        let t = crate::resolve::SipTarget::parse(s).map_err(|e| e.to_string())?;
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

/// The reply hold-back's default cap (`--reply-hold-max`): a caller's mid-sentence pauses run to
/// about 1.5 s (the load harness's 0.7–1.2 s reach the VAD as up to 1.54 s), and each held
/// reply costs a caller who paused before up to this on a sentence said in one go.
pub const DEFAULT_REPLY_HOLD_MAX: Duration = Duration::from_millis(1800);

/// The account SID bots are told when no API is configured (Twilio's shape, all zeros).
pub const DEFAULT_ACCOUNT_SID: &str = "AC00000000000000000000000000000000";

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
    /// RTP inactivity timeout (None: `rtp_timeout = "off"`, never).
    pub rtp_timeout: Option<Duration>,
    /// Maximum call length.
    pub max_call_duration: Duration,
    /// End-of-turn fallback after speech stops.
    pub turn_stop_timeout: Duration,
    /// Speculative Smart Turn after this much quiet (`TurnParams::speculate_after`; None: off).
    pub turn_speculate_after: Option<Duration>,
    /// The inference thread's VAD gather window (`PoolConfig::vad_gather`).
    pub vad_gather: Duration,
    /// The quiet guard's peak level (`PoolConfig::vad_quiet_peak`); 0 turns it off.
    pub vad_quiet_peak: u16,
    /// Speech pairing (`PoolConfig::vad_pair_after`, set past the barge-in horizon).
    pub vad_pair_speech: bool,
    /// Smart Turn's attention softmax in float (`PoolConfig::turn_graph`).
    pub turn_float_softmax: bool,
    /// Smart Turn's attention softmax on ONNX Runtime's kernel (`PoolConfig::turn_graph`).
    pub turn_runtime_softmax: bool,
    /// Smart Turn's attention products on ONNX Runtime's kernel (`PoolConfig::turn_graph`).
    pub turn_runtime_products: bool,
    /// Silero VAD on its published graph (`PoolConfig::vad_graph`).
    pub vad_published_graph: bool,
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
    /// Caller speech over the bot shorter than this is a backchannel, not a barge-in.
    pub barge_in_min_speech: Duration,
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
    /// The bot's audio format (both ways).
    pub ws_audio: ontime_twilio::StreamAudio,
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
    /// Trunk codecs in order of preference.
    pub codecs: Vec<ontime_sip::Codec>,
    /// Latch call media to its first source instead of requiring the SDP's IP.
    pub symmetric_rtp: bool,
    /// Cancel the line's echo of the reply in what the barge-in VAD hears.
    pub echo_canceller: bool,
    /// Hold replies back after doubtful turn ends and for callers who pause mid-sentence.
    pub reply_hold_back: bool,
    /// A final pitch fall lifts the habit wait.
    pub reply_hold_fall: bool,
    /// The doubt wait at probability 0.5 (zero: no doubt wait).
    pub reply_hold_doubt: Duration,
    /// The longest a reply waits after its verdict.
    pub reply_hold_max: Duration,
    /// `<Dial>` transfers by REFER instead of bridging a second leg.
    pub dial_by_refer: bool,
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
            turn_speculate_after: ontime_inference::TurnParams::default().speculate_after,
            vad_gather: ontime_inference::config::DEFAULT_VAD_GATHER,
            vad_quiet_peak: ontime_inference::vad::QUIET_PEAK.unsigned_abs(),
            vad_pair_speech: true,
            turn_float_softmax: false,
            turn_runtime_softmax: false,
            turn_runtime_products: false,
            vad_published_graph: false,
            answer_delay: Duration::ZERO,
            log_format: LogFormat::Text,
            ort_dylib_path: None,
            models_dir: None,
            stub_reply: None,
            barge_in: BargeIn::Local,
            // Off by default: telling a backchannel from an interruption waits the minimum plus
            // the VAD's 200 ms stop time, so a real interruption would be cut some 600 ms after
            // its onset instead of within 300 ms. 400ms is the setting for bots that want
            // backchannels to pass.
            barge_in_min_speech: Duration::ZERO,
            max_buffered: Duration::from_secs(60),
            agent_unreachable: AgentUnreachable::Reject,
            ws_connect_timeout: Duration::from_secs(2),
            ws_max_message_bytes: 1 << 20,
            ws_send_queue_frames: 250,
            ws_ontime_events: false,
            ws_audio: ontime_twilio::StreamAudio::Mulaw8k,
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
            codecs: ontime_sip::Codec::ALL.to_vec(),
            symmetric_rtp: false,
            echo_canceller: true,
            reply_hold_back: true,
            reply_hold_fall: true,
            reply_hold_doubt: Duration::ZERO,
            reply_hold_max: DEFAULT_REPLY_HOLD_MAX,
            dial_by_refer: false,
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

impl Config {
    /// Resolve flags (with their env twins) over the file over the defaults.
    pub fn resolve(args: Args) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                toml::from_str::<Args>(&text).map_err(|e| ConfigError::Toml {
                    path: path.clone(),
                    message: e.to_string(),
                })?
            }
            None => Args::default(),
        };
        let a = args.over(file);
        let mut c = Config::default();
        if let Some(v) = &a.sip_listen {
            c.sip_listen = parse("sip_listen", v)?;
        }
        c.public_ip = match a.public_ip.clone() {
            Some(v) => parse("public_ip", &v)?,
            None => c.sip_listen.ip(),
        };
        if c.public_ip.is_unspecified() {
            return Err(ConfigError::Invalid {
                field: "public_ip",
                reason: "must be set to a routable address when sip_listen is a wildcard".into(),
            });
        }
        if let Some(v) = &a.rtp_ports {
            c.rtp_ports = parse("rtp_ports", v)?;
        }
        if let Some(v) = &a.metrics_listen {
            c.metrics_listen = parse("metrics_listen", v)?;
        }
        if let Some(v) = &a.agent {
            c.agent = parse("agent", v)?;
        }
        if let Some(v) = a.max_calls {
            c.max_calls = count("max_calls", v)?;
        }
        if let Some(list) = &a.trunk_cidr {
            c.trunk_cidrs = list
                .iter()
                .map(|v| parse_cidr("trunk_cidr", v))
                .collect::<Result<_, _>>()?;
        }
        c.sender_core = a.sender_core.map(|v| count("sender_core", v)).transpose()?;
        if let Some(core) = c.sender_core {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            if core >= cpus.max(1) * 64 {
                return Err(ConfigError::Invalid {
                    field: "sender_core",
                    reason: format!("CPU {core} does not exist"),
                });
            }
        }
        c.record_dir = a.record.clone();
        if let Some(v) = &a.drain_timeout {
            c.drain_timeout = duration_on("drain_timeout", v)?;
        }
        if let Some(v) = &a.rtp_timeout {
            c.rtp_timeout = duration("rtp_timeout", v)?;
        }
        if let Some(v) = &a.interim_record_interval {
            c.interim_record_interval = duration("interim_record_interval", v)?;
        }
        if let Some(v) = a.untrusted_sip {
            c.untrusted_sip = v;
        }
        if let Some(v) = a.sip_rate_limit {
            c.sip_rate_limit = count("sip_rate_limit", v)?;
        }
        if let Some(v) = a.sip_server_header.clone() {
            let v = v.trim().to_string();
            if v.chars().any(|ch| ch.is_control()) {
                return Err(ConfigError::Invalid {
                    field: "sip_server_header",
                    reason: "must not contain control characters".into(),
                });
            }
            c.sip_server_header = (!v.is_empty()).then_some(v);
        }
        if let Some(v) = &a.max_call_duration {
            c.max_call_duration = duration_on("max_call_duration", v)?;
        }
        if let Some(v) = &a.turn_stop_timeout {
            c.turn_stop_timeout = duration_on("turn_stop_timeout", v)?;
        }
        if let Some(v) = &a.turn_speculate_after {
            c.turn_speculate_after = duration("turn_speculate_after", v)?;
        }
        if let Some(v) = &a.vad_gather {
            c.vad_gather = duration_on("vad_gather", v)?;
        }
        if let Some(v) = a.vad_quiet_peak {
            c.vad_quiet_peak = count("vad_quiet_peak", v)?;
        }
        if let Some(v) = a.vad_pair_speech {
            c.vad_pair_speech = v;
        }
        if let Some(v) = a.turn_float_softmax {
            c.turn_float_softmax = v;
        }
        if let Some(v) = a.turn_runtime_softmax {
            c.turn_runtime_softmax = v;
        }
        if let Some(v) = a.turn_runtime_products {
            c.turn_runtime_products = v;
        }
        if let Some(v) = a.vad_published_graph {
            c.vad_published_graph = v;
        }
        if let Some(v) = &a.answer_delay {
            c.answer_delay = duration_on("answer_delay", v)?;
        }
        if let Some(v) = a.log_format {
            c.log_format = v;
        }
        c.ort_dylib_path = a.ort_dylib_path.clone();
        c.models_dir = a.models_dir.clone();
        c.stub_reply = a.stub_reply.clone();
        if let Some(v) = a.barge_in {
            c.barge_in = v;
        }
        if let Some(v) = &a.barge_in_min_speech {
            c.barge_in_min_speech = duration_on("barge_in_min_speech", v)?;
        }
        if let Some(v) = a.max_buffered_seconds {
            c.max_buffered = seconds("max_buffered_seconds", v)?;
        }
        if let Some(v) = a.agent_unreachable {
            c.agent_unreachable = v;
        }
        if let Some(v) = &a.ws_connect_timeout {
            c.ws_connect_timeout = duration_on("ws_connect_timeout", v)?;
        }
        if let Some(v) = a.ws_max_message_bytes {
            c.ws_max_message_bytes = count("ws_max_message_bytes", v)?;
        }
        if let Some(v) = a.ws_send_queue_frames {
            c.ws_send_queue_frames = count("ws_send_queue_frames", v)?;
        }
        if let Some(v) = a.ws_ontime_events {
            c.ws_ontime_events = v;
        }
        if let Some(v) = &a.ws_content_type {
            c.ws_audio = ontime_twilio::StreamAudio::from_content_type(v).ok_or_else(|| {
                ConfigError::Invalid {
                    field: "ws_content_type",
                    reason: format!(
                        "`{v}`: ontime streams {} or {}",
                        ontime_twilio::StreamAudio::Mulaw8k.content_type(),
                        ontime_twilio::StreamAudio::L16At16k.content_type()
                    ),
                }
            })?;
        }
        if let Some(v) = a.symmetric_rtp {
            c.symmetric_rtp = v;
        }
        if let Some(v) = a.dial_by_refer {
            c.dial_by_refer = v;
        }
        if let Some(v) = a.echo_canceller {
            c.echo_canceller = v;
        }
        if let Some(v) = a.reply_hold_back {
            c.reply_hold_back = v;
        }
        if let Some(v) = a.reply_hold_fall {
            c.reply_hold_fall = v;
        }
        if let Some(v) = &a.reply_hold_doubt {
            c.reply_hold_doubt = duration_on("reply_hold_doubt", v)?;
        }
        if let Some(v) = &a.reply_hold_max {
            c.reply_hold_max = duration_on("reply_hold_max", v)?;
        }
        if let Some(list) = &a.ws_custom_parameter {
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
        if let Some(list) = a.ws_forward_header.clone() {
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
        c.ws_ca_file = a.ws_ca_file.clone();
        c.resolve_call_control(&a)?;
        c.resolve_transports(&a)?;
        Ok(c)
    }

    /// The SIP transports and TLS files.
    fn resolve_transports(&mut self, a: &Args) -> Result<(), ConfigError> {
        let c = self;
        if let Some(v) = &a.sip_listen_tcp {
            c.sip_listen_tcp = Some(parse("sip_listen_tcp", v)?);
        }
        if let Some(v) = &a.sip_listen_tls {
            c.sip_listen_tls = Some(parse("sip_listen_tls", v)?);
        }
        if let Some(v) = a.admission_reserve {
            c.admission_reserve = count("admission_reserve", v)?;
        }
        if let Some(v) = a.srtp {
            c.srtp = v.policy();
        }
        if let Some(v) = &a.codecs {
            c.codecs = parse_codecs(v)?;
        }
        let register = a.register.clone().unwrap_or_default();
        for uri in &register {
            crate::resolve::SipTarget::parse(uri).map_err(|e| ConfigError::Invalid {
                field: "register",
                reason: e.to_string(),
            })?;
        }
        c.register = register;
        c.register_user = a.register_user.clone();
        c.register_password = secret(
            "register_password_file",
            a.register_password_file.clone(),
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
        if let Some(v) = a.register_expires {
            c.register_expires = Duration::from_secs(count("register_expires", v)?);
        }
        if let Some(user) = a.trunk_auth.clone() {
            let password = secret(
                "trunk_auth_password_file",
                a.trunk_auth_password_file.clone(),
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
        if let Some(list) = &a.trunk_auth_algorithms {
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
        c.tls_cert = a.tls_cert.clone();
        c.tls_key = a.tls_key.clone();
        c.tls_ca_file = a.tls_ca_file.clone().or(c.ws_ca_file.clone());
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
    fn resolve_call_control(&mut self, a: &Args) -> Result<(), ConfigError> {
        let c = self;
        if let Some(v) = &a.api_listen {
            c.api_listen = Some(parse("api_listen", v)?);
        }
        if let Some(v) = a.api_account_sid.clone() {
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
            a.api_auth_token_file.clone(),
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
        if let Some(v) = &a.trunk_uri {
            c.trunk_uri = Some(parse("trunk_uri", v)?);
        }
        if let Some(v) = a.voice_url.clone() {
            if !(v.starts_with("http://") || v.starts_with("https://")) {
                return Err(ConfigError::Invalid {
                    field: "voice_url",
                    reason: format!("`{v}` is not an http:// or https:// URL"),
                });
            }
            c.voice_url = Some(v);
        }
        if let Some(path) = a.voice_twiml.clone() {
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

/// What an embedder without the `cli` feature has: `Args` built in code or read from TOML.
#[cfg(test)]
mod without_cli {
    use super::*;

    #[test]
    fn args_from_code_and_toml_resolve_without_clap() {
        let args = Args {
            max_calls: Some(7),
            ..Args::default()
        };
        assert_eq!(Config::resolve(args).unwrap().max_calls, 7);
        let file: Args = toml::from_str("max_calls = 9\nrtp_timeout = \"off\"").unwrap();
        let c = Config::resolve(file).unwrap();
        assert_eq!((c.max_calls, c.rtp_timeout), (9, None));
        let e = Config::resolve(Args {
            max_calls: Some(0),
            ..Args::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("`max_calls`"), "{e}");
    }
}

// The flag tests parse command lines, which needs the `cli` feature's clap derive.
#[cfg(all(test, feature = "cli"))]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(list: &[&str]) -> Args {
        let mut v = vec!["ontime-gateway"];
        v.extend_from_slice(list);
        Args::parse_from(v)
    }

    fn err(list: &[&str]) -> String {
        Config::resolve(args(list)).unwrap_err().to_string()
    }

    #[test]
    fn the_bots_audio_format_resolves_and_a_bad_one_is_named() {
        let c = Config::resolve(args(&["--ws-content-type", "audio/l16;rate=16000"])).unwrap();
        assert_eq!(c.ws_audio, ontime_twilio::StreamAudio::L16At16k);
        assert_eq!(
            err(&["--ws-content-type", "audio/opus"]),
            "config field `ws_content_type`: `audio/opus`: ontime streams audio/x-mulaw;rate=8000 or audio/l16;rate=16000"
        );
    }

    #[test]
    fn codecs_resolve_in_order_and_bad_lists_are_named() {
        use ontime_sip::Codec;
        assert_eq!(
            Config::resolve(args(&[])).unwrap().codecs,
            vec![Codec::Pcmu, Codec::Pcma, Codec::G722, Codec::Opus]
        );
        let c = Config::resolve(args(&["--codecs", "g722, PCMA"])).unwrap();
        assert_eq!(c.codecs, vec![Codec::G722, Codec::Pcma]);
        let c = Config::resolve(args(&["--codecs", "OPUS,pcmu"])).unwrap();
        assert_eq!(c.codecs, vec![Codec::Opus, Codec::Pcmu]);
        assert_eq!(
            err(&["--codecs", "PCMU,speex"]),
            "config field `codecs`: `speex` is not a codec ontime speaks (PCMU, PCMA, G722, opus)"
        );
        assert_eq!(
            err(&["--codecs", "PCMU,pcmu"]),
            "config field `codecs`: `pcmu` is listed twice"
        );
        assert_eq!(
            err(&["--codecs", " , "]),
            "config field `codecs`: no codec given (from PCMU, PCMA, G722, opus)"
        );
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
            "off",
            "--untrusted-sip",
            "reject",
            "--sip-server-header",
            "",
            "--interim-record-interval",
            "0",
        ]))
        .unwrap();
        assert_eq!(c.rtp_timeout, None, "`off` turns the RTP timeout off");
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
            ("--vad-quiet-peak", "2000", "vad_quiet_peak"),
            ("--reply-hold-doubt", "3s", "reply_hold_doubt"),
            ("--reply-hold-max", "4s", "reply_hold_max"),
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
    fn turn_speculation_defaults_to_the_pools_and_turns_off_by_word() {
        let c = Config::resolve(args(&[])).unwrap();
        assert_eq!(
            c.turn_speculate_after,
            Some(Duration::from_millis(96)),
            "the pool's default"
        );
        assert_eq!(
            c.turn_speculate_after,
            ontime_inference::TurnParams::default().speculate_after
        );
        let c = Config::resolve(args(&["--turn-speculate-after", "off"])).unwrap();
        assert_eq!(c.turn_speculate_after, None);
        let c = Config::resolve(args(&["--turn-speculate-after", "128ms"])).unwrap();
        assert_eq!(c.turn_speculate_after, Some(Duration::from_millis(128)));
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

    #[test]
    fn out_of_range_values_are_refused_naming_the_field() {
        for (list, want) in [
            (
                &["--max-calls", "99999999999"][..],
                "config field `max_calls`: 99999999999 is outside 1–10000",
            ),
            (
                &["--vad-gather", "100ms"][..],
                "config field `vad_gather`: `100ms` is outside 0s–64ms",
            ),
            (
                &["--max-call-duration", "99999999999h"],
                "config field `max_call_duration`: `99999999999h` is outside 1s–24h",
            ),
            (
                &["--rtp-timeout", "0"],
                "config field `rtp_timeout`: `0` is outside `off`, or 1s–1h (`off` turns it off)",
            ),
            (
                &["--turn-stop-timeout", "0"],
                "config field `turn_stop_timeout`: `0` is outside 200ms–30s",
            ),
            (
                &["--answer-delay", "1h"],
                "config field `answer_delay`: `1h` is outside 0s–1m",
            ),
            (
                &["--turn-speculate-after", "0"],
                "config field `turn_speculate_after`: `0` is outside `off`, or 32ms–160ms (`off` \
                 turns it off)",
            ),
            (
                &["--turn-speculate-after", "192ms"],
                "config field `turn_speculate_after`: `192ms` is outside `off`, or 32ms–160ms",
            ),
            (
                &["--trunk-cidr", "10.0.0.1/8"],
                "config field `trunk_cidr`: `10.0.0.1/8` has host bits set: write the network, \
                 `10.0.0.0/8`, or one address, `10.0.0.1`",
            ),
            (
                &["--max-calls", "0"],
                "config field `max_calls`: 0 is outside 1–10000",
            ),
            (
                &["--max-buffered-seconds", "NaN"],
                "config field `max_buffered_seconds`: NaN is outside 0.02–3600",
            ),
            (
                &["--register-expires", "30"],
                "config field `register_expires`: 30 is outside 60–86400",
            ),
        ] {
            assert_eq!(err(list), want, "{list:?}");
        }
        // The bounds themselves are accepted, and `off` is how the RTP timeout is turned off.
        let c = Config::resolve(args(&[
            "--max-calls",
            "10000",
            "--answer-delay",
            "60s",
            "--turn-stop-timeout",
            "200ms",
            "--max-call-duration",
            "24h",
            "--trunk-cidr",
            "10.0.0.0/8,2001:db8::/32,192.0.2.7",
        ]))
        .unwrap();
        assert_eq!(c.max_calls, 10_000);
        assert_eq!(c.answer_delay, Duration::from_secs(60));
        assert_eq!(c.turn_stop_timeout, Duration::from_millis(200));
        assert_eq!(c.max_call_duration, Duration::from_secs(86_400));
        assert_eq!(c.trunk_cidrs.len(), 3);
        let c = Config::resolve(args(&["--interim-record-interval", "off"])).unwrap();
        assert_eq!(c.interim_record_interval, None);
    }

    #[test]
    fn lists_from_the_file_hold_unless_a_flag_replaces_them() {
        let dir = std::env::temp_dir().join(format!("ontime-cfg-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("gw.toml");
        let path = f.to_str().unwrap();
        std::fs::write(&f, "trunk_cidr = [\"10.0.0.0/8\"]\n").unwrap();
        let c = Config::resolve(args(&["--config", path])).unwrap();
        assert_eq!(c.trunk_cidrs, vec![IpNet::from_str("10.0.0.0/8").unwrap()]);
        let c = Config::resolve(args(&["--config", path, "--trunk-cidr", "192.0.2.0/24"])).unwrap();
        assert_eq!(
            c.trunk_cidrs,
            vec![IpNet::from_str("192.0.2.0/24").unwrap()]
        );
        // An empty list is a list: no trunk network, not the loopback default.
        std::fs::write(&f, "trunk_cidr = []\n").unwrap();
        let c = Config::resolve(args(&["--config", path])).unwrap();
        assert!(c.trunk_cidrs.is_empty());
        // `config` is a flag only: a file does not name another file.
        std::fs::write(&f, "config = \"other.toml\"\n").unwrap();
        let e = Config::resolve(args(&["--config", path])).unwrap_err();
        assert!(e.to_string().contains("unknown field `config`"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_toml_key_meets_the_same_range_as_its_flag() {
        let dir = std::env::temp_dir().join(format!("ontime-cfg-range-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("gw.toml");
        std::fs::write(&f, "answer_delay = \"1h\"\nmax_calls = 99999999999\n").unwrap();
        let e = Config::resolve(args(&["--config", f.to_str().unwrap()])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "config field `max_calls`: 99999999999 is outside 1–10000"
        );
        std::fs::write(&f, "answer_delay = \"1h\"\n").unwrap();
        let e = Config::resolve(args(&["--config", f.to_str().unwrap()])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "config field `answer_delay`: `1h` is outside 0s–1m"
        );
        std::fs::write(&f, "trunk_cidr = [\"10.0.0.1/8\"]\n").unwrap();
        let e = Config::resolve(args(&["--config", f.to_str().unwrap()])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("config field `trunk_cidr`: `10.0.0.1/8` has host bits set"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The rows of the settings table in docs/gateway.md: (flags, env names, range cell).
    fn docs_rows() -> Vec<(Vec<String>, Vec<String>, String)> {
        // Read at run time: a packaged crate has no docs/ to include.
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/gateway.md"),
        )
        .expect("docs/gateway.md");
        let section = &text[text
            .find("## Configuration")
            .expect("a Configuration section")..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
        let words = |cell: &str, prefixes: &[&str]| -> Vec<String> {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .filter(|w| prefixes.iter().any(|p| w.starts_with(p)))
                .map(str::to_string)
                .collect()
        };
        section
            .lines()
            .filter(|l| l.starts_with("| `--") || l.starts_with("| — |"))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
                assert_eq!(cells.len(), 5, "five cells in {l}");
                (
                    words(cells[0], &["--"]),
                    words(cells[1], &["ONTIME_", "ORT_"]),
                    cells[3].to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn help_shows_each_range() {
        let help = Args::command_with_ranges().render_long_help().to_string();
        for (field, bounds) in RANGES {
            let flag = format!("--{}", field.replace('_', "-"));
            let at = help
                .find(&format!("{flag} "))
                .unwrap_or_else(|| panic!("{flag} in help"));
            let entry = &help[at..];
            let entry = &entry[..entry[2..].find("\n  -").map_or(entry.len(), |i| i + 2)];
            let range = format!("[range: {}]", bounds.describe());
            assert!(entry.contains(&range), "{flag}: {entry}");
        }
    }

    #[test]
    fn docs_table_matches_the_flags() {
        use clap::CommandFactory;
        use std::any::TypeId;
        let rows = docs_rows();
        let row = |flag: &str| {
            rows.iter()
                .find(|(flags, _, _)| flags.iter().any(|f| f == flag))
                .unwrap_or_else(|| panic!("{flag} has no row in docs/gateway.md's settings table"))
        };
        let cmd = Args::command();
        let mut flags = Vec::new();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            let flag = format!("--{long}");
            let (_, envs, range) = row(&flag);
            let env = arg.get_env().expect("every flag has an environment twin");
            assert!(
                envs.iter().any(|e| env == e.as_str()),
                "{flag}: docs name {envs:?}, the flag reads {env:?}"
            );
            let field = long.replace('-', "_");
            let bounds = RANGES.iter().find(|(name, _)| *name == field);
            let parser = arg.get_value_parser().type_id();
            let numeric = [
                TypeId::of::<usize>(),
                TypeId::of::<u32>(),
                TypeId::of::<u64>(),
                TypeId::of::<f64>(),
            ]
            .iter()
            .any(|t| parser == *t);
            let is_duration = arg
                .get_value_names()
                .is_some_and(|names| names.iter().any(|n| n == "DURATION"));
            match bounds {
                Some((_, b)) => assert_eq!(range, &b.describe(), "{flag}'s range in the docs"),
                None => {
                    assert!(
                        !numeric && !is_duration,
                        "{flag} is a number or a duration without an entry in RANGES"
                    );
                    if field != "rtp_ports" {
                        assert_eq!(range, "—", "{flag} has a range in the docs, none in RANGES");
                    }
                }
            }
            flags.push(flag);
        }
        for (name, b) in RANGES {
            let flag = format!("--{}", name.replace('_', "-"));
            assert!(
                flags.contains(&flag),
                "RANGES names {name}, which is no flag"
            );
            if matches!(b, Bounds::Duration { .. }) {
                let arg = cmd
                    .get_arguments()
                    .find(|a| a.get_long() == Some(&flag[2..]))
                    .unwrap();
                assert_eq!(
                    arg.get_value_names().map(|n| n[0].as_str()),
                    Some("DURATION"),
                    "{flag} is a duration"
                );
            }
        }
        for (documented, _, _) in &rows {
            for flag in documented {
                assert!(flags.contains(flag), "docs list {flag}, which is no flag");
            }
        }
        // The TOML keys are the flags with underscores (`--config` aside): serde lists the keys
        // it knows when it meets one it does not.
        let e = toml::from_str::<Args>("no_such_key = 1")
            .unwrap_err()
            .to_string();
        let listed = &e[e.find("expected one of").expect("serde lists the keys")..];
        let mut keys: Vec<String> = listed
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        let mut want: Vec<String> = flags
            .iter()
            .filter(|f| *f != "--config")
            .map(|f| f[2..].replace('-', "_"))
            .collect();
        keys.sort();
        want.sort();
        assert_eq!(keys, want, "TOML keys and flags differ");
    }
}
