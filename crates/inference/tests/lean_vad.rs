//! Silero VAD's lean 8 kHz graph (`ontime_inference::vad_graph`) against the published graph:
//! bit-identical probabilities and states on recordings, batched and alone; the load-time
//! check that guards it catches a changed weight; 16 kHz recordings still run.

mod common;

use common::*;
use ontime_inference::resample::upsample_2x;
use ontime_inference::speech::VAD_CHUNK_SAMPLES;
use ontime_inference::vad::{agreement_check, pcm_to_f32};
use ontime_inference::{runtime, vad_graph, SileroVad, VadGraph, VadStream};

fn recordings() -> Vec<Vec<i16>> {
    ["book_table_8k.wav", "book_table_trailing_8k.wav"]
        .iter()
        .map(|name| {
            let (rate, pcm) = read_wav(&fixture(name));
            assert_eq!(rate, 8000, "{name}");
            pcm
        })
        .collect()
}

/// The model loaded twice: on the lean graph (the default) and on the published one.
fn both_graphs() -> Option<(SileroVad, SileroVad)> {
    let paths = model_paths()?;
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let lean = SileroVad::load(&env, &paths.silero_vad).expect("lean");
    let published =
        SileroVad::load_graph(&env, &paths.silero_vad, VadGraph::Published).expect("published");
    // The pinned model and runtime pass the load-time check: the lean graph is what runs.
    assert_eq!(lean.graph(), VadGraph::Lean);
    assert_eq!(published.graph(), VadGraph::Published);
    Some((lean, published))
}

#[test]
fn the_lean_graph_is_the_published_one_bit_for_bit_on_recordings() {
    let Some((mut lean, mut published)) = both_graphs() else {
        return;
    };

    // Alone: every chunk of each recording, from a fresh stream.
    let mut compared = 0usize;
    let mut expected = 0usize;
    for pcm in recordings() {
        let a = lean.probabilities(&pcm, 8000).expect("lean run");
        let b = published.probabilities(&pcm, 8000).expect("published run");
        assert_eq!(a.len(), pcm.len() / VAD_CHUNK_SAMPLES);
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "chunk {i}: {x} against {y}");
        }
        compared += a.len();
        expected += pcm.len() / VAD_CHUNK_SAMPLES;
    }
    assert_eq!(compared, expected);

    // Batched: 24 streams of both recordings at different offsets and gains, batches of
    // every size from 1 to 24 as streams join, states compared too.
    const STREAMS: usize = 24;
    const CHUNKS: usize = 50;
    let recs = recordings();
    let audio: Vec<Vec<f32>> = (0..STREAMS)
        .map(|i| {
            let src = &recs[i % 2];
            let offset = (i * 811) % (src.len() - CHUNKS * VAD_CHUNK_SAMPLES);
            let mut f = vec![0.0; CHUNKS * VAD_CHUNK_SAMPLES];
            pcm_to_f32(&src[offset..offset + f.len()], &mut f);
            let gain = 0.2 + (i % 5) as f32 * 0.2;
            f.iter_mut().for_each(|x| *x *= gain);
            f
        })
        .collect();
    let mut lean_streams = vec![VadStream::default(); STREAMS];
    let mut published_streams = vec![VadStream::default(); STREAMS];
    let mut rows_compared = 0usize;
    for step in 0..CHUNKS + STREAMS {
        let members: Vec<usize> = (0..STREAMS)
            .filter(|&s| step >= s && step - s < CHUNKS)
            .collect();
        let chunks: Vec<&[f32]> = members
            .iter()
            .map(|&s| {
                let c = step - s;
                &audio[s][c * VAD_CHUNK_SAMPLES..(c + 1) * VAD_CHUNK_SAMPLES]
            })
            .collect();
        let mut ls: Vec<&mut VadStream> = lean_streams
            .iter_mut()
            .enumerate()
            .filter(|(s, _)| members.contains(s))
            .map(|(_, st)| st)
            .collect();
        let mut ps: Vec<&mut VadStream> = published_streams
            .iter_mut()
            .enumerate()
            .filter(|(s, _)| members.contains(s))
            .map(|(_, st)| st)
            .collect();
        let a = lean.run_batch(&mut ls, &chunks).expect("lean batch");
        let b = published
            .run_batch(&mut ps, &chunks)
            .expect("published batch");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.to_bits(), y.to_bits(), "step {step}: {x} against {y}");
        }
        rows_compared += a.len();
    }
    assert_eq!(rows_compared, STREAMS * CHUNKS);
    assert_eq!(lean_streams, published_streams);
}

#[test]
fn the_load_time_check_catches_a_changed_weight_and_falls_back() {
    let Some(paths) = model_paths() else { return };
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let model = std::fs::read(&paths.silero_vad).expect("model bytes");
    let mut lean_bytes = vad_graph::lean_silero_8k(&model).expect("lean graph");
    // The decoder's bias, -0.5900867, stored once: nudge it by one unit in the last place.
    let bias = (-0.590_086_7f32).to_le_bytes();
    let at: Vec<usize> = lean_bytes
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == bias)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the decoder bias appears once");
    let nudged = f32::from_bits(u32::from_le_bytes(bias) + 1).to_le_bytes();
    lean_bytes[at[0]..at[0] + 4].copy_from_slice(&nudged);
    let dir = std::env::temp_dir().join(format!("ontime-lean-vad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let tampered = dir.join("silero_vad_nudged.onnx");
    std::fs::write(&tampered, &lean_bytes).expect("write");

    let mut published =
        SileroVad::load_graph(&env, &paths.silero_vad, VadGraph::Published).expect("published");
    let mut nudged =
        SileroVad::load_graph(&env, &tampered, VadGraph::Published).expect("nudged model");
    let difference = agreement_check(&mut published, &mut nudged).expect("check runs");
    // A lean graph from a model without the published `If` is refused, and the model runs as
    // it is.
    let fallback = SileroVad::load_graph(&env, &tampered, VadGraph::Lean).expect("fallback");
    std::fs::remove_dir_all(&dir).expect("clean up");
    let difference = difference.expect("a changed weight is seen");
    assert!(difference.starts_with("batch of 1, chunk "), "{difference}");
    assert_eq!(fallback.graph(), VadGraph::Published);

    // The same check on two published sessions finds nothing.
    let mut again =
        SileroVad::load_graph(&env, &paths.silero_vad, VadGraph::Published).expect("again");
    assert_eq!(
        agreement_check(&mut published, &mut again).expect("check"),
        None
    );
}

#[test]
fn sixteen_khz_recordings_run_on_the_published_graph_kept_beside_the_lean_one() {
    let Some((mut lean, mut published)) = both_graphs() else {
        return;
    };
    let pcm = &recordings()[0];
    let mut narrow = vec![0.0f32; pcm.len()];
    pcm_to_f32(pcm, &mut narrow);
    let mut up = Vec::new();
    upsample_2x(&narrow, &mut up);
    let wide: Vec<i16> = up
        .iter()
        .map(|x| (x * 32768.0).round().clamp(-32768.0, 32767.0) as i16)
        .collect();
    let a = lean
        .probabilities(&wide, 16_000)
        .expect("16 kHz on the lean load");
    let b = published
        .probabilities(&wide, 16_000)
        .expect("16 kHz published");
    assert_eq!(a.len(), wide.len() / 512);
    assert_eq!(
        a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        b.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn a_truncated_or_damaged_model_is_an_error_not_a_panic() {
    let Some(paths) = model_paths() else { return };
    let model = std::fs::read(&paths.silero_vad).expect("model bytes");
    let mut refused = 0;
    for k in 1..200 {
        let cut = model.len() * k / 200;
        if vad_graph::lean_silero_8k(&model[..cut]).is_err() {
            refused += 1;
        }
        // A byte changed inside the graph (flipped to a value no field key has).
        let mut damaged = model.clone();
        damaged[cut] = 0xff;
        let _ = vad_graph::lean_silero_8k(&damaged);
    }
    // Every cut falls inside the graph field (the bulk of the file), so every one is refused.
    assert_eq!(refused, 199);
}
