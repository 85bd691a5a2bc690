//! `Args`: every setting's flag, environment twin and TOML key, declared once.

use std::path::PathBuf;

use serde::Deserialize;

#[cfg(feature = "cli")]
use super::bounds::RANGES;
use super::{AgentUnreachable, BargeIn, LogFormat, SrtpMode, UntrustedSip};

/// Every setting, declared once: its flag (clap), the flag's `ONTIME_*` environment twin, and its
/// TOML key (serde: the flag's name with underscores; unknown keys are errors). Flags and
/// environment are read into one `Args`, the file into another, and the first laid over the
/// second ([`Args::over`]); what is still unset takes the default. Secrets have no field: they
/// come from the environment or a file named here, never a flag.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Parser))]
#[serde(deny_unknown_fields)]
#[cfg_attr(
    feature = "cli",
    command(
        name = "ontime-gateway",
        version,
        about = "SIP/RTP gateway for AI voice bots that keeps outgoing audio on time"
    )
)]
pub struct Args {
    /// TOML configuration file (flags and environment override it).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_CONFIG"))]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// SIP UDP listen address.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_SIP_LISTEN"))]
    pub sip_listen: Option<String>,
    /// IP written into SDP `c=` and Contact (default: the SIP listen IP).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_PUBLIC_IP"))]
    pub public_ip: Option<String>,
    /// RTP port range FIRST-LAST (even ports RTP, odd RTCP).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_RTP_PORTS"))]
    pub rtp_ports: Option<String>,
    /// Prometheus /metrics, /healthz and /readyz listen address.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_METRICS_LISTEN"))]
    pub metrics_listen: Option<String>,
    /// `stub` or a ws:// URL.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_AGENT"))]
    pub agent: Option<String>,
    /// Calls admitted at once; above it INVITEs get 503 with Retry-After.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_MAX_CALLS"))]
    pub max_calls: Option<usize>,
    /// Trunk networks allowed to send INVITEs (repeatable; default loopback only).
    #[cfg_attr(
        feature = "cli",
        arg(long = "trunk-cidr", env = "ONTIME_TRUNK_CIDR", value_delimiter = ',')
    )]
    pub trunk_cidr: Option<Vec<String>>,
    /// CPU the real-time sender is pinned to (default: the last CPU of the affinity mask).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_SENDER_CORE"))]
    pub sender_core: Option<usize>,
    /// Record both directions of every call as WAV files into this folder.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_RECORD"))]
    pub record: Option<PathBuf>,
    /// Grace period for calls on SIGTERM before they are hung up (e.g. `30s`).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_DRAIN_TIMEOUT", value_name = "DURATION")
    )]
    pub drain_timeout: Option<String>,
    /// No RTP from the caller for this long ends the call with BYE (e.g. `30s`); `off`: never.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_RTP_TIMEOUT", value_name = "DURATION")
    )]
    pub rtp_timeout: Option<String>,
    /// Longest call before the gateway hangs up (e.g. `1h`).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_MAX_CALL_DURATION", value_name = "DURATION")
    )]
    pub max_call_duration: Option<String>,
    /// Silence after speech stops that ends a turn even if Smart Turn says incomplete (e.g. `2s`).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_TURN_STOP_TIMEOUT", value_name = "DURATION")
    )]
    pub turn_stop_timeout: Option<String>,
    /// Start Smart Turn on a turn's audio once the caller has been quiet this long, before the
    /// VAD confirms the stop (e.g. `96ms`, the default; whole 32 ms chunks, 32ms–160ms), so its
    /// verdict is in by then; `off` runs it only after the confirmed stop, as pipecat does:
    /// fewer Smart Turn runs (none thrown away when the caller goes on) for a later reply.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_TURN_SPECULATE_AFTER", value_name = "DURATION")
    )]
    pub turn_speculate_after: Option<String>,
    /// How long a ready VAD chunk waits for the other calls' chunks to join its batched run
    /// (e.g. `32ms`; `0` runs at once): fewer, larger runs cost less CPU, each decision waits up
    /// to this much.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_VAD_GATHER", value_name = "DURATION")
    )]
    pub vad_gather: Option<String>,
    /// The quiet guard's level: while a caller is quiet, 32 ms whose every sample is below this
    /// magnitude (of 32767) wait for the next audible chunk and are run through the VAD back to
    /// back with it, which costs far less than a run every 32 ms; `0` runs every chunk at once.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_VAD_QUIET_PEAK"))]
    pub vad_quiet_peak: Option<u16>,
    /// Speech pairing, `true` (the default) or `false`: while a caller speaks, the VAD judges
    /// their audio two 32 ms chunks at a time, back to back (the second run finds the model in
    /// the caches), from past the barge-in decision's horizon; no decision moves.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_VAD_PAIR_SPEECH"))]
    pub vad_pair_speech: Option<bool>,
    /// Smart Turn with its attention softmax in float, `false` (the default) or `true`: about a
    /// fifth less CPU per end-of-turn run; the verdicts are a slightly different arithmetic's
    /// (about 95 % the same as the published model's on the labelled sets, as accurate).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_TURN_FLOAT_SOFTMAX"))]
    pub turn_float_softmax: Option<bool>,
    /// Smart Turn's attention softmax on ONNX Runtime's own kernel, `false` (the default) or
    /// `true`: the default runs ontime's kernel, which gives the same bytes eight rows at a
    /// time (checked against ONNX Runtime's at start); this is for comparing the two.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_TURN_RUNTIME_SOFTMAX"))]
    pub turn_runtime_softmax: Option<bool>,
    /// Smart Turn's attention products (`Q·Kᵀ`, `P·V`) on ONNX Runtime's own kernel, `false`
    /// (the default) or `true`: where the CPU has AVX-512 VNNI the default runs ontime's
    /// kernel, which gives the same bytes (checked against ONNX Runtime's at start); this is
    /// for comparing the two.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_TURN_RUNTIME_PRODUCTS"))]
    pub turn_runtime_products: Option<bool>,
    /// Silero VAD on its published graph, `false` (the default) or `true`: the default runs
    /// the same arithmetic on a graph without the published one's control flow (checked bit
    /// for bit at start), about a third less CPU per VAD run; this is for comparing the two.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_VAD_PUBLISHED_GRAPH"))]
    pub vad_published_graph: Option<bool>,
    /// Ring time before answering (180 first; e.g. `2s`); 0 answers at once.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_ANSWER_DELAY", value_name = "DURATION")
    )]
    pub answer_delay: Option<String>,
    /// Log format.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_LOG_FORMAT", value_enum))]
    pub log_format: Option<LogFormat>,
    /// ONNX Runtime shared library (libonnxruntime.so).
    #[cfg_attr(feature = "cli", arg(long, env = "ORT_DYLIB_PATH"))]
    pub ort_dylib_path: Option<PathBuf>,
    /// Folder holding silero_vad.onnx and smart-turn-v3.2-cpu.onnx.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_MODELS_DIR"))]
    pub models_dir: Option<PathBuf>,
    /// WAV (8 kHz mono 16-bit) the stub agent replies with (default: the built-in reply).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_STUB_REPLY"))]
    pub stub_reply: Option<PathBuf>,
    /// Barge-in: `local` clears queued agent audio when the caller speaks; `bot` leaves it to
    /// the bot's `clear`.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_BARGE_IN", value_enum))]
    pub barge_in: Option<BargeIn>,
    /// Local barge-in: caller speech over the bot shorter than this is a backchannel ("mm-hmm")
    /// that leaves the reply playing (e.g. `400ms`); 0 barges in at the speech's onset.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_BARGE_IN_MIN_SPEECH", value_name = "DURATION")
    )]
    pub barge_in_min_speech: Option<String>,
    /// Most agent audio queued per call, in seconds; beyond it the oldest is dropped.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_MAX_BUFFERED_SECONDS"))]
    pub max_buffered_seconds: Option<f64>,
    /// Bot unreachable at call start: `reject` (503 before answering) or `fallback` (answer,
    /// play the fallback message, hang up).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_AGENT_UNREACHABLE", value_enum)
    )]
    pub agent_unreachable: Option<AgentUnreachable>,
    /// Longest wait for a bot's WebSocket to open (e.g. `2s`).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_WS_CONNECT_TIMEOUT", value_name = "DURATION")
    )]
    pub ws_connect_timeout: Option<String>,
    /// Bot messages longer than this many bytes are dropped and counted.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_WS_MAX_MESSAGE_BYTES"))]
    pub ws_max_message_bytes: Option<usize>,
    /// Caller frames (20 ms each) queued for a slow bot before new ones are dropped.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_WS_SEND_QUEUE_FRAMES"))]
    pub ws_send_queue_frames: Option<usize>,
    /// Send ontime's own events (speech started/stopped, turn ended, barge-in) to the bot.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_WS_ONTIME_EVENTS"))]
    pub ws_ontime_events: Option<bool>,
    /// The bot's audio both ways: `audio/x-mulaw;rate=8000` (the default, Twilio's) or
    /// `audio/l16;rate=16000` (16-bit little-endian PCM at 16 kHz: a G.722 caller's own
    /// wideband audio, a G.711 caller's upsampled once). A `<Stream contentType>` overrides it.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_WS_CONTENT_TYPE"))]
    pub ws_content_type: Option<String>,
    /// Extra `customParameters` in the bot's `start` message, KEY=VALUE (repeatable).
    #[cfg_attr(
        feature = "cli",
        arg(
            long = "ws-custom-parameter",
            env = "ONTIME_WS_CUSTOM_PARAMETER",
            value_delimiter = ','
        )
    )]
    pub ws_custom_parameter: Option<Vec<String>>,
    /// INVITE headers copied into the bot's `customParameters` (repeatable), e.g.
    /// `P-Asserted-Identity`; the key is the name as written here.
    #[cfg_attr(
        feature = "cli",
        arg(
            long = "ws-forward-header",
            env = "ONTIME_WS_FORWARD_HEADER",
            value_delimiter = ','
        )
    )]
    pub ws_forward_header: Option<Vec<String>>,
    /// PEM file of extra CA certificates trusted for `wss://` bots (besides the system's).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_WS_CA_FILE"))]
    pub ws_ca_file: Option<PathBuf>,
    /// SIP from outside the trunk networks: `drop` (silently, the default) or `reject`
    /// (one stateless 403 per request, rate-limited).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_UNTRUSTED_SIP", value_enum))]
    pub untrusted_sip: Option<UntrustedSip>,
    /// Messages per second one trusted source may send before the excess is dropped.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_SIP_RATE_LIMIT"))]
    pub sip_rate_limit: Option<u32>,
    /// `Server`/`User-Agent` header value (default `ontime-gateway`, no version; empty: none).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_SIP_SERVER_HEADER"))]
    pub sip_server_header: Option<String>,
    /// Interval of the interim call records written while a call is up (e.g. `60s`); `off` or
    /// 0: none.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_INTERIM_RECORD_INTERVAL", value_name = "DURATION")
    )]
    pub interim_record_interval: Option<String>,
    /// Listen address of the Twilio-compatible call-control API (off unless set). Its auth
    /// token comes from `ONTIME_API_AUTH_TOKEN` or `--api-auth-token-file`, never a flag.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_API_LISTEN"))]
    pub api_listen: Option<String>,
    /// The API's account SID (`AC` and 32 hex digits): the Basic-auth user, the `{AccountSid}`
    /// of every API path and the `accountSid` bots are told.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_API_ACCOUNT_SID"))]
    pub api_account_sid: Option<String>,
    /// File holding the API's auth token (instead of `ONTIME_API_AUTH_TOKEN`).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_API_AUTH_TOKEN_FILE"))]
    pub api_auth_token_file: Option<PathBuf>,
    /// SIP URI of the provider or SBC that outbound calls (the API's dial-out) go through,
    /// e.g. `sip:192.0.2.1:5060`.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_TRUNK_URI"))]
    pub trunk_uri: Option<String>,
    /// Voice webhook: each inbound call is POSTed here (Twilio's parameters) and runs the TwiML
    /// it answers with (`<Connect><Stream>` to a bot, `<Reject>`, `<Dial>`...).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_VOICE_URL"))]
    pub voice_url: Option<String>,
    /// TwiML file every inbound call runs (instead of `--voice-url`).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_VOICE_TWIML"))]
    pub voice_twiml: Option<PathBuf>,
    /// SRTP for call media: `off`, `optional` (the default: answer in kind) or `required`.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_SRTP", value_enum))]
    pub srtp: Option<SrtpMode>,
    /// Trunk codecs in order of preference, comma-separated, from `PCMU`, `PCMA`, `G722` and
    /// `opus` (default `PCMU,PCMA,G722,opus`: G.711 first for the trunks that transcode
    /// anything else, and 16 kHz G.722 or Opus for a caller who offers only those). Offers
    /// list them in this order; an offer is answered with the first of them it carries.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_CODECS"))]
    pub codecs: Option<String>,
    /// Symmetric RTP, `true` or `false` (the default): latch each call's media to the first
    /// address that sends it a run of valid RTP, whatever its SDP said (trunks behind NAT whose
    /// SDP names a private address). Off, only the SDP's IP is heard.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_SYMMETRIC_RTP"))]
    pub symmetric_rtp: Option<bool>,
    /// Echo canceller on the caller's audio the barge-in VAD hears, `true` (the default) or
    /// `false`: the line's echo of the reply (PSTN hybrids, handsets) is taken out or silenced,
    /// using what the gateway played as the reference, so the bot does not barge in on itself.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_ECHO_CANCELLER"))]
    pub echo_canceller: Option<bool>,
    /// Reply hold-back, `true` (the default) or `false`: after a turn end the bot's reply waits
    /// while Smart Turn was unsure or the caller has paused mid-sentence before, and a caller
    /// who resumes first has it dropped unheard (`ontime.turn_resumed` to the bot).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_REPLY_HOLD_BACK"))]
    pub reply_hold_back: Option<bool>,
    /// Reply hold-back, `true` (the default) or `false`: a turn whose voice fell to a
    /// statement's end (its last 100 ms 2.5 semitones or more below the 1.4 s before) is not
    /// held for the caller's pausing habit. Turn it off for tonal languages, where a final
    /// fall is part of a word.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_REPLY_HOLD_FALL"))]
    pub reply_hold_fall: Option<bool>,
    /// Reply hold-back's doubt wait: how long a reply waits after a verdict at Smart Turn's 0.5
    /// threshold (less, linearly, up to 0.9, where it is 0), e.g. `600ms`. Default 0 (off: on
    /// the labelled set it caught 1 of 33 inner-pause ends for +511 ms p95 on complete turns).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_REPLY_HOLD_DOUBT", value_name = "DURATION")
    )]
    pub reply_hold_doubt: Option<String>,
    /// Reply hold-back: no reply waits longer than this after its verdict (default `1800ms`);
    /// the cost a caller who paused before pays on a sentence said in one go.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_REPLY_HOLD_MAX", value_name = "DURATION")
    )]
    pub reply_hold_max: Option<String>,
    /// TwiML's `<Dial>` as a blind transfer by SIP REFER, `true`, or as Twilio's bridged
    /// second leg placed through the trunk, `false` (the default). For trunks that take REFER
    /// and should carry the transferred call themselves.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_DIAL_BY_REFER"))]
    pub dial_by_refer: Option<bool>,
    /// Register with this registrar as this address of record (`sip:user@provider`;
    /// repeatable). The password comes from `ONTIME_REGISTER_PASSWORD` or
    /// `--register-password-file`, never a flag.
    #[cfg_attr(
        feature = "cli",
        arg(long = "register", env = "ONTIME_REGISTER", value_delimiter = ',')
    )]
    pub register: Option<Vec<String>>,
    /// Digest user name for the registrations (default: each URI's user part).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_REGISTER_USER"))]
    pub register_user: Option<String>,
    /// File holding the registration password (instead of `ONTIME_REGISTER_PASSWORD`).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_REGISTER_PASSWORD_FILE"))]
    pub register_password_file: Option<PathBuf>,
    /// Registration expiry to ask for, in seconds (re-registered at half what is granted).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_REGISTER_EXPIRES"))]
    pub register_expires: Option<u64>,
    /// Challenge INVITEs with digest authentication for this user (on top of the trunk
    /// networks); its password from `ONTIME_TRUNK_AUTH_PASSWORD` or
    /// `--trunk-auth-password-file`.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_TRUNK_AUTH"))]
    pub trunk_auth: Option<String>,
    /// File holding the trunk-auth password.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_TRUNK_AUTH_PASSWORD_FILE"))]
    pub trunk_auth_password_file: Option<PathBuf>,
    /// Digest algorithms the trunk-auth challenges offer, in order (`SHA-256,MD5` by default;
    /// `MD5` alone for clients that answer only the first challenge).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "ONTIME_TRUNK_AUTH_ALGORITHMS", value_delimiter = ',')
    )]
    pub trunk_auth_algorithms: Option<Vec<String>>,
    /// Refuse new calls (503, OPTIONS 503, `/readyz` 503) while the measured headroom is
    /// below this many calls (default 1; 0: measure and report only). `--max-calls` stays a
    /// hard ceiling on top.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_ADMISSION_RESERVE"))]
    pub admission_reserve: Option<usize>,
    /// SIP over TCP listen address (off unless set).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_SIP_LISTEN_TCP"))]
    pub sip_listen_tcp: Option<String>,
    /// SIP over TLS listen address (off unless set; needs `--tls-cert` and `--tls-key`).
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_SIP_LISTEN_TLS"))]
    pub sip_listen_tls: Option<String>,
    /// PEM certificate chain the SIP TLS listener presents.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_TLS_CERT"))]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_TLS_KEY"))]
    pub tls_key: Option<PathBuf>,
    /// PEM file of extra CA certificates trusted for TLS we originate (SIP over TLS, `wss://`
    /// bots, https callbacks), besides the system's.
    #[cfg_attr(feature = "cli", arg(long, env = "ONTIME_TLS_CA_FILE"))]
    pub tls_ca_file: Option<PathBuf>,
}

impl Args {
    /// The command line with each numeric flag's help ending in its range from `RANGES`, so
    /// `--help` and the docs table say what the resolver enforces.
    #[cfg(feature = "cli")]
    pub fn command_with_ranges() -> clap::Command {
        let mut cmd = <Args as clap::CommandFactory>::command();
        for (field, bounds) in RANGES {
            let range = format!(" [range: {}]", bounds.describe());
            cmd = cmd.mut_arg(*field, |arg| {
                let help = arg.get_help().map(|h| format!("{h}{range}"));
                let long = arg.get_long_help().map(|h| format!("{h}{range}"));
                let arg = match help {
                    Some(h) => arg.help(h),
                    None => arg,
                };
                match long {
                    Some(h) => arg.long_help(h),
                    None => arg,
                }
            });
        }
        cmd
    }

    /// Flags and environment as `clap::Parser::parse` reads them, `--help` showing the ranges;
    /// exits with clap's message on a malformed command line.
    #[cfg(feature = "cli")]
    pub fn parse_with_ranges() -> Args {
        let matches = Args::command_with_ranges().get_matches();
        <Args as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    /// These settings over `under`'s: each one set here wins, each one unset falls back.
    pub fn over(self, under: Args) -> Args {
        macro_rules! each {
            ($($field:ident),* $(,)?) => {
                Args { $($field: self.$field.or(under.$field)),* }
            };
        }
        each!(
            config,
            sip_listen,
            public_ip,
            rtp_ports,
            metrics_listen,
            agent,
            max_calls,
            trunk_cidr,
            sender_core,
            record,
            drain_timeout,
            rtp_timeout,
            max_call_duration,
            turn_stop_timeout,
            turn_speculate_after,
            vad_gather,
            vad_quiet_peak,
            vad_pair_speech,
            turn_float_softmax,
            turn_runtime_softmax,
            turn_runtime_products,
            vad_published_graph,
            answer_delay,
            log_format,
            ort_dylib_path,
            models_dir,
            stub_reply,
            barge_in,
            barge_in_min_speech,
            max_buffered_seconds,
            agent_unreachable,
            ws_connect_timeout,
            ws_max_message_bytes,
            ws_send_queue_frames,
            ws_ontime_events,
            ws_content_type,
            ws_custom_parameter,
            ws_forward_header,
            ws_ca_file,
            untrusted_sip,
            sip_rate_limit,
            sip_server_header,
            interim_record_interval,
            api_listen,
            api_account_sid,
            api_auth_token_file,
            trunk_uri,
            voice_url,
            voice_twiml,
            srtp,
            codecs,
            symmetric_rtp,
            echo_canceller,
            reply_hold_back,
            reply_hold_fall,
            reply_hold_doubt,
            reply_hold_max,
            dial_by_refer,
            register,
            register_user,
            register_password_file,
            register_expires,
            trunk_auth,
            trunk_auth_password_file,
            trunk_auth_algorithms,
            admission_reserve,
            sip_listen_tcp,
            sip_listen_tls,
            tls_cert,
            tls_key,
            tls_ca_file,
        )
    }
}
