//! SDP (RFC 4566) for one audio stream, and the offer/answer rules of RFC 3264 that a G.711
//! phone call needs.
//!
//! Written by hand rather than on a crate: `sdp` (webrtc-rs) is WebRTC-shaped (ICE, DTLS, bundle)
//! and rejects field orders that trunks send, and `sdp-types` (ezk) pulls its string/bytes stack
//! with it; a phone call needs `v o s c t m a` for one audio stream, parsed strictly and with our
//! own size limits. Unknown lines and attributes are kept so nothing is lost on the way through.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use ontime_rtp::{
    FRAME_MS, OPUS_CLOCK_HZ, PT_TELEPHONE_EVENT_48K_OFFER, PT_TELEPHONE_EVENT_OFFER, SAMPLE_RATE_HZ,
};

use crate::error::{Error, Result};

/// Largest SDP body accepted, in bytes (a phone offer is a few hundred).
pub const MAX_SDP_BYTES: usize = 16 * 1024;
/// Most media descriptions accepted in one SDP.
pub const MAX_MEDIA: usize = 16;
/// Most payload formats accepted on one `m=` line.
pub const MAX_FORMATS: usize = 64;

/// The trunk codecs are `ontime-rtp`'s: this module negotiates them.
pub use ontime_rtp::Codec;

/// Media direction (RFC 3264 §5.1, §6.1): how hold is signalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Direction {
    /// Both ways (the default when no attribute is present).
    #[default]
    SendRecv,
    /// Only the describing side sends.
    SendOnly,
    /// Only the describing side receives.
    RecvOnly,
    /// Neither side sends.
    Inactive,
}

impl Direction {
    /// The attribute name (`sendrecv`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::SendRecv => "sendrecv",
            Direction::SendOnly => "sendonly",
            Direction::RecvOnly => "recvonly",
            Direction::Inactive => "inactive",
        }
    }
    /// The answer direction for an offered one (RFC 3264 §6.1), given whether we want to send
    /// and receive at all.
    pub fn answer_to(self, local: Direction) -> Direction {
        let (offer_send, offer_recv) = self.flags();
        let (we_send, we_recv) = local.flags();
        Direction::from_flags(offer_recv && we_send, offer_send && we_recv)
    }
    /// Whether the describing side sends, and receives.
    pub fn flags(self) -> (bool, bool) {
        match self {
            Direction::SendRecv => (true, true),
            Direction::SendOnly => (true, false),
            Direction::RecvOnly => (false, true),
            Direction::Inactive => (false, false),
        }
    }
    /// The direction from (sends, receives).
    pub fn from_flags(send: bool, recv: bool) -> Direction {
        match (send, recv) {
            (true, true) => Direction::SendRecv,
            (true, false) => Direction::SendOnly,
            (false, true) => Direction::RecvOnly,
            (false, false) => Direction::Inactive,
        }
    }
    fn parse(attr: &str) -> Option<Direction> {
        match attr {
            "sendrecv" => Some(Direction::SendRecv),
            "sendonly" => Some(Direction::SendOnly),
            "recvonly" => Some(Direction::RecvOnly),
            "inactive" => Some(Direction::Inactive),
            _ => None,
        }
    }
}

/// `a=rtpmap:<pt> <name>/<rate>[/<channels>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtpMap {
    /// Payload type.
    pub payload_type: u8,
    /// Encoding name as written (`PCMU`, `telephone-event`, ...).
    pub encoding: String,
    /// Clock rate in Hz.
    pub clock_rate_hz: u32,
    /// Channels, when written (`opus/48000/2`).
    pub channels: Option<u16>,
}

/// One `m=` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaDescription {
    /// Media type (`audio`, `video`, ...).
    pub media: String,
    /// Transport port; 0 means the stream is rejected/disabled (RFC 3264 §6).
    pub port: u16,
    /// Transport protocol (`RTP/AVP`, ...).
    pub protocol: String,
    /// Payload formats in preference order, as written.
    pub formats: Vec<String>,
    /// Media-level `c=` address, if any.
    pub connection: Option<IpAddr>,
    /// `a=rtpmap` lines.
    pub rtpmaps: Vec<RtpMap>,
    /// `a=fmtp:<pt> <params>` lines.
    pub fmtps: Vec<(u8, String)>,
    /// `a=ptime` in milliseconds.
    pub ptime_ms: Option<u32>,
    /// `a=maxptime` in milliseconds.
    pub maxptime_ms: Option<u32>,
    /// Direction attribute, if written at media level.
    pub direction: Option<Direction>,
    /// Other attributes, verbatim after `a=`.
    pub other_attributes: Vec<String>,
}

impl MediaDescription {
    /// The values of this section's `a=<name>:<value>` attributes not parsed into fields (e.g.
    /// `crypto`), in order.
    pub fn attribute_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.other_attributes.iter().filter_map(move |a| {
            let rest = a.strip_prefix("a=")?;
            let (n, value) = rest.split_once(':')?;
            n.eq_ignore_ascii_case(name).then_some(value)
        })
    }

    /// The rtpmap of a payload type, with RFC 3551's static defaults for 0, 8 and 9.
    pub fn rtpmap(&self, payload_type: u8) -> Option<RtpMap> {
        if let Some(m) = self.rtpmaps.iter().find(|m| m.payload_type == payload_type) {
            return Some(m.clone());
        }
        Codec::ALL
            .into_iter()
            .find(|c| c.has_static_payload_type() && c.payload_type() == payload_type)
            .map(|c| RtpMap {
                payload_type,
                encoding: c.encoding_name().into(),
                clock_rate_hz: c.rtp_clock_hz(),
                channels: None,
            })
    }
    /// Payload types as numbers (formats that are not numbers are skipped).
    pub fn payload_types(&self) -> impl Iterator<Item = u8> + '_ {
        self.formats.iter().filter_map(|f| f.parse::<u8>().ok())
    }
}

/// A session description: the session-level fields plus its media sections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDescription {
    /// `o=` username.
    pub origin_user: String,
    /// `o=` session id.
    pub session_id: u64,
    /// `o=` session version; bumped on every change (RFC 3264 §8).
    pub session_version: u64,
    /// `o=` unicast address.
    pub origin_address: IpAddr,
    /// `s=` session name.
    pub session_name: String,
    /// Session-level `c=` address.
    pub connection: Option<IpAddr>,
    /// Session-level direction attribute.
    pub direction: Option<Direction>,
    /// Media sections.
    pub media: Vec<MediaDescription>,
    /// Other session-level lines (`b=`, `t=` is regenerated, `a=` kept), verbatim.
    pub other_lines: Vec<String>,
}

fn sdp_err(reason: impl Into<String>) -> Error {
    Error::Sdp(reason.into())
}

fn parse_addr(nettype: &str, addrtype: &str, addr: &str) -> Result<IpAddr> {
    if nettype != "IN" {
        return Err(sdp_err(format!("network type {nettype:?} is not IN")));
    }
    // c= may carry a multicast TTL/count suffix (RFC 4566 §5.7): phone calls are unicast.
    let host = addr.split('/').next().unwrap_or(addr);
    let ip: IpAddr = host
        .parse()
        .map_err(|_| sdp_err(format!("address {addr:?} is not an IP literal")))?;
    match (addrtype, ip) {
        ("IP4", IpAddr::V4(_)) | ("IP6", IpAddr::V6(_)) => Ok(ip),
        _ => Err(sdp_err(format!(
            "address {addr:?} does not match type {addrtype}"
        ))),
    }
}

impl SessionDescription {
    /// Parses an SDP body strictly: `v=0` first, an `o=` and `c=` that are IP literals, `m=`
    /// lines with numeric ports; size and count limits apply.
    pub fn parse(body: &[u8]) -> Result<SessionDescription> {
        if body.len() > MAX_SDP_BYTES {
            return Err(sdp_err(format!(
                "body of {} bytes exceeds {MAX_SDP_BYTES}",
                body.len()
            )));
        }
        let text = std::str::from_utf8(body).map_err(|_| sdp_err("body is not UTF-8"))?;
        let mut lines = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .filter(|l| !l.is_empty());
        if lines.next() != Some("v=0") {
            return Err(sdp_err("first line is not v=0"));
        }
        let mut origin = None;
        let mut session_name = String::new();
        let mut connection = None;
        let mut direction = None;
        let mut media: Vec<MediaDescription> = Vec::new();
        let mut other_lines = Vec::new();
        for line in lines {
            let (kind, value) = line
                .split_once('=')
                .filter(|(k, _)| k.len() == 1)
                .ok_or_else(|| sdp_err(format!("line {line:?} is not <type>=<value>")))?;
            match (kind, media.last_mut()) {
                ("o", None) => {
                    let f: Vec<&str> = value.split(' ').collect();
                    if f.len() != 6 {
                        return Err(sdp_err(format!("o= line {value:?} needs 6 fields")));
                    }
                    let id = f[1]
                        .parse::<u64>()
                        .map_err(|_| sdp_err("o= session id is not a number"))?;
                    let ver = f[2]
                        .parse::<u64>()
                        .map_err(|_| sdp_err("o= session version is not a number"))?;
                    origin = Some((f[0].to_string(), id, ver, parse_addr(f[3], f[4], f[5])?));
                }
                ("s", None) => session_name = value.to_string(),
                ("c", m) => {
                    let f: Vec<&str> = value.split(' ').collect();
                    if f.len() != 3 {
                        return Err(sdp_err(format!("c= line {value:?} needs 3 fields")));
                    }
                    let ip = parse_addr(f[0], f[1], f[2])?;
                    match m {
                        Some(m) => m.connection = Some(ip),
                        None => connection = Some(ip),
                    }
                }
                ("m", _) => {
                    if media.len() >= MAX_MEDIA {
                        return Err(sdp_err(format!("more than {MAX_MEDIA} m= lines")));
                    }
                    let mut f = value.split(' ');
                    let kind = f.next().unwrap_or_default().to_string();
                    let port_field = f.next().unwrap_or_default();
                    // RFC 4566 §5.14: <port>/<number of ports>; one stream is all we use.
                    let port = port_field
                        .split('/')
                        .next()
                        .unwrap_or_default()
                        .parse::<u16>()
                        .map_err(|_| sdp_err(format!("m= port {port_field:?} is not a number")))?;
                    let protocol = f
                        .next()
                        .filter(|p| !p.is_empty())
                        .ok_or_else(|| sdp_err("m= line lacks a protocol"))?
                        .to_string();
                    let formats: Vec<String> =
                        f.filter(|s| !s.is_empty()).map(str::to_string).collect();
                    if formats.is_empty() || formats.len() > MAX_FORMATS {
                        return Err(sdp_err(format!(
                            "m= line has {} formats (1..={MAX_FORMATS} allowed)",
                            formats.len()
                        )));
                    }
                    media.push(MediaDescription {
                        media: kind,
                        port,
                        protocol,
                        formats,
                        connection: None,
                        rtpmaps: Vec::new(),
                        fmtps: Vec::new(),
                        ptime_ms: None,
                        maxptime_ms: None,
                        direction: None,
                        other_attributes: Vec::new(),
                    });
                }
                ("a", m) => {
                    let dir = Direction::parse(value);
                    match m {
                        None => match dir {
                            Some(d) => direction = Some(d),
                            None => other_lines.push(line.to_string()),
                        },
                        Some(m) => parse_media_attribute(m, value, dir)?,
                    }
                }
                ("t", None) => {}
                (_, None) => other_lines.push(line.to_string()),
                (_, Some(m)) => m.other_attributes.push(line.to_string()),
            }
        }
        let (origin_user, session_id, session_version, origin_address) =
            origin.ok_or_else(|| sdp_err("no o= line"))?;
        Ok(SessionDescription {
            origin_user,
            session_id,
            session_version,
            origin_address,
            session_name,
            connection,
            direction,
            media,
            other_lines,
        })
    }

    /// The first audio section, if any.
    pub fn audio(&self) -> Option<&MediaDescription> {
        self.media.iter().find(|m| m.media == "audio")
    }

    /// Direction of a media section: its own attribute, else the session's, else sendrecv.
    pub fn direction_of(&self, media: &MediaDescription) -> Direction {
        media.direction.or(self.direction).unwrap_or_default()
    }

    /// Where the describing side receives RTP for a media section: media `c=` or session `c=`,
    /// and the `m=` port. `None` when the port is 0 or no address is given.
    pub fn rtp_address(&self, media: &MediaDescription) -> Option<SocketAddr> {
        let ip = media.connection.or(self.connection)?;
        (media.port != 0).then_some(SocketAddr::new(ip, media.port))
    }

    /// Serialises to the wire form (CRLF line ends).
    pub fn to_sdp_string(&self) -> String {
        let mut s = String::new();
        let addr_line = |ip: &IpAddr| match ip {
            IpAddr::V4(a) => format!("IN IP4 {a}"),
            IpAddr::V6(a) => format!("IN IP6 {a}"),
        };
        let _ = write!(
            s,
            "v=0\r\no={} {} {} {}\r\ns={}\r\n",
            self.origin_user,
            self.session_id,
            self.session_version,
            addr_line(&self.origin_address),
            if self.session_name.is_empty() {
                "-"
            } else {
                &self.session_name
            }
        );
        if let Some(c) = &self.connection {
            let _ = write!(s, "c={}\r\n", addr_line(c));
        }
        for l in &self.other_lines {
            let _ = write!(s, "{l}\r\n");
        }
        s.push_str("t=0 0\r\n");
        if let Some(d) = self.direction {
            let _ = write!(s, "a={}\r\n", d.as_str());
        }
        for m in &self.media {
            let _ = write!(
                s,
                "m={} {} {} {}\r\n",
                m.media,
                m.port,
                m.protocol,
                m.formats.join(" ")
            );
            if let Some(c) = &m.connection {
                let _ = write!(s, "c={}\r\n", addr_line(c));
            }
            for r in &m.rtpmaps {
                let _ = write!(
                    s,
                    "a=rtpmap:{} {}/{}",
                    r.payload_type, r.encoding, r.clock_rate_hz
                );
                if let Some(ch) = r.channels {
                    let _ = write!(s, "/{ch}");
                }
                s.push_str("\r\n");
            }
            for (pt, p) in &m.fmtps {
                let _ = write!(s, "a=fmtp:{pt} {p}\r\n");
            }
            if let Some(p) = m.ptime_ms {
                let _ = write!(s, "a=ptime:{p}\r\n");
            }
            if let Some(p) = m.maxptime_ms {
                let _ = write!(s, "a=maxptime:{p}\r\n");
            }
            if let Some(d) = m.direction {
                let _ = write!(s, "a={}\r\n", d.as_str());
            }
            for a in &m.other_attributes {
                let _ = write!(s, "{a}\r\n");
            }
        }
        s
    }
}

fn parse_rtpmap(arg: &str) -> Option<RtpMap> {
    let (pt, rest) = arg.split_once(' ')?;
    let payload_type = pt.parse::<u8>().ok().filter(|pt| *pt < 128)?;
    let mut parts = rest.trim().split('/');
    let encoding = parts.next().unwrap_or_default().to_string();
    let clock_rate_hz = parts.next().and_then(|r| r.parse::<u32>().ok())?;
    let channels = parts.next().and_then(|c| c.parse::<u16>().ok());
    Some(RtpMap {
        payload_type,
        encoding,
        clock_rate_hz,
        channels,
    })
}

fn parse_media_attribute(
    m: &mut MediaDescription,
    value: &str,
    dir: Option<Direction>,
) -> Result<()> {
    if let Some(d) = dir {
        m.direction = Some(d);
        return Ok(());
    }
    let (name, arg) = value.split_once(':').unwrap_or((value, ""));
    match name {
        "rtpmap" => {
            // An rtpmap we cannot read (RFC 4475's `a=rtpmap:31 LPC`) describes a format we
            // would not pick anyway: keep it verbatim rather than refuse the whole offer.
            match parse_rtpmap(arg) {
                Some(map) => m.rtpmaps.push(map),
                None => m.other_attributes.push(format!("a={value}")),
            }
        }
        "fmtp" => {
            let (pt, params) = arg.split_once(' ').unwrap_or((arg, ""));
            if let Ok(pt) = pt.parse::<u8>() {
                m.fmtps.push((pt, params.trim().to_string()));
            }
        }
        "ptime" => {
            m.ptime_ms = Some(
                arg.trim()
                    .parse()
                    .map_err(|_| sdp_err(format!("ptime {arg:?} is not a number")))?,
            )
        }
        "maxptime" => {
            m.maxptime_ms = Some(
                arg.trim()
                    .parse()
                    .map_err(|_| sdp_err(format!("maxptime {arg:?} is not a number")))?,
            )
        }
        _ => m.other_attributes.push(format!("a={value}")),
    }
    Ok(())
}

/// What we put into an offer or answer: our RTP address and what we speak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalMedia {
    /// Where we receive RTP.
    pub rtp_address: SocketAddr,
    /// Codecs in preference order (the first common one wins when answering).
    pub codecs: Vec<Codec>,
    /// Whether we accept/offer telephone-event (RFC 4733).
    pub telephone_event: bool,
    /// Our direction (sendrecv normally, sendonly/inactive to hold).
    pub direction: Direction,
    /// `o=` session id (stable for the call).
    pub session_id: u64,
    /// `o=` session version (bump on each new offer/answer that changes).
    pub session_version: u64,
}

impl LocalMedia {
    /// Every codec in [`Codec::ALL`]'s order (PCMU, PCMA, G.722), telephone-event, sendrecv.
    pub fn new(rtp_address: SocketAddr, session_id: u64) -> LocalMedia {
        LocalMedia {
            rtp_address,
            codecs: Codec::ALL.to_vec(),
            telephone_event: true,
            direction: Direction::SendRecv,
            session_id,
            session_version: 1,
        }
    }
}

/// The outcome of offer/answer for the audio stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegotiatedMedia {
    /// Where to send RTP; `None` when the peer gave port 0 or no address (or 0.0.0.0 hold).
    pub remote_rtp: Option<SocketAddr>,
    /// The chosen codec.
    pub codec: Codec,
    /// Its payload type (static).
    pub payload_type: u8,
    /// telephone-event payload type both sides use, if negotiated.
    pub telephone_event_pt: Option<u8>,
    /// Packet time the peer asked to receive (`a=ptime`), if any.
    pub remote_ptime_ms: Option<u32>,
    /// The longest packet time the peer accepts (`a=maxptime`), if any.
    pub remote_maxptime_ms: Option<u32>,
    /// Our direction after negotiation (sendonly/inactive when the peer holds us).
    pub local_direction: Direction,
    /// The stream is SRTP (keyed by the `a=crypto` lines of its offer and answer).
    pub srtp: bool,
}

/// Whether a call's media may, or must, be SRTP keyed by SDES (RFC 4568).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SrtpPolicy {
    /// Plain RTP only: `RTP/SAVP` streams are refused, `a=crypto` lines ignored.
    Off,
    /// Either: an offer with a usable `a=crypto` (on `RTP/SAVP`, or best-effort on `RTP/AVP`)
    /// is answered in kind with SRTP; a plain one with plain RTP.
    #[default]
    Optional,
    /// SRTP only: an offer without a usable `a=crypto` is refused.
    Required,
}

impl NegotiatedMedia {
    /// The packet time we send: [`FRAME_MS`] (20 ms) unless the peer's `a=maxptime` only allows
    /// less (then that, in whole 10 ms G.711 steps, at least 10). A peer's `a=ptime` is a wish
    /// for what it receives (RFC 4566 §6); we keep 20 ms, which every G.711 peer accepts.
    pub fn send_ptime_ms(&self) -> u32 {
        match self.remote_maxptime_ms {
            Some(max) if max < FRAME_MS => (max / 10 * 10).max(10),
            _ => FRAME_MS,
        }
    }
}

/// The offered telephone-event payload type on `clock_hz`, the chosen codec's RTP clock (RFC
/// 4733 §2.1: events share the clock of the audio they replace).
fn telephone_event_pt(m: &MediaDescription, clock_hz: u32) -> Option<u8> {
    m.rtpmaps
        .iter()
        .find(|r| r.encoding.eq_ignore_ascii_case("telephone-event") && r.clock_rate_hz == clock_hz)
        .map(|r| r.payload_type)
        .filter(|pt| m.payload_types().any(|p| p == *pt))
}

/// The codec a payload type stands for, when its clock is the codec's: `G722/16000` (a
/// common mistake for G.722's 8000 Hz RTP clock) is not G.722, `opus/16000` is not Opus
/// (RFC 7587 §7 fixes 48000/2), and neither is chosen.
fn codec_of(m: &MediaDescription, pt: u8) -> Option<Codec> {
    let map = m.rtpmap(pt)?;
    let codec = Codec::from_name(&map.encoding)?;
    (map.clock_rate_hz == codec.rtp_clock_hz()).then_some(codec)
}

/// Our `a=fmtp` parameters for Opus (RFC 7587 §6.1): we play and capture 16 kHz, decode
/// in-band FEC and send mono.
pub const OPUS_FMTP: &str =
    "maxplaybackrate=16000;sprop-maxcapturerate=16000;useinbandfec=1;stereo=0;sprop-stereo=0";

fn is_unspecified(addr: Option<SocketAddr>) -> Option<SocketAddr> {
    // RFC 3264 §8.4: c=0.0.0.0 is the old way to hold.
    addr.filter(|a| !a.ip().is_unspecified())
}

/// One audio section: `codecs` with their payload types, then telephone-event at each
/// `(payload type, clock)` of `events`.
fn audio_section(
    local: &LocalMedia,
    codecs: &[(Codec, u8)],
    events: &[(u8, u32)],
    direction: Direction,
) -> MediaDescription {
    let mut formats: Vec<String> = codecs.iter().map(|(_, pt)| pt.to_string()).collect();
    let mut rtpmaps: Vec<RtpMap> = codecs
        .iter()
        .map(|&(c, pt)| RtpMap {
            payload_type: pt,
            encoding: c.encoding_name().into(),
            clock_rate_hz: c.rtp_clock_hz(),
            channels: c.rtpmap_channels(),
        })
        .collect();
    let mut fmtps: Vec<(u8, String)> = codecs
        .iter()
        .filter(|(c, _)| *c == Codec::Opus)
        .map(|&(_, pt)| (pt, OPUS_FMTP.to_string()))
        .collect();
    for &(pt, clock_rate_hz) in events {
        formats.push(pt.to_string());
        rtpmaps.push(RtpMap {
            payload_type: pt,
            encoding: "telephone-event".into(),
            clock_rate_hz,
            channels: None,
        });
        fmtps.push((pt, "0-16".to_string()));
    }
    MediaDescription {
        media: "audio".into(),
        port: local.rtp_address.port(),
        protocol: "RTP/AVP".into(),
        formats,
        connection: None,
        rtpmaps,
        fmtps,
        ptime_ms: Some(FRAME_MS),
        maxptime_ms: None,
        direction: Some(direction),
        other_attributes: Vec::new(),
    }
}

fn session(local: &LocalMedia, media: Vec<MediaDescription>) -> SessionDescription {
    SessionDescription {
        origin_user: "ontime".into(),
        session_id: local.session_id,
        session_version: local.session_version,
        origin_address: local.rtp_address.ip(),
        session_name: "ontime".into(),
        connection: Some(local.rtp_address.ip()),
        direction: None,
        media,
        other_lines: Vec::new(),
    }
}

/// Builds an offer: one audio stream with our codecs, telephone-event at
/// [`PT_TELEPHONE_EVENT_OFFER`] on 8000 Hz when a codec runs that clock and at
/// [`PT_TELEPHONE_EVENT_48K_OFFER`] on 48000 Hz when Opus is offered, ptime 20, our direction.
pub fn build_offer(local: &LocalMedia) -> SessionDescription {
    let codecs: Vec<(Codec, u8)> = local
        .codecs
        .iter()
        .map(|&c| (c, c.payload_type()))
        .collect();
    let mut events = Vec::new();
    if local.telephone_event {
        for (pt, clock) in [
            (PT_TELEPHONE_EVENT_OFFER, SAMPLE_RATE_HZ),
            (PT_TELEPHONE_EVENT_48K_OFFER, OPUS_CLOCK_HZ),
        ] {
            if local.codecs.iter().any(|c| c.rtp_clock_hz() == clock) {
                events.push((pt, clock));
            }
        }
    }
    session(
        local,
        vec![audio_section(local, &codecs, &events, local.direction)],
    )
}

/// Answers an offer (RFC 3264 §6): the first of our codecs the offer's audio stream carries,
/// telephone-event at the offered payload type, ptime 20, direction answered per §6.1; every
/// other `m=` line is refused with port 0. `Err(Error::NoCommonCodec)` means answer 488.
/// Plain RTP only (`RTP/SAVP` refused): see [`answer_offer_srtp`].
pub fn answer_offer(
    offer: &SessionDescription,
    local: &LocalMedia,
) -> Result<(SessionDescription, NegotiatedMedia)> {
    answer_offer_srtp(offer, local, SrtpPolicy::Off, &mut |_, _| None)
}

/// [`answer_offer`] for offers that may ask for SRTP (RFC 3711 keyed by SDES, RFC 4568).
///
/// `crypto_for(index, section)` reads the `a=crypto` lines of offered section `index` (see
/// [`MediaDescription::attribute_values`]) and returns the value of our answer's `a=crypto`
/// (one of the offered suites, with our fresh key), or `None` when none is usable; this crate
/// does no cryptography, the caller does. Sections are tried in order: under
/// [`SrtpPolicy::Optional`] a usable crypto line makes the stream SRTP (on `RTP/SAVP`, or
/// best-effort on `RTP/AVP`), an `RTP/SAVP` section without one is skipped; under
/// [`SrtpPolicy::Required`] only sections with one count; under [`SrtpPolicy::Off`] only
/// `RTP/AVP`. The answer mirrors the chosen section's profile. When codecs were in common but
/// the policy refused every section, the error is [`Error::Srtp`] (answer 488 with a Warning
/// saying why).
pub fn answer_offer_srtp(
    offer: &SessionDescription,
    local: &LocalMedia,
    policy: SrtpPolicy,
    crypto_for: &mut dyn FnMut(usize, &MediaDescription) -> Option<String>,
) -> Result<(SessionDescription, NegotiatedMedia)> {
    let mut chosen: Option<(usize, Codec, u8, Option<String>)> = None;
    let mut refused_for_srtp: Option<&'static str> = None;
    for (i, m) in offer.media.iter().enumerate() {
        let savp = m.protocol.eq_ignore_ascii_case("RTP/SAVP");
        if m.media != "audio"
            || m.port == 0
            || !(savp || m.protocol.eq_ignore_ascii_case("RTP/AVP"))
        {
            continue;
        }
        let offered: Vec<(Codec, u8)> = m
            .payload_types()
            .filter_map(|pt| codec_of(m, pt).map(|c| (c, pt)))
            .collect();
        let Some((c, pt)) = local
            .codecs
            .iter()
            .find_map(|want| offered.iter().find(|(c, _)| c == want).copied())
        else {
            continue;
        };
        let crypto = match policy {
            SrtpPolicy::Off => None,
            _ if m.attribute_values("crypto").next().is_none() => None,
            _ => crypto_for(i, m),
        };
        let refusal = match (policy, savp, crypto.is_some()) {
            (SrtpPolicy::Off, true, _) => Some("SRTP not supported"),
            (SrtpPolicy::Optional, true, false) => Some("no usable SRTP crypto suite offered"),
            (SrtpPolicy::Required, _, false) => Some("SRTP required"),
            _ => None,
        };
        if let Some(why) = refusal {
            refused_for_srtp.get_or_insert(why);
            continue;
        }
        chosen = Some((i, c, pt, crypto));
        break;
    }
    let (index, codec, payload_type, crypto) = match chosen {
        Some(c) => c,
        None => {
            return Err(match refused_for_srtp {
                Some(why) => Error::Srtp(why),
                None => Error::NoCommonCodec,
            })
        }
    };
    let offered = &offer.media[index];
    let te_pt = if local.telephone_event {
        telephone_event_pt(offered, codec.rtp_clock_hz())
    } else {
        None
    };
    let offer_dir = offer.direction_of(offered);
    let local_direction = offer_dir.answer_to(local.direction);
    let mut media = Vec::with_capacity(offer.media.len());
    for (i, m) in offer.media.iter().enumerate() {
        if i == index {
            let events: Vec<(u8, u32)> = te_pt
                .map(|pt| (pt, codec.rtp_clock_hz()))
                .into_iter()
                .collect();
            let mut section =
                audio_section(local, &[(codec, payload_type)], &events, local_direction);
            // The answer keeps the offer's profile (RFC 3264 §6); a best-effort SRTP offer on
            // RTP/AVP is answered on RTP/AVP with its crypto line.
            section.protocol = m.protocol.clone();
            if let Some(c) = &crypto {
                section.other_attributes.push(format!("a=crypto:{c}"));
            }
            media.push(section);
        } else {
            // RFC 3264 §6: a refused stream is answered with port 0 and the offered formats.
            media.push(MediaDescription {
                media: m.media.clone(),
                port: 0,
                protocol: m.protocol.clone(),
                formats: m.formats.clone(),
                connection: None,
                rtpmaps: Vec::new(),
                fmtps: Vec::new(),
                ptime_ms: None,
                maxptime_ms: None,
                direction: None,
                other_attributes: Vec::new(),
            });
        }
    }
    let negotiated = NegotiatedMedia {
        remote_rtp: is_unspecified(offer.rtp_address(offered)),
        codec,
        payload_type,
        telephone_event_pt: te_pt,
        remote_ptime_ms: offered.ptime_ms,
        remote_maxptime_ms: offered.maxptime_ms,
        local_direction,
        srtp: crypto.is_some(),
    };
    Ok((session(local, media), negotiated))
}

/// Reads an answer to our offer: the codec the answer chose (its first format we offered),
/// telephone-event, the remote RTP address and directions.
pub fn read_answer(answer: &SessionDescription, local: &LocalMedia) -> Result<NegotiatedMedia> {
    let m = answer
        .media
        .iter()
        .find(|m| m.media == "audio" && m.port != 0)
        .ok_or_else(|| sdp_err("answer has no accepted audio stream"))?;
    let (codec, payload_type) = m
        .payload_types()
        .find_map(|pt| {
            codec_of(m, pt)
                .filter(|c| local.codecs.contains(c))
                .map(|c| (c, pt))
        })
        .ok_or(Error::NoCommonCodec)?;
    let answer_dir = answer.direction_of(m);
    let (peer_send, peer_recv) = answer_dir.flags();
    let (we_send, we_recv) = local.direction.flags();
    Ok(NegotiatedMedia {
        remote_rtp: is_unspecified(answer.rtp_address(m)),
        codec,
        payload_type,
        telephone_event_pt: if local.telephone_event {
            telephone_event_pt(m, codec.rtp_clock_hz())
        } else {
            None
        },
        remote_ptime_ms: m.ptime_ms,
        remote_maxptime_ms: m.maxptime_ms,
        local_direction: Direction::from_flags(we_send && peer_recv, we_recv && peer_send),
        // Our offers are plain RTP/AVP without crypto lines.
        srtp: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFER: &str = "v=0\r\no=- 1 2 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n\
m=audio 4000 RTP/AVP 8 0 96\r\na=rtpmap:96 telephone-event/8000\r\na=fmtp:96 0-15\r\na=ptime:30\r\n";

    fn local() -> LocalMedia {
        LocalMedia::new("10.0.0.1:20000".parse().unwrap(), 7)
    }

    #[test]
    fn answers_with_preferred_codec_and_offered_event_pt() {
        let offer = SessionDescription::parse(OFFER.as_bytes()).unwrap();
        let (answer, n) = answer_offer(&offer, &local()).unwrap();
        assert_eq!(n.codec, Codec::Pcmu);
        assert_eq!(n.telephone_event_pt, Some(96));
        assert_eq!(n.remote_rtp, Some("192.0.2.1:4000".parse().unwrap()));
        assert_eq!(n.remote_ptime_ms, Some(30));
        assert_eq!(n.send_ptime_ms(), 20);
        let short =
            SessionDescription::parse(format!("{OFFER}a=maxptime:10\r\n").as_bytes()).unwrap();
        assert_eq!(
            answer_offer(&short, &local()).unwrap().1.send_ptime_ms(),
            10
        );
        let text = answer.to_sdp_string();
        assert!(text.contains("m=audio 20000 RTP/AVP 0 96\r\n"), "{text}");
        assert!(text.contains("a=ptime:20\r\n"));
        let back = SessionDescription::parse(text.as_bytes()).unwrap();
        assert_eq!(back, answer);
    }

    #[test]
    fn pcma_preference_is_honoured() {
        let offer = SessionDescription::parse(OFFER.as_bytes()).unwrap();
        let mut l = local();
        l.codecs = vec![Codec::Pcma, Codec::Pcmu];
        let (_, n) = answer_offer(&offer, &l).unwrap();
        assert_eq!((n.codec, n.payload_type), (Codec::Pcma, 8));
    }

    /// The negotiation matrix: what each offer gets answered with under each preference list.
    #[test]
    fn codec_matrix_answers_the_first_of_ours_the_offer_carries() {
        let only = |formats: &str, maps: &str| {
            let sdp = OFFER
                .replace("8 0 96", formats)
                .replace("a=rtpmap:96", &format!("{maps}a=rtpmap:96"));
            SessionDescription::parse(sdp.as_bytes()).unwrap()
        };
        let g722_only = only("9 96", "a=rtpmap:9 G722/8000\r\n");
        let g722_static = only("9 96", "");
        let g722_wrong_clock = only("9 96", "a=rtpmap:9 G722/16000\r\n");
        let all = only("9 0 8 96", "");
        let g711 = SessionDescription::parse(OFFER.as_bytes()).unwrap();
        let default = local();
        let mut wideband_first = local();
        wideband_first.codecs = vec![Codec::G722, Codec::Pcmu, Codec::Pcma];
        let mut g711_only = local();
        g711_only.codecs = vec![Codec::Pcmu, Codec::Pcma];
        type Case<'a> = (&'a SessionDescription, &'a LocalMedia, Option<(Codec, u8)>);
        let cases: [Case; 9] = [
            (&g722_only, &default, Some((Codec::G722, 9))),
            (&g722_static, &default, Some((Codec::G722, 9))),
            (&g722_wrong_clock, &default, None),
            (&all, &default, Some((Codec::Pcmu, 0))),
            (&all, &wideband_first, Some((Codec::G722, 9))),
            (&g711, &wideband_first, Some((Codec::Pcmu, 0))),
            (&g722_only, &g711_only, None),
            (&all, &g711_only, Some((Codec::Pcmu, 0))),
            (&g711, &default, Some((Codec::Pcmu, 0))),
        ];
        for (i, (offer, ours, want)) in cases.into_iter().enumerate() {
            match (answer_offer(offer, ours), want) {
                (Ok((answer, n)), Some((codec, pt))) => {
                    assert_eq!((n.codec, n.payload_type), (codec, pt), "case {i}");
                    let text = answer.to_sdp_string();
                    let line = format!("a=rtpmap:{pt} {}/8000\r\n", codec.encoding_name());
                    assert!(text.contains(&line), "case {i}: {text}");
                    assert!(text.contains(&format!("m=audio 20000 RTP/AVP {pt} 96\r\n")));
                }
                (Err(Error::NoCommonCodec), None) => {}
                (got, want) => panic!("case {i}: {got:?}, wanted {want:?}"),
            }
        }
        // Our offer lists every codec with its rtpmap, G.722 on its 8000 Hz clock, Opus on
        // 48000/2 with its fmtp, and telephone-event on both clocks.
        let offer = build_offer(&default).to_sdp_string();
        assert!(
            offer.contains("m=audio 20000 RTP/AVP 0 8 9 111 101 110\r\n"),
            "{offer}"
        );
        assert!(offer.contains("a=rtpmap:9 G722/8000\r\n"), "{offer}");
        assert!(offer.contains("a=rtpmap:111 opus/48000/2\r\n"), "{offer}");
        assert!(
            offer.contains(&format!("a=fmtp:111 {OPUS_FMTP}\r\n")),
            "{offer}"
        );
        assert!(
            offer.contains("a=rtpmap:101 telephone-event/8000\r\n"),
            "{offer}"
        );
        assert!(
            offer.contains("a=rtpmap:110 telephone-event/48000\r\n"),
            "{offer}"
        );
        // Without Opus, no 48 kHz events; with only Opus, no 8 kHz ones.
        let offer = build_offer(&g711_only).to_sdp_string();
        assert!(
            offer.contains("m=audio 20000 RTP/AVP 0 8 101\r\n"),
            "{offer}"
        );
        let mut opus_only = local();
        opus_only.codecs = vec![Codec::Opus];
        let offer = build_offer(&opus_only).to_sdp_string();
        assert!(
            offer.contains("m=audio 20000 RTP/AVP 111 110\r\n"),
            "{offer}"
        );
        // A peer answering our offer with G.722 only is read as G.722.
        let mut peer = LocalMedia::new("10.0.0.2:30000".parse().unwrap(), 9);
        peer.codecs = vec![Codec::G722];
        let (answer, _) = answer_offer(&build_offer(&default), &peer).unwrap();
        assert_eq!(read_answer(&answer, &default).unwrap().codec, Codec::G722);
    }

    /// Opus is found by name and clock whatever its dynamic payload type, answered with the
    /// offer's payload type and telephone-event on the 48 kHz clock; a wrong clock is not Opus.
    #[test]
    fn opus_matrix_answers_with_the_offered_payload_type() {
        let offer = |formats: &str, maps: &str| {
            let sdp = format!(
                "v=0\r\no=- 1 2 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n\
                 m=audio 4000 RTP/AVP {formats}\r\n{maps}\
                 a=rtpmap:101 telephone-event/8000\r\na=rtpmap:97 telephone-event/48000\r\n"
            );
            SessionDescription::parse(sdp.as_bytes()).unwrap()
        };
        let opus = "a=rtpmap:107 opus/48000/2\r\na=fmtp:107 useinbandfec=1\r\n";
        let opus_only = offer("107 97", opus);
        let opus_then_g711 = offer("107 0 101 97", opus);
        let opus_wrong_clock = offer("107 97", "a=rtpmap:107 opus/16000\r\n");
        let opus_no_map = offer("111 97", "");
        let default = local();
        let mut opus_first = local();
        opus_first.codecs = vec![Codec::Opus, Codec::G722, Codec::Pcmu];
        type Case<'a> = (
            &'a SessionDescription,
            &'a LocalMedia,
            Option<(Codec, u8, Option<u8>)>,
        );
        let cases: [Case; 6] = [
            (&opus_only, &default, Some((Codec::Opus, 107, Some(97)))),
            (&opus_then_g711, &default, Some((Codec::Pcmu, 0, Some(101)))),
            (
                &opus_then_g711,
                &opus_first,
                Some((Codec::Opus, 107, Some(97))),
            ),
            (&opus_wrong_clock, &default, None),
            // 111 is only our offer's choice: without an rtpmap it is nothing.
            (&opus_no_map, &default, None),
            (
                &opus_only,
                &{
                    let mut l = local();
                    l.codecs = vec![Codec::Pcmu, Codec::G722];
                    l
                },
                None,
            ),
        ];
        for (i, (offer, ours, want)) in cases.into_iter().enumerate() {
            match (answer_offer(offer, ours), want) {
                (Ok((answer, n)), Some((codec, pt, te))) => {
                    assert_eq!(
                        (n.codec, n.payload_type, n.telephone_event_pt),
                        (codec, pt, te),
                        "case {i}"
                    );
                    let text = answer.to_sdp_string();
                    if codec == Codec::Opus {
                        assert!(text.contains("a=rtpmap:107 opus/48000/2\r\n"), "{text}");
                        assert!(
                            text.contains("a=rtpmap:97 telephone-event/48000\r\n"),
                            "{text}"
                        );
                        assert!(text.contains("m=audio 20000 RTP/AVP 107 97\r\n"), "{text}");
                    }
                }
                (Err(Error::NoCommonCodec), None) => {}
                (got, want) => panic!("case {i}: {got:?}, wanted {want:?}"),
            }
        }
        // A peer answering our offer with Opus is read as Opus at the answer's payload type.
        let mut peer = LocalMedia::new("10.0.0.2:30000".parse().unwrap(), 9);
        peer.codecs = vec![Codec::Opus];
        let (answer, _) = answer_offer(&build_offer(&default), &peer).unwrap();
        let n = read_answer(&answer, &default).unwrap();
        assert_eq!(
            (n.codec, n.payload_type, n.telephone_event_pt),
            (Codec::Opus, 111, Some(110))
        );
    }

    #[test]
    fn no_common_codec_is_an_error() {
        let sdp = OFFER.replace("8 0 96", "18 96");
        let offer = SessionDescription::parse(sdp.as_bytes()).unwrap();
        assert!(matches!(
            answer_offer(&offer, &local()),
            Err(Error::NoCommonCodec)
        ));
    }

    #[test]
    fn hold_directions_answer_per_rfc3264() {
        for (offered, answered) in [
            ("sendonly", Direction::RecvOnly),
            ("inactive", Direction::Inactive),
            ("recvonly", Direction::SendOnly),
            ("sendrecv", Direction::SendRecv),
        ] {
            let sdp = format!("{OFFER}a={offered}\r\n");
            let offer = SessionDescription::parse(sdp.as_bytes()).unwrap();
            let (a, n) = answer_offer(&offer, &local()).unwrap();
            assert_eq!(n.local_direction, answered);
            assert_eq!(a.media[0].direction, Some(answered));
        }
    }

    #[test]
    fn offer_reads_back_as_answer() {
        let l = local();
        let offer = build_offer(&l);
        let (answer, _) = answer_offer(
            &offer,
            &LocalMedia::new("10.0.0.2:30000".parse().unwrap(), 9),
        )
        .unwrap();
        let n = read_answer(&answer, &l).unwrap();
        assert_eq!(n.codec, Codec::Pcmu);
        assert_eq!(n.telephone_event_pt, Some(PT_TELEPHONE_EVENT_OFFER));
        assert_eq!(n.remote_rtp, Some("10.0.0.2:30000".parse().unwrap()));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "v=1\r\n",
            "v=0\r\no=- x 1 IN IP4 1.2.3.4\r\n",
            "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nm=audio x RTP/AVP 0\r\n",
            "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4 example.com\r\n",
            "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nm=audio 4 RTP/AVP\r\n",
            "v=0\r\nbogus\r\n",
        ] {
            assert!(
                SessionDescription::parse(bad.as_bytes()).is_err(),
                "{bad:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = SessionDescription::parse(&bytes);
        }
        #[test]
        fn parse_never_panics_on_sdp_like(s in "(v=0\r\n)?([oscmta]=[ -~]{0,40}\r\n){0,12}") {
            if let Ok(sdp) = SessionDescription::parse(s.as_bytes()) {
                let _ = answer_offer(&sdp, &local());
            }
        }
    }

    fn srtp_offer(profile: &str, crypto: bool) -> SessionDescription {
        let crypto = if crypto {
            "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\n"
        } else {
            ""
        };
        let text = format!(
            "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n\
             m=audio 4000 {profile} 0\r\na=rtpmap:0 PCMU/8000\r\n{crypto}"
        );
        SessionDescription::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn srtp_offers_are_answered_in_kind_or_refused_by_policy() {
        let answer_line = "1 AES_CM_128_HMAC_SHA1_80 inline:ANSWERKEY".to_string();
        let mut usable = |_: usize, m: &MediaDescription| {
            assert_eq!(m.attribute_values("crypto").count(), 1);
            Some(answer_line.clone())
        };
        // RTP/SAVP with a usable crypto line: SRTP, answered on RTP/SAVP with our line.
        let (sdp, n) = answer_offer_srtp(
            &srtp_offer("RTP/SAVP", true),
            &local(),
            SrtpPolicy::Optional,
            &mut usable,
        )
        .unwrap();
        assert!(n.srtp);
        assert_eq!(sdp.media[0].protocol, "RTP/SAVP");
        assert_eq!(
            sdp.media[0].attribute_values("crypto").collect::<Vec<_>>(),
            vec![answer_line.as_str()]
        );
        // Best-effort SRTP on RTP/AVP: answered on RTP/AVP with crypto.
        let (sdp, n) = answer_offer_srtp(
            &srtp_offer("RTP/AVP", true),
            &local(),
            SrtpPolicy::Optional,
            &mut usable,
        )
        .unwrap();
        assert!(n.srtp);
        assert_eq!(sdp.media[0].protocol, "RTP/AVP");
        // Plain offers stay plain under Optional, and are refused under Required.
        let (_, n) = answer_offer_srtp(
            &srtp_offer("RTP/AVP", false),
            &local(),
            SrtpPolicy::Optional,
            &mut usable,
        )
        .unwrap();
        assert!(!n.srtp);
        let e = answer_offer_srtp(
            &srtp_offer("RTP/AVP", false),
            &local(),
            SrtpPolicy::Required,
            &mut usable,
        )
        .unwrap_err();
        assert_eq!(e, Error::Srtp("SRTP required"));
        // No usable suite on RTP/SAVP, or SRTP turned off: refused, and the reason says so.
        let e = answer_offer_srtp(
            &srtp_offer("RTP/SAVP", true),
            &local(),
            SrtpPolicy::Optional,
            &mut |_, _| None,
        )
        .unwrap_err();
        assert_eq!(e, Error::Srtp("no usable SRTP crypto suite offered"));
        let e = answer_offer(&srtp_offer("RTP/SAVP", true), &local()).unwrap_err();
        assert_eq!(e, Error::Srtp("SRTP not supported"));
        // Off ignores crypto on RTP/AVP: plain, no crypto line in the answer.
        let (sdp, n) = answer_offer(&srtp_offer("RTP/AVP", true), &local()).unwrap();
        assert!(!n.srtp);
        assert_eq!(sdp.media[0].attribute_values("crypto").count(), 0);
    }
}
