//! The bounds of every numeric setting ([`RANGES`]) and the parsers that check values against
//! them, each error naming its field.

use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;

use super::ConfigError;

/// What a numeric setting accepts. Each setting's bounds are written once, in [`RANGES`]; the
/// resolver checks flags, environment variables and TOML keys against the same entry, after they
/// are merged, and a test holds the table in docs/gateway.md to it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Bounds {
    /// A whole number, `min..=max`.
    Count {
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// A duration (`30`, `30s`, `500ms`, `1h`), `min..=max`.
    Duration {
        /// Shortest accepted.
        min: Duration,
        /// Longest accepted.
        max: Duration,
        /// How the setting is turned off, if it can be.
        off: Off,
    },
    /// Seconds as a decimal number, `min..=max`.
    Seconds {
        /// Smallest accepted.
        min: f64,
        /// Largest accepted.
        max: f64,
    },
}

/// How a duration setting is turned off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Off {
    /// It cannot be.
    Never,
    /// `off` only: `0` would read as "at once" and is refused.
    Word,
    /// `off` or `0` (a zero interval means nothing else).
    WordOrZero,
}

pub(super) const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The bounds of every numeric setting, by TOML key (the flag is the key with dashes).
pub(crate) const RANGES: &[(&str, Bounds)] = &[
    // Every call holds an RTP port pair (at most 32,767 in a port space) and its outgoing audio
    // on the one sender thread; a core carries about a hundred (docs/capacity.md). Ten thousand
    // leaves room for the largest host and refuses a typo.
    (
        "max_calls",
        Bounds::Count {
            min: 1,
            max: 10_000,
        },
    ),
    // 0 measures and reports only; a reserve above the largest admission limit refuses everything.
    (
        "admission_reserve",
        Bounds::Count {
            min: 0,
            max: 10_000,
        },
    ),
    // A Linux CPU set names at most 1,024 CPUs (CPU_SETSIZE).
    ("sender_core", Bounds::Count { min: 0, max: 1_023 }),
    // 0 hangs up at once on SIGTERM; a day is longer than the longest call.
    (
        "drain_timeout",
        Bounds::Duration {
            min: Duration::ZERO,
            max: secs(86_400),
            off: Off::Never,
        },
    ),
    // `0` used to mean "never" and read as "at once"; `off` says it. Under a second a burst of
    // loss would end calls; past an hour the longest-call limit is the one that matters.
    (
        "rtp_timeout",
        Bounds::Duration {
            min: secs(1),
            max: secs(3_600),
            off: Off::Word,
        },
    ),
    // A day: trunks and billing systems cut calls long before; 0 would end every call at once.
    (
        "max_call_duration",
        Bounds::Duration {
            min: secs(1),
            max: secs(86_400),
            off: Off::Never,
        },
    ),
    // Below 200 ms a pause for breath ends the turn whatever Smart Turn says (0 would make its
    // verdict moot); past 30 s a caller who stopped talking hears nothing for half a minute.
    (
        "turn_stop_timeout",
        Bounds::Duration {
            min: Duration::from_millis(200),
            max: secs(30),
            off: Off::Never,
        },
    ),
    // The pool starts a speculative run after whole 32 ms VAD chunks of quiet, at least one,
    // and before the VAD's stop confirmation at six (192 ms): past five there is nothing left
    // to overlap. 0 would read as "at once"; `off` says never.
    (
        "turn_speculate_after",
        Bounds::Duration {
            min: Duration::from_millis(32),
            max: Duration::from_millis(160),
            off: Off::Word,
        },
    ),
    // The inference pool refuses more than two VAD chunks: every speech decision waits up to it.
    (
        "vad_gather",
        Bounds::Duration {
            min: Duration::ZERO,
            max: ontime_inference::config::MAX_VAD_GATHER,
            off: Off::Never,
        },
    ),
    // 0 turns the guard off; a peak of 1,024 (−30 dBFS) would call soft speech quiet, though an
    // onset is never lost to it (the first loud sample sends the chunk to the model).
    ("vad_quiet_peak", Bounds::Count { min: 0, max: 1_024 }),
    // Ringing longer than a minute loses the caller; proxies give up on a ringing INVITE after
    // Timer C (more than 3 min, RFC 3261 §16.6) and carriers' no-answer timers are shorter.
    (
        "answer_delay",
        Bounds::Duration {
            min: Duration::ZERO,
            max: secs(60),
            off: Off::Never,
        },
    ),
    // A "yeah" or "mm-hmm" lasts a few hundred ms; past 2 s a caller who means to interrupt
    // talks over the reply for that long. 0 barges in at the onset (no backchannels).
    (
        "barge_in_min_speech",
        Bounds::Duration {
            min: Duration::ZERO,
            max: secs(2),
            off: Off::Never,
        },
    ),
    // A reply held longer than 2 s after its verdict is a reply to a caller already gone on.
    (
        "reply_hold_doubt",
        Bounds::Duration {
            min: Duration::ZERO,
            max: secs(2),
            off: Off::Never,
        },
    ),
    // Callers' mid-sentence pauses run to about 1.5 s; past 3 s the caller is waiting on the
    // bot, not thinking.
    (
        "reply_hold_max",
        Bounds::Duration {
            min: Duration::ZERO,
            max: secs(3),
            off: Off::Never,
        },
    ),
    // The caller rings while the bot's socket opens: past 30 s no one is waiting.
    (
        "ws_connect_timeout",
        Bounds::Duration {
            min: Duration::from_millis(100),
            max: secs(30),
            off: Off::Never,
        },
    ),
    // One record a second is already a lot of log per call; a day is the longest call.
    (
        "interim_record_interval",
        Bounds::Duration {
            min: secs(1),
            max: secs(86_400),
            off: Off::WordOrZero,
        },
    ),
    // One 20 ms frame at least; an hour of queued bot audio is longer than a default call.
    (
        "max_buffered_seconds",
        Bounds::Seconds {
            min: 0.02,
            max: 3_600.0,
        },
    ),
    // A media message is about 300 bytes; 16 MiB of base64 µ-law is over 25 minutes of audio.
    (
        "ws_max_message_bytes",
        Bounds::Count {
            min: 1_024,
            max: 16 << 20,
        },
    ),
    // 3,000 frames are a minute of caller audio: a bot that far behind has lost the call.
    ("ws_send_queue_frames", Bounds::Count { min: 1, max: 3_000 }),
    // A trunk's SBC sends every call's SIP from one address: 100,000 messages a second is far
    // above what one gateway's calls produce, and 0 would drop everything.
    (
        "sip_rate_limit",
        Bounds::Count {
            min: 1,
            max: 100_000,
        },
    ),
    // RFC 3261 §10.2.1.1 lets a registrar refuse under 60 s (423); a day is the usual ceiling.
    (
        "register_expires",
        Bounds::Count {
            min: 60,
            max: 86_400,
        },
    ),
];

/// The bounds of `field`; every numeric setting has an entry (a test checks it).
pub(super) fn bounds(field: &'static str) -> Bounds {
    RANGES
        .iter()
        .find(|(name, _)| *name == field)
        .map(|(_, b)| *b)
        .unwrap_or_else(|| panic!("no bounds for `{field}`: add it to RANGES"))
}

/// `d` as written in the docs: `0s`, `500ms`, `30s`, `5m`, `1h`.
pub(super) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".into()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

impl Bounds {
    /// What the setting accepts, as the docs' range column and every range error say it.
    pub(crate) fn describe(&self) -> String {
        match *self {
            Bounds::Count { min, max } => format!("{min}–{max}"),
            Bounds::Seconds { min, max } => format!("{min}–{max}"),
            Bounds::Duration { min, max, off } => {
                let span = format!("{}–{}", format_duration(min), format_duration(max));
                match off {
                    Off::Never => span,
                    Off::Word => format!("`off`, or {span}"),
                    Off::WordOrZero => format!("`off` or `0`, or {span}"),
                }
            }
        }
    }
}

/// `value` if `field`'s bounds hold it.
pub(super) fn count<T: Copy + std::fmt::Display + TryInto<u64>>(
    field: &'static str,
    value: T,
) -> Result<T, ConfigError> {
    let b = bounds(field);
    let Bounds::Count { min, max } = b else {
        panic!("`{field}` is not a count");
    };
    let v: u64 = value.try_into().unwrap_or(u64::MAX);
    if (min..=max).contains(&v) {
        Ok(value)
    } else {
        Err(ConfigError::Invalid {
            field,
            reason: format!("{value} is outside {}", b.describe()),
        })
    }
}

/// `value` (decimal seconds) if `field`'s bounds hold it.
pub(super) fn seconds(field: &'static str, value: f64) -> Result<Duration, ConfigError> {
    let b = bounds(field);
    let Bounds::Seconds { min, max } = b else {
        panic!("`{field}` is not in seconds");
    };
    // NaN is outside every range; the bounds keep `from_secs_f64` from panicking on overflow.
    if (min..=max).contains(&value) {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(ConfigError::Invalid {
            field,
            reason: format!("{value} is outside {}", b.describe()),
        })
    }
}

/// `value` parsed as a duration within `field`'s bounds; `None` when it turns the setting off.
pub(super) fn duration(field: &'static str, value: &str) -> Result<Option<Duration>, ConfigError> {
    let b = bounds(field);
    let Bounds::Duration { min, max, off } = b else {
        panic!("`{field}` is not a duration");
    };
    let trimmed = value.trim();
    if off != Off::Never && trimmed == "off" {
        return Ok(None);
    }
    let d = parse_duration(field, value)?;
    if off == Off::WordOrZero && d.is_zero() {
        return Ok(None);
    }
    if (min..=max).contains(&d) {
        return Ok(Some(d));
    }
    let hint = if off == Off::Word && d.is_zero() {
        " (`off` turns it off)"
    } else {
        ""
    };
    Err(ConfigError::Invalid {
        field,
        reason: format!("`{trimmed}` is outside {}{hint}", b.describe()),
    })
}

/// `field`'s duration where it cannot be turned off.
pub(super) fn duration_on(field: &'static str, value: &str) -> Result<Duration, ConfigError> {
    Ok(duration(field, value)?.expect("ok: only settings that can be off give None"))
}

pub(super) fn parse<T: FromStr>(field: &'static str, value: &str) -> Result<T, ConfigError>
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
pub(super) fn parse_cidr(field: &'static str, value: &str) -> Result<IpNet, ConfigError> {
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
    let net = IpNet::new(ip, prefix).map_err(|e| invalid(format!("`{value}`: {e}")))?;
    // `10.0.0.1/8` is either a typo for the network or for one address; trusting the whole /8
    // on a guess is the wrong way to fail.
    if net.addr() != net.network() {
        return Err(invalid(format!(
            "`{value}` has host bits set: write the network, `{}`, or one address, `{ip}`",
            net.trunc()
        )));
    }
    Ok(net)
}

pub(super) fn parse_duration(field: &'static str, value: &str) -> Result<Duration, ConfigError> {
    // A bare number is seconds; otherwise humantime ("500ms", "30s", "1h").
    if let Ok(secs) = value.trim().parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(value.trim()).map_err(|e| ConfigError::Invalid {
        field,
        reason: format!("`{value}`: {e}"),
    })
}
