#!/usr/bin/env python3
"""Independent reference for ontime's Smart Turn v3.2: Whisper log-mel features written with numpy
from the recipe of transformers' WhisperFeatureExtractor (chunk_length=8, numpy path), then the
model through Python onnxruntime, as pipecat's LocalSmartTurnAnalyzerV3 runs it.

    python3 scripts/reference/smart_turn_ref.py MODEL.onnx FILE.wav [--features OUT.f32]
      -> {"probability": F, "complete": bool, "run_ms": F, "sample_rate": N}

The WAV is 16 kHz mono 16-bit, or 8 kHz: then it is upsampled with the filter ontime documents
(2x half-band: even outputs = inputs, odd outputs = sum_i h[i] x[k+32-i], h = sinc(i-31.5) *
np.kaiser(64, 8), unit DC gain, zeros beyond the edges), written here with numpy.
--features writes the [80, 800] features as little-endian f32, mel-major.
"""
import json
import sys
import time
import wave

import numpy as np
import onnxruntime as ort

SR = 16000
N_SAMPLES = 8 * SR
N_FFT, HOP, N_MELS = 400, 160, 80


def hz_to_mel(f):
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-300) / min_log_hz) / logstep, f / f_sp)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), m * f_sp)


def mel_filters():
    n_bins = N_FFT // 2 + 1
    fft_freqs = np.linspace(0, SR // 2, n_bins)
    mels = np.linspace(hz_to_mel(0.0), hz_to_mel(8000.0), N_MELS + 2)
    ff = mel_to_hz(mels)
    diff = np.diff(ff)
    slopes = ff[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    fb = np.maximum(0.0, np.minimum(down, up))  # [n_bins, n_mels]
    fb *= 2.0 / (ff[2:N_MELS + 2] - ff[:N_MELS])
    return fb


def upsample_2x(x):
    i = np.arange(64)
    h = np.sinc(i - 31.5) * np.kaiser(64, 8.0)
    h /= h.sum()
    xp = np.pad(x.astype(np.float64), (31, 32))
    # odd output k: sum_i h[i] * x[k + 32 - i]; x[j] = xp[j + 31]
    mid = np.zeros(len(x))
    for ii in range(64):
        mid += h[ii] * xp[63 - ii:63 - ii + len(x)]
    y = np.empty(2 * len(x), dtype=np.float32)
    y[0::2] = x
    y[1::2] = mid
    return y


def features(audio16k):
    x = audio16k.astype(np.float32)
    if len(x) > N_SAMPLES:
        x = x[-N_SAMPLES:]
    else:
        x = np.pad(x, (N_SAMPLES - len(x), 0))
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    x = np.pad(x.astype(np.float64), (N_FFT // 2, N_FFT // 2), mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
    n_frames = 1 + (len(x) - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(
        x, shape=(n_frames, N_FFT), strides=(x.strides[0] * HOP, x.strides[0]))
    spec = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2  # [frames, bins]
    mel = spec @ mel_filters()  # [frames, mels]
    log = np.log10(np.maximum(1e-10, mel)).T  # [mels, frames]
    log = log[:, :-1]
    log = np.maximum(log, log.max() - 8.0)
    return ((log + 4.0) / 4.0).astype(np.float32)


def main():
    args = sys.argv[1:]
    out_features = None
    if "--features" in args:
        i = args.index("--features")
        out_features = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    model, wav = args
    with wave.open(wav, "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2 or w.getframerate() not in (8000, SR):
            sys.exit(f"{wav}: need 8 or 16 kHz mono 16-bit PCM")
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    audio = pcm.astype(np.float32) / 32768.0
    if rate == 8000:
        audio = upsample_2x(audio)
    feats = features(audio)
    p = float(sess.run(None, {"input_features": feats[None, :, :]})[0].reshape(-1)[0])
    run_ms = (time.perf_counter() - t0) * 1e3
    if out_features:
        feats.astype("<f4").tofile(out_features)
    json.dump({"probability": p, "complete": p > 0.5, "run_ms": run_ms, "sample_rate": rate}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
