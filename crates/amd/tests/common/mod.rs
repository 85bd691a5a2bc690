//! What the detector's tests share.
pub mod calls;
