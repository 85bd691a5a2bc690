//! RFC 3611 burst/gap metrics: the Appendix A.2 counter algorithm with a configurable Gmin.
//!
//! Written by hand because no maintained crate implements the A.2 receiver side; the algorithm is
//! a dozen lines and is checked here against hand-computed sequences.

use ontime_rtp::FRAME_MS;

/// The RFC 3611 §4.7.2 default and recommended Gmin: a gap needs 16 consecutive received packets.
pub const GMIN_DEFAULT: u32 = 16;

/// RFC 3611 §4.7 fixed point: `count × 256 / total`, capped at 255 (0 when `total` is 0).
pub fn rfc3611_fraction(count: u64, total: u64) -> u8 {
    if total == 0 {
        return 0;
    }
    let scaled = u128::from(count) * 256 / u128::from(total);
    scaled.min(255) as u8
}

/// Per-packet transition counters of RFC 3611 Appendix A.2.
///
/// Feed it every expected packet in sequence order: [`BurstGapCounter::record`] with `true` when
/// the packet was received and played, `false` when it was lost or discarded (the RFC treats both
/// alike). Duplicates are not fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BurstGapCounter {
    gmin: u32,
    /// Received packets since the last loss/discard (`pkt` in A.2).
    pkt: u64,
    /// Losses in the current burst (`lost` in A.2).
    lost: u64,
    c11: u64,
    c13: u64,
    c14: u64,
    c22: u64,
    c23: u64,
    c33: u64,
    received: u64,
    loss_events: u64,
}

impl Default for BurstGapCounter {
    fn default() -> Self {
        Self::new(GMIN_DEFAULT)
    }
}

impl BurstGapCounter {
    /// A counter with the given Gmin (RFC 3611 says 16; 0 is taken as 16, as in RFC 3611 §4.7.2's
    /// "value of zero ... the default").
    pub fn new(gmin: u32) -> Self {
        Self {
            gmin: if gmin == 0 { GMIN_DEFAULT } else { gmin },
            pkt: 0,
            lost: 0,
            c11: 0,
            c13: 0,
            c14: 0,
            c22: 0,
            c23: 0,
            c33: 0,
            received: 0,
            loss_events: 0,
        }
    }

    /// Gmin in use.
    pub fn gmin(&self) -> u32 {
        self.gmin
    }

    /// Records the next packet in sequence order: `true` received and played, `false` lost or
    /// discarded. This is RFC 3611 Appendix A.2's per-packet step verbatim in meaning.
    pub fn record(&mut self, received: bool) {
        if received {
            self.received += 1;
            self.pkt += 1;
            return;
        }
        self.loss_events += 1;
        if self.pkt >= u64::from(self.gmin) {
            // The gap ended with >= Gmin received packets: an isolated loss stays in the gap
            // (c14), otherwise a burst starts (c13).
            if self.lost == 1 {
                self.c14 += 1;
            } else {
                self.c13 += 1;
            }
            self.lost = 1;
            self.c11 += self.pkt;
        } else {
            self.lost += 1;
            if self.pkt == 0 {
                self.c33 += 1;
            } else {
                self.c23 += 1;
                self.c22 += self.pkt - 1;
            }
        }
        self.pkt = 0;
    }

    /// Records `n` consecutive lost packets (equivalent to `n` calls of `record(false)`, in O(1)
    /// so that a trace with a huge sequence gap cannot stall a replay).
    pub fn record_losses(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        self.record(false);
        // After the first loss `pkt` is 0, so A.2 takes the `c33` branch for the rest.
        let rest = n - 1;
        self.loss_events += rest;
        self.lost += rest;
        self.c33 += rest;
    }

    /// Packets recorded as received.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Packets recorded as lost or discarded.
    pub fn loss_events(&self) -> u64 {
        self.loss_events
    }

    /// The metrics of RFC 3611 Appendix A.2's "compute" step, for packets of `frame_ms`
    /// milliseconds each.
    ///
    /// Edge cases the RFC leaves to division by zero: with no loss at all every density is 0, the
    /// burst duration 0 and the gap duration the whole stream; with losses but no burst-to-gap
    /// transition yet (`c13 = 0`) one transition is assumed, as pjmedia's `rtcp_xr.c` does.
    pub fn metrics_for_frame_ms(&self, frame_ms: u32) -> BurstGapMetrics {
        let m = f64::from(frame_ms);
        if self.loss_events == 0 {
            let gap_ms = self.received as f64 * m;
            return BurstGapMetrics {
                burst_density: 0.0,
                gap_density: 0.0,
                burst_duration_ms: 0.0,
                gap_duration_ms: gap_ms,
            };
        }
        let (c11, c14, c22, c23, c33) = (
            self.c11 as f64,
            self.c14 as f64,
            self.c22 as f64,
            self.c23 as f64,
            self.c33 as f64,
        );
        let mut c13 = self.c13 as f64;
        let c31 = c13;
        let c32 = c23;
        let mut ctotal = c11 + c14 + c13 + c22 + c23 + c31 + c32 + c33;
        let p32 = if c31 + c32 + c33 > 0.0 {
            c32 / (c31 + c32 + c33)
        } else {
            0.0
        };
        let p23 = if c22 + c23 < 1.0 {
            1.0
        } else {
            1.0 - c22 / (c22 + c23)
        };
        let burst_density = if p23 + p32 > 0.0 {
            p23 / (p23 + p32)
        } else {
            0.0
        };
        let gap_density = if c11 + c14 > 0.0 {
            c14 / (c11 + c14)
        } else {
            0.0
        };
        if c13 == 0.0 {
            c13 = 1.0;
            ctotal += 1.0;
        }
        let gap_duration_ms = (c11 + c14 + c13) * m / c13;
        let burst_duration_ms = (ctotal * m / c13 - gap_duration_ms).max(0.0);
        BurstGapMetrics {
            burst_density,
            gap_density,
            burst_duration_ms,
            gap_duration_ms,
        }
    }

    /// [`Self::metrics_for_frame_ms`] for ontime's 20 ms frames.
    pub fn metrics(&self) -> BurstGapMetrics {
        self.metrics_for_frame_ms(FRAME_MS)
    }
}

/// RFC 3611 §4.7.2 burst/gap metrics as raw values; the `*_rfc3611` methods give the wire forms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstGapMetrics {
    /// Fraction of packets lost or discarded within bursts (0..=1).
    pub burst_density: f64,
    /// Fraction of packets lost or discarded within gaps (0..=1).
    pub gap_density: f64,
    /// Mean burst duration in milliseconds.
    pub burst_duration_ms: f64,
    /// Mean gap duration in milliseconds.
    pub gap_duration_ms: f64,
}

impl BurstGapMetrics {
    /// Burst density ×256, capped at 255 (RFC 3611 §4.7.2).
    pub fn burst_density_rfc3611(&self) -> u8 {
        density_rfc3611(self.burst_density)
    }
    /// Gap density ×256, capped at 255 (RFC 3611 §4.7.2).
    pub fn gap_density_rfc3611(&self) -> u8 {
        density_rfc3611(self.gap_density)
    }
    /// Burst duration in whole ms, capped at the 16-bit field (RFC 3611 §4.7.2).
    pub fn burst_duration_ms_rfc3611(&self) -> u16 {
        self.burst_duration_ms.round().min(f64::from(u16::MAX)) as u16
    }
    /// Gap duration in whole ms, capped at the 16-bit field (RFC 3611 §4.7.2).
    pub fn gap_duration_ms_rfc3611(&self) -> u16 {
        self.gap_duration_ms.round().min(f64::from(u16::MAX)) as u16
    }
}

fn density_rfc3611(fraction: f64) -> u8 {
    (fraction * 256.0).floor().clamp(0.0, 255.0) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(pattern: &str) -> BurstGapCounter {
        let mut c = BurstGapCounter::default();
        for ch in pattern.chars() {
            c.record(ch == '.');
        }
        c
    }

    #[test]
    fn no_loss_is_one_gap() {
        let m = feed(&".".repeat(50)).metrics();
        assert_eq!((m.burst_density, m.gap_density), (0.0, 0.0));
        assert_eq!((m.burst_duration_ms, m.gap_duration_ms), (0.0, 1000.0));
    }

    #[test]
    fn isolated_losses_stay_in_gaps() {
        // 20 received, X, 20 received, X, 20 received, X: first loss opens a "burst" of one
        // (lost was 0 -> c13), later isolated ones after >= 16 received are gap losses (c14).
        let pattern = format!("{}X{}X{}X", ".".repeat(20), ".".repeat(20), ".".repeat(20));
        let c = feed(&pattern);
        assert_eq!(
            (c.c11, c.c13, c.c14, c.c22, c.c23, c.c33),
            (60, 1, 2, 0, 0, 0)
        );
        let m = c.metrics();
        // p32 = 0/(1+0+0) = 0; p23 = 1 (c22+c23 < 1): burst density = 1.
        assert_eq!(m.burst_density, 1.0);
        assert!((m.gap_density - 2.0 / 62.0).abs() < 1e-12);
        // gap = (60+2+1)*20/1 = 1260 ms; ctotal = 60+2+1+0+0+1+0+0 = 64 -> burst = 1280-1260.
        assert_eq!(m.gap_duration_ms, 1260.0);
        assert_eq!(m.burst_duration_ms, 20.0);
    }

    #[test]
    fn burst_of_three_after_gap() {
        // 20 received, XXX, 20 received, X
        let pattern = format!("{}XXX{}X", ".".repeat(20), ".".repeat(20));
        let c = feed(&pattern);
        // X1: pkt 20 >= 16, lost 0 -> c13=1, lost=1, c11=20. X2: pkt 0 -> lost 2, c33=1.
        // X3: c33=2, lost 3. X4: pkt 20 >= 16, lost 3 != 1 -> c13=2, c11=40.
        assert_eq!(
            (c.c11, c.c13, c.c14, c.c22, c.c23, c.c33),
            (40, 2, 0, 0, 0, 2)
        );
        let m = c.metrics();
        // p32 = 0 / (2+0+2) = 0, p23 = 1 -> burst density 1; gap density 0/40 = 0.
        assert_eq!((m.burst_density, m.gap_density), (1.0, 0.0));
        // gap = (40+0+2)*20/2 = 420; ctotal = 40+0+2+0+0+2+0+2 = 46 -> 46*20/2 - 420 = 40.
        assert_eq!((m.gap_duration_ms, m.burst_duration_ms), (420.0, 40.0));
    }

    #[test]
    fn fixed_point_caps() {
        assert_eq!(rfc3611_fraction(0, 0), 0);
        assert_eq!(rfc3611_fraction(1, 1), 255);
        assert_eq!(rfc3611_fraction(1, 256), 1);
        assert_eq!(rfc3611_fraction(176, 3000), 15);
    }
}
