//! The crate's one error type.

/// What was wrong with an [`crate::EchoConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting outside what the canceller can do; names the field.
    #[error("echo canceller: {field} is {value}, expected {expected}")]
    InvalidConfig {
        /// The field of [`crate::EchoConfig`].
        field: &'static str,
        /// Its value, as given.
        value: u64,
        /// The range it must be in.
        expected: &'static str,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
