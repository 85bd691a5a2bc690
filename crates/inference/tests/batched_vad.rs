//! Silero VAD batched across streams gives the same probabilities and states as each stream alone.

mod common;

use common::*;
use ontime_inference::speech::VAD_CHUNK_SAMPLES;
use ontime_inference::vad::pcm_to_f32;
use ontime_inference::{runtime, SileroVad, VadStream};

#[test]
fn batched_equals_unbatched() {
    let Some(paths) = model_paths() else { return };
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let mut vad = SileroVad::load(&env, &paths.silero_vad).expect("model");
    let (_, a) = read_wav(&fixture("book_table_8k.wav"));
    let (_, b) = read_wav(&fixture("book_table_trailing_8k.wav"));

    // 100 streams: the two recordings at different offsets and gains, so rows differ.
    const STREAMS: usize = 100;
    const CHUNKS: usize = 60;
    let audio: Vec<Vec<f32>> = (0..STREAMS)
        .map(|i| {
            let src = if i % 2 == 0 { &a } else { &b };
            let offset = (i * 397) % (src.len() - CHUNKS * VAD_CHUNK_SAMPLES);
            let gain = 0.3 + (i % 7) as f32 * 0.1;
            let mut f = vec![0.0; CHUNKS * VAD_CHUNK_SAMPLES];
            pcm_to_f32(&src[offset..offset + f.len()], &mut f);
            f.iter_mut().for_each(|x| *x *= gain);
            f
        })
        .collect();

    // Unbatched: each stream alone.
    let mut alone = vec![vec![0.0f32; CHUNKS]; STREAMS];
    for (s, row) in alone.iter_mut().enumerate() {
        let mut st = VadStream::default();
        for (c, p) in row.iter_mut().enumerate() {
            let chunk = &audio[s][c * VAD_CHUNK_SAMPLES..(c + 1) * VAD_CHUNK_SAMPLES];
            *p = vad.run_one(&mut st, chunk).expect("run");
        }
    }

    // Batched: streams join at different chunks (as calls arrive), so batch sizes vary 1..=100
    // and a stream's row index changes from batch to batch.
    let join = |s: usize| s % 10;
    let mut states = vec![VadStream::default(); STREAMS];
    let mut next = vec![0usize; STREAMS];
    let mut batched = vec![vec![f32::NAN; CHUNKS]; STREAMS];
    let mut sizes = Vec::new();
    for step in 0..CHUNKS + 10 {
        // Reverse order every other step to shuffle row positions.
        let mut members: Vec<usize> = (0..STREAMS)
            .filter(|&s| step >= join(s) && next[s] < CHUNKS)
            .collect();
        if step % 2 == 1 {
            members.reverse();
        }
        if members.is_empty() {
            continue;
        }
        sizes.push(members.len());
        vad.begin_batch(members.len());
        for (row, &s) in members.iter().enumerate() {
            let c = next[s];
            let chunk = &audio[s][c * VAD_CHUNK_SAMPLES..(c + 1) * VAD_CHUNK_SAMPLES];
            vad.set_row(row, &states[s], chunk).expect("row");
        }
        vad.run().expect("batch run");
        for (row, &s) in members.iter().enumerate() {
            batched[s][next[s]] = vad.finish_row(row, &mut states[s]).expect("finish");
            next[s] += 1;
        }
    }
    assert!(sizes.contains(&STREAMS) && sizes.contains(&10));

    let mut worst = 0.0f32;
    for s in 0..STREAMS {
        for c in 0..CHUNKS {
            let d = (alone[s][c] - batched[s][c]).abs();
            worst = worst.max(d);
            assert!(
                d <= 1e-5,
                "stream {s} chunk {c}: alone {} batched {}",
                alone[s][c],
                batched[s][c]
            );
        }
    }
    assert!(
        alone.iter().flatten().any(|&p| p > 0.7),
        "no speech in the test audio"
    );
    eprintln!("batched vs unbatched over {STREAMS}×{CHUNKS} chunks: worst |Δ| = {worst:.2e}");
}
