//! RTP port allocation: even ports for RTP, the odd port above for RTCP (RFC 3550 §11), handed
//! out at random among the older half of the free ports: a stranger cannot predict the next
//! call's port, and a just-freed port (at the back of the queue) is not reused at once (late
//! packets of the old call would land in the new one).

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

    /// Take a free RTP port, or `None` when all are in use.
    pub fn allocate(&mut self) -> Option<u16> {
        let older_half = self.free.len().div_ceil(2);
        if older_half == 0 {
            return None;
        }
        self.free.remove(rand::random_range(0..older_half))
    }

    /// Give a port back; it goes to the end of the queue.
    pub fn release(&mut self, port: u16) {
        if port.is_multiple_of(2) && !self.free.contains(&port) && self.free.len() < self.capacity {
            self.free.push_back(port);
        }
    }

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
    fn even_pairs_and_exhaustion() {
        let mut p = PortPool::new(PortRange {
            first: 20001,
            last: 20006,
        });
        // 20002/20003 and 20004/20005 fit; 20006 has no odd partner in range.
        assert_eq!(p.capacity(), 2);
        let mut got = [p.allocate().unwrap(), p.allocate().unwrap()];
        got.sort();
        assert_eq!(got, [20002, 20004]);
        assert_eq!(p.allocate(), None);
        p.release(20002);
        p.release(20002); // double release ignored
        p.release(20003); // odd port ignored
        assert_eq!(p.available(), 1);
        assert_eq!(p.allocate(), Some(20002));
    }

    #[test]
    fn ports_are_unpredictable_and_a_freed_port_waits() {
        let range = PortRange {
            first: 20000,
            last: 21999,
        };
        // Two pools handing out the same range disagree on their first ten ports.
        let mut a = PortPool::new(range);
        let mut b = PortPool::new(range);
        let first_a: Vec<u16> = (0..10).filter_map(|_| a.allocate()).collect();
        let first_b: Vec<u16> = (0..10).filter_map(|_| b.allocate()).collect();
        assert_ne!(first_a, first_b);
        // Not handed out in order either.
        assert!(first_a.windows(2).any(|w| w[1] != w[0] + 2));
        // A port just given back is not taken by the next allocation.
        let mut p = PortPool::new(range);
        let port = p.allocate().unwrap();
        p.release(port);
        for _ in 0..100 {
            let next = p.allocate().unwrap();
            assert_ne!(next, port);
            p.release(next);
        }
    }
}
