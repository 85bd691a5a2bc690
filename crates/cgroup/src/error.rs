//! The crate's errors.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong reading or changing a cgroup.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Changing cgroups needs root (or a delegated, writable cgroup), and this process is not
    /// root.
    #[error("{action} {path}: permission denied and not running as root (euid {euid})")]
    NotRoot {
        /// What was attempted.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The effective uid.
        euid: u32,
    },
    /// Permission denied although running as root (read-only mount, a container without
    /// cgroup delegation, or the kernel refusing the value).
    #[error(
        "{action} {path}: permission denied even as root (read-only or not delegated): {source}"
    )]
    PermissionDenied {
        /// What was attempted.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// No hierarchy with the CPU controller is mounted (neither v1 `cpu` nor v2 with `cpu`).
    #[error("no cgroup hierarchy with the {controller} controller is mounted for this process")]
    NotMounted {
        /// The controller looked for.
        controller: &'static str,
    },
    /// A cgroup file did not hold what the kernel writes there.
    #[error("cannot parse {file}: {reason} (content: {content:?})")]
    Parse {
        /// The file.
        file: PathBuf,
        /// The offending content (a line, or the file).
        content: String,
        /// What was expected.
        reason: &'static str,
    },
    /// Any other I/O error on a cgroup file.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The operation does not exist in this cgroup version.
    #[error("{what} is not supported on cgroup {version}")]
    Unsupported {
        /// The operation.
        what: &'static str,
        /// The cgroup version.
        version: crate::CgroupVersion,
    },
    /// A quota in cores must be positive and finite.
    #[error("CPU quota of {cores} cores is not a positive finite number")]
    InvalidQuota {
        /// The rejected value.
        cores: f64,
    },
    /// A child cgroup name must be one plain path component.
    #[error("child cgroup name {0:?} must be a single non-empty path component")]
    InvalidName(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
