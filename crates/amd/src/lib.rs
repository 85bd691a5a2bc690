//! # ontime-amd
//!
//! Answering-machine detection for outbound calls, sans-IO, with Twilio's parameters and
//! verdicts (`AnsweredBy`). From the answer on, a [`Detector`] is fed the callee's audio as
//! 20 ms frames of 8 kHz PCM with the [`Instant`] each arrived, and, where a VAD runs, that
//! VAD's speech segments; it gives one [`Verdict`], once.
//!
//! The rules, as Twilio's and Asterisk's detectors decide:
//! - **speech activity** is speech with pauses shorter than
//!   [`AmdConfig::speech_end_threshold`] bridged. Activity that has lasted
//!   [`AmdConfig::speech_threshold`] is a machine's greeting; activity that ends sooner (a
//!   "Hello?" then silence) is a person;
//! - no speech at all within [`AmdConfig::silence_timeout`] is `unknown`, and so is no decision
//!   within [`AmdConfig::timeout`];
//! - a **beep** (one steady tone of 400–2000 Hz for 250 ms or more) is a machine;
//! - **fax CNG** (1100 Hz, 0.5 s on) before any speech is a fax.
//!
//! With [`Mode::DetectMessageEnd`] a machine's verdict waits for the end of its greeting: a
//! beep gives `machine_end_beep`, silence after the greeting `machine_end_silence`, the timeout
//! `machine_end_other`.
//!
//! Speech comes from the VAD's segments after [`Detector::use_vad_segments`]
//! ([`Detector::speech_started`], [`Detector::speech_stopped`]), else from the frames' energy:
//! a frame is speech when it stands 10 dB above the quietest frame of the last second, so a
//! line's steady noise never counts. Tones are always found in the frames (Goertzel filters on
//! the frame's 50 Hz bins). Nothing allocates after [`Detector::new`]; no threads, no clocks.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ontime_amd::{AmdConfig, AnsweredBy, Detector, FRAME_SAMPLES};
//!
//! let answered = Instant::now();
//! let mut detector = Detector::new(&AmdConfig::default(), answered).unwrap();
//! let silence = [0i16; FRAME_SAMPLES];
//! let mut verdict = None;
//! for n in 1..=300 {
//!     let now = answered + Duration::from_millis(20 * n);
//!     verdict = verdict.or(detector.push_frame(now, &silence));
//! }
//! let verdict = verdict.unwrap();
//! assert_eq!(verdict.answered_by, AnsweredBy::Unknown);
//! assert_eq!(verdict.after, Duration::from_secs(5)); // the silence timeout
//! ```

mod error;
mod segment;
mod tone;

use std::time::{Duration, Instant};

pub use error::{Error, Result};
pub use tone::{FRAME_SAMPLES, HIGHEST_TONE_HZ, LOWEST_TONE_HZ};

use segment::EnergySegmenter;
use tone::{bin_hz, ToneAnalyser};

/// One frame's duration.
const FRAME: Duration = Duration::from_millis(20);
/// Consecutive speech frames that start an activity from energy (40 ms): a click is not speech.
const ONSET_FRAMES: u32 = 2;
/// Frames of one tone that make a beep (260 ms, the first whole frames past 250 ms).
const BEEP_FRAMES: u32 = 13;
/// Frames of an 1100 Hz tone that make a fax's CNG (460 ms of its 500 ms, edges lost to
/// frames the tone only partly fills).
const CNG_FRAMES: u32 = 23;
/// CNG is 1100 Hz ± 38 Hz: these bins (1050–1150 Hz).
const CNG_BINS: std::ops::RangeInclusive<u32> = 1050..=1150;

/// When a machine's verdict is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// `MachineDetection=Enable`: at the first decision (`human`, `machine_start`, `fax`,
    /// `unknown`).
    #[default]
    Enable,
    /// `MachineDetection=DetectMessageEnd`: a machine's verdict waits for the end of its greeting.
    DetectMessageEnd,
}

/// The detector's settings; [`Default`] is Twilio's defaults with [`Mode::Enable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmdConfig {
    /// When a machine's verdict is given.
    pub mode: Mode,
    /// `MachineDetectionTimeout`: no decision by then is `unknown` (`machine_end_other` once a
    /// machine was heard under [`Mode::DetectMessageEnd`]).
    pub timeout: Duration,
    /// `MachineDetectionSpeechThreshold`: speech activity this long is a machine.
    pub speech_threshold: Duration,
    /// `MachineDetectionSpeechEndThreshold`: silence this long ends speech activity.
    pub speech_end_threshold: Duration,
    /// `MachineDetectionSilenceTimeout`: no speech by then is `unknown`.
    pub silence_timeout: Duration,
}

impl Default for AmdConfig {
    fn default() -> AmdConfig {
        AmdConfig {
            mode: Mode::Enable,
            timeout: Duration::from_secs(30),
            speech_threshold: Duration::from_millis(2400),
            speech_end_threshold: Duration::from_millis(1200),
            silence_timeout: Duration::from_millis(5000),
        }
    }
}

impl AmdConfig {
    /// Check that every duration is at least one frame (20 ms) and at most ten minutes.
    pub fn validate(&self) -> Result<()> {
        for (field, value) in [
            ("timeout", self.timeout),
            ("speech_threshold", self.speech_threshold),
            ("speech_end_threshold", self.speech_end_threshold),
            ("silence_timeout", self.silence_timeout),
        ] {
            if value < FRAME || value > Duration::from_secs(600) {
                return Err(Error::InvalidConfig {
                    field,
                    value_ms: value.as_millis(),
                    expected: "20 ms to 600 s",
                });
            }
        }
        Ok(())
    }
}

/// Who answered: Twilio's `AnsweredBy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnsweredBy {
    /// A person.
    Human,
    /// A machine, at the start of its greeting ([`Mode::Enable`]).
    MachineStart,
    /// A machine whose greeting ended in a beep ([`Mode::DetectMessageEnd`]).
    MachineEndBeep,
    /// A machine whose greeting ended in silence ([`Mode::DetectMessageEnd`]).
    MachineEndSilence,
    /// A machine whose greeting had not ended by the timeout ([`Mode::DetectMessageEnd`]).
    MachineEndOther,
    /// A fax machine (its CNG tone).
    Fax,
    /// Nothing decided: silence, noise, or no decision by the timeout.
    Unknown,
}

impl AnsweredBy {
    /// Every value, in Twilio's order (metrics register each at zero).
    pub const ALL: [AnsweredBy; 7] = [
        AnsweredBy::Human,
        AnsweredBy::MachineStart,
        AnsweredBy::MachineEndBeep,
        AnsweredBy::MachineEndSilence,
        AnsweredBy::MachineEndOther,
        AnsweredBy::Fax,
        AnsweredBy::Unknown,
    ];

    /// Twilio's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            AnsweredBy::Human => "human",
            AnsweredBy::MachineStart => "machine_start",
            AnsweredBy::MachineEndBeep => "machine_end_beep",
            AnsweredBy::MachineEndSilence => "machine_end_silence",
            AnsweredBy::MachineEndOther => "machine_end_other",
            AnsweredBy::Fax => "fax",
            AnsweredBy::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for AnsweredBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The detector's one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Who answered.
    pub answered_by: AnsweredBy,
    /// From the answer to the decision: Twilio's `MachineDetectionDuration`.
    pub after: Duration,
}

/// Where the decision stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Neither a person nor a machine yet.
    Listening,
    /// A machine ([`Mode::DetectMessageEnd`]): waiting for its greeting to end.
    AwaitingGreetingEnd,
    /// Decided.
    Done(Verdict),
}

/// Speech activity: the first speech, and whether speech goes on or when it last stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Activity {
    started: Instant,
    /// `None` while speaking.
    stopped: Option<Instant>,
}

/// One tone heard over consecutive frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ToneRun {
    /// The bin it started on; a tone may wander to a neighbour between frames.
    bin: usize,
    frames: u32,
}

/// Answering-machine detection for one call; see the crate's documentation.
#[derive(Debug, Clone)]
pub struct Detector {
    config: AmdConfig,
    answered_at: Instant,
    phase: Phase,
    use_vad: bool,
    analyser: ToneAnalyser,
    segmenter: EnergySegmenter,
    /// Consecutive speech frames (energy), for [`ONSET_FRAMES`].
    speech_frames: u32,
    /// The frames' energy has shown speech (not a tone) at some point, whichever source
    /// drives the activity: a fax sends only tones, and a VAD may take a tone for speech.
    voice_heard: bool,
    activity: Option<Activity>,
    tone: Option<ToneRun>,
}

impl Detector {
    /// A detector for a call answered at `answered_at`.
    pub fn new(config: &AmdConfig, answered_at: Instant) -> Result<Detector> {
        config.validate()?;
        Ok(Detector {
            config: *config,
            answered_at,
            phase: Phase::Listening,
            use_vad: false,
            analyser: ToneAnalyser::new(),
            segmenter: EnergySegmenter::new(),
            speech_frames: 0,
            voice_heard: false,
            activity: None,
            tone: None,
        })
    }

    /// Take speech from [`Detector::speech_started`] and [`Detector::speech_stopped`] (a VAD's
    /// segments) instead of the frames' energy. Frames still carry the tones.
    pub fn use_vad_segments(&mut self) {
        self.use_vad = true;
    }

    /// The verdict, once given.
    pub fn verdict(&self) -> Option<Verdict> {
        match self.phase {
            Phase::Done(verdict) => Some(verdict),
            _ => None,
        }
    }

    /// One 20 ms frame ([`FRAME_SAMPLES`] samples) of the callee's audio, arrived at `now`. A
    /// frame of any other length is not analysed (the time still counts). Returns the verdict
    /// when this frame decides it.
    pub fn push_frame(&mut self, now: Instant, frame: &[i16]) -> Option<Verdict> {
        if self.verdict().is_some() {
            return None;
        }
        if let Ok(frame) = <&[i16; FRAME_SAMPLES]>::try_from(frame) {
            let level = self.analyser.analyse(frame);
            if let Some(answered_by) = self.follow_tone(level.tone_bin) {
                return self.decide(now, answered_by);
            }
            let speech = self
                .segmenter
                .is_speech(level.energy_dbfs, level.tone_bin.is_some());
            self.follow_energy(now, speech);
        }
        self.poll(now)
    }

    /// The VAD heard speech that began `at` (on the frames' clock: a VAD confirms speech some
    /// frames after it began).
    pub fn speech_started(&mut self, at: Instant) -> Option<Verdict> {
        if self.use_vad {
            self.start_speech(at, at);
        }
        self.poll(at)
    }

    /// The VAD heard the speech end `at` (on the frames' clock).
    pub fn speech_stopped(&mut self, at: Instant) -> Option<Verdict> {
        if self.use_vad {
            self.stop_speech(at);
        }
        self.poll(at)
    }

    /// The time is `now`: the timeouts, for a call whose frames stopped (or never came).
    pub fn poll(&mut self, now: Instant) -> Option<Verdict> {
        let since_answer = now.saturating_duration_since(self.answered_at);
        match self.phase {
            Phase::Done(_) => None,
            Phase::Listening => {
                if let Some(activity) = self.activity {
                    if self.speech_length(activity, now) >= self.config.speech_threshold {
                        return match self.config.mode {
                            Mode::Enable => self.decide(now, AnsweredBy::MachineStart),
                            Mode::DetectMessageEnd => {
                                self.phase = Phase::AwaitingGreetingEnd;
                                self.poll(now)
                            }
                        };
                    }
                    if self.silent_long_enough(activity, now) {
                        return self.decide(now, AnsweredBy::Human);
                    }
                } else if since_answer >= self.config.silence_timeout {
                    return self.decide(now, AnsweredBy::Unknown);
                }
                if since_answer >= self.config.timeout {
                    return self.decide(now, AnsweredBy::Unknown);
                }
                None
            }
            Phase::AwaitingGreetingEnd => {
                if self
                    .activity
                    .is_some_and(|activity| self.silent_long_enough(activity, now))
                {
                    return self.decide(now, AnsweredBy::MachineEndSilence);
                }
                if since_answer >= self.config.timeout {
                    return self.decide(now, AnsweredBy::MachineEndOther);
                }
                None
            }
        }
    }

    fn decide(&mut self, now: Instant, answered_by: AnsweredBy) -> Option<Verdict> {
        let verdict = Verdict {
            answered_by,
            after: now.saturating_duration_since(self.answered_at),
        };
        self.phase = Phase::Done(verdict);
        Some(verdict)
    }

    /// Speech activity so far: from its start to now while speaking, else to when it stopped.
    fn speech_length(&self, activity: Activity, now: Instant) -> Duration {
        activity
            .stopped
            .unwrap_or(now)
            .saturating_duration_since(activity.started)
    }

    /// Whether speech has been over for the end threshold. Not while a tone is sounding: a
    /// beep that began in the silence takes 250 ms to be told from a blip, and a greeting's
    /// beep often comes about a second after its last word.
    fn silent_long_enough(&self, activity: Activity, now: Instant) -> bool {
        self.tone.is_none()
            && activity.stopped.is_some_and(|stopped| {
                now.saturating_duration_since(stopped) >= self.config.speech_end_threshold
            })
    }

    fn start_speech(&mut self, started: Instant, now: Instant) {
        match &mut self.activity {
            None => {
                self.activity = Some(Activity {
                    started,
                    stopped: None,
                })
            }
            // A pause shorter than the end threshold is bridged; a longer one has already
            // decided (human, or a machine's end of greeting).
            Some(activity) => {
                if activity.stopped.is_some_and(|stopped| {
                    now.saturating_duration_since(stopped) < self.config.speech_end_threshold
                }) {
                    activity.stopped = None;
                }
            }
        }
    }

    fn stop_speech(&mut self, now: Instant) {
        if let Some(activity) = &mut self.activity {
            activity.stopped.get_or_insert(now);
        }
    }

    /// Speech from energy: [`ONSET_FRAMES`] speech frames start it, one non-speech frame stops
    /// it (at the end of the last speech frame, which is when this one began). Only
    /// `voice_heard` when a VAD's segments drive the activity.
    fn follow_energy(&mut self, now: Instant, speech: bool) {
        if speech {
            self.speech_frames += 1;
            self.voice_heard |= self.speech_frames >= ONSET_FRAMES;
            if self.use_vad {
                return;
            }
            if self.speech_frames >= ONSET_FRAMES {
                let onset = now.checked_sub(FRAME * self.speech_frames).unwrap_or(now);
                self.start_speech(onset, now);
            }
        } else {
            if self.speech_frames >= ONSET_FRAMES && !self.use_vad {
                self.stop_speech(now.checked_sub(FRAME).unwrap_or(now));
            }
            self.speech_frames = 0;
        }
    }

    /// Follow the tone across frames; a beep or a fax's CNG is a verdict.
    fn follow_tone(&mut self, tone_bin: Option<usize>) -> Option<AnsweredBy> {
        let beep = match self.config.mode {
            Mode::Enable => AnsweredBy::MachineStart,
            Mode::DetectMessageEnd => AnsweredBy::MachineEndBeep,
        };
        // A machine that answers with an 1100 Hz tone before any word could be a fax: wait
        // for the tone's length to tell.
        let maybe_fax = |run: &ToneRun| !self.voice_heard && CNG_BINS.contains(&bin_hz(run.bin));
        match (tone_bin, self.tone) {
            (Some(bin), Some(mut run)) if bin.abs_diff(run.bin) <= 1 => {
                run.frames += 1;
                self.tone = Some(run);
                if maybe_fax(&run) {
                    (run.frames >= CNG_FRAMES).then_some(AnsweredBy::Fax)
                } else {
                    (run.frames >= BEEP_FRAMES).then_some(beep)
                }
            }
            (Some(bin), _) => {
                let ended = self.tone.replace(ToneRun { bin, frames: 1 });
                ended.and_then(|run| self.ended_tone(run, beep))
            }
            (None, _) => {
                let ended = self.tone.take();
                ended.and_then(|run| self.ended_tone(run, beep))
            }
        }
    }

    /// A tone that ended: a beep if it was one that waited to be told from a fax's CNG.
    fn ended_tone(&self, run: ToneRun, beep: AnsweredBy) -> Option<AnsweredBy> {
        (run.frames >= BEEP_FRAMES).then_some(beep)
    }
}
