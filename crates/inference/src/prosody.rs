//! The pitch at the end of a turn against the pitch before it: whether the caller's voice fell
//! to a statement's end or stayed up, as it does in a pause inside a sentence.
//!
//! On the labelled set's held-out split (`scripts/turnset_prosody.py`, which computes the same
//! thing in numpy), the last 100 ms of voice of a complete sentence sit a median 3.9 semitones
//! below the 1.4 s before them, and 38 of 40 at least 2.5 below; a mid-sentence pause 0.9
//! below, and none of 64 pauses 2.5 below. That set is synthetic speech, whose declarative
//! fall is regular; real callers vary more, and a question may end rising. So the gateway uses
//! a fall only as evidence *for* an end (it lifts a hold), never its absence against one.
//!
//! Autocorrelation pitch, by hand: a few dozen lines, where a pitch crate would bring a
//! spectral toolkit for one number per turn. Runs once per complete verdict on the inference
//! thread: about 150 frames × 94 lags × 320 samples (~4.5 M multiply-adds, ~2 ms), with no
//! allocation.

use std::ops::Index;

/// 8 kHz audio (the turn buffer's rate).
const RATE: usize = 8000;
/// Analysis frames: 40 ms windows every 10 ms.
const WIN: usize = 320;
const HOP: usize = 80;
/// Pitch search range, 70–400 Hz, as lags.
const MIN_LAG: usize = RATE / 400;
const MAX_LAG: usize = RATE / 70;
/// Frames quieter than this (dBFS RMS) have no pitch; the last frame louder than
/// [`VOICE_DBFS`] is where the voice ended.
const PITCH_DBFS: f64 = -45.0;
const VOICE_DBFS: f64 = -40.0;
/// A frame is voiced when its normalised autocorrelation peak reaches this.
const VOICED_PEAK: f64 = 0.45;
/// Voice analysed: this many frames up to the last voiced one (1.5 s).
const WINDOW_FRAMES: usize = 150;
/// The end: the last 100 ms of voice; the tail that must hold enough voiced frames: 500 ms.
const END_FRAMES: usize = 10;
const TAIL_FRAMES: usize = 50;
const MIN_TAIL_VOICED: usize = 5;

/// The median pitch of the last 100 ms of voice in `samples[..len]` (8 kHz) minus the median
/// of the voice in the 1.4 s before, in semitones: negative when the voice fell at the end.
/// `None` when there is too little voice to tell.
pub fn final_pitch_level<S>(samples: &S, len: usize) -> Option<f32>
where
    S: Index<usize, Output = i16> + ?Sized,
{
    let frames = (len.checked_sub(WIN)? / HOP) + 1;
    let mut frame = [0.0f64; WIN];
    let last = (0..frames).rev().find(|&i| {
        load(samples, i, &mut frame);
        dbfs(&frame) > VOICE_DBFS
    })?;
    let first = (last + 1).saturating_sub(WINDOW_FRAMES);
    // Semitones re 100 Hz per frame of the window (NaN: unvoiced), on the stack.
    let mut st = [f64::NAN; WINDOW_FRAMES];
    let n = last + 1 - first;
    for (k, i) in (first..=last).enumerate() {
        load(samples, i, &mut frame);
        if let Some(f0) = pitch(&frame) {
            st[k] = 12.0 * (f0 / 100.0).log2();
        }
    }
    let st = &st[..n];
    let tail = &st[n.saturating_sub(TAIL_FRAMES)..];
    if tail.iter().filter(|v| !v.is_nan()).count() < MIN_TAIL_VOICED {
        return None;
    }
    let split = n.saturating_sub(END_FRAMES);
    let end = median(&st[split..])?;
    let before = median(&st[..split])?;
    Some((end - before) as f32)
}

/// Frame `i`, mean removed.
fn load<S>(samples: &S, i: usize, out: &mut [f64; WIN])
where
    S: Index<usize, Output = i16> + ?Sized,
{
    let start = i * HOP;
    for (j, o) in out.iter_mut().enumerate() {
        *o = f64::from(samples[start + j]);
    }
    let mean = out.iter().sum::<f64>() / WIN as f64;
    for o in out.iter_mut() {
        *o -= mean;
    }
}

fn dbfs(frame: &[f64; WIN]) -> f64 {
    let rms = (frame.iter().map(|v| v * v).sum::<f64>() / WIN as f64).sqrt();
    20.0 * (rms / 32768.0 + 1e-12).log10()
}

/// The frame's pitch in Hz, if it is loud enough and voiced.
fn pitch(frame: &[f64; WIN]) -> Option<f64> {
    if dbfs(frame) <= PITCH_DBFS {
        return None;
    }
    let energy: f64 = frame.iter().map(|v| v * v).sum();
    if energy <= 0.0 {
        return None;
    }
    let (mut best_lag, mut best) = (MIN_LAG, f64::NEG_INFINITY);
    for lag in MIN_LAG..MAX_LAG {
        let c: f64 = frame[..WIN - lag]
            .iter()
            .zip(&frame[lag..])
            .map(|(a, b)| a * b)
            .sum();
        if c > best {
            (best_lag, best) = (lag, c);
        }
    }
    (best / energy > VOICED_PEAK).then(|| RATE as f64 / best_lag as f64)
}

/// The median of the values that are not NaN (the mean of the middle two when even), sorted
/// in a copy on the stack.
fn median(values: &[f64]) -> Option<f64> {
    let mut v = [0.0f64; WINDOW_FRAMES];
    let mut n = 0;
    for &x in values.iter().filter(|x| !x.is_nan()) {
        v[n] = x;
        n += 1;
    }
    let v = &mut v[..n];
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A voiced-like tone: a pulse train's first harmonics, pitch following `f0(t)`.
    fn voice(seconds: f64, f0: impl Fn(f64) -> f64) -> Vec<i16> {
        let n = (seconds * RATE as f64) as usize;
        let mut phase = 0.0f64;
        (0..n)
            .map(|i| {
                let t = i as f64 / RATE as f64;
                phase += f0(t) / RATE as f64;
                let p = std::f64::consts::TAU * phase;
                (6000.0 * (p.sin() + 0.5 * (2.0 * p).sin() + 0.3 * (3.0 * p).sin())) as i16
            })
            .collect()
    }

    #[test]
    fn a_fall_at_the_end_is_negative_and_a_level_voice_is_near_zero() {
        // 1.5 s at 180 Hz, then the last 150 ms at 140 Hz (−4.35 semitones), then silence.
        let mut fall = voice(1.65, |t| if t < 1.5 { 180.0 } else { 140.0 });
        fall.extend(std::iter::repeat_n(0, 2400));
        let level = final_pitch_level(fall.as_slice(), fall.len()).unwrap();
        assert!((level + 4.35).abs() < 0.4, "{level}");
        let flat = voice(1.65, |_| 180.0);
        let level = final_pitch_level(flat.as_slice(), flat.len()).unwrap();
        assert!(level.abs() < 0.2, "{level}");
        // Rising (a question's end) is positive.
        let rise = voice(1.65, |t| if t < 1.5 { 160.0 } else { 200.0 });
        assert!(final_pitch_level(rise.as_slice(), rise.len()).unwrap() > 3.0);
    }

    #[test]
    fn too_little_voice_is_none_and_no_input_panics() {
        assert_eq!(final_pitch_level([0i16; 8000].as_slice(), 8000), None);
        assert_eq!(final_pitch_level([0i16; 10].as_slice(), 10), None);
        assert_eq!(final_pitch_level([0i16; 0].as_slice(), 0), None);
        // 30 ms of voice: under one frame of it.
        let short = voice(0.03, |_| 150.0);
        assert_eq!(final_pitch_level(short.as_slice(), short.len()), None);
        // Full-scale noise: loud but unvoiced, or voiced at random; never a panic.
        let mut x = 1u32;
        let noise: Vec<i16> = (0..16000)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 16) as i16
            })
            .collect();
        let _ = final_pitch_level(noise.as_slice(), noise.len());
        let extremes = vec![i16::MIN; 16000];
        assert_eq!(final_pitch_level(extremes.as_slice(), extremes.len()), None);
    }

    #[test]
    fn a_deque_and_a_slice_give_the_same_level() {
        let v = voice(2.0, |t| 200.0 - 30.0 * t);
        let mut d: std::collections::VecDeque<i16> = std::collections::VecDeque::new();
        // Wrapped storage: front pushes.
        for &s in v.iter().rev() {
            d.push_front(s);
        }
        assert_eq!(
            final_pitch_level(&d, d.len()),
            final_pitch_level(v.as_slice(), v.len())
        );
    }
}
