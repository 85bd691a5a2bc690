//! The harness's error type.

use std::path::PathBuf;

/// What went wrong while loading fixtures, placing the gateway or talking to it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A caller fixture is not an 8 kHz mono µ-law WAV.
    #[error("caller WAV {path}: {reason}")]
    Wav {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// A file or directory could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// What the harness was doing.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A socket or process operation failed.
    #[error("{action}: {source}")]
    Os {
        /// What the harness was doing.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A flag's value is unusable.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The flag or value.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The metrics endpoint could not be scraped.
    #[error("GET {url}: {reason}")]
    Http {
        /// The URL.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// The spawned gateway did not come up.
    #[error("gateway: {0}")]
    Gateway(String),
    /// SIP signalling failed locally.
    #[error("SIP: {0}")]
    Sip(#[from] ontime_sip::Error),
    /// The harness's own media clock failed.
    #[error("sender: {0}")]
    Sender(#[from] ontime_sender::Error),
    /// Creating or reading the gateway's cgroup failed.
    #[error("cgroup: {0}")]
    Cgroup(#[from] ontime_cgroup::Error),
    /// Writing the plot failed.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The PNG being written.
        path: PathBuf,
        /// plotters' message.
        reason: String,
    },
}

/// The harness's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
