//! The per-call canceller: the reference and the caller's audio on one sample timeline, the
//! delay search, the adaptive filter and the gate that decides, frame by frame, whether what
//! the caller's side carries is the caller or only the line's echo of the reply.

use std::time::Duration;

use crate::align::{best_lag, FINE_CORRELATION};
use crate::delay::{DelayEstimator, BLOCK};
use crate::error::{Error, Result};
use crate::nlms::Nlms;

/// Samples a second on the canceller's timeline (narrowband calls).
pub const SAMPLE_RATE_HZ: u32 = 8000;
/// Samples in one 20 ms frame.
pub const FRAME_SAMPLES: usize = 160;

/// Positions beyond this (millions of years of audio) are ignored, so sums of positions and
/// offsets never overflow.
const MAX_POSITION: u64 = 1 << 62;
/// Reference samples kept (2.048 s): longer than the longest lag plus the filter.
const RING: usize = 16384;
/// How far before the echo's delay the filter's window starts (8 ms): a hybrid's response may
/// start a little before its main reflection, and an envelope lag the fine alignment could not
/// refine is good to a few milliseconds.
const LEAD: usize = 64;
/// The caller's samples kept for the fine alignment (512 ms).
const MIC_RING: usize = 4096;
/// The stretch of the caller's audio the fine alignment correlates (400 ms).
const FINE_WINDOW: usize = 3200;
/// The least of it worth correlating (200 ms): a syllable or two of echo.
const MIN_FINE_WINDOW: usize = 1600;
/// How far either side of the envelope's lag the fine alignment looks (32 ms): the envelope's
/// peak is that broad.
const FINE_SPAN: usize = 256;
/// Frames the filter adapts without converging before the alignment is looked at again
/// (0.5 s): a filter in the right place converges in a few hundred milliseconds of reply.
const REALIGN_FRAMES: u32 = 25;
/// Each look that leaves the filter where it was doubles the wait for the next, up to this many
/// times (8 s): a line whose echo no filter fits (clipped, nonlinear) does not pay for a fine
/// search twice a second.
const REALIGN_BACKOFF: u32 = 4;
/// A fine lag this close (samples) to the filter's is where it already is.
const REALIGN_TOLERANCE: usize = 4;
/// Normalised correlation the filter's echo estimate, slid to a new lag, must show with the
/// caller's audio before the filter follows the path there. Moved echo alone correlated at
/// 0.98-0.999 (0.79 a few frames after the filter converged) on simulated lines; a caller
/// talking over the echo mostly under 0.71 at a wrong lag (at the pitch period of the reply),
/// but at times up to 1.0, which correlation alone cannot tell: see [`MOVED_LEFT`].
const MOVED_CORRELATION: f32 = 0.75;
/// The most of the caller's audio over the window the filter's estimate, slid to the new lag,
/// may leave unexplained for the filter to follow it there (−6 dB). Shifted to a moved path it
/// left 2-12 % on simulated lines; a caller talking over the echo correlated at 0.75-1.0 with it
/// slid to a wrong lag (speech against speech over a 40 ms window) and left 28-100 %: followed,
/// such a move left the filter off the path when the caller stopped, and the echo of the next
/// reply reached the VAD as the caller.
const MOVED_LEFT: f32 = 0.25;
/// And the new lag must explain the audio this much better than the filter where it is (6 dB):
/// a moved path left 110-220 % there (the estimate, out of step, adds to the echo it misses).
const MOVED_GAIN: f32 = 4.0;
/// Frames a converged filter must have missed the echo before the waveform is asked whether the
/// path moved (the frames of the miss are the window it is asked over).
const MOVED_MIN_FRAMES: u64 = 2;
/// The most of the caller's audio (samples, 160 ms) the move is judged on: enough for a sharp
/// correlation, little enough to ask every few frames.
const MOVED_WINDOW: usize = 1280;
/// How much of the last frame's fit the next keeps (about five frames' memory).
const FIT_KEEP: f32 = 0.8;
/// The loudest echo a line returns relative to what it was sent, with margin: ITU-T G.168 plans
/// for an echo return loss down to 6 dB; the gate assumes 3 dB until it has measured the line.
const ECHO_GAIN_PRIOR: f32 = 0.5;
/// The gate's bound never goes below this (−30 dB): even a line that returned nothing so far
/// may start to.
const ECHO_GAIN_FLOOR: f32 = 1e-3;
/// The gate's bound on a line where no echo was found (−40 dB under the reply): only what
/// could not be speech is held back.
const NO_ECHO_BOUND: f32 = 1e-4;
/// Margin over the loudest echo seen (6 dB).
const ECHO_GAIN_MARGIN: f32 = 4.0;
/// Frames of the reply the bound looks back over (2 s): it spans pauses between sentences.
const GAIN_WINDOW: usize = 100;
/// Frames of reference activity, beyond the longest delay, before the measured bound replaces
/// the prior (0.5 s).
const GAIN_WARMUP: u32 = 25;
/// A reference block quieter than this (mean square, about −60 dBFS) is no reply to echo.
const REFERENCE_FLOOR: f32 = 1e-6;
/// The residual must exceed the residual echo expected (the echo estimate less the filter's
/// measured enhancement) by this much to be the caller (16 dB: the enhancement of single frames
/// scatters widely around the line's mean), and never less than the echo estimate itself.
const RESIDUAL_MARGIN: f32 = 40.0;
/// The bound learns only from frames whose reply is at least this loud (about −40 dBFS), so
/// line noise over a quiet reply does not pass for echo.
const BOUND_REFERENCE: f32 = 1e-4;
/// Frames (200 ms) the filter stays frozen after the last frame that showed the caller.
const DOUBT_HANGOVER: u32 = 10;
/// Frames (120 ms) the residual keeps passing after the caller was last heard.
const CALLER_HANGOVER: u32 = 6;
/// Frames (80 ms) a VAD's end may lie past the gate's hangover: it ends speech on a 32 ms
/// chunk's boundary, and Silero's probability stays up for about a chunk after the voice stops.
/// `speech_ended` walks back over the hangover and this much: with the hangover alone, one
/// "mm-hmm" in five (end to end, `echo_line`'s backchannel test) ended 130–170 ms past its last
/// frame, beyond the walk, and was heard whole plus the hangover, over the window.
const VAD_END_SLACK: u32 = 4;
/// How long the gate keeps passing the residual after the caller's last frame passed on
/// evidence: a VAD hears up to this much more speech than the caller said
/// ([`EchoCanceller::speech_ended`] takes it back).
pub const CALLER_HANGOVER_TIME: Duration = Duration::from_millis(
    CALLER_HANGOVER as u64 * 1000 * FRAME_SAMPLES as u64 / SAMPLE_RATE_HZ as u64,
);
/// A frame whose every sample is under this (G.711's smallest step is 8 / 32768) is digital
/// silence, not line noise.
const DIGITAL_SILENCE: f32 = 4.0 / 32768.0;
/// Frames of digital silence in a row (500 ms) after which the line is taken to have no noise:
/// longer than a jitter buffer conceals a stall of the caller's packets.
const SILENT_LINE_FRAMES: u32 = 25;
/// The noise floor of a line with no noise (mean square).
const NOISELESS_FLOOR: f32 = 1e-10;
/// A frame must be this much over the line's noise floor (9 dB) to be louder than the echo.
const LOUD_OVER_NOISE: f32 = 8.0;
/// Frames in a row over the level bound that hold the gate open before the filter converges.
const LOUD_FRAMES: u32 = 2;
/// Frames in a row the residual must stand clear of the echo before they pass as the caller.
const RESIDUAL_FRAMES: u32 = 2;
/// ... and exceed the line's noise floor by this much (9 dB).
const NOISE_MARGIN: f32 = 8.0 * FRAME_SAMPLES as f32;
/// Echo return loss enhancement the filter must reach before its residual is trusted.
const CONVERGED_ERLE: f32 = 4.0;
/// A gated frame this loud (block mean square, about −45 dBFS) was echo a VAD would have heard.
const AUDIBLE_ECHO: f32 = 3e-5;
/// Gated frames in a row that make one burst of audible echo.
const BURST_FRAMES: u32 = 3;
/// Frames of the caller's recent audio remembered for [`EchoCanceller::speech_began`] (640 ms).
const ONSET_MEMORY: usize = 32;
/// A gated frame within this of passing (1.5 dB) may still have been the caller's speech
/// beginning: a little quieter than the gate requires (wider, and the walk back crosses into
/// the echo before the speech on a 6 dB line).
const ONSET_EVIDENCE: f32 = 0.7;
/// ... and this far over the line's noise floor (20 dB).
const ONSET_OVER_NOISE: f32 = 100.0;
/// Frames in a row that could not be the caller which the walk back to the onset crosses
/// (120 ms: a gap between words, or a quiet stretch of speech the gate held back whole).
const ONSET_GAP_FRAMES: u32 = 6;
/// Frames of adaptation between checkpoints of a converged filter's taps (40 ms): the older of
/// the two kept is what double talk goes back to, 40-80 ms before it was noticed.
const CHECKPOINT_FRAMES: u32 = 2;

/// What the canceller may assume about a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EchoConfig {
    /// The longest delay between a sample played and its echo in the caller's audio, as the
    /// two timelines given to the canceller see it (the line's echo delay plus the network
    /// round trip and the receiver's jitter buffer).
    pub max_delay: Duration,
    /// Length of the adaptive filter.
    pub filter_length: Duration,
}

impl Default for EchoConfig {
    fn default() -> EchoConfig {
        EchoConfig {
            max_delay: Duration::from_millis(800),
            filter_length: Duration::from_millis(16),
        }
    }
}

impl EchoConfig {
    fn samples(d: Duration) -> usize {
        (d.as_micros() * u128::from(SAMPLE_RATE_HZ) / 1_000_000) as usize
    }

    fn validate(&self) -> Result<(usize, usize)> {
        let lag = Self::samples(self.max_delay);
        let taps = Self::samples(self.filter_length);
        if !(BLOCK..=RING / 2).contains(&lag) {
            return Err(Error::InvalidConfig {
                field: "max_delay",
                value: self.max_delay.as_millis() as u64,
                expected: "2 to 1024 ms",
            });
        }
        if !(BLOCK..=512).contains(&taps) {
            return Err(Error::InvalidConfig {
                field: "filter_length",
                value: self.filter_length.as_millis() as u64,
                expected: "2 to 64 ms",
            });
        }
        Ok((lag, taps))
    }
}

/// What the canceller made of one frame of the caller's audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing was played that could echo: the frame is the caller's, untouched.
    NoReference,
    /// The caller (louder than any echo, or more than the filter's residual): passed on, with
    /// the echo estimate taken out where the path is known.
    Caller,
    /// Only the line's echo: the frame was silenced.
    Echo,
}

/// What the canceller has found about the line, for the call's record.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EchoReport {
    /// The echo's delay on the canceller's timelines, once found.
    pub delay: Option<Duration>,
    /// Echo return loss (dB): how far below the reply its echo came back, once measured.
    pub erl_db: Option<f32>,
    /// Echo return loss enhancement (dB): how much further the filter took the echo down.
    pub erle_db: Option<f32>,
    /// Frames silenced as echo.
    pub frames_gated: u64,
    /// Runs of audible echo silenced (each one a barge-in a VAD would likely have started).
    pub bursts_gated: u64,
    /// Frames during a reply passed on as the caller (double talk).
    pub frames_double_talk: u64,
    /// Times the echo path moved (the filter restarted on a new delay).
    pub path_changes: u64,
}

/// A line-echo canceller for one call, on one sample timeline: feed what was played with
/// [`EchoCanceller::push_reference`], then each frame of the caller's audio with
/// [`EchoCanceller::process`]. Allocates only in [`EchoCanceller::new`].
#[derive(Debug)]
pub struct EchoCanceller {
    max_lag: usize,
    /// The reference, written twice (`i` and `i + RING`) so any window is one slice.
    reference: Vec<f32>,
    /// The position after the last reference sample written.
    ref_end: u64,
    /// Energy of each reference block, ring by block number.
    ref_block_energy: Vec<f32>,
    /// The first reference block whose envelope is not yet computed.
    ref_blocks_done: u64,
    delay: DelayEstimator,
    filter: Nlms,
    /// Where the filter's window ends, in samples before the caller's sample.
    filter_offset: Option<usize>,
    /// The envelope search's lag (samples) the filter was last placed around.
    coarse_lag: usize,
    /// The echo's delay (samples) the filter was placed at: the fine lag, else the envelope's.
    path_delay: usize,
    /// Whether `path_delay` is the fine alignment's.
    finely_placed: bool,
    /// Frames the filter adapted since it was last placed or looked at.
    adapted_since_placed: u32,
    /// Frames the converged filter adapted since its taps were last kept.
    adapted_since_checkpoint: u32,
    /// Looks at the alignment since the filter was placed that left it where it was.
    realign_backoff: u32,
    /// The caller's recent samples, written twice (`i` and `i + MIC_RING`) like the reference.
    mic: Vec<f32>,
    /// The first position of the caller's unbroken audio in `mic`, and the one after its last.
    mic_from: u64,
    mic_end: u64,
    /// The caller's block being summed: (block, energy).
    mic_block: Option<(u64, f32)>,
    /// Loudest caller-to-reference ratio of the recent frames judged not the caller.
    gain_window: [f32; GAIN_WINDOW],
    gain_next: usize,
    active_frames: u32,
    noise_floor: f32,
    erle_mic: f32,
    erle_residual: f32,
    erl_ref: f32,
    erl_echo: f32,
    gated_run: u32,
    /// Frames of reply since the path was found.
    since_lock: u32,
    /// Frames the residual still passes after the caller was last heard.
    caller_hold: u32,
    /// Frames left before the filter may adapt again after double talk.
    double_talk_hold: u32,
    /// Frames in a row whose residual was over the echo.
    residual_run: u32,
    /// Frames in a row over the level bound, audibly.
    loud_run: u32,
    /// Frames of digital silence in a row.
    silent_run: u32,
    /// Where the converged filter began to miss an echo the level says is there (a quiet
    /// caller, or the path moved under the filter).
    misfit_from: Option<u64>,
    /// The filter's echo estimate around the missed frames (allocated once, in `new`).
    shift_scratch: Vec<f32>,
    /// The caller's energy and the residual's over the last few frames of audible reply, every
    /// frame (the ERLE statistics above learn only while the filter adapts).
    fit_mic: f32,
    fit_residual: f32,
    report: EchoReport,
    residual: [f32; FRAME_SAMPLES],
    /// The recent frames, ring by frame number: their position, whether each could have been
    /// the caller's speech, and whether it passed on evidence of the caller (not on the
    /// hangover alone).
    recent: [(u64, bool, bool); ONSET_MEMORY],
    recent_next: usize,
}

impl EchoCanceller {
    /// A canceller that knows nothing of the line yet.
    pub fn new(config: &EchoConfig) -> Result<EchoCanceller> {
        let (max_lag, taps) = config.validate()?;
        Ok(EchoCanceller {
            max_lag,
            reference: vec![0.0; 2 * RING],
            ref_end: 0,
            ref_block_energy: vec![0.0; RING / BLOCK],
            ref_blocks_done: 0,
            delay: DelayEstimator::new(max_lag.div_ceil(BLOCK), RING / BLOCK),
            filter: Nlms::new(taps),
            filter_offset: None,
            coarse_lag: 0,
            path_delay: 0,
            finely_placed: false,
            adapted_since_placed: 0,
            adapted_since_checkpoint: 0,
            realign_backoff: 0,
            mic: vec![0.0; 2 * MIC_RING],
            mic_from: 0,
            mic_end: 0,
            mic_block: None,
            gain_window: [0.0; GAIN_WINDOW],
            gain_next: 0,
            active_frames: 0,
            noise_floor: 1e-5,
            erle_mic: 0.0,
            erle_residual: 0.0,
            erl_ref: 0.0,
            erl_echo: 0.0,
            gated_run: 0,
            residual_run: 0,
            loud_run: 0,
            silent_run: 0,
            misfit_from: None,
            shift_scratch: vec![0.0; MOVED_WINDOW + 2 * FINE_SPAN],
            fit_mic: 0.0,
            fit_residual: 0.0,
            double_talk_hold: 0,
            since_lock: 0,
            caller_hold: 0,
            report: EchoReport::default(),
            residual: [0.0; FRAME_SAMPLES],
            recent: [(u64::MAX, false, false); ONSET_MEMORY],
            recent_next: 0,
        })
    }

    /// Forget the line (hold, a new stream, a codec change): the next reply learns it again.
    pub fn restart(&mut self) {
        self.reference.fill(0.0);
        self.ref_block_energy.fill(0.0);
        self.delay.reset();
        self.filter.reset();
        self.filter_offset = None;
        self.mic_end = 0;
        self.mic_from = 0;
        self.mic_block = None;
        self.gain_window = [0.0; GAIN_WINDOW];
        self.active_frames = 0;
        self.erle_mic = 0.0;
        self.erle_residual = 0.0;
        self.gated_run = 0;
        self.residual_run = 0;
        self.loud_run = 0;
        self.silent_run = 0;
        self.misfit_from = None;
        self.fit_mic = 0.0;
        self.fit_residual = 0.0;
        self.double_talk_hold = 0;
        self.caller_hold = 0;
        self.report.delay = None;
        self.recent = [(u64::MAX, false, false); ONSET_MEMORY];
    }

    /// Where speech that a VAD found starting at `onset` (a position of this timeline) most
    /// likely began: the gate holds back the first, quieter part of speech that starts over
    /// the echo, so the VAD hears it late. Walks back from `onset` over the remembered frames
    /// that could have been the caller (passed, or gated yet close to passing, and well over
    /// the line's noise), across gaps of up to 120 ms that could not; at most 640 ms back.
    pub fn speech_began(&self, onset: u64) -> u64 {
        let frame = FRAME_SAMPLES as u64;
        let mut began = onset;
        // The frame that held the onset, then the ones before it, newest first.
        let mut expected: Option<u64> = None;
        let mut misses = 0;
        for back in 1..=ONSET_MEMORY {
            let (position, caller_like, _) =
                self.recent[(self.recent_next + ONSET_MEMORY - back) % ONSET_MEMORY];
            match expected {
                None if position == u64::MAX => break,
                None if position > onset => continue,
                // The frame holding the onset is where the VAD began; look before it.
                None => {
                    expected = position.checked_sub(frame);
                    continue;
                }
                // The timeline jumped (or the memory ends): nothing older is the same speech.
                Some(e) if position != e => break,
                Some(_) => {}
            }
            if caller_like {
                began = position;
                misses = 0;
            } else {
                misses += 1;
                if misses > ONSET_GAP_FRAMES {
                    break;
                }
            }
            expected = position.checked_sub(frame);
        }
        began.min(onset)
    }

    /// Where speech that a VAD found ending at `end` (a position of this timeline) most
    /// likely ended: after the caller's last frame that passed on evidence, the gate passes
    /// the residual for [`CALLER_HANGOVER_TIME`], and a VAD hears that as the speech going on
    /// (a 300 ms "mm-hmm" heard as 420 ms is no longer a backchannel under a 400 ms window).
    /// Walks back from `end` over at most that many frames, and a VAD's slack at its end
    /// (`VAD_END_SLACK`), to the end of the last frame that passed on evidence; `end` itself when there is none within them (or they are no longer
    /// remembered): the VAD's end was not the hangover's.
    pub fn speech_ended(&self, end: u64) -> u64 {
        let frame = FRAME_SAMPLES as u64;
        let mut walked = 0;
        for back in 1..=ONSET_MEMORY {
            let (position, _, evidence) =
                self.recent[(self.recent_next + ONSET_MEMORY - back) % ONSET_MEMORY];
            if position == u64::MAX {
                break;
            }
            if position >= end {
                continue;
            }
            if evidence {
                return (position + frame).min(end);
            }
            walked += 1;
            if walked > CALLER_HANGOVER + VAD_END_SLACK {
                break;
            }
        }
        end
    }

    fn remember(&mut self, at: u64, caller_like: bool, evidence: bool) {
        self.recent[self.recent_next] = (at, caller_like, evidence);
        self.recent_next = (self.recent_next + 1) % ONSET_MEMORY;
    }

    /// What was played towards the caller, starting at sample `at` of the timeline. Frames
    /// should come in order; a gap is silence, a frame older than the ring is ignored.
    pub fn push_reference(&mut self, at: u64, frame: &[i16; FRAME_SAMPLES]) {
        if at > MAX_POSITION {
            return;
        }
        let end = at + FRAME_SAMPLES as u64;
        if end + (RING as u64) <= self.ref_end {
            return;
        }
        // Silence in any gap since the last frame (at most the ring's worth).
        let gap_from = self.ref_end.max(at.saturating_sub(RING as u64));
        for p in gap_from..at {
            self.write_reference(p, 0.0);
        }
        for (i, s) in frame.iter().enumerate() {
            self.write_reference(at + i as u64, f32::from(*s) / 32768.0);
        }
        self.ref_end = self.ref_end.max(end);
        let upto = self.ref_end / BLOCK as u64;
        // A reference that jumped far ahead skips the blocks the ring no longer holds.
        let oldest = upto.saturating_sub((RING / BLOCK) as u64 - 1);
        let mut block = self.ref_blocks_done.max(oldest);
        while block < upto {
            let start = (block as usize * BLOCK) % RING;
            let energy: f32 = self.reference[start..start + BLOCK]
                .iter()
                .map(|x| x * x)
                .sum();
            self.ref_block_energy[block as usize % (RING / BLOCK)] = energy;
            self.delay.reference_block(block, energy);
            block += 1;
        }
        self.ref_blocks_done = upto;
    }

    fn write_reference(&mut self, position: u64, value: f32) {
        let i = position as usize % RING;
        self.reference[i] = value;
        self.reference[i + RING] = value;
    }

    /// The loudest reference block (mean square) that could echo into the caller's frame at
    /// `at`, with the path known or not.
    fn reference_level(&self, at: u64, wide: bool) -> f32 {
        let (from, to) = match self.filter_offset.filter(|_| !wide) {
            Some(offset) => (
                at.saturating_sub((offset + self.filter.taps()) as u64),
                (at + FRAME_SAMPLES as u64).saturating_sub(offset as u64),
            ),
            None => (
                at.saturating_sub(self.max_lag as u64),
                at + FRAME_SAMPLES as u64,
            ),
        };
        let first = from / BLOCK as u64;
        let last = (to.min(self.ref_end) / BLOCK as u64).min(self.ref_blocks_done);
        let oldest = self
            .ref_blocks_done
            .saturating_sub((RING / BLOCK) as u64 - 1);
        (first.max(oldest)..last)
            .map(|b| self.ref_block_energy[b as usize % (RING / BLOCK)])
            .fold(0.0f32, f32::max)
            / BLOCK as f32
    }

    /// One 20 ms frame of the caller's audio at sample `at` of the timeline: cleaned in place
    /// (the echo estimate taken out, or silenced when it is only echo).
    pub fn process(&mut self, at: u64, frame: &mut [i16; FRAME_SAMPLES]) -> Verdict {
        if at > MAX_POSITION {
            return Verdict::NoReference;
        }
        let mut mic = [0.0f32; FRAME_SAMPLES];
        for (m, s) in mic.iter_mut().zip(frame.iter()) {
            *m = f32::from(*s) / 32768.0;
        }
        let peak_block = mic
            .chunks(BLOCK)
            .map(|c| c.iter().map(|x| x * x).sum::<f32>() / BLOCK as f32)
            .fold(0.0f32, f32::max);
        // Digital silence (a jitter buffer's concealment while the caller's packets stall, DTX
        // filler, a muted phone) is neither echo nor the caller, and nothing learns from it.
        // Learnt from, it sank the noise floor to 1e-10 (rising back 0.2 % a frame: minutes),
        // so every later frame of line noise stood out as the caller, and it made a fitted
        // filter look lost and the envelope lock elsewhere: a 120 ms stall of the caller's
        // packets let the echo barge in.
        if mic.iter().all(|x| x.abs() < DIGITAL_SILENCE) {
            // A line that stays digitally silent has no noise at all (a noiseless trunk, DTX
            // without comfort noise): then any sound over it stands out, as it should. A
            // concealment gap is shorter than that, and the line's noise comes back after it.
            self.silent_run = self.silent_run.saturating_add(1);
            if self.silent_run >= SILENT_LINE_FRAMES {
                self.noise_floor = NOISELESS_FLOOR;
            }
            self.keep_caller(at, &mic);
            self.mic_block = None;
            self.residual_run = 0;
            self.loud_run = 0;
            self.gated_run = 0;
            self.misfit_from = None;
            self.caller_hold = self.caller_hold.saturating_sub(1);
            self.double_talk_hold = self.double_talk_hold.saturating_sub(1);
            self.remember(at, false, false);
            if self.reference_level(at, true) < REFERENCE_FLOOR {
                return Verdict::NoReference;
            }
            // A reply playing into a silent line is reply time with no echo back: it counts
            // towards the warm-up that finds a line echo-free, as line noise does (left out, a
            // test caller silent between its words faced the warm-up's 3 dB bound when it
            // talked over the reply seconds later, and was cut 580 ms late).
            self.active_frames = self.active_frames.saturating_add(1);
            self.since_lock = self.since_lock.saturating_add(1);
            return Verdict::Echo;
        }
        self.silent_run = 0;
        // The search learns only while a reply could be echoing.
        let searching = self.reference_level(at, true) >= REFERENCE_FLOOR;
        self.sum_caller_blocks(at, &mic, searching);
        self.keep_caller(at, &mic);
        if let Some(lag) = self.delay.evaluate() {
            self.coarse_lag = lag * BLOCK;
            // The envelope's peak wanders by a block or two over a reply: where the waveform
            // put the path, a lag that near it is the same path, and the filter keeps it.
            let placed = self.filter_offset.is_some();
            // Nor does a filter that fits the echo now move for the envelope: after the path
            // shifted and the filter followed, the envelope lags behind for a second or two
            // (its peak over old and new audio sits between), and took the filter off a path
            // it fitted.
            // Nor while the caller talks over the echo of a filter that had converged: the
            // envelope then follows the caller's speech as much as the echo, and a peak it put
            // 12 ms off moved such a filter off the line's one path mid-interruption (its taps
            // learnt afresh, the next reply's echo reached the VAD as the caller). A path that
            // really moved that little meanwhile is found by the waveform: the move check, or
            // the fine alignment around this lag once the filter adapts again without
            // converging. A lag further off is taken as before: the waveform cannot reach it,
            // and a path that jumped that far looks like double talk for as long as it is missed.
            let near = placed
                && self.converged()
                && self.coarse_lag.abs_diff(self.path_delay) <= FINE_SPAN;
            let talked_over = near && self.double_talk_hold > 0;
            let same = placed
                && ((self.finely_placed && self.coarse_lag.abs_diff(self.path_delay) <= LEAD / 2)
                    || self.fits_now()
                    || talked_over);
            // Nor, unconfirmed, at the interruption's first syllable: the freeze comes a frame
            // or more after it (above), and the envelope's peak moved by it took a converged
            // filter 12 ms off its path just before the freeze would have held it (3 calls of
            // 37 on the test line, and the next reply's echo barged in). So a converged filter
            // moves within the fine span only where the waveform puts the echo too, with its
            // taps; the envelope locks anew a few times a call at most, so this is rare work.
            if !same {
                if near {
                    match self.fine_lag(at + FRAME_SAMPLES as u64) {
                        Some(delay) if delay.abs_diff(self.path_delay) > REALIGN_TOLERANCE => {
                            self.report.path_changes += 1;
                            self.place_filter(delay, true);
                        }
                        _ => {}
                    }
                } else {
                    if placed {
                        self.report.path_changes += 1;
                    }
                    self.place_filter(self.coarse_lag, false);
                }
            }
        }
        let frame_energy: f32 = mic.iter().map(|x| x * x).sum::<f32>() / FRAME_SAMPLES as f32;
        self.noise_floor = if frame_energy < self.noise_floor {
            frame_energy.max(NOISELESS_FLOOR)
        } else {
            self.noise_floor * 1.002
        };

        // The loudest reply that could echo into this frame, path known or not: one measure for
        // every frame, so the ratios the bound is learnt from compare.
        let wide = self.reference_level(at, true);
        let audible = frame_energy > ONSET_OVER_NOISE * self.noise_floor;
        if wide < REFERENCE_FLOOR {
            self.gated_run = 0;
            self.residual_run = 0;
            self.remember(at, audible, audible);
            return Verdict::NoReference;
        }
        self.active_frames = self.active_frames.saturating_add(1);
        // The first echo can come back as late as the longest delay after the reply starts.
        let warmup = GAIN_WARMUP + (self.max_lag / FRAME_SAMPLES) as u32;
        let bound = match self.filter_offset {
            None if self.active_frames < warmup => ECHO_GAIN_PRIOR,
            // A whole warm-up of reply and no echo found: the line is echo-free so far (the
            // search goes on, and a path found later brings the gate back).
            None => NO_ECHO_BOUND,
            Some(_) if self.since_lock < GAIN_WARMUP => ECHO_GAIN_PRIOR,
            Some(_) => {
                let loudest = self.gain_window.iter().copied().fold(0.0f32, f32::max);
                (ECHO_GAIN_MARGIN * loudest).clamp(ECHO_GAIN_FLOOR, ECHO_GAIN_PRIOR)
            }
        };
        self.since_lock = self.since_lock.saturating_add(1);
        // Before a path is found, the loudest reply that could echo into this frame at any
        // lag; once found, the reply at the path's own lag, which the echo follows frame by
        // frame (a caller speaking while the reply at that lag is quiet is plainly not echo).
        // Each ratio is learnt and compared with its own kind: the window restarts at a lock.
        let reference = match self.filter_offset {
            Some(_) => self.reference_level(at, false).max(REFERENCE_FLOOR),
            None => wide,
        };
        let ratio = peak_block / reference;
        // Over a reply gone quiet at the path's lag, the ratio of line noise to the floor is
        // over any bound: only a frame that stands out of the line's noise is the caller (noise
        // taken for double talk froze the filter through the next syllable of the reply).
        let loud = ratio > bound && frame_energy > LOUD_OVER_NOISE * self.noise_floor;

        // The filter's view: echo estimate and residual with the taps as they are.
        let mut filtered = self
            .filter_offset
            .and_then(|offset| self.estimate(at, &mic, offset));
        let converged = self.converged();
        // Once the filter has converged its residual decides (more sensitive than levels: the
        // caller counts from the echo's level, not the reply's); until then, levels alone.
        // The residual echo expected is the echo estimate less the enhancement the filter has
        // shown on this line; the caller is what stands clear of that and of the line noise.
        let share = if converged {
            (RESIDUAL_MARGIN * self.erle_residual / self.erle_mic).min(1.0)
        } else {
            1.0
        };
        let mic_energy: f32 = mic.iter().map(|x| x * x).sum();
        let noise_margin = NOISE_MARGIN * self.noise_floor;
        let stands_clear = |(echo, residual): (f32, f32)| residual > share * echo + noise_margin;
        let mut residual_is_caller = converged && filtered.is_some_and(stands_clear);
        // A converged filter that misses an echo the level says is there: a quiet caller, or
        // the path moved under the filter (a jitter buffer grew or shrank by a frame, the
        // caller's phone adapted its playout). Taken for double talk, a moved path froze the
        // filter where it no longer fitted and passed the echo for the rest of the reply; the
        // waveform over the missed frames tells the two apart (the echo is the reply at a new
        // lag, a caller is not the reply at any).
        if residual_is_caller && !loud {
            let from = *self.misfit_from.get_or_insert(at);
            let missed = (at - from.min(at)) / FRAME_SAMPLES as u64 + 1;
            let ask = missed >= MOVED_MIN_FRAMES
                && (missed <= 2 * MOVED_MIN_FRAMES || missed.is_multiple_of(4));
            if ask {
                if let Some(offset) = self.moved_path(from, at + FRAME_SAMPLES as u64) {
                    filtered = self.estimate(at, &mic, offset);
                    residual_is_caller = filtered.is_some_and(stands_clear);
                    self.misfit_from = None;
                    // The frames it missed were the move, not double talk: the filter learns
                    // on, and they do not count towards the caller.
                    self.double_talk_hold = 0;
                    self.residual_run = 0;
                }
            }
        } else if !residual_is_caller {
            self.misfit_from = None;
        }
        if let (Some((_, residual)), true) = (filtered, reference >= BOUND_REFERENCE) {
            self.fit_mic = FIT_KEEP * self.fit_mic + mic_energy;
            self.fit_residual = FIT_KEEP * self.fit_residual + residual;
        }
        // A residual over the echo for a frame or two is as often the filter's own miss (a new
        // sound in the reply it has not learnt) as the caller; speech lasts, so the third such
        // frame in a row passes (louder than any echo passes at once).
        self.residual_run = if residual_is_caller {
            self.residual_run.saturating_add(1)
        } else {
            0
        };
        let heard = match filtered {
            Some(_) if converged => loud || self.residual_run >= RESIDUAL_FRAMES,
            _ => loud,
        };
        // Speech dips between syllables below what the gate can tell from echo; a VAD that saw
        // those dips silenced would end the caller's speech early (a 1 s interruption read as
        // two backchannels). With the filter converged the residual is the caller less the
        // echo, so it passes for CALLER_HANGOVER frames after a frame where both the level and
        // the residual showed the caller, audibly (either alone also passes the odd frame of
        // echo or line noise, which must hold nothing open).
        if residual_is_caller && loud && peak_block > AUDIBLE_ECHO {
            self.caller_hold = CALLER_HANGOVER;
        }
        // Before the filter has converged (the first seconds of a call's first reply) only the
        // level decides, and speech over the echo passes in fragments: its quieter syllables
        // sit under the bound, and a VAD hearing those holes confirmed the speech late (a
        // word or two late, past the 300 ms a barge-in has). Two frames in a row over the bound,
        // audibly, are the caller (echo that loud for that long is what the bound is set
        // against), and hold the gate open as above.
        self.loud_run = if loud && peak_block > AUDIBLE_ECHO {
            self.loud_run.saturating_add(1)
        } else {
            0
        };
        if !converged && self.loud_run >= LOUD_FRAMES {
            self.caller_hold = CALLER_HANGOVER;
        }
        let caller = heard || (self.caller_hold > 0 && (!converged || filtered.is_some()));
        let near_residual = filtered.is_some_and(|(echo, residual)| {
            converged
                && residual > ONSET_EVIDENCE * (share * echo + NOISE_MARGIN * self.noise_floor)
        });
        let near = ratio > ONSET_EVIDENCE * bound || near_residual;
        self.remember(at, audible && (caller || near), heard);
        self.caller_hold = self.caller_hold.saturating_sub(1);
        // The echo's level is learnt from every frame not taken for the caller (the bound is used
        // only once a path is found, and learnt again from there).
        if !caller && reference >= BOUND_REFERENCE {
            self.gain_window[self.gain_next] = ratio;
            self.gain_next = (self.gain_next + 1) % GAIN_WINDOW;
        }
        // Double talk freezes the filter: the caller louder than any echo (Geigel's rule), or,
        // once converged, a residual over the echo (the caller's speech would pull the taps
        // away from the path).
        // Speech has quiet stretches between its loud ones: the freeze holds DOUBT_HANGOVER
        // frames past the last frame that showed the caller.
        // The freeze comes a frame or more late: the caller's first, quieter syllable over the
        // reply stands out of neither the level nor the residual, and the taps learn from it
        // meanwhile (pulled off the path, the filter then missed the start of the next reply's
        // echo, and that barged in). A converged filter goes back to its taps of a checkpoint
        // or two before.
        if loud || residual_is_caller {
            if self.double_talk_hold == 0 && converged {
                self.filter.restore();
                self.adapted_since_checkpoint = 0;
            }
            self.double_talk_hold = DOUBT_HANGOVER;
        }
        let double_talk = self.double_talk_hold > 0;
        self.double_talk_hold = self.double_talk_hold.saturating_sub(1);
        // Nor does the filter learn over a reply too quiet to echo audibly: there the error is
        // line noise, and NLMS normalised by a near-silent reference walks its taps off the path.
        let learnable = reference >= BOUND_REFERENCE;
        if let (false, true, Some(offset), Some((_, residual))) =
            (double_talk, learnable, self.filter_offset, filtered)
        {
            self.adapt(at, &mic, offset);
            self.adapted_since_placed += 1;
            if converged {
                self.adapted_since_checkpoint += 1;
                if self.adapted_since_checkpoint >= CHECKPOINT_FRAMES {
                    self.adapted_since_checkpoint = 0;
                    self.filter.checkpoint();
                }
            }
            // A filter that adapts for a second without converging is in the wrong place (the
            // fine alignment failed or the path moved within the envelope's lag): look again.
            if self.adapted_since_placed >= REALIGN_FRAMES << self.realign_backoff && !converged {
                self.adapted_since_placed = 0;
                match self.fine_lag(at + FRAME_SAMPLES as u64) {
                    Some(delay)
                        if !self.finely_placed
                            || delay.abs_diff(self.path_delay) > REALIGN_TOLERANCE =>
                    {
                        self.place_filter(delay, true);
                    }
                    _ => self.realign_backoff = (self.realign_backoff + 1).min(REALIGN_BACKOFF),
                }
            }
            {
                let keep = 0.98;
                self.erle_mic = keep * self.erle_mic + mic_energy;
                self.erle_residual = keep * self.erle_residual + residual;
                if converged {
                    self.erl_echo += mic_energy;
                    self.erl_ref += self.aligned_reference_energy(at);
                }
            }
        }
        if caller {
            self.gated_run = 0;
            self.report.frames_double_talk += 1;
            if filtered.is_some() && converged {
                for (s, r) in frame.iter_mut().zip(&self.residual) {
                    *s = (r * 32768.0).clamp(-32768.0, 32767.0) as i16;
                }
            }
            return Verdict::Caller;
        }
        self.report.frames_gated += 1;
        if peak_block > AUDIBLE_ECHO {
            self.gated_run += 1;
            if self.gated_run == BURST_FRAMES {
                self.report.bursts_gated += 1;
            }
        } else {
            self.gated_run = 0;
        }
        frame.fill(0);
        Verdict::Echo
    }

    /// Keep the caller's frame for the fine alignment.
    fn keep_caller(&mut self, at: u64, mic: &[f32; FRAME_SAMPLES]) {
        if at != self.mic_end {
            self.mic_from = at;
        }
        for (i, x) in mic.iter().enumerate() {
            let j = (at as usize + i) % MIC_RING;
            self.mic[j] = *x;
            self.mic[j + MIC_RING] = *x;
        }
        self.mic_end = at + FRAME_SAMPLES as u64;
    }

    /// The echo's delay to the sample around the envelope's lag, from the caller's audio up to
    /// `end`: `None` when the audio needed is not all kept or no lag correlates well enough.
    fn fine_lag(&self, end: u64) -> Option<usize> {
        let longest = self.coarse_lag + FINE_SPAN;
        let shortest = self.coarse_lag.saturating_sub(FINE_SPAN);
        // The last FINE_WINDOW of the caller's audio, or as much of it as is kept unbroken and
        // has its reply still in the ring (a lock early in a call has less behind it).
        let oldest_reference = self.ref_end.saturating_sub(RING as u64);
        let start = end
            .saturating_sub(FINE_WINDOW as u64)
            .max(self.mic_from)
            .max(oldest_reference + longest as u64);
        if end > self.mic_end || start + (MIN_FINE_WINDOW as u64) > end {
            return None;
        }
        let first = start - longest as u64;
        let last = end.checked_sub(shortest as u64)?;
        if last > self.ref_end {
            return None;
        }
        let m = start as usize % MIC_RING;
        let r = first as usize % RING;
        let mic = &self.mic[m..(m as u64 + end - start) as usize];
        let reference = &self.reference[r..r + (last - first) as usize];
        let (lag, correlation) = best_lag(mic, reference, longest, shortest)?;
        (correlation >= FINE_CORRELATION).then_some(lag)
    }

    /// Whether the path moved under the converged filter, judged on the caller's audio from
    /// `from` to `end`: the filter's own echo estimate, slid up to [`FINE_SPAN`] either way,
    /// fitting the caller's audio well away from where it is moves the filter's window there
    /// with its taps (a path that moved is the same path later or sooner), and the new window's
    /// offset is returned. The shift is measured against the filter's estimate, not the raw
    /// reply: a move found a sample off leaves the filter missing the echo as before.
    fn moved_path(&mut self, from: u64, end: u64) -> Option<usize> {
        let offset = self.filter_offset?;
        let start = from
            .max(end.saturating_sub(MOVED_WINDOW as u64))
            .max(self.mic_from);
        let len = end.checked_sub(start)? as usize;
        if end > self.mic_end || len < MOVED_MIN_FRAMES as usize * FRAME_SAMPLES {
            return None;
        }
        let first = start.checked_sub(FINE_SPAN as u64)?;
        // The estimate from FINE_SPAN before the window to FINE_SPAN after it (zero where the
        // reply is not there yet, a shorter path than the ring holds).
        let mut estimate = std::mem::take(&mut self.shift_scratch);
        for (i, y) in estimate[..len + 2 * FINE_SPAN].iter_mut().enumerate() {
            *y = self
                .window(first + i as u64, offset)
                .map_or(0.0, |x| self.filter.estimate(x));
        }
        let m = start as usize % MIC_RING;
        let found = best_lag(
            &self.mic[m..m + len],
            &estimate[..len + 2 * FINE_SPAN],
            2 * FINE_SPAN,
            0,
        );
        // What the shifted estimate leaves of the caller's audio over the window, against what
        // the estimate where it is leaves: a moved path's echo is the estimate shifted.
        let mic = &self.mic[m..m + len];
        let mic_energy = mic
            .iter()
            .map(|x| x * x)
            .sum::<f32>()
            .max(f32::MIN_POSITIVE);
        let unexplained = |k: usize| {
            let left: f32 = mic
                .iter()
                .zip(&estimate[k..k + len])
                .map(|(x, y)| (x - y) * (x - y))
                .sum();
            left / mic_energy
        };
        let fits = found.filter(|&(lag, correlation)| {
            let (moved, staying) = (unexplained(2 * FINE_SPAN - lag), unexplained(FINE_SPAN));
            correlation >= MOVED_CORRELATION
                && lag != FINE_SPAN
                && moved <= MOVED_LEFT
                && moved * MOVED_GAIN <= staying
        });
        self.shift_scratch = estimate;
        let (lag, _) = fits?;
        // The echo comes `lag − FINE_SPAN` samples later than the filter's window placed it.
        let moved = (offset + lag).checked_sub(FINE_SPAN)?;
        let delay = (self.path_delay + lag).checked_sub(FINE_SPAN)?;
        self.filter_offset = Some(moved);
        self.path_delay = delay;
        self.finely_placed = true;
        self.adapted_since_placed = 0;
        self.realign_backoff = 0;
        self.report.path_changes += 1;
        self.report.delay = Some(Duration::from_micros(
            delay as u64 * 1_000_000 / u64::from(SAMPLE_RATE_HZ),
        ));
        Some(moved)
    }

    /// Place the filter's window [`LEAD`] samples before `delay`. A lag found to the sample
    /// (`fine`) that moves the window by less than half its length keeps what was learnt of the
    /// lags it still covers; otherwise the filter learns the path afresh.
    fn place_filter(&mut self, delay: usize, fine: bool) {
        let offset = delay.saturating_sub(LEAD);
        let old = self.filter_offset.replace(offset);
        self.path_delay = delay;
        self.finely_placed = fine;
        self.report.delay = Some(Duration::from_micros(
            delay as u64 * 1_000_000 / u64::from(SAMPLE_RATE_HZ),
        ));
        self.adapted_since_placed = 0;
        self.realign_backoff = 0;
        if let Some(old) = old.filter(|o| fine && o.abs_diff(offset) <= self.filter.taps() / 2) {
            self.filter.shift(offset as isize - old as isize);
            return;
        }
        self.filter.reset();
        self.gain_window = [0.0; GAIN_WINDOW];
        self.since_lock = 0;
        self.erle_mic = 0.0;
        self.erle_residual = 0.0;
        self.fit_mic = 0.0;
        self.fit_residual = 0.0;
    }

    /// Whether the filter has taken the echo down by [`CONVERGED_ERLE`] over its recent frames.
    fn converged(&self) -> bool {
        self.erle_residual > 0.0 && self.erle_mic > CONVERGED_ERLE * self.erle_residual
    }

    /// Whether the filter takes the echo out of the last few frames of audible reply.
    fn fits_now(&self) -> bool {
        self.fit_residual > 0.0 && self.fit_mic > CONVERGED_ERLE * self.fit_residual
    }

    /// Sum the caller's frame into envelope blocks for the delay search.
    fn sum_caller_blocks(&mut self, at: u64, mic: &[f32; FRAME_SAMPLES], searching: bool) {
        for (i, x) in mic.iter().enumerate() {
            let p = at + i as u64;
            let block = p / BLOCK as u64;
            let (b, e) = match self.mic_block {
                Some((b, e)) if b == block => (b, e),
                // A jump in the caller's timeline drops the partial block.
                _ => (block, 0.0),
            };
            let e = e + x * x;
            if p % BLOCK as u64 == BLOCK as u64 - 1 {
                if searching {
                    self.delay.caller_block(b, e, self.ref_blocks_done);
                }
                self.mic_block = None;
            } else {
                self.mic_block = Some((b, e));
            }
        }
    }

    /// The filter's window for the caller's sample at `position`, if the reference covers it.
    fn window(&self, position: u64, offset: usize) -> Option<&[f32]> {
        let taps = self.filter.taps();
        let last = position.checked_sub(offset as u64)?;
        let first = last.checked_sub(taps as u64 - 1)?;
        if last >= self.ref_end || first + (RING as u64) < self.ref_end {
            return None;
        }
        let start = first as usize % RING;
        Some(&self.reference[start..start + taps])
    }

    /// Echo estimate and residual energies for the frame (taps unchanged); keeps the residual.
    fn estimate(
        &mut self,
        at: u64,
        mic: &[f32; FRAME_SAMPLES],
        offset: usize,
    ) -> Option<(f32, f32)> {
        let mut echo = 0.0;
        let mut residual = 0.0;
        let mut covered = false;
        for (i, m) in mic.iter().enumerate() {
            let y = match self.window(at + i as u64, offset) {
                Some(x) => {
                    covered = true;
                    self.filter.estimate(x)
                }
                None => 0.0,
            };
            let e = m - y;
            self.residual[i] = e;
            echo += y * y;
            residual += e * e;
        }
        covered.then_some((echo, residual))
    }

    /// Adapt the taps sample by sample over the frame.
    fn adapt(&mut self, at: u64, mic: &[f32; FRAME_SAMPLES], offset: usize) {
        for (i, m) in mic.iter().enumerate() {
            let position = at + i as u64;
            let Some(x) = self.window(position, offset) else {
                continue;
            };
            let e = m - self.filter.estimate(x);
            // Split borrow: the window is a slice of `reference`, the taps live in `filter`.
            let taps = self.filter.taps();
            let start = (position - offset as u64 - (taps as u64 - 1)) as usize % RING;
            let (filter, reference) = (&mut self.filter, &self.reference);
            filter.adapt(&reference[start..start + taps], e);
        }
    }

    fn aligned_reference_energy(&self, at: u64) -> f32 {
        (0..FRAME_SAMPLES)
            .filter_map(|i| {
                let p = (at + i as u64).checked_sub(self.path_delay as u64)?;
                (p < self.ref_end).then(|| self.reference[p as usize % RING].powi(2))
            })
            .sum()
    }

    /// What the canceller has found so far.
    pub fn report(&self) -> EchoReport {
        let db = |num: f32, den: f32| (num > 0.0 && den > 0.0).then(|| 10.0 * (num / den).log10());
        EchoReport {
            erl_db: db(self.erl_ref, self.erl_echo),
            erle_db: db(self.erle_mic, self.erle_residual),
            ..self.report
        }
    }

    /// The delay search's best correlation at the last frame (0–1), for diagnostics.
    pub fn path_correlation(&self) -> f32 {
        self.delay.best_correlation()
    }

    /// Whether the echo's delay has been found.
    pub fn path_found(&self) -> bool {
        self.delay.locked().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply of noise bursts (speech-like on and off) and its echo `delay` samples later
    /// through a hybrid's main reflection and undershoot, 12 dB down, with a little line noise.
    fn line(frames: usize, delay: usize) -> (Vec<i16>, Vec<i16>) {
        let mut state = 99u32;
        let mut rand = move || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let n = frames * FRAME_SAMPLES;
        let played: Vec<f32> = (0..n)
            .map(|i| {
                let on = (i / 1600) % 4 != 3;
                if on {
                    rand() * 16000.0
                } else {
                    0.0
                }
            })
            .collect();
        let taps = [0.0, 1.0, 0.0, -0.4];
        let caller: Vec<i16> = (0..n)
            .map(|i| {
                let echo: f32 = taps
                    .iter()
                    .enumerate()
                    .filter_map(|(j, t)| Some(t * played[i.checked_sub(delay + j)?]))
                    .sum();
                (0.25 * echo + rand() * 20.0) as i16
            })
            .collect();
        (played.iter().map(|x| *x as i16).collect(), caller)
    }

    fn feed(aec: &mut EchoCanceller, played: &[i16], caller: &[i16], k: usize) -> Verdict {
        let at = k * FRAME_SAMPLES;
        let mut reference = [0i16; FRAME_SAMPLES];
        reference.copy_from_slice(&played[at..at + FRAME_SAMPLES]);
        aec.push_reference(at as u64, &reference);
        let mut frame = [0i16; FRAME_SAMPLES];
        frame.copy_from_slice(&caller[at..at + FRAME_SAMPLES]);
        aec.process(at as u64, &mut frame)
    }

    /// An envelope lock 10 ms late puts the echo outside the filter's window: it cannot
    /// converge, and the gate compares the caller with the wrong stretch of the reply. The fine
    /// alignment finds the path to the sample within a second or two of reply, and the filter
    /// converges there.
    #[test]
    fn a_lock_outside_the_filters_window_is_corrected_by_the_waveform() {
        let delay = 1700;
        let (played, caller) = line(400, delay);
        let mut aec = EchoCanceller::new(&EchoConfig::default()).unwrap();
        let mut k = 0;
        while aec.filter_offset.is_none() {
            feed(&mut aec, &played, &caller, k);
            k += 1;
            assert!(k < 200, "the envelope search locks");
        }
        // Where a late lock would have placed it.
        aec.place_filter(delay + 80, false);
        let misplaced = aec.filter_offset;
        for k in k..400 {
            feed(&mut aec, &played, &caller, k);
        }
        let report = aec.report();
        assert_ne!(aec.filter_offset, misplaced);
        // The main reflection is the hybrid's second tap.
        assert_eq!(aec.path_delay, delay + 1, "{report:?}");
        assert!(
            report.erle_db.is_some_and(|db| db > 10.0),
            "converged at the right lag: {report:?}"
        );
        assert_eq!(report.path_changes, 0, "{report:?}");
    }
}
