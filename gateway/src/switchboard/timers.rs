//! The switchboard's own deadlines, one small table (the SIP endpoint keeps its transaction
//! timers itself). A timer of a call that has gone meanwhile fires into nothing: the handlers
//! look the call up and find it absent, so nothing needs cancelling.

use std::collections::BTreeSet;
use std::time::Instant;

use ontime_sip::CallHandle;

/// What a deadline is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    /// An inbound call's ring time (`answer_delay`) is over.
    RingOver(CallHandle),
    /// An outbound call rang for its `Timeout` without an answer: CANCEL it.
    RingTimeout(CallHandle),
    /// The drain's grace period is over: hang up whoever is left.
    DrainDeadline,
}

/// Deadlines, earliest first.
#[derive(Debug, Default)]
pub(super) struct Timers {
    due: BTreeSet<(Instant, Timer)>,
}

impl Timers {
    /// Fire `timer` at `at`.
    pub(super) fn set(&mut self, at: Instant, timer: Timer) {
        self.due.insert((at, timer));
    }

    /// The earliest deadline.
    pub(super) fn next(&self) -> Option<Instant> {
        self.due.first().map(|(at, _)| *at)
    }

    /// The earliest timer due at `now`, taken out of the table.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        if self.next()? > now {
            return None;
        }
        self.due.pop_first().map(|(_, timer)| timer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timers_fire_in_deadline_order_and_only_when_due() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        t.set(t0 + Duration::from_secs(2), Timer::DrainDeadline);
        t.set(t0 + Duration::from_secs(1), Timer::RingOver(CallHandle(7)));
        t.set(
            t0 + Duration::from_secs(1),
            Timer::RingTimeout(CallHandle(3)),
        );
        assert_eq!(t.next(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(t.pop_due(t0), None);
        let at_1s = t0 + Duration::from_secs(1);
        assert_eq!(t.pop_due(at_1s), Some(Timer::RingOver(CallHandle(7))));
        assert_eq!(t.pop_due(at_1s), Some(Timer::RingTimeout(CallHandle(3))));
        assert_eq!(t.pop_due(at_1s), None);
        assert_eq!(
            t.pop_due(t0 + Duration::from_secs(5)),
            Some(Timer::DrainDeadline)
        );
        assert_eq!(t.next(), None);
    }
}
