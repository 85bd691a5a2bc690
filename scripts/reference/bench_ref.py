#!/usr/bin/env python3
"""The Python onnxruntime side of ontime-inference's benchmark (crates/inference/examples/
inference_bench.rs runs it in the same run): Silero VAD per chunk unbatched and batched at
B = 1, 10, 50, 100 (8 kHz, 256 + 32 samples); Smart Turn v3.2 features (numpy, as
smart_turn_ref.py) and model; RSS before and after loading both sessions. One thread each.

    python3 scripts/reference/bench_ref.py MODELS_DIR FIXTURE_8K.wav   -> JSON on stdout
"""
import json
import os
import sys
import time
import wave

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smart_turn_ref  # noqa: E402


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def session(path):
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    o.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(path, sess_options=o, providers=["CPUExecutionProvider"])


def main():
    models, wav = sys.argv[1], sys.argv[2]
    out = {"rss_start_mib": rss_mib()}
    vad = session(os.path.join(models, "silero_vad.onnx"))
    turn = session(os.path.join(models, "smart-turn-v3.2-cpu.onnx"))
    out["rss_loaded_mib"] = rss_mib()
    with wave.open(wav) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    n_chunks = len(pcm) // 256
    chunks = pcm[: n_chunks * 256].reshape(n_chunks, 256)
    sr = np.array(8000, dtype=np.int64)

    def chunk(s, c):
        return chunks[(s * 7 + c) % n_chunks]

    state = np.zeros((2, 1, 128), np.float32)
    ctx = np.zeros((1, 32), np.float32)
    for c in range(200):
        x = np.concatenate([ctx, chunk(0, c)[None]], axis=1)
        _, state = vad.run(None, {"input": x, "state": state, "sr": sr})
        ctx = x[:, -32:]
    n = 3000
    t, cpu = time.perf_counter(), time.thread_time()
    for c in range(n):
        x = np.concatenate([ctx, chunk(0, c)[None]], axis=1)
        _, state = vad.run(None, {"input": x, "state": state, "sr": sr})
        ctx = x[:, -32:]
    out["vad_unbatched_us"] = (time.perf_counter() - t) * 1e6 / n
    out["vad_unbatched_cpu_us"] = (time.thread_time() - cpu) * 1e6 / n
    for b in (1, 10, 50, 100):
        state = np.zeros((2, b, 128), np.float32)
        ctx = np.zeros((b, 32), np.float32)
        runs = max(6000 // b, 30)

        def step(k):
            nonlocal state, ctx
            x = np.concatenate([ctx, np.stack([chunk(i, k) for i in range(b)])], axis=1)
            _, state = vad.run(None, {"input": x, "state": state, "sr": sr})
            ctx = x[:, -32:]

        for k in range(10):
            step(k)
        t, cpu = time.perf_counter(), time.thread_time()
        for k in range(runs):
            step(k)
        out[f"vad_b{b}_per_chunk_us"] = (time.perf_counter() - t) * 1e6 / (runs * b)
        out[f"vad_b{b}_per_chunk_cpu_us"] = (time.thread_time() - cpu) * 1e6 / (runs * b)
    # Smart Turn on the fixture at 16 kHz (upsampled with the reference's numpy filter).
    audio = smart_turn_ref.upsample_2x(pcm)
    feats_ms, model_ms, feats_cpu, model_cpu = [], [], [], []
    for _ in range(3):
        turn.run(None, {"input_features": smart_turn_ref.features(audio)[None]})
    for _ in range(15):
        t, cpu = time.perf_counter(), time.thread_time()
        f = smart_turn_ref.features(audio)
        feats_ms.append((time.perf_counter() - t) * 1e3)
        feats_cpu.append((time.thread_time() - cpu) * 1e3)
        t, cpu = time.perf_counter(), time.thread_time()
        turn.run(None, {"input_features": f[None]})
        model_ms.append((time.perf_counter() - t) * 1e3)
        model_cpu.append((time.thread_time() - cpu) * 1e3)
    out["turn_features_ms"] = float(np.median(feats_ms))
    out["turn_model_ms"] = float(np.median(model_ms))
    out["turn_features_cpu_ms"] = float(np.median(feats_cpu))
    out["turn_model_cpu_ms"] = float(np.median(model_cpu))
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
