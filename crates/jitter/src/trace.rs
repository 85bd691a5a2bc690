//! Trace files for the replay: CSV of `seq,lateness_ms` (sender lateness) or `seq,arrival_ms`.
//!
//! An optional header line (anything whose first field is not a number) may come first; blank
//! lines and lines starting with `#` are skipped. Sequence numbers that all fit 16 bits are
//! unwrapped in file order (RFC 3550 A.1 style, so 65535 → 0 counts on); larger ones are taken as
//! already extended. Times are milliseconds, non-negative and finite.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::replay::arrivals_from_lateness;
use crate::seq::extend_sequence_numbers;

/// What the second column of a trace means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// `seq,lateness_ms`: the packet left at `seq·20 ms + lateness` (perfect network).
    Lateness,
    /// `seq,arrival_ms`: the packet arrived at this time.
    Arrivals,
}

/// Parses a trace into `(sequence index, arrival)` pairs, in file order.
pub fn parse_trace(text: &str, kind: TraceKind) -> Result<Vec<(u64, Duration)>> {
    let mut raw: Vec<(usize, u64, Duration)> = Vec::new();
    let mut header_allowed = true;
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |reason: String| Error::Trace {
            line: line_no,
            reason,
        };
        let mut fields = line.split(',').map(str::trim);
        let seq_field = fields.next().unwrap_or("");
        let Ok(seq) = seq_field.parse::<u64>() else {
            if header_allowed && seq_field.parse::<f64>().is_err() {
                header_allowed = false;
                continue;
            }
            return Err(err(format!(
                "sequence number {seq_field:?} is not a non-negative integer"
            )));
        };
        header_allowed = false;
        let Some(ms_field) = fields.next() else {
            return Err(err("expected two fields `seq,ms`, found one".into()));
        };
        if fields.next().is_some() {
            return Err(err(format!(
                "expected two fields `seq,ms`, found {}",
                line.split(',').count()
            )));
        }
        let ms: f64 = ms_field
            .parse()
            .map_err(|_| err(format!("time {ms_field:?} is not a number of milliseconds")))?;
        if !ms.is_finite() || ms < 0.0 {
            return Err(err(format!(
                "time {ms_field} ms must be finite and not negative"
            )));
        }
        if ms > 1e12 {
            return Err(err(format!("time {ms_field} ms is implausibly large")));
        }
        raw.push((line_no, seq, Duration::from_secs_f64(ms / 1000.0)));
    }
    let seqs: Vec<u64> = if raw.iter().all(|r| r.1 <= u64::from(u16::MAX)) {
        let short: Vec<u16> = raw.iter().map(|r| r.1 as u16).collect();
        extend_sequence_numbers(&short)
    } else {
        raw.iter().map(|r| r.1).collect()
    };
    if let Some(&(line, seq, _)) = raw.iter().find(|r| r.1 > 1 << 40) {
        return Err(Error::Trace {
            line,
            reason: format!("sequence number {seq} is implausibly large (over 2^40)"),
        });
    }
    let pairs: Vec<(u64, Duration)> = seqs.into_iter().zip(raw.iter().map(|r| r.2)).collect();
    Ok(match kind {
        TraceKind::Arrivals => pairs,
        TraceKind::Lateness => arrivals_from_lateness(&pairs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_comments_and_blank_lines() {
        let t = "seq,lateness_ms\n# note\n\n0,0.5\n1, 30\n";
        let a = parse_trace(t, TraceKind::Lateness).unwrap();
        assert_eq!(
            a,
            vec![
                (0, Duration::from_micros(500)),
                (1, Duration::from_millis(50))
            ]
        );
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_trace("seq,ms\n0,1\n1,x\n", TraceKind::Arrivals).unwrap_err();
        assert_eq!(
            e.to_string(),
            "trace line 3: time \"x\" is not a number of milliseconds"
        );
        let e = parse_trace("0,1\nfoo,2\n", TraceKind::Arrivals).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("trace line 2: sequence number \"foo\""));
        let e = parse_trace("0,-1\n", TraceKind::Arrivals).unwrap_err();
        assert!(e.to_string().starts_with("trace line 1: time -1 ms"));
        let e = parse_trace("0,1,2\n", TraceKind::Arrivals).unwrap_err();
        assert!(e.to_string().contains("found 3"), "{e}");
        let e = parse_trace("0\n", TraceKind::Arrivals).unwrap_err();
        assert!(e.to_string().contains("found one"), "{e}");
    }

    #[test]
    fn wrapping_sequence_numbers_count_on() {
        let a = parse_trace("65535,0\n0,0\n", TraceKind::Lateness).unwrap();
        assert_eq!(a[1].0, a[0].0 + 1);
        assert_eq!(a[1].1 - a[0].1, ontime_rtp::FRAME);
    }
}
