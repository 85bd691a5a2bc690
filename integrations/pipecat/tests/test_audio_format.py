"""OntimeFrameSerializer's audio formats: 16-bit PCM at 16 kHz (``audio_format="l16_16k"``, the
gateway's ``--ws-content-type "audio/l16;rate=16000"``) and Twilio's µ-law, unchanged, by
default. No network."""

import asyncio
import base64
import copy
import json
import struct

import numpy as np
import pytest
from pipecat.audio.utils import create_stream_resampler, ulaw_to_pcm
from pipecat.frames.frames import (
    InputAudioRawFrame,
    InputDTMFFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    ProposedUserStoppedSpeakingFrame,
)
from pipecat.serializers.twilio import TwilioFrameSerializer

from ontime_pipecat import OntimeAudioFormat, OntimeFrameSerializer, serializer_from_start

SID = "MZ" + "0" * 32
CALL_SID = "CA" + "1" * 32
L16 = {"encoding": "audio/l16", "sampleRate": 16000, "channels": 1}
MULAW = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}


def start(media_format: dict | None) -> dict:
    """ontime's ``start`` message, as the gateway sends it."""
    body = {
        "streamSid": SID,
        "accountSid": "AC" + "0" * 32,
        "callSid": CALL_SID,
        "tracks": ["inbound"],
        "customParameters": {"From": "sip:alice@trunk", "To": "sip:bot@gw", "CallId": "x"},
    }
    if media_format is not None:
        body["mediaFormat"] = media_format
    return {"event": "start", "sequenceNumber": "1", "streamSid": SID, "start": body}


def run(coro):
    return asyncio.run(coro)


class _Setup:
    """The part of FrameProcessorSetup the serializer reads (pipecat's default input rate)."""

    audio_in_sample_rate = 16000


async def _serializer(**params) -> OntimeFrameSerializer:
    s = OntimeFrameSerializer(SID, CALL_SID, params=OntimeFrameSerializer.InputParams(**params))
    await s.setup(_Setup())  # type: ignore[arg-type]
    return s


def msg(event: str, **extra) -> str:
    return json.dumps({"event": event, "sequenceNumber": "5", "streamSid": SID, **extra})


def media(payload: bytes, chunk: int = 1) -> str:
    """A ``media`` message from the gateway."""
    return json.dumps({
        "event": "media",
        "sequenceNumber": str(chunk + 1),
        "streamSid": SID,
        "media": {
            "track": "inbound",
            "chunk": str(chunk),
            "timestamp": str((chunk - 1) * 20),
            "payload": base64.b64encode(payload).decode(),
        },
    })


def le16(samples) -> bytes:
    """16-bit little-endian PCM, as on the wire."""
    return struct.pack(f"<{len(samples)}h", *samples)


def payload_samples(message: str) -> tuple[int, ...]:
    m = json.loads(message)
    assert m["event"] == "media" and m["streamSid"] == SID
    raw = base64.b64decode(m["media"]["payload"])
    assert len(raw) % 2 == 0
    return struct.unpack(f"<{len(raw) // 2}h", raw)


def sine(hz: float, rate: int, secs: float, amplitude: int = 8000) -> np.ndarray:
    t = np.arange(int(rate * secs)) / rate
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64)))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))])


# A 20 ms frame from the gateway: 320 samples covering the whole 16-bit range, both signs.
FRAME = [(i * 211 - 32768) % 65536 - 32768 for i in range(320)]
FRAME[0], FRAME[1], FRAME[2] = -32768, 32767, -1


def test_format_names_and_params():
    assert OntimeFrameSerializer.InputParams().audio_format is OntimeAudioFormat.MULAW_8K
    l16 = OntimeAudioFormat.L16_16K
    for value in ("l16_16k", l16, "audio/l16;rate=16000", "Audio/L16; rate=16000"):
        assert OntimeFrameSerializer.InputParams(audio_format=value).audio_format is l16
    assert l16.content_type == "audio/l16;rate=16000"
    assert (l16.encoding, l16.sample_rate) == ("audio/l16", 16000)
    assert OntimeAudioFormat.from_media_format(L16) is OntimeAudioFormat.L16_16K
    assert OntimeAudioFormat.from_media_format(MULAW) is OntimeAudioFormat.MULAW_8K
    assert OntimeAudioFormat.from_media_format({**L16, "sampleRate": 8000}) is None
    assert OntimeAudioFormat.from_content_type("audio/opus") is None
    with pytest.raises(ValueError):
        OntimeFrameSerializer.InputParams(audio_format="audio/opus")


def test_l16_media_is_one_16k_input_frame_with_the_same_samples():
    async def go():
        s = await _serializer(audio_format="l16_16k")
        return s, [await s.deserialize(media(le16(FRAME), chunk=n)) for n in range(1, 51)]

    s, frames = run(go())
    assert s.audio_format is OntimeAudioFormat.L16_16K
    # One frame per message, none held back: no resampling at pipecat's default 16 kHz input.
    assert len(frames) == 50
    for frame in frames:
        assert type(frame) is InputAudioRawFrame
        assert (frame.sample_rate, frame.num_channels) == (16000, 1)
        assert len(frame.audio) == 640 and frame.num_frames == 320
        assert list(np.frombuffer(frame.audio, dtype="<i2")) == FRAME


def test_l16_media_split_mid_sample_loses_nothing():
    data = le16(FRAME)

    async def go():
        s = await _serializer(audio_format="l16_16k")
        return [await s.deserialize(media(part)) for part in (data[:3], data[3:101], data[101:])]

    frames = run(go())
    assert [len(f.audio) for f in frames] == [2, 98, 540]  # an odd byte waits for the next
    assert list(np.frombuffer(b"".join(f.audio for f in frames), dtype="<i2")) == FRAME


def test_l16_media_resampled_to_a_24k_pipeline():
    pcm = sine(440, 16000, 2.0)

    async def go():
        s = await _serializer(
            audio_format="l16_16k", sample_rate=24000, resampler_clear_after_secs=None
        )
        return [
            await s.deserialize(media(le16(pcm[i : i + 320]), chunk=1 + i // 320))
            for i in range(0, len(pcm), 320)
        ]

    frames = [f for f in run(go()) if f is not None]
    assert frames and all(f.sample_rate == 24000 and f.num_channels == 1 for f in frames)
    out = np.frombuffer(b"".join(f.audio for f in frames), dtype=np.int16)
    # 2 s at 24 kHz, less what pipecat's stream resampler still holds (under 100 ms).
    assert 48000 - 2400 <= len(out) <= 48000
    assert peak_hz(out[2400:], 24000) == pytest.approx(440, abs=2)


def test_l16_output_at_16k_is_sent_sample_for_sample():
    async def go():
        s = await _serializer(audio_format="l16_16k")
        return [
            await s.serialize(
                OutputAudioRawFrame(audio=le16(samples), sample_rate=16000, num_channels=1)
            )
            for samples in (FRAME, FRAME + [7])  # any length, e.g. 321 samples
        ]

    one, two = run(go())
    assert payload_samples(one) == tuple(FRAME)
    assert payload_samples(two) == tuple(FRAME + [7])
    assert set(json.loads(one)) == {"event", "streamSid", "media"}
    assert set(json.loads(one)["media"]) == {"payload"}


def test_l16_output_at_24k_is_resampled_to_16k():
    pcm = sine(440, 24000, 2.0)

    async def go():
        s = await _serializer(audio_format="l16_16k", resampler_clear_after_secs=None)
        return [
            await s.serialize(
                OutputAudioRawFrame(audio=pcm[i : i + 480].tobytes(), sample_rate=24000,
                                    num_channels=1)
            )
            for i in range(0, len(pcm), 480)
        ]

    outs = [o for o in run(go()) if o is not None]
    out = np.array([x for o in outs for x in payload_samples(o)], dtype=np.int16)
    # 2 s at 16 kHz (not 8 kHz µ-law: 3 samples in become 2), less what the resampler holds.
    assert 32000 - 1600 <= len(out) <= 32000
    assert peak_hz(out[1600:], 16000) == pytest.approx(440, abs=2)


def test_l16_leaves_the_rest_of_the_protocol_alone():
    async def go():
        s = await _serializer(audio_format="l16_16k")
        return (
            await s.deserialize(msg("dtmf", dtmf={"track": "inbound_track", "digit": "5"})),
            await s.deserialize(msg("ontime.turn_ended", turn={"probability": 0.9})),
            await s.deserialize(msg("mark", mark={"name": "m"})),
            await s.deserialize(msg("stop", stop={})),
            await s.deserialize("[1,2]"),
            await s.deserialize(media(b"")),
            await s.serialize(InterruptionFrame()),
        )

    dtmf, turn_ended, mark, stop, junk, empty, clear = run(go())
    assert isinstance(dtmf, InputDTMFFrame) and dtmf.button.value == "5"
    assert isinstance(turn_ended, ProposedUserStoppedSpeakingFrame)
    assert (mark, stop, junk, empty) == (None, None, None, None)
    assert json.loads(clear) == {"event": "clear", "streamSid": SID}


def _twilio_and_ontime_by_default():
    # (No resampler reset on a slow machine's pauses: both see one unbroken stream.)
    twilio = TwilioFrameSerializer(
        SID,
        CALL_SID,
        params=TwilioFrameSerializer.InputParams(
            auto_hang_up=False, resampler_clear_after_secs=None
        ),
    )
    ontime = OntimeFrameSerializer(
        SID, CALL_SID, params=OntimeFrameSerializer.InputParams(resampler_clear_after_secs=None)
    )
    assert ontime.audio_format is OntimeAudioFormat.MULAW_8K
    return twilio, ontime


async def _both_ways(s, *, in_rate: int, ulaw: bytes, pcm: np.ndarray, out_rate: int):
    class Setup:
        audio_in_sample_rate = in_rate

    await s.setup(Setup())  # type: ignore[arg-type]
    ins = [await s.deserialize(media(ulaw, chunk=n)) for n in range(1, 51)]
    step = out_rate // 50
    outs = [
        await s.serialize(
            OutputAudioRawFrame(audio=pcm[i : i + step].tobytes(), sample_rate=out_rate,
                                num_channels=1)
        )
        for i in range(0, len(pcm), step)
    ]
    return (
        [(f.audio, f.sample_rate, f.num_channels) if f else None for f in ins],
        [base64.b64decode(json.loads(o)["media"]["payload"]) if o else None for o in outs],
    )


ULAW_20MS = bytes(range(256))[:160]


def test_mulaw_by_default_byte_for_byte_as_twilio():
    """The default is TwilioFrameSerializer's µ-law at 8 kHz; without resampling (an 8 kHz
    pipeline) the two give the very same frames and payloads."""
    pcm = sine(300, 8000, 1.0)
    twilio, ontime = _twilio_and_ontime_by_default()
    kw = dict(in_rate=8000, ulaw=ULAW_20MS, pcm=pcm, out_rate=8000)
    theirs, ours = run(_both_ways(twilio, **kw)), run(_both_ways(ontime, **kw))
    assert ours == theirs
    ins, outs = ours
    assert [len(f[0]) for f in ins] == [320] * 50  # 160 µ-law bytes, 160 16-bit samples
    assert [len(o) for o in outs] == [160] * 50  # one µ-law byte a sample at 8 kHz


def test_mulaw_by_default_resampled_as_twilio():
    """At pipecat's 16 kHz in and 24 kHz out, the same messages and lengths as
    TwilioFrameSerializer. (pipecat's soxr stream resampler differs from run to run by a
    sample value or two, so the samples are compared within that.)"""
    pcm = sine(300, 24000, 1.0)
    twilio, ontime = _twilio_and_ontime_by_default()
    kw = dict(in_rate=16000, ulaw=ULAW_20MS, pcm=pcm, out_rate=24000)
    their_ins, their_outs = run(_both_ways(twilio, **kw))
    our_ins, our_outs = run(_both_ways(ontime, **kw))

    def shape(ins):
        return [f and (len(f[0]), f[1], f[2]) for f in ins]

    assert shape(our_ins) == shape(their_ins)
    assert [o and len(o) for o in our_outs] == [o and len(o) for o in their_outs]
    ours = np.frombuffer(b"".join(f[0] for f in our_ins if f), dtype=np.int16).astype(int)
    theirs = np.frombuffer(b"".join(f[0] for f in their_ins if f), dtype=np.int16).astype(int)
    assert len(ours) > 0 and np.abs(ours - theirs).max() <= 8
    ours, theirs = (
        np.frombuffer(run(_ulaw_decoded(b"".join(o for o in outs if o))), dtype=np.int16)
        .astype(int)
        for outs in (our_outs, their_outs)
    )
    # µ-law at 8 kHz: 1 s is at most 8000 bytes; at most one µ-law step apart (256 below 8192).
    assert 8000 - 800 <= len(ours) <= 8000
    assert np.abs(ours - theirs).max() <= 256


async def _ulaw_decoded(ulaw: bytes) -> bytes:
    return await ulaw_to_pcm(ulaw, 8000, 8000, create_stream_resampler())


def test_serializer_from_start_follows_media_format():
    assert serializer_from_start(start(L16)).audio_format is OntimeAudioFormat.L16_16K
    assert serializer_from_start(start(MULAW)).audio_format is OntimeAudioFormat.MULAW_8K
    assert serializer_from_start(start(None)).audio_format is OntimeAudioFormat.MULAW_8K
    # the start message is what the gateway sends: it wins over params, which it leaves alone
    params = OntimeFrameSerializer.InputParams(audio_format="mulaw_8k", speech_stopped_frames=False)
    s = serializer_from_start(start(L16), params=params)
    assert s.audio_format is OntimeAudioFormat.L16_16K
    assert s._ontime_params.speech_stopped_frames is False
    assert params.audio_format is OntimeAudioFormat.MULAW_8K
    with pytest.raises(ValueError, match="unknown mediaFormat"):
        serializer_from_start(start({"encoding": "audio/opus", "sampleRate": 48000, "channels": 1}))
    with pytest.raises(ValueError, match="OntimeFrameSerializer"):
        serializer_from_start(
            start(L16),
            params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
            serializer_class=TwilioFrameSerializer,
        )
    twilio = serializer_from_start(
        start(MULAW),
        params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
        serializer_class=TwilioFrameSerializer,
    )
    assert type(twilio) is TwilioFrameSerializer


def test_a_start_message_seen_by_deserialize_sets_the_format():
    async def go():
        s = await _serializer()  # µ-law configured
        seen_start = await s.deserialize(json.dumps(start(L16)))
        frame = await s.deserialize(media(le16(FRAME)))
        t = await _serializer()
        unknown = await t.deserialize(json.dumps(start({**L16, "sampleRate": 44100})))
        return s, seen_start, frame, t, unknown

    s, seen_start, frame, t, unknown = run(go())
    assert seen_start is None and s.audio_format is OntimeAudioFormat.L16_16K
    assert isinstance(frame, InputAudioRawFrame) and len(frame.audio) == 640
    assert list(np.frombuffer(frame.audio, dtype="<i2")) == FRAME
    assert unknown is None and t.audio_format is OntimeAudioFormat.MULAW_8K


def test_start_dict_is_not_modified():
    message = start(L16)
    before = copy.deepcopy(message)
    serializer_from_start(message)
    assert message == before
