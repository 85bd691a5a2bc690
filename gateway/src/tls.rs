//! TLS configurations, all rustls with the ring provider: the SIP TLS listener's server side,
//! and one client side (the system's roots plus `tls_ca_file`) for SIP over TLS we originate
//! and `wss://` bots. One TLS stack for the whole gateway, and no OpenSSL to build against.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring::default_provider;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS setting that cannot be used; names the file and says why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read or parsed (the message never shows its contents).
    #[error("config field `{field}`: {path}: {source}")]
    Pem {
        /// The config field naming the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What was wrong.
        source: rustls_pki_types::pem::Error,
    },
    /// A certificate file holds no PEM certificate.
    #[error("config field `{field}`: {path}: no PEM certificate in it")]
    NoCertificate {
        /// The config field naming the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// A CA certificate cannot be trusted (rustls refused it as a root).
    #[error("config field `{field}`: {path}: {source}")]
    Certificate {
        /// The config field naming the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// rustls refused the configuration (e.g. a key that does not match the certificate).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

fn certificates(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        field,
        path: path.to_path_buf(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            field,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The server side of the SIP TLS listener: this certificate chain and key.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates("tls_cert", cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Pem {
        field: "tls_key",
        path: key.to_path_buf(),
        source,
    })?;
    let config = ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(Arc::new(config))
}

/// The client side: the system's roots plus every certificate in `extra_ca` (for private CAs
/// and self-signed peers).
pub fn client_config(extra_ca: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    // An unreadable system store leaves only the extra CAs: say so, don't fail the start.
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::warn!(error = %e, "system CA certificates partly unreadable");
    }
    let (_added, _ignored) = roots.add_parsable_certificates(native.certs);
    if let Some(path) = extra_ca {
        for cert in certificates("tls_ca_file", path)? {
            roots.add(cert).map_err(|source| TlsError::Certificate {
                field: "tls_ca_file",
                path: path.to_path_buf(),
                source,
            })?;
        }
    }
    let config = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
