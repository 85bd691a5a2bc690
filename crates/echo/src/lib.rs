//! # ontime-echo
//!
//! A line-echo canceller for barge-in, sans-IO. On PSTN and mobile lines the caller's audio
//! carries the bot's own reply back, 20–500 ms later and 6–30 dB down; a barge-in VAD that
//! hears it cuts the reply on its own echo. The gateway knows exactly what it played and when
//! (the sender's sent tap), which is the reference a canceller needs.
//!
//! Per call, on one sample timeline (8 kHz):
//! - the **bulk delay** is found by correlating 2 ms RMS envelopes of the reference and the
//!   caller's audio over every lag up to [`EchoConfig::max_delay`], and found again when the
//!   path moves, then to the sample by cross-correlating the waveforms around that lag;
//! - an **NLMS filter** of [`EchoConfig::filter_length`] placed at that delay subtracts the
//!   echo estimate, adapting only while the caller is silent (double talk freezes it);
//! - a **gate** silences frames that are only echo: before the path is measured, anything not
//!   louder than the loudest echo a line may return (G.168's 6 dB, with margin) relative to
//!   what was played; once measured, the line's own echo level, and once the filter has
//!   converged, anything its residual does not show to be more than echo.
//!
//! Frames with no reply playing pass untouched. Nothing allocates after
//! [`EchoCanceller::new`]; no threads, no clocks.
//!
//! Why written here: the maintained cancellers (WebRTC's AEC3, speexdsp's MDF) are C/C++
//! libraries built for acoustic echo at 16–48 kHz with a full audio-processing pipeline
//! (noise suppression, AGC, comfort noise) around them; their Rust bindings need a C++ or
//! meson build in CI. Barge-in needs far less: a line echo's short, stable path at 8 kHz and a
//! per-frame verdict, a few hundred lines here.
//!
//! ```
//! use ontime_echo::{EchoCanceller, EchoConfig, Verdict, FRAME_SAMPLES};
//!
//! let mut aec = EchoCanceller::new(&EchoConfig::default()).unwrap();
//! // Nothing played yet: the caller's frame is theirs.
//! let mut caller = [100i16; FRAME_SAMPLES];
//! assert_eq!(aec.process(0, &mut caller), Verdict::NoReference);
//! // A loud reply was played; a quiet frame right after is taken for its echo.
//! aec.push_reference(160, &[8000; FRAME_SAMPLES]);
//! let mut quiet = [500i16; FRAME_SAMPLES];
//! assert_eq!(aec.process(320, &mut quiet), Verdict::Echo);
//! assert_eq!(quiet, [0; FRAME_SAMPLES]);
//! ```

// The README's examples are compiled and run with the doctests, so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod align;
mod canceller;
mod delay;
pub mod error;
mod nlms;

pub use canceller::{
    EchoCanceller, EchoConfig, EchoReport, Verdict, CALLER_HANGOVER_TIME, FRAME_SAMPLES,
    SAMPLE_RATE_HZ,
};
pub use error::{Error, Result};
