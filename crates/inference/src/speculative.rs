//! Speculative end of turn, sans-IO: one call's speculative Smart Turn verdict, and the order in
//! which Smart Turn jobs run.
//!
//! Today's rule waits for the VAD to confirm a speech stop (6 quiet chunks, 192 ms), then runs
//! Smart Turn (≈ 65 ms) — the two add up on the reply's critical path. The speculative rule starts
//! Smart Turn as soon as the caller goes quiet, on the turn's audio so far, so that the verdict is
//! ready when the stop is confirmed. The verdict is used only if its audio **covers** the confirmed
//! turn's: it starts no later than the confirmed audio and ends inside the confirmed turn's
//! trailing quiet gap, i.e. it holds every voiced sample of the confirmed turn and nothing said
//! after them. Speech resuming before the stop is confirmed discards it.
//!
//! Positions are absolute sample indices of the call's turn audio ([`crate::turn::TurnAudioBuffer`]
//! coordinates); generations tell a verdict that is still wanted from a stale one.

/// A span of turn audio: samples `start..end` (absolute indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AudioSpan {
    /// First sample.
    pub start: u64,
    /// One past the last sample.
    pub end: u64,
}

impl AudioSpan {
    /// Does a verdict on `self` stand for the confirmed turn `confirmed`, whose voiced audio ends
    /// at `voiced_end` (the start of its trailing quiet run)? Yes when `self` starts no later than
    /// `confirmed` and ends inside the quiet gap `voiced_end..=confirmed.end`.
    pub fn covers(&self, confirmed: AudioSpan, voiced_end: u64) -> bool {
        self.start <= confirmed.start && voiced_end <= self.end && self.end <= confirmed.end
    }
}

/// What became of a speculative verdict (the `outcome` label of
/// [`crate::metrics::TURN_SPECULATIVE_TOTAL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It became the turn's verdict.
    Used,
    /// Speech resumed, or it did not cover the confirmed turn: today's rule ran instead.
    Discarded,
    /// Not run (the CPU budget had no room): today's rule ran instead.
    Skipped,
}

impl Outcome {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Used => "used",
            Outcome::Discarded => "discarded",
            Outcome::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Idle,
    /// A job for `span` is queued (or deferred); `confirmed` once the stop was confirmed while it
    /// waited, so its verdict is the turn's verdict when it arrives.
    Queued {
        generation: u64,
        span: AudioSpan,
        confirmed: bool,
    },
    /// The verdict on `span` is in; the stop is not confirmed yet.
    Ready {
        span: AudioSpan,
        probability: f32,
    },
}

/// What to do when the VAD confirms a speech stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OnStop {
    /// The speculative verdict covers the confirmed turn: emit it now.
    Use {
        /// Smart Turn's probability of a complete turn.
        probability: f32,
        /// The audio it judged.
        span: AudioSpan,
    },
    /// The covering speculative job has not run yet: its verdict will be the turn's.
    Await {
        /// The job's generation.
        generation: u64,
    },
    /// No usable speculation: run Smart Turn on the confirmed audio, as today. `cancel` is a
    /// speculative job still queued that must be dropped.
    Run {
        /// A queued job to drop.
        cancel: Option<u64>,
        /// What became of a speculation that existed (`None` when there was none).
        outcome: Option<Outcome>,
    },
}

/// What to do with a speculative job's verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OnVerdict {
    /// No longer wanted (speech resumed, or a newer speculation replaced it).
    Stale,
    /// Kept until the stop is confirmed (or an early end).
    Stored,
    /// The stop was confirmed while the job waited: this is the turn's verdict.
    Final,
}

/// One call's speculation.
#[derive(Debug, Clone)]
pub struct Speculation {
    state: State,
    next_generation: u64,
}

impl Default for Speculation {
    fn default() -> Self {
        Self::new()
    }
}

impl Speculation {
    /// No speculation.
    pub fn new() -> Self {
        Self {
            state: State::Idle,
            next_generation: 1,
        }
    }

    /// True when a speculative job is queued or a verdict is held.
    pub fn is_active(&self) -> bool {
        self.state != State::Idle
    }

    /// The caller went quiet with the turn's audio being `span`: returns the generation of the
    /// job to queue, or `None` when a speculation for this quiet gap already exists.
    pub fn start(&mut self, span: AudioSpan) -> Option<u64> {
        if self.state != State::Idle {
            return None;
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        self.state = State::Queued {
            generation,
            span,
            confirmed: false,
        };
        Some(generation)
    }

    /// The queued job could not run (budget): forget it. Returns whether it was this call's
    /// current job, and whether its stop was already confirmed (then today's rule must run now).
    pub fn skip(&mut self, generation: u64) -> Option<bool> {
        match self.state {
            State::Queued {
                generation: g,
                confirmed,
                ..
            } if g == generation => {
                self.state = State::Idle;
                Some(confirmed)
            }
            _ => None,
        }
    }

    /// Speech resumed before the stop was confirmed: the speculation is discarded. Returns the
    /// queued job to drop, if any, and whether there was a speculation at all.
    pub fn speech_resumed(&mut self) -> (Option<u64>, bool) {
        let out = match self.state {
            State::Idle => (None, false),
            State::Queued { generation, .. } => (Some(generation), true),
            State::Ready { .. } => (None, true),
        };
        self.state = State::Idle;
        out
    }

    /// The verdict of job `generation` arrived.
    pub fn verdict(&mut self, generation: u64, probability: f32) -> OnVerdict {
        match self.state {
            State::Queued {
                generation: g,
                span,
                confirmed,
            } if g == generation => {
                if confirmed {
                    self.state = State::Idle;
                    OnVerdict::Final
                } else {
                    self.state = State::Ready { span, probability };
                    OnVerdict::Stored
                }
            }
            _ => OnVerdict::Stale,
        }
    }

    /// For an early end: takes a held verdict of at least `threshold` that covers the turn so far
    /// (`turn`, voiced up to `voiced_end`); leaves anything else in place.
    pub fn take_confident(
        &mut self,
        threshold: f32,
        turn: AudioSpan,
        voiced_end: u64,
    ) -> Option<(f32, AudioSpan)> {
        match self.state {
            State::Ready { span, probability }
                if probability >= threshold && span.covers(turn, voiced_end) =>
            {
                self.state = State::Idle;
                Some((probability, span))
            }
            _ => None,
        }
    }

    /// The VAD confirmed a stop; the confirmed turn's audio is `confirmed`, voiced up to
    /// `voiced_end`.
    pub fn stop_confirmed(&mut self, confirmed: AudioSpan, voiced_end: u64) -> OnStop {
        let state = std::mem::replace(&mut self.state, State::Idle);
        match state {
            State::Idle => OnStop::Run {
                cancel: None,
                outcome: None,
            },
            State::Ready { span, probability } if span.covers(confirmed, voiced_end) => {
                OnStop::Use { probability, span }
            }
            State::Queued {
                generation, span, ..
            } if span.covers(confirmed, voiced_end) => {
                self.state = State::Queued {
                    generation,
                    span,
                    confirmed: true,
                };
                OnStop::Await { generation }
            }
            State::Ready { .. } => OnStop::Run {
                cancel: None,
                outcome: Some(Outcome::Discarded),
            },
            State::Queued { generation, .. } => OnStop::Run {
                cancel: Some(generation),
                outcome: Some(Outcome::Discarded),
            },
        }
    }

    /// The turn ended or the call's turn audio was reset: forget everything. Returns a queued
    /// job to drop.
    pub fn clear(&mut self) -> Option<u64> {
        let out = match self.state {
            State::Queued { generation, .. } => Some(generation),
            _ => None,
        };
        self.state = State::Idle;
        out
    }
}

/// Smart Turn jobs, run earliest deadline first (ties: first queued first). A confirmed stop's
/// deadline is its detection (the verdict is due now); a speculative job's is when its stop would
/// be confirmed, so it never delays a verdict already due.
#[derive(Debug)]
pub struct DeadlineQueue<T> {
    jobs: Vec<(std::time::Duration, u64, T)>,
    seq: u64,
}

impl<T> Default for DeadlineQueue<T> {
    fn default() -> Self {
        Self {
            jobs: Vec::new(),
            seq: 0,
        }
    }
}

impl<T> DeadlineQueue<T> {
    /// Adds a job due at `deadline`.
    pub fn push(&mut self, deadline: std::time::Duration, job: T) {
        self.jobs.push((deadline, self.seq, job));
        self.seq += 1;
    }

    /// The job with the earliest deadline.
    pub fn peek(&self) -> Option<&T> {
        self.earliest().map(|i| &self.jobs[i].2)
    }

    /// Removes and returns the job with the earliest deadline.
    pub fn pop(&mut self) -> Option<T> {
        self.earliest().map(|i| self.jobs.swap_remove(i).2)
    }

    fn earliest(&self) -> Option<usize> {
        // A handful of jobs at most (one per call ending a turn): a scan beats a heap's upkeep
        // and lets `retain` drop cancelled jobs in place.
        self.jobs
            .iter()
            .enumerate()
            .min_by_key(|(_, (d, s, _))| (*d, *s))
            .map(|(i, _)| i)
    }

    /// Keeps only the jobs `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.jobs.retain(|(_, _, j)| keep(j));
    }

    /// True when no job waits.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Jobs waiting.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    fn span(start: u64, end: u64) -> AudioSpan {
        AudioSpan { start, end }
    }

    #[test]
    fn covers_only_within_the_quiet_gap() {
        // Confirmed turn: samples 1000..5000, voiced up to 3464 (6 quiet chunks of 256 after).
        let confirmed = span(1000, 5000);
        let voiced_end = 5000 - 6 * 256;
        assert!(span(1000, voiced_end).covers(confirmed, voiced_end));
        assert!(span(1000, voiced_end + 256).covers(confirmed, voiced_end));
        assert!(span(1000, 5000).covers(confirmed, voiced_end));
        assert!(span(900, voiced_end + 256).covers(confirmed, voiced_end));
        // Misses the last voiced samples.
        assert!(!span(1000, voiced_end - 1).covers(confirmed, voiced_end));
        // Misses the first.
        assert!(!span(1001, voiced_end + 256).covers(confirmed, voiced_end));
        // Ends past the confirmed audio (judged something else).
        assert!(!span(1000, 5001).covers(confirmed, voiced_end));
    }

    #[test]
    fn ready_covering_verdict_is_used() {
        let mut s = Speculation::new();
        let g = s.start(span(0, 3000)).expect("starts");
        assert_eq!(
            s.start(span(0, 3256)),
            None,
            "one speculation per quiet gap"
        );
        assert_eq!(s.verdict(g, 0.93), OnVerdict::Stored);
        // Not confident enough for an early end, nor covering a turn that went on: kept.
        assert_eq!(s.take_confident(0.95, span(0, 3256), 3000 - 256), None);
        assert_eq!(s.take_confident(0.9, span(0, 3256), 3100), None);
        let got = s.stop_confirmed(span(0, 3000 + 5 * 256), 3000 - 256);
        assert_eq!(
            got,
            OnStop::Use {
                probability: 0.93,
                span: span(0, 3000)
            }
        );
        assert!(!s.is_active());
        // The same verdict taken for an early end, two quiet chunks in.
        let g = s.start(span(0, 3000)).expect("starts");
        s.verdict(g, 0.93);
        assert_eq!(
            s.take_confident(0.9, span(0, 3256), 3000 - 256),
            Some((0.93, span(0, 3000)))
        );
        assert!(!s.is_active());
    }

    #[test]
    fn verdict_not_covering_is_discarded_and_today_rule_runs() {
        let mut s = Speculation::new();
        let g = s.start(span(0, 2000)).expect("starts");
        assert_eq!(s.verdict(g, 0.8), OnVerdict::Stored);
        // The confirmed turn's voice ends after what was judged.
        let got = s.stop_confirmed(span(0, 4000), 2500);
        assert_eq!(
            got,
            OnStop::Run {
                cancel: None,
                outcome: Some(Outcome::Discarded)
            }
        );
        // A turn whose audio starts earlier than the judged audio (pre-speech grew) is not
        // covered either.
        let g = s.start(span(500, 3000)).expect("starts");
        let got = s.stop_confirmed(span(400, 4000), 2900);
        assert_eq!(
            got,
            OnStop::Run {
                cancel: Some(g),
                outcome: Some(Outcome::Discarded)
            }
        );
        assert_eq!(s.verdict(g, 0.9), OnVerdict::Stale, "cancelled job");
    }

    #[test]
    fn speech_resuming_discards_and_a_late_verdict_is_stale() {
        let mut s = Speculation::new();
        let g1 = s.start(span(0, 3000)).expect("starts");
        assert_eq!(s.speech_resumed(), (Some(g1), true));
        assert_eq!(s.verdict(g1, 0.99), OnVerdict::Stale);
        assert_eq!(
            s.take_confident(0.5, span(0, 3256), 3000),
            None,
            "a discarded verdict never ends a turn"
        );
        // The next quiet gap speculates afresh; a ready verdict is discarded too.
        let g2 = s.start(span(0, 6000)).expect("starts");
        assert_ne!(g1, g2);
        assert_eq!(s.verdict(g2, 0.2), OnVerdict::Stored);
        assert_eq!(s.speech_resumed(), (None, true));
        assert_eq!(s.speech_resumed(), (None, false), "nothing left to discard");
        assert_eq!(
            s.stop_confirmed(span(0, 9000), 7500),
            OnStop::Run {
                cancel: None,
                outcome: None
            }
        );
    }

    #[test]
    fn stop_confirmed_before_the_job_ran_awaits_it() {
        let mut s = Speculation::new();
        let g = s.start(span(0, 3000)).expect("starts");
        assert_eq!(
            s.stop_confirmed(span(0, 3000 + 5 * 256), 3000 - 256),
            OnStop::Await { generation: g }
        );
        assert_eq!(s.verdict(g, 0.1), OnVerdict::Final);
        assert!(!s.is_active());
        // Same, but the budget skips the job: today's rule must run.
        let g = s.start(span(0, 3000)).expect("starts");
        s.stop_confirmed(span(0, 3000 + 5 * 256), 3000 - 256);
        assert_eq!(s.skip(g), Some(true));
        assert_eq!(s.skip(g), None);
    }

    #[test]
    fn jobs_run_earliest_deadline_first() {
        let mut q = DeadlineQueue::default();
        q.push(300 * MS, "speculative a");
        q.push(100 * MS, "confirmed b");
        q.push(200 * MS, "confirmed c");
        q.push(100 * MS, "confirmed d");
        assert_eq!(q.len(), 4);
        assert_eq!(q.peek(), Some(&"confirmed b"));
        q.retain(|j| *j != "confirmed c");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, ["confirmed b", "confirmed d", "speculative a"]);
        assert!(q.is_empty());
    }
}
