//! Where a SIP URI's requests go (RFC 3263 §4, without NAPTR): an IP literal is used as is; a
//! host with an explicit port is looked up by A/AAAA; otherwise SRV (`_sip._udp`, `_sip._tcp`
//! or `_sips._tcp` by transport) picks the target and port (lowest priority, then highest
//! weight), and without SRV records the host's A/AAAA with the transport's default port. DNS
//! is hickory's stub resolver with the system's configuration.

use std::net::{IpAddr, SocketAddr};

use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;
use ontime_sip::Transport;

/// Why a SIP URI names no address to send to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The URI is not a `sip:` or `sips:` URI, or its host, port or transport is malformed.
    #[error("`{uri}`: {reason}")]
    Uri {
        /// The URI as given.
        uri: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The URI's port is not a number.
    #[error("`{uri}`: port `{port}` is not a number")]
    Port {
        /// The URI as given.
        uri: String,
        /// The port as written.
        port: String,
        /// The parse error.
        source: std::num::ParseIntError,
    },
    /// The URI asks for a transport other than UDP, TCP or TLS.
    #[error("`{uri}`: transport `{transport}` is not udp, tcp or tls")]
    Transport {
        /// The URI as given.
        uri: String,
        /// The transport as written.
        transport: String,
    },
    /// The system's DNS configuration cannot be read.
    #[error("DNS resolver: {0}")]
    // Boxed: the resolver's error type is a dependency's, kept out of the public API.
    Resolver(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The host's A/AAAA lookup failed.
    #[error("{host}: {source}")]
    Lookup {
        /// The host looked up (the SRV target, or the URI's host).
        host: String,
        /// The resolver's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The host has no address.
    #[error("{host}: no address")]
    NoAddress {
        /// The host looked up.
        host: String,
    },
}

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
    pub fn parse(uri: &str) -> Result<SipTarget, ResolveError> {
        let uri = uri.trim().trim_start_matches('<').trim_end_matches('>');
        let bad = |reason| ResolveError::Uri {
            uri: uri.to_string(),
            reason,
        };
        let (secure, rest) = if let Some(r) = uri.strip_prefix("sips:") {
            (true, r)
        } else if let Some(r) = uri.strip_prefix("sip:") {
            (false, r)
        } else {
            return Err(bad("not a sip: or sips: URI"));
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
                        return Err(ResolveError::Transport {
                            uri: uri.to_string(),
                            transport: other.to_string(),
                        })
                    }
                };
            }
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, rest) = v6
                .split_once(']')
                .ok_or_else(|| bad("unterminated IPv6 literal"))?;
            (h, rest.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => Some(p.parse::<u16>().map_err(|source| ResolveError::Port {
                uri: uri.to_string(),
                port: p.to_string(),
                source,
            })?),
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
pub async fn resolve(target: &SipTarget) -> Result<SocketAddr, ResolveError> {
    if let Ok(ip) = target.host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(
            ip,
            target.port.unwrap_or(target.default_port()),
        ));
    }
    let resolver = TokioResolver::builder_tokio()
        .map_err(|e| ResolveError::Resolver(e.into()))?
        .build()
        .map_err(|e| ResolveError::Resolver(e.into()))?;
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
        .map_err(|e| ResolveError::Lookup {
            host: host.clone(),
            source: e.into(),
        })?;
    ips.iter()
        .next()
        .map(|ip| SocketAddr::new(ip, port))
        .ok_or(ResolveError::NoAddress { host })
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
