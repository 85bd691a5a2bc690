//! Just enough of the Prometheus text format to read the gateway's counters and histograms
//! (the `ontime_*` series every part registers at zero on start-up) at the start and end of a
//! measuring window.

use std::collections::BTreeMap;

/// One scrape: series (name plus labels, as rendered) to value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    samples: Vec<Sample>,
}

#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut rest = text;
    while !rest.trim().is_empty() {
        let (key, after) = rest.split_once('=')?;
        let after = after.strip_prefix('"')?;
        // Values escape `"` as `\"`; find the closing quote that is not escaped.
        let mut end = None;
        let mut escaped = false;
        for (i, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let end = end?;
        labels.push((
            key.trim().trim_start_matches(',').trim().to_owned(),
            after[..end].replace("\\\"", "\"").replace("\\\\", "\\"),
        ));
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(labels)
}

impl Scrape {
    /// Parse an exposition; lines that are not samples (comments, junk) are skipped.
    pub fn parse(text: &str) -> Scrape {
        let samples = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|line| {
                let (series, value) = match line.rfind('}') {
                    Some(close) => (&line[..=close], line[close + 1..].trim()),
                    None => line.split_once(char::is_whitespace)?,
                };
                // An optional timestamp may follow the value.
                let value: f64 = value.split_whitespace().next()?.parse().ok()?;
                let (name, labels) = match series.split_once('{') {
                    Some((name, labels)) => (name, parse_labels(labels.strip_suffix('}')?)?),
                    None => (series, Vec::new()),
                };
                Some(Sample {
                    name: name.trim().to_owned(),
                    labels,
                    value,
                })
            })
            .collect();
        Scrape { samples }
    }

    /// Sum of every series named `name` whose labels include all of `filter`; `None` when there
    /// is none.
    pub fn sum(&self, name: &str, filter: &[(&str, &str)]) -> Option<f64> {
        let mut found = false;
        let total = self
            .samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                filter
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .inspect(|_| found = true)
            .map(|s| s.value)
            .sum();
        found.then_some(total)
    }

    /// Cumulative buckets (`le` → count) of histogram `name`, summed over its other labels.
    pub fn histogram(&self, name: &str) -> BTreeMap<OrderedLe, f64> {
        let bucket = format!("{name}_bucket");
        let mut out = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.name == bucket) {
            let Some((_, le)) = s.labels.iter().find(|(k, _)| k == "le") else {
                continue;
            };
            let le = match le.as_str() {
                "+Inf" => f64::INFINITY,
                v => match v.parse() {
                    Ok(v) => v,
                    Err(_) => continue,
                },
            };
            *out.entry(OrderedLe(le)).or_insert(0.0) += s.value;
        }
        out
    }
}

/// A bucket bound, ordered (bounds are never NaN in a valid exposition; NaN sorts last).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrderedLe(pub f64);

impl Eq for OrderedLe {}
impl PartialOrd for OrderedLe {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedLe {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// What a histogram recorded between two scrapes: cumulative bucket counts, after minus before.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistogramDelta {
    /// (`le`, cumulative count) in ascending `le`.
    pub buckets: Vec<(f64, f64)>,
}

impl HistogramDelta {
    /// `after − before` of histogram `name`.
    pub fn between(before: &Scrape, after: &Scrape, name: &str) -> HistogramDelta {
        let b = before.histogram(name);
        let buckets = after
            .histogram(name)
            .into_iter()
            .map(|(le, count)| (le.0, count - b.get(&le).copied().unwrap_or(0.0)))
            .collect();
        HistogramDelta { buckets }
    }

    /// Observations in the window.
    pub fn count(&self) -> f64 {
        self.buckets.last().map(|b| b.1).unwrap_or(0.0)
    }

    /// Upper bound of the bucket holding quantile `q` (the `+Inf` bucket reports the largest
    /// finite bound: a lower bound of the truth); `None` without observations.
    pub fn quantile_upper_bound(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total <= 0.0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total).ceil().max(1.0);
        let finite_max = self
            .buckets
            .iter()
            .map(|b| b.0)
            .filter(|le| le.is_finite())
            .fold(0.0, f64::max);
        self.buckets
            .iter()
            .find(|(_, cum)| *cum >= rank)
            .map(|(le, _)| if le.is_finite() { *le } else { finite_max })
    }

    /// Upper bound of the highest bucket that gained an observation (see
    /// [`HistogramDelta::quantile_upper_bound`] for `+Inf`).
    pub fn max_upper_bound(&self) -> Option<f64> {
        self.quantile_upper_bound(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP ontime_sender_late_ticks_total x
# TYPE ontime_sender_late_ticks_total counter
ontime_sender_late_ticks_total 3
ontime_calls_total{result="completed"} 5
ontime_calls_total{result="failed"} 1
ontime_inference_queue_wait_seconds_bucket{model="silero_vad",le="0.001"} 10
ontime_inference_queue_wait_seconds_bucket{model="silero_vad",le="0.01"} 19
ontime_inference_queue_wait_seconds_bucket{model="silero_vad",le="+Inf"} 20
ontime_inference_queue_wait_seconds_bucket{model="smart_turn",le="0.001"} 0
ontime_inference_queue_wait_seconds_bucket{model="smart_turn",le="0.01"} 0
ontime_inference_queue_wait_seconds_bucket{model="smart_turn",le="+Inf"} 0
odd{a="x\"y",b="2"} 7 1700000000
"#;

    #[test]
    fn reads_counters_labels_and_histograms() {
        let s = Scrape::parse(TEXT);
        assert_eq!(s.sum("ontime_sender_late_ticks_total", &[]), Some(3.0));
        assert_eq!(s.sum("ontime_calls_total", &[]), Some(6.0));
        assert_eq!(
            s.sum("ontime_calls_total", &[("result", "failed")]),
            Some(1.0)
        );
        assert_eq!(s.sum("odd", &[("a", "x\"y")]), Some(7.0));
        assert_eq!(s.sum("absent", &[]), None);
        let d = HistogramDelta::between(
            &Scrape::default(),
            &s,
            "ontime_inference_queue_wait_seconds",
        );
        assert_eq!(d.count(), 20.0);
        assert_eq!(d.quantile_upper_bound(0.5), Some(0.001));
        assert_eq!(d.quantile_upper_bound(0.9), Some(0.01));
        assert_eq!(d.max_upper_bound(), Some(0.01));
        assert_eq!(
            HistogramDelta::between(&s, &s, "ontime_inference_queue_wait_seconds")
                .quantile_upper_bound(0.99),
            None
        );
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics(text in "\\PC{0,300}") {
            let s = Scrape::parse(&text);
            let _ = s.sum("a", &[("b", "c")]);
            let _ = HistogramDelta::between(&s, &s, "a").quantile_upper_bound(0.99);
        }
    }
}
