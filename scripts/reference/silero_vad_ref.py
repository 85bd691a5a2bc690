#!/usr/bin/env python3
"""Independent reference for ontime's Silero VAD: per-chunk probabilities of a WAV through Python
onnxruntime, the way silero-vad's own OnnxWrapper feeds the model at 8 kHz (256-sample chunks, 32
samples of context prepended, state [2, 1, 128] carried, sr = 8000), starting from zero state.

    python3 scripts/reference/silero_vad_ref.py MODEL.onnx FILE.wav   -> JSON on stdout
      {"sample_rate": 8000, "chunk_samples": 256, "probabilities": [...]}

Needs: onnxruntime, numpy (scripts/setup.sh installs them). Only the standard library reads the WAV.
"""
import json
import sys
import wave

import numpy as np
import onnxruntime as ort


def read_wav_8k(path):
    with wave.open(path, "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2:
            sys.exit(f"{path}: need mono 16-bit PCM")
        if w.getframerate() != 8000:
            sys.exit(f"{path}: reference runs at 8000 Hz, file is {w.getframerate()} Hz")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model, wav = sys.argv[1], sys.argv[2]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
    audio = read_wav_8k(wav)
    chunk, ctx = 256, 32
    state = np.zeros((2, 1, 128), dtype=np.float32)
    context = np.zeros((1, ctx), dtype=np.float32)
    sr = np.array(8000, dtype=np.int64)
    probs = []
    for start in range(0, len(audio) - chunk + 1, chunk):
        x = audio[start:start + chunk].reshape(1, chunk)
        inp = np.concatenate([context, x], axis=1)
        out, state = sess.run(None, {"input": inp, "state": state, "sr": sr})
        context = inp[:, -ctx:]
        probs.append(float(out[0, 0]))
    json.dump({"sample_rate": 8000, "chunk_samples": chunk, "probabilities": probs}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
