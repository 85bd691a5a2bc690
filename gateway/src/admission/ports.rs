//! RTP port allocation: even ports for RTP, the odd port above for RTCP (RFC 3550 §11), handed
//! out round-robin so a just-freed port is not reused at once (late packets of the old call would
//! land in the new one).

use std::collections::VecDeque;

use crate::config::PortRange;

/// The free even ports of the configured range.
#[derive(Debug)]
pub struct PortPool {
    free: VecDeque<u16>,
    capacity: usize,
}

impl PortPool {
    /// A pool over every even port `p` of `range` with `p + 1` also in range.
    pub fn new(range: PortRange) -> PortPool {
        let first = range.first + range.first % 2;
        let free: VecDeque<u16> = (first..range.last)
            .step_by(2)
            .filter(|p| p.checked_add(1).is_some_and(|q| q <= range.last))
            .collect();
        let capacity = free.len();
        PortPool { free, capacity }
    }

    /// Take the next free RTP port, or `None` when all are in use.
    pub fn allocate(&mut self) -> Option<u16> {
        self.free.pop_front()
    }

    /// Give a port back; it goes to the end of the queue.
    pub fn release(&mut self, port: u16) {
        if port.is_multiple_of(2) && !self.free.contains(&port) && self.free.len() < self.capacity {
            self.free.push_back(port);
        }
    }

    #[cfg(test)]
    /// Ports free now.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    #[cfg(test)]
    /// RTP ports in the range.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_pairs_round_robin_and_exhaustion() {
        let mut p = PortPool::new(PortRange {
            first: 20001,
            last: 20006,
        });
        // 20002/20003 and 20004/20005 fit; 20006 has no odd partner in range.
        assert_eq!(p.capacity(), 2);
        assert_eq!(p.allocate(), Some(20002));
        assert_eq!(p.allocate(), Some(20004));
        assert_eq!(p.allocate(), None);
        p.release(20002);
        p.release(20002); // double release ignored
        p.release(20003); // odd port ignored
        assert_eq!(p.available(), 1);
        assert_eq!(p.allocate(), Some(20002));
    }
}
