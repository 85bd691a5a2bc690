//! The crate's one error type.

/// What was wrong with a [`crate::AmdConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting outside what the detector accepts; names the field.
    #[error("answering-machine detection: {field} is {value_ms} ms, expected {expected}")]
    InvalidConfig {
        /// The field of [`crate::AmdConfig`].
        field: &'static str,
        /// Its value, in milliseconds.
        value_ms: u128,
        /// The range it must be in.
        expected: &'static str,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
