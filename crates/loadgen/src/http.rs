//! One HTTP/1.1 GET of the gateway's `/metrics` page. Written by hand (a request line and a
//! read to EOF) because the workspace's hyper is server-only and a plain-text page on a local
//! port needs nothing more.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{Error, Result};

/// Where to scrape: `host:port` and a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsUrl {
    /// The server.
    pub addr: SocketAddr,
    /// The path (`/metrics` unless given).
    pub path: String,
}

impl MetricsUrl {
    /// Parse `http://HOST:PORT[/path]` or `HOST:PORT` (an IP literal; the harness runs next to
    /// the gateway and needs no DNS).
    pub fn parse(url: &str) -> Result<MetricsUrl> {
        let invalid = |reason: &str| Error::Invalid {
            what: "metrics URL",
            reason: format!("`{url}`: {reason}"),
        };
        if url.starts_with("https://") {
            return Err(invalid(
                "https is not supported; use the plain-HTTP metrics port",
            ));
        }
        let rest = url.strip_prefix("http://").unwrap_or(url);
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/metrics"),
        };
        let addr = host
            .parse()
            .map_err(|_| invalid("expected IP:PORT, e.g. http://127.0.0.1:9090/metrics"))?;
        Ok(MetricsUrl {
            addr,
            path: path.to_owned(),
        })
    }

    /// GET the page's body (status 200 only), within `limit`.
    pub async fn get(&self, limit: Duration) -> Result<String> {
        let fail = |reason: String| Error::Http {
            url: format!("http://{}{}", self.addr, self.path),
            reason,
        };
        let fetch = async {
            let mut stream = TcpStream::connect(self.addr).await?;
            let request = format!(
                "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.path, self.addr
            );
            stream.write_all(request.as_bytes()).await?;
            let mut buf = Vec::new();
            stream.read_to_end(&mut buf).await?;
            Ok::<_, std::io::Error>(buf)
        };
        let bytes = tokio::time::timeout(limit, fetch)
            .await
            .map_err(|_| fail(format!("no answer within {limit:?}")))?
            .map_err(|e| fail(e.to_string()))?;
        let text = String::from_utf8_lossy(&bytes);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| fail("no HTTP header".into()))?;
        let status = head.split_whitespace().nth(1).unwrap_or("?");
        if status != "200" {
            return Err(fail(format!("status {status}")));
        }
        if head.lines().any(|l| {
            l.to_ascii_lowercase()
                .starts_with("transfer-encoding: chunked")
        }) {
            return Err(fail("chunked responses are not supported".into()));
        }
        Ok(body.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = MetricsUrl::parse("http://127.0.0.1:9090/metrics").unwrap();
        assert_eq!((u.addr.port(), u.path.as_str()), (9090, "/metrics"));
        assert_eq!(MetricsUrl::parse("127.0.0.1:1").unwrap().path, "/metrics");
        assert!(MetricsUrl::parse("https://x").is_err());
        assert!(MetricsUrl::parse("http://localhost:9090").is_err());
    }
}
