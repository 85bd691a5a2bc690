//! A minimal SIP caller over a real UDP socket, for tests that need to know (and forge) a call's
//! Call-ID and tags, or to send from chosen loopback addresses: INVITE with PCMU SDP, ACK, BYE,
//! and in-dialog requests built from the same dialog facts.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// One dialog's identifiers, as the caller sees them.
#[derive(Debug, Clone)]
pub struct DialogIds {
    pub call_id: String,
    pub from_tag: String,
    pub to_tag: String,
    /// Where the gateway sends audio (the SDP's media address).
    pub media: SocketAddr,
    /// Where the gateway takes audio (the media address of the 200 OK's SDP answer).
    pub answer_media: Option<SocketAddr>,
}

/// A caller on `ip`: a SIP socket and a media socket.
pub struct RawUac {
    pub sip: UdpSocket,
    pub media: UdpSocket,
    pub gateway: SocketAddr,
    cseq: u32,
}

fn token() -> String {
    format!("{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    // Tests only: unique enough from the clock and the process id.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    t ^ (u64::from(std::process::id()) << 32) ^ (t >> 17)
}

/// The first line of a SIP message.
pub fn start_line(msg: &str) -> &str {
    msg.lines().next().unwrap_or("")
}

/// The value of the first header `name` (case-insensitive).
pub fn header<'a>(msg: &'a str, name: &str) -> Option<&'a str> {
    msg.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The audio address of an SDP body inside a SIP message: its `c=` address and `m=audio` port.
pub fn sdp_media(msg: &str) -> Option<SocketAddr> {
    let ip = msg
        .lines()
        .find_map(|l| l.trim().strip_prefix("c=IN IP4 "))?;
    let port = msg
        .lines()
        .find_map(|l| l.trim().strip_prefix("m=audio "))?
        .split_whitespace()
        .next()?;
    format!("{}:{port}", ip.trim()).parse().ok()
}

impl RawUac {
    /// A caller whose sockets are bound on `ip` (any loopback address works on Linux).
    pub fn new(ip: &str, gateway: SocketAddr) -> RawUac {
        let sip = UdpSocket::bind((ip, 0)).unwrap();
        sip.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        // An even media port, as SDP wants.
        let media = loop {
            let m = UdpSocket::bind((ip, 0)).unwrap();
            if m.local_addr().unwrap().port().is_multiple_of(2) {
                break m;
            }
        };
        media
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        RawUac {
            sip,
            media,
            gateway,
            cseq: 1,
        }
    }

    pub fn local(&self) -> SocketAddr {
        self.sip.local_addr().unwrap()
    }

    pub fn send(&self, msg: &str) {
        self.sip.send_to(msg.as_bytes(), self.gateway).unwrap();
    }

    /// The next SIP message within `limit`, if any.
    pub fn recv(&self, limit: Duration) -> Option<String> {
        let until = Instant::now() + limit;
        let mut buf = [0u8; 65536];
        while Instant::now() < until {
            if let Ok((n, _)) = self.sip.recv_from(&mut buf) {
                return Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        None
    }

    /// Every SIP message received within `limit`.
    pub fn recv_all(&self, limit: Duration) -> Vec<String> {
        let until = Instant::now() + limit;
        let mut out = Vec::new();
        while Instant::now() < until {
            if let Some(m) = self.recv(until.saturating_duration_since(Instant::now())) {
                out.push(m);
            }
        }
        out
    }

    /// A final response to the request with this CSeq method, skipping provisional ones.
    pub fn final_response(&self, method: &str, limit: Duration) -> Option<String> {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            let m = self.recv(until.saturating_duration_since(Instant::now()))?;
            let cseq = header(&m, "CSeq").unwrap_or("");
            if m.starts_with("SIP/2.0 1") || !cseq.ends_with(method) {
                continue;
            }
            return Some(m);
        }
        None
    }

    /// An INVITE with PCMU SDP naming this caller's media socket.
    pub fn invite_text(&self, call_id: &str, from_tag: &str) -> String {
        let local = self.local();
        let media = self.media.local_addr().unwrap();
        let sdp = format!(
            "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
             m=audio {port} RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n\
             a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\na=sendrecv\r\n",
            ip = media.ip(),
            port = media.port()
        );
        format!(
            "INVITE sip:bot@{gw} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK{b}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:caller@{local}>;tag={from_tag}\r\nTo: <sip:bot@{gw}>\r\n\
             Call-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@{local}>\r\n\
             Content-Type: application/sdp\r\nContent-Length: {len}\r\n\r\n{sdp}",
            gw = self.gateway,
            b = token(),
            len = sdp.len()
        )
    }

    /// An OPTIONS request (out of dialog, with `rport`).
    pub fn options_text(&self, call_id: &str) -> String {
        let local = self.local();
        format!(
            "OPTIONS sip:bot@{gw} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK{b};rport\r\n\
             From: <sip:probe@{local}>;tag={t}\r\nTo: <sip:bot@{gw}>\r\nCall-ID: {call_id}\r\n\
             CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
            gw = self.gateway,
            b = token(),
            t = token(),
        )
    }

    /// Place a call and ACK its 200: the dialog's identifiers, or the final response that
    /// refused it.
    pub fn call(&mut self) -> Result<DialogIds, String> {
        let call_id = format!("{}@test", token());
        let from_tag = token();
        self.send(&self.invite_text(&call_id, &from_tag));
        let resp = self
            .final_response("INVITE", Duration::from_secs(10))
            .ok_or("no final response to the INVITE")?;
        if !resp.starts_with("SIP/2.0 200") {
            return Err(resp);
        }
        let to = header(&resp, "To").unwrap_or("");
        let to_tag = to
            .split(";tag=")
            .nth(1)
            .map(|t| t.split(';').next().unwrap_or(t).trim().to_string())
            .ok_or("no To tag")?;
        let ids = DialogIds {
            call_id,
            from_tag,
            to_tag,
            media: self.media.local_addr().unwrap(),
            answer_media: sdp_media(&resp),
        };
        self.send(&self.in_dialog_text(&ids, "ACK", 1, "", ""));
        self.cseq = 1;
        Ok(ids)
    }

    /// An in-dialog request (`extra` headers end with CRLF; `body` with its type in `extra`).
    pub fn in_dialog_text(
        &self,
        ids: &DialogIds,
        method: &str,
        cseq: u32,
        extra: &str,
        body: &str,
    ) -> String {
        let local = self.local();
        format!(
            "{method} sip:ontime@{gw} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK{b}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:caller@{local}>;tag={ft}\r\nTo: <sip:bot@{gw}>;tag={tt}\r\n\
             Call-ID: {cid}\r\nCSeq: {cseq} {method}\r\nContact: <sip:caller@{local}>\r\n{extra}\
             Content-Length: {len}\r\n\r\n{body}",
            gw = self.gateway,
            b = token(),
            ft = ids.from_tag,
            tt = ids.to_tag,
            cid = ids.call_id,
            len = body.len()
        )
    }

    /// Send BYE in the dialog and return the response.
    pub fn bye(&mut self, ids: &DialogIds) -> Option<String> {
        self.cseq += 1;
        self.send(&self.in_dialog_text(ids, "BYE", self.cseq, "", ""));
        self.final_response("BYE", Duration::from_secs(5))
    }

    /// Send `n` RTP packets of µ-law silence from the media socket to `to`, 20 ms apart, with
    /// this SSRC, starting at `seq`.
    pub fn send_rtp(socket: &UdpSocket, to: SocketAddr, ssrc: u32, seq: u16, n: u16) {
        for i in 0..n {
            let s = seq.wrapping_add(i);
            let ts = u32::from(s).wrapping_mul(160);
            let mut pkt = vec![0x80, 0x00];
            pkt.extend_from_slice(&s.to_be_bytes());
            pkt.extend_from_slice(&ts.to_be_bytes());
            pkt.extend_from_slice(&ssrc.to_be_bytes());
            pkt.extend_from_slice(&[0xFF; 160]);
            socket.send_to(&pkt, to).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// RTP datagrams that arrive on `socket` within `limit`.
    pub fn count_rtp(socket: &UdpSocket, limit: Duration) -> usize {
        let until = Instant::now() + limit;
        let mut buf = [0u8; 2048];
        let mut n = 0;
        while Instant::now() < until {
            if let Ok((len, _)) = socket.recv_from(&mut buf) {
                if len >= 12 && buf[0] >> 6 == 2 && buf[1] & 0x7f < 72 {
                    n += 1;
                }
            }
        }
        n
    }
}
