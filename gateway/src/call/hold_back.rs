//! Reply hold-back, sans-IO: when the caller's turn ends, how long the bot's reply waits before
//! the caller hears it, learned per call from what the caller did after earlier ends.
//!
//! Smart Turn alone ends a turn in a mid-sentence pause as readily as at the sentence's end, and
//! as confidently (medians 0.96 and 0.92 on the labelled set's held-out split; docs/inference.md). What it cannot see, the call can:
//! whether *this* caller went on speaking after an end it was sure of. [`HoldBack`] keeps that
//! history and answers, per turn end, when the reply may start ([`Hold::release_at`]). The call
//! holds the reply's audio until then; a caller who resumes first has the held reply dropped and
//! the bot told (`TurnResumed`): the false end costs the caller nothing. Two waits; the longer
//! one applies:
//!
//! - **Doubt** (off by default): a verdict below [`HoldBackConfig::sure`] waits in proportion to
//!   how far below it is, up to [`HoldBackConfig::unsure_hold`] at the 0.5 threshold.
//! - **Habit**: a caller who has resumed after ends before gets their longest pause so far
//!   (× [`GAP_MARGIN`], plus the VAD's start lag) from the speech's end. Only ends that could
//!   have been a mid-sentence pause count, and get the wait: not a short answer
//!   ([`HoldBackConfig::short_answer`]: "Yes.", "Friday." are answered at once), not a turn in
//!   which the caller already paused [`INNER_PAUSE`] or more (they are finishing the sentence
//!   they paused in). The rate of resumptions over such ends is smoothed (prior
//!   [`PRIOR_RESUMED`] in [`PRIOR_ENDS`]) and must reach [`HABIT_RATE`].
//!
//! A bot that sends its recogniser's words (`ontime.transcript`, [`HoldBack::words`]) adds a
//! third cue, judged by [`super::words`], which outranks both: words that cannot end a sentence
//! ("… to", "… and", "um") hold the reply [`WORDS_HOLD`] from the speech's end (or the habit
//! wait, if longer), from this caller's first pause on; words that end one ("… Friday.") lift
//! the habit and doubt waits, so a caller who pauses only sometimes is answered at once when
//! they did not. Words that arrive after the verdict, while the reply is not yet heard, move
//! its release either way ([`HoldBack::rewait`]): recognisers deliver the last words some
//! 100–500 ms after they were said, about when the verdict comes.
//!
//! The verdict's final pitch level (`ontime_inference::prosody`) is a fourth cue, used one way
//! only: a voice that fell [`FINAL_FALL_ST`] or more at its end closed a statement, and the
//! habit and doubt waits are lifted (`HoldBackConfig::final_fall`, `--reply-hold-fall`). No
//! fall never holds: questions rise, real voices vary, tonal languages fall inside words.
//!
//! All are capped at [`HoldBackConfig::max_hold`] from the verdict. A timed-out turn (the caller
//! was quiet for the incomplete timeout) is never held.

use std::time::{Duration, Instant};

use super::words::WordsCue;

/// A caller whose smoothed resume rate reaches this pauses mid-sentence by habit.
pub const HABIT_RATE: f64 = 0.3;
/// The rate's prior: this many resumptions in [`PRIOR_ENDS`] ends (0.25, below the habit rate:
/// a new caller is answered at once).
pub const PRIOR_RESUMED: f64 = 0.5;
/// See [`PRIOR_RESUMED`].
pub const PRIOR_ENDS: f64 = 2.0;
/// Words that cannot end a sentence hold the reply this long after the speech's end when no
/// longer pause has been learned: the load harness's pauses of 0.7–1.2 s reach the VAD as
/// 0.74–1.54 s, and the hold must outlast the VAD's start lag too.
pub const WORDS_HOLD: Duration = Duration::from_millis(1700);
/// The habit wait covers the longest pause seen times this (pauses vary; the next may be longer).
pub const GAP_MARGIN: f64 = 1.5;
/// Speech that stops and starts again this much later inside one turn (no end between) is a
/// pause the caller made: the turn's next end is not held for habit.
pub const INNER_PAUSE: Duration = Duration::from_millis(300);
/// How long after a caller resumes the VAD confirms it (its start duration, rounded up): the
/// held reply must still be held then.
pub const START_LAG: Duration = Duration::from_millis(128);
/// A caller speaking again this soon after the speech that ended a turn (before the reply was
/// heard, or over its first part) counts as resuming after a pause.
pub const RESUME_WINDOW: Duration = Duration::from_secs(2);
/// Over the reply, only speech that began within this much of it counts as resuming: later, the
/// caller is more likely answering what they heard (a barge-in) than finishing their sentence.
/// A judgment, not a measurement: pauses of 0.7–1.2 s in the load harness reach the VAD as
/// 0.74–1.54 s from the speech's end, i.e. up to 1.4 s into a reply that began 180 ms after it.
pub const RESUME_HEARD: Duration = Duration::from_millis(1500);

/// The hold-back's settings (`--reply-hold-back` and friends in docs/gateway.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HoldBackConfig {
    /// Hold replies at all (off: every reply plays as soon as it comes, as before).
    pub enabled: bool,
    /// A verdict at or above this probability is not held for doubt.
    pub sure: f32,
    /// The doubt wait at probability 0.5 (Smart Turn's threshold); less, linearly, above it.
    pub unsure_hold: Duration,
    /// Turns with less speech than this are short answers: no habit wait.
    pub short_answer: Duration,
    /// No reply waits longer than this after its verdict.
    pub max_hold: Duration,
    /// A verdict whose final pitch fell this far (semitones, negative) is not held for habit
    /// or doubt; `None`: the pitch is not used.
    pub final_fall: Option<f32>,
}

impl Default for HoldBackConfig {
    fn default() -> Self {
        HoldBackConfig {
            enabled: true,
            sure: 0.9,
            // Off: on the labelled set (docs/inference.md, *Reply hold-back*) Smart Turn scored
            // inner-pause ends (median 0.89) nearly as high as complete sentences (0.94), and a
            // 600 ms doubt wait caught 1 of 33 such ends for +511 ms p95 on complete turns.
            unsure_hold: Duration::ZERO,
            short_answer: Duration::from_millis(600),
            max_hold: crate::config::DEFAULT_REPLY_HOLD_MAX,
            final_fall: Some(FINAL_FALL_ST),
        }
    }
}

/// Why a reply waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldReason {
    /// It does not.
    None,
    /// Smart Turn was not sure.
    Doubt,
    /// The caller has paused mid-sentence before.
    Habit,
    /// The bot's transcript of the caller ends where no sentence ends.
    Words,
}

impl HoldReason {
    /// The name in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::None => "none",
            HoldReason::Doubt => "doubt",
            HoldReason::Habit => "habit",
            HoldReason::Words => "words",
        }
    }
}

/// The decision for one turn end, with its inputs (logged as the decision's debug event).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hold {
    /// Where the caller's speech that the verdict ended stopped.
    pub speech_end_at: Instant,
    /// The reply may start playing at this time (the verdict's time when not held).
    pub release_at: Instant,
    /// The longer of the two waits.
    pub reason: HoldReason,
    /// Inputs: Smart Turn's probability (None: timed out), the turn's speech, the caller's
    /// smoothed resume rate, the longest pause learned, and whether the turn resumed once.
    pub probability: Option<f32>,
    /// See `probability`.
    pub speech: Duration,
    /// See `probability`.
    pub resume_rate: f64,
    /// See `probability`.
    pub longest_pause: Option<Duration>,
    /// See `probability`.
    pub resumed_turn: bool,
    /// The end could have been a mid-sentence pause (long enough, no pause in the turn yet):
    /// it counts towards the rate, and only such ends are held for habit.
    pub pausable: bool,
    /// What the bot's transcript of the turn said, if the bot sent one since the caller last
    /// began speaking.
    pub words: Option<WordsCue>,
    /// The turn's final pitch level (semitones; `None`: not measured).
    pub final_pitch: Option<f32>,
    /// A habit or doubt wait was lifted, and by what: `fall` (the voice fell to a statement's
    /// end) or `words` (the transcript ends a sentence).
    pub lifted: Option<&'static str>,
}

impl Hold {
    /// How long the reply waits after `now` (the verdict).
    pub fn wait(&self, now: Instant) -> Duration {
        self.release_at.saturating_duration_since(now)
    }
}

/// A complete verdict whose turn's voice fell at least this much at its end (semitones, the
/// last 100 ms against the 1.4 s before; `ontime_inference::prosody`) ended a statement: it
/// lifts the habit and doubt waits. Tuned on the labelled set's tune split (39 of 40 sentence
/// ends fall this far, 1 of 64 pauses); on the held-out split 38 of 40 ends and 0 of 64 pauses.
pub const FINAL_FALL_ST: f32 = -2.5;

/// One call's turn-end history and the hold decision.
#[derive(Debug, Clone)]
pub struct HoldBack {
    config: HoldBackConfig,
    /// Turn ends decided, those that could have been a pause, and how many of these the caller
    /// resumed after.
    ends: u32,
    pausable_ends: u32,
    resumed: u32,
    /// The longest pause (speech end → resumed onset) seen.
    longest_pause: Option<Duration>,
    /// The current turn's first onset, where its speech last stopped, whether the caller
    /// already paused in it, and whether its last end could have been a pause.
    turn_onset: Option<Instant>,
    last_stop: Option<Instant>,
    resumed_turn: bool,
    last_end_pausable: bool,
    /// The bot's transcript's cue since the caller last began speaking, in a turn.
    words: Option<WordsCue>,
}

impl HoldBack {
    /// A new call's.
    pub fn new(config: HoldBackConfig) -> HoldBack {
        HoldBack {
            config,
            ends: 0,
            pausable_ends: 0,
            resumed: 0,
            longest_pause: None,
            turn_onset: None,
            last_stop: None,
            resumed_turn: false,
            last_end_pausable: false,
            words: None,
        }
    }

    /// The caller began speaking at `onset_at` (a new turn unless one is open; a pause in it if
    /// they stopped [`INNER_PAUSE`] or more before).
    pub fn speech_started(&mut self, onset_at: Instant) {
        // Words written before this speech do not say how it ends.
        self.words = None;
        if self.turn_onset.is_none() {
            self.turn_onset = Some(onset_at);
        } else if self
            .last_stop
            .is_some_and(|t| onset_at.saturating_duration_since(t) >= INNER_PAUSE)
        {
            self.resumed_turn = true;
        }
    }

    /// The caller's speech stopped at `end_at` (the VAD's stop).
    pub fn speech_stopped(&mut self, end_at: Instant) {
        self.last_stop = Some(end_at);
    }

    /// The bot's recogniser wrote the caller's words so far ([`super::words::judge`]'s cue).
    /// Ignored between turns (after the reply was heard, before the caller speaks again): a
    /// late transcript of the last turn does not describe the next.
    pub fn words(&mut self, cue: WordsCue) {
        if self.turn_onset.is_some() {
            self.words = Some(cue);
        }
    }

    /// Words came ([`HoldBack::words`]) after the verdict at `ended_at` on speech that ended at
    /// `speech_end_at`, while its reply, due at `release_at`, is not heard: the new release time
    /// and reason, if the words move it.
    pub fn rewait(
        &self,
        speech_end_at: Instant,
        ended_at: Instant,
        release_at: Instant,
        now: Instant,
    ) -> Option<(Instant, HoldReason)> {
        if !self.config.enabled {
            return None;
        }
        match self.words? {
            WordsCue::Complete if release_at > now => Some((now, HoldReason::None)),
            WordsCue::Incomplete => {
                let until = self
                    .words_until(speech_end_at)
                    .min(ended_at + self.config.max_hold);
                (until > release_at.max(now)).then_some((until, HoldReason::Words))
            }
            _ => None,
        }
    }

    /// Where a hold for words that cannot end a sentence ends, uncapped.
    fn words_until(&self, speech_end_at: Instant) -> Instant {
        let learned = self
            .longest_pause
            .map_or(Duration::ZERO, |gap| gap.mul_f64(GAP_MARGIN) + START_LAG);
        speech_end_at + WORDS_HOLD.max(learned)
    }

    /// The caller's turn ended on a verdict at `now`, after their last speech stop
    /// ([`HoldBack::speech_stopped`]; `now` if none was heard).
    /// `final_pitch` is the verdict's measure of the turn's last voice
    /// (`InferenceEvent::TurnEnded::final_pitch`).
    pub fn turn_ended(
        &mut self,
        probability: Option<f32>,
        final_pitch: Option<f32>,
        now: Instant,
    ) -> Hold {
        self.ends += 1;
        let speech_end_at = self.last_stop.unwrap_or(now);
        let speech = self.turn_onset.map_or(Duration::ZERO, |t| {
            speech_end_at.saturating_duration_since(t)
        });
        let rate = self.resume_rate();
        // A timed-out end followed seconds of quiet: not a pause anyone resumes from.
        let pausable =
            probability.is_some() && !self.resumed_turn && speech >= self.config.short_answer;
        self.last_end_pausable = pausable;
        if pausable {
            self.pausable_ends += 1;
        }
        let mut hold = Hold {
            speech_end_at,
            release_at: now,
            reason: HoldReason::None,
            probability,
            speech,
            resume_rate: rate,
            longest_pause: self.longest_pause,
            resumed_turn: self.resumed_turn,
            pausable,
            words: self.words,
            final_pitch,
            lifted: None,
        };
        let Some(p) = probability.filter(|_| self.config.enabled) else {
            return hold;
        };
        let doubt = (self.config.sure - p) / (self.config.sure - 0.5);
        if doubt > 0.0 {
            // Whole milliseconds: the wait is a setting's fraction, not a measurement.
            let ms = self.config.unsure_hold.as_millis() as f64 * f64::from(doubt.min(1.0));
            let wait = Duration::from_millis(ms.round() as u64);
            hold.release_at = now + wait;
            hold.reason = HoldReason::Doubt;
        }
        if rate >= HABIT_RATE && pausable {
            if let Some(gap) = self.longest_pause {
                let until = speech_end_at + gap.mul_f64(GAP_MARGIN) + START_LAG;
                if until > hold.release_at {
                    hold.release_at = until;
                    hold.reason = HoldReason::Habit;
                }
            }
        }
        let waits = hold.release_at > now;
        let fell = final_pitch
            .zip(self.config.final_fall)
            .is_some_and(|(level, fall)| level <= fall);
        // The words outrank the pitch, either way.
        match self.words {
            // The words end a sentence: the caller is answered now, whatever their habit.
            Some(WordsCue::Complete) => {
                hold.release_at = now;
                hold.lifted = waits.then_some("words");
            }
            Some(WordsCue::Incomplete) => {
                let until = self.words_until(speech_end_at);
                if until > hold.release_at {
                    hold.release_at = until;
                    hold.reason = HoldReason::Words;
                }
            }
            Some(WordsCue::Unknown) | None if fell && waits => {
                // The voice fell to a statement's end: not a pause, whatever the habit.
                hold.release_at = now;
                hold.lifted = Some("fall");
            }
            Some(WordsCue::Unknown) | None => {}
        }
        hold.release_at = hold.release_at.min(now + self.config.max_hold);
        if hold.release_at <= now {
            hold.release_at = now;
            hold.reason = HoldReason::None;
        }
        hold
    }

    /// The caller resumed `pause` after the speech that ended the last turn, before or soon
    /// after its reply began: the end was in a pause, and this turn goes on.
    pub fn resumed(&mut self, pause: Duration) {
        if self.last_end_pausable {
            self.resumed += 1;
            self.last_end_pausable = false;
        }
        self.resumed_turn = true;
        self.longest_pause = Some(self.longest_pause.map_or(pause, |g| g.max(pause)));
    }

    /// The reply to the last end is being heard and the caller did not resume: the next speech
    /// is a new turn.
    pub fn reply_heard(&mut self) {
        self.turn_onset = None;
        self.last_stop = None;
        self.resumed_turn = false;
        self.words = None;
        // `last_end_pausable` stays: a caller who resumes over the reply's start (a pause
        // longer than the hold) still counts as having paused there.
    }

    /// Ends decided so far, those that could have been pauses, and how many of these the
    /// caller resumed after.
    #[cfg(test)]
    pub fn counts(&self) -> (u32, u32, u32) {
        (self.ends, self.pausable_ends, self.resumed)
    }

    /// The smoothed rate of resumptions after ends that could have been pauses, so far.
    fn resume_rate(&self) -> f64 {
        (f64::from(self.resumed) + PRIOR_RESUMED) / (f64::from(self.pausable_ends) + PRIOR_ENDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// A turn of `speech` ending at `t0 + at`, its verdict 200 ms later; returns the wait.
    fn end(
        h: &mut HoldBack,
        t0: Instant,
        at: u64,
        speech: u64,
        p: Option<f32>,
    ) -> (Duration, HoldReason) {
        h.speech_started(t0 + ms(at - speech));
        h.speech_stopped(t0 + ms(at));
        let now = t0 + ms(at + 200);
        let hold = h.turn_ended(p, None, now);
        (hold.wait(now), hold.reason)
    }

    /// A caller who paused once: their first turn ends at 2 s in a pause, they resume
    /// `pause_ms` after their speech and finish at 4 s, and the reply is heard.
    fn paused_once(h: &mut HoldBack, t0: Instant, pause_ms: u64) {
        end(h, t0, 2000, 1200, Some(0.98));
        h.resumed(ms(pause_ms));
        end(h, t0, 4000, 2000, Some(0.98));
        h.reply_heard();
    }

    /// The doubt wait on (it is off by default).
    fn with_doubt() -> HoldBackConfig {
        HoldBackConfig {
            unsure_hold: ms(600),
            ..HoldBackConfig::default()
        }
    }

    #[test]
    fn by_default_a_new_caller_is_not_held_whatever_smart_turn_said() {
        let t0 = Instant::now();
        let mut h = HoldBack::new(HoldBackConfig::default());
        let none = (Duration::ZERO, HoldReason::None);
        assert_eq!(end(&mut h, t0, 2000, 1500, Some(0.51)), none);
    }

    #[test]
    fn a_new_caller_is_held_only_for_doubt() {
        let t0 = Instant::now();
        let mut h = HoldBack::new(with_doubt());
        let none = (Duration::ZERO, HoldReason::None);
        assert_eq!(end(&mut h, t0, 2000, 1500, Some(0.97)), none);
        h.reply_heard();
        assert_eq!(end(&mut h, t0, 9000, 1500, Some(0.9)), none);
        h.reply_heard();
        // 0.7 is halfway between the threshold and "sure": half the doubt wait.
        let half = (ms(300), HoldReason::Doubt);
        assert_eq!(end(&mut h, t0, 16000, 1500, Some(0.7)), half);
        h.reply_heard();
        assert_eq!(
            end(&mut h, t0, 23000, 1500, Some(0.5)),
            (ms(600), HoldReason::Doubt)
        );
        h.reply_heard();
        // Timed out: the caller was quiet for seconds already.
        assert_eq!(end(&mut h, t0, 30000, 1500, None), none);
        assert_eq!(h.counts(), (5, 4, 0));
    }

    #[test]
    fn a_caller_who_paused_mid_sentence_is_given_that_pause_next_time() {
        let t0 = Instant::now();
        let mut h = HoldBack::new(HoldBackConfig::default());
        let none = (Duration::ZERO, HoldReason::None);
        // Turn 1 ends at 2 s in a pause (rate 0.5 / 2 = 0.25: not held), the caller resumes
        // 900 ms after their speech…
        assert_eq!(end(&mut h, t0, 2000, 1200, Some(0.98)), none);
        h.resumed(ms(900));
        // …and ends for real: a turn that resumed once is not held for habit.
        assert_eq!(end(&mut h, t0, 4000, 2000, Some(0.98)), none);
        h.reply_heard();
        // Turn 2: rate (1 + 0.5) / (1 + 2) = 0.5: held to 900 × 1.5 + 128 ms after the
        // speech, 1478 ms, i.e. 1278 ms after the verdict.
        let habit = (ms(1278), HoldReason::Habit);
        assert_eq!(end(&mut h, t0, 12000, 1500, Some(0.98)), habit);
        h.reply_heard();
        // A short answer is not held, and a resumption after it is learned but not counted.
        assert_eq!(end(&mut h, t0, 20000, 500, Some(0.98)), none);
        h.resumed(ms(3000));
        h.reply_heard();
        // Rate 1.5 / 4: held, but never past max_hold from the verdict.
        let capped = (ms(1800), HoldReason::Habit);
        assert_eq!(end(&mut h, t0, 30000, 1500, Some(0.98)), capped);
        assert_eq!(h.counts(), (5, 3, 1));
    }

    #[test]
    fn a_turn_with_a_pause_of_its_own_is_not_held_for_habit() {
        let t0 = Instant::now();
        let mut h = HoldBack::new(HoldBackConfig::default());
        paused_once(&mut h, t0, 900);
        // The caller stops 600 ms inside the next turn without an end (Smart Turn said
        // incomplete), then ends: they made their pause.
        h.speech_started(t0 + ms(10_000));
        h.speech_stopped(t0 + ms(11_000));
        h.speech_started(t0 + ms(11_600));
        h.speech_stopped(t0 + ms(13_000));
        let hold = h.turn_ended(Some(0.98), None, t0 + ms(13_200));
        assert_eq!(
            (hold.release_at, hold.reason),
            (t0 + ms(13_200), HoldReason::None)
        );
        assert!(!hold.pausable);
        // A dip shorter than INNER_PAUSE is not a pause: the next such turn is held.
        h.reply_heard();
        h.speech_started(t0 + ms(20_000));
        h.speech_stopped(t0 + ms(21_000));
        h.speech_started(t0 + ms(21_200));
        h.speech_stopped(t0 + ms(22_000));
        let hold = h.turn_ended(Some(0.98), None, t0 + ms(22_200));
        assert_eq!(hold.reason, HoldReason::Habit);
        assert_eq!(h.counts(), (4, 2, 1));
    }

    #[test]
    fn a_caller_who_never_resumes_loses_the_habit_wait() {
        let t0 = Instant::now();
        let mut h = HoldBack::new(HoldBackConfig::default());
        paused_once(&mut h, t0, 800);
        let mut at = 10_000;
        let mut held = 0;
        for _ in 0..6 {
            let (wait, _) = end(&mut h, t0, at, 1500, Some(0.98));
            held += usize::from(wait > Duration::ZERO);
            h.reply_heard();
            at += 7000;
        }
        // Rates before each: 1.5/3, 1.5/4, 1.5/5, 1.5/6 …: held while ≥ 0.3 (the first three).
        assert_eq!(held, 3);
    }

    /// As [`end`], with the bot's words for the turn arriving before the verdict.
    fn end_with_words(
        h: &mut HoldBack,
        t0: Instant,
        at: u64,
        speech: u64,
        cue: WordsCue,
    ) -> (Duration, HoldReason) {
        h.speech_started(t0 + ms(at - speech));
        h.speech_stopped(t0 + ms(at));
        h.words(cue);
        let now = t0 + ms(at + 200);
        let hold = h.turn_ended(Some(0.98), None, now);
        assert_eq!(hold.words, Some(cue));
        (hold.wait(now), hold.reason)
    }

    #[test]
    fn words_that_cannot_end_a_sentence_hold_a_new_callers_first_pause() {
        let t0 = Instant::now();
        let mut h = HoldBack::new(HoldBackConfig::default());
        // Nothing learned yet: WORDS_HOLD from the speech's end, 1500 ms after the verdict.
        let words = (ms(1500), HoldReason::Words);
        assert_eq!(
            end_with_words(&mut h, t0, 2000, 1200, WordsCue::Incomplete),
            words
        );
        h.resumed(ms(1000));
        // The caller goes on, and their words end the sentence.
        let none = (Duration::ZERO, HoldReason::None);
        assert_eq!(
            end_with_words(&mut h, t0, 5000, 3000, WordsCue::Complete),
            none
        );
        h.reply_heard();
        // Learned pause 1000 ms: the habit wait (1000 × 1.5 + 128 = 1628 ms from the speech)
        // is below WORDS_HOLD, which applies; words that say nothing leave the habit wait.
        assert_eq!(
            end_with_words(&mut h, t0, 12_000, 1500, WordsCue::Incomplete),
            words
        );
        h.reply_heard();
        assert_eq!(
            end_with_words(&mut h, t0, 20_000, 1500, WordsCue::Unknown),
            (ms(1428), HoldReason::Habit)
        );
        h.reply_heard();
        // A habitual pauser whose words end a sentence is answered at once; so is a short
        // answer, and a timed-out end is never held.
        assert_eq!(
            end_with_words(&mut h, t0, 30_000, 1500, WordsCue::Complete),
            none
        );
        h.reply_heard();
        assert_eq!(
            end_with_words(&mut h, t0, 40_000, 400, WordsCue::Complete),
            none
        );
        h.reply_heard();
        h.speech_started(t0 + ms(49_000));
        h.speech_stopped(t0 + ms(50_000));
        h.words(WordsCue::Incomplete);
        assert_eq!(
            h.turn_ended(None, None, t0 + ms(53_000)).reason,
            HoldReason::None
        );
        assert_eq!(h.counts(), (7, 4, 1));
    }

    #[test]
    fn words_after_the_verdict_move_the_release() {
        let t0 = Instant::now();
        let mut h = HoldBack::new(HoldBackConfig::default());
        h.speech_started(t0);
        h.speech_stopped(t0 + ms(1500));
        let ended = t0 + ms(1700);
        let hold = h.turn_ended(Some(0.98), None, ended);
        assert_eq!(hold.release_at, ended);
        assert_eq!(h.rewait(hold.speech_end_at, ended, ended, ended), None);
        // "… to" 300 ms after the verdict: held WORDS_HOLD from the speech's end.
        h.words(WordsCue::Incomplete);
        let now = ended + ms(300);
        let (release, reason) = h
            .rewait(hold.speech_end_at, ended, ended, now)
            .expect("held for words");
        assert_eq!((release, reason), (t0 + ms(3200), HoldReason::Words));
        // Again: nothing moves.
        assert_eq!(h.rewait(hold.speech_end_at, ended, release, now), None);
        // "… to Friday." during the hold: released at once.
        h.words(WordsCue::Complete);
        let later = now + ms(400);
        assert_eq!(
            h.rewait(hold.speech_end_at, ended, release, later),
            Some((later, HoldReason::None))
        );
        // A later incomplete cue is capped at max_hold from the verdict.
        let mut short_cap = HoldBack::new(HoldBackConfig {
            max_hold: ms(1000),
            ..HoldBackConfig::default()
        });
        short_cap.speech_started(t0);
        short_cap.speech_stopped(t0 + ms(1500));
        short_cap.turn_ended(Some(0.98), None, ended);
        short_cap.words(WordsCue::Incomplete);
        assert_eq!(
            short_cap.rewait(t0 + ms(1500), ended, ended, now),
            Some((ended + ms(1000), HoldReason::Words))
        );
        // Between turns (the reply heard), a late transcript is not this caller's next turn.
        h.reply_heard();
        h.words(WordsCue::Incomplete);
        h.speech_started(t0 + ms(9000));
        h.speech_stopped(t0 + ms(10_500));
        let hold = h.turn_ended(Some(0.98), None, t0 + ms(10_700));
        assert_eq!((hold.reason, hold.words), (HoldReason::None, None));
    }

    #[test]
    fn a_voice_that_fell_to_a_statements_end_lifts_the_habit_wait() {
        let t0 = Instant::now();
        let mut h = HoldBack::new(HoldBackConfig::default());
        paused_once(&mut h, t0, 900);
        // A habitual pauser (rate 0.5). A level voice: held as before.
        let at_level = |h: &mut HoldBack, at: u64, level: Option<f32>| {
            h.speech_started(t0 + ms(at - 1500));
            h.speech_stopped(t0 + ms(at));
            let now = t0 + ms(at + 200);
            let hold = h.turn_ended(Some(0.98), level, now);
            h.reply_heard();
            (hold.wait(now), hold.reason, hold.lifted == Some("fall"))
        };
        assert_eq!(
            at_level(&mut h, 12_000, Some(-0.9)),
            (ms(1278), HoldReason::Habit, false)
        );
        // Not measured: held.
        assert_eq!(at_level(&mut h, 20_000, None).1, HoldReason::Habit);
        // Fell 2.5 semitones or more: answered at once (rate 1.5 / 5, still a habit).
        assert_eq!(
            at_level(&mut h, 28_000, Some(-2.5)),
            (Duration::ZERO, HoldReason::None, true)
        );
        // Words that cannot end a sentence outrank the fall.
        h.speech_started(t0 + ms(42_500));
        h.speech_stopped(t0 + ms(44_000));
        h.words(WordsCue::Incomplete);
        let hold = h.turn_ended(Some(0.98), Some(-4.0), t0 + ms(44_200));
        assert_eq!((hold.reason, hold.lifted), (HoldReason::Words, None));
        // Off: the fall is not used.
        let mut off = HoldBack::new(HoldBackConfig {
            final_fall: None,
            ..HoldBackConfig::default()
        });
        paused_once(&mut off, t0, 900);
        assert_eq!(at_level(&mut off, 12_000, Some(-4.0)).1, HoldReason::Habit);
    }

    #[test]
    fn off_holds_nothing() {
        let t0 = Instant::now();
        let mut h = HoldBack::new(HoldBackConfig {
            enabled: false,
            ..HoldBackConfig::default()
        });
        end(&mut h, t0, 2000, 1200, Some(0.98));
        h.resumed(ms(900));
        h.reply_heard();
        let none = (Duration::ZERO, HoldReason::None);
        assert_eq!(end(&mut h, t0, 12000, 1500, Some(0.55)), none);
        h.reply_heard();
        assert_eq!(
            end_with_words(&mut h, t0, 20_000, 1500, WordsCue::Incomplete),
            none
        );
        assert_eq!(
            h.rewait(
                t0 + ms(20_000),
                t0 + ms(20_200),
                t0 + ms(20_200),
                t0 + ms(20_300)
            ),
            None
        );
    }
}
