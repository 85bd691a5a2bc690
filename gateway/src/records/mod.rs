//! What a call leaves behind: its call detail record and, optionally, its recording.

pub mod cdr;
pub mod recording;
