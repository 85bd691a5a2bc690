//! Where a SIP URI's requests go (RFC 3263 §4, without NAPTR): an IP literal is used as is; a
//! host with an explicit port is looked up by A/AAAA; otherwise SRV (`_sip._udp`, `_sip._tcp`
//! or `_sips._tcp` by transport) picks the target and port (lowest priority, then highest
//! weight), and without SRV records the host's A/AAAA with the transport's default port. DNS
//! is hickory's stub resolver with the system's configuration.

use std::net::{IpAddr, SocketAddr};

use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;
use ontime_sip::Transport;

/// A SIP URI's host part, port and transport (`sip:user@host:port;transport=tcp`, or
/// `sips:` for TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SipTarget {
    /// Host name or IP literal (brackets removed).
    pub host: String,
    /// Explicit port, if the URI has one.
    pub port: Option<u16>,
    /// The transport the URI asks for (UDP by default, TLS for `sips:`).
    pub transport: Transport,
}

impl SipTarget {
    /// Read a `sip:`/`sips:` URI (user part and other parameters ignored).
    pub fn parse(uri: &str) -> Result<SipTarget, String> {
        let uri = uri.trim().trim_start_matches('<').trim_end_matches('>');
        let (secure, rest) = if let Some(r) = uri.strip_prefix("sips:") {
            (true, r)
        } else if let Some(r) = uri.strip_prefix("sip:") {
            (false, r)
        } else {
            return Err(format!("`{uri}` is not a sip: or sips: URI"));
        };
        let mut parts = rest.split(';');
        let hostport = parts.next().unwrap_or("");
        let hostport = hostport.rsplit('@').next().unwrap_or("");
        let mut transport = if secure {
            Transport::Tls
        } else {
            Transport::Udp
        };
        for p in parts {
            if let Some(t) = p.trim().strip_prefix("transport=") {
                transport = match t.to_ascii_lowercase().as_str() {
                    "udp" if !secure => Transport::Udp,
                    "tcp" if !secure => Transport::Tcp,
                    "tls" | "tcp" => Transport::Tls,
                    other => {
                        return Err(format!(
                            "`{uri}`: transport `{other}` is not udp, tcp or tls"
                        ))
                    }
                };
            }
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, rest) = v6
                .split_once(']')
                .ok_or_else(|| format!("`{uri}`: unterminated IPv6 literal"))?;
            (h, rest.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(format!("`{uri}` has no host"));
        }
        let port = match port {
            Some(p) => Some(
                p.parse::<u16>()
                    .map_err(|_| format!("`{uri}`: port `{p}` is not a number"))?,
            ),
            None => None,
        };
        Ok(SipTarget {
            host: host.to_string(),
            port,
            transport,
        })
    }

    /// The transport's default port (5060, or 5061 for TLS).
    pub fn default_port(&self) -> u16 {
        if self.transport == Transport::Tls {
            5061
        } else {
            5060
        }
    }

    /// The SRV name RFC 3263 §4.2 looks up for this transport.
    pub fn srv_name(&self) -> String {
        let service = match self.transport {
            Transport::Udp => "_sip._udp",
            Transport::Tcp => "_sip._tcp",
            Transport::Tls => "_sips._tcp",
        };
        format!("{service}.{}.", self.host.trim_end_matches('.'))
    }
}

/// Resolve `target` to the address its requests go to.
pub async fn resolve(target: &SipTarget) -> Result<SocketAddr, String> {
    if let Ok(ip) = target.host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(
            ip,
            target.port.unwrap_or(target.default_port()),
        ));
    }
    let resolver = TokioResolver::builder_tokio()
        .map_err(|e| format!("DNS resolver: {e}"))?
        .build()
        .map_err(|e| format!("DNS resolver: {e}"))?;
    let (host, port) = match target.port {
        Some(p) => (target.host.clone(), p),
        None => match resolver.srv_lookup(target.srv_name()).await {
            Ok(lookup) => {
                let mut best: Option<(u16, u16, String, u16)> = None;
                for record in lookup.answers() {
                    if let RData::SRV(srv) = &record.data {
                        let cand = (
                            srv.priority,
                            u16::MAX - srv.weight,
                            srv.target.to_utf8(),
                            srv.port,
                        );
                        if best.as_ref().is_none_or(|b| (cand.0, cand.1) < (b.0, b.1)) {
                            best = Some(cand);
                        }
                    }
                }
                match best {
                    Some((_, _, host, port)) => (host, port),
                    None => (target.host.clone(), target.default_port()),
                }
            }
            // No SRV records (or no answer): the host itself on the default port (§4.2).
            Err(_) => (target.host.clone(), target.default_port()),
        },
    };
    let ips = resolver
        .lookup_ip(host.as_str())
        .await
        .map_err(|e| format!("{host}: {e}"))?;
    ips.iter()
        .next()
        .map(|ip| SocketAddr::new(ip, port))
        .ok_or_else(|| format!("{host}: no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sip_uris_give_host_port_and_transport() {
        let t = SipTarget::parse("sip:alice@provider.example").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.transport),
            ("provider.example", None, Transport::Udp)
        );
        assert_eq!(t.srv_name(), "_sip._udp.provider.example.");
        let t = SipTarget::parse("sips:alice@provider.example").unwrap();
        assert_eq!(t.transport, Transport::Tls);
        assert_eq!(t.default_port(), 5061);
        assert_eq!(t.srv_name(), "_sips._tcp.provider.example.");
        let t = SipTarget::parse("sip:192.0.2.1:5080;transport=tcp").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.transport),
            ("192.0.2.1", Some(5080), Transport::Tcp)
        );
        let t = SipTarget::parse("sip:[2001:db8::1]:5062").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("2001:db8::1", Some(5062)));
        assert!(SipTarget::parse("http://x").is_err());
        assert!(SipTarget::parse("sip:x:notaport").is_err());
        assert!(SipTarget::parse("sip:x;transport=sctp").is_err());
    }

    #[tokio::test]
    async fn ip_literals_resolve_without_dns() {
        let t = SipTarget::parse("sip:bob@127.0.0.1").unwrap();
        assert_eq!(
            resolve(&t).await.unwrap(),
            "127.0.0.1:5060".parse().unwrap()
        );
        let t = SipTarget::parse("sips:bob@127.0.0.1:5071").unwrap();
        assert_eq!(
            resolve(&t).await.unwrap(),
            "127.0.0.1:5071".parse().unwrap()
        );
    }
}
